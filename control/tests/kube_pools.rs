//! Node pools from Node labels, against a real kube-apiserver (skipped, with the reason,
//! where there is none): two daemons with `pools_from_labels` follow the `xwire.dev/pool`,
//! `xwire.dev/gateway` and `xwire.dev/pool-nat` labels as they change: the routes to the
//! other pool's node through the gateway, the gateway's own tunnel device and routes,
//! and nothing once a node is in no pool. Read back with iproute2.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::apiserver::{self, apply_objects, register_node, ApiServer, Nodes};
use support::{eventually, Node};

const NODES: Nodes = Nodes {
    names: ["kp1", "kp2"],
    subnet: 13,
};

/// Server-side applies `labels` (and `annotations`) to Node `name`: labels this test
/// applied before and leaves out now are removed.
fn label(server: &ApiServer, name: &str, labels: Value, annotations: Value) {
    apply_objects(
        server,
        &[json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels, "annotations": annotations}})],
    );
}

fn table_900(node: &Node) -> String {
    let out = node
        .ns
        .exec(Command::new("ip").args(["-d", "route", "show", "table", "900"]))
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn rules(node: &Node) -> String {
    let out = node.ns.exec(Command::new("ip").args(["rule"])).unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn pools_follow_the_node_labels() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    apiserver::install(&server, NODES, &support::ca_secret());
    // west's gateway: a Node object with no daemon, behind NAT.
    let west = "10.252.13.50";
    register_node(&server, "kpw", west);
    label(
        &server,
        "kpw",
        json!({"xwire.dev/pool": "west", "xwire.dev/gateway": "0", "xwire.dev/pool-nat": "true"}),
        json!({"xwire.dev/gateway-address": "192.0.2.50:7480"}),
    );
    label(&server, "kp1", json!({"xwire.dev/pool": "east"}), json!({}));
    label(
        &server,
        "kp2",
        json!({"xwire.dev/pool": "east", "xwire.dev/gateway": "0"}),
        json!({}),
    );
    let (k1, k2) = apiserver::kube_nodes_with(
        &server,
        &support::xwired(),
        NODES,
        "underlay_mtu = 1400",
        "pools_from_labels = true",
    );
    let via_kp2 = format!("{west} via {} dev", NODES.underlay_ip(1));
    let routed = eventually(Duration::from_secs(10), || {
        table_900(&k1).contains(&via_kp2) && table_900(&k2).contains(&format!("{west} dev xwgw0"))
    });
    assert!(
        routed,
        "kp1: {}\nkp2: {}\n{}",
        table_900(&k1),
        table_900(&k2),
        k1.log()
    );
    assert!(table_900(&k1).contains("proto 120"), "{}", table_900(&k1));
    assert!(table_900(&k1).contains("mtu 1400"), "{}", table_900(&k1));
    assert!(
        rules(&k1).contains(&format!("to {west} lookup 900")),
        "{}",
        rules(&k1)
    );
    assert_eq!(k1.state().pool.unwrap()["active_gateway"], "kp2");
    assert_eq!(k2.state().pool.unwrap()["gateway"], true);

    // kp1 becomes east's first gateway: it runs a tunnel of its own and routes into it.
    label(
        &server,
        "kp1",
        json!({"xwire.dev/pool": "east", "xwire.dev/gateway": "0"}),
        json!({}),
    );
    label(
        &server,
        "kp2",
        json!({"xwire.dev/pool": "east", "xwire.dev/gateway": "1"}),
        json!({}),
    );
    let gateway = eventually(Duration::from_secs(10), || {
        table_900(&k1).contains(&format!("{west} dev xwgw0"))
    });
    assert!(gateway, "kp1: {}\n{}", table_900(&k1), k1.log());
    assert_eq!(k1.state().pool.unwrap()["gateway"], true);

    // kp1 in no pool: its table and rules go.
    label(&server, "kp1", json!({}), json!({}));
    let cleared = eventually(Duration::from_secs(10), || {
        table_900(&k1).trim().is_empty() && !rules(&k1).contains("lookup 900")
    });
    assert!(cleared, "kp1: {}\n{}", table_900(&k1), rules(&k1));
    assert!(k1.state().pool.is_none());
    drop(k2);
}
