//! `plan` on literal fixtures: each row a node as it was found, and the actions that
//! bring it to its topologies. Among them, every repair the restart tests make on real
//! namespaces (`control/tests/restart.rs`); here without root, in microseconds.

// Fixtures read better as literal arrays of clones than as `slice::from_ref`.
#![allow(clippy::cloned_ref_to_slice_refs)]

use std::net::IpAddr;

use xwire_proto::local::PodRef;

use super::*;
use crate::interfaces;
use xwire_proto::control::Carrier;

const NODE: &str = "n1";

fn attachment(pod: &str) -> AttachmentRecord {
    AttachmentRecord {
        container_id: format!("c-{pod}"),
        ifname: "eth0".into(),
        network: "xwire".into(),
        pod: PodRef {
            namespace: "lab".into(),
            name: pod.into(),
        },
        netns: format!("/run/netns/{pod}"),
        netns_id: None,
    }
}

fn link(uid: u64, peer: &str, intf: &str) -> LinkSpec {
    LinkSpec::bare(uid, peer, intf)
}

fn record(pod: &str, link: &LinkSpec, state: WireState) -> WireRecord {
    let wire_ifname = match state {
        WireState::Pending | WireState::Vxlan => String::new(),
        WireState::Veth => link.peer_intf.clone(),
        WireState::Remote | WireState::Switched => format!("xw-{pod}-{}", link.uid),
    };
    WireRecord {
        node_name: NODE.into(),
        link_uid: link.uid,
        topo_namespace: "lab".into(),
        local_pod_netns: format!("/run/netns/{pod}"),
        local_pod_netns_id: None,
        local_pod_name: pod.into(),
        local_pod_ip: link.local_ip.map(crate::topology::format_cidr),
        local_pod_ifname: link.local_intf.clone(),
        wire_ifname,
        peer_intf_id: xwire_proto::WireId(0),
        peer_node_ip: None,
        peer_pod: link.peer_pod.clone(),
        peer_node: state.crosses_nodes().then(|| "n2".into()),
        state,
        container_id: format!("c-{pod}"),
    }
}

/// An interface as the kernel would report one xwire made (up, 1500, our alias).
fn ours(pod: &str, uid: u64) -> InterfaceState {
    InterfaceState {
        up: true,
        mtu: 1500,
        mac: [2, 0, 0, 0, 0, 1],
        alias: Some(interfaces::pod_alias("lab", pod, uid)),
        addresses: Vec::new(),
        tunnel: None,
    }
}

fn node_end(pod: &str, uid: u64) -> InterfaceState {
    InterfaceState {
        alias: Some(interfaces::node_alias(NODE, "lab", pod, uid)),
        ..ours(pod, uid)
    }
}

/// A node to fill in: pods, records, interfaces and ports.
#[derive(Default)]
struct Fixture {
    desired: Desired,
    observed: Observed,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            desired: Desired::default(),
            observed: Observed {
                node_name: NODE.into(),
                whole_node: true,
                ..Observed::default()
            },
        }
    }

    fn pod(mut self, pod: &str, links: &[LinkSpec], interfaces: &[(&str, InterfaceState)]) -> Self {
        let attachment = attachment(pod);
        let seen = interfaces
            .iter()
            .map(|(name, state)| (name.to_string(), state.clone()))
            .collect();
        self.observed
            .pods
            .insert(attachment.key(), PodNetns::Open(seen));
        self.desired.pods.push(DesiredPod {
            attachment,
            links: Arc::new(links.to_vec()),
        });
        self
    }

    fn netns(mut self, pod: &str, netns: PodNetns) -> Self {
        self.observed.pods.insert(attachment(pod).key(), netns);
        self
    }

    fn records(mut self, records: &[WireRecord]) -> Self {
        for r in records {
            self.observed.records.insert(r.key(), r.clone());
        }
        self
    }

    fn node_interfaces(mut self, interfaces: &[(&str, InterfaceState)]) -> Self {
        for (name, state) in interfaces {
            self.observed
                .node_interfaces
                .insert(name.to_string(), state.clone());
        }
        self
    }

    fn ports(mut self, keys: &[&str]) -> Self {
        self.observed.ports = keys.iter().map(|&k| EndKey::from(k)).collect();
        self
    }

    fn remote_end(mut self, uid: u64, pod: &str) -> Self {
        let key = WireKey::new("lab", uid);
        self.desired.remote_ends.insert(key, pod.into());
        self
    }

    fn plan(&self) -> Vec<Action> {
        plan(&self.desired, &self.observed)
    }
}

