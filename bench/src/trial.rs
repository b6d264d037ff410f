//! Trials across one wire: both ends held open for a series of runs at offered rates, in
//! one direction or in both at once, and the loss-free search over them. Each end runs on
//! its own thread, sending its probes (if it sends) and counting the other end's.

use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use xwire_fastpath::Endpoint;

use crate::lossfree::{Criteria, Search};
use crate::stats::Report;
use crate::traffic::{check_size, open, receive_drops, Generator, PortOptions, Received, Traffic};

pub use xwire_model::bench_report::{DirectionFigure, SearchTrial};

/// One end of the wire: an interface, and the network namespace it is in.
#[derive(Debug, Clone)]
pub struct End {
    pub iface: String,
    /// A name under /run/netns, or a path; `None`: the caller's namespace.
    pub netns: Option<String>,
    /// Pin this end's thread to a CPU.
    pub core: Option<usize>,
    /// Run this end's thread at this nice value (`place_thread`).
    pub nice: Option<i8>,
    /// The destination address of the frames sent to this end; `None`: the traffic's.
    pub mac: Option<[u8; 6]>,
}

/// Which way frames go in a trial. `AToB` and `BToA` are one direction alone; `Both`
/// sends the same rate each way at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Flow {
    AToB,
    BToA,
    Both,
}

impl Flow {
    fn sends(self, side: usize) -> bool {
        matches!(
            (self, side),
            (Flow::Both, _) | (Flow::AToB, 0) | (Flow::BToA, 1)
        )
    }
}

/// What one trial measured: the report of each direction that carried traffic
/// (`[a -> b, b -> a]`).
pub(crate) type TrialReports = [Option<Report>; 2];

/// The two ends of a wire, open for as many trials as the caller runs.
pub struct Wire {
    ends: [(End, Endpoint); 2],
    trials: u16,
}

/// Frames still on their way when a sender stops arrive within this time.
const DRAIN: Duration = Duration::from_millis(300);

impl Wire {
    /// Opens both ends for frames of up to `max_frame` bytes.
    pub fn open(a: End, b: End, max_frame: usize, options: PortOptions) -> Result<Wire> {
        let open_end = |end: End| -> Result<(End, Endpoint)> {
            let endpoint = std::thread::scope(|s| {
                s.spawn(|| {
                    if let Some(ns) = &end.netns {
                        enter_netns(ns)?;
                    }
                    open(&end.iface, max_frame, options)
                })
                .join()
                .unwrap_or_else(|_| bail!("opening {} panicked", end.iface))
            })?;
            Ok((end, endpoint))
        };
        Ok(Wire {
            ends: [open_end(a)?, open_end(b)?],
            trials: 0,
        })
    }

