//! The generator and sink loops of `xwire-pktgen`, as a library so that the perf
//! scenarios drive exactly the same code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xwire_fastpath::{Endpoint, PortChoice, XdpMode};

use crate::probe::{now_ns, read_probe, Probe, MIN_FRAME};
use crate::stats::SinkStats;

/// How a port is opened.
#[derive(Debug, Clone, Copy, Default)]
pub struct PortOptions {
    pub af_packet: bool,
    pub generic: bool,
    /// Say on stderr which kind of port was opened.
    pub verbose: bool,
}

/// How long a sender goes on flushing after its last frame. The kernel sends a bounded
/// batch per kick (32 frames in copy mode), so what is still queued when the generator
/// stops leaves only with more kicks: at full rate an AF_XDP sender's TX ring holds
/// thousands, and the 100 kicks a sender made before sent 3,200 of 6,112, so every
/// full-rate trial counted the same 2,912 frames, never sent, as lost.
pub(crate) const LAST_FLUSHES: Duration = Duration::from_millis(300);

/// What to send.
#[derive(Debug, Clone)]
pub struct Traffic {
    pub size: usize,
    /// Frames per second; 0 for as fast as possible.
    pub rate: u64,
    pub count: Option<u64>,
    pub duration: Duration,
    pub dst_mac: [u8; 6],
    pub batch: usize,
}

/// What a generator sent.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub frames: u64,
    pub seconds: f64,
    /// The most frames that were due at once: a paced generator held off its CPU sends
    /// what it owes in one burst when it runs again, and a device that loses frames at
    /// a rate it otherwise carries may be losing that burst.
    pub largest_backlog: u64,
    /// When that was, from the start.
    pub largest_backlog_at: Duration,
}

/// What a sink received.
#[derive(Debug, Default)]
pub struct Received {
    pub stats: SinkStats,
    pub highest_seq: Option<u64>,
    pub seconds: f64,
    /// Frames this end's own socket dropped on receive while it ran (see
    /// `Report::sink_dropped`).
    pub sink_dropped: u64,
    /// Count only probes with this source address (a trial's own, not an earlier one's
    /// stragglers); `None` counts every probe.
    pub(crate) only_from: Option<[u8; 6]>,
}

/// Opens a traffic endpoint on `iface`, in the calling thread's netns.
pub fn open(iface: &str, max_frame: usize, options: PortOptions) -> Result<Endpoint> {
    let choice = if options.af_packet {
        PortChoice::AfPacket
    } else {
        PortChoice::Auto
    };
    let mode = options.generic.then_some(XdpMode::Generic);
    let endpoint = Endpoint::open(iface, max_frame, 2048, choice, mode)
        .with_context(|| format!("open {iface}"))?;
    if options.verbose {
        eprintln!("{iface}: {}", endpoint.kind().name());
    }
    Ok(endpoint)
}

/// Sends probe frames on `iface` (in the calling thread's netns) until the count or the
/// duration is reached, paced to the rate if one is given.
pub fn send(iface: &str, traffic: &Traffic, options: PortOptions) -> Result<Sent> {
    check_size(traffic.size)?;
    let mut endpoint = open(iface, traffic.size, options)?;
    let mut gen = Generator::new(traffic);
    while gen.running() {
        gen.step(&mut endpoint);
    }
    let sent = gen.sent();
    let until = Instant::now() + LAST_FLUSHES;
    while endpoint.unsent() > 0 && Instant::now() < until {
        endpoint.flush();
    }
    Ok(sent)
}

/// Receives probe frames on `iface` until `stop` is set, the count is reached or the
/// time limit passes.
pub fn sink(
    iface: &str,
    max_frame: usize,
    options: PortOptions,
    count: Option<u64>,
    limit: Duration,
    stop: &AtomicBool,
) -> Result<Received> {
    let mut endpoint = open(iface, max_frame.max(MIN_FRAME), options)?;
    let mut received = Received::default();
    let start = Instant::now();
    let drops_before = receive_drops(&mut endpoint);
    while !stop.load(Ordering::Relaxed)
        && start.elapsed() < limit
        && count.is_none_or(|c| received.stats.frames < c)
    {
        received.take(&mut endpoint, 256);
    }
    received.seconds = start.elapsed().as_secs_f64();
    received.sink_dropped = receive_drops(&mut endpoint).saturating_sub(drops_before);
    Ok(received)
}

/// What the endpoint's socket has dropped on receive since it was opened (0 where the
/// kernel does not say).
pub(crate) fn receive_drops(endpoint: &mut Endpoint) -> u64 {
    endpoint
        .kernel_drops()
        .map_or(0, |d| d.total() - d.tx_invalid)
}

impl Received {
    /// Takes up to `budget` frames from `endpoint` and records the probes among them.
    pub(crate) fn take(&mut self, endpoint: &mut Endpoint, budget: usize) -> usize {
        let Received {
            stats,
            highest_seq,
            only_from,
            ..
        } = self;
        // The kernel's receive time where the port has one: a sink thread that was
        // not running when the frame came does not add to its latency.
        endpoint.receive_timed(budget, |frame, arrived| {
            if only_from.is_some_and(|src| frame.get(6..12) != Some(&src[..])) {
                return;
            }
            if let Some((seq, sent_ns)) = read_probe(frame) {
                stats.record(frame.len(), seq, sent_ns, arrived.unwrap_or_else(now_ns));
                *highest_seq = (*highest_seq).max(Some(seq));
            }
        })
    }
}