fn join(pod: &str, uid: u64) -> Action {
    Action::Join {
        attachment: attachment(pod).key(),
        uid,
        why: "joined",
        half_made: false,
    }
}

#[test]
fn a_same_node_wire_goes_onto_the_switch_path_when_impaired_and_back_when_not() {
    let to_r2 = link(1, "r2", "eth1");
    let r2_back = link(1, "r1", "eth1");
    let wire = WireKey::new("lab", 1);
    let pods = |state: WireState, switched: bool| {
        let mut f = Fixture::new()
            .pod("r1", &[to_r2.clone()], &[("eth1", ours("r1", 1))])
            .pod("r2", &[r2_back.clone()], &[("eth1", ours("r2", 1))])
            .records(&[record("r1", &to_r2, state), record("r2", &r2_back, state)]);
        if switched {
            f.desired.switched.insert(wire.clone());
        }
        f
    };
    let rebuild = vec![Action::Rebuild {
        attachment: attachment("r1").key(),
        uid: 1,
    }];
    let in_place = |f: Fixture| {
        f.node_interfaces(&[
            ("xw-r1-1", node_end("r1", 1)),
            ("xw-r2-1", node_end("r2", 1)),
        ])
    };
    let table: Vec<(&str, Fixture, Vec<Action>)> = vec![
        (
            "a veth wire, not impaired: nothing",
            pods(WireState::Veth, false),
            vec![],
        ),
        (
            "a veth wire now impaired: made again, switched",
            pods(WireState::Veth, true),
            rebuild.clone(),
        ),
        (
            "a switched wire in place with both ports: nothing",
            in_place(pods(WireState::Switched, true)).ports(&["lab/r1/1", "lab/r2/1"]),
            vec![],
        ),
        (
            "a switched wire after a restart: each end's port opened again",
            in_place(pods(WireState::Switched, true)),
            vec![
                Action::Reattach {
                    attachment: attachment("r1").key(),
                    uid: 1,
                },
                Action::Reattach {
                    attachment: attachment("r2").key(),
                    uid: 1,
                },
            ],
        ),
        (
            "a switched wire with a node end gone: made again",
            pods(WireState::Switched, true).ports(&["lab/r1/1", "lab/r2/1"]),
            rebuild.clone(),
        ),
        (
            "a switched wire no longer impaired: back to a veth",
            in_place(pods(WireState::Switched, false)).ports(&["lab/r1/1", "lab/r2/1"]),
            rebuild,
        ),
    ];
    for (case, fixture, expected) in table {
        assert_eq!(fixture.plan(), expected, "{case}");
    }
}

