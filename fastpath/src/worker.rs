//! A poll-mode worker: one thread, optionally pinned to a core, that owns its ports (each
//! with its own UMEM), forwards frames between linked ports, and applies commands from the
//! control plane between batches.

use std::net::SocketAddr;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use xwire_model::worker_defaults::{
    DEFAULT_COALESCE, DEFAULT_FRAMES_PER_PORT, DEFAULT_IDLE_SPIN, DEFAULT_MIN_FRAMES_PER_PORT,
    DEFAULT_RESTING_FRAMES_PER_WORKER, DEFAULT_SHRINK_AFTER, DEFAULT_WORKER_NICE,
};
use xwire_proto::WireId;

use crossbeam_channel::{bounded, Sender};

use crate::capture::Tap;
use crate::counters::LinkCounters;
use crate::impairment::ImpairmentSpec;
use crate::link_table::{LinkError, PortId};
use crate::peer::{
    Carrier, ControlMessage, PeerConfig, PeerError, PeerEvent, PeerId, PeerTransport,
    TransportCounters,
};
use crate::peer_control::{ask, drop_queued, wait_for};
use crate::remote_transport::{BindTransport, RemoteTransport};
use crate::stats::WorkerStats;
use crate::steered_port::SteeredEnd;
use crate::switch::Switch;
use crate::xdp_port::{KernelDrops, PortError, XdpMode};

/// Which kind of port to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PortChoice {
    /// AF_XDP, or AF_PACKET where AF_XDP cannot be had (logged, with the reason).
    #[default]
    Auto,
    AfXdp,
    AfPacket,
}

/// The kind of port a worker opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortKind {
    AfXdp(XdpMode),
    AfPacket,
}

impl PortKind {
    pub fn name(self) -> &'static str {
        match self {
            PortKind::AfXdp(XdpMode::Native) => "af_xdp native",
            PortKind::AfXdp(XdpMode::Generic) => "af_xdp generic",
            PortKind::AfPacket => "af_packet",
        }
    }
}

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The core to pin the worker to; `None` leaves it to the scheduler.
    pub core: Option<usize>,
    /// Keep passing over the ports without pause (for benchmarks: a core per worker,
    /// the lowest latency); otherwise pace passes as `coalesce` and `idle_spin` say.
    pub busy_poll: bool,
    /// Without `busy_poll`: how long the worker keeps passing over its ports after the
    /// last frame or command before it sleeps until a frame (or a command, or a timer)
    /// wakes it. Traffic with gaps longer than this wakes it per frame, which costs a
    /// wake-up per frame but no core: a lab with little traffic leaves the CPU to the
    /// lab's other nodes and pods.
    pub idle_spin: Duration,
    /// Without `busy_poll`, while traffic flows: how long the worker waits between passes
    /// for frames to gather, when a pass found less than a batch (interrupt coalescing, as
    /// a NIC's rx-usecs). Where fewer than a few frames come in that time, the wait
    /// stretches to one and a half times as long (`switch::pace`). It adds at most that to
    /// a frame's latency per worker, and makes each pass and each QUIC packet carry several
    /// frames, with no wake-up from the sockets in between. Zero: pass again at once (spin)
    /// until `idle_spin` has passed.
    pub coalesce: Duration,
    /// The thread's nice value, -20 to 19: at -20 it keeps its core from ordinary threads
    /// while it has frames (`nice` says why). Refused, the worker keeps the nice value it
    /// started with and logs why.
    pub nice: i8,
    /// Frames taken from one port's RX ring at a time.
    pub batch: usize,
    /// The most ports this worker serves. Ports take memory only while open.
    pub max_ports: usize,
    /// The most UMEM frames an AF_XDP port grows to. Ports open at their resting size
    /// (`resting_frames_per_worker`) and are resized, while they run and without losing
    /// a frame, to 20 ms of what they carry (`switch::sizing`); all but an eighth of a port's
    /// frames wait in its fill ring for a burst. A frame pins 2 KiB (4 KiB for frames
    /// above 1792 bytes), so the default, 4096, is 8 MiB for a port that carries 200 kpps
    /// or more.
    pub frames_per_port: usize,
    /// The fewest UMEM frames a port rests at: what an idle wire end pins where the
    /// worker has many ports (256 KiB at the default, 128).
    pub min_frames_per_port: usize,
    /// The UMEM frames the worker's idle ports share: a port opens with, and shrinks
    /// back to once its traffic has been calm for `shrink_after`, this divided by the
    /// worker's open ports (a power of two, no less than `min_frames_per_port` and no
    /// more than `frames_per_port`). The default, 16,384 (32 MiB of 2-KiB frames), rests
    /// up to 4 ports at 4,096 frames and 128 or more at 128: a small lab's wires take
    /// a new flow's first burst whole, and a lab of thousands of wire ends pins little.
    pub resting_frames_per_worker: usize,
    /// How long a port needs less than a quarter of its frames before it shrinks.
    pub shrink_after: Duration,
    /// Force an XDP mode instead of native-then-generic.
    pub xdp_mode: Option<XdpMode>,
    /// Which kind of port to open.
    pub ports: PortChoice,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            core: None,
            busy_poll: false,
            idle_spin: DEFAULT_IDLE_SPIN,
            coalesce: DEFAULT_COALESCE,
            nice: DEFAULT_WORKER_NICE,
            batch: 64,
            max_ports: 8,
            frames_per_port: DEFAULT_FRAMES_PER_PORT,
            min_frames_per_port: DEFAULT_MIN_FRAMES_PER_PORT,
            resting_frames_per_worker: DEFAULT_RESTING_FRAMES_PER_WORKER,
            shrink_after: DEFAULT_SHRINK_AFTER,
            xdp_mode: None,
            ports: PortChoice::Auto,
        }
    }
}

