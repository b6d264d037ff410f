//! xwirectl as a Unix tool: commands that only print end quietly when their reader has
//! gone (`xwirectl ... | head`), as coreutils do (killed by SIGPIPE, status 141 in a
//! shell, or exiting 0; never a panic's status 101 and backtrace), and it prints its
//! shells' completion scripts.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// SIGPIPE's number on Linux.
const SIGPIPE: i32 = 13;

#[test]
fn a_command_that_prints_into_a_closed_pipe_ends_quietly() {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/containers.clab.yml"
    );
    // The reading end is closed before the command starts, so its first write fails
    // (a reader that took one line and left, with no race over who is first).
    let (reader, writer) = nix::unistd::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_xwirectl"))
        .args(["lab", "import", file])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.signal() == Some(SIGPIPE) || out.status.success(),
        "{:?}: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn completion_scripts_for_each_shell_complete_the_lab_commands() {
    for (shell, marker) in [
        ("bash", "complete -F _xwirectl"),
        ("zsh", "#compdef xwirectl"),
        ("fish", "complete -c xwirectl"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_xwirectl"))
            .args(["completion", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {:?}", out.status);
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for command in ["up", "down", "status", "bench", "capture"] {
            assert!(script.contains(command), "{shell}: no {command}");
        }
    }
    let out = Command::new(env!("CARGO_BIN_EXE_xwirectl"))
        .args(["completion", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// pcapng is binary: `lab capture -w -` refuses a terminal (here a pseudo-terminal that
/// `script` gives it) before it looks for the lab, and says what to do instead.
#[test]
fn a_capture_refuses_to_write_to_a_terminal() {
    let command = format!(
        "{} lab capture 1 --lab no-such-lab -w -",
        env!("CARGO_BIN_EXE_xwirectl")
    );
    let out = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("standard output is a terminal"), "{said}");
    assert!(
        !said.contains("no-such-lab"),
        "the lab was looked for first: {said}"
    );
}