#[test]
fn a_vxlan_end_is_kept_as_made_and_made_again_when_it_is_not() {
    let mut to_r3 = link(2, "r3", "eth2");
    to_r3.carrier = Some(Carrier::Vxlan);
    let mut vxlan = record("r1", &to_r3, WireState::Vxlan);
    vxlan.peer_node_ip = Some("192.0.2.2:7470".into());
    let device = |tunnel| InterfaceState {
        tunnel,
        ..ours("r1", 2)
    };
    let as_made = crate::node::vxlan::tunnel_of(&vxlan);
    assert!(as_made.is_some());
    let moved = as_made.map(|t| interfaces::Tunnel {
        remote: "192.0.2.3".parse().unwrap(),
        ..t
    });
    let with = |interfaces: &[(&str, InterfaceState)], record: &WireRecord| {
        Fixture::new()
            .pod("r1", &[to_r3.clone()], interfaces)
            .records(&[record.clone()])
    };
    let repair = vec![Action::RepairRemote {
        attachment: attachment("r1").key(),
        uid: 2,
    }];
    let quic_record = record("r1", &to_r3, WireState::Remote);
    let table: Vec<(&str, Fixture, Vec<Action>)> = vec![
        (
            "its device in the pod with its tunnel: nothing, no port, no node end",
            with(&[("eth2", device(as_made))], &vxlan),
            vec![],
        ),
        (
            "its device gone: made again",
            with(&[], &vxlan),
            repair.clone(),
        ),
        (
            "its device's tunnel to another address: made again",
            with(&[("eth2", device(moved))], &vxlan),
            repair.clone(),
        ),
        (
            "an interface of its name that is not xwire's: left, and said",
            with(
                &[(
                    "eth2",
                    InterfaceState {
                        alias: None,
                        ..device(as_made)
                    },
                )],
                &vxlan,
            ),
            vec![Action::Foreign {
                key: vxlan.key(),
                ifname: "eth2".into(),
                alias: None,
            }],
        ),
        (
            "a QUIC end whose link now says vxlan: made anew",
            with(&[("eth2", ours("r1", 2))], &quic_record),
            vec![Action::Rebuild {
                attachment: attachment("r1").key(),
                uid: 2,
            }],
        ),
        (
            "a VXLAN end whose link no longer says vxlan: made anew",
            Fixture::new()
                .pod("r1", &[link(2, "r3", "eth2")], &[("eth2", device(as_made))])
                .records(&[vxlan.clone()]),
            vec![Action::Rebuild {
                attachment: attachment("r1").key(),
                uid: 2,
            }],
        ),
        (
            "its far end let go of: back to pending",
            {
                let mut f = with(&[("eth2", device(as_made))], &vxlan);
                f.desired
                    .withdrawn
                    .insert(WireKey::new("lab", 2), "n2".into());
                f
            },
            vec![Action::Unjoin { key: vxlan.key() }],
        ),
        (
            "the node's interfaces unreadable: a VXLAN end, which has none there, is judged",
            {
                let mut f = with(&[], &vxlan);
                f.observed.node_unreadable = Some("EMFILE".into());
                f
            },
            [
                vec![Action::Unreachable {
                    pod: "node n1".into(),
                    reason: "EMFILE".into(),
                }],
                repair,
            ]
            .concat(),
        ),
    ];
    for (case, fixture, expected) in table {
        assert_eq!(fixture.plan(), expected, "{case}");
    }
}

