//! `xwire-perf local-fwd`: gen-ns -> device -> sink-ns, with the device being a direct
//! veth pair (the ceiling), a Linux bridge, or the xwire switch, all measured in one run
//! with the same generator (xwire-pktgen's, on AF_XDP, CPU 0) and the device on CPU 1.
//!
//! As in the anchor scripts, delivered frames are the sink interface's rx_packets (the
//! sink's stack drops them), so no user-space sink competes for a CPU. With `--latency`,
//! a second pass at half of xwire's delivered rate adds a pktgen sink; on a 2-core machine
//! it shares CPU 0 with the generator, so its figures include that queueing (work to do:
//! a sink that does not compete, such as reading the stamps in the device's own worker).

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::Result;
use serde::Serialize;
use xwire_bench::traffic::{self, PortOptions, Traffic};
use xwire_fastpath::{PortChoice, Worker, WorkerConfig};

use crate::testbed::{Netns, Veth};

const GEN_CPU: usize = 0;
const DUT_CPU: usize = 1;

/// The device under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    Direct,
    Bridge,
    Xwire,
}

impl Device {
    pub fn name(self) -> &'static str {
        match self {
            Device::Direct => "direct-veth",
            Device::Bridge => "linux-bridge",
            Device::Xwire => "xwire",
        }
    }
}

/// One measurement, in the fields the issue names.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub name: String,
    pub frame_bytes: usize,
    pub offered_pps: f64,
    pub delivered_pps: f64,
    pub gbps: f64,
    pub loss_ratio: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub cpu_cores: f64,
}

/// The namespaces of one measurement; the generator's and the sink's interfaces.
struct Bed {
    gen: Netns,
    dut: Netns,
    sink: Netns,
}

/// Busy and total jiffies of one CPU, from /proc/stat.
fn cpu_ticks(cpu: usize) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat
        .lines()
        .find(|l| l.starts_with(&format!("cpu{cpu} ")))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = v.get(3)? + v.get(4)?;
    let total: u64 = v.iter().take(8).sum();
    Some((total - idle, total))
}

/// Measures `device` at `size` for `seconds`: full speed, or paced to `rate` with
/// latency taken by a sink.
pub fn measure(device: Device, size: usize, seconds: f64, rate: Option<u64>) -> Result<Row> {
    let bed = Bed {
        gen: Netns::new("lf-gen")?,
        dut: Netns::new("lf-dut")?,
        sink: Netns::new("lf-sink")?,
    };
    // Direct: one veth gen<->sink. Others: gen<->dut and dut<->sink.
    let (in_wire, out_wire);
    let (gen_if, sink_if);
    let mut _worker = None;
    match device {
        Device::Direct => {
            in_wire = Veth::new(&bed.gen, &bed.sink)?;
            in_wire.set_up()?;
            out_wire = None;
            gen_if = in_wire.a_name().to_owned();
            sink_if = in_wire.b_name().to_owned();
        }
        Device::Bridge | Device::Xwire => {
            in_wire = Veth::new(&bed.gen, &bed.dut)?;
            let out = Veth::new(&bed.dut, &bed.sink)?;
            in_wire.set_up()?;
            out.set_up()?;
            gen_if = in_wire.a_name().to_owned();
            sink_if = out.b_name().to_owned();
            if device == Device::Bridge {
                bed.dut
                    .add_bridge("br0", &[in_wire.b_name(), out.a_name()])?;
                // The bridge's softirq work happens on the receiving CPU: steer it to the
                // device's CPU, as the anchor's bridge variant does.
                bed.dut.run(|| {
                    let path = format!("/sys/class/net/{}/queues/rx-0/rps_cpus", in_wire.b_name());
                    let _ = std::fs::write(path, format!("{:x}", 1 << DUT_CPU));
                })?;
            } else {
                let config = WorkerConfig {
                    core: Some(DUT_CPU),
                    busy_poll: true,
                    ports: PortChoice::AfXdp,
                    ..Default::default()
                };
                let worker = bed.dut.run(|| Worker::spawn(config))??;
                let a = worker.add_port(in_wire.b_name(), size.max(1514))?;
                let b = worker.add_port(out.a_name(), size.max(1514))?;
                worker.add_link(1, a.id, b.id)?;
                _worker = Some(worker);
            }
            out_wire = Some(out);
        }
    }
    let traffic = Traffic {
        size,
        rate: rate.unwrap_or(0),
        count: None,
        duration: Duration::from_secs_f64(seconds),
        dst_mac: [0xff; 6],
        batch: 64,
    };
    let before = bed.sink.link_stats(&sink_if)?;
    let ticks_before = cpu_ticks(DUT_CPU);
    let stop = AtomicBool::new(false);
    let (sent, received) = std::thread::scope(|s| -> Result<_> {
        let sink_thread = rate.map(|_| {
            s.spawn(|| {
                bed.sink.run(|| {
                    core_affinity::set_for_current(core_affinity::CoreId { id: GEN_CPU });
                    traffic::sink(
                        &sink_if,
                        size,
                        PortOptions::default(),
                        None,
                        Duration::from_secs(600),
                        &stop,
                    )
                })
            })
        });
        std::thread::sleep(Duration::from_millis(200));
        let sent = bed.gen.run(|| {
            core_affinity::set_for_current(core_affinity::CoreId { id: GEN_CPU });
            traffic::send(&gen_if, &traffic, PortOptions::default())
        })??;
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let received = match sink_thread {
            Some(t) => Some(t.join().expect("sink thread")??),
            None => None,
        };
        Ok((sent, received))
    })?;
    let after = bed.sink.link_stats(&sink_if)?;
    let cpu_cores = match (ticks_before, cpu_ticks(DUT_CPU)) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => (b1 - b0) as f64 / (t1 - t0) as f64,
        _ => 0.0,
    };
    drop(out_wire);
    let delivered = after.rx_packets - before.rx_packets;
    let latency = received.map(|r| r.stats.report(size, sent.frames, sent.seconds));
    Ok(Row {
        name: device.name().into(),
        frame_bytes: size,
        offered_pps: sent.frames as f64 / sent.seconds,
        delivered_pps: delivered as f64 / sent.seconds,
        gbps: (after.rx_bytes - before.rx_bytes) as f64 * 8.0 / sent.seconds / 1e9,
        loss_ratio: 1.0 - delivered as f64 / sent.frames.max(1) as f64,
        p50_us: latency.as_ref().map(|l| l.p50_us),
        p99_us: latency.as_ref().map(|l| l.p99_us),
        cpu_cores,
    })
}

/// The median row of several repetitions (by delivered pps).
pub fn median(mut rows: Vec<Row>) -> Row {
    rows.sort_by(|a, b| a.delivered_pps.total_cmp(&b.delivered_pps));
    rows.swap_remove(rows.len() / 2)
}
