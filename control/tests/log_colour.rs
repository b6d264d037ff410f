//! The daemon's log lines on a terminal: coloured, unless `NO_COLOR` says not
//! (no-color.org); never coloured into a file or a pipe. `script` (util-linux) gives the
//! daemon a pseudo-terminal; a filter that does not parse makes it log one WARN line, and
//! a configuration file that is not there makes it stop at once.

use std::process::{Command, Stdio};

/// What xwired writes to a terminal with `no_color` as NO_COLOR (unset with `None`).
fn on_a_terminal(no_color: Option<&str>) -> String {
    let command = format!(
        "{} --config /nonexistent/xwired.toml",
        env!("CARGO_BIN_EXE_xwired")
    );
    let mut script = Command::new("script");
    script
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .env("XWIRE_LOG", "not a filter[")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    if let Some(value) = no_color {
        script.env("NO_COLOR", value);
    }
    let out = script.output().expect("script (util-linux) runs");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("WARN"), "{said}");
    assert!(said.contains("/nonexistent/xwired.toml"), "{said}");
    said
}

const ESCAPE: char = '\u{1b}';

#[test]
fn log_lines_are_coloured_on_a_terminal_unless_no_color_is_set() {
    assert!(on_a_terminal(None).contains(ESCAPE));
    let plain = on_a_terminal(Some("1"));
    assert!(!plain.contains(ESCAPE), "{plain:?}");
    // no-color.org: an empty NO_COLOR is as good as none.
    assert!(on_a_terminal(Some("")).contains(ESCAPE));
}

#[test]
fn an_error_is_said_once_and_not_coloured_into_a_pipe() {
    let out = Command::new(env!("CARGO_BIN_EXE_xwired"))
        .args(["--config", "/nonexistent/xwired.toml"])
        .env("XWIRE_LOG", "not a filter[")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains(ESCAPE), "{said:?}");
    // The cause is said once, not again by the error's chain.
    assert_eq!(
        said.matches("No such file or directory").count(),
        1,
        "{said}"
    );
}