    /// One run of `traffic` (its rate, size and duration) in the flow's directions.
    pub fn trial(&mut self, flow: Flow, traffic: &Traffic) -> Result<TrialReports> {
        check_size(traffic.size)?;
        // Each trial's probes carry its number in their source address, so that the
        // stragglers of an earlier trial are not counted in this one.
        self.trials = self.trials.wrapping_add(1);
        let source = |side: usize| -> [u8; 6] {
            let [hi, lo] = self.trials.to_be_bytes();
            [0x02, 0x78, 0x77, side as u8, hi, lo]
        };
        let sources = [source(0), source(1)];
        let sent = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];
        let start = Instant::now();
        let deadline = start + traffic.duration + DRAIN;
        let [(end_a, a), (end_b, b)] = &mut self.ends;
        let results = std::thread::scope(|s| {
            let sent = &sent;
            let run = |side: usize, end: &End, to: Option<[u8; 6]>, endpoint: &mut Endpoint| {
                place_thread(end.core, end.nice)?;
                let other = 1 - side;
                let traffic = Traffic {
                    dst_mac: to.unwrap_or(traffic.dst_mac),
                    ..traffic.clone()
                };
                run_end(
                    endpoint,
                    flow.sends(side).then_some((&traffic, sources[side])),
                    flow.sends(other).then_some(sources[other]),
                    [&sent[side], &sent[other]],
                    deadline,
                )
            };
            let (to_a, to_b) = (end_a.mac, end_b.mac);
            let thread_a = s.spawn(move || run(0, end_a, to_b, a));
            let thread_b = s.spawn(move || run(1, end_b, to_a, b));
            [thread_a.join(), thread_b.join()]
        });
        let [from_a, from_b] =
            results.map(|r| r.unwrap_or_else(|_| bail!("a trial thread panicked")));
        let (from_a, from_b) = (from_a?, from_b?);
        let report = |sent: Option<crate::traffic::Sent>, got: &Received| {
            sent.map(|sent| Report {
                sink_dropped: got.sink_dropped,
                ..got.stats.report(traffic.size, sent.frames, sent.seconds)
            })
        };
        Ok([report(from_a.0, &from_b.1), report(from_b.0, &from_a.1)])
    }

    /// The loss-free rate of each direction the flow sends in: a full-rate trial, then
    /// trials at offered rates narrowed by [`Search`]. With `Flow::Both` both directions
    /// get the same rate, and a trial passes only if both do.
    pub fn lossfree(
        &mut self,
        flow: Flow,
        traffic: &Traffic,
        criteria: Criteria,
    ) -> Result<LossFree> {
        let full = Traffic {
            rate: 0,
            ..traffic.clone()
        };
        let peak = self.trial(flow, &full)?;
        let mut log = vec![search_trial(&peak, 0, false)];
        let (offered, delivered, loss) = worst(&peak);
        let mut search = Search::from_peak(offered, delivered, loss, peak.clone(), criteria);
        while let Some(step) = search.next_step() {
            let duration = if step.confirm {
                Duration::from_secs_f64(criteria.confirm_seconds)
            } else {
                traffic.duration
            };
            let paced = Traffic {
                rate: step.rate,
                duration,
                ..traffic.clone()
            };
            let reports = self.trial(flow, &paced)?;
            log.push(search_trial(&reports, step.rate, step.confirm));
            let (_, _, loss) = worst(&reports);
            search.record(step, loss, reports);
        }
        let trials = search.trials() + 1;
        let lowest_failed_pps = search.lowest_failure();
        let at_rate = search.finish().map(|(_, reports)| reports);
        // The rate the generator reached, not the one asked of it: a generator that
        // shares its CPU may fall short of a paced rate, and a pass at a rate that was
        // never offered says nothing.
        let rate_pps = at_rate.as_ref().map_or(0.0, |reports| {
            reports
                .iter()
                .flatten()
                .map(|r| r.offered_pps)
                .fold(f64::INFINITY, f64::min)
        });
        Ok(LossFree {
            flow,
            criteria,
            trials,
            peak,
            rate_pps: rate_pps.round() as u64,
            lowest_failed_pps,
            at_rate,
            log,
        })
    }

    /// Which kind of port each end opened ("AF_XDP (native)", ...).
    pub fn kinds(&self) -> [&'static str; 2] {
        [self.ends[0].1.kind().name(), self.ends[1].1.kind().name()]
    }
}

/// What a loss-free search found.
#[derive(Debug, Clone, Serialize)]
pub struct LossFree {
    pub flow: Flow,
    pub criteria: Criteria,
    /// Trials run, the full-rate one included.
    pub trials: usize,
    /// The full-rate trial: what the wire carries when offered all the generator can send.
    pub peak: TrialReports,
    /// The highest rate (per direction) offered by a passing trial, as the generator
    /// reached it; 0 when no trial passed.
    pub rate_pps: u64,
    /// The lowest rate asked for that failed (none when the full rate passed).
    pub lowest_failed_pps: Option<u64>,
    /// The passing trial at that rate (its latency is the latency at the loss-free rate).
    pub at_rate: Option<TrialReports>,
    /// Every trial in the order run, the full-rate one first, per direction.
    pub log: Vec<[Option<SearchTrial>; 2]>,
}

impl LossFree {
    /// One figure per direction that carried traffic, as reports and charts show them.
    pub fn directions(&self) -> Vec<DirectionFigure> {
        let names = ["a->b", "b->a"];
        (0..2)
            .filter_map(|i| {
                let peak = self.peak[i].as_ref()?;
                let at_rate = self.at_rate.as_ref().and_then(|r| r[i].as_ref());
                Some(DirectionFigure {
                    direction: names[i].to_owned(),
                    at_once: self.flow == Flow::Both,
                    frame_bytes: peak.frame_bytes,
                    lossfree_pps: self.rate_pps as f64,
                    lossfree_gbps: gbps(self.rate_pps as f64, peak.frame_bytes),
                    lowest_failed_pps: self.lowest_failed_pps.map(|rate| rate as f64),
                    p50_us: at_rate.map(|r| r.p50_us),
                    p99_us: at_rate.map(|r| r.p99_us),
                    trials: self.trials,
                    peak_offered_pps: peak.offered_pps,
                    peak_delivered_pps: peak.delivered_pps,
                    peak_gbps: peak.gbps,
                    peak_loss_ratio: peak.loss_ratio,
                    peak_sink_dropped: peak.sink_dropped,
                    search: self.log.iter().filter_map(|t| t[i].clone()).collect(),
                })
            })
            .collect()
    }
}

