//! A real Kubernetes node on this machine, for the tests that deploy `deploy/` as an
//! operator would: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the
//! kubelet, containerd and runc, and a primary CNI (the bridge plugin) for xwire to chain
//! after. Nothing is faked and nothing is pulled: the images are made here `FROM
//! scratch` and imported into containerd.
//!
//! The Kubernetes binaries are found as envtest finds them (`KUBEBUILDER_ASSETS`, then
//! PATH); the rest are Debian's packages (`containerd runc containernetworking-plugins
//! busybox-static podman nftables`). When one is missing, [`RealNode::start`] says which,
//! and the test reports itself skipped.
//!
//! The node changes the host where the DaemonSet's host paths make it (`/etc/cni/net.d`,
//! `/opt/cni/bin`, `/run/xwire`, `/var/lib/xwire`), and for what kube-proxy and a systemd
//! host would provide; each change is undone when the node drops, also after a failed
//! test. Facts about this kind of host that shaped the set-up: the VM lacks
//! CAP_SYS_RESOURCE (containerd must not lower `oom_score_adj`), cgroups are v1 (kubelet
//! 1.36 refuses them unless told), there is no `dummy` module, and no kube-proxy.

mod host;
mod images;
mod pki;
mod second;
mod teardown;

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::assets;
use crate::cluster::TempDir;
use crate::ChildGuard;

pub use images::BUSYBOX;
pub use second::{SecondNode, NODE2_IP, NODE2_NAME};

/// The node's name, addresses and ranges: fixed, since one real node runs at a time
/// (it owns the host's CNI directories), and unused by every other test.
pub const NODE_NAME: &str = "xwt-node1";
pub const NODE_IP: &str = "10.230.0.1";
const SERVICES: &str = "10.231.0.0/24";
const SERVICE_IP: &str = "10.231.0.1";
const PODS: &str = "10.232.0.0/24";
const NODE_BRIDGE: &str = "xwtnode0";
const POD_BRIDGE: &str = "xwtpods0";
const NAT_TABLE: &str = "xwt_realnode";
/// The host directories deploy/'s DaemonSet mounts (besides `/var/run/netns`).
const DAEMONSET_HOST_PATHS: [&str; 5] = [
    "/etc/cni/net.d",
    CNI_BIN_DIR,
    "/run/xwire",
    "/var/lib/xwire",
    "/var/log/xwire",
];
/// First by name in the directory, so that containerd and xwired both pick it.
pub const CONFLIST: &str = "/etc/cni/net.d/05-xwt-pods.conflist";
pub const CNI_BIN_DIR: &str = "/opt/cni/bin";
const PRIMARY_PLUGINS: [&str; 4] = ["bridge", "host-local", "loopback", "portmap"];

/// The binaries a node needs, each found or the reason it is not.
#[derive(Clone)]
pub struct Components {
    etcd: PathBuf,
    apiserver: PathBuf,
    controller_manager: PathBuf,
    scheduler: PathBuf,
    kubelet: PathBuf,
    pub kubectl: PathBuf,
    containerd: PathBuf,
    ctr: PathBuf,
    cni_plugins: PathBuf,
    busybox: PathBuf,
}

