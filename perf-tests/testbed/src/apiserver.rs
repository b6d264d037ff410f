//! A real `kube-apiserver` and `etcd` for the Kubernetes-mode tests and perf scenarios, found as envtest
//! finds them: in `KUBEBUILDER_ASSETS`, else on PATH. Neither is faked; when one is
//! missing, `ApiServer::start` says why, and the test reports itself skipped.
//!
//! The server listens on every address of the host namespace; each node namespace
//! reaches it over a veth of its own (`reach_from`), its host end an address this test
//! made. RBAC is on: the test itself is an admin (a static token in `system:masters`);
//! the daemons run with a ServiceAccount token, as under the DaemonSet.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::cluster::{Node, TempDir};
use crate::{ChildGuard, Netns, Veth};

pub struct ApiServer {
    // Dropped in this order: the server before its etcd.
    _apiserver: ChildGuard,
    _etcd: ChildGuard,
    pub dir: TempDir,
    pub port: u16,
    pub runtime: tokio::runtime::Runtime,
    pub client: Client,
    admin_token: String,
}

/// The binary `name`, as envtest looks for it.
fn find(name: &str) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS") {
        let path = Path::new(&dir).join(name);
        if path.is_file() {
            return Ok(path);
        }
    }
    for dir in ["/usr/local/kubebuilder/bin"]
        .into_iter()
        .map(PathBuf::from)
        .chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ))
    {
        if dir.join(name).is_file() {
            return Ok(dir.join(name));
        }
    }
    Err(format!(
        "no {name} in KUBEBUILDER_ASSETS, /usr/local/kubebuilder/bin or PATH (no package \
         registry ships kube-apiserver; build it from Kubernetes source and point \
         KUBEBUILDER_ASSETS at it)"
    ))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl ApiServer {
    /// Starts etcd and the API server, or says why not.
    pub fn start() -> Result<ApiServer, String> {
        let apiserver_bin = find("kube-apiserver")?;
        let etcd_bin = find("etcd")?;
        let dir = TempDir::new("apiserver");
        let d = &dir.0;
        let (etcd_port, etcd_peer, port) = (free_port(), free_port(), free_port());
        let etcd_log = std::fs::File::create(d.join("etcd.log")).unwrap();
        let etcd = ChildGuard::spawn(
            Command::new(etcd_bin)
                .arg("--data-dir")
                .arg(d.join("etcd"))
                .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
                .arg(format!(
                    "--advertise-client-urls=http://127.0.0.1:{etcd_port}"
                ))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"
                ))
                .arg(format!(
                    "--initial-cluster=default=http://127.0.0.1:{etcd_peer}"
                ))
                .stdout(Stdio::null())
                .stderr(etcd_log),
        )
        .map_err(|e| format!("starting etcd: {e}"))?;

        run(Command::new("openssl")
            .args([
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
            ])
            .arg(d.join("sa.key")));
        run(Command::new("openssl")
            .args(["pkey", "-pubout", "-in"])
            .arg(d.join("sa.key"))
            .arg("-out")
            .arg(d.join("sa.pub")));
        let admin_token = format!("admin-{}", std::process::id());
        std::fs::write(
            d.join("tokens.csv"),
            format!("{admin_token},admin,admin,\"system:masters\"\n"),
        )
        .unwrap();
        let log = std::fs::File::create(d.join("apiserver.log")).unwrap();
        let apiserver = ChildGuard::spawn(
            Command::new(apiserver_bin)
                .arg(format!("--etcd-servers=http://127.0.0.1:{etcd_port}"))
                .arg(format!("--cert-dir={}", d.join("certs").display()))
                .arg(format!("--secure-port={port}"))
                .arg("--bind-address=0.0.0.0")
                .arg("--advertise-address=127.0.0.1")
                .arg("--service-cluster-ip-range=10.96.0.0/24")
                .arg("--authorization-mode=RBAC")
                .arg(format!(
                    "--token-auth-file={}",
                    d.join("tokens.csv").display()
                ))
                .arg(format!(
                    "--service-account-key-file={}",
                    d.join("sa.pub").display()
                ))
                .arg(format!(
                    "--service-account-signing-key-file={}",
                    d.join("sa.key").display()
                ))
                .arg("--service-account-issuer=https://kubernetes.default.svc")
                .arg("--allow-privileged=true")
                .arg("--disable-admission-plugins=ServiceAccount")
                .stdout(Stdio::null())
                .stderr(log),
        )
        .map_err(|e| format!("starting kube-apiserver: {e}"))?;

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let kubeconfig = kubeconfig(&format!("https://127.0.0.1:{port}"), &admin_token);
        std::fs::write(d.join("admin.kubeconfig"), &kubeconfig).unwrap();
        let client = runtime.block_on(client_from(&d.join("admin.kubeconfig")));
        let server = ApiServer {
            _apiserver: apiserver,
            _etcd: etcd,
            dir,
            port,
            runtime,
            client,
            admin_token,
        };
        server.wait_ready();
        Ok(server)
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let ready = self.runtime.block_on(async {
                let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
                api.get_opt("default").await.is_ok_and(|ns| ns.is_some())
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "kube-apiserver did not become ready:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.0.join("apiserver.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Server-side applies every document of `yaml` as the admin (`dry_run`: checked
    /// by the server, stored nowhere).
    pub fn apply(&self, yaml: &str, dry_run: bool) -> Result<(), String> {
        let discovery = self
            .runtime
            .block_on(kube::Discovery::new(self.client.clone()).run())
            .map_err(|e| e.to_string())?;
        for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
            use serde::Deserialize;
            let value = serde_json::Value::deserialize(doc).map_err(|e| e.to_string())?;
            if value.is_null() {
                continue;
            }
            let object: DynamicObject =
                serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
            let types = object
                .types
                .clone()
                .ok_or("an object without apiVersion and kind")?;
            let gvk = kube::api::GroupVersionKind::try_from(&types).map_err(|e| e.to_string())?;
            let (resource, caps) = discovery
                .resolve_gvk(&gvk)
                .ok_or_else(|| format!("the server does not know {gvk:?}"))?;
            let name = object
                .metadata
                .name
                .clone()
                .ok_or("an object without a name")?;
            let api: Api<DynamicObject> = match (&object.metadata.namespace, caps.scope) {
                (Some(ns), kube::discovery::Scope::Namespaced) => {
                    Api::namespaced_with(self.client.clone(), ns, &resource)
                }
                (None, kube::discovery::Scope::Namespaced) => {
                    Api::default_namespaced_with(self.client.clone(), &resource)
                }
                _ => Api::all_with(self.client.clone(), &resource),
            };
            let mut params = PatchParams::apply("xwire-test").force();
            params.dry_run = dry_run;
            self.runtime
                .block_on(api.patch(&name, &params, &Patch::Apply(&value)))
                .map_err(|e| format!("{} {name}: {e}", gvk.kind))?;
        }
        Ok(())
    }

    /// Waits until the CRDs are served.
    pub fn wait_for_crds(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let served = self.runtime.block_on(async {
                let discovery = kube::Discovery::new(self.client.clone()).run().await.ok()?;
                let gvk =
                    kube::api::GroupVersionKind::gvk("networkop.co.uk", "v1beta1", "GWireKObj");
                let topo =
                    kube::api::GroupVersionKind::gvk("networkop.co.uk", "v1beta1", "Topology");
                Some(
                    discovery.resolve_gvk(&gvk).is_some() && discovery.resolve_gvk(&topo).is_some(),
                )
            });
            if served == Some(true) {
                return;
            }
            assert!(Instant::now() < deadline, "the CRDs were not served");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// A kubeconfig for `ns` (reaching the server over `reach_from`'s veth) with the
    /// token of ServiceAccount `namespace/account`, made through the TokenRequest API.
    pub fn service_account_kubeconfig(
        &self,
        namespace: &str,
        account: &str,
        host_ip: &str,
    ) -> PathBuf {
        let token = self.token(namespace, account, None);
        self.write_kubeconfig(&format!("{account}-{host_ip}"), host_ip, &token)
    }

    /// As `service_account_kubeconfig`, with the token bound to a Pod of the account on
    /// `node` (made here as a scheduler would bind it; nothing runs it), as the tokens a
    /// kubelet mounts are: the API server then names the node in each request's user
    /// extra (`authentication.kubernetes.io/node-name`).
    pub fn node_kubeconfig(
        &self,
        namespace: &str,
        account: &str,
        node: &str,
        host_ip: &str,
    ) -> PathBuf {
        let name = format!("{account}-{node}");
        let made = bind_pod_as(self, namespace, &name, node, Some(account));
        let uid = made.metadata.uid.unwrap();
        let bound = k8s_openapi::api::authentication::v1::BoundObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name.clone()),
            uid: Some(uid),
        };
        let token = self.token(namespace, account, Some(bound));
        self.write_kubeconfig(&format!("{name}-{host_ip}"), host_ip, &token)
    }

    fn token(
        &self,
        namespace: &str,
        account: &str,
        bound: Option<k8s_openapi::api::authentication::v1::BoundObjectReference>,
    ) -> String {
        self.runtime.block_on(async {
            let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(self.client.clone(), namespace);
            let request = k8s_openapi::api::authentication::v1::TokenRequest {
                spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
                    audiences: vec!["https://kubernetes.default.svc".into()],
                    expiration_seconds: Some(3600),
                    bound_object_ref: bound,
                },
                ..Default::default()
            };
            api.create_token_request(account, &Default::default(), &request)
                .await
                .unwrap()
                .status
                .unwrap()
                .token
        })
    }

    fn write_kubeconfig(&self, name: &str, host_ip: &str, token: &str) -> PathBuf {
        let path = self.dir.0.join(format!("{name}.kubeconfig"));
        std::fs::write(
            &path,
            kubeconfig(&format!("https://{host_ip}:{}", self.port), token),
        )
        .unwrap();
        path
    }

    /// A client of the server (in this process's namespace) as `kubeconfig` says.
    pub fn client_for(&self, kubeconfig: &Path) -> Client {
        self.runtime.block_on(client_from(kubeconfig))
    }

    /// The admin's kubeconfig, for a client in `ns` over `reach_from`'s veth.
    pub fn admin_kubeconfig(&self, host_ip: &str) -> PathBuf {
        let path = self.dir.0.join(format!("admin-{host_ip}.kubeconfig"));
        std::fs::write(
            &path,
            kubeconfig(
                &format!("https://{host_ip}:{}", self.port),
                &self.admin_token,
            ),
        )
        .unwrap();
        path
    }
}

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

