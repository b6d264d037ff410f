//! Wires outlive the daemon: two nodes with local and remote wires, traffic flowing on
//! every wire, and a daemon killed (`kill -9`) and started again in the middle of it.
//! After each, every wire forwards again, the pods' interfaces are the very ones they had
//! (never recreated), wires that do not go through the restarted daemon lose nothing,
//! and the store says exactly what exists on the node.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use support::{call, eventually, Node, Pod, TempDir};
use xwire_control::store::{EmbeddedStore, EndKey, WireState, WireStore};
use xwire_proto::local::{Request, Response, TopologyQuery};
use xwire_proto::WireId;
use xwire_testbed::Flow;

/// (uid, pod, interface, pod, interface)
type LinkSpec = (u64, &'static str, &'static str, &'static str, &'static str);

/// r1 and r2 on n1, r3 and r4 on n2: a local wire on each node, two across them.
const LINKS: &[LinkSpec] = &[
    (1, "r1", "eth1", "r2", "eth1"),
    (2, "r3", "eth1", "r4", "eth1"),
    (3, "r1", "eth2", "r3", "eth2"),
    (4, "r4", "eth2", "r2", "eth2"),
];
const PODS: &[(&str, &str)] = &[("r1", "n1"), ("r2", "n1"), ("r3", "n2"), ("r4", "n2")];
const TIMEOUT: Duration = Duration::from_secs(20);

/// Topology objects (YAML) for every pod named in `links` (and in `pods`).
fn topology(pods: &[&str], links: &[LinkSpec]) -> String {
    let mut docs = Vec::new();
    for pod in pods {
        let mut text = format!(
            "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {{name: {pod}, namespace: lab}}\nspec:\n  links:\n"
        );
        for &(uid, a, a_if, b, b_if) in links {
            let (me, peer, peer_if) = match (a == *pod, b == *pod) {
                (true, _) => (a_if, b, b_if),
                (_, true) => (b_if, a, a_if),
                _ => continue,
            };
            text += &format!(
                "  - {{uid: {uid}, peer_pod: {peer}, local_intf: {me}, peer_intf: {peer_if}}}\n"
            );
        }
        if text.ends_with("links:\n") {
            text = text.replace("  links:\n", "  links: []\n");
        }
        // r1 and r2 run on n1, the others on n2.
        let node_ip = match *pod {
            "r1" | "r2" => support::N1_IP,
            _ => support::N2_IP,
        };
        text += &format!("status: {{src_ip: {node_ip}}}\n");
        docs.push(text);
    }
    docs.join("---\n")
}

struct Lab {
    _certs: TempDir,
    nodes: BTreeMap<&'static str, Node>,
    pods: BTreeMap<&'static str, (Pod, &'static str)>,
}

impl Lab {
    /// Two nodes, the four pods attached and every wire joined.
    fn up(links: &[LinkSpec], extra_pods: &[&str]) -> Lab {
        Lab::up_configured(links, extra_pods, "")
    }

    /// As `up`, with `extra` in both daemons' configuration.
    fn up_configured(links: &[LinkSpec], extra_pods: &[&str], extra: &str) -> Lab {
        let certs = TempDir::new("certs");
        let (n1, n2) = support::two_nodes_configured(&certs, extra);
        let mut names: Vec<&str> = PODS.iter().map(|(p, _)| *p).collect();
        names.extend_from_slice(extra_pods);
        let yaml = topology(&names, links);
        n1.apply(&yaml);
        n2.apply(&yaml);
        let mut lab = Lab {
            _certs: certs,
            nodes: BTreeMap::from([("n1", n1), ("n2", n2)]),
            pods: BTreeMap::new(),
        };
        for &(pod, node) in PODS {
            lab.pods.insert(pod, (Pod::new(pod), node));
            lab.add(pod);
        }
        let between_pods: Vec<LinkSpec> = links
            .iter()
            .copied()
            .filter(|(_, a, _, b, _)| lab.pods.contains_key(a) && lab.pods.contains_key(b))
            .collect();
        lab.wait_joined(&between_pods);
        lab
    }

    fn node(&self, name: &str) -> &Node {
        &self.nodes[name]
    }

    fn node_mut(&mut self, name: &str) -> &mut Node {
        self.nodes.get_mut(name).unwrap()
    }

    fn pod(&self, name: &str) -> &Pod {
        &self.pods[name].0
    }