impl Components {
    /// Every component, or every one that is missing (all of them, so that one round
    /// of installing is enough).
    pub fn find() -> Result<Components, String> {
        let mut unbuilt = Vec::new();
        let mut kube = |name: &'static str| {
            assets::find(name).unwrap_or_else(|_| {
                unbuilt.push(name);
                PathBuf::new()
            })
        };
        let (etcd, apiserver) = (kube("etcd"), kube("kube-apiserver"));
        let (controller_manager, scheduler) =
            (kube("kube-controller-manager"), kube("kube-scheduler"));
        let (kubelet, kubectl) = (kube("kubelet"), kube("kubectl"));
        let mut uninstalled = Vec::new();
        let mut package = |name: &str, package: &'static str| {
            assets::on_path(name).unwrap_or_else(|| {
                uninstalled.push(package);
                PathBuf::new()
            })
        };
        let (containerd, ctr) = (
            package("containerd", "containerd"),
            package("ctr", "containerd"),
        );
        for (name, from) in [
            ("runc", "runc"),
            ("podman", "podman"),
            ("nft", "nftables"),
            ("nsenter", "util-linux"),
        ] {
            package(name, from);
        }
        let cni_plugins = ["/usr/lib/cni", "/opt/cni/bin"]
            .into_iter()
            .map(PathBuf::from)
            .find(|dir| PRIMARY_PLUGINS.iter().all(|p| dir.join(p).is_file()))
            .unwrap_or_else(|| {
                uninstalled.push("containernetworking-plugins");
                PathBuf::new()
            });
        let busybox = PathBuf::from("/bin/busybox");
        let is_static = Command::new("file")
            .arg(&busybox)
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("statically linked"));
        if !is_static {
            uninstalled.extend(["busybox-static", "file"]);
        }
        uninstalled.dedup();
        let mut reasons = Vec::new();
        if !unbuilt.is_empty() {
            reasons.push(format!(
                "{} (not in KUBEBUILDER_ASSETS, /usr/local/kubebuilder/bin or PATH; no package \
                 registry here ships them: build them from Kubernetes source)",
                unbuilt.join(", ")
            ));
        }
        if !uninstalled.is_empty() {
            reasons.push(format!("apt-get install {}", uninstalled.join(" ")));
        }
        if !reasons.is_empty() {
            return Err(format!("a real node needs {}", reasons.join("; and ")));
        }
        Ok(Components {
            etcd,
            apiserver,
            controller_manager,
            scheduler,
            kubelet,
            kubectl,
            containerd,
            ctr,
            cni_plugins,
            busybox,
        })
    }
}

