//! `xwire-perf impair`: how closely the switch's impairments match their settings, and
//! what an impaired wire with every setting at zero costs. One bed for the whole run: a
//! generator namespace, a node namespace whose worker (adaptive as in a lab, or busy
//! polling) carries the wire, and a sink namespace. The wire takes one of two paths
//! (`WirePath`): a veth pair straight between generator and sink that the worker steers
//! (a same-node wire in a lab), or two veths to the node whose node ends are AF_XDP ports
//! the worker links (the shape of a remote wire's end, and of a jumbo same-node wire).
//! The generator and sink are xwire-pktgen's, in one thread on CPU 0, the worker on
//! CPU 1. Each figure is measured against the same wire unimpaired in the same run.
//!
//! - delay: the median one-way latency added (impaired p50 minus unimpaired p50), and
//!   p99 minus p50, at 1000 frames a second;
//! - loss: the share of 100,000 frames lost;
//! - rate: the rate delivered while the generator offers more, in whole frames' bits
//!   (the sink interface's bytes plus each frame's Ethernet header, which a veth does
//!   not count), over the steady part of the run;
//! - cost: peak frames per second with an all-zero impairment over without one.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use serde::Serialize;
use xwire_bench::traffic::{self, PortOptions, Traffic, Wait};
use xwire_fastpath::impairment::{ImpairmentSpec, Loss, QueueLimit, Rate};
use xwire_fastpath::{
    Direction, LinkCounters, PortChoice, PortId, SteeredEnd, WireId, Worker, WorkerConfig,
};

use crate::measure::{on_cpu, probe_traffic, wait_until_forwarding};
use crate::testbed::{Netns, Veth};

const GEN_CPU: usize = 0;
const DUT_CPU: usize = 1;
const WIRE: WireId = WireId(1);
/// The sink's port, on either path: AF_PACKET, whose kernel receive timestamps time each
/// frame's arrival. The sink shares its thread with the generator; with an AF_XDP sink
/// (no timestamps in copy mode) a moment the thread was not running added to a delayed
/// frame's latency, and to none of an unimpaired one's (its frames are sent by that
/// same thread), which showed as a p99 of a millisecond or more under a delay.
const SINK_PORT: PortOptions = PortOptions {
    af_packet: true,
    generic: false,
    verbose: false,
};

/// One figure: the setting, what was measured (median of the repetitions), each
/// repetition, and whether it is within the bound.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    pub what: String,
    pub setting: f64,
    pub measured: f64,
    pub runs: Vec<f64>,
    pub unit: &'static str,
    pub bound: String,
    pub within: bool,
}

/// The namespaces, wires and worker of the run. Field order matters: the worker stops
/// before its interfaces go.
struct Bed<'a> {
    worker: Worker,
    from: PortId,
    _wires: Vec<Veth<'a>>,
    /// The generator's port: AF_PACKET on a steered pair (whose interfaces carry the
    /// steering program, so an AF_XDP endpoint's cannot go there too).
    gen_port: PortOptions,
    /// A steered pair's link counters while it is steered: what the switch sends on to
    /// the sink. (The sink interface's own counters take in the frames its steering
    /// program hands the switch as well.)
    steered: Option<Steered>,
    path: WirePath,
    gen: &'a Netns,
    sink: &'a Netns,
    gen_if: String,
    sink_if: String,
}

struct Hosts {
    gen: Netns,
    dut: Netns,
    sink: Netns,
}

