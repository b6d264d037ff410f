//! How fast wires come back when a daemon restarts. Two nodes, `na` and `nb`; `wires`
//! remote wires between pods on `na` and pods on `nb` (up to 50 per pod pair), plus a
//! local wire on each node with a steady flow on it. `nb`'s daemon is killed (`kill -9`)
//! and started again; a prober sends a numbered frame into every wire on `na`'s side
//! until each has arrived on `nb`'s side, which says when each wire forwards again. The
//! baseline, measured in the same run on the same pods, is the cold bring-up of the same
//! wires through the CNI plugin. The local wires' flows count what was lost on wires that
//! do not go through the restarted daemon (the target: nothing).

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use serde::Serialize;
use serde_json::{json, Value};

use crate::cni_scale::{Binaries, WithNamespace};
use crate::testbed::checks::test_frame;
use crate::testbed::cluster::{node_pair, Node, Pod, TempDir, TEST_FRAMES_PER_PORT};
use crate::testbed::{Flow, PacketSocket};

const LINKS_PER_POD: usize = 50;
/// The probes' EtherType: not the flows' (`checks::TEST_ETHERTYPE`).
const PROBE_ETHERTYPE: [u8; 2] = [0x88, 0xb6];
const PROBE_LIMIT: Duration = Duration::from_secs(120);
/// What marks a probe of the cold bring-up and one of the restart (byte 11, in the
/// source MAC): late copies of the cold probes must not count for the restart.
const COLD_PROBE: u8 = 0x7e;
const RESTART_PROBE: u8 = 0x7d;
/// How often each wire not yet forwarding is probed: the figures' resolution. Probing
/// faster measures the prober. Sending a probe into a pod runs the receiving side of the
/// running node's veth and XDP program in the sender's context, about 7 µs a frame here:
/// at 10 ms, 1000 probes a round took 0.68 s of CPU from the 2 cores while the daemon
/// restarted (and at 2 ms, a whole core).
const PROBE_ROUND: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub wires: usize,
    /// Data-plane workers per node (`data_cores` of 0..workers).
    pub workers: usize,
    /// The UMEM frames fast-path ports open with on both nodes (`min_frames_per_port`):
    /// a restart pins and zeroes them all as it reopens the ports.
    pub frames_per_port: usize,
    /// Cold start (baseline): from the first ADD on `nb` to every wire forwarding.
    pub cold_bring_up_s: f64,
    /// From the restarted daemon's start to its API socket answering.
    pub daemon_ready_s: f64,
    /// The daemon's own figure for its start's reconciliation pass (from its log).
    pub start_reconcile_s: f64,
    /// From the restarted daemon's start to every wire forwarding again.
    pub all_forwarding_s: f64,
    /// The median wire's time to forward again, from the daemon's start.
    pub median_forwarding_s: f64,
    /// CPU time the restarted daemon used from its start to every wire forwarding again.
    pub restarted_cpu_s: f64,
    /// CPU time the running node's daemon used over the same interval: on one machine
    /// the two nodes share the cores, and its poll-mode worker spins while traffic flows.
    pub peer_cpu_s: f64,
    /// The resident memory of `nb`'s daemon with every wire up, before the restart
    /// (`wires` remote ends and one local one): the slope between two runs of different
    /// `wires` is the memory per remote wire end.
    pub rss_mib: f64,
    /// The same after the restart, every wire forwarding again.
    pub rss_after_restart_mib: f64,
    /// `all_forwarding_s / cold_bring_up_s`.
    pub ratio_to_cold: f64,
    /// Frames sent and lost on the local wires (one per node) during the restart (what
    /// the test's own readers dropped is not counted lost: see `FlowCounts`).
    pub untouched_sent: u64,
    pub untouched_lost: u64,
}

/// One remote wire: where its probe goes in and comes out.
struct Wire {
    a_pod: usize,
    a_ifindex: u32,
}

