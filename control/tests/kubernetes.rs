//! Kubernetes mode against a real kube-apiserver and etcd (see support/apiserver.rs):
//! the CRDs and deploy manifests apply, two nodes running `xwired` with the Kubernetes
//! backend under the DaemonSet's ServiceAccount wire pods from Topology objects made
//! through the API, status is written, links follow their Topology, and a daemon
//! restarted with an empty state directory brings its wires back from the API alone.

mod support;

use std::time::Duration;

use kube::api::{Api, DynamicObject};
use serde_json::{json, Value};
use support::apiserver::{self, apply_objects, deregister_node, register_node, ApiServer, Nodes};
use support::{call, eventually, Node, Pod};
use xwire_testbed::checks::{ping, ping_rtts};

/// KNE's shape: one object per pod, uids from 0, empty addresses where there are none.
fn topology(ns: &str, pod: &str, peer: &str, links: &[(u64, &str, &str)]) -> Value {
    json!({
        "apiVersion": "networkop.co.uk/v1beta1",
        "kind": "Topology",
        "metadata": {"name": pod, "namespace": ns},
        "spec": {"links": links.iter().map(|(uid, local_ip, peer_ip)| json!({
            "uid": uid, "peer_pod": peer,
            "local_intf": format!("eth{}", uid + 1), "peer_intf": format!("eth{}", uid + 1),
            "local_ip": local_ip, "peer_ip": peer_ip,
        })).collect::<Vec<_>>()},
    })
}

/// `topology` with its link 1 on `carrier: vxlan`.
fn on_vxlan(mut topology: Value) -> Value {
    topology["spec"]["links"][1]["carrier"] = json!("vxlan");
    topology
}

fn get(
    server: &ApiServer,
    plural: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Option<DynamicObject> {
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("networkop.co.uk", "v1beta1", kind),
        plural,
    );
    let api: Api<DynamicObject> = Api::namespaced_with(server.client.clone(), ns, &resource);
    server.runtime.block_on(api.get_opt(name)).unwrap()
}

/// Whether each node's store has written its records to the API server within 10 s:
/// they reach the node's journal before a call is answered, and its GWireKObj objects a
/// moment later.
fn written(nodes: &[&Node]) -> bool {
    eventually(Duration::from_secs(10), || {
        nodes.iter().all(|n| n.state().store_unwritten == 0)
    })
}

/// The pods whose attachments the node's GWireKObj of `ns` holds.
fn attached_in_api(server: &ApiServer, ns: &str, node: &str) -> Vec<String> {
    let Some(object) = get(server, "gwirekobjs", "GWireKObj", ns, node) else {
        return Vec::new();
    };
    (object.data["status"]["xwireAttachments"]
        .as_array()
        .into_iter()
        .flatten())
    .filter_map(|a| a["pod"]["name"].as_str().map(str::to_owned))
    .collect()
}

/// A namespace's objects of `plural` as the API server shows them to kubectl: a Table.
fn table(server: &ApiServer, ns: &str, plural: &str) -> Value {
    let request = http::Request::get(format!(
        "/apis/networkop.co.uk/v1beta1/namespaces/{ns}/{plural}"
    ))
    .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
    .body(Vec::new())
    .unwrap();
    let text = server
        .runtime
        .block_on(server.client.request_text(request))
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn column_names(table: &Value) -> Vec<&str> {
    table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect()
}

/// The cells of the row named `name`.
fn row<'a>(table: &'a Value, name: &str) -> &'a Vec<Value> {
    table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cells"].as_array().unwrap())
        .find(|cells| cells[0] == name)
        .unwrap_or_else(|| panic!("no row {name}: {table}"))
}

/// The pod's Topology status once `ready` holds (Ok), or as it was after 10 s (Err).
fn status_eventually(
    server: &ApiServer,
    ns: &str,
    pod: &str,
    ready: impl Fn(&Value) -> bool,
) -> Result<Value, Value> {
    let mut status = Value::Null;
    let done = eventually(Duration::from_secs(10), || {
        status = get(server, "topologies", "Topology", ns, pod).unwrap().data["status"].clone();
        ready(&status)
    });
    if done {
        Ok(status)
    } else {
        Err(status)
    }
}

