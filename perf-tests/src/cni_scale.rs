//! A lab coming up and going away through the CNI plugin: `pods` pods on two nodes, each
//! with four links (to the pods one and two places either side of it in a ring; pods
//! alternate between the nodes, so half of every pod's links cross nodes). Pods are
//! added one after the other, as a runtime on each node would, and every call is timed
//! from the plugin's start to its exit. The baseline, measured in the same run on the same
//! pod namespaces, is the reference `bridge` plugin with `host-local` addresses.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::cni_steps::{self, Breakdown};
use crate::testbed::cluster::{
    eventually_every, node_pair, plugin, Node, Pod, TempDir, TEST_FRAMES_PER_PORT,
};
use crate::testbed::Netns;

/// How often bring-up and tear-down are checked: their times are reported figures.
const LOOK_EVERY: Duration = Duration::from_millis(5);

/// The two binaries, found next to the running `xwire-perf` unless told otherwise.
pub struct Binaries {
    pub xwired: PathBuf,
    pub plugin: PathBuf,
}

impl Binaries {
    pub fn in_dir(dir: &Path) -> Result<Binaries> {
        let binaries = Binaries {
            xwired: dir.join("xwired"),
            plugin: dir.join("xwire"),
        };
        for bin in [&binaries.xwired, &binaries.plugin] {
            ensure!(
                bin.exists(),
                "{} is missing: build it first (cargo build --release -p xwire-control -p xwire-cni)",
                bin.display()
            );
        }
        Ok(binaries)
    }
}

/// p50 and p99 of a set of call times, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CallTimes {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    pub calls: usize,
}

impl CallTimes {
    fn of(mut times: Vec<Duration>) -> CallTimes {
        times.sort();
        let at = |q: f64| {
            let i = ((times.len() as f64 * q).ceil() as usize).clamp(1, times.len()) - 1;
            times[i].as_secs_f64() * 1e3
        };
        let total: Duration = times.iter().sum();
        CallTimes {
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            mean_ms: total.as_secs_f64() * 1e3 / times.len() as f64,
            calls: times.len(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub pods: usize,
    /// How many calls were in flight at once (1: one after another).
    pub callers: usize,
    pub links: usize,
    pub remote_links: usize,
    pub xwire_add: CallTimes,
    pub xwire_del: CallTimes,
    /// From the first ADD to every link's interfaces present in both pods.
    pub bring_up_s: f64,
    /// From the first DEL to both nodes' stores empty.
    pub tear_down_s: f64,
    pub bridge_add: CallTimes,
    pub bridge_del: CallTimes,
    /// Where xwire's calls spent their time, by step.
    pub steps: Breakdown,
}

/// The ring: link (i, i+1) has uid 2i, link (i, i+2) has uid 2i+1. Pod i's interfaces:
/// eth1 to i+1, eth2 to i-1, eth3 to i+2, eth4 to i-2.
fn topology(pods: usize) -> Vec<Value> {
    let name = |i: usize| format!("p{:02}", i % pods);
    (0..pods)
        .map(|i| {
            let back1 = (i + pods - 1) % pods;
            let back2 = (i + pods - 2) % pods;
            let links = json!([
                {"uid": 2 * i, "peer_pod": name(i + 1), "local_intf": "eth1", "peer_intf": "eth2"},
                {"uid": 2 * back1, "peer_pod": name(back1), "local_intf": "eth2", "peer_intf": "eth1"},
                {"uid": 2 * i + 1, "peer_pod": name(i + 2), "local_intf": "eth3", "peer_intf": "eth4"},
                {"uid": 2 * back2 + 1, "peer_pod": name(back2), "local_intf": "eth4", "peer_intf": "eth3"},
            ]);
            // Even pods run on na, odd ones on nb (see `run`).
            let node_ip = if i % 2 == 0 { "192.168.78.1" } else { "192.168.78.2" };
            json!({
                "apiVersion": "networkop.co.uk/v1beta1",
                "kind": "Topology",
                "metadata": {"name": name(i), "namespace": "bench"},
                "spec": {"links": links},
                "status": {"src_ip": node_ip},
            })
        })
        .collect()
}

/// Runs `call` on every item, from `callers` threads that take the items in turn (as a
/// runtime that starts many pods at once does); each call's time, in no particular order.
pub(crate) fn timed_calls<T: Sync>(
    items: &[T],
    callers: usize,
    call: impl Fn(usize, &T) -> Result<()> + Sync,
) -> Result<Vec<Duration>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let times = std::sync::Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..callers.max(1))
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else {
                            return Ok(());
                        };
                        let t = Instant::now();
                        call(i, item)?;
                        times.lock().expect("not poisoned").push(t.elapsed());
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|_| bail!("a caller panicked")))
    })?;
    Ok(times.into_inner().expect("not poisoned"))
}