    fn add(&self, pod: &str) {
        let (p, node) = &self.pods[pod];
        let added = call(p, "ADD", &self.node(node).net_config("1.1.0"));
        assert_eq!(added.code, 0, "{}", added.output);
    }

    /// Until every end of `links` has its interface and its node has recorded it as
    /// joined: a daemon makes the interfaces first and writes the record after, and a
    /// test that stops a daemon in between finds a pending record (failed 1 run in 8 of
    /// the suite under load).
    fn wait_joined(&self, links: &[LinkSpec]) {
        let recorded = |pod: &str, uid: u64| {
            let node = self.node(self.pods[pod].1);
            node.wire_state(pod, uid)
                .is_some_and(|state| state != "pending")
        };
        let joined = eventually(TIMEOUT, || {
            links.iter().all(|&(uid, a, a_if, b, b_if)| {
                self.pod(a).has(a_if)
                    && self.pod(b).has(b_if)
                    && recorded(a, uid)
                    && recorded(b, uid)
            })
        });
        assert!(joined, "{}", self.logs());
    }

    fn flow(&self, (uid, a, a_if, b, b_if): LinkSpec) -> Flow {
        Flow::start(
            &format!("uid {uid}"),
            (&self.pod(a).ns, a_if),
            (&self.pod(b).ns, b_if),
            uid as u8,
            Duration::from_millis(2),
        )
        .unwrap()
    }

    /// Every pod's interfaces and their indexes: an interface made again gets a new one.
    fn interface_indexes(&self) -> BTreeMap<String, u32> {
        let mut found = BTreeMap::new();
        for (name, (pod, _)) in &self.pods {
            for ifname in pod.ns.links().unwrap() {
                if ifname != "lo" {
                    let index = pod.ns.ifindex(&ifname).unwrap();
                    found.insert(format!("{name}:{ifname}"), index);
                }
            }
        }
        found
    }

    /// After a restart that brought a new link (the last of `links`): it forwards, the
    /// old wires' flows forward, and both stores match their nodes.
    fn converged_with_new_link(&self, links: &[LinkSpec], flows: &[Flow]) {
        self.wait_joined(links);
        let new = self.flow(*links.last().expect("a new link"));
        assert!(new.forwards(20, TIMEOUT), "{}", self.logs());
        for flow in flows {
            assert!(flow.forwards(20, TIMEOUT), "{}: {}", flow.name, self.logs());
        }
        for node in ["n1", "n2"] {
            self.assert_store_matches(node);
        }
    }

    fn logs(&self) -> String {
        self.nodes
            .values()
            .map(|n| format!("--- {}\n{}", n.name, n.log()))
            .collect()
    }

    /// The store of `node` says exactly what exists there, and a reconcile pass finds
    /// nothing to change.
    fn assert_store_matches(&self, node: &str) {
        let n = self.node(node);
        let state = n.state();
        let mut expected_pod_ifs = BTreeSet::new();
        let mut expected_node_ifs = BTreeSet::new();
        for wire in &state.wires {
            let text = |k: &str| wire[k].as_str().unwrap_or_default().to_owned();
            let (pod, ifname) = (text("local_pod_name"), text("local_pod_ifname"));
            let present = self.pod(&pod).has(&ifname);
            match text("state").as_str() {
                "pending" => assert!(!present, "{pod}:{ifname} exists for a pending wire"),
                "veth" => {
                    assert!(present, "{pod}:{ifname} missing");
                    expected_pod_ifs.insert(format!("{pod}:{ifname}"));
                }
                "remote" => {
                    assert!(present, "{pod}:{ifname} missing");
                    expected_pod_ifs.insert(format!("{pod}:{ifname}"));
                    expected_node_ifs.insert(text("wire_ifname"));
                }
                other => panic!("state {other}"),
            }
        }
        let attached: BTreeSet<String> = state
            .attachments
            .iter()
            .map(|a| a["pod"]["name"].as_str().unwrap().to_owned())
            .collect();
        let actual_pod_ifs: BTreeSet<String> = self
            .pods
            .iter()
            .filter(|(name, _)| attached.contains(**name))
            .flat_map(|(name, (pod, _))| {
                pod.ns
                    .links()
                    .unwrap()
                    .into_iter()
                    .filter(|l| l != "lo")
                    .map(move |l| format!("{name}:{l}"))
            })
            .collect();
        assert_eq!(actual_pod_ifs, expected_pod_ifs, "{node}: pod interfaces");
        let actual_node_ifs: BTreeSet<String> =
            n.ns.links()
                .unwrap()
                .into_iter()
                .filter(|l| l.starts_with("xw"))
                .collect();
        assert_eq!(
            actual_node_ifs, expected_node_ifs,
            "{node}: node interfaces"
        );
        assert_eq!(
            reconcile(n),
            (vec![], vec![]),
            "{node}: a pass changed something"
        );
    }
}

