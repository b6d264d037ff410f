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

use crate::assets::find;
use crate::cluster::TempDir;
use crate::ChildGuard;

mod install;

pub use install::{
    apply_objects, bind_pod, deploy, deregister_node, install, kube_nodes, kube_nodes_with,
    reach_from, register_node, Nodes,
};

pub struct ApiServer {
    // Dropped in this order: the signer, the server, its etcd.
    signer: std::sync::Mutex<Option<ChildGuard>>,
    _apiserver: ChildGuard,
    _etcd: ChildGuard,
    pub dir: TempDir,
    pub port: u16,
    pub runtime: tokio::runtime::Runtime,
    pub client: Client,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(super) fn run(cmd: &mut Command) {
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
            crate::assets::etcd(&etcd_bin, &d.join("etcd"), etcd_port, etcd_peer)
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
            signer: std::sync::Mutex::new(None),
            _apiserver: apiserver,
            _etcd: etcd,
            dir,
            port,
            runtime,
            client,
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
        // A server just started may not serve every group yet: discovery is run again
        // until it knows every kind, for up to 10 s.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut discovery = self.discover()?;
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
            while discovery.resolve_gvk(&gvk).is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
                discovery = self.discover()?;
            }
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
            loop {
                match self
                    .runtime
                    .block_on(api.patch(&name, &params, &Patch::Apply(&value)))
                {
                    Ok(_) => break,
                    Err(e) if transient(&e) && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(e) => return Err(format!("{} {name}: {e}", gvk.kind)),
                }
            }
        }
        Ok(())
    }

    fn discover(&self) -> Result<kube::Discovery, String> {
        self.runtime
            .block_on(kube::Discovery::new(self.client.clone()).run())
            .map_err(|e| e.to_string())
    }

    /// Waits until the CRDs are served.
    pub(crate) fn wait_for_crds(&self) {
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
        let made = install::bind_pod_as(self, namespace, &name, node, Some(account));
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

    /// Runs `xwire-signer` (`binary`) as its Deployment would: with the token of its
    /// ServiceAccount, whose RBAC is deploy/base/signer.yaml's. Once per server; `install`
    /// first.
    pub fn start_signer(&self, binary: &Path) {
        let mut signer = self.signer.lock().unwrap();
        if signer.is_some() {
            return;
        }
        let kubeconfig =
            self.service_account_kubeconfig("xwire-system", "xwire-signer", "127.0.0.1");
        let log = std::fs::File::create(self.dir.0.join("signer.log")).unwrap();
        *signer = Some(
            ChildGuard::spawn(
                Command::new(binary)
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .args(["--ca-secret", "xwire-system/xwire-ca"])
                    .args(["--node-account", "xwire-system/xwired"])
                    .stdout(Stdio::null())
                    .stderr(log),
            )
            .unwrap_or_else(|e| panic!("starting {}: {e}", binary.display())),
        );
    }

    /// Requests the server has served since it started, by its own count (the sum of
    /// `apiserver_request_total` on its metrics endpoint, read as the admin: that read
    /// is not counted in it until the next).
    pub fn requests_served(&self) -> Result<u64, String> {
        self.metrics().map(|text| request_total(&text))
    }

    /// As `requests_served`, by verb and resource (`PATCH gwirekobjs/status`), from the
    /// same counter's labels.
    pub fn requests_by_kind(&self) -> Result<std::collections::BTreeMap<String, u64>, String> {
        self.metrics().map(|text| requests_by_kind(&text))
    }

    /// The server's metrics endpoint, read as the admin.
    fn metrics(&self) -> Result<String, String> {
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        self.runtime
            .block_on(self.client.request_text(request))
            .map_err(|e| e.to_string())
    }

    /// What the signer logged.
    pub fn signer_log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("signer.log")).unwrap_or_default()
    }
}

/// The sum of every `apiserver_request_total` series in a Prometheus text exposition.
fn request_total(metrics: &str) -> u64 {
    metrics
        .lines()
        .filter(|line| line.starts_with("apiserver_request_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// `apiserver_request_total`'s series summed by verb and resource (with its
/// subresource).
fn requests_by_kind(metrics: &str) -> std::collections::BTreeMap<String, u64> {
    let mut kinds = std::collections::BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(count) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split("\",")
                .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let (verb, resource, sub) = (label("verb"), label("resource"), label("subresource"));
        let what = match (resource.is_empty(), sub.is_empty()) {
            (true, _) => format!("{verb} (no resource)"),
            (false, true) => format!("{verb} {resource}"),
            (false, false) => format!("{verb} {resource}/{sub}"),
        };
        *kinds.entry(what).or_insert(0) += count as u64;
    }
    kinds
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

/// An answer a server gives while it is still starting or briefly overloaded (too many
/// requests, a timeout of its own or etcd's, not ready to serve), that a client tries
/// again. Once, on a cold start of three servers and their etcds at once on two cores,
/// a test's first dry run failed; its message was not kept and eight runs after did not
/// repeat it, so these are the likely answers rather than one seen.
fn transient(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(response) if matches!(response.code, 429 | 500 | 503 | 504))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_answers_of_a_starting_or_busy_server_are_tried_again() {
        let answer = |code| {
            kube::Error::Api(kube::core::ErrorResponse {
                status: "Failure".into(),
                message: String::new(),
                reason: String::new(),
                code,
            })
        };
        for code in [429, 500, 503, 504] {
            assert!(super::transient(&answer(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422] {
            assert!(!super::transient(&answer(code)), "{code}");
        }
    }

    #[test]
    fn every_series_of_the_request_counter_is_summed_and_nothing_else() {
        let metrics = "# HELP apiserver_request_total Counter\n\
            # TYPE apiserver_request_total counter\n\
            apiserver_request_total{code=\"200\",verb=\"GET\"} 12\n\
            apiserver_request_total{code=\"201\",verb=\"POST\"} 3\n\
            apiserver_request_duration_seconds_count{verb=\"GET\"} 99\n";
        assert_eq!(super::request_total(metrics), 15);
    }

    #[test]
    fn the_request_counter_is_summed_by_verb_and_resource() {
        let metrics = "apiserver_request_total{code=\"200\",resource=\"gwirekobjs\",subresource=\"status\",verb=\"PATCH\"} 4\n\
            apiserver_request_total{code=\"409\",resource=\"gwirekobjs\",subresource=\"status\",verb=\"PATCH\"} 1\n\
            apiserver_request_total{code=\"200\",resource=\"topologies\",subresource=\"\",verb=\"GET\"} 2\n\
            apiserver_request_total{code=\"200\",resource=\"\",subresource=\"\",verb=\"GET\"} 7\n";
        let kinds = super::requests_by_kind(metrics);
        assert_eq!(kinds["PATCH gwirekobjs/status"], 5);
        assert_eq!(kinds["GET topologies"], 2);
        assert_eq!(kinds["GET (no resource)"], 7);
        assert_eq!(kinds.len(), 3);
    }
}
