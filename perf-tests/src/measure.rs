//! What every scenario reports, and how it measures a CPU's share.

use std::time::{Duration, Instant};

use serde::Serialize;
use xwire_bench::traffic::Traffic;

use crate::testbed::{Error, LinkStats, Netns, Veth};

/// One throughput or latency measurement, in the fields the issue names.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub name: String,
    pub frame_bytes: usize,
    pub offered_pps: f64,
    pub delivered_pps: f64,
    pub gbps: f64,
    pub loss_ratio: f64,
    /// Frames sent that never arrived, counted, on paced rows: "0 lost" read from a
    /// percentage with two decimals could still hide a few dozen frames.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost_frames: Option<u64>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub cpu_cores: f64,
    /// CPU time of the whole machine (every CPU, user, system and softirq) per delivered
    /// frame, in nanoseconds: the generator's and sink's share is the same for every
    /// device at one rate, so the differences between rows are the devices'. On paced
    /// rows only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_ns_per_frame: Option<f64>,
    /// Goodput of a TCP transfer (iperf3), on TCP rows only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_gbps: Option<f64>,
    /// Where that CPU time went, per delivered frame: each CPU's busy time, and each
    /// xwire worker thread's own (the kernel's work done while it ran included). A path
    /// whose stages each had a core of their own would carry at most one frame per the
    /// largest stage's time. On paced rows only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<Stage>,
}

/// Each CPU's busy time per frame of `frames`.
pub(crate) fn cpu_stages(usage: &Usage, frames: u64) -> Vec<Stage> {
    (usage.cpu_seconds.iter().enumerate())
        .map(|(cpu, &seconds)| Stage {
            name: format!("cpu{cpu}"),
            ns_per_frame: seconds * 1e9 / frames.max(1) as f64,
        })
        .collect()
}

/// One stage of a path's CPU time per delivered frame.
#[derive(Debug, Clone, Serialize)]
pub struct Stage {
    pub name: String,
    pub ns_per_frame: f64,
}

impl Row {
    /// A full-speed row: what the generator sent, and the sink interface's counters
    /// before and after.
    pub fn peak(
        name: String,
        frame_bytes: usize,
        sent: xwire_bench::traffic::Sent,
        before: LinkStats,
        after: LinkStats,
        cpu_cores: f64,
    ) -> Row {
        let delivered = after.rx_packets - before.rx_packets;
        Row {
            name,
            frame_bytes,
            offered_pps: sent.frames as f64 / sent.seconds,
            delivered_pps: delivered as f64 / sent.seconds,
            gbps: (after.rx_bytes - before.rx_bytes) as f64 * 8.0 / sent.seconds / 1e9,
            loss_ratio: 1.0 - delivered as f64 / sent.frames.max(1) as f64,
            lost_frames: None,
            p50_us: None,
            p99_us: None,
            cpu_cores,
            cpu_ns_per_frame: None,
            tcp_gbps: None,
            stages: Vec::new(),
        }
    }

    /// A latency and cost row from a paced run's sink report.
    pub fn paced(
        name: String,
        frame_bytes: usize,
        report: &xwire_bench::stats::Report,
        usage: Usage,
    ) -> Row {
        let per_frame = |seconds: f64| seconds * 1e9 / report.delivered.max(1) as f64;
        Row {
            name,
            frame_bytes,
            offered_pps: report.offered_pps,
            delivered_pps: report.delivered_pps,
            gbps: report.gbps,
            loss_ratio: report.loss_ratio,
            lost_frames: Some(report.offered.saturating_sub(report.delivered)),
            p50_us: Some(report.p50_us),
            p99_us: Some(report.p99_us),
            cpu_cores: usage.dut_share,
            cpu_ns_per_frame: Some(per_frame(usage.machine_seconds)),
            tcp_gbps: None,
            stages: cpu_stages(&usage, report.delivered),
        }
    }
}

/// One direction's loss-free rate through a device or over a path, as a row.
#[derive(Debug, Clone, Serialize)]
pub struct LossfreeRow {
    pub name: String,
    #[serde(flatten)]
    pub figure: xwire_bench::trial::DirectionFigure,
}

/// How long the trials of a loss-free search run.
#[derive(Debug, Clone, Copy)]
pub struct SearchLength {
    /// Each short trial of the search.
    pub trial_seconds: f64,
    /// The trial that confirms the rate found; 0: none.
    pub confirm_seconds: f64,
}

