//! `xwire-perf local-fwd`: gen-ns -> device -> sink-ns on one node, the device being a
//! direct veth pair (the ceiling), the Linux bridge, DPDK testpmd, Open vSwitch's AF_XDP
//! datapath, or xwire's switch, all measured in one run with the same generator
//! (xwire-pktgen's, on AF_XDP, CPU 0) and the device on CPU 1.
//!
//! Three measurements:
//! - peak: full speed; delivered frames are the sink interface's rx_packets (the sink's
//!   stack drops them), so no user-space sink competes for a CPU, as in the anchors;
//! - paced: a given rate, with the generator and an AF_XDP sink in one thread on CPU 0
//!   (the generator waits between batches, so the sink costs it nothing), for latency;
//! - idle: the device's CPU with no traffic, then single frames each after a silence,
//!   for the latency of the first frame after idleness.

mod devices;

use std::time::Duration;

use anyhow::{bail, Result};
use xwire_bench::traffic::{self, PortOptions, Traffic, Wait};
use xwire_bench::trial::{End, Flow, Wire};

pub use crate::measure::{median_by, IdleRow, Row, SearchLength};
pub use devices::Device;

use crate::measure::{
    busy_while, lossfree_rows, on_cpu, probe_traffic, usage_while, veth_drops,
    wait_until_forwarding, LossfreeRow,
};
use crate::testbed::{Netns, Veth};

const GEN_CPU: usize = 0;
const DUT_CPU: usize = 1;

/// The namespaces of one measurement.
struct Hosts {
    gen: Netns,
    dut: Netns,
    sink: Netns,
}

impl Hosts {
    fn new() -> Result<Hosts> {
        Ok(Hosts {
            gen: Netns::new("lf-gen")?,
            dut: Netns::new("lf-dut")?,
            sink: Netns::new("lf-sink")?,
        })
    }
}

/// The wires of one measurement and the device between them. Field order matters: the
/// device stops before its interfaces go.
struct Bed<'a> {
    device: devices::Running,
    wires: (Veth<'a>, Option<Veth<'a>>),
    gen: &'a Netns,
    sink: &'a Netns,
    gen_if: String,
    sink_if: String,
}

impl<'a> Bed<'a> {
    fn new(hosts: &'a Hosts, device: Device, max_frame: usize) -> Result<Bed<'a>> {
        let Hosts { gen, dut, sink } = hosts;
        let (wires, running, gen_if, sink_if) = if device == Device::Direct {
            let wire = Veth::new(gen, sink)?;
            wire.set_up()?;
            let names = (wire.a_name().to_owned(), wire.b_name().to_owned());
            ((wire, None), devices::Running::Kernel, names.0, names.1)
        } else {
            let inbound = Veth::new(gen, dut)?;
            let outbound = Veth::new(dut, sink)?;
            for wire in [&inbound, &outbound] {
                wire.set_up()?;
                if max_frame > 1514 {
                    wire.set_mtu((max_frame - 14) as u32)?;
                }
            }
            let running = devices::start(
                device,
                dut,
                inbound.b_name(),
                outbound.a_name(),
                max_frame,
                DUT_CPU,
            )?;
            let names = (inbound.a_name().to_owned(), outbound.b_name().to_owned());
            ((inbound, Some(outbound)), running, names.0, names.1)
        };
        let bed = Bed {
            device: running,
            wires,
            gen,
            sink,
            gen_if,
            sink_if,
        };
        bed.wait_until_forwarding(device)?;
        Ok(bed)
    }

    /// Sends a frame now and then until one reaches the sink: the peers take a few
    /// seconds to attach to their interfaces.
    fn wait_until_forwarding(&self, device: Device) -> Result<()> {
        wait_until_forwarding(
            self.gen,
            &self.gen_if,
            self.sink,
            &self.sink_if,
            device.name(),
        )
    }

    /// Where frames went, for `--verbose` (stderr): every veth end's drops, and the
    /// device's own counters (xwire's).
    fn report(&self, what: &str) {
        let (inbound, outbound) = &self.wires;
        eprintln!(
            "{what}:\n{}  veths: {}",
            self.device.counters(),
            veth_drops(std::iter::once(inbound).chain(outbound))
        );
    }

    /// Runs `f` on a thread pinned to the generator's CPU, inside the generator's
    /// namespace.
    fn on_gen_cpu<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        Ok(on_cpu(self.gen, GEN_CPU, f)?)
    }
}

