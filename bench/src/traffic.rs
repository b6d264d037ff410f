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
}

/// What a sink received.
#[derive(Debug)]
pub struct Received {
    pub stats: SinkStats,
    pub highest_seq: Option<u64>,
    pub seconds: f64,
}

fn open(iface: &str, max_frame: usize, options: PortOptions) -> Result<Endpoint> {
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
    if traffic.size < MIN_FRAME {
        bail!("--size must be at least {MIN_FRAME}");
    }
    let mut endpoint = open(iface, traffic.size, options)?;
    let mut probe = Probe::new(traffic.size, traffic.dst_mac, [0x02, 0x78, 0x77, 0, 0, 1]);
    let limit = traffic.count.unwrap_or(u64::MAX);
    let start = Instant::now();
    let mut seq = 0u64;
    while seq < limit && start.elapsed() < traffic.duration {
        let allowed = match traffic.rate {
            0 => u64::MAX,
            rate => (start.elapsed().as_secs_f64() * rate as f64) as u64 + 1,
        };
        let mut queued = 0;
        while queued < traffic.batch && seq < limit && seq < allowed {
            if !endpoint.queue(probe.stamp(seq, now_ns())) {
                break;
            }
            seq += 1;
            queued += 1;
        }
        endpoint.flush();
    }
    let seconds = start.elapsed().as_secs_f64().max(1e-9);
    // Let the last frames leave.
    for _ in 0..100 {
        endpoint.flush();
    }
    Ok(Sent {
        frames: seq,
        seconds,
    })
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
    let mut stats = SinkStats::default();
    let mut highest_seq = None;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed)
        && start.elapsed() < limit
        && count.is_none_or(|c| stats.frames < c)
    {
        endpoint.receive(256, |frame| {
            if let Some((seq, sent_ns)) = read_probe(frame) {
                stats.record(frame.len(), seq, sent_ns, now_ns());
                highest_seq = highest_seq.max(Some(seq));
            }
        });
    }
    Ok(Received {
        stats,
        highest_seq,
        seconds: start.elapsed().as_secs_f64(),
    })
}
