//! `xwirectl lab bench`: `xwire-pktgen` across every wire (or one), from the first
//! endpoint's pod interface to the second's, one wire at a time so the wires do not share
//! the machine: first as fast as it can send (throughput), then at a fixed low rate
//! (latency, with no queue building up). Prints a table and writes a PNG chart.

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
    pub seconds: f64,
    /// Frame size in bytes (without FCS) for the throughput run.
    pub size: usize,
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
    pub delivered_pps: f64,
    pub gbps: f64,
    pub loss_ratio: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WireBench {
    pub uid: u64,
    pub endpoints: [String; 2],
    pub kind: &'static str,
    pub throughput: PktgenReport,
    pub latency: PktgenReport,
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
        let run = |extra: &[String]| -> Result<PktgenReport> {
            let mut command = Command::new(&pktgen);
            command
                .env(super::paths::LAB_ENV, &paths.name)
                .arg("run")
                .arg("--tx-netns")
                .arg(netns_path(&paths.pod_netns(&a.pod)))
                .args(["--tx-iface", &a.ifname])
                .arg("--rx-netns")
                .arg(netns_path(&paths.pod_netns(&b.pod)))
                .args(["--rx-iface", &b.ifname, "--json"])
                .args(extra);
            if generic {
                command.arg("--generic");
            }
            pktgen_report(&mut command)
                .with_context(|| format!("xwire-pktgen across wire {} ({a} -> {b})", link.uid))
        };
        let seconds = options.seconds.to_string();
        let throughput = run(&[
            "--size".into(),
            size.to_string(),
            "--seconds".into(),
            seconds.clone(),
        ])?;
        let latency = run(&[
            "--size".into(),
            "64".into(),
            "--rate".into(),
            options.latency_rate.to_string(),
            "--one-thread".into(),
            "--seconds".into(),
            seconds,
        ])?;
        results.push(WireBench {
            uid: link.uid,
            endpoints: [a.to_string(), b.to_string()],
            kind: if local { "local" } else { "remote" },
            throughput,
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

fn pktgen_report(command: &mut Command) -> Result<PktgenReport> {
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

pub fn render(results: &[WireBench], chart: &Path) -> String {
    let mut out = format!(
        "{:>5}  {:<33} {:<7} {:>6} {:>10} {:>8} {:>7}   {:>9} {:>9}\n",
        "UID", "WIRE (A -> B)", "KIND", "BYTES", "PPS", "GBIT/S", "LOSS", "P50 US", "P99 US"
    );
    for r in results {
        out.push_str(&format!(
            "{:>5}  {:<33} {:<7} {:>6} {:>10.0} {:>8.3} {:>6.2}%   {:>9.1} {:>9.1}\n",
            r.uid,
            format!("{} -> {}", r.endpoints[0], r.endpoints[1]),
            r.kind,
            r.throughput.frame_bytes,
            r.throughput.delivered_pps,
            r.throughput.gbps,
            r.throughput.loss_ratio * 100.0,
            r.latency.p50_us,
            r.latency.p99_us,
        ));
    }
    out.push_str(&format!(
        "\n(throughput: as fast as xwire-pktgen sends; latency: 64-byte frames at a low fixed rate)\nchart: {}\n",
        chart.display()
    ));
    out
}