#[test]
fn a_vxlan_end_bridged_through_the_switch_is_kept_reopened_or_made_anew() {
    let mut to_r3 = link(2, "r3", "eth2");
    to_r3.carrier = Some(Carrier::Vxlan);
    let mut bridged = record("r1", &to_r3, WireState::Vxlan);
    bridged.peer_node_ip = Some("192.0.2.2:7470".into());
    bridged.wire_ifname = "xw-r1-2".into();
    let mut direct = bridged.clone();
    direct.wire_ifname.clear();
    let tunnel_name = crate::node::vxlan::tunnel_ifname("lab", "r1", 2);
    let tunnel = InterfaceState {
        tunnel: crate::node::vxlan::tunnel_of(&bridged),
        ..node_end("r1", 2)
    };
    let wire = WireKey::new("lab", 2);
    let fixture = |record: &WireRecord, wanted: bool, node: &[(&str, InterfaceState)]| {
        let mut f = Fixture::new()
            .pod("r1", &[to_r3.clone()], &[("eth2", ours("r1", 2))])
            .records(&[record.clone()])
            .node_interfaces(node);
        if wanted {
            f.desired.bridged.insert(wire.clone());
        }
        f
    };
    let both = [
        ("xw-r1-2", node_end("r1", 2)),
        (tunnel_name.as_str(), tunnel.clone()),
    ];
    let rebuild = vec![Action::Rebuild {
        attachment: attachment("r1").key(),
        uid: 2,
    }];
    let table: Vec<(&str, Fixture, Vec<Action>)> = vec![
        (
            "in place, its pod side's port open: nothing (the sweep keeps both devices)",
            fixture(&bridged, true, &both).ports(&["lab/r1/2"]),
            vec![],
        ),
        (
            "in place after a restart: its ports opened again",
            fixture(&bridged, true, &both),
            vec![Action::Reattach {
                attachment: attachment("r1").key(),
                uid: 2,
            }],
        ),
        (
            "its tunnel on the node gone: made anew",
            fixture(&bridged, true, &both[..1]).ports(&["lab/r1/2"]),
            rebuild.clone(),
        ),
        (
            "no longer impaired or captured: made anew, a device in the pod",
            fixture(&bridged, false, &both).ports(&["lab/r1/2"]),
            rebuild.clone(),
        ),
        (
            "a device in the pod, now impaired: made anew, bridged",
            fixture(&direct, true, &[]),
            rebuild,
        ),
    ];
    for (case, fixture, expected) in table {
        assert_eq!(fixture.plan(), expected, "{case}");
    }
}