/// Every flow's loss-free search across `wire`.
pub(crate) fn lossfree_rows(
    name: &str,
    wire: &mut xwire_bench::trial::Wire,
    size: usize,
    length: SearchLength,
    flows: &[xwire_bench::trial::Flow],
) -> anyhow::Result<Vec<LossfreeRow>> {
    let traffic = probe_traffic(size, length.trial_seconds, 0, [0xff; 6]);
    let criteria = xwire_bench::lossfree::Criteria {
        confirm_seconds: length.confirm_seconds,
        ..Default::default()
    };
    let mut rows = Vec::new();
    for &flow in flows {
        let found = wire.lossfree(flow, &traffic, criteria)?;
        rows.extend(found.directions().into_iter().map(|figure| LossfreeRow {
            name: name.to_owned(),
            figure,
        }));
    }
    Ok(rows)
}

/// What a measurement cost in CPU: the DUT CPU's busy share, and the busy CPU-seconds of
/// the whole machine and of each CPU.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    pub dut_share: f64,
    pub machine_seconds: f64,
    pub cpu_seconds: Vec<f64>,
}

/// The DUT CPU's share and the machine's busy CPU time while `f` ran.
pub(crate) fn usage_while<T>(dut_cpu: usize, f: impl FnOnce() -> T) -> (T, Usage) {
    let before = machine_idle_ticks();
    let cpus_before = per_cpu_idle_ticks();
    let start = Instant::now();
    let (out, dut_share) = busy_while(dut_cpu, f);
    let elapsed = start.elapsed().as_secs_f64();
    let cpu_seconds = match (cpus_before, per_cpu_idle_ticks()) {
        (Some(i0), Some(i1)) if i0.len() == i1.len() => (i0.iter().zip(&i1))
            .map(|(a, b)| (elapsed - b.saturating_sub(*a) as f64 / ticks_per_second()).max(0.0))
            .collect(),
        _ => Vec::new(),
    };
    let machine_seconds = match (before, machine_idle_ticks()) {
        (Some((i0, cpus)), Some((i1, _))) => {
            (elapsed * cpus as f64 - i1.saturating_sub(i0) as f64 / ticks_per_second()).max(0.0)
        }
        _ => 0.0,
    };
    (
        out,
        Usage {
            dut_share,
            machine_seconds,
            cpu_seconds,
        },
    )
}

/// Idle jiffies of all CPUs together, and how many CPUs /proc/stat lists.
fn machine_idle_ticks() -> Option<(u64, usize)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let cpus = stat
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    Some((idle_ticks(&stat, "cpu ")?, cpus))
}

/// Idle jiffies of each CPU, in /proc/stat's order (cpu0, cpu1, ...).
fn per_cpu_idle_ticks() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    (0..)
        .map(|cpu| format!("cpu{cpu} "))
        .map_while(|prefix| stat.contains(&prefix).then(|| idle_ticks(&stat, &prefix)))
        .collect()
}

fn ticks_per_second() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64
}

/// An idle device: what it burns, and what the first frame after a silence waits.
#[derive(Debug, Clone, Serialize)]
pub struct IdleRow {
    pub name: String,
    pub idle_cpu_cores: f64,
    pub silence_ms: u64,
    pub first_frame_p50_us: f64,
    pub first_frame_p99_us: f64,
    pub first_frame_max_us: f64,
    pub probes: u64,
}

/// Idle jiffies (idle and iowait) of /proc/stat's line that starts with `prefix`.
///
/// Busy time is the wall time less this, not the sum of /proc/stat's busy fields: this
/// kernel charges those by the tick (250 Hz, no IRQ time accounting), and an idle CPU's
/// tick is stopped, so the softirq work that wakes an idle CPU between ticks (a
/// bridge's, VXLAN's, a veth's NAPI) was charged to nobody, while idle time is measured
/// exactly from timestamps. By the busy fields, the Linux bridge cost 0.96-2.5 us per
/// 1514-byte frame at 50 kpps, less than the direct veth pair it adds a hop to (4.0).
fn idle_ticks(stat: &str, prefix: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with(prefix))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    Some(v.get(3)? + v.get(4)?)
}

/// The share of `cpu` that was busy while `f` ran.
pub(crate) fn busy_while<T>(cpu: usize, f: impl FnOnce() -> T) -> (T, f64) {
    let prefix = format!("cpu{cpu} ");
    let idle = || idle_ticks(&std::fs::read_to_string("/proc/stat").ok()?, &prefix);
    let before = idle();
    let start = Instant::now();
    let out = f();
    let elapsed = start.elapsed().as_secs_f64();
    let share = match (before, idle()) {
        (Some(i0), Some(i1)) if elapsed > 0.0 => {
            (1.0 - i1.saturating_sub(i0) as f64 / ticks_per_second() / elapsed).clamp(0.0, 1.0)
        }
        _ => 0.0,
    };
    (out, share)
}