fn reconcile(node: &Node) -> (Vec<String>, Vec<String>) {
    match node.ask(&Request::Reconcile).unwrap() {
        Response::Reconciled { changes, failures } => (changes, failures),
        other => panic!("{other:?}"),
    }
}

fn wire_record(node: &Node, pod: &str, uid: u64) -> Option<Value> {
    node.state()
        .wires
        .into_iter()
        .find(|w| w["local_pod_name"] == pod && w["link_uid"] == uid)
}

/// Kills the daemons of `nodes` while traffic flows on every wire, starts them again,
/// and checks what the module's doc promises.
fn kill_and_restart(nodes: &[&str]) {
    kill_and_restart_configured(nodes, "");
}

fn kill_and_restart_configured(nodes: &[&str], extra: &str) -> Lab {
    let mut lab = Lab::up_configured(LINKS, &[], extra);
    let flows: Vec<Flow> = LINKS.iter().map(|&l| lab.flow(l)).collect();
    for flow in &flows {
        assert!(
            flow.forwards(20, TIMEOUT),
            "{} before: {}",
            flow.name,
            lab.logs()
        );
    }
    let before = lab.interface_indexes();
    for node in nodes {
        lab.node_mut(node).stop();
    }
    std::thread::sleep(Duration::from_millis(300));
    for node in nodes {
        lab.node_mut(node).restart();
    }
    for flow in &flows {
        assert!(
            flow.forwards(20, TIMEOUT),
            "{} after: {}",
            flow.name,
            lab.logs()
        );
    }
    assert_eq!(
        lab.interface_indexes(),
        before,
        "pod interfaces were made again"
    );
    for node in ["n1", "n2"] {
        lab.assert_store_matches(node);
    }
    for flow in flows {
        let name = flow.name.clone();
        let counts = flow.stop();
        assert_eq!(counts.send_errors, 0, "{name}: {counts:?}");
        // The local wires (uid 1 and 2) are veths between pods: no daemon is on their path.
        if name == "uid 1" || name == "uid 2" {
            assert_eq!(counts.lost_on_the_way(), 0, "{name}: {counts:?}");
        }
    }
    lab
}

#[test]
fn kill_9_of_one_daemon() {
    kill_and_restart(&["n2"]);
}

#[test]
fn kill_9_of_both_daemons() {
    kill_and_restart(&["n1", "n2"]);
}

/// With two workers per node, the two remote wires (uids 3 and 4) are on different
/// workers, each worker with its own connection to its counterpart on the other node.
/// Both carry frames before and after a restart of one daemon, and the node's counters
/// are the two workers' together.
#[test]
fn two_workers_per_node_carry_their_wires_and_survive_a_restart() {
    let lab = kill_and_restart_configured(&["n1"], "data_cores = [0, 1]");
    let workers =
        |uid: u64| xwire_control::node::worker_index(xwire_proto::WireId::new("lab", uid), 2);
    assert_ne!(workers(3), workers(4), "the remote wires share a worker");
    for node in ["n1", "n2"] {
        let n = lab.node(node);
        let counters = match n.ask(&Request::Counters).unwrap() {
            Response::Counters(c) => c,
            other => panic!("{other:?}"),
        };
        assert_eq!(counters.workers, 2, "{node}: {counters:?}");
        let mut connections: Vec<(String, usize, bool)> = counters
            .peers
            .iter()
            .map(|p| (p.node.clone(), p.worker, p.up))
            .collect();
        connections.sort();
        let peer = if node == "n1" { "n2" } else { "n1" };
        assert_eq!(
            connections,
            [(peer.to_owned(), 0, true), (peer.to_owned(), 1, true)],
            "{node}"
        );
        for uid in [3, 4] {
            let end = counters
                .links
                .iter()
                .find(|l| l.uid == uid)
                .unwrap_or_else(|| panic!("{node}: no counters for uid {uid}: {counters:?}"));
            // The flows go one way: from r1 on uid 3, from r4 on uid 4.
            assert!(
                end.egress.frames + end.ingress.frames > 0,
                "{node}: {end:?}"
            );
        }
        // The transport's totals are the two workers' together.
        assert!(
            counters.transport["frames_sent"] > 0,
            "{node}: {counters:?}"
        );
        assert!(
            counters.transport["frames_received"] > 0,
            "{node}: {counters:?}"
        );
    }
}

