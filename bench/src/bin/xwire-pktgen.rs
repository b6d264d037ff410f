//! xwire-pktgen: a traffic generator and sink over AF_XDP (AF_PACKET as the fall-back).
//! Every frame carries a sequence number and its send time; the sink reports pps, Gbps,
//! loss, reordering and latency percentiles.
//!
//!   xwire-pktgen run  --tx-netns A --tx-iface eth1 --rx-netns B --rx-iface eth1 --size 64 --seconds 5
//!   xwire-pktgen run  ... --one-thread --tx-core 0 --rate 300000      (latency on few cores)
//!   xwire-pktgen send --netns A --iface eth1 --size 1514 --rate 100000 --count 1000000
//!   xwire-pktgen sink --netns B --iface eth1 --seconds 10 --json
//!   xwire-pktgen lossfree --a-netns A --a-iface eth1 --b-netns B --b-iface eth1 --size 1514

#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};
use xwire_bench::lossfree::Criteria;
use xwire_bench::stats::Report;
use xwire_bench::traffic::{self, sink, PortOptions, Sent};
use xwire_bench::trial;

#[derive(Parser)]
#[command(
    name = "xwire-pktgen",
    version,
    about = "Traffic generator and sink over AF_XDP / AF_PACKET"
)]
struct Cli {
    #[command(subcommand)]
    command: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Send from one interface and receive on another, in one process.
    Run(RunArgs),
    /// Send only.
    Send(SendArgs),
    /// Receive only.
    Sink(SinkArgs),
    /// Find the highest rate a wire carries with loss at or below --max-loss, per
    /// direction: one way, the other, and both at once (RFC 2544's throughput search).
    Lossfree(LossfreeArgs),
    /// One trial at a fixed rate between a wire's two ends, one way or both at once, as
    /// the loss-free search runs its trials: each direction's delivery, loss and latency.
    Trial(TrialArgs),
}

#[derive(Args, Clone)]
struct Port {
    /// Interface to use.
    #[arg(long)]
    iface: String,
    /// Network namespace (a name under /run/netns, or a path) to open the port in.
    #[arg(long)]
    netns: Option<String>,
}

#[derive(Args, Clone)]
struct Traffic {
    /// Frame size in bytes, without FCS (at least 34).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Frames per second; 0 sends as fast as possible.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Stop after this many frames.
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this many seconds (default 5 unless --count is given).
    #[arg(long)]
    seconds: Option<f64>,
    /// Destination MAC (default broadcast).
    #[arg(long, value_parser = parse_mac, default_value = "ff:ff:ff:ff:ff:ff")]
    dst_mac: [u8; 6],
    /// Frames queued per flush.
    #[arg(long, default_value_t = 64)]
    batch: usize,
}

#[derive(Args, Clone)]
struct Io {
    /// Use AF_PACKET instead of AF_XDP.
    #[arg(long)]
    af_packet: bool,
    /// Force generic XDP mode.
    #[arg(long)]
    generic: bool,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// Run the traffic threads at this nice value, with the shortest scheduler slice, as
    /// xwired runs its workers (-20 by default). On CPUs shared with workers, a sink at
    /// nice 0 waits out their passes and its socket drops what the wire delivered.
    #[arg(long, allow_hyphen_values = true, value_parser = clap::value_parser!(i8).range(-20..=19))]
    nice: Option<i8>,
}

#[derive(Args)]
struct RunArgs {
    /// The interface the generator sends on.
    #[arg(long)]
    tx_iface: String,
    /// The network namespace of --tx-iface (a name under /run/netns or a path; this
    /// one's by default).
    #[arg(long)]
    tx_netns: Option<String>,
    /// The interface the sink receives on.
    #[arg(long)]
    rx_iface: String,
    /// The network namespace of --rx-iface (as --tx-netns).
    #[arg(long)]
    rx_netns: Option<String>,
    /// Pin the sender to this CPU.
    #[arg(long)]
    tx_core: Option<usize>,
    /// Pin the sink to this CPU.
    #[arg(long)]
    rx_core: Option<usize>,
    /// Send and receive in one thread (on --tx-core), so that the sink takes no CPU from
    /// the generator: for latency on machines with few cores. Needs --rate.
    #[arg(long)]
    one_thread: bool,
    #[command(flatten)]
    traffic: Traffic,
    #[command(flatten)]
    io: Io,
}

#[derive(Args)]
struct SendArgs {
    #[command(flatten)]
    port: Port,
    #[command(flatten)]
    traffic: Traffic,
    #[command(flatten)]
    io: Io,
}

