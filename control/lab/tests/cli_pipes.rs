//! Commands that only print end quietly when their reader has gone (`xwirectl ... | head`),
//! as coreutils do: killed by SIGPIPE (status 141 in a shell) or exiting 0, never a
//! panic's status 101 and backtrace.

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
    let (reader, writer) = std::io::pipe().unwrap();
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
