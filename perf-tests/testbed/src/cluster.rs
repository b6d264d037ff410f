//! Nodes of a cluster in network namespaces, each running its own `xwired`, and pods
//! attached to them through the `xwire` plugin called as a runtime calls it. Shared by the
//! control plane's tests and the CNI benchmark; the binaries are the caller's to supply.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};
use xwire_pki::ClusterCa;
use xwire_proto::local::{NodeState, Request, Response, TopologyApply};

use super::{ChildGuard, Netns};

/// The most UMEM frames a fast-path port of a test daemon grows to (`frames_per_port`;
/// ports open with their share of the daemon's `resting_frames_per_worker`, no more
/// than this): written out so that a change of the daemon's default does not change
/// what the tests and scenarios pin.
pub const TEST_FRAMES_PER_PORT: usize = 256;

/// Another package's binary, which cargo does not build for a package's tests by itself:
/// built once per test process (`once`), into the target directory that holds `beside`
/// (a binary of the package under test).
pub fn built_beside(once: &std::sync::Once, beside: &Path, package: &str, bin: &str) -> PathBuf {
    once.call_once(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", package, "--bin", bin])
            .status()
            .expect("run cargo");
        assert!(status.success(), "building {bin} failed");
    });
    beside.with_file_name(bin)
}

/// A directory removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xwt-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A node: its namespace, its daemon, and the daemon's files.
pub struct Node {
    xwired: PathBuf,
    pub name: String,
    pub dir: TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    daemon: Option<ChildGuard>,
    pub ns: Netns,
}

impl Node {
    /// A node namespace with a daemon configured by `extra` (TOML lines added to the
    /// name, state directory and socket, and to `TEST_FRAMES_PER_PORT` unless `extra`
    /// sets `frames_per_port` itself).
    pub fn start(xwired: &Path, name: &str, extra: &str) -> Node {
        let ns = Netns::new(name).unwrap();
        Node::start_in(xwired, ns, name, extra)
    }

    pub fn start_in(xwired: &Path, ns: Netns, name: &str, extra: &str) -> Node {
        let dir = TempDir::new(name);
        let socket = dir.0.join("api.sock");
        let config = dir.0.join("xwired.toml");
        let frames = if extra.contains("frames_per_port") {
            String::new()
        } else {
            format!("frames_per_port = {TEST_FRAMES_PER_PORT}\n")
        };
        std::fs::write(
            &config,
            format!(
                "node_name = \"{name}\"\nstate_dir = \"{}\"\napi_socket = \"{}\"\n{frames}{extra}\n",
                dir.0.join("state").display(),
                socket.display()
            ),
        )
        .unwrap();
        let mut node = Node {
            xwired: xwired.to_owned(),
            name: name.into(),
            dir,
            socket,
            config,
            daemon: None,
            ns,
        };
        node.restart();
        node
    }

