//! Wires across nodes on the kernel's VXLAN (`carrier: vxlan`): each node a namespace
//! with its own daemon, joined by an underlay veth; the pods' ends are VXLAN devices
//! whose tunnels run over that underlay, and the daemons still announce and reconcile
//! the wire over their QUIC peer connection. The same checks as a QUIC wire's: frames
//! cross, CHECK agrees, a restart leaves the pods' interfaces as they were, a lost
//! interface is made again, the carrier can change under a running pod, and DEL on
//! either end takes the wire down and leaves nothing behind.

mod support;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{call, eventually, pair_topology, Node, Pod, TempDir};
use xwire_testbed::checks::ping;

const LINKS: &[(u64, &str, &str, &str, &str)] = &[
    (0, "eth1", "10.0.0.1/30", "eth1", "10.0.0.2/30"),
    (1, "eth2", "10.0.1.1/30", "eth2", "10.0.1.2/30"),
];
const WAIT: Duration = Duration::from_secs(15);

/// The pair topology, placed on the two nodes, with link 0 on `carrier` (link 1 keeps
/// the default, a QUIC datagram wire beside it).
fn topology(carrier: &str) -> String {
    let pair = pair_topology("r1", "r2", LINKS).replace(
        "local_intf: eth1,",
        &format!("carrier: {carrier}, local_intf: eth1,"),
    );
    support::placed(&pair, &[("r1", support::N1_IP), ("r2", support::N2_IP)])
}

/// What `ip -details` says of `ifname` in `pod`: its index, kind, and its VXLAN's VNI
/// and remote when it is one.
fn link_details(pod: &Pod, ifname: &str) -> (u64, String, Option<(u64, String)>) {
    let out = pod
        .ns
        .exec(Command::new("ip").args(["-details", "-json", "link", "show", ifname]))
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let links: Value = serde_json::from_slice(&out.stdout).unwrap();
    let link = &links[0];
    let info = &link["linkinfo"];
    let kind = info["info_kind"].as_str().unwrap_or("").to_owned();
    let tunnel = (kind == "vxlan").then(|| {
        let data = &info["info_data"];
        (
            data["id"].as_u64().unwrap(),
            data["remote"].as_str().unwrap_or("").to_owned(),
        )
    });
    (link["ifindex"].as_u64().unwrap(), kind, tunnel)
}

fn logs(n1: &Node, n2: &Node) -> String {
    format!("n1:\n{}\nn2:\n{}", n1.log(), n2.log())
}

/// The two nodes with the topology applied, and both pods added and wired.
struct Wired {
    nodes: (Node, Node),
    pods: (Pod, Pod),
    configs: (Value, Value),
}

fn wired(certs: &TempDir) -> Wired {
    let (n1, n2) = support::two_nodes(certs);
    n1.apply(&topology("vxlan"));
    n2.apply(&topology("vxlan"));
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let (c1, c2) = (n1.net_config("1.0.0"), n2.net_config("1.0.0"));
    assert_eq!(call(&r1, "ADD", &c1).code, 0);
    assert_eq!(call(&r2, "ADD", &c2).code, 0);
    let up = eventually(WAIT, || r1.has("eth1") && r2.has("eth1") && r1.has("eth2"));
    assert!(up, "{}", logs(&n1, &n2));
    Wired {
        nodes: (n1, n2),
        pods: (r1, r2),
        configs: (c1, c2),
    }
}