impl<'a> Bed<'a> {
    fn new(hosts: &'a Hosts, busy_poll: bool, path: WirePath) -> Result<Bed<'a>> {
        let config = WorkerConfig {
            core: Some(DUT_CPU),
            ports: PortChoice::AfXdp,
            busy_poll,
            ..WorkerConfig::default()
        };
        let worker = hosts.dut.run(|| Worker::spawn(config))??;
        let bed = match path {
            WirePath::Ports => {
                let inbound = Veth::new(&hosts.gen, &hosts.dut)?;
                let outbound = Veth::new(&hosts.dut, &hosts.sink)?;
                for wire in [&inbound, &outbound] {
                    wire.set_up()?;
                }
                let a = worker.add_port(inbound.b_name(), 1514)?;
                let b = worker.add_port(outbound.a_name(), 1514)?;
                worker.add_link(WIRE, a.id, b.id)?;
                Bed {
                    worker,
                    from: a.id,
                    gen_if: inbound.a_name().to_owned(),
                    sink_if: outbound.b_name().to_owned(),
                    _wires: vec![inbound, outbound],
                    gen_port: PortOptions::default(),
                    steered: None,
                    path,
                    gen: &hosts.gen,
                    sink: &hosts.sink,
                }
            }
            WirePath::Steered => {
                let pair = Veth::new(&hosts.gen, &hosts.sink)?;
                pair.set_up()?;
                let mut bed = Bed {
                    worker,
                    from: PortId(0),
                    gen_if: pair.a_name().to_owned(),
                    sink_if: pair.b_name().to_owned(),
                    _wires: vec![pair],
                    gen_port: SINK_PORT,
                    steered: None,
                    path,
                    gen: &hosts.gen,
                    sink: &hosts.sink,
                };
                bed.steer()?;
                bed
            }
        };
        bed.wait_until_forwarding()?;
        Ok(bed)
    }

    fn wait_until_forwarding(&self) -> Result<()> {
        wait_until_forwarding(
            self.gen,
            &self.gen_if,
            self.sink,
            &self.sink_if,
            "the switch",
        )
    }

    fn impair(&self, spec: Option<ImpairmentSpec>) -> Result<()> {
        self.worker.set_impairment(WIRE, self.from, spec)?;
        // Frames the last setting still holds leave before the next measurement.
        std::thread::sleep(Duration::from_millis(300));
        Ok(())
    }

    /// Paced traffic received in the generator's thread: the sink's report.
    fn paced(&self, traffic: &Traffic, drain: Duration) -> Result<xwire_bench::stats::Report> {
        let size = traffic.size;
        let (sent, received) = on_cpu(self.gen, GEN_CPU, || -> Result<_> {
            let mut sink = self
                .sink
                .run(|| traffic::open(&self.sink_if, size, SINK_PORT))??;
            let mut gen = traffic::open(&self.gen_if, size, self.gen_port)?;
            traffic::send_and_sink(&mut gen, &mut sink, traffic, drain, Wait::Yield)
        })??;
        Ok(received.stats.report(size, sent.frames, sent.seconds))
    }

    /// Full speed for `seconds`: frames per second and bits per second delivered at the
    /// sink interface, over the run after its first second (a rate limit's queue fills
    /// in that second).
    fn peak(&self, size: usize, seconds: f64) -> Result<(f64, f64)> {
        let traffic = probe_traffic(size, seconds, 0, [0xff; 6]);
        std::thread::scope(|s| -> Result<(f64, f64)> {
            let sender = s.spawn(|| {
                on_cpu(self.gen, GEN_CPU, || {
                    traffic::send(&self.gen_if, &traffic, self.gen_port)
                })
            });
            std::thread::sleep(Duration::from_secs(1));
            let before = self.delivered()?;
            let start = Instant::now();
            std::thread::sleep(Duration::from_secs_f64((seconds - 1.5).max(0.5)));
            let after = self.delivered()?;
            let elapsed = start.elapsed().as_secs_f64();
            sender.join().expect("the sender thread")??;
            let frames = (after.0 - before.0) as f64 / elapsed;
            let bits = (after.1 - before.1) as f64 * 8.0 / elapsed;
            Ok((frames, bits))
        })
    }
}

/// The ports and counters of the steered pair.
struct Steered {
    ports: [PortId; 2],
    counters: Arc<LinkCounters>,
}

impl Bed<'_> {
    /// Steers the generator-sink pair through the worker.
    fn steer(&mut self) -> Result<()> {
        let end = |ns: &Netns, ifname: &str| -> Result<SteeredEnd> {
            Ok(SteeredEnd {
                netns: OwnedFd::from(File::open(ns.path())?),
                ifname: ifname.into(),
            })
        };
        let ends = [end(self.gen, &self.gen_if)?, end(self.sink, &self.sink_if)?];
        let pair = self.worker.steer_pair(WIRE, ends, 1514)?;
        self.from = pair.ports[0].id;
        self.steered = Some(Steered {
            ports: [pair.ports[0].id, pair.ports[1].id],
            counters: pair.counters,
        });
        Ok(())
    }

    /// Puts the generator-sink pair back as a plain veth pair.
    fn unsteer(&mut self) -> Result<()> {
        if let Some(steered) = self.steered.take() {
            self.worker.remove_ports(&steered.ports)?;
        }
        Ok(())
    }

