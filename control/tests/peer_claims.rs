//! Nodes may not act for each other: with three nodes, a third node that claims to hold
//! the far end of a wire between the other two is refused (and told so), and the wire
//! carries on between the two; and while nothing says where a wire's far end runs, the
//! wire is told to no node and no node's claim to it is taken.

mod support;

use std::process::Command;
use std::time::Duration;

use support::{call, certs_toml, eventually, start_node_in, write_certs, Node, Pod, TempDir};
use xwire_testbed::checks::ping;
use xwire_testbed::{Netns, Veth};

const SUBNET: &str = "192.168.78";

/// n1, n2 and n3 on one underlay (a bridge in a hub namespace), each a peer of the
/// other two.
fn three_nodes(certs: &TempDir) -> (Netns, Vec<Node>) {
    let names = ["n1", "n2", "n3"];
    let hub = Netns::new("hub").unwrap();
    let run = |ns: &Netns, args: &[&str]| {
        let out = ns.exec(Command::new("ip").args(args)).unwrap();
        assert!(out.status.success(), "ip {args:?}: {out:?}");
    };
    run(&hub, &["link", "add", "br0", "type", "bridge"]);
    run(&hub, &["link", "set", "br0", "up"]);
    write_certs(&certs.0, &names);
    let mut nodes = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let ns = Netns::new(name).unwrap();
        let uplink = Veth::new(&ns, &hub).unwrap();
        ns.add_address(uplink.a_name(), &format!("{SUBNET}.{}/24", i + 1))
            .unwrap();
        uplink.set_up().unwrap();
        run(&hub, &["link", "set", uplink.b_name(), "master", "br0"]);
        std::mem::forget(uplink); // the namespaces take it with them
        let peers: String = names
            .iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .map(|(j, peer)| {
                format!(
                    "[[peers]]\nname = \"{peer}\"\naddress = \"{SUBNET}.{}:7470\"\n",
                    j + 1
                )
            })
            .collect();
        let config = format!(
            "node_address = \"{SUBNET}.{}:7470\"\n{}{peers}",
            i + 1,
            certs_toml(&certs.0, name)
        );
        nodes.push(start_node_in(ns, name, &config));
    }
    (hub, nodes)
}

/// r1 and r2, joined by two links, each placed (its Topology's `status.src_ip`) on the
/// node at the address given, or nowhere yet.
fn topology(r1_at: Option<&str>, r2_at: Option<&str>) -> String {
    let status = |at: Option<&str>| match at {
        Some(ip) => format!("status: {{src_ip: \"{ip}\"}}\n"),
        None => String::new(),
    };
    format!(
        "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {{name: r1, namespace: lab}}\nspec:\n  links:\n  - {{uid: 0, peer_pod: r2, local_intf: eth1, peer_intf: eth1, local_ip: 10.0.0.1/30, peer_ip: 10.0.0.2/30}}\n  - {{uid: 1, peer_pod: r2, local_intf: eth2, peer_intf: eth2, local_ip: 10.0.1.1/30, peer_ip: 10.0.1.2/30}}\n{}---\napiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {{name: r2, namespace: lab}}\nspec:\n  links:\n  - {{uid: 0, peer_pod: r1, local_intf: eth1, peer_intf: eth1, local_ip: 10.0.0.2/30, peer_ip: 10.0.0.1/30}}\n  - {{uid: 1, peer_pod: r1, local_intf: eth2, peer_intf: eth2, local_ip: 10.0.1.2/30, peer_ip: 10.0.1.1/30}}\n{}",
        status(r1_at),
        status(r2_at)
    )
}

fn peer_node(node: &Node, pod: &str, uid: u64) -> Option<String> {
    node.state()
        .wires
        .iter()
        .find(|w| w["local_pod_name"] == pod && w["link_uid"] == uid)
        .and_then(|w| w["peer_node"].as_str().map(str::to_owned))
}

