//! The devices local-fwd puts between the generator and the sink, each brought up inside
//! the DUT namespace with its forwarding work on the DUT CPU, as ../shared/anchors does:
//! the Linux bridge, DPDK testpmd (io forwarding over net_af_xdp), Open vSwitch's
//! userspace datapath with AF_XDP ports, and xwire's switch.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xwire_fastpath::{PortChoice, Worker};

use crate::testbed::{unique_ifname, ChildGuard, Netns};
use crate::worker_settings::WorkerSettings;

/// The device under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Device {
    /// One veth pair from generator to sink: the ceiling.
    Direct,
    Bridge,
    Testpmd,
    OvsAfxdp,
    /// xwire's switch, its worker set up as these settings say.
    Xwire(WorkerSettings),
    /// The same with AF_PACKET ports: on a veth, AF_XDP runs in copy mode, where the
    /// kernel copies a frame twice on the way in and builds an skb on the way out; this
    /// measures what the fallback costs beside it. Not in the default list.
    XwirePacket(WorkerSettings),
}

impl Device {
    /// Every device, xwire with `xwire`'s settings.
    pub fn all(xwire: WorkerSettings) -> [Device; 5] {
        [
            Device::Direct,
            Device::Bridge,
            Device::Testpmd,
            Device::OvsAfxdp,
            Device::Xwire(xwire),
        ]
    }

    pub fn name(self) -> &'static str {
        match self {
            Device::Direct => "direct-veth",
            Device::Bridge => "linux-bridge",
            Device::Testpmd => "testpmd-af_xdp-io",
            Device::OvsAfxdp => "ovs-netdev-afxdp",
            Device::Xwire(_) => "xwire",
            Device::XwirePacket(_) => "xwire-af_packet",
        }
    }

    /// The device called `name`; xwire's with `xwire`'s settings.
    pub fn parse(name: &str, xwire: WorkerSettings) -> Option<Device> {
        Device::all(xwire)
            .into_iter()
            .chain([Device::XwirePacket(xwire)])
            .find(|d| d.name() == name)
    }

    pub fn is_xwire(self) -> bool {
        matches!(self, Device::Xwire(_) | Device::XwirePacket(_))
    }

    /// The largest frame the device is set up for here (the peers' default buffers).
    pub fn max_frame(self) -> usize {
        match self {
            Device::Testpmd | Device::OvsAfxdp => 1514,
            _ => 9014,
        }
    }
}

/// A running device, held only to be dropped: that stops it.
pub enum Running {
    Kernel,
    Process { _guard: ChildGuard },
    Ovs { _ovs: Ovs },
    Xwire { worker: Worker },
}

impl Running {
    /// xwire's counters (the link's frames and drops each way, each port's kernel drops
    /// and UMEM frames), to say where frames went; empty for the other devices.
    pub fn counters(&self) -> String {
        let Running::Xwire { worker } = self else {
            return String::new();
        };
        match worker.stats() {
            Ok(stats) => {
                let links: String = stats
                    .links
                    .iter()
                    .map(|link| {
                        format!(
                            "  xwire link {}: in {:?}\n    back {:?}\n    kernel drops {:?}, port frames {:?}\n",
                            link.wire.0, link.a_to_b, link.b_to_a, link.kernel_drops, link.umem_frames
                        )
                    })
                    .collect();
                // Time kept from its ports says whether drops at a port came from the
                // worker being away (`AwayTimes`).
                format!(
                    "{links}  xwire worker: busy {:?} of {:?}, away {:?}\n",
                    stats.busy, stats.running, stats.away
                )
            }
            Err(e) => format!("  xwire: no statistics: {e}\n"),
        }
    }
}

