//! `xwirectl lab up`: namespaces, the underlay, a CA, one supervised `xwired` per node,
//! the lab's Topology objects in every node's store, and the CNI plugin called for every
//! pod as a runtime would call it. On any failure everything made so far is removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};
use xwire_pki::ClusterCa;
use xwire_proto::local::Request;

use super::file::{self, Lab};
use super::paths::{self, LabPaths, NODE_PORT};
use super::{containers, down, mgmt, namespaces, node_api, underlay};

/// Where to look first for xwired, the plugin and xwire-pktgen (another build, say).
pub(crate) const BIN_DIR_VARIABLE: &str = "XWIRE_LAB_BIN_DIR";
/// How long a node's daemon has to answer after it starts.
const DAEMON_START_LIMIT: Duration = Duration::from_secs(30);
/// How long every wire has to come up after the last pod is added.
const WIRES_UP_LIMIT: Duration = Duration::from_secs(60);

/// The programs a lab runs: found in `$XWIRE_LAB_BIN_DIR` when it is set, else next to
/// the running `xwirectl`, else on PATH.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub xwirectl: PathBuf,
    pub xwired: PathBuf,
    pub plugin: PathBuf,
}

impl Binaries {
    pub fn find() -> Result<Binaries> {
        Ok(Binaries {
            xwirectl: std::env::current_exe().context("where is xwirectl")?,
            xwired: find_binary("xwired")?,
            plugin: find_binary("xwire")?,
        })
    }
}

/// The program `name`: in `$XWIRE_LAB_BIN_DIR` when it is set, else next to the running
/// `xwirectl`, else on PATH.
pub fn find_binary(name: &str) -> Result<PathBuf> {
    let exe = match std::env::var_os(BIN_DIR_VARIABLE) {
        Some(dir) => PathBuf::from(dir).join("xwirectl"),
        None => std::env::current_exe().context("where is xwirectl")?,
    };
    let beside = exe.with_file_name(name);
    if beside.is_file() {
        return Ok(beside);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .with_context(|| {
            format!(
                "cannot find {name} next to {} or on PATH (build it: cargo build --workspace)",
                exe.display()
            )
        })
}

/// Set by SIGINT or SIGTERM while `up` works: it stops at the next step and removes what
/// it made, rather than dying half way.
static INTERRUPTED: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);

fn check_interrupted() -> Result<()> {
    if INTERRUPTED.load(Ordering::Relaxed) {
        bail!("interrupted");
    }
    Ok(())
}

fn catch_interrupts() -> Result<()> {
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&INTERRUPTED))?;
    }
    Ok(())
}

/// How long each phase of `up` took, in order: where a large lab's time goes.
#[derive(Debug, Default)]
pub struct Phases {
    pub took: Vec<(&'static str, Duration)>,
}

impl Phases {
    fn time<T>(&mut self, phase: &'static str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        let started = Instant::now();
        let done = f();
        self.took.push((phase, started.elapsed()));
        done
    }

