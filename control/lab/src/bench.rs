//! `xwirectl lab bench`: `xwire-pktgen` across every wire (or one), between the pod
//! interfaces of its two ends, one wire at a time so the wires do not share the machine:
//! first the loss-free rate of each direction, alone and both at once (with the rate and
//! loss at full offered load beside it), then 64-byte frames at a fixed low rate
//! (latency with no queue building up). Each remote wire is read against a kernel VXLAN
//! between the same two nodes, measured the same way in the same run (`baseline.rs`).
//! Prints a table and writes a PNG chart.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use xwire_model::worker_defaults::DEFAULT_WORKER_NICE;

use super::baseline::{self, VxlanBaseline};
use super::file::{Lab, LabLink};
use super::namespaces::netns_path;
use super::paths::LabPaths;
use super::table;
use super::up::find_binary;

#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// One wire, or all.
    pub link: Option<u64>,
    /// Seconds of each trial of the loss-free search, and of the latency run.
    pub seconds: f64,
    /// Seconds of the trial that confirms each loss-free rate (0: none).
    pub confirm_seconds: f64,
    /// Frame size in bytes (without FCS) for the loss-free search.
    pub size: usize,
    /// The directions searched: "a-to-b", "b-to-a", "both" (pktgen's --flows).
    pub flows: Vec<String>,
    /// The highest loss the loss-free rate may have (0.001 is 0.1%).
    pub max_loss: f64,
    /// Frames per second of the latency run.
    pub latency_rate: u64,
    /// Measure a kernel VXLAN between the nodes of each remote wire as its baseline.
    pub baseline: bool,
    pub chart: PathBuf,
}

/// What `xwire-pktgen run --json` reports (the fields used here).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PktgenReport {
    pub frame_bytes: usize,
    pub offered: u64,
    pub delivered: u64,
    pub offered_pps: f64,
    pub delivered_pps: f64,
    pub gbps: f64,
    pub loss_ratio: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// What `xwire-pktgen lossfree --json` reports for one direction.
pub(crate) type DirectionBench = xwire_model::bench_report::DirectionFigure;

#[derive(Debug, Deserialize)]
struct LossfreeReport {
    directions: Vec<DirectionBench>,
}

#[derive(Debug, Clone, Serialize)]
pub struct WireBench {
    pub uid: u64,
    pub endpoints: [String; 2],
    pub kind: &'static str,
    pub frame_bytes: usize,
    pub directions: Vec<DirectionBench>,
    pub latency: PktgenReport,
    /// A remote wire's baseline: the kernel's VXLAN between the same two nodes, measured
    /// in the same run with the same frames.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineBench>,
    /// Why a remote wire has no baseline, when it was asked for and could not be made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_missing: Option<String>,
}

/// A kernel VXLAN between two of the lab's nodes, measured as a wire.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineBench {
    pub path: &'static str,
    pub nodes: [String; 2],
    pub frame_bytes: usize,
    pub directions: Vec<DirectionBench>,
    pub latency: PktgenReport,
}

impl WireBench {
    /// The first endpoint's direction measured alone: the chart's figure.
    pub fn a_to_b(&self) -> Option<&DirectionBench> {
        self.directions
            .iter()
            .find(|d| d.direction == "a->b" && !d.at_once)
    }
}

/// The traffic generator, and the nice value its threads run at.
struct Pktgen {
    path: PathBuf,
    /// The lab's workers' (the lowest of its nodes'). pktgen's threads share the
    /// machine's CPUs with the workers, and at nice 0 beside workers at -20 its sinks
    /// waited out the workers' passes while their sockets dropped what the wire had
    /// delivered: in the demo, all of the loss at the rates that decided its both-ways
    /// search. The kernel VXLAN baseline is measured at the same value.
    nice: i8,
}

impl Pktgen {
    fn find(lab: &Lab, paths: &LabPaths) -> Result<Pktgen> {
        Ok(Pktgen {
            path: find_binary("xwire-pktgen")?,
            nice: workers_nice(lab, paths),
        })
    }

    fn command(&self, paths: &LabPaths, mode: &str) -> Command {
        let mut command = Command::new(&self.path);
        command
            .env(super::paths::LAB_ENV, &paths.name)
            .arg(mode)
            .arg(format!("--nice={}", self.nice));
        command
    }
}