fn topology(pairs: usize, per_pair: usize, wires: usize) -> Vec<Value> {
    let mut objects = Vec::new();
    // Pods a* and l0, l1 run on na, the others on nb: each Topology places its pod
    // there (`status.src_ip`), without which no node tells or takes a wire across.
    let object = |name: String, links: Vec<Value>| {
        let on_na = name.starts_with('a') || name == "l0" || name == "l1";
        let node_ip = if on_na {
            "192.168.79.1"
        } else {
            "192.168.79.2"
        };
        json!({
            "apiVersion": "networkop.co.uk/v1beta1",
            "kind": "Topology",
            "metadata": {"name": name, "namespace": "restart"},
            "spec": {"links": links},
            "status": {"src_ip": node_ip},
        })
    };
    for pair in 0..pairs {
        let uids = (pair * per_pair..((pair + 1) * per_pair).min(wires)).collect::<Vec<_>>();
        for (me, peer) in [("a", "b"), ("b", "a")] {
            let links = uids
                .iter()
                .enumerate()
                .map(|(j, uid)| {
                    json!({"uid": uid, "peer_pod": format!("{peer}{pair}"),
                           "local_intf": format!("eth{}", j + 1), "peer_intf": format!("eth{}", j + 1)})
                })
                .collect();
            objects.push(object(format!("{me}{pair}"), links));
        }
    }
    // The untouched local wires: l0-l1 on na, l2-l3 on nb.
    for (me, peer, uid) in [
        ("l0", "l1", 900_000),
        ("l1", "l0", 900_000),
        ("l2", "l3", 900_001),
        ("l3", "l2", 900_001),
    ] {
        let link = json!({"uid": uid, "peer_pod": peer, "local_intf": "eth1", "peer_intf": "eth1"});
        objects.push(object(me.into(), vec![link]));
    }
    objects
}

pub fn run(
    binaries: &Binaries,
    wires: usize,
    frames_per_port: usize,
    workers: usize,
) -> Result<Report> {
    ensure!(wires >= 1, "--wires must be at least 1");
    ensure!(workers >= 1, "--workers must be at least 1");
    let extra_config = daemon_config(workers, frames_per_port);
    let per_pair = wires.min(LINKS_PER_POD);
    let pairs = wires.div_ceil(per_pair);
    let certs = TempDir::new("restart-certs");
    let (mut na, mut nb) = node_pair(
        &binaries.xwired,
        &certs,
        ["na", "nb"],
        "192.168.79",
        (wires + 8, frames_per_port.max(TEST_FRAMES_PER_PORT)),
        &extra_config,
    )?;
    for node in [&na, &nb] {
        node.apply_objects(topology(pairs, per_pair, wires));
    }
    let a_pods: Vec<Pod> = (0..pairs).map(|i| Pod::new(&format!("a{i}"))).collect();
    let b_pods: Vec<Pod> = (0..pairs).map(|i| Pod::new(&format!("b{i}"))).collect();
    let locals: Vec<Pod> = (0..4).map(|i| Pod::new(&format!("l{i}"))).collect();
    let add = |pod: &Pod, node: &Node| -> Result<()> {
        let config = node.net_config("1.1.0").with_namespace("restart");
        let out = pod.call(&binaries.plugin, "ADD", &config);
        if out.code != 0 {
            bail!("ADD {}: {}\n{}", pod.name, out.output, node.log());
        }
        Ok(())
    };
    for (i, pod) in locals.iter().enumerate() {
        add(pod, if i < 2 { &na } else { &nb })?;
    }
    for pod in &a_pods {
        add(pod, &na)?;
    }

    let (senders, receivers) = (probe_sockets(&a_pods)?, probe_sockets(&b_pods)?);

    // The baseline: the same wires brought up cold.
    let started = Instant::now();
    for pod in &b_pods {
        add(pod, &nb)?;
    }
    let wire_list = wait_for_wires(&a_pods, wires, per_pair)?;
    let cold = probe(&wire_list, &senders, &receivers, started, COLD_PROBE)?;
    let cold_bring_up = cold.iter().copied().fold(Duration::ZERO, Duration::max);

    let flows = start_untouched_flows(&locals)?;

    let rss_mib = nb.daemon_rss_kib().unwrap_or_default() as f64 / 1024.0;
    nb.stop();
    std::thread::sleep(Duration::from_millis(500));
    let peer_cpu_before = na.daemon_cpu().unwrap_or_default();
    let started = Instant::now();
    let (times, ready) = std::thread::scope(|s| {
        let prober = s.spawn(|| probe(&wire_list, &senders, &receivers, started, RESTART_PROBE));
        nb.restart();
        let ready = started.elapsed();
        (prober.join().expect("the prober does not panic"), ready)
    });
    let mut times = times?;
    let restarted_cpu = nb.daemon_cpu().unwrap_or_default();
    let rss_after_restart_mib = nb.daemon_rss_kib().unwrap_or_default() as f64 / 1024.0;
    let peer_cpu = na.daemon_cpu().unwrap_or_default() - peer_cpu_before;
    let start_reconcile_ms = start_reconcile_ms(&nb.log());
    times.sort();
    let all = *times.last().expect("at least one wire");
    let median = times[times.len() / 2];
    let (mut untouched_sent, mut untouched_lost) = (0, 0);
    for flow in flows {
        let counts = flow.stop();
        untouched_sent += counts.sent;
        untouched_lost += counts.lost_on_the_way();
    }
    Ok(Report {
        wires,
        workers,
        frames_per_port,
        cold_bring_up_s: cold_bring_up.as_secs_f64(),
        daemon_ready_s: ready.as_secs_f64(),
        start_reconcile_s: start_reconcile_ms / 1e3,
        all_forwarding_s: all.as_secs_f64(),
        median_forwarding_s: median.as_secs_f64(),
        restarted_cpu_s: restarted_cpu.as_secs_f64(),
        peer_cpu_s: peer_cpu.as_secs_f64(),
        rss_mib,
        rss_after_restart_mib,
        ratio_to_cold: all.as_secs_f64() / cold_bring_up.as_secs_f64(),
        untouched_sent,
        untouched_lost,
    })
}