#[test]
fn a_pod_deleted_while_its_daemon_is_down_is_forgotten_here_and_at_the_peer() {
    let mut lab = Lab::up(LINKS, &[]);
    let kept = lab.flow(LINKS[1]);
    let across = lab.flow((3, "r1", "eth2", "r3", "eth2"));
    lab.node_mut("n1").stop();
    // r2's container goes while n1's daemon is down: its namespace with it.
    let (r2, _) = lab.pods.remove("r2").unwrap();
    drop(r2);
    lab.node_mut("n1").restart();
    let forgotten = eventually(TIMEOUT, || {
        wire_record(lab.node("n1"), "r2", 1).is_none()
            && wire_record(lab.node("n2"), "r4", 4).is_some_and(|w| w["state"] == "pending")
    });
    assert!(forgotten, "{}", lab.logs());
    assert_eq!(
        wire_record(lab.node("n1"), "r1", 1).unwrap()["state"],
        "pending"
    );
    assert!(eventually(TIMEOUT, || !lab.pod("r4").has("eth2")));
    assert!(across.forwards(20, TIMEOUT), "{}", lab.logs());
    for node in ["n1", "n2"] {
        lab.assert_store_matches(node);
    }
    let counts = kept.stop();
    assert_eq!(counts.lost(), 0, "{counts:?}");
}

#[test]
fn a_pod_added_on_the_peer_while_a_daemon_is_down_is_joined_when_it_returns() {
    let mut links = LINKS.to_vec();
    links.push((5, "r1", "eth5", "r5", "eth1"));
    let mut lab = Lab::up(&links, &["r5"]);
    let flows: Vec<Flow> = LINKS.iter().map(|&l| lab.flow(l)).collect();
    lab.node_mut("n1").stop();
    lab.pods.insert("r5", (Pod::new("r5"), "n2"));
    lab.add("r5");
    lab.node_mut("n1").restart();
    lab.converged_with_new_link(&links, &flows);
}

#[test]
fn a_remote_end_made_but_not_recorded_when_its_daemon_died_keeps_its_pod_interface() {
    let mut lab = Lab::up(LINKS, &[]);
    let across = lab.flow(LINKS[3]);
    assert!(across.forwards(20, TIMEOUT), "{}", lab.logs());
    let before = lab.interface_indexes();
    lab.node_mut("n1").stop();
    // As a kill between making r2's end of uid 4 (both interfaces) and writing its record
    // would leave it: the record still pending.
    let store = EmbeddedStore::open(&lab.node("n1").dir.0.join("state")).unwrap();
    let key = EndKey::new("lab", "r2", 4);
    let mut record = store.wire(&key).unwrap().expect("r2's end of uid 4");
    assert_eq!(record.state, WireState::Remote);
    record.state = WireState::Pending;
    record.wire_ifname.clear();
    record.peer_node = None;
    record.peer_node_ip = None;
    record.peer_intf_id = WireId(0);
    store.put_wire(&record).unwrap();
    drop(store);
    lab.node_mut("n1").restart();
    assert!(across.forwards(20, TIMEOUT), "{}", lab.logs());
    assert_eq!(lab.interface_indexes(), before, "{}", lab.logs());
    assert_eq!(
        wire_record(lab.node("n1"), "r2", 4).unwrap()["state"],
        "remote"
    );
    for node in ["n1", "n2"] {
        lab.assert_store_matches(node);
    }
}

#[test]
fn a_link_added_while_its_daemon_is_down_is_joined_when_it_returns() {
    let mut lab = Lab::up(LINKS, &[]);
    let flows: Vec<Flow> = LINKS.iter().map(|&l| lab.flow(l)).collect();
    lab.node_mut("n2").stop();
    let mut links = LINKS.to_vec();
    links.push((6, "r2", "eth3", "r4", "eth3"));
    let names: Vec<&str> = PODS.iter().map(|(p, _)| *p).collect();
    let yaml = topology(&names, &links);
    lab.node("n1").apply(&yaml);
    // n2's daemon is down: the operator writes its store directly.
    let file = lab.node("n2").dir.0.join("topology.yaml");
    std::fs::write(&file, &yaml).unwrap();
    support::apply_offline(lab.node("n2"), &file);
    lab.node_mut("n2").restart();
    lab.converged_with_new_link(&links, &flows);
}