#[test]
fn a_vxlan_wire_carries_frames_outlives_a_restart_changes_carrier_and_goes_with_del() {
    let certs = TempDir::new("certs");
    let Wired {
        nodes: (mut n1, n2),
        pods: (r1, r2),
        configs: (c1, c2),
    } = wired(&certs);

    // Each end is a VXLAN device with the same VNI, to the other node's address; the
    // QUIC wire beside it is a veth as always.
    assert_eq!(n1.wire_state("r1", 0).as_deref(), Some("vxlan"));
    assert_eq!(n2.wire_state("r2", 0).as_deref(), Some("vxlan"));
    assert_eq!(n1.wire_state("r1", 1).as_deref(), Some("remote"));
    let (index, kind, tunnel) = link_details(&r1, "eth1");
    assert_eq!(kind, "vxlan");
    let (vni, remote) = tunnel.unwrap();
    assert_eq!(remote, support::N2_IP);
    let (_, _, far) = link_details(&r2, "eth1");
    assert_eq!(far, Some((vni, support::N1_IP.to_owned())));
    assert_eq!(link_details(&r1, "eth2").1, "veth");
    assert!(ping(&r1.ns, "10.0.0.2", 3).unwrap(), "{}", logs(&n1, &n2));
    assert!(ping(&r2.ns, "10.0.1.1", 2).unwrap());
    assert_eq!(call(&r1, "CHECK", &c1).code, 0);
    assert_eq!(call(&r2, "CHECK", &c2).code, 0);

    // A restart takes the device as it is: the pod keeps the very interface.
    n1.restart();
    assert!(eventually(WAIT, || ping(&r1.ns, "10.0.0.2", 1).unwrap()));
    assert_eq!(link_details(&r1, "eth1").0, index, "remade by the restart");
    assert_eq!(call(&r1, "CHECK", &c1).code, 0, "{}", n1.log());

    // Lost by hand, the device is missed by CHECK and made again by the next pass.
    let deleted = r1
        .ns
        .exec(Command::new("ip").args(["link", "del", "eth1"]))
        .unwrap();
    assert!(deleted.status.success());
    assert_ne!(call(&r1, "CHECK", &c1).code, 0);
    n1.restart();
    assert!(eventually(WAIT, || r1.has("eth1")), "{}", n1.log());
    assert!(eventually(WAIT, || ping(&r1.ns, "10.0.0.2", 1).unwrap()));
    assert_eq!(call(&r1, "CHECK", &c1).code, 0, "{}", n1.log());

    // The carrier changes under the running pods: a QUIC wire, then VXLAN again.
    for (carrier, state, kind) in [("datagram", "remote", "veth"), ("vxlan", "vxlan", "vxlan")] {
        n1.apply(&topology(carrier));
        n2.apply(&topology(carrier));
        let moved = eventually(WAIT, || {
            n1.wire_state("r1", 0).as_deref() == Some(state)
                && n2.wire_state("r2", 0).as_deref() == Some(state)
                && r1.has("eth1")
                && r2.has("eth1")
        });
        assert!(moved, "to {carrier}: {}", logs(&n1, &n2));
        assert_eq!(link_details(&r1, "eth1").1, kind);
        assert!(
            eventually(WAIT, || ping(&r1.ns, "10.0.0.2", 1).unwrap()),
            "over {carrier}: {}",
            logs(&n1, &n2)
        );
        assert_eq!(call(&r2, "CHECK", &c2).code, 0, "{}", n2.log());
    }

    // DEL of the far end takes the near end's device away; it comes back with the pod.
    assert_eq!(call(&r2, "DEL", &c2).code, 0);
    assert!(!r2.has("eth1"));
    assert!(eventually(WAIT, || !r1.has("eth1")), "{}", n1.log());
    assert_eq!(n1.wire_state("r1", 0).as_deref(), Some("pending"));
    assert_eq!(call(&r2, "ADD", &c2).code, 0);
    assert!(eventually(WAIT, || r1.has("eth1")));
    assert!(eventually(WAIT, || ping(&r2.ns, "10.0.0.1", 1).unwrap()));

    for (pod, config) in [(&r1, &c1), (&r2, &c2)] {
        assert_eq!(call(pod, "DEL", config).code, 0);
        assert!(!pod.has("eth1") && !pod.has("eth2"));
    }
    for node in [&n1, &n2] {
        let state = node.state();
        assert!(
            state.attachments.is_empty() && state.wires.is_empty(),
            "{state:?}"
        );
    }
}

#[test]
fn a_vxlan_wire_whose_vni_another_holds_is_refused_by_name() {
    // A device of the node's own holding the VNI that wire 0 would take: the daemon says
    // which VNI and leaves the end pending, and CHECK says the wire is not up.
    let certs = TempDir::new("certs");
    let Wired {
        nodes: (n1, _n2),
        pods: (r1, r2),
        configs: (c1, c2),
    } = wired(&certs);
    let (_, _, tunnel) = link_details(&r1, "eth1");
    let (vni, _) = tunnel.unwrap();
    // Taken away, and the VNI held by a device the node's namespace has of its own.
    for (pod, config) in [(&r1, &c1), (&r2, &c2)] {
        assert_eq!(call(pod, "DEL", config).code, 0);
    }
    let squat = n1
        .ns
        .exec(Command::new("ip").args([
            "link",
            "add",
            "squat0",
            "type",
            "vxlan",
            "id",
            &vni.to_string(),
            "remote",
            "192.0.2.9",
            "dstport",
            "4789",
        ]))
        .unwrap();
    assert!(squat.status.success(), "{squat:?}");
    // r1's ADD joins at once if n1 has not yet heard that r2 went (and fails naming the
    // VNI); else r2's ADD brings the join, and the pass's report names it.
    let added = call(&r1, "ADD", &c1);
    assert_eq!(call(&r2, "ADD", &c2).code, 0);
    let named = format!("VNI {vni}");
    if added.code == 0 {
        assert!(
            eventually(WAIT, || n1.log().contains(&named)),
            "{}",
            n1.log()
        );
        assert_ne!(call(&r1, "CHECK", &c1).code, 0);
    } else {
        assert!(
            added.output.to_string().contains(&named),
            "{}",
            added.output
        );
    }
    assert!(!r1.has("eth1"));
    // The VNI freed, the wire joins.
    let freed = n1
        .ns
        .exec(Command::new("ip").args(["link", "del", "squat0"]))
        .unwrap();
    assert!(freed.status.success());
    if added.code == 0 {
        n1.apply(&topology("vxlan"));
    } else {
        assert_eq!(call(&r1, "ADD", &c1).code, 0, "{}", n1.log());
    }
    assert!(eventually(WAIT, || r1.has("eth1")), "{}", n1.log());
}