/// The daemons' extra configuration: one worker (placed by the scheduler) is the
/// daemon's default, and more are pinned to cores 0, 1, ... (wrapping on a machine with
/// fewer); every port opens with the frames asked for, whatever the number of wires.
fn daemon_config(workers: usize, frames_per_port: usize) -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let data_cores = if workers == 1 {
        String::new()
    } else {
        let cores: Vec<String> = (0..workers).map(|i| (i % cpus).to_string()).collect();
        format!("data_cores = [{}]", cores.join(", "))
    };
    format!("{data_cores}\nmin_frames_per_port = {frames_per_port}\nresting_frames_per_worker = 0")
}

/// A socket for the probes in each of `pods`.
fn probe_sockets(pods: &[Pod]) -> Result<Vec<PacketSocket>> {
    Ok(pods
        .iter()
        .map(|p| PacketSocket::open(&p.ns, PROBE_ETHERTYPE))
        .collect::<Result<_, _>>()?)
}

/// Waits (up to a minute each) for every wire's interface in its `a` pod; returns the
/// wires, in uid order.
fn wait_for_wires(a_pods: &[Pod], wires: usize, per_pair: usize) -> Result<Vec<Wire>> {
    let mut list = Vec::new();
    for uid in 0..wires {
        let (pair, j) = (uid / per_pair, uid % per_pair);
        let ifname = format!("eth{}", j + 1);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !a_pods[pair].has(&ifname) {
            ensure!(Instant::now() < deadline, "wire {uid} did not come up");
            std::thread::sleep(Duration::from_millis(2));
        }
        list.push(Wire {
            a_pod: pair,
            a_ifindex: a_pods[pair].ns.ifindex(&ifname)?,
        });
    }
    Ok(list)
}

/// A flow over each node's local wire (the restart must not touch them), once each
/// forwards.
fn start_untouched_flows(locals: &[Pod]) -> Result<[Flow; 2]> {
    let flows = [
        Flow::start(
            "na local",
            (&locals[0].ns, "eth1"),
            (&locals[1].ns, "eth1"),
            1,
            Duration::from_millis(1),
        )?,
        Flow::start(
            "nb local",
            (&locals[2].ns, "eth1"),
            (&locals[3].ns, "eth1"),
            2,
            Duration::from_millis(1),
        )?,
    ];
    for flow in &flows {
        ensure!(
            flow.forwards(20, Duration::from_secs(10)),
            "{} does not forward",
            flow.name
        );
    }
    Ok(flows)
}