#[derive(Args)]
struct SinkArgs {
    #[command(flatten)]
    port: Port,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Stop after this many frames.
    #[arg(long)]
    count: Option<u64>,
    /// Largest frame expected.
    #[arg(long, default_value_t = 1514)]
    size: usize,
    #[command(flatten)]
    io: Io,
}

/// The two ends of a wire that `lossfree` and `trial` send between.
#[derive(Args)]
struct WireEnds {
    /// The interface at the wire's end A.
    #[arg(long)]
    a_iface: String,
    /// The network namespace of --a-iface (a name under /run/netns or a path).
    #[arg(long)]
    a_netns: Option<String>,
    /// The interface at the wire's end B.
    #[arg(long)]
    b_iface: String,
    /// The network namespace of --b-iface.
    #[arg(long)]
    b_netns: Option<String>,
    /// Pin end A's thread to this CPU.
    #[arg(long)]
    a_core: Option<usize>,
    /// Pin end B's thread to this CPU.
    #[arg(long)]
    b_core: Option<usize>,
}

impl WireEnds {
    /// Opens both ends for frames of up to `size` bytes; their threads run at `io.nice`.
    fn open(&self, size: usize, io: &Io) -> Result<trial::Wire> {
        let end = |iface: &str, netns: &Option<String>, core| trial::End {
            iface: iface.to_owned(),
            netns: netns.clone(),
            core,
            nice: io.nice,
            mac: None,
        };
        trial::Wire::open(
            end(&self.a_iface, &self.a_netns, self.a_core),
            end(&self.b_iface, &self.b_netns, self.b_core),
            size,
            options(io),
        )
    }
}

#[derive(Args)]
struct LossfreeArgs {
    #[command(flatten)]
    ends: WireEnds,
    /// Frame size in bytes, without FCS (at least 34).
    #[arg(long, default_value_t = 64)]
    size: usize,
    /// Seconds each trial sends for.
    #[arg(long, default_value_t = 1.0)]
    trial_seconds: f64,
    /// Directions to search, in order: a-to-b, b-to-a, both.
    #[arg(long, value_delimiter = ',', default_values = ["a-to-b", "b-to-a", "both"])]
    flows: Vec<trial::Flow>,
    /// The highest loss a passing trial may have (0.001 is 0.1%).
    #[arg(long, default_value_t = 0.001)]
    max_loss: f64,
    /// Stop when the highest pass is within this share of the lowest failure.
    #[arg(long, default_value_t = 0.03)]
    resolution: f64,
    /// Short trials per direction after the full-rate one, at most (tries again included).
    #[arg(long, default_value_t = 10)]
    max_trials: usize,
    /// Times a failed short trial is tried again at the same rate before the rate counts
    /// as failed (one stall of a shared machine does not decide a step).
    #[arg(long, default_value_t = 1)]
    retries: usize,
    /// Seconds of the trial that confirms the rate the short trials found (the loss-free
    /// rate holds for this long); 0 lets the short trials decide.
    #[arg(long, default_value_t = 10.0)]
    confirm_seconds: f64,
    /// Print every trial of each search under its direction (the JSON report always
    /// carries them, as `search`).
    #[arg(long)]
    show_trials: bool,
    /// Destination MAC (default broadcast).
    #[arg(long, value_parser = parse_mac, default_value = "ff:ff:ff:ff:ff:ff")]
    dst_mac: [u8; 6],
    #[command(flatten)]
    io: Io,
}

#[derive(Args)]
// The shared --seconds default (5 s, or none with --count) is not this one's.
#[command(mut_arg("seconds", |a| a.help(
    "Stop after this many seconds (10 by default, with --count too: a trial waits for \
     what it sent until then)"
)))]
struct TrialArgs {
    #[command(flatten)]
    ends: WireEnds,
    /// Which way frames go: a-to-b, b-to-a, or both (the same rate each way).
    #[arg(long, default_value = "both")]
    flow: trial::Flow,
    #[command(flatten)]
    traffic: Traffic,
    #[command(flatten)]
    io: Io,
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    s.parse::<macaddr::MacAddr6>()
        .map(|m| m.into_array())
        .map_err(|e| format!("{s}: {e}"))
}