/// The lowest nice value the lab's nodes' daemons give their workers, as their
/// configuration files say (the daemon's default for a node whose file cannot be read).
fn workers_nice(lab: &Lab, paths: &LabPaths) -> i8 {
    lab.nodes
        .iter()
        .map(|node| {
            let file = paths.node_config(node);
            std::fs::read_to_string(&file)
                .ok()
                .and_then(|text| xwire_model::config::DaemonConfig::parse(&text, &file).ok())
                .map_or(DEFAULT_WORKER_NICE, |config| config.worker_nice)
        })
        .min()
        .unwrap_or(DEFAULT_WORKER_NICE)
}

pub fn bench(lab: &Lab, options: &BenchOptions) -> Result<Vec<WireBench>> {
    let links: Vec<&LabLink> = lab
        .links
        .iter()
        .filter(|l| options.link.is_none_or(|uid| l.uid == uid))
        .collect();
    if links.is_empty() {
        match options.link {
            Some(uid) => bail!("lab {} has no link with uid {uid}", lab.name),
            None => bail!("lab {} has no links", lab.name),
        }
    }
    let paths = LabPaths::new(&lab.name)?;
    let pktgen = Pktgen::find(lab, &paths)?;
    let mut results = Vec::new();
    // Baselines by the nodes they join, their MTU and frame size: measured once for all
    // the wires of that kind between the same two nodes.
    type Key<'a> = (&'a str, &'a str, u32, usize);
    let mut baselines: HashMap<Key, Result<BaselineBench, String>> = HashMap::new();
    for link in links {
        let [a, b] = &link.endpoints;
        let nodes = [lab.pods[&a.pod].as_str(), lab.pods[&b.pod].as_str()];
        let local = nodes[0] == nodes[1];
        // Frames no larger than the wire's MTU allows (plus the Ethernet header).
        let mtu = link.mtu.unwrap_or(1500);
        let size = options.size.min(mtu as usize + 14);
        let ends = [
            (paths.pod_netns(&a.pod), a.ifname.as_str()),
            (paths.pod_netns(&b.pod), b.ifname.as_str()),
        ];
        // A bench runs minutes: say what it is at (on stderr; stdout is the result).
        let started = std::time::Instant::now();
        eprintln!(
            "lab bench: wire {} ({a} -> {b}), {size} B: loss-free search, then latency",
            link.uid
        );
        let (directions, latency) = measure(&pktgen, &paths, ends, size, options)
            .with_context(|| format!("xwire-pktgen across wire {} ({a} -> {b})", link.uid))?;
        eprintln!(
            "lab bench: wire {}: done in {:.0} s",
            link.uid,
            started.elapsed().as_secs_f64()
        );
        let baseline = if local || !options.baseline {
            None
        } else {
            let key = (nodes[0], nodes[1], mtu, size);
            let found = baselines.entry(key).or_insert_with(|| {
                eprintln!(
                    "lab bench: kernel VXLAN {} -> {}, {size} B: the same, as the baseline",
                    nodes[0], nodes[1]
                );
                measure_baseline(&pktgen, lab, &paths, nodes, mtu, size, options)
                    .map_err(|e| format!("{e:#}"))
            });
            Some(found.clone())
        };
        let (baseline, baseline_missing) = match baseline {
            Some(Ok(b)) => (Some(b), None),
            Some(Err(why)) => (None, Some(why)),
            None => (None, None),
        };
        results.push(WireBench {
            uid: link.uid,
            endpoints: [a.to_string(), b.to_string()],
            kind: if local { "local" } else { "remote" },
            frame_bytes: size,
            directions,
            latency,
            baseline,
            baseline_missing,
        });
    }
    super::chart::write(&lab.name, &results, &options.chart)?;
    Ok(results)
}

/// The loss-free search and the latency run between two interfaces, each in its
/// namespace: a wire's pod ends, or a baseline's. pktgen's ports take native XDP
/// whatever the interface's MTU (its program takes multi-buffer frames), falling back to
/// generic mode by themselves.
fn measure(
    pktgen: &Pktgen,
    paths: &LabPaths,
    ends: [(String, &str); 2],
    size: usize,
    options: &BenchOptions,
) -> Result<(Vec<DirectionBench>, PktgenReport)> {
    let mut search = pktgen.command(paths, "lossfree");
    name_ends(&mut search, ["a", "b"], &ends);
    search
        .arg("--json")
        .args(["--size", &size.to_string()])
        .args(["--trial-seconds", &options.seconds.to_string()])
        .args(["--confirm-seconds", &options.confirm_seconds.to_string()])
        .args(["--max-loss", &options.max_loss.to_string()])
        .args(["--flows", &options.flows.join(",")]);
    let found: LossfreeReport = pktgen_json(&mut search)?;
    let mut latency = pktgen.command(paths, "run");
    name_ends(&mut latency, ["tx", "rx"], &ends);
    latency
        .arg("--json")
        .args(["--size", "64", "--one-thread"])
        .args(["--rate", &options.latency_rate.to_string()])
        .args(["--seconds", &options.seconds.to_string()]);
    let latency: PktgenReport = pktgen_json(&mut latency)?;
    Ok((found.directions, latency))
}