    /// Starts the daemon (again) and waits for its socket to answer.
    pub fn restart(&mut self) {
        self.stop();
        let log = std::fs::File::create(self.dir.0.join("xwired.log")).unwrap();
        let child = self
            .ns
            .spawn(
                Command::new(&self.xwired)
                    .arg("--config")
                    .arg(&self.config)
                    .stdout(Stdio::null())
                    .stderr(log),
            )
            .unwrap();
        self.daemon = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.ask(&Request::State).is_err() {
            assert!(
                Instant::now() < deadline,
                "xwired did not come up:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the daemon (as a crash would: no clean-up).
    pub fn stop(&mut self) {
        self.daemon = None;
        let _ = std::fs::remove_file(&self.socket);
    }

    /// The running daemon's process id.
    pub fn daemon_pid(&mut self) -> Option<u32> {
        Some(self.daemon.as_mut()?.child().id())
    }

    /// The CPU time (user and system, all threads) the running daemon has used so far.
    pub fn daemon_cpu(&mut self) -> Option<Duration> {
        let pid = self.daemon_pid()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The fields after the command name (which may hold spaces), from field 3 on.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 =
            fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // SAFETY: sysconf reads a constant of the C library; it touches no memory of ours.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        (per_second > 0).then(|| Duration::from_secs_f64(ticks as f64 / per_second as f64))
    }

    /// The daemon's resident memory (VmRSS), in KiB: its UMEMs are pinned, so resident.
    pub fn daemon_rss_kib(&mut self) -> Option<u64> {
        let pid = self.daemon_pid()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.0.join("xwired.log")).unwrap_or_default()
    }

    pub fn ask(&self, request: &Request) -> std::io::Result<Response> {
        xwire_api_client::call(&self.socket, request, Duration::from_secs(60))
    }

    /// Stores Topology objects (YAML, one per document); panics if the daemon refuses.
    pub fn apply(&self, yaml: &str) -> Response {
        let mut objects = Vec::new();
        for document in serde_yaml_ng::Deserializer::from_str(yaml) {
            objects.push(Value::deserialize(document).unwrap());
        }
        self.apply_objects(objects)
    }

    /// Stores Topology objects given as JSON; panics if the daemon refuses.
    pub fn apply_objects(&self, objects: Vec<Value>) -> Response {
        let response = self
            .ask(&Request::TopologyApply(TopologyApply { objects }))
            .unwrap();
        assert!(!matches!(response, Response::Error(_)), "{response:?}");
        response
    }

    pub fn state(&self) -> NodeState {
        match self.ask(&Request::State).unwrap() {
            Response::State(state) => state,
            other => panic!("{other:?}"),
        }
    }

    /// The state of one wire end record, e.g. "veth", "remote" or "pending".
    pub fn wire_state(&self, pod: &str, uid: u64) -> Option<String> {
        self.state()
            .wires
            .iter()
            .find(|w| w["local_pod_name"] == pod && w["link_uid"] == uid)
            .map(|w| w["state"].as_str().unwrap().to_owned())
    }

    /// The network configuration a runtime would pass for this node.
    pub fn net_config(&self, version: &str) -> Value {
        json!({
            "cniVersion": version,
            "name": "labnet",
            "type": "xwire",
            "socket": self.socket,
            "namespace": "lab",
            "logFile": self.dir.0.join("cni.log"),
        })
    }
}

/// What the plugin printed and its exit code.
pub struct Outcome {
    pub code: i32,
    pub output: Value,
}

impl Outcome {
    pub fn error_code(&self) -> Option<u64> {
        (self.code != 0).then(|| self.output["code"].as_u64().unwrap_or(0))
    }
}

/// Calls the plugin as a runtime does: the CNI variables in the environment, the
/// configuration on stdin.
pub fn plugin(bin: &Path, command: &str, env: &[(&str, &str)], config: &Value) -> Outcome {
    plugin_raw(bin, command, env, config.to_string().as_bytes())
}

pub fn plugin_raw(bin: &Path, command: &str, env: &[(&str, &str)], stdin: &[u8]) -> Outcome {
    let mut child = Command::new(bin)
        .env_clear()
        .env("CNI_COMMAND", command)
        .env("CNI_PATH", "/usr/lib/cni")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A plugin may answer without reading stdin (VERSION does): as Go's os/exec, which
    // runtimes use, a closed pipe is not an error.
    match child.stdin.take().unwrap().write_all(stdin) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("plugin stdin: {e}"),
        _ => {}
    }
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let output = if text.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("plugin printed non-JSON ({e}): {text}"))
    };
    Outcome {
        code: out.status.code().unwrap_or(-1),
        output,
    }
}

/// A pod: its namespace and the container id it is attached under.
pub struct Pod {
    pub name: String,
    pub ns: Netns,
    pub container: String,
}

impl Pod {
    pub fn new(name: &str) -> Pod {
        Pod {
            name: name.into(),
            ns: Netns::new(name).unwrap(),
            container: format!("ctr-{name}-{}", std::process::id()),
        }
    }

    pub fn netns(&self) -> String {
        self.ns.path().display().to_string()
    }