#[test]
fn each_state_of_a_node_gets_its_plan() {
    let to_r2 = link(1, "r2", "eth1");
    let to_r3 = link(2, "r3", "eth2");
    let r2_back = link(1, "r1", "eth1");
    let remote = record("r1", &to_r3, WireState::Remote);
    let remote_in_place = || {
        Fixture::new()
            .pod("r1", &[to_r3.clone()], &[("eth2", ours("r1", 2))])
            .records(&[remote.clone()])
            .node_interfaces(&[("xw-r1-2", node_end("r1", 2))])
    };
    let table: Vec<(&str, Fixture, Vec<Action>)> = vec![
        (
            "a remote end in place with its port: nothing to do",
            remote_in_place().ports(&["lab/r1/2"]),
            vec![],
        ),
        (
            "a daemon restarted (kill -9): the port of each remote end is opened again",
            remote_in_place(),
            vec![Action::Reattach {
                attachment: attachment("r1").key(),
                uid: 2,
            }],
        ),
        (
            "a remote end whose pod interface was deleted is made again",
            Fixture::new()
                .pod("r1", &[to_r3.clone()], &[])
                .records(&[remote.clone()])
                .node_interfaces(&[("xw-r1-2", node_end("r1", 2))])
                .ports(&["lab/r1/2"]),
            vec![Action::RepairRemote {
                attachment: attachment("r1").key(),
                uid: 2,
            }],
        ),
        (
            "a remote end whose node interface was deleted is made again",
            Fixture::new()
                .pod("r1", &[to_r3.clone()], &[("eth2", ours("r1", 2))])
                .records(&[remote.clone()]),
            vec![Action::RepairRemote {
                attachment: attachment("r1").key(),
                uid: 2,
            }],
        ),
        (
            "an interface of the end's name that xwire did not make is left alone",
            Fixture::new()
                .pod(
                    "r1",
                    &[to_r3.clone()],
                    &[(
                        "eth2",
                        InterfaceState {
                            alias: None,
                            ..ours("r1", 2)
                        },
                    )],
                )
                .records(&[remote.clone()]),
            vec![Action::Foreign {
                key: "lab/r1/2".into(),
                ifname: "eth2".into(),
                alias: None,
            }],
        ),
        (
            "a same-node veth whose end is gone is made again, once for both ends",
            Fixture::new()
                .pod("r1", &[to_r2.clone()], &[])
                .pod("r2", &[r2_back.clone()], &[("eth1", ours("r2", 1))])
                .records(&[
                    record("r1", &to_r2, WireState::Veth),
                    record("r2", &r2_back, WireState::Veth),
                ]),
            vec![Action::RemakeVeth {
                attachment: attachment("r1").key(),
                uid: 1,
            }],
        ),
        (
            "a link added while the daemon was down is joined, once for both ends",
            Fixture::new()
                .pod("r1", &[to_r2.clone()], &[])
                .pod("r2", &[r2_back.clone()], &[]),
            vec![join("r1", 1)],
        ),
        (
            "a pending end whose far end another node announced is joined",
            Fixture::new()
                .pod("r1", &[to_r3.clone()], &[])
                .records(&[record("r1", &to_r3, WireState::Pending)])
                .remote_end(2, "r3"),
            vec![join("r1", 2)],
        ),
        (
            "a pending end whose far end is nowhere waits",
            Fixture::new()
                .pod("r1", &[to_r3.clone()], &[])
                .records(&[record("r1", &to_r3, WireState::Pending)])
                .remote_end(2, "r9"),
            vec![],
        ),
        (
            "a pod whose namespace is gone is forgotten, its wires with it",
            Fixture::new()
                .pod("r1", &[to_r3.clone()], &[])
                .netns("r1", PodNetns::Gone)
                .records(&[remote.clone()])
                .node_interfaces(&[("xw-r1-2", node_end("r1", 2))])
                .ports(&["lab/r1/2"]),
            vec![Action::ForgetPod {
                attachment: attachment("r1").key(),
            }],
        ),
        (
            "a pod whose namespace cannot be opened now is left as it is",
            remote_in_place()
                .netns("r1", PodNetns::Unreadable("EMFILE".into()))
                .ports(&["lab/r1/2"]),
            vec![Action::Unreachable {
                pod: "lab/r1".into(),
                reason: "EMFILE".into(),
            }],
        ),
        (
            "a node whose interfaces cannot be listed judges no remote end and sweeps nothing",
            Fixture {
                observed: Observed {
                    node_unreadable: Some("EMFILE".into()),
                    ..remote_in_place().observed
                },
                ..remote_in_place()
            }
            .node_interfaces(&[("xw-old", node_end("r7", 7))]),
            vec![Action::Unreachable {
                pod: "node n1".into(),
                reason: "EMFILE".into(),
            }],
        ),
        (
            "a link gone from the topology: its wire goes",
            Fixture::new()
                .pod("r1", &[], &[("eth2", ours("r1", 2))])
                .records(&[remote.clone()])
                .node_interfaces(&[("xw-r1-2", node_end("r1", 2))])
                .ports(&["lab/r1/2"]),
            vec![Action::RemoveWire {
                key: "lab/r1/2".into(),
                why: "not in the topology any more: removed",
            }],
        ),
        (
            "records with no attachment go, and ports and node interfaces nobody names",
            Fixture::new()
                .records(&[remote.clone()])
                .node_interfaces(&[
                    ("xw-r1-2", node_end("r1", 2)),
                    ("xw-old", node_end("r7", 7)),
                    (
                        "other",
                        InterfaceState {
                            alias: Some("someone else's".into()),
                            ..ours("r1", 1)
                        },
                    ),
                ])
                .ports(&["lab/r1/2", "lab/r7/7"]),
            vec![
                Action::RemoveWire {
                    key: "lab/r1/2".into(),
                    why: "no attachment: removed",
                },
                Action::ClosePort {
                    key: "lab/r7/7".into(),
                },
                Action::RemoveNodeInterface {
                    name: "xw-old".into(),
                    alias: interfaces::node_alias(NODE, "lab", "r7", 7),
                },
            ],
        ),
        (
            "an end that is down, of another MTU or without its address is set again",
            Fixture::new()
                .pod(
                    "r1",
                    &[LinkSpec {
                        mtu: Some(9000),
                        local_ip: Some(("10.0.0.1".parse().unwrap(), 30)),
                        ..to_r3.clone()
                    }],
                    &[(
                        "eth2",
                        InterfaceState {
                            up: false,
                            ..ours("r1", 2)
                        },
                    )],
                )
                .records(&[remote.clone()])
                .node_interfaces(&[("xw-r1-2", node_end("r1", 2))])
                .ports(&["lab/r1/2"]),
            vec![Action::Configure {
                attachment: attachment("r1").key(),
                uid: 2,
                differs: vec![
                    "eth2 is down".into(),
                    "eth2 has MTU 1500, the topology says 9000".into(),
                    "eth2 lacks the address 10.0.0.1/30".into(),
                ],
            }],
        ),
    ];
    for (case, fixture, want) in table {
        assert_eq!(fixture.plan(), want, "{case}");
    }
}