/// Brings `device` up between `in_if` and `out_if` of `dut` (unused for `Direct`).
pub fn start(
    device: Device,
    dut: &Netns,
    in_if: &str,
    out_if: &str,
    max_frame: usize,
    cpu: usize,
) -> Result<Running> {
    match device {
        Device::Direct => Ok(Running::Kernel),
        Device::Bridge => {
            dut.add_bridge("br0", &[in_if, out_if])?;
            // The bridge's softirq work happens on the receiving CPU: steer it to the
            // device's CPU, as the anchor's bridge variant does, for the way back too
            // (the anchor sends one way only), or the way back would bridge on the
            // generator's CPU and both ways at once would give the bridge two CPUs.
            dut.steer_receive_to_cpu(in_if, cpu)?;
            dut.steer_receive_to_cpu(out_if, cpu)?;
            Ok(Running::Kernel)
        }
        Device::Xwire(settings) | Device::XwirePacket(settings) => {
            let choice = match device {
                Device::XwirePacket(_) => Some(PortChoice::AfPacket),
                _ => None,
            };
            let config = settings.config(cpu);
            let worker = dut.run(|| Worker::spawn(config))??;
            let a = worker.add_port_as(in_if, max_frame.max(1514), choice)?;
            let b = worker.add_port_as(out_if, max_frame.max(1514), choice)?;
            worker.add_link(xwire_fastpath::WireId(1), a.id, b.id)?;
            Ok(Running::Xwire { worker })
        }
        Device::Testpmd => {
            let prefix = format!("xwt-{}", unique_ifname());
            let mut cmd = Command::new("dpdk-testpmd");
            cmd.args(["--lcores", &format!("0@{cpu},1@{cpu}")])
                .args(["--no-huge", "-m", "512", "--no-pci"])
                .args(["--file-prefix", &prefix])
                .args(["--vdev", &format!("net_af_xdp0,iface={in_if}")])
                .args(["--vdev", &format!("net_af_xdp1,iface={out_if}")])
                .args(["--", "--forward-mode=io", "--nb-cores=1", "--burst=64"])
                .args(["--txd=2048", "--rxd=2048", "--total-num-mbufs=32768"])
                .args(["--stats-period", "1"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            let guard = dut
                .spawn(&mut cmd)
                .context("start dpdk-testpmd (apt-get install dpdk librte-net-af-xdp23)")?;
            Ok(Running::Process { _guard: guard })
        }
        Device::OvsAfxdp => Ok(Running::Ovs {
            _ovs: Ovs::start(dut, in_if, out_if, cpu)?,
        }),
    }
}

/// A private Open vSwitch: its own database and run directory, ovsdb-server and
/// ovs-vswitchd inside the DUT namespace, the PMD thread on the DUT CPU, and one bridge
/// whose two AF_XDP ports are joined by port flows (the same forwarding as a wire).
pub(crate) struct Ovs {
    vswitchd: Option<ChildGuard>,
    ovsdb: Option<ChildGuard>,
    dir: PathBuf,
}

impl Ovs {
    fn start(dut: &Netns, in_if: &str, out_if: &str, cpu: usize) -> Result<Ovs> {
        let dir = std::env::temp_dir().join(format!("xwt-ovs-{}", unique_ifname()));
        std::fs::create_dir_all(&dir)?;
        let db = dir.join("conf.db");
        let run = |cmd: &mut Command| -> Result<()> {
            let out = dut.exec(cmd.envs(ovs_env(&dir)))?;
            if !out.status.success() {
                bail!(
                    "{:?} failed: {}",
                    cmd.get_program(),
                    String::from_utf8_lossy(&out.stderr).trim()
                );
            }
            Ok(())
        };
        // From here on, dropping `ovs` stops what started and removes the directory.
        let mut ovs = Ovs {
            vswitchd: None,
            ovsdb: None,
            dir: dir.clone(),
        };
        run(Command::new("ovsdb-tool")
            .arg("create")
            .arg(&db)
            .arg("/usr/share/openvswitch/vswitch.ovsschema"))?;
        let socket = dir.join("db.sock");
        let remote = format!("unix:{}", socket.display());
        ovs.ovsdb = Some(
            dut.spawn(
                Command::new("ovsdb-server")
                    .arg(&db)
                    .arg(format!("--remote=punix:{}", socket.display()))
                    .arg(format!("--log-file={}", dir.join("ovsdb.log").display()))
                    .envs(ovs_env(&dir))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )?,
        );
        wait_for(&socket, Duration::from_secs(10))?;
        let vsctl = |args: &[&str]| {
            run(Command::new("ovs-vsctl")
                .arg(format!("--db={remote}"))
                .arg("--timeout=20")
                .args(args))
        };
        vsctl(&["--no-wait", "init"])?;
        vsctl(&[
            "--no-wait",
            "set",
            "Open_vSwitch",
            ".",
            &format!("other_config:pmd-cpu-mask=0x{:x}", 1u64 << cpu),
        ])?;
        ovs.vswitchd = Some(
            dut.spawn(
                Command::new("taskset")
                    .args(["-c", &cpu.to_string(), "ovs-vswitchd", &remote])
                    .arg(format!("--log-file={}", dir.join("vswitchd.log").display()))
                    .envs(ovs_env(&dir))
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )?,
        );
        vsctl(&[
            "add-br",
            "br0",
            "--",
            "set",
            "bridge",
            "br0",
            "datapath_type=netdev",
        ])?;
        for port in [in_if, out_if] {
            vsctl(&[
                "add-port",
                "br0",
                port,
                "--",
                "set",
                "interface",
                port,
                "type=afxdp",
            ])?;
        }
        let ofctl = |args: &[&str]| run(Command::new("ovs-ofctl").args(args));
        ofctl(&["del-flows", "br0"])?;
        for (from, to) in [(in_if, out_if), (out_if, in_if)] {
            ofctl(&[
                "add-flow",
                "br0",
                &format!("in_port={from},actions=output:{to}"),
            ])?;
        }
        Ok(ovs)
    }
}

impl Drop for Ovs {
    fn drop(&mut self) {
        // vswitchd before the database it reads, both before their files go.
        drop(self.vswitchd.take());
        drop(self.ovsdb.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ovs_env(dir: &Path) -> Vec<(&'static str, &Path)> {
    ["OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR", "OVS_SYSCONFDIR"]
        .into_iter()
        .map(|k| (k, dir))
        .collect()
}

fn wait_for(path: &Path, limit: Duration) -> Result<()> {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() > limit {
            bail!("{} did not appear within {limit:?}", path.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
