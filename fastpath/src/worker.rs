//! A poll-mode worker: one thread, optionally pinned to a core, that owns its ports and
//! their shared UMEM, forwards frames between linked ports, and applies commands from the
//! control plane between batches.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender, TryRecvError};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use xsk_rs::config::{FrameSize, UmemConfig};
use xsk_rs::{FrameDesc, Umem};

use crate::counters::{Direction, DropReason, LinkCounters};
use crate::link_table::{LinkError, LinkTable, PortId, Verdict};
use crate::xdp_port::{PortError, XdpMode, XdpPort};

/// How a worker is set up.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The core to pin the worker to; `None` leaves it to the scheduler.
    pub core: Option<usize>,
    /// Keep spinning when idle (for benchmarks); otherwise back off and sleep in poll().
    pub busy_poll: bool,
    /// Frames taken from one port's RX ring at a time.
    pub batch: usize,
    /// The most ports this worker serves (the UMEM is sized for them up front).
    pub max_ports: usize,
    /// UMEM frames per port; half of them wait in the port's fill ring.
    pub frames_per_port: usize,
    /// Force an XDP mode instead of native-then-generic.
    pub xdp_mode: Option<XdpMode>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            core: None,
            busy_poll: false,
            batch: 64,
            max_ports: 8,
            frames_per_port: 1024,
            xdp_mode: None,
        }
    }
}

/// What the worker reports about a port it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    pub id: PortId,
    pub ifname: String,
    pub mode: XdpMode,
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
}

enum Command {
    AddPort {
        ifname: String,
        max_frame: usize,
        reply: Sender<Result<PortInfo, WorkerError>>,
    },
    RemovePort {
        id: PortId,
        reply: Sender<Result<(), WorkerError>>,
    },
    AddLink {
        uid: u64,
        a: PortId,
        b: PortId,
        reply: Sender<Result<Arc<LinkCounters>, WorkerError>>,
    },
    RemoveLink {
        uid: u64,
        reply: Sender<bool>,
    },
    Stop,
}

