//! A DEL storm with a crash in it: twelve pods in a ring across two nodes (wires inside
//! each node and across them), every pod deleted at once from four threads, as a runtime
//! stops many pods, and one node's daemon killed (kill -9) in the middle of it. Each pod's
//! namespace goes once its DEL returns, as a runtime's does. Once the daemon is started
//! again, nothing is left on either node: no attachment, no wire record, no interface of
//! xwire's in the node's namespace.

mod support;

use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use support::{call, eventually, Node, Pod, TempDir};

const PODS: usize = 12;

/// xwire's interfaces in the node's namespace (their alias says so).
fn xwire_interfaces(node: &Node) -> Vec<String> {
    let out = node
        .ns
        .exec(Command::new("ip").args(["-j", "-d", "link", "show"]))
        .unwrap();
    let links: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    links
        .iter()
        .filter(|l| {
            l["ifalias"]
                .as_str()
                .is_some_and(|a| a.starts_with("xwire"))
        })
        .map(|l| l["ifname"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn a_daemon_killed_during_a_del_storm_leaves_nothing_behind() {
    let certs = TempDir::new("certs-storm");
    let (mut n1, n2) = support::two_nodes(&certs);
    for node in [&n1, &n2] {
        node.apply(&support::ring_topology("p", PODS));
    }
    let pods: Vec<Pod> = (0..PODS).map(|i| Pod::new(&format!("p{i}"))).collect();
    let configs = [n1.net_config("1.1.0"), n2.net_config("1.1.0")];
    for (i, pod) in pods.iter().enumerate() {
        let added = call(pod, "ADD", &configs[i % 2]);
        assert_eq!(added.code, 0, "{}", added.output);
    }
    let wired = eventually(Duration::from_secs(20), || {
        pods.iter().all(|p| p.has("eth1") && p.has("eth2"))
    });
    assert!(wired, "n1:\n{}\nn2:\n{}", n1.log(), n2.log());

    // Four callers take the pods in turn; n1's daemon dies while they work.
    let queue = Mutex::new(pods.into_iter().enumerate().collect::<Vec<_>>());
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let Some((i, pod)) = queue.lock().unwrap().pop() else {
                    return;
                };
                let deleted = call(&pod, "DEL", &configs[i % 2]);
                // A DEL that fails is retried, as a runtime does, until it succeeds.
                let mut tries = 1;
                let mut code = deleted.code;
                while code != 0 && tries < 50 {
                    std::thread::sleep(Duration::from_millis(100));
                    code = call(&pod, "DEL", &configs[i % 2]).code;
                    tries += 1;
                }
                assert_eq!(code, 0, "DEL of p{i} never succeeded: {}", deleted.output);
                drop(pod); // the runtime removes the namespace
            });
        }
        std::thread::sleep(Duration::from_millis(40));
        let waiting = queue.lock().unwrap().len();
        n1.stop();
        // The kill lands in the storm: some pods are still to be deleted.
        assert!(waiting > 0, "the storm was over before the kill");
        eprintln!("killed n1 with {waiting} of {PODS} DELs not yet begun");
    });
    n1.restart();

    let clean = |node: &Node| {
        let state = node.state();
        state.attachments.is_empty() && state.wires.is_empty() && xwire_interfaces(node).is_empty()
    };
    let cleaned = eventually(Duration::from_secs(30), || clean(&n1) && clean(&n2));
    assert!(
        cleaned,
        "left: n1 {:?} {:?}, n2 {:?} {:?}\nn1:\n{}\nn2:\n{}",
        n1.state(),
        xwire_interfaces(&n1),
        n2.state(),
        xwire_interfaces(&n2),
        n1.log(),
        n2.log()
    );
}