fn traffic(size: usize, seconds: f64, rate: u64) -> Traffic {
    probe_traffic(size, seconds, rate, [0xff; 6])
}

/// Full speed for `seconds`; delivered frames counted at the sink interface.
pub fn peak(device: Device, size: usize, seconds: f64) -> Result<Row> {
    let hosts = Hosts::new()?;
    let bed = Bed::new(&hosts, device, size)?;
    let before = bed.sink.link_stats(&bed.sink_if)?;
    let (sent, cpu_cores) = busy_while(DUT_CPU, || {
        bed.on_gen_cpu(|| {
            traffic::send(
                &bed.gen_if,
                &traffic(size, seconds, 0),
                PortOptions::default(),
            )
        })
    });
    let sent = sent??;
    // Frames still in the device arrive within this.
    std::thread::sleep(Duration::from_millis(200));
    let after = bed.sink.link_stats(&bed.sink_if)?;
    Ok(Row::peak(
        device.name().into(),
        size,
        sent,
        before,
        after,
        cpu_cores,
    ))
}

/// `rate` frames per second for `seconds`, received by a sink in the generator's thread,
/// which waits between frames as `wait` says (`Wait::Sleep` for the cost of a frame).
/// `verbose`: where frames went, on stderr (`Bed::report`, the sink socket's kernel
/// drops, and the most frames the generator owed at once).
pub fn paced(
    device: Device,
    size: usize,
    seconds: f64,
    (rate, wait): (u64, Wait),
    verbose: bool,
) -> Result<Row> {
    let hosts = Hosts::new()?;
    let bed = Bed::new(&hosts, device, size)?;
    let (result, usage) = usage_while(DUT_CPU, || {
        bed.on_gen_cpu(|| -> Result<_> {
            let mut sink = bed
                .sink
                .run(|| traffic::open(&bed.sink_if, size, PortOptions::default()))??;
            let mut gen = traffic::open(&bed.gen_if, size, PortOptions::default())?;
            let run = traffic::send_and_sink(
                &mut gen,
                &mut sink,
                &traffic(size, seconds, rate),
                Duration::from_millis(200),
                wait,
            )?;
            Ok((run, sink.kernel_drops()))
        })
    });
    let ((sent, received), sink_drops) = result??;
    if verbose {
        bed.report(&format!("{} {size} B at {rate} pps", device.name()));
        eprintln!(
            "  sink: {sink_drops:?}\n  generator: at most {} frames due at once ({:.3} s in)",
            sent.largest_backlog,
            sent.largest_backlog_at.as_secs_f64()
        );
    }
    let report = received.stats.report(size, sent.frames, sent.seconds);
    Ok(Row::paced(
        format!("{}@{rate}pps", device.name()),
        size,
        &report,
        usage,
    ))
}

/// The loss-free rate through the device, per flow, with trials of `length`: both
/// ends on the generator's CPU, the device on its own. `verbose`: where frames went over
/// the whole search, on stderr (`Bed::report`).
pub fn lossfree(
    device: Device,
    size: usize,
    length: SearchLength,
    flows: &[Flow],
    verbose: bool,
) -> Result<Vec<LossfreeRow>> {
    let hosts = Hosts::new()?;
    let bed = Bed::new(&hosts, device, size)?;
    let end = |ns: &Netns, iface: &str| End {
        iface: iface.to_owned(),
        netns: Some(ns.path().display().to_string()),
        core: Some(GEN_CPU),
        // Its own CPU, apart from the device's.
        nice: None,
        mac: None,
    };
    let mut wire = Wire::open(
        end(bed.gen, &bed.gen_if),
        end(bed.sink, &bed.sink_if),
        size,
        PortOptions::default(),
    )?;
    let rows = lossfree_rows(device.name(), &mut wire, size, length, flows)?;
    if verbose {
        bed.report(&format!(
            "{} {size} B, the whole loss-free search",
            device.name()
        ));
    }
    Ok(rows)
}