/// The control plane's handle on a worker; dropping it stops the worker.
pub struct Worker {
    commands: Sender<Command>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts a worker thread. It inherits the calling thread's network namespace, in
    /// which it opens its ports.
    pub fn spawn(config: WorkerConfig) -> Result<Worker, WorkerError> {
        let (commands, inbox) = bounded(64);
        let (ready_tx, ready_rx) = bounded(1);
        let thread = std::thread::Builder::new()
            .name("xwire-worker".into())
            .spawn(move || {
                if let Some(core) = config.core {
                    core_affinity::set_for_current(core_affinity::CoreId { id: core });
                }
                match Switch::new(&config) {
                    Ok(switch) => {
                        let _ = ready_tx.send(Ok(()));
                        switch.run(&config, &inbox);
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|e| WorkerError::Start(e.to_string()))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Worker {
                commands,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(WorkerError::Start("the worker thread died".into())),
        }
    }

    /// Opens an AF_XDP port on `ifname`, for frames up to `max_frame` bytes.
    pub fn add_port(&self, ifname: &str, max_frame: usize) -> Result<PortInfo, WorkerError> {
        self.ask(|reply| Command::AddPort {
            ifname: ifname.into(),
            max_frame,
            reply,
        })?
    }

    pub fn remove_port(&self, id: PortId) -> Result<(), WorkerError> {
        self.ask(|reply| Command::RemovePort { id, reply })?
    }

    /// Joins two ports; returns the link's counters, readable at any time.
    pub fn add_link(
        &self,
        uid: u64,
        a: PortId,
        b: PortId,
    ) -> Result<Arc<LinkCounters>, WorkerError> {
        self.ask(|reply| Command::AddLink { uid, a, b, reply })?
    }

    pub fn remove_link(&self, uid: u64) -> Result<bool, WorkerError> {
        self.ask(|reply| Command::RemoveLink { uid, reply })
    }

    fn ask<T>(&self, command: impl FnOnce(Sender<T>) -> Command) -> Result<T, WorkerError> {
        let (reply, answer) = bounded(1);
        self.commands
            .send(command(reply))
            .map_err(|_| WorkerError::Stopped)?;
        answer.recv().map_err(|_| WorkerError::Stopped)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A descriptor on its way out, the link it is counted on, and whether it is the last
/// (or only) descriptor of its frame.
#[derive(Clone, Copy)]
struct Outgoing {
    desc: FrameDesc,
    link: usize,
    direction: Direction,
    ends_frame: bool,
}

/// The longest descriptor chain: a 64 KiB frame in 4 KiB UMEM frames.
const MAX_CHAIN: usize = 17;

/// The worker thread's state. Field order matters: ports drop before the UMEM.
struct Switch {
    ports: Vec<Option<XdpPort>>,
    pending: Vec<Vec<Outgoing>>,
    /// Per port, the descriptors of a frame whose last part has not been received yet.
    rx_chains: Vec<Vec<FrameDesc>>,
    table: LinkTable,
    free: Vec<FrameDesc>,
    scratch: Vec<FrameDesc>,
    tx_scratch: Vec<FrameDesc>,
    umem: Umem,
}

/// Idle iterations before a non-busy worker sleeps in poll(), and how long it sleeps
/// there before looking at its command channel again.
const SPINS_BEFORE_SLEEP: u32 = 1000;
const SLEEP_MS: u16 = 10;

impl Switch {
    fn new(config: &WorkerConfig) -> Result<Switch, WorkerError> {
        let frames = (config.max_ports * config.frames_per_port).max(1) as u32;
        let umem_config = UmemConfig::builder()
            .frame_size(FrameSize::new(4096).map_err(|e| WorkerError::Start(e.to_string()))?)
            .build()
            .map_err(|e| WorkerError::Start(e.to_string()))?;
        let count = std::num::NonZeroU32::new(frames).expect("at least one frame");
        let (umem, free) =
            Umem::new(umem_config, count, false).map_err(|e| WorkerError::Start(e.to_string()))?;
        Ok(Switch {
            ports: Vec::new(),
            pending: Vec::new(),
            rx_chains: Vec::new(),
            table: LinkTable::default(),
            free,
            scratch: vec![FrameDesc::default(); config.batch.max(1)],
            tx_scratch: Vec::with_capacity(config.batch.max(1)),
            umem,
        })
    }

    fn run(mut self, config: &WorkerConfig, inbox: &Receiver<Command>) {
        let mut idle_spins = 0u32;
        loop {
            loop {
                match inbox.try_recv() {
                    Ok(Command::Stop) | Err(TryRecvError::Disconnected) => return,
                    Ok(command) => self.apply(command, config),
                    Err(TryRecvError::Empty) => break,
                }
            }
            if self.poll_once(config) > 0 {
                idle_spins = 0;
                continue;
            }
            idle_spins = idle_spins.saturating_add(1);
            if config.busy_poll || idle_spins < SPINS_BEFORE_SLEEP {
                std::hint::spin_loop();
            } else {
                self.sleep_until_traffic();
            }
        }
    }

    /// Blocks in poll() on every RX socket; a frame wakes the worker at once.
    fn sleep_until_traffic(&self) {
        let fds: Vec<_> = self.ports.iter().flatten().map(|p| p.raw_fd()).collect();
        if fds.is_empty() {
            std::thread::sleep(Duration::from_millis(u64::from(SLEEP_MS)));
            return;
        }
        // SAFETY: each fd belongs to a port in `self.ports`, open for this whole call.
        let borrowed: Vec<BorrowedFd<'_>> = fds
            .iter()
            .map(|&fd| unsafe { BorrowedFd::borrow_raw(fd) })
            .collect();
        let mut poll_fds: Vec<PollFd<'_>> = borrowed
            .iter()
            .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
            .collect();
        let _ = poll(&mut poll_fds, PollTimeout::from(SLEEP_MS));
    }

    fn apply(&mut self, command: Command, config: &WorkerConfig) {
        match command {
            Command::AddPort {
                ifname,
                max_frame,
                reply,
            } => {
                let _ = reply.send(self.add_port(&ifname, max_frame, config));
            }
            Command::RemovePort { id, reply } => {
                let _ = reply.send(self.remove_port(id));
            }
            Command::AddLink { uid, a, b, reply } => {
                let result = if self.port(a).is_none() {
                    Err(WorkerError::NoSuchPort(a))
                } else if self.port(b).is_none() {
                    Err(WorkerError::NoSuchPort(b))
                } else {
                    self.table.add_link(uid, a, b).map_err(WorkerError::from)
                };
                let _ = reply.send(result);
            }
            Command::RemoveLink { uid, reply } => {
                let _ = reply.send(self.table.remove_link(uid));
            }
            Command::Stop => {}
        }
    }

    fn port(&self, id: PortId) -> Option<&XdpPort> {
        self.ports.get(usize::from(id.0))?.as_ref()
    }

    fn add_port(
        &mut self,
        ifname: &str,
        max_frame: usize,
        config: &WorkerConfig,
    ) -> Result<PortInfo, WorkerError> {
        let slot = match self.ports.iter().position(Option::is_none) {
            Some(free) => free,
            None if self.ports.len() < config.max_ports => {
                self.ports.push(None);
                self.pending.push(Vec::with_capacity(config.batch));
                self.rx_chains.push(Vec::with_capacity(MAX_CHAIN));
                self.ports.len() - 1
            }
            None => return Err(PortError::NoRoom(config.max_ports).into()),
        };
        let port = XdpPort::open(&self.umem, ifname, config.xdp_mode, max_frame)?;
        let id = PortId(slot as u16);
        let info = PortInfo {
            id,
            ifname: port.ifname().into(),
            mode: port.mode(),
        };
        self.ports[slot] = Some(port);
        self.table.set_max_frame(id, max_frame);
        self.refill(config);
        Ok(info)
    }

    fn remove_port(&mut self, id: PortId) -> Result<(), WorkerError> {
        let slot = usize::from(id.0);
        let Some(port) = self.ports.get_mut(slot).and_then(Option::take) else {
            return Err(WorkerError::NoSuchPort(id));
        };
        self.table.remove_port(id);
        for out in self.pending[slot].drain(..) {
            self.free.push(out.desc);
        }
        self.free.append(&mut self.rx_chains[slot]);
        // Frames still in the closed socket's rings cannot be taken back one by one; they
        // are lost to this UMEM (a bounded leak of at most frames_per_port per removal).
        drop(port);
        Ok(())
    }

    /// One pass over every port; returns the frames moved.
    fn poll_once(&mut self, config: &WorkerConfig) -> usize {
        let mut moved = 0;
        for slot in 0..self.ports.len() {
            moved += self.receive_from(slot);
        }
        for slot in 0..self.ports.len() {
            self.flush_to(slot);
        }
        for port in self.ports.iter_mut().flatten() {
            port.kick();
            loop {
                // SAFETY: `scratch` holds descriptors this worker owns; completed ones come
                // back from the kernel and join the free list.
                let n = unsafe { port.completed(&mut self.scratch) };
                self.free.extend_from_slice(&self.scratch[..n]);
                if n < self.scratch.len() {
                    break;
                }
            }
        }
        self.refill(config);
        moved
    }

    fn receive_from(&mut self, slot: usize) -> usize {
        let Some(port) = self.ports[slot].as_mut() else {
            return 0;
        };
        // SAFETY: `scratch` is the worker's own buffer of descriptors, overwritten here.
        let n = unsafe { port.receive(&mut self.scratch) };
        let in_port = PortId(slot as u16);
        for i in 0..n {
            let desc = self.scratch[i];
            let chain = &mut self.rx_chains[slot];
            chain.push(desc);
            if desc.has_more_frames() && chain.len() < MAX_CHAIN {
                continue;
            }
            // A whole frame: one descriptor, or a chain of them (jumbo frames).
            let len: usize = chain.iter().map(|d| d.lengths().data()).sum();
            let verdict = if desc.has_more_frames() {
                // Longer than any frame the format allows: drop it whole.
                Verdict::Drop {
                    reason: DropReason::TooLarge,
                    link: None,
                }
            } else {
                self.table.decide(in_port, len)
            };
            match verdict {
                Verdict::Forward {
                    out,
                    link,
                    direction,
                } => {
                    let last = chain.len() - 1;
                    let pending = &mut self.pending[usize::from(out.0)];
                    for (k, desc) in chain.drain(..).enumerate() {
                        pending.push(Outgoing {
                            desc,
                            link,
                            direction,
                            ends_frame: k == last,
                        });
                    }
                }
                Verdict::Drop { reason, link } => {
                    if let Some(c) = link.and_then(|(link, direction)| {
                        self.table.counters(link).map(|c| (c, direction))
                    }) {
                        c.0.dropped(c.1, reason, 1);
                    }
                    self.free.append(chain);
                }
            }
        }
        n
    }

    fn flush_to(&mut self, slot: usize) {
        if self.pending[slot].is_empty() {
            return;
        }
        let Some(port) = self.ports[slot].as_mut() else {
            return;
        };
        let pending = &mut self.pending[slot];
        // Send only whole frames, as many as the TX ring has room for.
        let room = port.tx_room(pending.len());
        let cut = pending[..room]
            .iter()
            .rposition(|o| o.ends_frame)
            .map_or(0, |i| i + 1);
        self.tx_scratch.clear();
        self.tx_scratch
            .extend(pending[..cut].iter().map(|o| o.desc));
        // SAFETY: each pending descriptor came from this worker's RX rings and is in no
        // other place; those the TX ring takes pass to the kernel.
        let sent = unsafe { port.send(&self.tx_scratch) };
        for (i, out) in pending.drain(..).enumerate() {
            let Some(counters) = self.table.counters(out.link) else {
                // The link went away since this frame was received.
                if i >= sent {
                    self.free.push(out.desc);
                }
                continue;
            };
            let ends = u64::from(out.ends_frame);
            if i < sent {
                counters.forwarded(out.direction, ends, out.desc.lengths().data() as u64);
            } else {
                counters.dropped(out.direction, DropReason::TxFull, ends);
                self.free.push(out.desc);
            }
        }
    }

    /// Tops up every port's fill ring to half its share of frames.
    fn refill(&mut self, config: &WorkerConfig) {
        let target = config.frames_per_port / 2;
        for port in self.ports.iter_mut().flatten() {
            let want = target.saturating_sub(port.in_fill).min(self.free.len());
            if want == 0 {
                continue;
            }
            let from = self.free.len() - want;
            // SAFETY: the free list holds descriptors of this UMEM that nothing else uses.
            let given = unsafe { port.fill(&self.free[from..]) };
            // The ring took a prefix of what it was offered; the rest stays free.
            self.free.drain(from..from + given);
        }
    }
}
