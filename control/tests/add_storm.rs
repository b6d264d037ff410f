//! An ADD storm: twelve pods in a ring across two nodes (wires inside each node and
//! across them), every pod added at once from six threads, as a runtime starts many pods.
//! Every ADD succeeds, every wire comes up, and what each ADD recorded was written, so a
//! daemon killed right after the storm has it all when it starts again. With the
//! embedded store, and with the Kubernetes store against a real API server (skipped,
//! with the reason, where there is none), which answers each ADD when its node's journal
//! has the records and writes the API server's copy behind.

mod support;

use std::sync::Mutex;
use std::time::Duration;

use support::apiserver::{self, Nodes};
use support::{call, eventually, Node, Pod, TempDir};

const PODS: usize = 12;

/// The node's attachments and wire end records, as (attachments, wire ends).
fn recorded(node: &Node) -> (usize, usize) {
    let state = node.state();
    (state.attachments.len(), state.wires.len())
}

#[test]
fn adds_that_come_together_are_all_answered_wired_and_recorded() {
    let certs = TempDir::new("certs-add-storm");
    let (n1, n2) = support::two_nodes(&certs);
    for node in [&n1, &n2] {
        node.apply(&support::ring_topology("s", PODS));
    }
    let configs = [n1.net_config("1.1.0"), n2.net_config("1.1.0")];
    storm([n1, n2], configs);
}

#[test]
fn adds_that_come_together_through_the_api_server_are_all_answered_and_recorded() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    const NODES: Nodes = Nodes {
        names: ["ka1", "ka2"],
        subnet: 16,
    };
    apiserver::install(&server, NODES, &support::ca_secret());
    let mut objects = vec![serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": "lab", "labels": {"xwire.dev/wire": "enabled"}}})];
    for document in support::ring_topology("s", PODS).split("---\n") {
        let mut object: serde_json::Value = serde_yaml_ng::from_str(document).unwrap();
        object.as_object_mut().unwrap().remove("status");
        objects.push(object);
    }
    apiserver::apply_objects(&server, &objects);
    let (n1, n2) = apiserver::kube_nodes(&server, &support::xwired(), NODES, "");
    // Where the scheduler put the pods: even ones on ka1, odd ones on ka2.
    for i in 0..PODS {
        apiserver::bind_pod(&server, "lab", &format!("s{i}"), NODES.names[i % 2]);
    }
    let config = |node: &Node| {
        let mut c = node.net_config("1.1.0");
        c["namespace"] = serde_json::json!("lab");
        c
    };
    let configs = [config(&n1), config(&n2)];
    storm([n1, n2], configs);
}

/// Twelve ADDs from six callers at once on `nodes` (even pods on the first), then the
/// checks of the module's comment.
fn storm(nodes: [Node; 2], configs: [serde_json::Value; 2]) {
    let [mut n1, n2] = nodes;
    let pods: Vec<Pod> = (0..PODS).map(|i| Pod::new(&format!("s{i}"))).collect();
    let queue = Mutex::new((0..PODS).collect::<Vec<_>>());
    std::thread::scope(|scope| {
        for _ in 0..6 {
            scope.spawn(|| loop {
                let Some(i) = queue.lock().unwrap().pop() else {
                    return;
                };
                let added = call(&pods[i], "ADD", &configs[i % 2]);
                assert_eq!(added.code, 0, "ADD of s{i}: {}", added.output);
            });
        }
    });
    let wired = eventually(Duration::from_secs(20), || {
        pods.iter().all(|p| p.has("eth1") && p.has("eth2"))
    });
    assert!(wired, "n1:\n{}\nn2:\n{}", n1.log(), n2.log());
    // Six pods a node, two wire ends each.
    let expected = (PODS / 2, PODS);
    assert_eq!(recorded(&n1), expected);
    assert_eq!(recorded(&n2), expected);

    // Killed and started again, n1 has every record of the storm.
    n1.restart();
    assert_eq!(recorded(&n1), expected, "{}", n1.log());
    let still = eventually(Duration::from_secs(20), || {
        pods.iter().all(|p| p.has("eth1") && p.has("eth2"))
    });
    assert!(still, "{}", n1.log());
}
