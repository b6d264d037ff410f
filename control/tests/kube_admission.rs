//! A node's daemon writes only its own wire records, against a real kube-apiserver
//! (skipped, with the reason, where there is none): deploy/base/admission.yaml compares the
//! node that the daemon's pod-bound token carries with the node of the GWireKObj it
//! creates, patches or deletes. Two node identities of the one ServiceAccount, as two
//! daemons of the DaemonSet have.

mod support;

use std::time::Duration;

use kube::api::PatchParams;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch};
use serde_json::{json, Value};
use support::apiserver::{self, apply_objects, ApiServer, Nodes};

const NODES: Nodes = Nodes {
    names: ["kv1", "kv2"],
    subnet: 14,
};
const LAB: &str = "lab-admission";

/// A node's records in `LAB` as the daemon writes them: named `name`, labelled `label`.
fn record(name: &str, label: &str) -> Value {
    json!({
        "apiVersion": "networkop.co.uk/v1beta1",
        "kind": "GWireKObj",
        "metadata": {"name": name, "namespace": LAB, "labels": {"xwire.dev/node": label}},
        "spec": {"uids": [1]},
    })
}

struct As<'a> {
    server: &'a ApiServer,
    api: Api<DynamicObject>,
}

impl As<'_> {
    fn new<'a>(server: &'a ApiServer, client: kube::Client) -> As<'a> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("networkop.co.uk", "v1beta1", "GWireKObj"),
            "gwirekobjs",
        );
        As {
            server,
            api: Api::namespaced_with(client, LAB, &resource),
        }
    }

    /// Server-side apply, as the daemon writes its records: Ok, or the refusal's words.
    fn apply(&self, object: &Value) -> Result<(), String> {
        let name = object["metadata"]["name"].as_str().unwrap();
        let params = PatchParams::apply("xwired").force();
        (self.server.runtime)
            .block_on(self.api.patch(name, &params, &Patch::Apply(object)))
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn patch_status(&self, name: &str) -> Result<(), String> {
        let status = json!({"status": {"grpcWireItems": []}});
        (self.server.runtime)
            .block_on(
                self.api
                    .patch_status(name, &Default::default(), &Patch::Merge(&status)),
            )
            .map(drop)
            .map_err(|e| e.to_string())
    }

    fn delete(&self, name: &str) -> Result<(), String> {
        (self.server.runtime)
            .block_on(self.api.delete(name, &DeleteParams::default()))
            .map(drop)
            .map_err(|e| e.to_string())
    }
}

#[track_caller]
fn refused(result: Result<(), String>, words: &str) {
    let error = result.expect_err("refused");
    assert!(error.contains(words), "{error}");
}

#[test]
fn a_node_writes_its_own_wire_records_and_no_other_nodes() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    apiserver::install(&server, NODES, &support::ca_secret());
    apply_objects(
        &server,
        &[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LAB}})],
    );
    let [n1, n2] = NODES
        .names
        .map(|node| server.node_kubeconfig("xwire-system", "xwired", node, "127.0.0.1"));
    let kv1 = As::new(&server, server.client_for(&n1));
    let kv2 = As::new(&server, server.client_for(&n2));
    let unbound = server.service_account_kubeconfig("xwire-system", "xwired", "127.0.0.1");
    let nameless = As::new(&server, server.client_for(&unbound));
    let admin = As::new(&server, server.client.clone());

    // The API server takes a policy in a moment after it is made: until then, a write
    // the policy refuses goes through (the node kv3 has no records to keep).
    let start = std::time::Instant::now();
    while kv1.apply(&record("kv3", "kv3")).is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the policy never took"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = admin.delete("kv3");

    // Each node makes and changes its own.
    kv1.apply(&record("kv1", "kv1")).unwrap();
    kv2.apply(&record("kv2", "kv2")).unwrap();
    kv1.patch_status("kv1").unwrap();

    // Not the other's: neither make it, nor change it, nor its status, nor delete it.
    refused(
        kv1.apply(&record("kv2", "kv2")),
        "node kv1 may write only its own",
    );
    refused(kv1.patch_status("kv2"), "node kv1 may write only its own");
    refused(kv1.delete("kv2"), "node kv1 may write only its own");
    // Nor one under its own name labelled as the other's, or the other way round.
    refused(
        kv2.apply(&record("kv1", "kv2")),
        "node kv2 may write only its own",
    );
    refused(kv1.apply(&record("kv1x", "kv1")), "not kv1x");
    // Its further parts (a namespace's records too large for one object) are its own
    // too; the other's are not.
    kv1.apply(&record("kv1.xwire-part-1", "kv1")).unwrap();
    kv1.patch_status("kv1.xwire-part-1").unwrap();
    refused(
        kv1.apply(&record("kv2.xwire-part-1", "kv1")),
        "not kv2.xwire-part-1",
    );
    refused(
        kv2.apply(&record("kv1.xwire-part-2", "kv2")),
        "node kv2 may write only its own",
    );
    kv1.delete("kv1.xwire-part-1").unwrap();
    // A token that names no node writes nothing.
    refused(nameless.apply(&record("kv1", "kv1")), "names no node");
    refused(nameless.delete("kv1"), "names no node");

    // What was refused changed nothing; the owner still deletes its own, and the admin
    // is not a node.
    let kept = server
        .runtime
        .block_on(admin.api.get("kv2"))
        .unwrap()
        .metadata
        .labels
        .unwrap();
    assert_eq!(kept["xwire.dev/node"], "kv2");
    kv1.delete("kv1").unwrap();
    admin.delete("kv2").unwrap();
}

#[test]
fn a_topology_with_a_link_to_the_node_itself_is_refused_when_applied() {
    let Some(server) = apiserver::start_or_skip() else {
        return;
    };
    apiserver::install(&server, NODES, &support::ca_secret());
    let namespace = "lab-hostlink";
    apply_objects(
        &server,
        &[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})],
    );
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("networkop.co.uk", "v1beta1", "Topology"),
        "topologies",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(server.client.clone(), namespace, &resource);
    let topology = |name: &str, peer_pod: &str| {
        json!({
            "apiVersion": "networkop.co.uk/v1beta1",
            "kind": "Topology",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"links": [
                {"uid": 1, "peer_pod": "r2", "local_intf": "eth1", "peer_intf": "eth1"},
                {"uid": 7, "peer_pod": peer_pod, "local_intf": "eth2", "peer_intf": "ens4"},
            ]},
        })
    };
    let apply = |object: &Value| {
        let name = object["metadata"]["name"].as_str().unwrap();
        let params = PatchParams::apply("kubectl").force();
        server
            .runtime
            .block_on(api.patch(name, &params, &Patch::Apply(object)))
            .map(drop)
            .map_err(|e| e.to_string())
    };
    // As in the other test: the policy takes a moment to take.
    let start = std::time::Instant::now();
    while apply(&topology("probe", "localhost")).is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the policy never took"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = server
        .runtime
        .block_on(api.delete("probe", &DeleteParams::default()));
    refused(
        apply(&topology("r1", "localhost")),
        "Topology r1, link uid 7: peer_pod \"localhost\" is a meshnet macvlan link",
    );
    apply(&topology("r1", "r3")).unwrap();
    // Nor can a link to the node be added to an object that was taken.
    refused(apply(&topology("r1", "localhost")), "link uid 7");
}