/// Probe frames, numbered and stamped, queued as the rate allows.
pub(crate) struct Generator<'a> {
    traffic: &'a Traffic,
    probe: Probe,
    limit: u64,
    start: Instant,
    seq: u64,
    largest_backlog: u64,
    largest_backlog_at: Duration,
}

impl<'a> Generator<'a> {
    fn new(traffic: &'a Traffic) -> Generator<'a> {
        Generator::from_source(traffic, [0x02, 0x78, 0x77, 0, 0, 1])
    }

    pub(crate) fn from_source(traffic: &'a Traffic, src: [u8; 6]) -> Generator<'a> {
        Generator {
            traffic,
            probe: Probe::new(traffic.size, traffic.dst_mac, src),
            limit: traffic.count.unwrap_or(u64::MAX),
            start: Instant::now(),
            seq: 0,
            largest_backlog: 0,
            largest_backlog_at: Duration::ZERO,
        }
    }

    pub(crate) fn running(&self) -> bool {
        self.seq < self.limit && self.start.elapsed() < self.traffic.duration
    }

    /// Queues the frames that are due (at most a batch) and flushes; returns how many.
    pub(crate) fn step(&mut self, endpoint: &mut Endpoint) -> usize {
        let allowed = match self.traffic.rate {
            0 => u64::MAX,
            rate => {
                let elapsed = self.start.elapsed();
                let allowed = (elapsed.as_secs_f64() * rate as f64) as u64 + 1;
                let due = allowed.min(self.limit).saturating_sub(self.seq);
                if due > self.largest_backlog {
                    self.largest_backlog = due;
                    self.largest_backlog_at = elapsed;
                }
                allowed
            }
        };
        let mut queued = 0;
        while queued < self.traffic.batch && self.seq < self.limit && self.seq < allowed {
            if !endpoint.queue(self.probe.stamp(self.seq, now_ns())) {
                break;
            }
            self.seq += 1;
            queued += 1;
        }
        endpoint.flush();
        queued
    }

    pub(crate) fn sent(&self) -> Sent {
        Sent {
            frames: self.seq,
            seconds: self.start.elapsed().as_secs_f64().max(1e-9),
            largest_backlog: self.largest_backlog,
            largest_backlog_at: self.largest_backlog_at,
        }
    }
}

pub(crate) fn check_size(size: usize) -> Result<()> {
    if size < MIN_FRAME {
        bail!("--size must be at least {MIN_FRAME}");
    }
    Ok(())
}

/// What a one-thread generator and sink does when nothing is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Yields the CPU and comes back at once: the lowest latency, and a CPU kept busy.
    Yield,
    /// Sleeps a moment: frames wait up to that long in the sink's ring, and the loop
    /// costs next to no CPU, so that what a run costs the machine is the device's.
    Sleep,
}

/// How long `Wait::Sleep` sleeps: at 50,000 frames per second, a few frames at a time.
const IDLE_SLEEP: Duration = Duration::from_micros(50);

impl Wait {
    fn idle(self) {
        match self {
            // Let the kernel's softirq thread, which carries the generator's frames
            // into the device, have the CPU. Spinning here would leave it waiting for
            // the end of a scheduler slice (milliseconds).
            Wait::Yield => std::thread::yield_now(),
            Wait::Sleep => std::thread::sleep(IDLE_SLEEP),
        }
    }
}

/// Sends paced traffic from `gen` and receives it on `sink` in one thread, so that on a
/// machine with few cores the sink does not compete with the generator for a CPU (the
/// generator waits between batches anyway). Latency is then the device's plus at most one
/// batch interval of the loop (and the sleep, with `Wait::Sleep`). Needs a rate: at full
/// speed the sink would starve.
pub fn send_and_sink(
    gen: &mut Endpoint,
    sink: &mut Endpoint,
    traffic: &Traffic,
    drain: Duration,
    wait: Wait,
) -> Result<(Sent, Received)> {
    check_size(traffic.size)?;
    if traffic.rate == 0 {
        bail!("one-thread send and sink needs a rate");
    }
    let mut received = Received::default();
    let mut generator = Generator::new(traffic);
    while generator.running() {
        let queued = generator.step(gen);
        if received.take(sink, 256) == 0 && queued == 0 {
            wait.idle();
        }
    }
    let sent = generator.sent();
    let drain_start = Instant::now();
    while received.stats.frames < sent.frames && drain_start.elapsed() < drain {
        gen.flush();
        if received.take(sink, 256) == 0 {
            // The frames still on their way may need this CPU's softirq.
            wait.idle();
        }
    }
    received.seconds = generator.start.elapsed().as_secs_f64();
    Ok((sent, received))
}

/// The one-way latency of single frames, each sent after `gap` of silence: what a device
/// that sleeps when idle costs the first frame. `timeout` bounds the wait for each.
pub fn idle_probes(
    gen: &mut Endpoint,
    sink: &mut Endpoint,
    size: usize,
    gap: Duration,
    count: u64,
    timeout: Duration,
) -> Result<Received> {
    check_size(size)?;
    let mut probe = Probe::new(size, [0xff; 6], [0x02, 0x78, 0x77, 0, 0, 1]);
    let mut received = Received::default();
    let start = Instant::now();
    for seq in 0..count {
        // Drain anything stray, then stay silent for the gap.
        received.take(sink, 256);
        std::thread::sleep(gap);
        if !gen.queue(probe.stamp(seq, now_ns())) {
            bail!("no buffer for an idle probe");
        }
        gen.flush();
        let sent_at = Instant::now();
        while received.stats.frames <= seq && sent_at.elapsed() < timeout {
            gen.flush();
            received.take(sink, 1);
        }
    }
    received.seconds = start.elapsed().as_secs_f64();
    Ok(received)
}