/// An error is one line on standard error and exit status 1, whatever RUST_BACKTRACE
/// says.
fn main() -> std::process::ExitCode {
    // `cargo xtask docs`: man pages and completions (see the xwire-cli-docs crate).
    xwire_cli_docs::generate_if_asked(<Cli as clap::CommandFactory>::command);
    match dispatch() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xwire-pktgen: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn dispatch() -> Result<()> {
    xwire_logs::init("warn");
    match Cli::parse().command {
        Mode::Run(args) => run(args),
        Mode::Lossfree(args) => lossfree(args),
        Mode::Trial(args) => fixed_trial(args),
        Mode::Send(args) => {
            let sent = on_port(&args.port, None, args.io.nice, || {
                traffic::send(&args.port.iface, &traffic(&args.traffic), options(&args.io))
            })?;
            print(
                &args.io,
                &format!("sent {} frames in {:.3} s", sent.frames, sent.seconds),
                &summary(&sent),
            )
        }
        Mode::Sink(args) => {
            let stop = AtomicBool::new(false);
            let got = on_port(&args.port, None, args.io.nice, || {
                sink(
                    &args.port.iface,
                    args.size,
                    options(&args.io),
                    args.count,
                    Duration::from_secs_f64(args.seconds),
                    &stop,
                )
            })?;
            // Without the sender's count, the highest sequence number seen stands in for it.
            let offered = got.highest_seq.map_or(0, |s| s + 1);
            let report = got.stats.report(args.size, offered, got.seconds);
            print(&args.io, &table(&report), &report)
        }
    }
}

fn lossfree(args: LossfreeArgs) -> Result<()> {
    if !(0.0..1.0).contains(&args.max_loss) || !(0.0..1.0).contains(&args.resolution) {
        bail!("--max-loss and --resolution must be at least 0 and below 1");
    }
    let mut wire = args.ends.open(args.size, &args.io)?;
    let traffic = traffic::Traffic {
        size: args.size,
        rate: 0,
        count: None,
        duration: Duration::from_secs_f64(args.trial_seconds),
        dst_mac: args.dst_mac,
        batch: 64,
    };
    let criteria = Criteria {
        max_loss: args.max_loss,
        resolution: args.resolution,
        max_trials: args.max_trials,
        retries: args.retries,
        confirm_seconds: args.confirm_seconds,
        ..Criteria::default()
    };
    let mut directions = Vec::new();
    for &flow in &args.flows {
        directions.extend(wire.lossfree(flow, &traffic, criteria)?.directions());
    }
    let mut text = format!(
        "loss-free rate (loss <= {}%), {} B frames\n",
        args.max_loss * 100.0,
        args.size
    );
    for d in &directions {
        text.push_str(&format!(
            "{:<5} {:<8} {:>10.0} pps {:>7.3} Gbps  p99 {:>8.1} us   full rate: {:>10.0} pps, loss {:.2}% ({} at the sink)  ({} trials)\n",
            d.direction,
            if d.at_once { "at once" } else { "alone" },
            d.lossfree_pps,
            d.lossfree_gbps,
            d.p99_us.unwrap_or(f64::NAN),
            d.peak_delivered_pps,
            d.peak_loss_ratio * 100.0,
            d.peak_sink_dropped,
            d.trials,
        ));
        if args.show_trials {
            for line in d.search_lines() {
                text.push_str(&format!("      {line}\n"));
            }
        }
    }
    let report = serde_json::json!({
        "frame_bytes": args.size,
        "criteria": criteria,
        "ports": wire.kinds(),
        "directions": directions,
    });
    print(&args.io, text.trim_end(), &report)
}

/// How long `trial` sends (and waits for what it sent) unless --seconds says.
const TRIAL_SECONDS: f64 = 10.0;

fn fixed_trial(args: TrialArgs) -> Result<()> {
    let mut wire = args.ends.open(args.traffic.size, &args.io)?;
    let mut traffic = traffic(&args.traffic);
    if args.traffic.seconds.is_none() {
        // Also with --count: the trial waits for the frames of both ways until then, and
        // a frame lost on the wire must not hold it for the hour `run` allows.
        traffic.duration = Duration::from_secs_f64(TRIAL_SECONDS);
    }
    let [a_to_b, b_to_a] = wire.trial(args.flow, &traffic)?;
    let mut text = String::new();
    for (name, report) in [("a->b", &a_to_b), ("b->a", &b_to_a)] {
        if let Some(r) = report {
            text.push_str(&format!("{name}  {}\n", table(r).replace('\n', "\n      ")));
        }
    }
    let report = serde_json::json!({ "flow": args.flow, "a_to_b": a_to_b, "b_to_a": b_to_a });
    print(&args.io, text.trim_end(), &report)
}

fn run(args: RunArgs) -> Result<()> {
    if args.one_thread {
        return run_one_thread(&args);
    }
    let stop = AtomicBool::new(false);
    let tx_port = Port {
        iface: args.tx_iface.clone(),
        netns: args.tx_netns.clone(),
    };
    let rx_port = Port {
        iface: args.rx_iface.clone(),
        netns: args.rx_netns.clone(),
    };
    let (sent, got) = std::thread::scope(|s| {
        let sink_thread = s.spawn(|| {
            on_port(&rx_port, args.rx_core, args.io.nice, || {
                sink(
                    &rx_port.iface,
                    args.traffic.size,
                    options(&args.io),
                    None,
                    Duration::from_secs(3600),
                    &stop,
                )
            })
        });
        // Give the sink's rings time to fill before the first frame.
        std::thread::sleep(Duration::from_millis(200));
        let sent = on_port(&tx_port, args.tx_core, args.io.nice, || {
            traffic::send(&tx_port.iface, &traffic(&args.traffic), options(&args.io))
        });
        // Frames still in flight arrive within this drain time.
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        (sent, sink_thread.join().expect("sink thread"))
    });
    let (sent, got) = (sent?, got?);
    let report = Report {
        sink_dropped: got.sink_dropped,
        ..got
            .stats
            .report(args.traffic.size, sent.frames, sent.seconds)
    };
    print(&args.io, &table(&report), &report)
}

fn run_one_thread(args: &RunArgs) -> Result<()> {
    let size = args.traffic.size;
    let (sent, got) = on_port(
        &Port {
            iface: args.rx_iface.clone(),
            netns: args.rx_netns.clone(),
        },
        args.tx_core,
        args.io.nice,
        || {
            let mut sink = traffic::open(&args.rx_iface, size, options(&args.io))?;
            if let Some(ns) = &args.tx_netns {
                trial::enter_netns(ns)?;
            }
            let mut gen = traffic::open(&args.tx_iface, size, options(&args.io))?;
            traffic::send_and_sink(
                &mut gen,
                &mut sink,
                &traffic(&args.traffic),
                Duration::from_millis(300),
                traffic::Wait::Yield,
            )
        },
    )?;
    let report = got.stats.report(size, sent.frames, sent.seconds);
    print(&args.io, &table(&report), &report)
}

/// Runs `f` on a thread inside the port's namespace (and on `core`, at `nice`, if given).
fn on_port<T: Send>(
    port: &Port,
    core: Option<usize>,
    nice: Option<i8>,
    f: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            if let Some(ns) = &port.netns {
                trial::enter_netns(ns)?;
            }
            trial::place_thread(core, nice)?;
            f()
        })
        .join()
        .unwrap_or_else(|_| bail!("worker thread panicked"))
    })
}