    /// One line: the whole, then each phase.
    pub fn render(&self) -> String {
        let total: Duration = self.took.iter().map(|(_, d)| *d).sum();
        let parts: Vec<String> = self
            .took
            .iter()
            .map(|(phase, d)| format!("{phase} {:.1} s", d.as_secs_f64()))
            .collect();
        format!("up in {:.1} s: {}", total.as_secs_f64(), parts.join(", "))
    }
}

/// Brings the lab in `file` up; returns it once every wire is up, with the time each
/// phase took.
pub fn up(file: &Path, binaries: &Binaries, no_containers: bool) -> Result<(Lab, Phases)> {
    let text = crate::file::read(file).with_context(|| format!("read {}", file.display()))?;
    let mut lab =
        file::parse(&text, None).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    if no_containers && !lab.containers.is_empty() {
        // For wiring alone: an imported lab tried before its images exist.
        eprintln!(
            "--no-containers: pods {} are bare namespaces (their images are not run)",
            lab.containers
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        );
        lab.containers.clear();
    }
    containers::resolve_binds(&mut lab, file);
    let paths = LabPaths::new(&lab.name)?;
    mgmt::pick_subnets(&mut lab)?;
    if paths.dir.exists() || namespaces::all().iter().any(|n| paths.owns_netns(n)) {
        bail!(
            "a lab named {0} is already up (or was not cleared away): `xwirectl lab down --lab {0}` first",
            lab.name
        );
    }
    // Before anything is made: an image that cannot be had is said at once.
    containers::ensure_images(&lab)?;
    catch_interrupts()?;
    let raised = crate::neighbours::raise_for(&lab)?;
    if !raised.is_empty() {
        eprintln!(
            "raised the host's neighbour table limits for this lab's pods: {}",
            raised.join(", ")
        );
    }
    // The steps `build` takes: the lab directory, the underlay, the management network,
    // the certificates, the topology and the wait for the wires; a namespace and a
    // daemon per node; a namespace and an ADD per pod; a start per container. (5 here
    // made the bar end at 19/18.)
    let steps = 6 + lab.nodes.len() * 2 + lab.pods.len() * 2 + lab.containers.len();
    let progress = ProgressBar::new(steps as u64).with_style(
        ProgressStyle::with_template("{spinner} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    progress.enable_steady_tick(Duration::from_millis(100));
    let mut phases = Phases::default();
    match build(&lab, &paths, binaries, &progress, &mut phases) {
        Ok(()) => {
            progress.finish_and_clear();
            Ok((lab, phases))
        }
        Err(e) => {
            // Ctrl-C reaches the plugin and podman too (the terminal signals the whole
            // job), so the step under way fails for it: say why, not how.
            let interrupted = INTERRUPTED.load(Ordering::Relaxed);
            progress.abandon_with_message(if interrupted {
                "interrupted".to_owned()
            } else {
                format!("failed: {e:#}")
            });
            let removed = down::clear(&paths);
            if interrupted {
                bail!(
                    "lab {} did not come up: interrupted (Ctrl-C or SIGTERM); everything it made is removed: {removed}",
                    lab.name
                );
            }
            Err(e.context(format!(
                "lab {} did not come up; everything it made is removed: {removed}",
                lab.name
            )))
        }
    }
}

fn build(
    lab: &Lab,
    paths: &LabPaths,
    binaries: &Binaries,
    progress: &ProgressBar,
    phases: &mut Phases,
) -> Result<()> {
    let step = |message: String| {
        progress.set_message(message);
        progress.inc(1);
        check_interrupted()
    };
    phases.time("namespaces and underlay", || {
        step(format!("lab directory {}", paths.dir.display()))?;
        paths.create_dir()?;
        std::fs::write(paths.lab_file(), serde_json::to_vec_pretty(lab)?)?;
        step("underlay".into())?;
        let lab_ns = namespaces::create(&paths.lab_netns())?;
        underlay::build(lab, paths, &lab_ns, step)?;
        // Side by side, as the pods' other steps: at 3,000 pods on two cores, 3.0 s
        // against 4.2 to 9.8 s one after another.
        each_node_side_by_side(lab, |pod, _| {
            step(format!("pod {pod}: namespace"))?;
            namespaces::create(&paths.pod_netns(pod)).map(drop)
        })
    })?;
    phases.time("management network", || {
        step("management network".into())?;
        mgmt::build_nodes(lab, paths)?;
        let node_namespaces = lab
            .nodes
            .iter()
            .map(|node| Ok((node.as_str(), namespaces::open(&paths.node_netns(node))?)))
            .collect::<Result<BTreeMap<_, _>>>()?;
        each_node_side_by_side(lab, |pod, node| {
            check_interrupted()?;
            mgmt::add_pod(lab, paths, pod, &node_namespaces[node])
        })
    })?;
    phases.time("daemons", || {
        step("certificates and node configurations".into())?;
        write_node_files(lab, paths)?;
        start_supervisor(paths, binaries)?;
        for node in &lab.nodes {
            step(format!("node {node}: xwired starting"))?;
            wait_for_daemon(paths, node)?;
        }
        step("topology".into())?;
        node_api::apply_topology(lab, paths)
    })?;
    // Each node's pods in turn, as its runtime would start them; the nodes side by side.
    phases.time("CNI ADDs", || {
        each_node_side_by_side(lab, |pod, node| {
            step(format!("pod {pod}: CNI ADD on {node}"))?;
            call_plugin(paths, binaries, "ADD", pod, node).map(drop)
        })
    })?;
    phases.time("wires", || {
        step("waiting for every wire".into())?;
        wait_for_wires(lab, paths)
    })?;
    if !lab.containers.is_empty() {
        // The namespace first, then the container: it starts with its interfaces in place.
        phases.time("containers", || {
            for (pod, container) in &lab.containers {
                step(format!("pod {pod}: container {}", container.image))?;
                containers::start(lab, pod, container)?;
                containers::run_exec(lab, pod, container)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// Runs `f` on every pod (with its node), one thread per node taking its pods in order,
/// the nodes side by side (on a machine, as on a cluster, nodes do their pods' work at
/// once). The first failure, once every thread has stopped.
fn each_node_side_by_side(lab: &Lab, f: impl Fn(&str, &str) -> Result<()> + Sync) -> Result<()> {
    let mut by_node: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (pod, node) in &lab.pods {
        by_node.entry(node).or_default().push(pod);
    }
    let f = &f;
    std::thread::scope(|scope| {
        let threads: Vec<_> = by_node
            .into_iter()
            .map(|(node, pods)| scope.spawn(move || pods.iter().try_for_each(|pod| f(pod, node))))
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a node's thread panicked")))
            })
            .collect::<Result<Vec<()>>>()
            .map(drop)
    })
}

fn write_node_files(lab: &Lab, paths: &LabPaths) -> Result<()> {
    let certs = paths.certs_dir();
    std::fs::create_dir_all(&certs)?;
    let ca = ClusterCa::generate(&format!("xwire lab {} CA", lab.name))?;
    std::fs::write(certs.join("ca.pem"), ca.cert_pem())?;
    xwire_netns::named::bind_current(&paths.host_netns())
        .context("keep a handle on this network namespace for the metrics sockets")?;
    let metrics = metrics_addresses(lab.nodes.len())?;
    for (index, node) in lab.nodes.iter().enumerate() {
        let identity = ca.issue(node)?;
        std::fs::write(certs.join(format!("{node}.pem")), &identity.cert_pem)?;
        let key = certs.join(format!("{node}.key"));
        xwire_pki::write_private(&key, identity.key_pem.as_bytes())?;
        std::fs::create_dir_all(paths.node_dir(node))?;
        let mut config = format!(
            "node_name = \"{node}\"\n\
             node_address = \"{}:{NODE_PORT}\"\n\
             state_dir = \"{}\"\n\
             api_socket = \"{}\"\n\
             underlay_mtu = {}\n\
             metrics_address = \"{}\"\n\
             metrics_netns = \"{}\"\n\
             {}\
             [certs]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            underlay::node_address(lab, node),
            paths.node_dir(node).join("state").display(),
            paths.node_socket(node).display(),
            underlay::node_underlay_mtu(lab),
            metrics[index],
            paths.host_netns().display(),
            lab.frames_per_port
                .map(|frames| format!("frames_per_port = {frames}\n"))
                .unwrap_or_default(),
            certs.join("ca.pem").display(),
            certs.join(format!("{node}.pem")).display(),
            key.display(),
        );
        for peer in &lab.nodes {
            if peer != node {
                config.push_str(&format!(
                    "[[peers]]\nname = \"{peer}\"\naddress = \"{}:{NODE_PORT}\"\n",
                    underlay::node_address(lab, peer)
                ));
            }
        }
        config.push_str(&underlay::pools_toml(lab, node));
        std::fs::write(paths.node_config(node), config)?;
    }
    Ok(())
}

/// A free loopback port for each node's metrics: all held at once while they are picked,
/// so that no two nodes get the same one.
fn metrics_addresses(count: usize) -> Result<Vec<std::net::SocketAddr>> {
    let held: Vec<std::net::TcpListener> = (0..count)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()
        .context("pick ports for the nodes' metrics")?;
    Ok(held
        .iter()
        .map(|l| l.local_addr())
        .collect::<Result<_, _>>()?)
}

/// Starts `xwirectl lab supervise NAME` in its own process group (a Ctrl-C at the
/// terminal that ran `lab up` must not reach it), with its output in the lab's directory.
fn start_supervisor(paths: &LabPaths, binaries: &Binaries) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(paths.supervisor_log())?;
    let child = Command::new(&binaries.xwirectl)
        .args(["lab", "supervise", &paths.name])
        .env(paths::LAB_ENV, &paths.name)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("start the lab supervisor")?;
    std::fs::write(paths.supervisor_pid(), child.id().to_string())?;
    Ok(())
}

fn wait_for_daemon(paths: &LabPaths, node: &str) -> Result<()> {
    let deadline = Instant::now() + DAEMON_START_LIMIT;
    while node_api::ask(&paths.node_socket(node), &Request::State).is_err() {
        check_interrupted()?;
        if Instant::now() > deadline {
            bail!(
                "xwired on node {node} did not answer within {DAEMON_START_LIMIT:?}; its log ends:\n{}",
                log_tail(&paths.node_log(node))
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

pub(crate) fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The CNI call a runtime makes for a pod, with the plugin's configuration on stdin.
pub(crate) fn call_plugin(
    paths: &LabPaths,
    binaries: &Binaries,
    command: &str,
    pod: &str,
    node: &str,
) -> Result<Value> {
    use std::io::Write;
    let config = json!({
        "cniVersion": "1.1.0",
        "name": "xwire-lab",
        "type": "xwire",
        "socket": paths.node_socket(node),
        // Each node's plugin calls, beside its daemon's log.
        "logFile": paths.node_dir(node).join("cni.log"),
    });
    let netns = namespaces::netns_path(&paths.pod_netns(pod));
    let mut child = Command::new(&binaries.plugin)
        .env_clear()
        .env(paths::LAB_ENV, &paths.name)
        .env("CNI_COMMAND", command)
        .env("CNI_CONTAINERID", paths.container_id(pod))
        .env("CNI_NETNS", &netns)
        .env("CNI_IFNAME", "eth0")
        .env(
            "CNI_ARGS",
            format!(
                "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={pod}",
                paths.name
            ),
        )
        .env(
            "CNI_PATH",
            binaries.plugin.parent().unwrap_or(Path::new("/")),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("run {}", binaries.plugin.display()))?;
    // A plugin may answer and exit without reading its configuration (an error
    // it finds first); as libcni does, a broken pipe is not the failure: the
    // plugin's exit status and answer say what happened.
    let written = child
        .stdin
        .take()
        .expect("stdin is piped")
        .write_all(config.to_string().as_bytes());
    if let Err(error) = written {
        if error.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(error).context("write the CNI configuration to the plugin");
        }
    }
    let out = child.wait_with_output()?;
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    if !out.status.success() {
        bail!(
            "CNI {command} for pod {pod} failed: {} {}",
            printed["msg"].as_str().unwrap_or("(no message)"),
            printed["details"].as_str().unwrap_or(""),
        );
    }
    Ok(printed)
}

/// Waits until every link's both ends are joined (no end pending) on their nodes.
pub(super) fn wait_for_wires(lab: &Lab, paths: &LabPaths) -> Result<()> {
    let deadline = Instant::now() + WIRES_UP_LIMIT;
    loop {
        let states = node_api::wire_states(lab, paths);
        let waiting: Vec<String> = lab
            .links
            .iter()
            .flat_map(|link| link.endpoints.iter().map(move |end| (link.uid, end)))
            .filter(|(uid, end)| {
                !matches!(
                    states.get(&(end.pod.clone(), *uid)).map(String::as_str),
                    Some("veth" | "remote" | "vxlan" | "switched" | "steered")
                )
            })
            .map(|(uid, end)| format!("{end} (uid {uid})"))
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        check_interrupted()?;
        if Instant::now() > deadline {
            bail!(
                "wire ends still not joined after {WIRES_UP_LIMIT:?}: {}",
                waiting.join(", ")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
