//! What a test cluster holds besides the server: xwire's manifests, Node and Pod objects
//! as a kubelet and the scheduler would write them, and two node namespaces whose daemons
//! run the Kubernetes backend.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use kube::api::{Api, Patch};
use serde_json::{json, Value};

use super::{run, ApiServer};
use crate::cluster::Node;
use crate::{Netns, Veth};

/// A veth from the host namespace to `ns`, addressed `10.251.<n>.1/30` on the host and
/// `.2` in `ns`: returns the host's address, where `ns` reaches the server. The veth goes
/// with `ns`.
pub fn reach_from(ns: &Netns, n: u8) -> String {
    let (third, fourth) = (std::process::id() % 250, u32::from(n) * 4);
    let host = format!("xk{}h{n}", std::process::id() % 100_000);
    let inner = format!("xk{}n{n}", std::process::id() % 100_000);
    let ip = |args: &[&str]| run(Command::new("ip").args(args));
    ip(&[
        "link",
        "add",
        &host,
        "type",
        "veth",
        "peer",
        "name",
        &inner,
        "netns",
        ns.name(),
    ]);
    let host_ip = format!("10.251.{third}.{}", fourth + 1);
    let node_ip = format!("10.251.{third}.{}", fourth + 2);
    ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &host]);
    ip(&["link", "set", &host, "up"]);
    ip(&[
        "-n",
        ns.name(),
        "addr",
        "add",
        &format!("{node_ip}/30"),
        "dev",
        &inner,
    ]);
    ip(&["-n", ns.name(), "link", "set", &inner, "up"]);
    host_ip
}