fn options(io: &Io) -> PortOptions {
    PortOptions {
        af_packet: io.af_packet,
        generic: io.generic,
        verbose: !io.json,
    }
}

fn traffic(t: &Traffic) -> traffic::Traffic {
    let default = if t.count.is_some() { 3600.0 } else { 5.0 };
    traffic::Traffic {
        size: t.size,
        rate: t.rate,
        count: t.count,
        duration: Duration::from_secs_f64(t.seconds.unwrap_or(default)),
        dst_mac: t.dst_mac,
        batch: t.batch.max(1),
    }
}

fn summary(sent: &Sent) -> serde_json::Value {
    serde_json::json!({ "sent": sent.frames, "seconds": sent.seconds, "pps": sent.frames as f64 / sent.seconds })
}

fn table(r: &Report) -> String {
    format!(
        "frame {} B  offered {} ({:.0} pps)  delivered {} ({:.0} pps, {:.3} Gbps)  loss {:.4}% ({} dropped by the sink's socket)  reordered {}\n\
         latency us: p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
        r.frame_bytes,
        r.offered,
        r.offered_pps,
        r.delivered,
        r.delivered_pps,
        r.gbps,
        r.loss_ratio * 100.0,
        r.sink_dropped,
        r.reordered,
        r.p50_us,
        r.p99_us,
        r.p999_us,
        r.max_us
    )
}

fn print<T: serde::Serialize>(io: &Io, text: &str, value: &T) -> Result<()> {
    if io.json {
        println!("{}", serde_json::to_string(value)?);
    } else {
        println!("{text}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_argument_has_help_and_the_version_names_the_binary() {
        xwire_testbed::cli::assert_explains_itself(&super::Cli::command(), "xwire-pktgen");
    }
}