#[test]
fn a_third_nodes_claim_to_a_wire_between_two_others_changes_nothing() {
    let certs = TempDir::new("certs3");
    let (_hub, nodes) = three_nodes(&certs);
    let (n1, n2, n3) = (&nodes[0], &nodes[1], &nodes[2]);
    let [n1_address, n2_address, n3_address] = [1, 2, 3].map(|i| format!("{SUBNET}.{i}"));
    n1.apply(&topology(Some(&n1_address), Some(&n2_address)));
    n2.apply(&topology(Some(&n1_address), Some(&n2_address)));
    // n3's own store says r2 runs there: it will claim r2's ends.
    n3.apply(&topology(Some(&n1_address), Some(&n3_address)));

    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    assert_eq!(call(&r1, "ADD", &n1.net_config("1.1.0")).code, 0);
    assert_eq!(call(&r2, "ADD", &n2.net_config("1.1.0")).code, 0);
    assert!(
        eventually(Duration::from_secs(10), || r1.has("eth1")
            && r1.has("eth2")
            && r2.has("eth1")
            && r2.has("eth2")),
        "n1:\n{}\nn2:\n{}",
        n1.log(),
        n2.log()
    );
    // n2's claims to r2's ends passed n1's peer desk and were judged on n1's thread.
    assert!(n1.state().claims_judged_by_node >= 2, "{}", n1.log());

    // An impostor r2 on n3: its ADD announces both of r2's ends to n1, where r1 runs.
    let impostor = Pod::new("r2");
    assert_eq!(call(&impostor, "ADD", &n3.net_config("1.1.0")).code, 0);
    refuses_claims(n1, "claim refused");
    // n1 answers each refused claim with DelWire: whatever n3 joined to n1 on hearing
    // r1's ends announced waits for a far end again.
    assert!(
        eventually(Duration::from_secs(10), || [0, 1]
            .iter()
            .all(|&uid| peer_node(n3, "r2", uid).is_none())),
        "n3's ends stayed joined to a node that refused them:\n{}",
        n3.log()
    );
    for uid in [0, 1] {
        assert_eq!(peer_node(n1, "r1", uid).as_deref(), Some("n2"), "uid {uid}");
        assert_eq!(peer_node(n2, "r2", uid).as_deref(), Some("n1"), "uid {uid}");
    }
    carries_and_the_impostor_gets_nothing(&r1, &impostor);
}

#[test]
fn a_wire_whose_far_end_is_placed_nowhere_is_told_to_no_node_and_claimed_by_none() {
    let certs = TempDir::new("certs3u");
    let (_hub, nodes) = three_nodes(&certs);
    let (n1, n2, n3) = (&nodes[0], &nodes[1], &nodes[2]);
    let [n1_address, n2_address, n3_address] = [1, 2, 3].map(|i| format!("{SUBNET}.{i}"));
    // Nothing says where r2 runs yet; n3's own store says it runs on n3.
    n1.apply(&topology(Some(&n1_address), None));
    n2.apply(&topology(Some(&n1_address), None));
    n3.apply(&topology(Some(&n1_address), Some(&n3_address)));
    let (r1, r2, impostor) = (Pod::new("r1"), Pod::new("r2"), Pod::new("r2"));
    assert_eq!(call(&r1, "ADD", &n1.net_config("1.1.0")).code, 0);
    assert_eq!(call(&r2, "ADD", &n2.net_config("1.1.0")).code, 0);
    assert_eq!(call(&impostor, "ADD", &n3.net_config("1.1.0")).code, 0);
    // n3 claims r2's ends at n1 (its store places r1 there); n1 takes neither claim.
    refuses_claims(n1, "no placement yet");
    // r1's ends wait: told to nobody, joined to nobody (n2's real r2 included, whose
    // claims n1 cannot tell from n3's yet).
    std::thread::sleep(Duration::from_secs(2));
    for uid in [0, 1] {
        assert_eq!(peer_node(n1, "r1", uid), None, "uid {uid}:\n{}", n1.log());
        assert_eq!(peer_node(n3, "r2", uid), None, "uid {uid}:\n{}", n3.log());
    }
    assert!(!r1.has("eth1") && !r1.has("eth2"));

    // r2 is placed on n2, as the node that runs it would write in a cluster: the wire
    // joins n1 and n2, and nothing reaches the impostor.
    n1.apply(&topology(Some(&n1_address), Some(&n2_address)));
    n2.apply(&topology(Some(&n1_address), Some(&n2_address)));
    assert!(
        eventually(Duration::from_secs(10), || [0, 1].iter().all(|&uid| {
            peer_node(n1, "r1", uid).as_deref() == Some("n2")
                && peer_node(n2, "r2", uid).as_deref() == Some("n1")
        })),
        "n1:\n{}\nn2:\n{}",
        n1.log(),
        n2.log()
    );
    carries_and_the_impostor_gets_nothing(&r1, &impostor);
}

/// `node` refuses at least two claims, and its log says so with `why`.
fn refuses_claims(node: &Node, why: &str) {
    assert!(
        eventually(Duration::from_secs(10), || node.state().refused_claims >= 2),
        "{} did not refuse the claims:\n{}",
        node.name,
        node.log()
    );
    assert!(node.log().contains(why), "{}", node.log());
}

/// Both of r1's wires carry pings to r2, and nothing reached the impostor.
fn carries_and_the_impostor_gets_nothing(r1: &Pod, impostor: &Pod) {
    assert!(ping(&r1.ns, "10.0.0.2", 3).unwrap());
    assert!(ping(&r1.ns, "10.0.1.2", 3).unwrap());
    for ifname in ["eth1", "eth2"] {
        assert_eq!(received(impostor, ifname), 0, "{ifname}");
    }
}

/// Frames `pod`'s interface `ifname` has received (0 if it has none).
fn received(pod: &Pod, ifname: &str) -> u64 {
    let out = pod
        .ns
        .exec(Command::new("ip").args(["-s", "-j", "link", "show", ifname]))
        .unwrap();
    if !out.status.success() {
        return 0;
    }
    let links: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    links[0]["stats64"]["rx"]["packets"].as_u64().unwrap()
}