pub fn run(binaries: &Binaries, pods: usize, callers: usize) -> Result<Report> {
    ensure!(
        pods >= 6 && pods % 2 == 0,
        "--pods must be even and at least 6"
    );
    ensure!(callers >= 1, "--callers must be at least 1");
    let certs = TempDir::new("bench-certs");
    let (na, nb) = node_pair(
        &binaries.xwired,
        &certs,
        ["na", "nb"],
        "192.168.78",
        (pods + 8, TEST_FRAMES_PER_PORT),
        &format!("metrics_address = \"{}\"", cni_steps::METRICS_ADDRESS),
    )?;
    for node in [&na, &nb] {
        node.apply_objects(topology(pods));
    }
    let pod_list: Vec<Pod> = (0..pods).map(|i| Pod::new(&format!("p{i:02}"))).collect();
    let node_of = |i: usize| if i % 2 == 0 { &na } else { &nb };

    let (bridge_add, bridge_del) = bridge_baseline(&na.ns, &pod_list, callers)?;

    // Every pod through the plugin, from `callers` callers; each call's time.
    let call_all = |command: &str| -> Result<Vec<Duration>> {
        timed_calls(&pod_list, callers, |i, pod| {
            let config = node_of(i).net_config("1.1.0").with_namespace("bench");
            let out = pod.call(&binaries.plugin, command, &config);
            if out.code != 0 {
                bail!(
                    "{command} {}: {}\n{}",
                    pod.name,
                    out.output,
                    node_of(i).log()
                );
            }
            Ok(())
        })
    };

    let started = Instant::now();
    let add_times = call_all("ADD")?;
    ensure!(
        eventually_every(Duration::from_secs(60), LOOK_EVERY, || pod_list
            .iter()
            .all(|p| ["eth1", "eth2", "eth3", "eth4"].iter().all(|i| p.has(i)))),
        "not every wire came up in 60 s"
    );
    let bring_up = started.elapsed();

    let started = Instant::now();
    let del_times = call_all("DEL")?;
    ensure!(
        eventually_every(Duration::from_secs(60), LOOK_EVERY, || [&na, &nb]
            .iter()
            .all(|n| {
                let s = n.state();
                s.attachments.is_empty() && s.wires.is_empty()
            })),
        "the stores did not empty in 60 s"
    );
    let tear_down = started.elapsed();

    let metrics = [&na, &nb]
        .iter()
        .map(|n| cni_steps::scrape(&n.ns))
        .collect::<Result<Vec<_>>>()?;
    let plugin_start_ms = plugin_start_ms(&binaries.plugin, &pod_list[0], &na)?;
    let (xwire_add, xwire_del) = (CallTimes::of(add_times), CallTimes::of(del_times));
    let steps = cni_steps::breakdown(
        &metrics,
        (xwire_add.mean_ms, xwire_del.mean_ms),
        plugin_start_ms,
    )?;

    Ok(Report {
        pods,
        callers,
        links: pods * 2,
        remote_links: pods,
        xwire_add,
        xwire_del,
        bring_up_s: bring_up.as_secs_f64(),
        tear_down_s: tear_down.as_secs_f64(),
        bridge_add,
        bridge_del,
        steps,
    })
}