/// Gives pktgen the two ends as `--{role}-netns` and `--{role}-iface`.
fn name_ends(command: &mut Command, roles: [&str; 2], ends: &[(String, &str); 2]) {
    for (role, (netns, ifname)) in roles.iter().zip(ends) {
        command
            .arg(format!("--{role}-netns"))
            .arg(netns_path(netns))
            .arg(format!("--{role}-iface"))
            .arg(ifname);
    }
}

/// Builds the kernel VXLAN between `nodes`, measures it as a wire of `mtu` with frames
/// of `size`, and removes it.
fn measure_baseline(
    pktgen: &Pktgen,
    lab: &Lab,
    paths: &LabPaths,
    nodes: [&str; 2],
    mtu: u32,
    size: usize,
    options: &BenchOptions,
) -> Result<BaselineBench> {
    let tunnel =
        VxlanBaseline::build(lab, nodes, mtu).context("build the kernel VXLAN baseline")?;
    let size = size.min(tunnel.mtu as usize + 14);
    let [a, b] = tunnel.pod_netns().clone();
    let ends = [(a, baseline::POD_END), (b, baseline::POD_END)];
    let (directions, latency) = measure(pktgen, paths, ends, size, options)
        .with_context(|| format!("xwire-pktgen across the kernel VXLAN {}", tunnel.label()))?;
    Ok(BaselineBench {
        path: "kernel-vxlan",
        nodes: nodes.map(str::to_owned),
        frame_bytes: size,
        directions,
        latency,
    })
}

/// Tries for a moment longer when an interface is still held: the kernel releases a
/// closed AF_XDP socket (the previous run's) in deferred work, after its process is gone.
const BUSY_RETRIES: usize = 20;
const BUSY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

fn pktgen_json<T: serde::de::DeserializeOwned>(command: &mut Command) -> Result<T> {
    let mut tries = 0;
    let out = loop {
        let out = command.output().context("run xwire-pktgen")?;
        let busy = String::from_utf8_lossy(&out.stderr).contains("holds this interface");
        if out.status.success() || !busy || tries == BUSY_RETRIES {
            break out;
        }
        tries += 1;
        std::thread::sleep(BUSY_PAUSE);
    };
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        // The error, without the backtrace RUST_BACKTRACE may add.
        let error = said.split("\nStack backtrace:").next().unwrap_or_default();
        bail!("{}", error.trim());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    // The report is the last line; the AF_XDP libraries may print before it.
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("read xwire-pktgen's report: {text}"))
}

/// The columns of one direction's figures, and their header.
const DIRECTION_HEADER: [&str; 7] = [
    "BYTES",
    "DIRECTION",
    "LOSSLESS",
    "GBIT/S",
    "P99 US",
    "FULL-RATE",
    "LOSS",
];

/// The columns of `DIRECTION_HEADER` that hold numbers, counted after `before` others.
fn direction_numbers(before: usize) -> Vec<usize> {
    [0, 2, 3, 4, 5, 6].iter().map(|c| c + before).collect()
}

fn direction_cells(d: &DirectionBench) -> Vec<String> {
    vec![
        d.frame_bytes.to_string(),
        format!(
            "{} {}",
            d.direction,
            if d.at_once { "both" } else { "alone" }
        ),
        lossless_cell(d),
        format!("{:.3}", d.lossfree_gbps),
        d.p99_us.map_or("-".to_owned(), |us| format!("{us:.1}")),
        format!("{:.0}", d.peak_delivered_pps),
        format!("{:.2}%", d.peak_loss_ratio * 100.0),
    ]
}

/// The loss-free rate; when no rate passed, what it is below (the lowest rate that
/// failed): a bare 0 read as "the wire carries nothing", where the search had only given
/// up (the local veth wire of the demo, both ways at once, in every run of stop 60).
fn lossless_cell(d: &DirectionBench) -> String {
    match d.lowest_failed_pps {
        Some(failed) if d.lossfree_pps == 0.0 => format!("< {failed:.0}"),
        _ => format!("{:.0}", d.lossfree_pps),
    }
}