/// A running node, taken apart when dropped.
pub struct RealNode {
    /// In start order; stopped in reverse, the kubelet first.
    processes: Vec<(&'static str, ChildGuard)>,
    /// Taken in `drop`, after the processes: its changes are undone last.
    host: Option<host::HostChanges>,
    components: Components,
    pki: Option<pki::Pki>,
    /// The sandbox and busybox images, for a second node to load too.
    image_archives: Vec<PathBuf>,
    netns_before: BTreeSet<String>,
    cgroups_before: BTreeSet<PathBuf>,
    containerd_socket: PathBuf,
    ctr: PathBuf,
    pub kubectl: PathBuf,
    /// The admin's kubeconfig (`system:masters`).
    pub kubeconfig: PathBuf,
    pub dir: TempDir,
}

/// Runs `cmd` to its end: its standard output, or what it said on standard error.
fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The log file of process `name` under `dir`/logs, appended to (a process started
/// again keeps what it logged before).
fn log_file(dir: &Path, name: &str) -> Result<std::fs::File, String> {
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(logs.join(format!("{name}.log")))
        .map_err(|e| e.to_string())
}

/// The last 30 lines of process `name`'s log under `dir`/logs.
fn log_tail(dir: &Path, name: &str) -> String {
    let text =
        std::fs::read_to_string(dir.join("logs").join(format!("{name}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn wait_until(what: &str, within: Duration, mut ready: impl FnMut() -> bool) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while !ready() {
        if Instant::now() > deadline {
            return Err(format!("{what}: not within {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(())
}

impl RealNode {
    /// A node, up and Ready, or why not: a missing component (`Err(Missing)`), or a
    /// failure to start one (`Err(Failed)`, with its log).
    pub fn start(components: &Components) -> Result<RealNode, String> {
        let dir = TempDir::new("realnode");
        let mut node = RealNode {
            processes: Vec::new(),
            components: components.clone(),
            pki: None,
            image_archives: Vec::new(),
            host: Some(host::HostChanges::default()),
            netns_before: teardown::named_netns(),
            cgroups_before: teardown::kubepods_cgroups(),
            containerd_socket: dir.0.join("containerd.sock"),
            ctr: components.ctr.clone(),
            kubectl: components.kubectl.clone(),
            kubeconfig: dir.0.join("pki/admin.kubeconfig"),
            dir,
        };
        node.prepare_host(components)?;
        node.start_runtime(components)?;
        node.start_control_plane(components)?;
        node.start_kubelet(components)?;
        Ok(node)
    }

    fn host(&mut self) -> &mut host::HostChanges {
        self.host.as_mut().expect("held until drop")
    }

    fn prepare_host(&mut self, components: &Components) -> Result<(), String> {
        let host = self.host();
        for dir in DAEMONSET_HOST_PATHS.into_iter().chain(["/run/netns"]) {
            host.directory(Path::new(dir))?;
        }
        host.node_address(NODE_BRIDGE, NODE_IP, SERVICES)?;
        host.forwarding()?;
        host.service_dnat(NAT_TABLE, SERVICE_IP, &format!("{NODE_IP}:6443"))?;
        host.shared_root()?;
        for plugin in PRIMARY_PLUGINS {
            host.copy_if_missing(
                &components.cni_plugins.join(plugin),
                &Path::new(CNI_BIN_DIR).join(plugin),
            )?;
        }
        host.remove_afterwards(&Path::new(CNI_BIN_DIR).join("xwire"));
        let conflist = primary_conflist(PODS, &self.dir.0.join("cni-ipam"));
        self.host().new_file(Path::new(CONFLIST), &conflist)?;
        let node_ip: IpAddr = NODE_IP.parse().unwrap();
        self.pki = Some(pki::write(
            &self.dir.0.join("pki"),
            NODE_NAME,
            node_ip,
            SERVICE_IP.parse().unwrap(),
        ));
        Ok(())
    }

    fn spawn(&mut self, name: &'static str, cmd: &mut Command) -> Result<(), String> {
        let log = log_file(&self.dir.0, name)?;
        let child = ChildGuard::spawn(cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(log))
            .map_err(|e| format!("starting {name}: {e}"))?;
        self.processes.push((name, child));
        Ok(())
    }

    /// The last lines `name` logged.
    pub fn log(&self, name: &str) -> String {
        log_tail(&self.dir.0, name)
    }

    fn start_runtime(&mut self, components: &Components) -> Result<(), String> {
        let d = self.dir.0.clone();
        let config = d.join("containerd.toml");
        std::fs::write(
            &config,
            containerd_config(&d.join("containerd"), &self.containerd_socket),
        )
        .map_err(|e| e.to_string())?;
        self.spawn(
            "containerd",
            Command::new(&components.containerd)
                .arg("--config")
                .arg(&config),
        )?;
        let ctr = self.ctr.clone();
        let socket = self.containerd_socket.clone();
        wait_until("containerd answers", Duration::from_secs(30), || {
            Command::new(&ctr)
                .arg("--address")
                .arg(&socket)
                .arg("version")
                .output()
                .is_ok_and(|out| out.status.success())
        })
        .map_err(|e| format!("{e}\n{}", self.log("containerd")))?;
        self.image_archives = images::build(&components.busybox, &d.join("images"))?;
        for archive in &self.image_archives {
            images::load(&self.ctr, &self.containerd_socket, archive, None)?;
        }
        Ok(())
    }

    /// Imports an image archive (`cargo xtask image`'s) into the node's containerd.
    pub fn load_image(&self, archive: &Path, base_name: &str) -> Result<(), String> {
        images::load(&self.ctr, &self.containerd_socket, archive, Some(base_name))
    }

    fn start_control_plane(&mut self, components: &Components) -> Result<(), String> {
        let d = self.dir.0.clone();
        let p = d.join("pki");
        let port = |n| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .unwrap_or(n)
        };
        let (etcd_port, etcd_peer) = (port(12379), port(12380));
        self.spawn(
            "etcd",
            &mut assets::etcd(&components.etcd, &d.join("etcd"), etcd_port, etcd_peer),
        )?;
        let file = |name: &str| p.join(name).display().to_string();
        self.spawn(
            "kube-apiserver",
            Command::new(&components.apiserver).args([
                format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
                format!("--bind-address={NODE_IP}"),
                format!("--advertise-address={NODE_IP}"),
                "--secure-port=6443".into(),
                format!("--service-cluster-ip-range={SERVICES}"),
                "--allow-privileged=true".into(),
                format!("--client-ca-file={}", file("ca.crt")),
                format!("--tls-cert-file={}", file("apiserver.crt")),
                format!("--tls-private-key-file={}", file("apiserver.key")),
                format!(
                    "--kubelet-client-certificate={}",
                    file("apiserver-kubelet-client.crt")
                ),
                format!(
                    "--kubelet-client-key={}",
                    file("apiserver-kubelet-client.key")
                ),
                format!("--kubelet-certificate-authority={}", file("ca.crt")),
                // As kind does: `kubectl exec` reaches the kubelet at the node's address.
                "--kubelet-preferred-address-types=InternalIP,Hostname".into(),
                format!("--service-account-key-file={}", file("sa.pub")),
                format!("--service-account-signing-key-file={}", file("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                "--authorization-mode=Node,RBAC".into(),
                "--enable-admission-plugins=NodeRestriction".into(),
            ]),
        )?;
        let server = format!("https://{NODE_IP}:6443");
        let pki = self.pki.as_ref().expect("made first");
        for user in ["admin", "kubelet", "controller-manager", "scheduler"] {
            pki.kubeconfig(user, &server, &p);
        }
        wait_until("the API server is ready", Duration::from_secs(120), || {
            self.kubectl(&["get", "--raw", "/readyz"]).is_ok()
        })
        .map_err(|e| format!("{e}\n{}", self.log("kube-apiserver")))?;
        let kubeconfig = file("controller-manager.kubeconfig");
        self.spawn(
            "kube-controller-manager",
            Command::new(&components.controller_manager).args([
                format!("--kubeconfig={kubeconfig}"),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
                "--bind-address=127.0.0.1".into(),
                "--leader-elect=false".into(),
                "--use-service-account-credentials=true".into(),
                format!("--service-account-private-key-file={}", file("sa.key")),
                format!("--root-ca-file={}", file("ca.crt")),
                format!("--cluster-signing-cert-file={}", file("ca.crt")),
                format!("--cluster-signing-key-file={}", file("ca.key")),
                format!("--service-cluster-ip-range={SERVICES}"),
            ]),
        )?;
        let kubeconfig = file("scheduler.kubeconfig");
        self.spawn(
            "kube-scheduler",
            Command::new(&components.scheduler).args([
                format!("--kubeconfig={kubeconfig}"),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
                "--bind-address=127.0.0.1".into(),
                "--leader-elect=false".into(),
            ]),
        )
    }

    fn start_kubelet(&mut self, components: &Components) -> Result<(), String> {
        let d = self.dir.0.clone();
        let p = d.join("pki");
        let config = d.join("kubelet.yaml");
        std::fs::write(
            &config,
            kubelet_config(NODE_IP, &p, &self.containerd_socket, None),
        )
        .map_err(|e| e.to_string())?;
        self.spawn(
            "kubelet",
            Command::new(&components.kubelet)
                .arg("--config")
                .arg(&config)
                .arg("--kubeconfig")
                .arg(p.join("kubelet.kubeconfig"))
                .arg("--root-dir")
                .arg(d.join("kubelet"))
                .args(["--node-ip", NODE_IP, "--hostname-override", NODE_NAME]),
        )?;
        wait_until("the node is Ready", Duration::from_secs(180), || {
            self.node_ready(NODE_NAME)
        })
        .map_err(|e| format!("{e}\n{}", self.log("kubelet")))
    }

    /// Whether node `name` is Ready, by its Node object.
    pub fn node_ready(&self, name: &str) -> bool {
        self.kubectl(&[
            "get",
            "node",
            name,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ])
        .is_ok_and(|status| status.trim() == "True")
    }

    /// Runs kubectl as the admin; its stdout, or its stderr as the error.
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.kubectl_with_input(args, None)
    }

    /// As `kubectl`, with `input` on its stdin.
    pub fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> Result<String, String> {
        use std::io::Write;
        let mut child = Command::new(&self.kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("kubectl: {e}"))?;
        if let Some(text) = input {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(text.as_bytes())
                .map_err(|e| e.to_string())?;
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }

    /// Waits until `check` passes, up to `within`; the error says what was last seen.
    pub fn eventually<T>(
        &self,
        what: &str,
        within: Duration,
        mut check: impl FnMut() -> Result<T, String>,
    ) -> Result<T, String> {
        let deadline = Instant::now() + within;
        loop {
            match check() {
                Ok(value) => return Ok(value),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("{what}: not within {within:?}; last: {e}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        }
    }
}

/// What kind's kindnet or a cloud's primary plugin would have written: pods on a bridge,
/// addresses from host-local (its leases kept in `ipam_dir`, not the host's
/// /var/lib/cni), and a second plugin after it.
fn primary_conflist(subnet: &str, ipam_dir: &Path) -> String {
    format!(
        "{{\n  \"cniVersion\": \"1.0.0\",\n  \"name\": \"xwt-pods\",\n  \"plugins\": [\n    \
         {{\"type\": \"bridge\", \"bridge\": \"{POD_BRIDGE}\", \"isGateway\": true, \"ipMasq\": false,\n     \
         \"ipam\": {{\"type\": \"host-local\", \"dataDir\": \"{}\", \"ranges\": [[{{\"subnet\": \"{subnet}\"}}]], \"routes\": [{{\"dst\": \"0.0.0.0/0\"}}]}}}},\n    \
         {{\"type\": \"portmap\", \"capabilities\": {{\"portMappings\": true}}}}\n  ]\n}}\n",
        ipam_dir.display()
    )
}

/// containerd's configuration: its files under `dir`, serving at `socket`, the CRI
/// plugin on the local sandbox image and the CNI directories (as the node's mount
/// namespace sees them).
fn containerd_config(dir: &Path, socket: &Path) -> String {
    format!(
        "version = 2\nroot = \"{root}\"\nstate = \"{state}\"\n\
         [grpc]\n  address = \"{socket}\"\n\
         [plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{opt}\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"{sandbox}\"\n  \
         # this VM refuses a lower oom_score_adj to runc (no CAP_SYS_RESOURCE)\n  \
         restrict_oom_score_adj = true\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n  default_runtime_name = \"runc\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"io.containerd.runc.v2\"\n\
         [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc.options]\n  SystemdCgroup = false\n\
         [plugins.\"io.containerd.grpc.v1.cri\".cni]\n  bin_dir = \"{CNI_BIN_DIR}\"\n  conf_dir = \"/etc/cni/net.d\"\n  max_conf_num = 1\n",
        root = dir.join("root").display(),
        state = dir.join("state").display(),
        socket = socket.display(),
        opt = dir.join("opt").display(),
        sandbox = images::SANDBOX,
    )
}

/// A kubelet's configuration: serving at `address` with the certificates in `pki_dir`,
/// through the containerd at `socket`, its pods' cgroups under `cgroup_root`.
fn kubelet_config(
    address: &str,
    pki_dir: &Path,
    socket: &Path,
    cgroup_root: Option<&str>,
) -> String {
    let mut text = format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         authentication:\n  anonymous: {{enabled: false}}\n  webhook: {{enabled: true}}\n  x509: {{clientCAFile: {ca}}}\n\
         authorization: {{mode: Webhook}}\n\
         address: {address}\nport: 10250\nreadOnlyPort: 0\n\
         healthzBindAddress: 127.0.0.1\nhealthzPort: 10248\n\
         tlsCertFile: {cert}\ntlsPrivateKeyFile: {key}\n\
         cgroupDriver: cgroupfs\n\
         # this host's cgroups are v1, which kubelet 1.36 refuses unless told\n\
         failCgroupV1: false\nfailSwapOn: false\n\
         containerRuntimeEndpoint: unix://{socket}\n\
         clusterDomain: cluster.local\nresolvConf: /etc/resolv.conf\n\
         # the test machine's disk is shared and may be full-ish: no evictions\n\
         evictionHard: {{memory.available: 50Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}}\n\
         imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n",
        ca = pki_dir.join("ca.crt").display(),
        cert = pki_dir.join("kubelet-serving.crt").display(),
        key = pki_dir.join("kubelet-serving.key").display(),
        socket = socket.display(),
    );
    if let Some(root) = cgroup_root {
        text.push_str(&format!("cgroupRoot: {root}\n"));
    }
    text
}

impl Drop for RealNode {
    fn drop(&mut self) {
        // The kubelet first, so that nothing restarts what is killed next.
        if let Some(at) = self
            .processes
            .iter()
            .position(|(name, _)| *name == "kubelet")
        {
            drop(self.processes.remove(at));
        }
        teardown::kill_containers(&self.containerd_socket);
        while let Some((_, process)) = self.processes.pop() {
            drop(process);
        }
        teardown::unmount_under(&self.dir.0);
        teardown::remove_sandbox_netns(&self.netns_before);
        teardown::remove_kubepods_cgroups(&self.cgroups_before);
        let _ = Command::new("ip")
            .args(["link", "del", POD_BRIDGE])
            .output();
        drop(self.host.take());
    }
}

/// The processes whose command name is `name`.
pub fn processes_named(name: &str) -> Vec<u32> {
    crate::processes::all()
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .collect()
}

/// A node, or `None` after reporting the test skipped with the reason (a component
/// missing). A component that is present but fails to start fails the test.
pub fn start_or_skip() -> Option<RealNode> {
    let components = match Components::find() {
        Ok(found) => found,
        Err(reason) => {
            crate::skip(&reason);
            return None;
        }
    };
    Some(
        RealNode::start(&components).unwrap_or_else(|e| panic!("the real node did not start: {e}")),
    )
}