/// The median row of several repetitions, by `key`.
pub fn median_by(mut rows: Vec<Row>, key: impl Fn(&Row) -> f64) -> Row {
    rows.sort_by(|a, b| key(a).total_cmp(&key(b)));
    rows.swap_remove(rows.len() / 2)
}

/// Probe traffic of `size`-byte frames to `dst_mac` for `seconds`, at `rate` frames per
/// second (0: as fast as it goes).
pub(crate) fn probe_traffic(size: usize, seconds: f64, rate: u64, dst_mac: [u8; 6]) -> Traffic {
    Traffic {
        size,
        rate,
        count: None,
        duration: Duration::from_secs_f64(seconds),
        dst_mac,
        batch: 64,
    }
}

/// Both ends' `rx_dropped` and `tx_dropped` of each of `veths`, for `--verbose`: where a
/// frame that reached no socket was lost.
pub(crate) fn veth_drops<'v, 'n: 'v>(veths: impl IntoIterator<Item = &'v Veth<'n>>) -> String {
    let mut drops = Vec::new();
    for veth in veths {
        for (ns, ifname) in [(veth.a_ns(), veth.a_name()), (veth.b_ns(), veth.b_name())] {
            if let Ok(stats) = ns.link_stats(ifname) {
                drops.push(format!(
                    "{}/{ifname} rx_dropped={} tx_dropped={}",
                    ns.name(),
                    stats.rx_dropped,
                    stats.tx_dropped
                ));
            }
        }
    }
    drops.join(", ")
}

/// Runs `f` inside `ns` on a thread pinned to `cpu`.
pub(crate) fn on_cpu<T: Send>(
    ns: &Netns,
    cpu: usize,
    f: impl FnOnce() -> T + Send,
) -> Result<T, Error> {
    ns.run(|| {
        core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
        f()
    })
}

/// Sends a probe frame from `gen_if` every 50 ms until one reaches `sink_if` (a device
/// takes a moment to attach to its interfaces), for at most 15 s.
pub(crate) fn wait_until_forwarding(
    gen: &Netns,
    gen_if: &str,
    sink: &Netns,
    sink_if: &str,
    device: &str,
) -> anyhow::Result<()> {
    let raw = crate::testbed::RawSocket::open(gen, gen_if)?;
    let mut frame = [0u8; 60];
    frame[..6].copy_from_slice(&[0xff; 6]);
    frame[6..12].copy_from_slice(&[0x02, 0x78, 0x77, 0, 0, 9]);
    frame[12..14].copy_from_slice(&xwire_bench::probe::ETHERTYPE.to_be_bytes());
    let before = sink.link_stats(sink_if)?.rx_packets;
    for _ in 0..300 {
        raw.send(&frame)?;
        std::thread::sleep(Duration::from_millis(50));
        if sink.link_stats(sink_if)?.rx_packets > before {
            return Ok(());
        }
    }
    anyhow::bail!("{device} did not forward within 15 s")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(offered: u64, delivered: u64) -> xwire_bench::stats::Report {
        xwire_bench::stats::Report {
            frame_bytes: 64,
            offered,
            delivered,
            offered_pps: offered as f64,
            delivered_pps: delivered as f64,
            gbps: 0.0,
            loss_ratio: 1.0 - delivered as f64 / offered as f64,
            reordered: 0,
            sink_dropped: 0,
            p50_us: 1.0,
            p99_us: 2.0,
            p999_us: 3.0,
            max_us: 4.0,
        }
    }

    #[test]
    fn a_paced_row_counts_the_frames_lost_that_its_percentage_rounds_away() {
        let row = Row::paced("x".into(), 64, &report(500_000, 499_977), Usage::default());
        assert_eq!(row.lost_frames, Some(23));
        assert_eq!(format!("{:.2}", row.loss_ratio * 100.0), "0.00");
        let json = serde_json::to_value(&row).expect("a row serialises");
        assert_eq!(json["lost_frames"], 23);
        // Counted a moment apart, a sink may see a frame more than was counted sent.
        let row = Row::paced("x".into(), 64, &report(100, 101), Usage::default());
        assert_eq!(row.lost_frames, Some(0));
    }
}
