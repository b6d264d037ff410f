//! `xwirectl lab bench`: `xwire-pktgen` across every wire (or one), between the pod
//! interfaces of its two ends, one wire at a time so the wires do not share the machine:
//! first the loss-free rate of each direction, alone and both at once (with the rate and
//! loss at full offered load beside it), then 64-byte frames at a fixed low rate
//! (latency with no queue building up). Prints a table and writes a PNG chart.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::file::{Lab, LabLink};
use super::namespaces::netns_path;
use super::paths::LabPaths;
use super::up::find_binary;

#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// One wire, or all.
    pub link: Option<u64>,
    /// Seconds of each trial of the loss-free search, and of the latency run.
    pub seconds: f64,
    /// Frame size in bytes (without FCS) for the loss-free search.
    pub size: usize,
    /// The directions searched: "a-to-b", "b-to-a", "both" (pktgen's --flows).
    pub flows: Vec<String>,
    /// The highest loss the loss-free rate may have (0.001 is 0.1%).
    pub max_loss: f64,
    /// Frames per second of the latency run.
    pub latency_rate: u64,
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
pub type DirectionBench = xwire_bench::trial::DirectionFigure;

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
}

impl WireBench {
    /// The first endpoint's direction measured alone: the chart's figure.
    pub fn a_to_b(&self) -> Option<&DirectionBench> {
        self.directions
            .iter()
            .find(|d| d.direction == "a->b" && !d.at_once)
    }
}

pub fn bench(lab: &Lab, options: &BenchOptions) -> Result<Vec<WireBench>> {
    let pktgen = find_binary("xwire-pktgen")?;
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
    let mut results = Vec::new();
    for link in links {
        let [a, b] = &link.endpoints;
        let local = lab.pods.get(&a.pod) == lab.pods.get(&b.pod);
        // Frames no larger than the wire's MTU allows (plus the Ethernet header).
        let largest = link.mtu.unwrap_or(1500) as usize + 14;
        let size = options.size.min(largest);
        // Native XDP on a veth refuses a peer whose MTU is above about 3.5 KB (and leaves
        // the socket half-made when it does): such wires go straight to generic mode.
        let generic = largest > xwire_fastpath::NATIVE_MAX_FRAME;
        let pktgen_command = |mode: &str| {
            let mut command = Command::new(&pktgen);
            command.env(super::paths::LAB_ENV, &paths.name).arg(mode);
            if generic {
                command.arg("--generic");
            }
            command
        };
        let context = || format!("xwire-pktgen across wire {} ({a} -> {b})", link.uid);
        let mut search = pktgen_command("lossfree");
        search
            .arg("--a-netns")
            .arg(netns_path(&paths.pod_netns(&a.pod)))
            .args(["--a-iface", &a.ifname])
            .arg("--b-netns")
            .arg(netns_path(&paths.pod_netns(&b.pod)))
            .args(["--b-iface", &b.ifname, "--json"])
            .args(["--size", &size.to_string()])
            .args(["--trial-seconds", &options.seconds.to_string()])
            .args(["--max-loss", &options.max_loss.to_string()])
            .args(["--flows", &options.flows.join(",")]);
        let found: LossfreeReport = pktgen_json(&mut search).with_context(context)?;
        let mut latency = pktgen_command("run");
        latency
            .arg("--tx-netns")
            .arg(netns_path(&paths.pod_netns(&a.pod)))
            .args(["--tx-iface", &a.ifname])
            .arg("--rx-netns")
            .arg(netns_path(&paths.pod_netns(&b.pod)))
            .args(["--rx-iface", &b.ifname, "--json"])
            .args(["--size", "64", "--one-thread"])
            .args(["--rate", &options.latency_rate.to_string()])
            .args(["--seconds", &options.seconds.to_string()]);
        let latency: PktgenReport = pktgen_json(&mut latency).with_context(context)?;
        results.push(WireBench {
            uid: link.uid,
            endpoints: [a.to_string(), b.to_string()],
            kind: if local { "local" } else { "remote" },
            frame_bytes: size,
            directions: found.directions,
            latency,
        });
    }
    super::chart::write(&lab.name, &results, &options.chart)?;
    Ok(results)
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

pub fn render(results: &[WireBench], chart: &Path, max_loss: f64) -> String {
    let mut out = format!(
        "{:>5}  {:<33} {:<7} {:>6} {:<13} {:>10} {:>8} {:>9}   {:>10} {:>7}\n",
        "UID",
        "WIRE (A -> B)",
        "KIND",
        "BYTES",
        "DIRECTION",
        "LOSSLESS",
        "GBIT/S",
        "P99 US",
        "FULL-RATE",
        "LOSS"
    );
    for r in results {
        for (i, d) in r.directions.iter().enumerate() {
            let wire = if i == 0 {
                format!("{} -> {}", r.endpoints[0], r.endpoints[1])
            } else {
                String::new()
            };
            let direction = format!(
                "{} {}",
                d.direction,
                if d.at_once { "both" } else { "alone" }
            );
            out.push_str(&format!(
                "{:>5}  {:<33} {:<7} {:>6} {:<13} {:>10.0} {:>8.3} {:>9}   {:>10.0} {:>6.2}%\n",
                if i == 0 {
                    r.uid.to_string()
                } else {
                    String::new()
                },
                wire,
                if i == 0 { r.kind } else { "" },
                d.frame_bytes,
                direction,
                d.lossfree_pps,
                d.lossfree_gbps,
                d.p99_us.map_or("-".to_owned(), |us| format!("{us:.1}")),
                d.peak_delivered_pps,
                d.peak_loss_ratio * 100.0,
            ));
        }
    }
    out.push_str(&format!(
        "\nLOSSLESS: the highest offered rate (pps) carried with loss at or below {}%, found by a \
         search over offered rates, with the p99 latency at it; FULL-RATE: what arrived when \
         offered all the generator sends, and its loss.\n\n",
        max_loss * 100.0
    ));
    out.push_str(&format!(
        "{:>5}  {:<33} {:>9} {:>9}\n",
        "UID", "LATENCY, 64 B FRAMES AT A LOW RATE", "P50 US", "P99 US"
    ));
    for r in results {
        out.push_str(&format!(
            "{:>5}  {:<33} {:>9.1} {:>9.1}\n",
            r.uid,
            format!("{} pps", r.latency.offered_pps.round()),
            r.latency.p50_us,
            r.latency.p99_us
        ));
    }
    out.push_str(&format!("\nchart: {}\n", chart.display()));
    out
}