const NODES: Nodes = Nodes {
    names: ["kn1", "kn2"],
    subnet: 7,
};

fn underlay_ip(i: usize) -> String {
    NODES.underlay_ip(i)
}

fn install(server: &ApiServer, nodes: Nodes) {
    apiserver::install(server, nodes, &support::ca_secret());
}

fn kube_nodes(server: &ApiServer, nodes: Nodes) -> (Node, Node) {
    apiserver::kube_nodes(server, &support::xwired(), nodes, "")
}

#[test]
fn a_cluster_wires_pods_from_topology_objects_and_rebuilds_from_the_api() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    install(&server, NODES);
    let lab = "kube-lab";
    apply_objects(
        &server,
        &[
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lab, "labels": {"xwire.dev/wire": "enabled"}}}),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-plain"}}),
            // Link 1 on the kernel's VXLAN: its records' state passes the CRD's schema.
            on_vxlan(topology(
                lab,
                "r1",
                "r2",
                &[(0, "10.0.0.1/30", "10.0.0.2/30"), (1, "", "")],
            )),
            on_vxlan(topology(
                lab,
                "r2",
                "r1",
                &[(0, "10.0.0.2/30", "10.0.0.1/30"), (1, "", "")],
            )),
            topology("kube-plain", "p1", "p2", &[(0, "", "")]),
        ],
    );

    let (mut n1, mut n2) = kube_nodes(&server, NODES);
    // Where the scheduler put the pods: what a node judges a peer's claim by.
    apiserver::bind_pod(&server, lab, "r1", "kn1");
    apiserver::bind_pod(&server, lab, "r2", "kn2");
    let config = |node: &Node, ns: &str| {
        let mut c = node.net_config("1.0.0");
        c["namespace"] = json!(ns);
        c
    };
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    let added = call(&r1, "ADD", &config(&n1, lab));
    assert_eq!(added.code, 0, "{}\n{}", added.output, n1.log());
    // r1 came first: as meshnet does, it leaves its links in r2's `skipped`.
    let skipped = json!([{"pod_name": "r1", "link_id": 0}, {"pod_name": "r1", "link_id": 1}]);
    let left = status_eventually(&server, lab, "r2", |s| s["skipped"] == skipped);
    assert!(left.is_ok(), "{left:?}");
    let added = call(&r2, "ADD", &config(&n2, lab));
    assert_eq!(added.code, 0, "{}\n{}", added.output, n2.log());
    let wired = eventually(Duration::from_secs(15), || r1.has("eth1") && r1.has("eth2"));
    assert!(wired, "n1:\n{}\nn2:\n{}", n1.log(), n2.log());
    assert!(ping(&r1.ns, "10.0.0.2", 3).unwrap(), "n1:\n{}", n1.log());

    // Status as meshnet writes it (off the node's thread, so a moment after the ADD);
    // the wire records in the nodes' GWireKObj objects.
    let status = status_eventually(&server, lab, "r2", |s| s["container_id"] != Value::Null);
    let status = &status.unwrap_or_else(|s| panic!("{s}"));
    assert_eq!(status["src_ip"], "10.252.7.2", "{status}");
    assert_eq!(status["net_ns"], r2.netns());
    assert_eq!(status["container_id"], r2.container.as_str());
    assert_eq!(
        status["skipped"],
        json!([]),
        "r2 made the links r1 left to it"
    );
    assert!(status.get("plumbing_error").is_none(), "{status}");
    assert!(written(&[&n1, &n2]), "n1:\n{}\nn2:\n{}", n1.log(), n2.log());
    let gwire = get(&server, "gwirekobjs", "GWireKObj", lab, "kn1").expect("kn1's GWireKObj");
    // Owned by its Node: the cluster's garbage collector takes it with the node.
    let owner = &gwire.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", "kn1"));
    assert_eq!(gwire.data["spec"]["uids"], json!([0, 1]));
    let items = gwire.data["status"]["grpcWireItems"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["gwire_peer_node_ip"], "10.252.7.2");
    assert_eq!(items[0]["local_pod_name"], "r1");
    assert_eq!(
        [&items[0]["state"], &items[1]["state"]],
        ["remote", "vxlan"],
        "{items:?}"
    );
    // Which namespace the pod's path named at ADD is kept through the API server (the
    // CRD's schema keeps it), to be checked when the path is opened again.
    assert!(
        items[0]["local_pod_net_ns_id"]["ino"].as_u64().is_some(),
        "{}",
        items[0]
    );
    let attachments = gwire.data["status"]["xwireAttachments"].as_array().unwrap();
    assert!(
        attachments[0]["netns_id"]["ino"].as_u64().is_some(),
        "{attachments:?}"
    );

    // What `kubectl get topo -o wide` and `kubectl get gwirekobjs -o wide` show: the
    // CRDs' printer columns, as the API server serves them.
    let topologies = table(&server, lab, "topologies");
    assert_eq!(
        column_names(&topologies),
        [
            "Name",
            "Node IP",
            "Skipped",
            "Error",
            "Container",
            "Netns",
            "Age"
        ]
    );
    let r2_row = row(&topologies, "r2");
    assert_eq!(r2_row[1], underlay_ip(1), "{r2_row:?}");
    assert_eq!(r2_row[2], "[]", "{r2_row:?}");
    let gwires = table(&server, lab, "gwirekobjs");
    assert_eq!(
        column_names(&gwires),
        ["Name", "Ends", "Pending", "Peers", "Uids", "Age"]
    );
    let kn1_row = row(&gwires, "kn1");
    assert_eq!(
        kn1_row[1..4],
        [json!(2), json!(0), json!("kn2")],
        "{kn1_row:?}"
    );

    // A namespace without the label: the pod passes through, nothing is made.
    let p1 = Pod::new("p1");
    let passed = call(&p1, "ADD", &config(&n1, "kube-plain"));
    assert_eq!(passed.code, 0, "{}", passed.output);
    assert!(!p1.has("eth1"));
    assert!(written(&[&n1]));
    assert!(get(&server, "gwirekobjs", "GWireKObj", "kube-plain", "kn1").is_none());

    // A link added to both Topology objects through the API appears without a restart;
    // taken out again, it goes.
    let with_link = |pod: &str, peer: &str, extra: bool| {
        let mut links = vec![(0, "10.0.0.1/30", "10.0.0.2/30"), (1, "", "")];
        if pod == "r2" {
            links[0] = (0, "10.0.0.2/30", "10.0.0.1/30");
        }
        if extra {
            links.push((2, "", ""));
        }
        topology(lab, pod, peer, &links)
    };
    apply_objects(
        &server,
        &[with_link("r1", "r2", true), with_link("r2", "r1", true)],
    );
    let followed = eventually(Duration::from_secs(15), || r1.has("eth3") && r2.has("eth3"));
    assert!(followed, "n1:\n{}\nn2:\n{}", n1.log(), n2.log());
    apply_objects(
        &server,
        &[with_link("r1", "r2", false), with_link("r2", "r1", false)],
    );
    let followed = eventually(Duration::from_secs(15), || {
        !r1.has("eth3") && !r2.has("eth3")
    });
    assert!(followed, "n1:\n{}\nn2:\n{}", n1.log(), n2.log());

    // An impairment in r1's Topology link (xwire's own field, kept by the CRD's schema)
    // delays what r1 sends on the wire, where it leaves kn1; taken out, it goes.
    let impaired = |delay: Option<&str>| {
        let mut t = with_link("r1", "r2", false);
        if let Some(delay) = delay {
            t["spec"]["links"][0]["impairment"] = json!({ "delay": delay });
        }
        t
    };
    apply_objects(&server, &[impaired(Some("20ms"))]);
    let delayed = eventually(Duration::from_secs(15), || {
        let rtts = ping_rtts(&r1.ns, "10.0.0.2", 3).unwrap_or_default();
        rtts.len() == 3 && rtts.iter().all(|&ms| ms >= 20.0)
    });
    assert!(delayed, "n1:\n{}", n1.log());
    apply_objects(&server, &[impaired(None)]);
    let undelayed = eventually(Duration::from_secs(15), || {
        let rtts = ping_rtts(&r1.ns, "10.0.0.2", 3).unwrap_or_default();
        rtts.len() == 3 && rtts.iter().all(|&ms| ms < 20.0)
    });
    assert!(undelayed, "n1:\n{}", n1.log());

    // kn2 leaves the cluster: kn1 lets it go, and r1's ends of the wires to r2 go back
    // to pending; it joins again, and they come back, with no daemon restarted.
    deregister_node(&server, "kn2");
    let let_go = eventually(Duration::from_secs(15), || {
        !r1.has("eth1") && !r1.has("eth2")
    });
    assert!(let_go, "n1:\n{}", n1.log());
    assert_eq!(n1.wire_state("r1", 0).as_deref(), Some("pending"));
    register_node(&server, "kn2", &underlay_ip(1));
    let back = eventually(Duration::from_secs(15), || r1.has("eth1") && r1.has("eth2"));
    assert!(back, "n1:\n{}\nn2:\n{}", n1.log(), n2.log());
    assert!(ping(&r1.ns, "10.0.0.2", 2).unwrap(), "n1:\n{}", n1.log());

    // Killed, its state directory emptied, restarted: every wire comes back from the API.
    assert!(written(&[&n2]), "{}", n2.log());
    n2.stop();
    let _ = std::fs::remove_dir_all(n2.dir.0.join("state"));
    n2.restart();
    assert_eq!(n2.state().wires.len(), 2, "{}", n2.log());
    assert_eq!(n2.state().attachments.len(), 1);
    let back = eventually(Duration::from_secs(15), || {
        ping(&r2.ns, "10.0.0.1", 1).unwrap_or(false)
    });
    assert!(back, "n2:\n{}", n2.log());
    assert_eq!(call(&r2, "CHECK", &config(&n2, lab)).code, 0);

    // A link the API server lets through but that does not parse: left out, and named in
    // the pod's plumbing_error.
    let r3 = Pod::new("r3");
    apply_objects(
        &server,
        &[topology(lab, "r3", "r9", &[(7, "10.0.0.300/30", "")])],
    );
    assert_eq!(call(&r3, "ADD", &config(&n1, lab)).code, 0);
    let status = status_eventually(&server, lab, "r3", |s| s["plumbing_error"].is_string());
    let status = &status.unwrap_or_else(|s| panic!("{s}"));
    let error = status["plumbing_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("uid 7") && error.contains("10.0.0.300"),
        "{status}"
    );
    // Killed as soon as DEL is answered: the node's journal has the change, the API
    // server not yet (it is written behind, a moment later), and the node writes it when
    // it starts again.
    assert!(written(&[&n1]), "{}", n1.log());
    assert!(attached_in_api(&server, lab, "kn1").contains(&"r3".to_owned()));
    assert_eq!(call(&r3, "DEL", &config(&n1, lab)).code, 0);
    n1.stop();
    assert!(
        attached_in_api(&server, lab, "kn1").contains(&"r3".to_owned()),
        "the GWireKObj was written before the daemon was killed: this check needs it not to be"
    );
    n1.restart();
    let caught_up = eventually(Duration::from_secs(10), || {
        !attached_in_api(&server, lab, "kn1").contains(&"r3".to_owned())
    });
    assert!(caught_up, "{}", n1.log());
    assert!(attached_in_api(&server, lab, "kn1").contains(&"r1".to_owned()));

    // The opt-in label goes: pods wired before keep their wires and are cleaned up by
    // DEL; a pod created afterwards passes through.
    apply_objects(
        &server,
        &[
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lab, "labels": {"xwire.dev/wire": "disabled"}}}),
        ],
    );
    let r4 = Pod::new("r4");
    apply_objects(&server, &[topology(lab, "r4", "r1", &[(9, "", "")])]);
    // (The daemon sees the label change through its watch: until it does, r4 is wired,
    // and taken apart again.)
    let unlabelled = eventually(Duration::from_secs(10), || {
        assert_eq!(call(&r4, "ADD", &config(&n1, lab)).code, 0);
        let passed = n1.wire_state("r4", 9).is_none();
        if !passed {
            assert_eq!(call(&r4, "DEL", &config(&n1, lab)).code, 0);
        }
        passed
    });
    assert!(unlabelled, "{}", n1.log());
    assert_eq!(call(&r1, "CHECK", &config(&n1, lab)).code, 0);
    for (pod, node) in [(&r1, &n1), (&r2, &n2)] {
        assert_eq!(call(pod, "DEL", &config(node, lab)).code, 0);
    }
    assert!(written(&[&n1, &n2]));
    assert!(get(&server, "gwirekobjs", "GWireKObj", lab, "kn1").is_none());
    assert!(get(&server, "gwirekobjs", "GWireKObj", lab, "kn2").is_none());
}