#[test]
fn an_end_with_its_address_and_settings_as_the_topology_says_needs_nothing() {
    let to_r3 = LinkSpec {
        mtu: Some(9000),
        local_ip: Some(("10.0.0.1".parse().unwrap(), 30)),
        local_mac: Some([2, 0, 0, 0, 0, 1]),
        ..link(2, "r3", "eth2")
    };
    let address: (IpAddr, u8) = ("10.0.0.1".parse().unwrap(), 30);
    let seen = InterfaceState {
        mtu: 9000,
        addresses: vec![address],
        ..ours("r1", 2)
    };
    let fixture = Fixture::new()
        .pod("r1", &[to_r3.clone()], &[("eth2", seen)])
        .records(&[record("r1", &to_r3, WireState::Remote)])
        .node_interfaces(&[("xw-r1-2", node_end("r1", 2))])
        .ports(&["lab/r1/2"]);
    assert_eq!(fixture.plan(), vec![]);
}

#[test]
fn a_plan_for_one_pod_leaves_the_others_and_sweeps_nothing() {
    let to_r3 = link(2, "r3", "eth2");
    let mut fixture = Fixture::new()
        .pod("r1", &[to_r3.clone()], &[])
        .records(&[
            record("r1", &to_r3, WireState::Pending),
            record("gone", &link(5, "x", "eth5"), WireState::Remote),
        ])
        .node_interfaces(&[("xw-old", node_end("r7", 7))])
        .ports(&["lab/r7/7"])
        .remote_end(2, "r3");
    // r2 is attached but not looked at.
    fixture.desired.pods.push(DesiredPod {
        attachment: attachment("r2"),
        links: Arc::new(vec![link(1, "r1", "eth1")]),
    });
    fixture.observed.whole_node = false;
    assert_eq!(fixture.plan(), vec![join("r1", 2)]);
    let concerns: Vec<bool> = fixture
        .plan()
        .iter()
        .map(|a| a.concerns(&attachment("r1")))
        .collect();
    assert_eq!(concerns, [true]);
    assert!(!join("r1", 2).concerns(&attachment("r2")));
}

#[test]
fn what_differs_is_said_in_words() {
    assert_eq!(
        Action::Reattach {
            attachment: "c/eth0".into(),
            uid: 3
        }
        .describe(),
        "link uid 3: its wire has no fast-path port"
    );
    assert_eq!(join("r1", 4).describe(), "link uid 4 is to be joined");
}

#[test]
fn an_end_whose_link_changed_is_made_anew_once_for_both_ends() {
    let to_r2 = link(1, "r2", "eth1");
    let r2_back = link(1, "r1", "eth1");
    let node = || {
        Fixture::new()
            .pod("r1", &[to_r2.clone()], &[("eth1", ours("r1", 1))])
            .pod("r2", &[r2_back.clone()], &[("eth1", ours("r2", 1))])
            .records(&[
                record("r1", &to_r2, WireState::Veth),
                record("r2", &r2_back, WireState::Veth),
            ])
    };
    assert_eq!(node().plan(), vec![]);
    let rebuild = Action::Rebuild {
        attachment: attachment("r1").key(),
        uid: 1,
    };
    // A topology apply changed the link (its MTU, say).
    let mut changed = node();
    changed.desired.rebuild.insert("lab/r1/1".into());
    assert_eq!(changed.plan(), vec![rebuild.clone()]);
    // The link now names another interface than the one the wire was made with.
    let mut renamed = node();
    Arc::make_mut(&mut renamed.desired.pods[0].links)[0].local_intf = "eth9".into();
    assert_eq!(renamed.plan(), vec![rebuild]);
}