impl WorkerConfig {
    /// The longest a nap between passes stretches to while traffic flows (`coalesce`).
    pub fn longest_nap(&self) -> Duration {
        crate::switch::longest_nap(self.coalesce)
    }
}

/// What the worker reports about a port it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    pub id: PortId,
    pub ifname: String,
    pub kind: PortKind,
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Port(#[from] PortError),
    #[error(transparent)]
    Link(#[from] LinkError),
    #[error("the worker could not start: {0}")]
    Start(String),
    #[error("the worker has stopped")]
    Stopped,
    #[error("no port {0:?}")]
    NoSuchPort(PortId),
    #[error("reading a port's statistics: {0}")]
    Statistics(std::io::Error),
    #[error(transparent)]
    Peer(#[from] PeerError),
    #[error("this worker has no peer transport (attach_peers first)")]
    NoPeers,
    #[error("invalid impairment: {0}")]
    Impairment(String),
    #[error("no link {0} with an end on port {1:?}")]
    NoSuchLink(WireId, PortId),
    #[error("the fast path carries wires over QUIC only; a {0:?} wire is the kernel's")]
    NotQuic(Carrier),
}

/// `carrier` if the fast path carries it: the one check that keeps a kernel VXLAN wire's
/// carrier out of the switch and the peer transport.
fn quic(carrier: Carrier) -> Result<Carrier, WorkerError> {
    if carrier.is_quic() {
        Ok(carrier)
    } else {
        Err(WorkerError::NotQuic(carrier))
    }
}

/// A port to open and join to a peer node by wire id, as one command (see
/// `Worker::add_remote_ports`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePort {
    pub ifname: String,
    pub max_frame: usize,
    pub wire: WireId,
    pub peer: PeerId,
    /// The link's own carrier; `None` takes the peer's.
    pub carrier: Option<Carrier>,
}

/// A veth pair the worker steers: its two ports (the first standing for the pod of the
/// first end) and its link's counters.
#[derive(Debug, Clone)]
pub struct SteeredPair {
    pub ports: [PortInfo; 2],
    pub counters: Arc<LinkCounters>,
}

/// The remote link a newly opened port joins (`Command::AddPort`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Join {
    pub(crate) wire: WireId,
    pub(crate) peer: PeerId,
    pub(crate) carrier: Option<Carrier>,
}