    /// Frames and whole frames' bytes delivered towards the sink so far.
    fn delivered(&self) -> Result<(u64, u64)> {
        if let Some(Steered { counters, .. }) = &self.steered {
            let sent = counters.snapshot(Direction::AToB);
            return Ok((sent.frames, sent.bytes));
        }
        let stats = self.sink.link_stats(&self.sink_if)?;
        // A veth counts a frame's bytes after its Ethernet header; the rate limit counts
        // whole frames, as a wire carries them.
        Ok((stats.rx_packets, stats.rx_bytes + 14 * stats.rx_packets))
    }
}

fn median(mut runs: Vec<f64>) -> f64 {
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn delay(ms: u64) -> ImpairmentSpec {
    ImpairmentSpec {
        delay: Duration::from_millis(ms),
        ..ImpairmentSpec::default()
    }
}

/// The path the measured wire takes through the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WirePath {
    /// A veth pair straight between the pods, steered through the switch in place.
    Steered,
    /// A veth from each pod to the node, whose node ends are the switch's ports.
    Ports,
}

/// A group of the run's measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    Delay,
    Loss,
    Rate,
    Cost,
}

/// Runs the measurements of `parts` (all when empty) `reps` times; `busy_poll` keeps the
/// worker spinning (as a benchmark node) instead of sleeping when idle (as a lab's).
pub fn run(
    reps: usize,
    seconds: f64,
    busy_poll: bool,
    path: WirePath,
    parts: &[Part],
) -> Result<Vec<Figure>> {
    let wanted = |part: Part| parts.is_empty() || parts.contains(&part);
    let hosts = Hosts {
        gen: Netns::new("ia-gen")?,
        dut: Netns::new("ia-dut")?,
        sink: Netns::new("ia-sink")?,
    };
    let mut bed = Bed::new(&hosts, busy_poll, path)?;
    let reps = reps.max(1);
    let mut figures = Vec::new();

    if wanted(Part::Delay) {
        figures.extend(delay_figures(&mut bed, reps, seconds)?);
    }
    if wanted(Part::Loss) {
        figures.extend(loss_figures(&mut bed, reps)?);
    }
    if wanted(Part::Rate) {
        figures.extend(rate_figures(&mut bed, reps, seconds)?);
    }
    if wanted(Part::Cost) {
        figures.extend(cost_figures(&mut bed, reps, seconds)?);
    }
    Ok(figures)
}

/// The added latency of a delay of 1, 10 and 100 ms, and its spread.
fn delay_figures(bed: &mut Bed<'_>, reps: usize, seconds: f64) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    // One frame per flush, so that the generator adds no batching to the latency.
    let latency_traffic = Traffic {
        batch: 1,
        ..probe_traffic(64, seconds.min(3.0), 1000, [0xff; 6])
    };
    for ms in [1u64, 10, 100] {
        let mut added = Vec::new();
        let mut spread = Vec::new();
        let mut base_spread = Vec::new();
        for _ in 0..reps {
            bed.impair(None)?;
            let base = bed.paced(&latency_traffic, Duration::from_millis(300))?;
            bed.impair(Some(delay(ms)))?;
            let drain = Duration::from_millis(ms * 2 + 300);
            let delayed = bed.paced(&latency_traffic, drain)?;
            added.push((delayed.p50_us - base.p50_us) / 1000.0);
            spread.push(delayed.p99_us - delayed.p50_us);
            base_spread.push(base.p99_us - base.p50_us);
        }
        let setting = ms as f64;
        let bound = (setting * 0.02).max(0.05);
        let measured = median(added.clone());
        figures.push(Figure {
            what: format!("delay {ms} ms: added median latency"),
            setting,
            measured,
            within: (measured - setting).abs() <= bound,
            runs: added,
            unit: "ms",
            bound: format!("within {bound} ms"),
        });
        let measured = median(spread.clone());
        figures.push(Figure {
            what: format!("delay {ms} ms: p99 - p50"),
            setting: 0.0,
            measured,
            within: measured < 200.0,
            runs: spread,
            unit: "us",
            bound: "under 200 us".into(),
        });
        figures.push(Figure {
            what: "  (unimpaired, same runs: p99 - p50)".to_owned(),
            setting: 0.0,
            measured: median(base_spread.clone()),
            within: true,
            runs: base_spread,
            unit: "us",
            bound: "reported".into(),
        });
    }
    Ok(figures)
}