fn kubeconfig(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\nusers:\n- name: test\n  user:\n    token: {token}\ncontexts:\n- name: test\n  context: {{cluster: test, user: test}}\ncurrent-context: test\n"
    )
}

async fn client_from(path: &Path) -> Client {
    let file = kube::config::Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default())
        .await
        .unwrap();
    xwire_pki::tls::install_process_default();
    Client::try_from(config).unwrap()
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
fn bind_pod_as(
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
/// Secret (`ca_secret`: what `xwirectl ca-secret` prints) and the Node objects.
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
        "base/admission.yaml",
        "base/daemonset.yaml",
    ] {
        server
            .apply(&deploy(file), true)
            .unwrap_or_else(|e| panic!("{file}: dry run: {e}"));
    }
    server.apply(&deploy("base/rbac.yaml"), false).unwrap();
    server.apply(&deploy("base/admission.yaml"), false).unwrap();
    server.apply(ca_secret, false).unwrap();
    for (i, name) in nodes.names.iter().enumerate() {
        register_node(server, name, &nodes.underlay_ip(i));
    }
}

/// Two node namespaces joined by an underlay, each reaching the API server over a veth
/// of its own. Each daemon runs the Kubernetes backend with the DaemonSet's
/// ServiceAccount token: no certificate files and no peers in its configuration; it
/// issues its certificate from the CA Secret and finds its peers in the Node objects.
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

/// A started API server, or `None` after reporting the test skipped with the reason
/// (no kube-apiserver here).
pub fn start_or_skip() -> Option<ApiServer> {
    match ApiServer::start() {
        Ok(server) => Some(server),
        Err(reason) => {
            crate::skip(&reason);
            None
        }
    }
}
