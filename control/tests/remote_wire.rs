//! Pods on two nodes: each node a namespace with its own daemon, the nodes joined by an
//! underlay veth, the wire carried by the fast path over QUIC with mutual TLS.

mod support;

use std::time::Duration;

use support::{call, eventually, pair_topology, Node, Pod, TempDir};
use xwire_testbed::checks::ping;

const LINKS: &[(u64, &str, &str, &str, &str)] = &[
    (0, "eth1", "10.0.0.1/30", "eth1", "10.0.0.2/30"),
    (1, "eth2", "10.0.1.1/30", "eth2", "10.0.1.2/30"),
];

/// Two nodes that know each other, with the pair topology applied to both.
fn two_nodes(certs: &TempDir) -> (Node, Node) {
    let (n1, n2) = support::two_nodes(certs);
    let topology = support::placed(
        &pair_topology("r1", "r2", LINKS),
        &[("r1", support::N1_IP), ("r2", support::N2_IP)],
    );
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
    // The interfaces come with each ADD; the wire joins once the restarted node's peer
    // connection is up, which on a busy machine (the whole suite at once) takes longer
    // than one ping's wait.
    assert!(eventually(Duration::from_secs(15), || ping(
        &r1.ns, "10.0.0.2", 2
    )
    .unwrap()));
}

/// Two topology namespaces whose wire ids once collided (the id was the namespace's
/// 32-bit FNV-1a hash and the uid): found by search, as anyone could.
fn namespaces_whose_old_ids_collide() -> (String, String) {
    let mut seen = std::collections::HashMap::new();
    for i in 0u32.. {
        let name = format!("lab-{i}");
        let old_id = name.bytes().fold(0x811c_9dc5u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        if let Some(other) = seen.insert(old_id, name.clone()) {
            return (other, name);
        }
    }
    unreachable!()
}

/// A pod's Topology in namespace `ns`, one link (uid 0) to `peer`; x1 runs on n1, x2 on
/// n2.
fn topology_in(ns: &str, pod: &str, peer: &str, ip: &str, peer_ip: &str) -> String {
    let node_ip = if pod == "x1" {
        support::N1_IP
    } else {
        support::N2_IP
    };
    format!(
        "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {{name: {pod}, namespace: {ns}}}\nspec:\n  links:\n  - {{uid: 0, peer_pod: {peer}, local_intf: eth1, peer_intf: eth1, local_ip: {ip}, peer_ip: {peer_ip}}}\nstatus: {{src_ip: {node_ip}}}\n"
    )
}

/// Two namespaces whose wires once had one id (and the second was refused) are now two
/// wires with two ids, up at once between the same two nodes, each carrying its own.
#[test]
fn wires_of_namespaces_whose_old_ids_collided_are_both_up_and_each_carries_its_own() {
    let (first, second) = namespaces_whose_old_ids_collide();
    assert_ne!(
        xwire_proto::WireId::new(&first, 0),
        xwire_proto::WireId::new(&second, 0)
    );
    let certs = TempDir::new("certs");
    let (n1, n2) = support::two_nodes(&certs);
    for (ns, net) in [(&first, "10.0.0"), (&second, "10.0.9")] {
        let yaml = format!(
            "{}---\n{}",
            topology_in(
                ns,
                "x1",
                "x2",
                &format!("{net}.1/30"),
                &format!("{net}.2/30")
            ),
            topology_in(
                ns,
                "x2",
                "x1",
                &format!("{net}.2/30"),
                &format!("{net}.1/30")
            )
        );
        n1.apply(&yaml);
        n2.apply(&yaml);
    }
    let config = |node: &Node, ns: &str| {
        let mut c = node.net_config("1.1.0");
        c["namespace"] = ns.into();
        c
    };
    let (a1, a2) = (Pod::new("x1"), Pod::new("x2"));
    assert_eq!(call(&a1, "ADD", &config(&n1, &first)).code, 0);
    assert_eq!(call(&a2, "ADD", &config(&n2, &first)).code, 0);
    assert!(eventually(Duration::from_secs(10), || a1.has("eth1") && a2.has("eth1")));

    let (mut b1, mut b2) = (Pod::new("x1"), Pod::new("x2"));
    for pod in [&mut b1, &mut b2] {
        pod.container += "-second";
    }
    assert_eq!(call(&b1, "ADD", &config(&n1, &second)).code, 0);
    let added = call(&b2, "ADD", &config(&n2, &second));
    assert_eq!(added.code, 0, "{}\nn2:\n{}", added.output, n2.log());
    assert!(eventually(Duration::from_secs(10), || b1.has("eth1") && b2.has("eth1")));
    // Each pod reaches only its own wire's far end, the other wire's being in another
    // subnet: frames of one wire delivered on the other would not answer.
    assert!(ping(&a1.ns, "10.0.0.2", 2).unwrap(), "n1:\n{}", n1.log());
    assert!(ping(&b1.ns, "10.0.9.2", 2).unwrap(), "n1:\n{}", n1.log());
    assert!(ping(&b2.ns, "10.0.9.1", 2).unwrap());
    assert!(ping(&a2.ns, "10.0.0.1", 2).unwrap());
}

/// Whether process `pid` has ended (gone, or a zombie its parent has not reaped yet).
fn ended(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z'))
        })
        .unwrap_or(true)
}