#[test]
fn a_detached_pod_loses_its_wires_and_nothing_else_is_touched() {
    let to_r3 = link(2, "r3", "eth2");
    let mut fixture = Fixture::new()
        .records(&[
            record("r1", &to_r3, WireState::Remote),
            record("r1", &link(3, "r4", "eth3"), WireState::Pending),
            record("r2", &to_r3, WireState::Pending),
        ])
        .ports(&["lab/r7/7"]);
    fixture.observed.whole_node = false;
    fixture.observed.detached = Some(attachment("r1").pod);
    let removed = |key: &str| Action::RemoveWire {
        key: key.into(),
        why: "no attachment: removed",
    };
    assert_eq!(
        fixture.plan(),
        vec![removed("lab/r1/2"), removed("lab/r1/3")]
    );
}

#[test]
fn an_end_whose_far_end_its_node_let_go_of_goes_back_to_pending() {
    let to_r3 = link(2, "r3", "eth2");
    let mut fixture = Fixture::new()
        .pod("r1", &[to_r3.clone()], &[("eth2", ours("r1", 2))])
        .records(&[record("r1", &to_r3, WireState::Remote)])
        .node_interfaces(&[("xw-r1-2", node_end("r1", 2))])
        .ports(&["lab/r1/2"]);
    let wire = WireKey::new("lab", 2);
    // Another node letting go of it changes nothing: the wire is joined to n2.
    fixture.desired.withdrawn.insert(wire.clone(), "n3".into());
    assert_eq!(fixture.plan(), vec![]);
    fixture.desired.withdrawn.insert(wire, "n2".into());
    assert_eq!(
        fixture.plan(),
        vec![Action::Unjoin {
            key: "lab/r1/2".into()
        }]
    );
}

#[test]
fn a_remote_end_made_but_not_recorded_is_kept_and_joined_with_the_interfaces_it_has() {
    // A run stopped between making both interfaces and writing the end's record: the
    // record still says pending. Until the far end is known, the node end is not swept
    // (its pod end would go with it); once it is, the join takes both as they are.
    let to_r3 = link(2, "r3", "eth2");
    let fixture = || {
        Fixture::new()
            .pod("r1", &[to_r3.clone()], &[("eth2", ours("r1", 2))])
            .records(&[record("r1", &to_r3, WireState::Pending)])
            .node_interfaces(&[("xw-r1-2", node_end("r1", 2))])
    };
    assert_eq!(fixture().plan(), vec![]);
    assert_eq!(
        fixture().remote_end(2, "r3").plan(),
        vec![Action::Join {
            attachment: attachment("r1").key(),
            uid: 2,
            why: "joined",
            half_made: true,
        }]
    );
    // The pod's interface is someone else's: the node end is not this end's half.
    let foreign = InterfaceState {
        alias: Some("someone else's".into()),
        ..ours("r1", 2)
    };
    let with_foreign = Fixture::new()
        .pod("r1", &[to_r3.clone()], &[("eth2", foreign)])
        .records(&[record("r1", &to_r3, WireState::Pending)])
        .node_interfaces(&[("xw-r1-2", node_end("r1", 2))]);
    assert_eq!(
        with_foreign.plan(),
        vec![Action::RemoveNodeInterface {
            name: "xw-r1-2".into(),
            alias: interfaces::node_alias(NODE, "lab", "r1", 2),
        }]
    );
}