#[test]
fn a_store_a_running_daemon_holds_is_not_written_behind_its_back() {
    let lab = Lab::up(LINKS, &[]);
    let mut links = LINKS.to_vec();
    links.push((6, "r2", "eth3", "r4", "eth3"));
    let names: Vec<&str> = PODS.iter().map(|(p, _)| *p).collect();
    let file = lab.node("n2").dir.0.join("topology.yaml");
    std::fs::write(&file, topology(&names, &links)).unwrap();
    // `xwirectl` has the daemon's binary write the store, which the running daemon holds.
    let out = support::try_apply_offline(lab.node("n2"), &file);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("is its daemon still running?"), "{said}");
    let query = TopologyQuery {
        namespace: None,
        name: Some("r2".into()),
    };
    let Ok(Response::Topologies { objects }) = lab.node("n2").ask(&Request::TopologyGet(query))
    else {
        panic!("n2 does not answer with its topologies");
    };
    let uids: Vec<&Value> = objects[0]["spec"]["links"]
        .as_array()
        .unwrap()
        .iter()
        .map(|link| &link["uid"])
        .collect();
    assert!(!uids.contains(&&Value::from(6)), "{uids:?}");
}

#[test]
fn reconcile_repairs_once_and_then_has_nothing_to_do() {
    // No timed passes, and none pending: the passes counted are this test's own (a pass
    // of the daemon's between the deletions and the test's would repair first).
    let lab = Lab::up_configured(LINKS, &[], "reconcile_interval_secs = 0");
    let n1 = lab.node("n1");
    let quiet = eventually(TIMEOUT, || {
        // Longer than the daemon waits after its last event before its own pass.
        std::thread::sleep(Duration::from_millis(400));
        reconcile(n1) == (vec![], vec![])
    });
    assert!(quiet, "{}", lab.logs());
    // Someone deletes the local wire's veth, and the node end of a remote wire.
    lab.pod("r1").ns.delete_link("eth1").unwrap();
    let node_end = wire_record(n1, "r1", 3).unwrap()["wire_ifname"]
        .as_str()
        .unwrap()
        .to_owned();
    n1.ns.delete_link(&node_end).unwrap();
    let (changes, failures) = reconcile(n1);
    assert!(failures.is_empty(), "{failures:?}");
    assert!(
        changes.iter().any(|c| c.contains("lab/r1/1")),
        "{changes:?}"
    );
    assert!(
        changes.iter().any(|c| c.contains("lab/r1/3")),
        "{changes:?}"
    );
    assert_eq!(reconcile(n1), (vec![], vec![]));
    for (uid, a, a_if, b, b_if) in [LINKS[0], LINKS[2]] {
        let flow = lab.flow((uid, a, a_if, b, b_if));
        assert!(flow.forwards(20, TIMEOUT), "uid {uid}: {}", lab.logs());
    }
    lab.assert_store_matches("n1");
}

#[test]
fn a_remote_end_whose_pod_interface_is_someone_elses_is_not_rebuilt_over_it() {
    let mut lab = Lab::up(LINKS, &[]);
    lab.node_mut("n1").stop();
    // While n1's daemon is down, r1's end of the wire to r3 goes (its node end with
    // it), and something else makes an eth2 in r1.
    let r1 = &lab.pod("r1").ns;
    for args in [
        vec!["link", "del", "eth2"],
        vec![
            "link", "add", "eth2", "type", "veth", "peer", "name", "eth2p",
        ],
    ] {
        let out = r1.exec(Command::new("ip").args(args)).unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let foreign = r1.ifindex("eth2").unwrap();
    lab.node_mut("n1").restart();
    let Ok(Response::Reconciled { failures, .. }) = lab.node("n1").ask(&Request::Reconcile) else {
        panic!()
    };
    assert!(
        failures.iter().any(|f| f.contains("did not make")),
        "{failures:?}\n{}",
        lab.logs()
    );
    assert_eq!(
        lab.pod("r1").ns.ifindex("eth2").unwrap(),
        foreign,
        "xwire deleted an eth2 it did not make"
    );
}