#[test]
fn a_daemon_with_peers_up_stops_at_once_on_sigterm() {
    // Its peer desk asks the workers for events every few milliseconds; a question that
    // met a worker stopping was never answered, and the daemon hung until it was killed
    // (5 s in `lab down`).
    let certs = TempDir::new("certs");
    let (mut n1, n2) = two_nodes(&certs);
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    assert_eq!(call(&r1, "ADD", &n1.net_config("1.0.0")).code, 0);
    assert_eq!(call(&r2, "ADD", &n2.net_config("1.0.0")).code, 0);
    assert!(eventually(Duration::from_secs(10), || r1.has("eth1")));
    let pid = n1.daemon_pid().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let stopped = eventually(Duration::from_secs(3), || ended(pid));
    assert!(stopped, "still running 3 s after SIGTERM:\n{}", n1.log());
    assert!(n1.log().contains("stopping"), "{}", n1.log());
}

#[test]
fn a_far_end_deleted_while_it_waited_is_forgotten_by_the_other_node() {
    // r1 goes first, so r2's end waits again (and says so to n1); then r2 goes too. r1
    // added again must wait for r2, not join a wire to a pod that is gone.
    let certs = TempDir::new("certs");
    let (n1, n2) = two_nodes(&certs);
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let (c1, c2) = (n1.net_config("1.0.0"), n2.net_config("1.0.0"));
    assert_eq!(call(&r1, "ADD", &c1).code, 0);
    assert_eq!(call(&r2, "ADD", &c2).code, 0);
    assert!(eventually(Duration::from_secs(10), || r1.has("eth1")));
    assert_eq!(call(&r1, "DEL", &c1).code, 0);
    assert!(eventually(Duration::from_secs(10), || n2
        .wire_state("r2", 0)
        .as_deref()
        == Some("pending")));
    assert_eq!(call(&r2, "DEL", &c2).code, 0);
    assert_eq!(call(&r1, "ADD", &c1).code, 0);
    let waits = || !r1.has("eth1") && n1.wire_state("r1", 0).as_deref() == Some("pending");
    assert!(eventually(Duration::from_secs(10), waits), "{}", n1.log());
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        waits(),
        "r1 joined a wire to a pod that is gone:\n{}",
        n1.log()
    );
    // r2 back: the wire joins. A pod's interface comes before its end forwards (the port
    // and the far node's link follow), which on a busy machine (the whole suite at once,
    // with steal) took longer than one ping's wait.
    assert_eq!(call(&r2, "ADD", &c2).code, 0);
    assert!(eventually(Duration::from_secs(10), || r1.has("eth1") && r2.has("eth1")));
    assert!(
        eventually(Duration::from_secs(15), || ping(&r1.ns, "10.0.0.2", 2)
            .unwrap()),
        "{}",
        n1.log()
    );
}