/// How long the daemon's start-up reconcile took, from the last such line of its log.
fn start_reconcile_ms(log: &str) -> f64 {
    log.lines()
        .rev()
        .filter(|l| l.contains("start: reconciled"))
        .filter_map(|l| l.split("took_ms=").nth(1))
        .find_map(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Sends a numbered frame into every wire not yet seen to forward, every `PROBE_ROUND`,
/// until each has arrived once; returns each wire's time since `since` (when the probe
/// arrived, which is at most a round after the wire began to forward).
fn probe(
    wires: &[Wire],
    senders: &[PacketSocket],
    receivers: &[PacketSocket],
    since: Instant,
    marker: u8,
) -> Result<Vec<Duration>> {
    let mut arrived: Vec<Option<Duration>> = vec![None; wires.len()];
    let mut waiting = wires.len();
    while waiting > 0 {
        ensure!(
            since.elapsed() < PROBE_LIMIT,
            "{waiting} of {} wires did not forward within {PROBE_LIMIT:?}",
            wires.len()
        );
        let round = Instant::now();
        for (index, wire) in wires.iter().enumerate() {
            if arrived[index].is_none() {
                let mut frame = test_frame(64, marker, index as u16);
                frame[12..14].copy_from_slice(&PROBE_ETHERTYPE);
                // A send refused now (a full queue) is simply tried again next round.
                let _ = senders[wire.a_pod].send_on(wire.a_ifindex, &frame);
            }
        }
        while round.elapsed() < PROBE_ROUND && waiting > 0 {
            std::thread::sleep(Duration::from_millis(1));
            for receiver in receivers {
                while let Some(frame) = receiver.try_recv()? {
                    if frame.len() < 16 || frame[11] != marker {
                        continue;
                    }
                    let index = usize::from(u16::from_be_bytes([frame[14], frame[15]]));
                    if index < wires.len() && arrived[index].is_none() {
                        arrived[index] = Some(since.elapsed());
                        waiting -= 1;
                    }
                }
            }
        }
    }
    Ok(arrived.into_iter().map(|t| t.unwrap_or_default()).collect())
}

pub fn print(reports: &[Report]) {
    println!(
        "{:>6} {:>7} {:>7} {:>10} {:>9} {:>11} {:>11} {:>11} {:>9} {:>8} {:>8} {:>16} {:>8} {:>8}",
        "wires",
        "workers",
        "frames",
        "cold s",
        "ready s",
        "reconcile s",
        "median s",
        "all s",
        "all/cold",
        "cpu s",
        "peer s",
        "untouched lost",
        "rss MiB",
        "after"
    );
    for r in reports {
        println!(
            "{:>6} {:>7} {:>7} {:>10.3} {:>9.3} {:>11.3} {:>11.3} {:>11.3} {:>9.3} {:>8.2} {:>8.2} {:>9} of {:<6} {:>8.1} {:>8.1}",
            r.wires,
            r.workers,
            r.frames_per_port,
            r.cold_bring_up_s,
            r.daemon_ready_s,
            r.start_reconcile_s,
            r.median_forwarding_s,
            r.all_forwarding_s,
            r.ratio_to_cold,
            r.restarted_cpu_s,
            r.peer_cpu_s,
            r.untouched_lost,
            r.untouched_sent,
            r.rss_mib,
            r.rss_after_restart_mib
        );
    }
    // Memory per remote wire end: the slope between runs of the same frames and workers.
    for (a, b) in reports.iter().zip(reports.iter().skip(1)) {
        if (a.frames_per_port, a.workers) == (b.frames_per_port, b.workers) && a.wires != b.wires {
            let per_end = (b.rss_mib - a.rss_mib) * 1024.0 / (b.wires as f64 - a.wires as f64);
            println!(
                "memory per remote wire end ({} to {} wires, {} frames a port): {per_end:.0} KiB",
                a.wires, b.wires, a.frames_per_port
            );
        }
    }
}
