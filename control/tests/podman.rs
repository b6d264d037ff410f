//! A real runtime: podman with its CNI backend runs containers on a network whose
//! conflist chains `xwire` after bridge and host-local; the topology links two of them.

mod support;

use std::time::Duration;

use support::podman::Podman;
use support::{eventually, plugin_bin, start_node};

#[test]
fn podman_containers_are_wired_and_rm_leaves_nothing() {
    let node = start_node("n1", "");
    let pid = std::process::id();
    let (r1, r2) = (format!("xw-r1-{pid}"), format!("xw-r2-{pid}"));
    let topology = support::pair_topology(
        &r1,
        &r2,
        &[(0, "eth1", "10.0.0.1/30", "eth1", "10.0.0.2/30")],
    );
    node.apply(&topology);
    let chained = format!(
        r#"{{"type": "xwire", "socket": "{}", "namespace": "lab"}}"#,
        node.socket.display()
    );
    let podman = Podman::new(&plugin_bin(), &chained, "10.199.80");

    for name in [&r1, &r2] {
        let out = podman.start(name);
        assert!(
            out.status.success(),
            "podman run {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let links = podman.run(&["exec", &r1, "ip", "-o", "link"]);
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(links.contains("eth0") && links.contains("eth1"), "{links}");
    let ping = podman.run(&["exec", &r1, "ping", "-c", "2", "-W", "2", "10.0.0.2"]);
    assert!(
        ping.status.success(),
        "{}",
        String::from_utf8_lossy(&ping.stdout)
    );
    // eth0 from the bridge is untouched.
    let addrs = podman.run(&["exec", &r2, "ip", "-o", "-4", "addr"]);
    let addrs = String::from_utf8_lossy(&addrs.stdout);
    assert!(
        addrs.contains("10.199.80.") && addrs.contains("10.0.0.2/30"),
        "{addrs}"
    );
    assert_eq!(node.state().attachments.len(), 2);

    let out = podman.run(&["rm", "-f", "-t", "0", &r1, &r2]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cleared = eventually(Duration::from_secs(10), || {
        let state = node.state();
        state.attachments.is_empty() && state.wires.is_empty()
    });
    assert!(cleared, "{:?}\n{}", node.state(), node.log());
    let node_links = node.ns.links().unwrap();
    assert!(
        node_links.iter().all(|l| !l.starts_with("xw")),
        "{node_links:?}"
    );
}