/// The wire's loss-free rate over the baseline's. When the wire's search passed no rate,
/// what the ratio is below, as `lossless_cell` says of the rate: "0.00x" read as "the
/// wire carries nothing" where the search had only given up (wire 1 of the demo, one
/// way, while its full-rate trial carried twice the tunnel's rate).
fn ratio_cell(wire: &DirectionBench, baseline: &DirectionBench) -> String {
    if baseline.lossfree_pps <= 0.0 {
        return "-".to_owned();
    }
    match wire.lowest_failed_pps {
        Some(failed) if wire.lossfree_pps == 0.0 => {
            format!("< {:.2}x", failed / baseline.lossfree_pps)
        }
        _ => format!("{:.2}x", wire.lossfree_pps / baseline.lossfree_pps),
    }
}

/// The first row of a group shows its label; the others leave it blank.
fn first(i: usize, label: impl FnOnce() -> String) -> String {
    if i == 0 {
        label()
    } else {
        String::new()
    }
}

pub fn render(results: &[WireBench], chart: &Path, max_loss: f64) -> String {
    let mut header = vec!["UID", "WIRE (A -> B)", "KIND"];
    header.extend(DIRECTION_HEADER);
    let mut numbers = vec![0];
    numbers.extend(direction_numbers(3));
    let mut rates = table::new(&header, &numbers);
    for r in results {
        for (i, d) in r.directions.iter().enumerate() {
            let mut row = vec![
                first(i, || r.uid.to_string()),
                first(i, || format!("{} -> {}", r.endpoints[0], r.endpoints[1])),
                first(i, || r.kind.to_owned()),
            ];
            row.extend(direction_cells(d));
            rates.add_row(row);
        }
    }
    let mut out = table::render(&rates);
    out.push_str(&format!(
        "\nLOSSLESS: the highest offered rate (pps) carried with loss at or below {}%, found by a \
         search over offered rates, with the p99 latency at it (\"< N\": none passed, the lowest \
         rate tried was N); FULL-RATE: what arrived when offered all the generator sends, and \
         its loss. The generator and sink run at the workers' nice value, so that they are \
         not what drops.\n",
        max_loss * 100.0
    ));
    out.push_str(&render_baselines(results));
    let mut latency = table::new(
        &[
            "UID",
            "LATENCY, 64 B FRAMES AT A LOW RATE",
            "P50 US",
            "P99 US",
        ],
        &[0, 2, 3],
    );
    for r in results {
        latency.add_row(vec![
            r.uid.to_string(),
            format!("{} pps", r.latency.offered_pps.round()),
            format!("{:.1}", r.latency.p50_us),
            format!("{:.1}", r.latency.p99_us),
        ]);
        if let Some(b) = &r.baseline {
            latency.add_row(vec![
                String::new(),
                format!("  kernel VXLAN {} -> {}", b.nodes[0], b.nodes[1]),
                format!("{:.1}", b.latency.p50_us),
                format!("{:.1}", b.latency.p99_us),
            ]);
        }
    }
    out.push('\n');
    out.push_str(&table::render(&latency));
    out.push_str(&format!("\nchart: {}\n", chart.display()));
    out
}

/// Every trial of each search, per wire and direction, the baseline's after the wire's:
/// what tells a wire's edge from a stall that failed one trial.
pub fn render_trials(results: &[WireBench]) -> String {
    let mut out = String::new();
    let mut section = |title: String, directions: &[DirectionBench]| {
        for d in directions {
            let flow = if d.at_once { "both" } else { "alone" };
            out.push_str(&format!(
                "{title}, {} {flow}, {} B:\n",
                d.direction, d.frame_bytes
            ));
            for line in d.search_lines() {
                out.push_str(&format!("  {line}\n"));
            }
        }
    };
    for r in results {
        let wire = format!("wire {} ({} -> {})", r.uid, r.endpoints[0], r.endpoints[1]);
        section(wire.clone(), &r.directions);
        if let Some(b) = &r.baseline {
            section(format!("{wire}, kernel VXLAN baseline"), &b.directions);
        }
    }
    out
}

