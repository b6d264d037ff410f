//! The daemon as a process: its socket's mode, and a bad configuration refused at start
//! with the field and line named.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use support::{start_node, xwired, TempDir};

#[test]
fn the_local_api_socket_is_private() {
    let node = start_node("n1", "");
    let mode = std::fs::metadata(&node.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_bad_configuration_stops_the_start_and_says_where() {
    let dir = TempDir::new("badconf");
    let config = dir.0.join("xwired.toml");
    for (text, expect) in [
        (
            "node_name = \"n1\"\nbusy_pol = true\n",
            ["busy_pol", "line 2"],
        ),
        (
            "node_name = \"n1\"\n\nunderlay_mtu = \"big\"\n",
            ["underlay_mtu", "line 3"],
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = Command::new(xwired())
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        for word in expect {
            assert!(stderr.contains(word), "{word} not in: {stderr}");
        }
    }
}