/// A KNE lab as KNE writes it: one Topology per lab node named after it, in a namespace
/// named after the lab, uids from 0, addresses empty, eth0 never linked. r1 and r3 share
/// a node; r2 is on the other.
const KNE_LAB: &str = include_str!("fixtures/kne/three-routers.yaml");

/// What a wire record says that does not depend on where it runs: pod, uid, interface,
/// peer pod, kind of wire.
fn wire_shapes(nodes: [&Node; 2]) -> Vec<String> {
    let mut shapes: Vec<String> = nodes
        .iter()
        .enumerate()
        .flat_map(|(i, node)| {
            node.state().wires.into_iter().map(move |w| {
                format!(
                    "node{i} {} uid {} {} -> {} {} ip {}",
                    w["local_pod_name"].as_str().unwrap(),
                    w["link_uid"],
                    w["local_pod_ifname"].as_str().unwrap(),
                    w["peer_pod"].as_str().unwrap(),
                    w["state"].as_str().unwrap(),
                    w["local_pod_ip"],
                )
            })
        })
        .collect();
    shapes.sort();
    shapes
}

#[test]
fn kne_objects_make_the_same_wires_through_xwirectl_and_through_the_api_server() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    let nodes = Nodes {
        names: ["kk1", "kk2"],
        subnet: 8,
    };
    install(&server, nodes);
    apply_objects(
        &server,
        &[json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "kne-lab", "labels": {"xwire.dev/wire": "enabled"}}})],
    );
    server.apply(KNE_LAB, false).unwrap();
    for (pod, node) in [("r1", "kk1"), ("r2", "kk2"), ("r3", "kk1")] {
        apiserver::bind_pod(&server, "kne-lab", pod, node);
    }
    let (k1, k2) = kube_nodes(&server, nodes);

    // The same objects through `xwirectl topology apply`, on two nodes with the
    // embedded store. Through the API server the Pods say where each runs; two embedded
    // stores learn it from the objects' status, as a lab file gives it.
    let certs = support::TempDir::new("kne-certs");
    let (e1, e2) = support::two_nodes(&certs);
    let file = certs.0.join("kne-lab.yaml");
    let placed = support::placed(
        KNE_LAB,
        &[
            ("r1", support::N1_IP),
            ("r2", support::N2_IP),
            ("r3", support::N1_IP),
        ],
    );
    std::fs::write(&file, placed).unwrap();
    for node in [&e1, &e2] {
        let applied = std::process::Command::new(support::xwirectl_bin())
            .arg("--socket")
            .arg(&node.socket)
            .args(["topology", "apply"])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            applied.status.success(),
            "{}",
            String::from_utf8_lossy(&applied.stderr)
        );
    }

    let mut pods = Vec::new();
    for (first, second) in [(&k1, &k2), (&e1, &e2)] {
        let config = |node: &Node| {
            let mut c = node.net_config("1.0.0");
            c["namespace"] = json!("kne-lab");
            c
        };
        let (r1, r2, r3) = (Pod::new("r1"), Pod::new("r2"), Pod::new("r3"));
        for (pod, node) in [(&r1, first), (&r2, second), (&r3, first)] {
            let added = call(pod, "ADD", &config(node));
            assert_eq!(added.code, 0, "{}\n{}", added.output, node.log());
            // eth0 is the primary plugin's: xwire never touches it.
            assert!(!pod.has("eth0"));
        }
        let wired = eventually(Duration::from_secs(15), || {
            r1.has("eth1") && r1.has("eth2") && r2.has("eth1") && r2.has("eth2") && r3.has("eth1")
        });
        assert!(wired, "{}\n{}", first.log(), second.log());
        pods.push((r1, r2, r3));
    }
    let through_api = wire_shapes([&k1, &k2]);
    assert_eq!(through_api.len(), 6, "{through_api:#?}");
    assert_eq!(through_api, wire_shapes([&e1, &e2]));
}