    /// Calls the plugin for this pod with `config`.
    pub fn call(&self, bin: &Path, command: &str, config: &Value) -> Outcome {
        let netns = self.netns();
        let args = format!("IgnoreUnknown=1;K8S_POD_NAME={}", self.name);
        plugin(
            bin,
            command,
            &[
                ("CNI_CONTAINERID", self.container.as_str()),
                ("CNI_NETNS", netns.as_str()),
                ("CNI_IFNAME", "eth0"),
                ("CNI_ARGS", args.as_str()),
            ],
            config,
        )
    }

    pub fn has(&self, ifname: &str) -> bool {
        self.ns.links().unwrap().iter().any(|l| l == ifname)
    }
}

/// Waits up to `limit` for `f` to hold.
pub fn eventually(limit: Duration, f: impl FnMut() -> bool) -> bool {
    eventually_every(limit, Duration::from_millis(50), f)
}

/// Waits up to `limit` for `f` to hold, looking every `step` (a short step where the time
/// it ends is itself measured).
pub fn eventually_every(limit: Duration, step: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(step);
    }
}

/// Writes a cluster CA and certificates for `nodes` into `dir`; returns the TOML
/// `[certs]` section for a node.
pub fn write_certs(dir: &Path, nodes: &[&str]) {
    let ca = ClusterCa::generate("test CA").unwrap();
    std::fs::write(dir.join("ca.pem"), ca.cert_pem()).unwrap();
    for node in nodes {
        let id = ca.issue(node).unwrap();
        std::fs::write(dir.join(format!("{node}.pem")), id.cert_pem).unwrap();
        std::fs::write(dir.join(format!("{node}.key")), id.key_pem).unwrap();
    }
}

pub fn certs_toml(dir: &Path, node: &str) -> String {
    format!(
        "[certs]\nca = \"{0}/ca.pem\"\ncert = \"{0}/{node}.pem\"\nkey = \"{0}/{node}.key\"\n",
        dir.display()
    )
}

/// Two nodes named `names`, each a namespace with its own daemon, joined by an underlay
/// veth on `subnet` (`.1` and `.2`, a /24 given as its first three octets), peers of
/// each other, with room for `max_ports` fast-path ports of `frames_per_port` UMEM
/// frames each; certificates go in `certs`. `extra` is more of `xwired.toml` (top-level
/// keys), the same for both.
pub fn node_pair(
    xwired: &Path,
    certs: &TempDir,
    names: [&str; 2],
    subnet: &str,
    (max_ports, frames_per_port): (usize, usize),
    extra: &str,
) -> Result<(Node, Node), super::Error> {
    let (ns_a, ns_b) = (Netns::new(names[0])?, Netns::new(names[1])?);
    let underlay = super::Veth::new(&ns_a, &ns_b)?;
    ns_a.add_address(underlay.a_name(), &format!("{subnet}.1/24"))?;
    ns_b.add_address(underlay.b_name(), &format!("{subnet}.2/24"))?;
    underlay.set_up()?;
    std::mem::forget(underlay); // the namespaces take it with them
    write_certs(&certs.0, &names);
    let config = |me: &str, my_ip: &str, peer: &str, peer_ip: &str| {
        format!(
            "node_address = \"{my_ip}:7470\"\nmax_ports = {max_ports}\nframes_per_port = {frames_per_port}\n{extra}\n{}[[peers]]\nname = \"{peer}\"\naddress = \"{peer_ip}:7470\"\n",
            certs_toml(&certs.0, me)
        )
    };
    let (ip_a, ip_b) = (format!("{subnet}.1"), format!("{subnet}.2"));
    let a = Node::start_in(
        xwired,
        ns_a,
        names[0],
        &config(names[0], &ip_a, names[1], &ip_b),
    );
    let b = Node::start_in(
        xwired,
        ns_b,
        names[1],
        &config(names[1], &ip_b, names[0], &ip_a),
    );
    Ok((a, b))
}