/// The frames lost of 100,000 at a random loss of 1, 10 and 50%.
fn loss_figures(bed: &mut Bed<'_>, reps: usize) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    let loss_traffic = Traffic {
        count: Some(100_000),
        ..probe_traffic(64, 60.0, 20_000, [0xff; 6])
    };
    for percent in [1.0f64, 10.0, 50.0] {
        let mut runs = Vec::new();
        for _ in 0..reps {
            bed.impair(Some(ImpairmentSpec {
                loss: Loss::Random(percent / 100.0),
                ..ImpairmentSpec::default()
            }))?;
            let report = bed.paced(&loss_traffic, Duration::from_millis(300))?;
            runs.push(report.loss_ratio * 100.0);
        }
        let measured = median(runs.clone());
        figures.push(Figure {
            what: format!("loss {percent}%: frames lost of 100,000"),
            setting: percent,
            measured,
            within: (measured - percent).abs() <= percent * 0.1,
            runs,
            unit: "%",
            bound: "within 10% of the setting".into(),
        });
    }
    Ok(figures)
}

/// What a rate limit of 10, 100 and 1000 Mbit/s delivers.
fn rate_figures(bed: &mut Bed<'_>, reps: usize, seconds: f64) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for mbit in [10u64, 100, 1000] {
        let mut runs = Vec::new();
        for _ in 0..reps {
            bed.impair(Some(ImpairmentSpec {
                rate: Some(Rate {
                    bits_per_second: mbit * 1_000_000,
                    limit: QueueLimit::Frames(1000),
                }),
                ..ImpairmentSpec::default()
            }))?;
            let (_, bits) = bed.peak(1514, seconds)?;
            runs.push(bits / 1e6);
            // The queue the limit held drains before the next run.
            bed.impair(None)?;
            std::thread::sleep(Duration::from_millis(1500));
        }
        let setting = mbit as f64;
        let measured = median(runs.clone());
        figures.push(Figure {
            what: format!("rate {mbit} Mbit/s: delivered"),
            setting,
            measured,
            within: (measured - setting).abs() <= setting * 0.02,
            runs,
            unit: "Mbit/s",
            bound: "within 2% of the setting".into(),
        });
    }
    Ok(figures)
}

/// What an impairment that does nothing costs at peak rate, at 64 and 1514 B.
fn cost_figures(bed: &mut Bed<'_>, reps: usize, seconds: f64) -> Result<Vec<Figure>> {
    let mut figures = Vec::new();
    for size in [64usize, 1514] {
        let mut runs = Vec::new();
        let mut against_veth = Vec::new();
        for _ in 0..reps {
            bed.impair(None)?;
            let (plain, _) = bed.peak(size, seconds)?;
            bed.impair(Some(ImpairmentSpec::default()))?;
            let (zero, _) = bed.peak(size, seconds)?;
            runs.push(zero / plain);
            if bed.path == WirePath::Steered {
                bed.unsteer()?;
                let (veth, _) = bed.peak(size, seconds)?;
                bed.steer()?;
                bed.wait_until_forwarding()?;
                against_veth.push(zero / veth);
            }
        }
        if !against_veth.is_empty() {
            figures.push(Figure {
                what: format!("cost at {size} B: all-zero impairment / plain veth pair"),
                setting: 1.0,
                measured: median(against_veth.clone()),
                within: true,
                runs: against_veth,
                unit: "ratio",
                bound: "reported".into(),
            });
        }
        figures.push(Figure {
            what: format!("cost at {size} B: all-zero impairment / none (peak frames/s)"),
            setting: 1.0,
            measured: median(runs.clone()),
            within: true,
            runs,
            unit: "ratio",
            bound: "reported".into(),
        });
    }
    Ok(figures)
}

pub fn print(figures: &[Figure]) {
    println!(
        "{:<58} {:>10} {:>10} {:<7} {:<28} RUNS",
        "MEASUREMENT", "SETTING", "MEASURED", "UNIT", "BOUND"
    );
    for f in figures {
        let runs: Vec<String> = f.runs.iter().map(|r| format!("{r:.3}")).collect();
        println!(
            "{:<58} {:>10.3} {:>10.3} {:<7} {:<28} {} {}",
            f.what,
            f.setting,
            f.measured,
            f.unit,
            f.bound,
            runs.join(" "),
            if f.within { "" } else { "(outside)" }
        );
    }
}