/// In a cluster, where a pod runs is the Pod's `spec.nodeName` (the scheduler's word),
/// not its Topology's `status.src_ip`, which any node's daemon may write. A node that
/// wires a pod the scheduler put elsewhere (here kp2, for a pod bound to kp-other) writes
/// that status and claims the pod's wire; the node at the other end refuses the claim,
/// and takes it once the pod is bound to kp2.
#[test]
fn a_claim_counts_only_from_the_node_the_scheduler_put_the_pod_on() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    let nodes = Nodes {
        names: ["kp1", "kp2"],
        subnet: 9,
    };
    install(&server, nodes);
    let lab = "kube-placed";
    apply_objects(
        &server,
        &[
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lab, "labels": {"xwire.dev/wire": "enabled"}}}),
            topology(lab, "r1", "r2", &[(0, "10.0.0.1/30", "10.0.0.2/30")]),
            topology(lab, "r2", "r1", &[(0, "10.0.0.2/30", "10.0.0.1/30")]),
        ],
    );
    apiserver::bind_pod(&server, lab, "r1", "kp1");
    apiserver::bind_pod(&server, lab, "r2", "kp-other");
    let (n1, n2) = kube_nodes(&server, nodes);
    let config = |node: &Node| {
        let mut c = node.net_config("1.0.0");
        c["namespace"] = json!(lab);
        c
    };
    let (r1, r2) = (Pod::new("r1"), Pod::new("r2"));
    assert_eq!(call(&r1, "ADD", &config(&n1)).code, 0, "{}", n1.log());
    assert_eq!(call(&r2, "ADD", &config(&n2)).code, 0, "{}", n2.log());
    // kp2 says r2 runs there (its status), and claims the wire.
    let written = status_eventually(&server, lab, "r2", |s| {
        s["src_ip"]
            .as_str()
            .is_some_and(|ip| ip.starts_with(&nodes.underlay_ip(1)))
    });
    assert!(written.is_ok(), "{written:?}");
    let joined = eventually(Duration::from_secs(3), || {
        n1.wire_state("r1", 0).as_deref() == Some("remote")
    });
    assert!(
        !joined,
        "kp1 took kp2's claim on a pod bound elsewhere:\n{}",
        n1.log()
    );
    assert!(!r1.has("eth1"));

    // The scheduler's word changes: the wire joins.
    apiserver::bind_pod(&server, lab, "r2", "kp2");
    let joined = eventually(Duration::from_secs(15), || r1.has("eth1"));
    assert!(joined, "n1:\n{}\nn2:\n{}", n1.log(), n2.log());
    assert!(ping(&r1.ns, "10.0.0.2", 3).unwrap(), "n1:\n{}", n1.log());
}