/// The mean time of the plugin answering VERSION, which it does without the daemon: its
/// start and exit.
fn plugin_start_ms(plugin: &Path, pod: &Pod, node: &Node) -> Result<f64> {
    const CALLS: u32 = 20;
    let config = node.net_config("1.1.0");
    let started = Instant::now();
    for _ in 0..CALLS {
        let out = pod.call(plugin, "VERSION", &config);
        ensure!(out.code == 0, "VERSION: {}", out.output);
    }
    Ok(started.elapsed().as_secs_f64() * 1e3 / f64::from(CALLS))
}

/// A network configuration for another topology namespace than the default `lab`.
pub(crate) trait WithNamespace {
    fn with_namespace(self, namespace: &str) -> Value;
}

impl WithNamespace for Value {
    fn with_namespace(mut self, namespace: &str) -> Value {
        self["namespace"] = json!(namespace);
        self
    }
}

/// ADD then DEL of every pod with bridge + host-local, the bridge in `node`, from
/// `callers` callers at once.
fn bridge_baseline(node: &Netns, pods: &[Pod], callers: usize) -> Result<(CallTimes, CallTimes)> {
    let bridge = Path::new("/usr/lib/cni/bridge");
    ensure!(
        bridge.exists(),
        "the reference plugins are missing (apt-get install containernetworking-plugins)"
    );
    let ipam = TempDir::new("bench-ipam");
    let config = json!({
        "cniVersion": "1.0.0", "name": "benchbr", "type": "bridge", "bridge": "xwbench0",
        "isGateway": false, "ipMasq": false,
        "ipam": {"type": "host-local", "subnet": "10.199.81.0/24", "dataDir": ipam.0},
    });
    let mut times = Vec::new();
    for command in ["ADD", "DEL"] {
        times.push(timed_calls(pods, callers, |_, pod| {
            let netns = pod.netns();
            let env = [
                ("CNI_CONTAINERID", pod.container.as_str()),
                ("CNI_NETNS", netns.as_str()),
                ("CNI_IFNAME", "eth0"),
                ("CNI_PATH", "/usr/lib/cni"),
            ];
            let out = node.run(|| plugin(bridge, command, &env, &config))?;
            if out.code != 0 {
                bail!("bridge {command} {}: {}", pod.name, out.output);
            }
            Ok(())
        })?);
    }
    let del = times.pop().unwrap_or_default();
    let add = times.pop().unwrap_or_default();
    Ok((CallTimes::of(add), CallTimes::of(del)))
}

/// The report as a table with the ratios to the bridge baseline.
pub fn print(report: &Report, steps: bool) {
    let how = match report.callers {
        1 => "calls one after another".to_owned(),
        n => format!("{n} callers at once"),
    };
    println!(
        "{} pods, {} links ({} across nodes), 2 nodes; {how}, each call timed from the plugin's start to its exit",
        report.pods, report.links, report.remote_links
    );
    println!("{:<22} {:>9} {:>9}", "", "p50 ms", "p99 ms");
    let rows = [
        ("bridge+host-local ADD", report.bridge_add),
        ("xwire ADD (4 links)", report.xwire_add),
        ("bridge+host-local DEL", report.bridge_del),
        ("xwire DEL", report.xwire_del),
    ];
    for (name, t) in rows {
        println!("{name:<22} {:>9.1} {:>9.1}", t.p50_ms, t.p99_ms);
    }
    println!(
        "ratios to bridge+host-local: ADD p50 {:.2}x, p99 {:.2}x; DEL p50 {:.2}x, p99 {:.2}x",
        report.xwire_add.p50_ms / report.bridge_add.p50_ms,
        report.xwire_add.p99_ms / report.bridge_add.p99_ms,
        report.xwire_del.p50_ms / report.bridge_del.p50_ms,
        report.xwire_del.p99_ms / report.bridge_del.p99_ms,
    );
    println!(
        "bring-up (first ADD to every wire up): {:.2} s; tear-down (first DEL to empty stores): {:.2} s",
        report.bring_up_s, report.tear_down_s
    );
    if steps {
        cni_steps::print(
            &report.steps,
            report.xwire_add.mean_ms,
            report.xwire_del.mean_ms,
        );
    }
}