pub(crate) enum Command {
    AddPort {
        ifname: String,
        max_frame: usize,
        choice: Option<PortChoice>,
        /// Join the port to a peer at once; a port that cannot join is closed again.
        join: Option<Join>,
        reply: Sender<Result<PortInfo, WorkerError>>,
    },
    RemovePorts {
        ids: Vec<PortId>,
        reply: Sender<Result<(), WorkerError>>,
    },
    SteerPair {
        wire: WireId,
        ends: Box<[SteeredEnd; 2]>,
        max_frame: usize,
        reply: Sender<Result<SteeredPair, WorkerError>>,
    },
    AddLink {
        wire: WireId,
        a: PortId,
        b: PortId,
        reply: Sender<Result<Arc<LinkCounters>, WorkerError>>,
    },
    RemoveLink {
        wire: WireId,
        reply: Sender<bool>,
    },
    /// About the worker's peers: the peer transport, its connections and its links.
    Peer(PeerCommand),
    KernelDrops {
        id: PortId,
        reply: Sender<Result<KernelDrops, WorkerError>>,
    },
    /// Impairs (or with `None`, clears) the frames that link `wire` receives on `from`.
    SetImpairment {
        wire: WireId,
        from: PortId,
        spec: Option<ImpairmentSpec>,
        reply: Sender<Result<(), WorkerError>>,
    },
    /// Taps link `wire`; the tap's `AToB` is the frames received on `from`.
    Capture {
        wire: WireId,
        from: PortId,
        tap: Tap,
        reply: Sender<Result<(), WorkerError>>,
    },
    HeldFrames {
        wire: WireId,
        from: PortId,
        reply: Sender<Result<usize, WorkerError>>,
    },
    Stats {
        reply: Sender<WorkerStats>,
    },
    Stop,
}

impl Command {
    /// Whether the command only reads the worker's state. A worker that answers one
    /// has no reason to poll its ports more eagerly after it: the peer desk asks for peer
    /// events every round, and a worker that spun after each question kept two shared
    /// cores busy while a lab's pods were added (`xwire-perf cni-scale`).
    pub(crate) fn only_reads(&self) -> bool {
        matches!(
            self,
            Command::Stats { .. }
                | Command::KernelDrops { .. }
                | Command::HeldFrames { .. }
                | Command::Peer(PeerCommand::PeerStatus { .. })
        )
    }
}

/// The commands about a worker's peers.
pub(crate) enum PeerCommand {
    AttachPeers {
        bind: BindTransport,
        reply: Sender<Result<SocketAddr, WorkerError>>,
    },
    AddPeer {
        name: String,
        addr: SocketAddr,
        carrier: Carrier,
        reply: Sender<Result<PeerId, WorkerError>>,
    },
    RetirePeer {
        peer: PeerId,
        reply: Sender<Result<bool, WorkerError>>,
    },
    AddRemoteLink {
        wire: WireId,
        port: PortId,
        peer: PeerId,
        /// The link's own carrier; `None` takes the peer's.
        carrier: Option<Carrier>,
        reply: Sender<Result<Arc<LinkCounters>, WorkerError>>,
    },
    PeerStatus {
        reply: Sender<Result<(TransportCounters, Vec<PeerEvent>), WorkerError>>,
    },
    SendControl {
        peer: PeerId,
        message: Box<ControlMessage>,
        reply: Sender<Result<bool, WorkerError>>,
    },
}

/// The control plane's handle on a worker; dropping it stops the worker.
pub struct Worker {
    pub(crate) commands: Sender<Command>,
    /// Wakes a sleeping worker for a command (one byte per command).
    pub(crate) wake: UnixDatagram,
    /// Set by the worker's thread once it takes no more commands (see `peer_control::ask`).
    pub(crate) stopped: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// The kernel's id of the worker's thread, for its CPU time.
    thread_id: libc::pid_t,
}