fn gbps(pps: f64, frame_bytes: usize) -> f64 {
    pps * frame_bytes as f64 * 8.0 / 1e9
}

/// A trial of the search at `asked` frames per second (0: full rate), per direction.
fn search_trial(reports: &TrialReports, asked: u64, confirm: bool) -> [Option<SearchTrial>; 2] {
    reports.each_ref().map(|report| {
        report.as_ref().map(|r| SearchTrial {
            asked_pps: asked as f64,
            confirm,
            offered_pps: r.offered_pps,
            delivered_pps: r.delivered_pps,
            loss_ratio: r.loss_ratio,
            sink_dropped: r.sink_dropped,
        })
    })
}

/// The offered and delivered rate and the loss of the direction that lost the most.
fn worst(reports: &TrialReports) -> (f64, f64, f64) {
    reports
        .iter()
        .flatten()
        .map(|r| (r.offered_pps, r.delivered_pps, r.loss_ratio))
        .max_by(|x, y| x.2.total_cmp(&y.2))
        .unwrap_or((0.0, 0.0, 1.0))
}

/// One end's thread: sends (if `send` is given) and counts probes from `receive_from`
/// until it has all the other end's frames or the deadline passes.
fn run_end(
    endpoint: &mut Endpoint,
    send: Option<(&Traffic, [u8; 6])>,
    receive_from: Option<[u8; 6]>,
    [sent_here, sent_there]: [&AtomicU64; 2],
    deadline: Instant,
) -> Result<(Option<crate::traffic::Sent>, Received)> {
    let mut generator = send.map(|(traffic, src)| Generator::from_source(traffic, src));
    let mut received = Received {
        only_from: receive_from,
        ..Received::default()
    };
    let start = Instant::now();
    let drops_before = receive_from.map(|_| receive_drops(endpoint));
    let mut sent = None;
    loop {
        let mut queued = 0;
        if let Some(g) = generator.as_mut() {
            if g.running() {
                queued = g.step(endpoint);
            } else if sent.is_none() {
                let s = g.sent();
                sent_here.store(s.frames, Ordering::Release);
                sent = Some(s);
            } else if endpoint.unsent() > 0 {
                endpoint.flush();
            }
        }
        let took = if receive_from.is_some() {
            received.take(endpoint, 256)
        } else {
            0
        };
        // Bounded by the deadline: a sender whose frames never leave stops with it.
        let sending = generator.is_some() && (sent.is_none() || endpoint.unsent() > 0);
        let all_in =
            receive_from.is_none() || received.stats.frames >= sent_there.load(Ordering::Acquire);
        if (!sending && all_in) || Instant::now() >= deadline {
            break;
        }
        if queued == 0 && took == 0 {
            // Nothing to do this instant: let the kernel's softirq work, which carries
            // the frames into and out of the devices, have the CPU (on a machine with few
            // cores it may be waiting for this one).
            std::thread::yield_now();
        }
    }
    if sent.is_none() {
        if let Some(g) = &generator {
            let s = g.sent();
            sent_here.store(s.frames, Ordering::Release);
            sent = Some(s);
        }
    }
    received.seconds = start.elapsed().as_secs_f64();
    if let Some(before) = drops_before {
        received.sink_dropped = receive_drops(endpoint).saturating_sub(before);
    }
    Ok((sent, received))
}

/// Pins the calling thread to `core` and gives it the nice value `nice` with the
/// shortest scheduler slice, as the daemon gives its workers (each if given). A
/// generator and sink that share CPUs with workers at nice -20 need the same: at nice 0
/// their threads waited out the workers' passes, and the sink's socket dropped frames the
/// wire had delivered, which counted as the wire's loss.
pub fn place_thread(core: Option<usize>, nice: Option<i8>) -> Result<()> {
    if let Some(core) = core {
        core_affinity::set_for_current(core_affinity::CoreId { id: core });
    }
    if let Some(nice) = nice {
        xwire_fastpath::set_thread_nice(nice)
            .with_context(|| format!("run at nice {nice} (lowering it needs CAP_SYS_NICE)"))?;
    }
    Ok(())
}

/// Moves the calling thread into a network namespace: a name under /run/netns, or a path.
pub fn enter_netns(ns: &str) -> Result<()> {
    let path = if ns.contains('/') {
        ns.to_owned()
    } else {
        format!("/run/netns/{ns}")
    };
    let ns = xwire_netns::NetnsFd::open(Path::new(&path))?;
    xwire_netns::enter(ns.file().as_fd()).with_context(|| format!("enter {path}"))
}