/// The device's CPU over `seconds` of silence, then `probes` single frames, each after
/// `silence` with no traffic.
pub fn idle(device: Device, seconds: f64, silence: Duration, probes: u64) -> Result<IdleRow> {
    let hosts = Hosts::new()?;
    let bed = Bed::new(&hosts, device, 64)?;
    // Let the device settle into whatever it does when nothing comes.
    std::thread::sleep(Duration::from_millis(500));
    let ((), idle_cpu_cores) = busy_while(DUT_CPU, || {
        std::thread::sleep(Duration::from_secs_f64(seconds))
    });
    let received = bed.on_gen_cpu(|| -> Result<_> {
        let mut sink = bed
            .sink
            .run(|| traffic::open(&bed.sink_if, 64, PortOptions::default()))??;
        let mut gen = traffic::open(&bed.gen_if, 64, PortOptions::default())?;
        traffic::idle_probes(
            &mut gen,
            &mut sink,
            64,
            silence,
            probes,
            Duration::from_secs(1),
        )
    })??;
    let report = received.stats.report(64, probes, received.seconds);
    if report.delivered < probes {
        bail!(
            "{}: {} of {probes} idle probes arrived",
            device.name(),
            report.delivered
        );
    }
    Ok(IdleRow {
        name: device.name().into(),
        idle_cpu_cores,
        silence_ms: silence.as_millis() as u64,
        first_frame_p50_us: report.p50_us,
        first_frame_p99_us: report.p99_us,
        first_frame_max_us: report.max_us,
        probes,
    })
}

/// The machine's floor for the first frame after idleness: how long a thread asleep on
/// the DUT CPU takes to run again once a thread on the generator's CPU wakes it (a pipe
/// write). A device that sleeps when idle cannot forward sooner than this; on a virtual
/// machine it is the host's time to resume a halted virtual CPU.
pub fn wake_floor(silence: Duration, probes: u64) -> Result<IdleRow> {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    let (mut writer, mut reader) = UnixStream::pair()?;
    let stats = std::thread::scope(|s| -> Result<_> {
        let sleeper = s.spawn(move || -> Result<_> {
            core_affinity::set_for_current(core_affinity::CoreId { id: DUT_CPU });
            let mut stats = xwire_bench::stats::SinkStats::default();
            let mut stamp = [0u8; 8];
            for seq in 0..probes {
                reader.read_exact(&mut stamp)?;
                let now = xwire_bench::probe::now_ns();
                stats.record(8, seq, u64::from_ne_bytes(stamp), now);
            }
            Ok(stats)
        });
        core_affinity::set_for_current(core_affinity::CoreId { id: GEN_CPU });
        for _ in 0..probes {
            std::thread::sleep(silence);
            writer.write_all(&xwire_bench::probe::now_ns().to_ne_bytes())?;
        }
        sleeper.join().expect("sleeper thread")
    })?;
    let report = stats.report(8, probes, 1.0);
    Ok(IdleRow {
        name: "wake-floor(cpu0->cpu1)".into(),
        idle_cpu_cores: 0.0,
        silence_ms: silence.as_millis() as u64,
        first_frame_p50_us: report.p50_us,
        first_frame_p99_us: report.p99_us,
        first_frame_max_us: report.max_us,
        probes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bridge_runs_on_the_devices_cpu_both_ways() {
        let hosts = Hosts::new().unwrap();
        let bed = Bed::new(&hosts, Device::Bridge, 1514).unwrap();
        let (inbound, outbound) = (&bed.wires.0, bed.wires.1.as_ref().unwrap());
        for ifname in [inbound.b_name(), outbound.a_name()] {
            assert_eq!(
                hosts.dut.receive_cpus(ifname).unwrap(),
                1 << DUT_CPU,
                "{ifname}"
            );
        }
    }
}
