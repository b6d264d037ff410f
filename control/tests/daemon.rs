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

#[test]
fn a_store_that_cannot_be_read_stops_the_start_and_is_left_alone() {
    let dir = TempDir::new("badstore");
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap();
    let store = state.join("xwire.redb");
    let config = dir.0.join("xwired.toml");
    std::fs::write(
        &config,
        format!(
            "node_name = \"n1\"\nstate_dir = \"{}\"\napi_socket = \"{}\"\n",
            state.display(),
            dir.0.join("api.sock").display()
        ),
    )
    .unwrap();
    let start = || {
        let out = Command::new(xwired())
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert!(!out.status.success(), "the daemon started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };

    let garbage = b"not a redb file, whatever it once was".repeat(200);
    std::fs::write(&store, &garbage).unwrap();
    let stderr = start();
    assert!(stderr.contains("xwire.redb"), "{stderr}");
    assert_eq!(std::fs::read(&store).unwrap(), garbage);

    // A store the daemon made, then locked away from it.
    std::fs::remove_file(&store).unwrap();
    let mut node = support::Node::start_in(
        &xwired(),
        xwire_perf::testbed::Netns::new("badstore").unwrap(),
        "n1",
        "",
    );
    let made = node.dir.0.join("state").join("xwire.redb");
    node.stop();
    std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o000)).unwrap();
    let before = std::fs::read(&made).unwrap();
    let out = Command::new(xwired())
        .arg("--config")
        .arg(&node.config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("mode is 000"), "{stderr}");
    assert_eq!(std::fs::read(&made).unwrap(), before);
}
