//! A same-node wire steered through the switch in place: the two pods' interfaces stay
//! one veth pair (no interface is remade, so nothing in flight is lost and the pods'
//! own routes stay), and XDP on each end hands the switch what the other pod sent.
//!
//! A veth hands a frame to its peer's receive queue of the same number as the transmit
//! queue it left by. Steering gives each interface a second transmit and receive queue
//! (a veth has one per possible CPU, one of each in use) and keeps the pod's stack on
//! queue 0 (transmit packet steering: every CPU's queue is 0), so the steering program on
//! an interface
//! (`RedirectProgram::steer`) takes what arrives on queue 0 to a socket, and lets what
//! arrives on queue 1 through to the pod. The switch sends a frame on to pod B from a
//! socket bound to queue 1 of pod A's interface: it arrives on queue 1 of B's and goes up
//! B's stack. So the port that stands for pod A (what A sends, and where frames for A are
//! sent) is two sockets on pod B's interface, queue 0 to receive and queue 1 to send.
//!
//! Moving onto the switch path is attaching the two programs after the ports are open and
//! linked; moving off is detaching them (frames in the sockets' rings are forwarded
//! first, by the worker). The attachment is a BPF link owned by the port, so a daemon
//! that dies leaves a plain veth pair behind.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use xwire_ethtool::EthtoolChannels;
use xwire_netns::Visit;

use crate::xdp_port::{KernelDrops, PortError, Steering, XdpMode, XdpPort};
use crate::xdp_redirect::RedirectProgram;

/// One pod's interface of a veth pair to steer, in the pod's network namespace.
#[derive(Debug)]
pub struct SteeredEnd {
    pub netns: OwnedFd,
    pub ifname: String,
}

/// The two sockets that stand for one pod of a steered pair, on the other pod's
/// interface, and the program that steers that interface's frames to them.
pub(crate) struct SteeredPort {
    receiver: XdpPort,
    sender: XdpPort,
    /// The interface the sockets are on (the far pod's), its namespace and index there.
    netns: OwnedFd,
    ifname: String,
    ifindex: u32,
    slot: u32,
    /// The steering program's attachment, while steering.
    attached: Option<OwnedFd>,
}

/// The interface a steered port's program goes on, and the socket slot it steers to.
pub(crate) struct SteerTarget {
    netns: OwnedFd,
    ifname: String,
    ifindex: u32,
    slot: u32,
}

impl SteerTarget {
    pub(crate) fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Attaches the program that steers the interface's frames to the port's receiving
    /// socket; the steering lasts as long as the returned attachment.
    pub(crate) fn steer(&self, program: &RedirectProgram) -> Result<OwnedFd, PortError> {
        let failed = |e: io::Error| PortError::Unsteerable {
            ifname: self.ifname.clone(),
            reason: format!("attach the steering program: {e}"),
        };
        let _inside = Visit::enter(self.netns.as_fd()).map_err(failed)?;
        program.steer(self.ifindex, self.slot).map_err(failed)
    }
}

impl SteeredPort {
    /// Opens the sockets for the pod at the other end of `far` (on `far`'s interface),
    /// with the receiving one in `slot` of the worker's socket map, and UMEMs of
    /// `(receiving, sending)` frames. Nothing is steered to them until `steer`.
    pub(crate) fn open(
        program: &RedirectProgram,
        slot: u32,
        far: &SteeredEnd,
        max_frame: usize,
        (receive_frames, send_frames): (usize, usize),
    ) -> Result<SteeredPort, PortError> {
        let ifname = far.ifname.as_str();
        let unsteerable = |reason: String| PortError::Unsteerable {
            ifname: ifname.into(),
            reason,
        };
        let _inside = Visit::enter(far.netns.as_fd())
            .map_err(|e| unsteerable(format!("enter its network namespace: {e}")))?;
        let Ok(ifindex) = nix::net::if_::if_nametoindex(ifname) else {
            return Err(PortError::NoSuchInterface(ifname.into()));
        };
        use_two_queues(ifname).map_err(unsteerable)?;
        keep_stack_on_queue_zero(far.netns.as_fd(), ifname).map_err(unsteerable)?;
        let mode = Some(XdpMode::Native);
        let receiver = XdpPort::open(
            ifname,
            mode,
            max_frame,
            receive_frames,
            Steering::Later(program, slot),
        )?;
        // The sender receives nothing: its frames are all for sending.
        let mut sender = XdpPort::open(
            ifname,
            mode,
            max_frame,
            send_frames,
            Steering::SendOnly {
                queue: 1,
                while_busy: None,
            },
        )?;
        sender.set_fill_target(0);
        let netns = far
            .netns
            .try_clone()
            .map_err(|e| unsteerable(format!("keep its network namespace: {e}")))?;
        Ok(SteeredPort {
            receiver,
            sender,
            netns,
            ifname: ifname.into(),
            ifindex,
            slot,
            attached: None,
        })
    }

    /// Where this port's steering program goes, for the keeper to attach it while the
    /// worker already forwards the port's frames (`switch::steer` says why).
    pub(crate) fn target(&self) -> Result<SteerTarget, PortError> {
        let netns = self.netns.try_clone().map_err(|e| PortError::Unsteerable {
            ifname: self.ifname.clone(),
            reason: format!("keep its network namespace: {e}"),
        })?;
        Ok(SteerTarget {
            netns,
            ifname: self.ifname.clone(),
            ifindex: self.ifindex,
            slot: self.slot,
        })
    }