/// The xwire manifests in deploy/.
pub fn deploy(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A Node object as a kubelet would register it: its InternalIP in status.
pub fn register_node(server: &ApiServer, name: &str, ip: &str) {
    use k8s_openapi::api::core::v1::Node as KubeNode;
    let api: Api<KubeNode> = Api::all(server.client.clone());
    let node: KubeNode = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}),
    )
    .unwrap();
    server.runtime.block_on(async {
        api.create(&Default::default(), &node).await.unwrap();
        let status = json!({"status": {"addresses": [
            {"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}});
        api.patch_status(name, &Default::default(), &Patch::Merge(&status))
            .await
            .unwrap();
    });
}

/// A Pod object bound to `node`, as the scheduler binds one (nothing runs it: the tests'
/// pods are namespaces wired through CNI calls). Made again if it exists, so that a
/// test can move a pod to another node.
pub fn bind_pod(server: &ApiServer, namespace: &str, name: &str, node: &str) {
    bind_pod_as(server, namespace, name, node, None);
}

/// `bind_pod`, the pod running as ServiceAccount `account` when given; the pod made.
pub(super) fn bind_pod_as(
    server: &ApiServer,
    namespace: &str,
    name: &str,
    node: &str,
    account: Option<&str>,
) -> k8s_openapi::api::core::v1::Pod {
    use k8s_openapi::api::core::v1::Pod;
    let api: Api<Pod> = Api::namespaced(server.client.clone(), namespace);
    let mut spec = json!({"nodeName": node, "containers": [{"name": "main", "image": "localhost/xwire:latest"}]});
    if let Some(account) = account {
        spec["serviceAccountName"] = json!(account);
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))
    .unwrap();
    // At once (grace 0): a pod bound to a node otherwise waits for its kubelet, and
    // there is none.
    let now = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    let _ = (server.runtime).block_on(api.delete(name, &now));
    // The name may still be held a moment.
    let mut made = Err(String::new());
    for _ in 0..50 {
        made = (server
            .runtime
            .block_on(api.create(&Default::default(), &pod)))
        .map_err(|e| e.to_string());
        if made.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    made.unwrap_or_else(|e| panic!("pod {namespace}/{name} on {node}: {e}"))
}

pub fn deregister_node(server: &ApiServer, name: &str) {
    use k8s_openapi::api::core::v1::Node as KubeNode;
    let api: Api<KubeNode> = Api::all(server.client.clone());
    server
        .runtime
        .block_on(api.delete(name, &Default::default()))
        .unwrap();
}

/// The nodes of one cluster: their names, and the third octet of their underlay /24
/// (clusters that run at once each take their own).
#[derive(Debug, Clone, Copy)]
pub struct Nodes {
    pub names: [&'static str; 2],
    pub subnet: u8,
}

impl Nodes {
    pub fn underlay_ip(self, i: usize) -> String {
        format!("10.252.{}.{}", self.subnet, i + 1)
    }
}

/// The CRDs, the deploy manifests (each checked by a server-side dry run first), the CA
/// Secret and bundle (`ca_secret`: what `xwirectl ca-secret` prints) and the Node
/// objects.
pub fn install(server: &ApiServer, nodes: Nodes, ca_secret: &str) {
    for file in [
        "base/crds/topologies.networkop.co.uk.yaml",
        "base/crds/gwirekobjs.networkop.co.uk.yaml",
    ] {
        server.apply(&deploy(file), false).unwrap();
    }
    server.wait_for_crds();
    // The manifests' namespace must exist for their dry run.
    server.apply(&deploy("base/namespace.yaml"), true).unwrap();
    server.apply(&deploy("base/namespace.yaml"), false).unwrap();
    for file in [
        "base/rbac.yaml",
        "base/signer.yaml",
        "base/admission.yaml",
        "base/daemonset.yaml",
    ] {
        server
            .apply(&deploy(file), true)
            .unwrap_or_else(|e| panic!("{file}: dry run: {e}"));
    }
    server.apply(&deploy("base/rbac.yaml"), false).unwrap();
    server.apply(&deploy("base/signer.yaml"), false).unwrap();
    server.apply(&deploy("base/admission.yaml"), false).unwrap();
    server.apply(ca_secret, false).unwrap();
    for (i, name) in nodes.names.iter().enumerate() {
        register_node(server, name, &nodes.underlay_ip(i));
    }
}

/// Two node namespaces joined by an underlay, each reaching the API server over a veth
/// of its own. Each daemon runs the Kubernetes backend with the DaemonSet's
/// ServiceAccount token: no certificate files and no peers in its configuration; it asks
/// `xwire-signer` (built beside `xwired`, started here once) for its certificate and
/// finds its peers in the Node objects.
/// `extra`: more configuration lines for both.
pub fn kube_nodes(server: &ApiServer, xwired: &Path, nodes: Nodes, extra: &str) -> (Node, Node) {
    kube_nodes_with(server, xwired, nodes, extra, "")
}

/// `kube_nodes`, with `topology_extra` added to each configuration's `[topology]`.
pub fn kube_nodes_with(
    server: &ApiServer,
    xwired: &Path,
    nodes: Nodes,
    extra: &str,
    topology_extra: &str,
) -> (Node, Node) {
    server.start_signer(&xwired.with_file_name("xwire-signer"));
    let names = nodes.names;
    let (ns_a, ns_b) = (Netns::new(names[0]).unwrap(), Netns::new(names[1]).unwrap());
    let underlay = Veth::new(&ns_a, &ns_b).unwrap();
    let cidr = |i: usize| format!("{}/24", nodes.underlay_ip(i));
    ns_a.add_address(underlay.a_name(), &cidr(0)).unwrap();
    ns_b.add_address(underlay.b_name(), &cidr(1)).unwrap();
    underlay.set_up().unwrap();
    std::mem::forget(underlay); // the namespaces take it with them
    let mut started = Vec::new();
    for (i, ns) in [ns_a, ns_b].into_iter().enumerate() {
        let host_ip = reach_from(&ns, nodes.subnet * 2 + i as u8);
        let kubeconfig = server.node_kubeconfig("xwire-system", "xwired", names[i], &host_ip);
        let config = format!(
            "node_address = \"{}:7470\"\n{extra}\n[topology]\nsource = \"kubernetes\"\nkubeconfig = \"{}\"\n{topology_extra}\n",
            nodes.underlay_ip(i),
            kubeconfig.display()
        );
        started.push(Node::start_in(xwired, ns, names[i], &config));
    }
    let b = started.pop().unwrap();
    (started.pop().unwrap(), b)
}

/// Server-side applies `objects` as the admin.
pub fn apply_objects(server: &ApiServer, objects: &[Value]) {
    let yaml: Vec<String> = objects
        .iter()
        .map(|o| serde_json::to_string(o).unwrap())
        .collect();
    server.apply(&yaml.join("\n---\n"), false).unwrap();
}