impl Worker {
    /// Starts a worker thread. It inherits the calling thread's network namespace, in
    /// which it opens its ports.
    pub fn spawn(config: WorkerConfig) -> Result<Worker, WorkerError> {
        let (commands, inbox) = bounded(64);
        let (ready_tx, ready_rx) = bounded(1);
        let stopped = Arc::new(AtomicBool::new(false));
        let stopped_here = Arc::clone(&stopped);
        let (wake, woken) = UnixDatagram::pair().map_err(|e| WorkerError::Start(e.to_string()))?;
        for end in [&wake, &woken] {
            end.set_nonblocking(true)
                .map_err(|e| WorkerError::Start(e.to_string()))?;
        }
        let keepers_wake = wake
            .try_clone()
            .map_err(|e| WorkerError::Start(e.to_string()))?;
        let thread = std::thread::Builder::new()
            .name("xwire-worker".into())
            .spawn(move || {
                if let Some(core) = config.core {
                    core_affinity::set_for_current(core_affinity::CoreId { id: core });
                }
                match Switch::new(&config, woken, keepers_wake) {
                    Ok(switch) => {
                        let _ = ready_tx.send(Ok(nix::unistd::gettid().as_raw()));
                        switch.run(&config, &inbox);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
                drop_queued(&stopped_here, &inbox);
            })
            .map_err(|e| WorkerError::Start(e.to_string()))?;
        match ready_rx.recv() {
            Ok(Ok(thread_id)) => Ok(Worker {
                commands,
                wake,
                stopped,
                thread: Some(thread),
                thread_id,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(WorkerError::Start("the worker thread died".into())),
        }
    }

    /// The CPU time the worker's thread has had so far, softirq work the kernel did while
    /// the thread ran included (the scheduler's own account, `/proc/<pid>/task/<tid>/
    /// schedstat`, in nanoseconds, not in ticks). `None` if the kernel has no schedstat.
    pub fn cpu_time(&self) -> Option<Duration> {
        let path = format!("/proc/self/task/{}/schedstat", self.thread_id);
        let text = std::fs::read_to_string(path).ok()?;
        let nanos = text.split_whitespace().next()?.parse().ok()?;
        Some(Duration::from_nanos(nanos))
    }

    /// Opens a port on `ifname` for frames up to `max_frame` bytes, of the kind the
    /// worker's configuration chooses.
    pub fn add_port(&self, ifname: &str, max_frame: usize) -> Result<PortInfo, WorkerError> {
        self.add_port_as(ifname, max_frame, None)
    }

    /// As `add_port`, with the kind of port chosen here (`None`: the configuration's).
    pub fn add_port_as(
        &self,
        ifname: &str,
        max_frame: usize,
        choice: Option<PortChoice>,
    ) -> Result<PortInfo, WorkerError> {
        self.ask(|reply| Command::AddPort {
            ifname: ifname.into(),
            max_frame,
            choice,
            join: None,
            reply,
        })?
    }

    /// Opens a port for each of `ports` and joins it to its peer by wire id; returns a
    /// result per port, in order. A port that opens but cannot join is closed again.
    ///
    /// The commands are all queued before the first answer is awaited, so the worker
    /// goes from one port to the next without waiting for the caller (a restart
    /// re-opens every remote wire's port this way). It still forwards between them: it
    /// takes commands for at most `COMMAND_BUDGET` per pass.
    pub fn add_remote_ports(&self, ports: &[RemotePort]) -> Vec<Result<PortInfo, WorkerError>> {
        let mut answers = Vec::with_capacity(ports.len());
        for port in ports {
            if let Some(Err(e)) = port.carrier.map(quic) {
                answers.push(Err(e));
                continue;
            }
            let (reply, answer) = bounded(1);
            let command = Command::AddPort {
                ifname: port.ifname.clone(),
                max_frame: port.max_frame,
                choice: None,
                join: Some(Join {
                    wire: port.wire,
                    peer: port.peer,
                    carrier: port.carrier,
                }),
                reply,
            };
            // A full queue blocks here until the worker takes commands again.
            let sent = self.commands.send(command).is_ok();
            let _ = self.wake.send(&[1]);
            answers.push(if sent {
                Ok(answer)
            } else {
                Err(WorkerError::Stopped)
            });
        }
        answers
            .into_iter()
            .map(|answer| wait_for(&answer?, &self.stopped)?)
            .collect()
    }

    pub fn remove_port(&self, id: PortId) -> Result<(), WorkerError> {
        self.remove_ports(&[id])
    }

    /// Closes ports together. Steered ones stop steering first, and what was in flight
    /// through them goes on before they close: closing both ports of a steered pair this
    /// way puts the pair back as a plain veth pair without losing a frame.
    pub fn remove_ports(&self, ids: &[PortId]) -> Result<(), WorkerError> {
        let ids = ids.to_vec();
        self.ask(|reply| Command::RemovePorts { ids, reply })?
    }

    /// Steers the veth pair whose ends are `ends` (each pod's interface, in the pod's
    /// network namespace) through this worker as `wire`, in place: the pair stays, and
    /// each pod's frames go through the switch (where the link's impairments and captures
    /// apply) until its ports are removed (`remove_ports`). Returns the two ports, the
    /// first standing for the pod of `ends[0]` (receiving what it sends), the second for
    /// the other. Needs native XDP: frames up to `NATIVE_MAX_FRAME`.
    pub fn steer_pair(
        &self,
        wire: WireId,
        ends: [SteeredEnd; 2],
        max_frame: usize,
    ) -> Result<SteeredPair, WorkerError> {
        let ends = Box::new(ends);
        self.ask(|reply| Command::SteerPair {
            wire,
            ends,
            max_frame,
            reply,
        })?
    }

    /// Joins two ports; returns the link's counters, readable at any time.
    pub fn add_link(
        &self,
        wire: WireId,
        a: PortId,
        b: PortId,
    ) -> Result<Arc<LinkCounters>, WorkerError> {
        self.ask(|reply| Command::AddLink { wire, a, b, reply })?
    }

    pub fn remove_link(&self, wire: WireId) -> Result<bool, WorkerError> {
        self.ask(|reply| Command::RemoveLink { wire, reply })
    }

    /// Gives the worker a QUIC transport to peer nodes, bound to `config.listen` in the
    /// worker's network namespace; returns the bound address. The worker drives it
    /// between batches, so remote frames take no thread hand-off.
    pub fn attach_peers(&self, config: PeerConfig) -> Result<SocketAddr, WorkerError> {
        // On the caller's thread, before the worker needs it (see `seed_random`).
        crate::peer::seed_random();
        self.attach_transport(Box::new(move || {
            PeerTransport::bind(config).map(|t| Box::new(t) as Box<dyn RemoteTransport>)
        }))
    }

    /// Gives the worker the transport `bind` makes on the worker's thread (see
    /// `RemoteTransport`); returns the address it receives on.
    pub fn attach_transport(&self, bind: BindTransport) -> Result<SocketAddr, WorkerError> {
        self.ask(|reply| Command::Peer(PeerCommand::AttachPeers { bind, reply }))?
    }

    /// Declares a peer node (see `PeerTransport::add_peer`).
    pub fn add_peer(
        &self,
        name: &str,
        addr: SocketAddr,
        carrier: Carrier,
    ) -> Result<PeerId, WorkerError> {
        let carrier = quic(carrier)?;
        self.ask(|reply| {
            Command::Peer(PeerCommand::AddPeer {
                name: name.into(),
                addr,
                carrier,
                reply,
            })
        })?
    }

    /// The peer node left the cluster: closes its connection and stops dialing it until
    /// `add_peer` declares it again. False for an unknown peer.
    pub fn retire_peer(&self, peer: PeerId) -> Result<bool, WorkerError> {
        self.ask(|reply| Command::Peer(PeerCommand::RetirePeer { peer, reply }))?
    }

    /// Joins a port to a peer node by wire id; returns the link's counters.
    pub fn add_remote_link(
        &self,
        wire: WireId,
        port: PortId,
        peer: PeerId,
        carrier: Option<Carrier>,
    ) -> Result<Arc<LinkCounters>, WorkerError> {
        let carrier = carrier.map(quic).transpose()?;
        self.ask(|reply| {
            Command::Peer(PeerCommand::AddRemoteLink {
                wire,
                port,
                peer,
                carrier,
                reply,
            })
        })?
    }

    /// The transport's counters and the peer events since the last call.
    pub fn peer_status(&self) -> Result<(TransportCounters, Vec<PeerEvent>), WorkerError> {
        self.ask(|reply| Command::Peer(PeerCommand::PeerStatus { reply }))?
    }

    /// Sends a control message on the peer's control stream; false when the peer is not
    /// up (the caller sends what it must again when the peer's `Up` event arrives).
    pub fn send_control(&self, peer: PeerId, message: ControlMessage) -> Result<bool, WorkerError> {
        self.ask(|reply| {
            Command::Peer(PeerCommand::SendControl {
                peer,
                message: Box::new(message),
                reply,
            })
        })?
    }

    /// Every link's counters, the kernel's drops at each port, the peers' connection
    /// statistics and how busy the worker is: one copy, taken between two passes.
    pub fn stats(&self) -> Result<WorkerStats, WorkerError> {
        self.ask(|reply| Command::Stats { reply })
    }

    /// What the kernel dropped at a port before the worker saw it (a full ring, no free
    /// buffer): the drops the link counters cannot see.
    pub fn kernel_drops(&self, id: PortId) -> Result<KernelDrops, WorkerError> {
        self.ask(|reply| Command::KernelDrops { id, reply })?
    }

    /// Impairs the frames that link `wire` receives on port `from` (the egress of the
    /// pod behind it), replacing what was in force; `None` clears it. Frames already
    /// held keep their times.
    pub fn set_impairment(
        &self,
        wire: WireId,
        from: PortId,
        spec: Option<ImpairmentSpec>,
    ) -> Result<(), WorkerError> {
        if let Some(spec) = &spec {
            spec.check().map_err(WorkerError::Impairment)?;
        }
        self.ask(|reply| Command::SetImpairment {
            wire,
            from,
            spec,
            reply,
        })?
    }

    /// Taps link `wire`: the tap's `AToB` is the frames the link receives on `from`, its
    /// `BToA` those it sends out of it. The tap goes when its reader is dropped.
    pub fn capture(&self, wire: WireId, from: PortId, tap: Tap) -> Result<(), WorkerError> {
        self.ask(|reply| Command::Capture {
            wire,
            from,
            tap,
            reply,
        })?
    }

    /// The frames held (delayed or rate-limited) that link `wire` received on `from`.
    pub fn held_frames(&self, wire: WireId, from: PortId) -> Result<usize, WorkerError> {
        self.ask(|reply| Command::HeldFrames { wire, from, reply })?
    }

    fn ask<T>(&self, command: impl FnOnce(Sender<T>) -> Command) -> Result<T, WorkerError> {
        ask((&self.commands, &self.wake, &self.stopped), command)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Stop);
        let _ = self.wake.send(&[1]);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WorkerConfig;
    use xwire_model::config::DaemonConfig;

    /// The perf scenarios run workers with `WorkerConfig::default()` and say they measure
    /// what a daemon runs: the two defaults must agree.
    #[test]
    fn a_default_worker_is_what_a_default_daemon_runs() {
        let worker = WorkerConfig::default();
        let daemon = DaemonConfig::default();
        assert_eq!(worker.busy_poll, daemon.busy_poll);
        assert_eq!(
            worker.idle_spin.as_micros(),
            u128::from(daemon.idle_spin_us)
        );
        assert_eq!(worker.coalesce.as_micros(), u128::from(daemon.coalesce_us));
        assert_eq!(worker.nice, daemon.worker_nice);
        assert_eq!(
            (
                worker.min_frames_per_port,
                worker.frames_per_port,
                worker.resting_frames_per_worker
            ),
            (
                daemon.min_frames_per_port,
                daemon.frames_per_port,
                daemon.resting_frames_per_worker
            )
        );
    }
}