    /// Records the steering program's attachment (`SteerTarget::steer`): from now on the
    /// port owns it, and closing it stops the steering.
    pub(crate) fn set_attachment(&mut self, attachment: OwnedFd) {
        self.attached = Some(attachment);
    }

    /// The steering program's attachment: closing it stops the steering (from then on
    /// the interface's frames go straight to its pod), and waits in the kernel while the
    /// program comes off the veth, so the worker has its keeper do it.
    pub(crate) fn take_attachment(&mut self) -> Option<OwnedFd> {
        self.attached.take()
    }

    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }

    pub(crate) fn receiver(&mut self) -> &mut XdpPort {
        &mut self.receiver
    }

    pub(crate) fn sender(&mut self) -> &mut XdpPort {
        &mut self.sender
    }

    /// Both sockets: (receiving, sending).
    pub(crate) fn both(&mut self) -> (&mut XdpPort, &mut XdpPort) {
        (&mut self.receiver, &mut self.sender)
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.receiver.as_fd()
    }

    /// Frames the sending socket has in its TX ring, not yet sent.
    pub(crate) fn sending(&self) -> usize {
        self.sender.in_flight()
    }

    pub(crate) fn kernel_drops(&self) -> io::Result<KernelDrops> {
        let (r, s) = (self.receiver.kernel_drops()?, self.sender.kernel_drops()?);
        Ok(KernelDrops {
            rx_ring_full: r.rx_ring_full,
            rx_fill_ring_empty: r.rx_fill_ring_empty,
            rx_other: r.rx_other,
            tx_invalid: r.tx_invalid + s.tx_invalid,
        })
    }
}

const ETHTOOL_GCHANNELS: u32 = 0x3c;
const ETHTOOL_SCHANNELS: u32 = 0x3d;

/// Puts a second receive and transmit queue of interface `ifname` (in the calling
/// thread's namespace) in use: a socket binds to queue 1 only then, and sends from it
/// only if it is a transmit queue in use.
fn use_two_queues(ifname: &str) -> Result<(), String> {
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    xwire_ethtool::request(ifname, &mut channels).map_err(|e| format!("read its channels: {e}"))?;
    if channels.max_rx < 2 || channels.max_tx < 2 {
        return Err(format!(
            "it has {} receive and {} transmit queues, and steering needs two of each \
             (a veth made on a machine with one CPU has one)",
            channels.max_rx, channels.max_tx
        ));
    }
    if channels.rx_count >= 2 && channels.tx_count >= 2 {
        return Ok(());
    }
    channels.cmd = ETHTOOL_SCHANNELS;
    channels.rx_count = channels.rx_count.max(2);
    channels.tx_count = channels.tx_count.max(2);
    xwire_ethtool::request(ifname, &mut channels).map_err(|e| format!("use a second queue: {e}"))
}

/// Maps every CPU to transmit queue 0 of `ifname` in `netns` (XPS), so that the pod's
/// stack never sends on queue 1, the switch's. The setting is in sysfs, which shows a
/// namespace's interfaces only when mounted from inside it: a short-lived thread enters
/// the namespace and a mount namespace of its own, mounts sysfs there and writes it, as
/// `ip netns exec` does; the mount goes with the thread.
fn keep_stack_on_queue_zero(netns: BorrowedFd<'_>, ifname: &str) -> Result<(), String> {
    let mask = every_cpu_mask()?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| -> Result<(), String> {
                use nix::mount::{mount, MsFlags};
                xwire_netns::enter(netns).map_err(|e| format!("enter the pod's namespace: {e}"))?;
                nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
                    .map_err(|e| format!("a mount namespace: {e}"))?;
                let none: Option<&str> = None;
                mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
                    .map_err(|e| format!("make mounts private: {e}"))?;
                mount(Some("sysfs"), "/sys", Some("sysfs"), MsFlags::empty(), none)
                    .map_err(|e| format!("mount sysfs: {e}"))?;
                let queues = format!("/sys/class/net/{ifname}/queues");
                std::fs::write(format!("{queues}/tx-0/xps_cpus"), &mask)
                    .and_then(|()| std::fs::write(format!("{queues}/tx-1/xps_cpus"), "0"))
                    .map_err(|e| format!("set transmit packet steering in {queues}: {e}"))
            })
            .join()
            .map_err(|_| "the thread setting transmit packet steering panicked".to_string())?
    })
}

/// A CPU mask (sysfs's hex format, 32 bits a group) of every possible CPU.
fn every_cpu_mask() -> Result<String, String> {
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .map_err(|e| format!("read the possible CPUs: {e}"))?;
    let mut cpus = Vec::new();
    for range in possible.trim().split(',') {
        let bad = || format!("possible CPUs {possible:?}");
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let first: usize = first.parse().map_err(|_| bad())?;
        let last: usize = last.parse().map_err(|_| bad())?;
        cpus.extend(first..=last);
    }
    let groups = cpus.iter().max().map_or(1, |&top| top / 32 + 1);
    let mut words = vec![0u32; groups];
    for cpu in cpus {
        words[cpu / 32] |= 1 << (cpu % 32);
    }
    Ok(words
        .iter()
        .rev()
        .map(|w| format!("{w:08x}"))
        .collect::<Vec<_>>()
        .join(","))
}
