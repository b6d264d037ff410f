//! Pods on two nodes: each node a namespace with its own daemon, the nodes joined by an
//! underlay veth, the wire carried by the fast path over QUIC with mutual TLS.

mod support;

use std::time::Duration;

use support::{call, eventually, pair_topology, Node, Pod, TempDir};
use xwire_perf::testbed::checks::ping;

const LINKS: &[(u64, &str, &str, &str, &str)] = &[
    (0, "eth1", "10.0.0.1/30", "eth1", "10.0.0.2/30"),
    (1, "eth2", "10.0.1.1/30", "eth2", "10.0.1.2/30"),
];

/// Two nodes that know each other, with the pair topology applied to both.
fn two_nodes(certs: &TempDir) -> (Node, Node) {
    let (n1, n2) = support::two_nodes(certs);
    let topology = pair_topology("r1", "r2", LINKS);
    n1.apply(&topology);
    n2.apply(&topology);
    (n1, n2)
}

#[test]
fn pods_on_two_nodes_are_wired_whichever_starts_first() {
    let certs = TempDir::new("certs");
    let (n1, n2) = two_nodes(&certs);
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let (c1, c2) = (n1.net_config("1.0.0"), n2.net_config("1.0.0"));

    let added = call(&r1, "ADD", &c1);
    assert_eq!(added.code, 0, "{}", added.output);
    assert!(!r1.has("eth1"), "no peer yet");
    let added = call(&r2, "ADD", &c2);
    assert_eq!(added.code, 0, "{}", added.output);
    let wired = eventually(Duration::from_secs(10), || r1.has("eth1") && r1.has("eth2"));
    assert!(wired, "n1:\n{}\nn2:\n{}", n1.log(), n2.log());
    assert_eq!(n1.wire_state("r1", 0).as_deref(), Some("remote"));
    assert_eq!(n2.wire_state("r2", 1).as_deref(), Some("remote"));
    assert!(ping(&r1.ns, "10.0.0.2", 3).unwrap(), "n1:\n{}", n1.log());
    assert!(ping(&r2.ns, "10.0.1.1", 2).unwrap());
    assert_eq!(call(&r1, "CHECK", &c1).code, 0);
    assert_eq!(call(&r2, "CHECK", &c2).code, 0);

    // The far end goes: the near end's interfaces go too, and come back with it.
    assert_eq!(call(&r2, "DEL", &c2).code, 0);
    assert!(!r2.has("eth1"));
    assert!(eventually(Duration::from_secs(10), || !r1.has("eth1")));
    assert_eq!(n1.wire_state("r1", 0).as_deref(), Some("pending"));
    assert_eq!(call(&r2, "ADD", &c2).code, 0);
    assert!(eventually(Duration::from_secs(10), || r1.has("eth1")));
    assert!(ping(&r2.ns, "10.0.0.1", 2).unwrap());

    for (pod, config) in [(&r1, &c1), (&r2, &c2)] {
        assert_eq!(call(pod, "DEL", config).code, 0);
    }
    for node in [&n1, &n2] {
        let state = node.state();
        assert!(
            state.attachments.is_empty() && state.wires.is_empty(),
            "{state:?}"
        );
        let leftovers: Vec<String> = node
            .ns
            .links()
            .unwrap()
            .into_iter()
            .filter(|l| l.starts_with("xw"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}

#[test]
fn a_node_that_starts_late_learns_of_waiting_pods() {
    let certs = TempDir::new("certs");
    let (n1, mut n2) = two_nodes(&certs);
    n2.stop();
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    assert_eq!(call(&r1, "ADD", &n1.net_config("1.1.0")).code, 0);
    n2.restart();
    assert_eq!(call(&r2, "ADD", &n2.net_config("1.1.0")).code, 0);
    assert!(eventually(Duration::from_secs(15), || r1.has("eth1") && r2.has("eth1")));
    assert!(ping(&r1.ns, "10.0.0.2", 2).unwrap());
}