/// Each remote wire's baseline rows, with the wire's loss-free rate over the baseline's
/// in the same direction.
fn render_baselines(results: &[WireBench]) -> String {
    let mut missing = String::new();
    let mut header = vec!["UID", "KERNEL VXLAN, SAME NODES (A -> B)"];
    header.extend(DIRECTION_HEADER);
    header.push("WIRE/VXLAN");
    let mut numbers = vec![0, 9];
    numbers.extend(direction_numbers(2));
    let mut baselines = table::new(&header, &numbers);
    let mut any = false;
    for r in results.iter().filter(|r| r.kind == "remote") {
        if let Some(why) = &r.baseline_missing {
            missing.push_str(&format!("wire {}: no baseline: {why}\n", r.uid));
        }
        let Some(b) = &r.baseline else {
            continue;
        };
        any = true;
        for (i, d) in b.directions.iter().enumerate() {
            let ratio = r
                .directions
                .iter()
                .find(|w| w.direction == d.direction && w.at_once == d.at_once)
                .map_or("-".to_owned(), |w| ratio_cell(w, d));
            let mut row = vec![
                first(i, || r.uid.to_string()),
                first(i, || format!("{} -> {}", b.nodes[0], b.nodes[1])),
            ];
            row.extend(direction_cells(d));
            row.push(ratio);
            baselines.add_row(row);
        }
    }
    let mut out = String::new();
    if !missing.is_empty() {
        out.push('\n');
        out.push_str(&missing);
    }
    if any {
        out.push('\n');
        out.push_str(&table::render(&baselines));
        out.push_str(
            "\nKERNEL VXLAN: a tunnel the bench builds between the remote wire's two nodes, over \
             the same underlay, with pods of its own, measured the same way and then removed; \
             WIRE/VXLAN: the wire's loss-free rate over the tunnel's, same direction.\n",
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_that_found_nothing_shows_what_the_rate_is_below() {
        let mut d = DirectionBench {
            lossfree_pps: 0.0,
            lowest_failed_pps: Some(502_113.4),
            ..DirectionBench::default()
        };
        assert_eq!(lossless_cell(&d), "< 502113");
        d.lossfree_pps = 250_000.0;
        assert_eq!(lossless_cell(&d), "250000");
        // An older report, which does not say.
        d.lossfree_pps = 0.0;
        d.lowest_failed_pps = None;
        assert_eq!(lossless_cell(&d), "0");
    }

    #[test]
    fn a_wire_whose_search_found_nothing_shows_what_its_ratio_is_below() {
        let baseline = DirectionBench {
            lossfree_pps: 89_338.0,
            ..DirectionBench::default()
        };
        let mut wire = DirectionBench {
            lossfree_pps: 0.0,
            lowest_failed_pps: Some(114_763.0),
            ..DirectionBench::default()
        };
        assert_eq!(ratio_cell(&wire, &baseline), "< 1.28x");
        wire.lossfree_pps = 98_251.0;
        assert_eq!(ratio_cell(&wire, &baseline), "1.10x");
        // A baseline that found nothing has no ratio to give.
        let none = DirectionBench::default();
        assert_eq!(ratio_cell(&wire, &none), "-");
    }

    #[test]
    fn every_trial_of_each_search_is_listed_under_its_wire_and_direction() {
        let trial = |asked_pps: f64, confirm: bool| xwire_model::bench_report::SearchTrial {
            asked_pps,
            confirm,
            offered_pps: 1000.0,
            delivered_pps: 900.0,
            loss_ratio: 0.1,
            sink_dropped: 0,
        };
        let direction = DirectionBench {
            direction: "b->a".into(),
            frame_bytes: 1514,
            search: vec![trial(0.0, false), trial(880.0, true)],
            ..DirectionBench::default()
        };
        let wire = WireBench {
            uid: 7,
            endpoints: ["r1:eth2".into(), "r3:eth1".into()],
            kind: "remote",
            frame_bytes: 1514,
            directions: vec![direction.clone()],
            latency: PktgenReport::default(),
            baseline: Some(BaselineBench {
                path: "kernel VXLAN",
                nodes: ["node-a".into(), "node-b".into()],
                frame_bytes: 1514,
                directions: vec![direction],
                latency: PktgenReport::default(),
            }),
            baseline_missing: None,
        };
        let text = render_trials(&[wire]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 6, "{text}");
        assert_eq!(lines[0], "wire 7 (r1:eth2 -> r3:eth1), b->a alone, 1514 B:");
        assert!(lines[1].contains("full rate") && lines[2].contains("confirm"));
        assert!(lines[3].starts_with("wire 7 (r1:eth2 -> r3:eth1), kernel VXLAN baseline"));
    }
}
