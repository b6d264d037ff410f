//! The worker thread's state and loop: its ports (each with the frames on their way out
//! of it), the link table, and one pass of receive, decide, send, recycle.
//!
//! Every AF_XDP port has a UMEM of its own (`xdp_port` says why). A frame forwarded
//! between two ports is copied once, from the receiving port's UMEM frame into a free
//! frame of the sending port's (or into an AF_PACKET port's TX ring); the received frame
//! goes straight back to its port. Each descriptor is in exactly one place at a time: its
//! port's free list, one of its port's kernel rings, its port's partial RX chain, or its
//! port's pending TX batch.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, TryRecvError};

use crate::link_table::{LinkTable, PortId};
use crate::packet_port::PacketPort;
use crate::remote_transport::RemoteTransport;
use crate::steered_port::SteeredPort;
use crate::worker::{Command, PortChoice, WorkerConfig, WorkerError};
use crate::xdp_port::{KernelDrops, Lent, XdpMode, XdpPort};
use crate::xdp_redirect::RedirectProgram;

mod commands;
mod extras;
mod forward;
mod keeper;
mod open;
mod pace;
mod remote;
mod resize;
mod sizing;
mod sleep;
mod stats;
mod steer;

pub(crate) use pace::longest_nap;

use forward::{Outgoing, MAX_CHAIN};
use open::{touched_slots, Opening, WaitingPort};
use sleep::Sleeper;
use steer::{PairOpening, PairSteering, Removal};

/// How long after closing an AF_XDP port the kernel may still hold its interface's queue:
/// it releases a socket's buffer pool in a work item that takes the RTNL lock, and a bind
/// before that gets EBUSY. Measured on 6.18: about 16 ms idle, over 250 ms while other
/// network namespaces are being deleted.
const RELEASE_GRACE: Duration = Duration::from_secs(5);
/// Pause between binds while a port waits out `RELEASE_GRACE`.
const REBIND_PAUSE: Duration = Duration::from_millis(2);

/// Slots of each ring of an AF_PACKET port (where AF_XDP cannot be had).
const PACKET_SLOTS: usize = 512;

/// How long a worker sleeps at most. How long it spins first is
/// `WorkerConfig::idle_spin`: a time, not a count of passes, since a pass over a thousand
/// ports takes a hundred times longer than one over ten.
const SLEEP: Duration = Duration::from_millis(10);
/// The longest a pass spends on commands before it serves the ports again.
const COMMAND_BUDGET: Duration = Duration::from_millis(2);

// Ports sit in the worker's slot vector and never move once open; boxing the larger one
// would only add a pointer to chase on every pass.
#[allow(clippy::large_enum_variant)]
enum Port {
    Xdp(XdpPort),
    Packet(PacketPort),
    /// One pod of a veth pair steered through the switch in place (`steered_port`).
    Steered(Box<SteeredPort>),
}

impl Port {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Port::Xdp(p) => p.as_fd(),
            Port::Packet(p) => p.as_fd(),
            Port::Steered(p) => p.as_fd(),
        }
    }
}

/// One open port and the frames on their way through it.
struct Slot {
    port: Port,
    /// Frames in this (AF_XDP) port's own UMEM frames waiting for its TX ring.
    pending: Vec<Outgoing>,
    /// The descriptors of a frame whose last part has not been received yet.
    rx_chain: Vec<Lent>,
    /// The descriptors still to come belong to a frame longer than `MAX_CHAIN`, which
    /// was dropped: they are dropped too, up to its last.
    rx_overflow: bool,
    /// An AF_XDP port's traffic, for its size (`None`: a port that is not resized).
    sizing: Option<resize::Sizing>,
    /// A resize under way (the port is its bridge meanwhile, see `resize`).
    resize: Option<Box<resize::Resize>>,
    /// What the kernel dropped at the sockets this port had before its current one.
    drops_before: KernelDrops,
    /// The worker's program is still attached for this port, which a resize left an
    /// AF_PACKET port: its interface, slot and mode, to release on removal.
    stranded: Option<(u32, u32, XdpMode)>,
    /// Opened as a resizable port: one of those that share the worker's resting frames.
    rests: bool,
}

impl Slot {
    /// A new port's slot, with room for `batch` frames on their way out.
    fn new(port: Port, batch: usize) -> Slot {
        // Resized only where the worker's program steers the frames (a bridge needs its
        // socket map).
        let resizable = matches!(&port, Port::Xdp(p) if p.redirect().is_some());
        Slot {
            port,
            pending: Vec::with_capacity(batch),
            rx_chain: Vec::with_capacity(MAX_CHAIN),
            rx_overflow: false,
            sizing: resizable.then(|| resize::Sizing::new(Instant::now())),
            resize: None,
            drops_before: KernelDrops::default(),
            stranded: None,
            rests: resizable,
        }
    }
}

/// The worker thread's state.
pub(crate) struct Switch {
    /// Indexed by `PortId`; `None` where a port was removed (reused by the next one).
    slots: Vec<Option<Slot>>,
    /// The transport to peer nodes, once attached.
    peers: Option<Box<dyn RemoteTransport>>,
    /// One frame gathered from its descriptor chain (a jumbo frame).
    frame_buf: Vec<u8>,
    table: LinkTable,
    /// Frames taken from a port's RX ring in one receive.
    received: Vec<Lent>,
    /// The XDP program of this worker's AF_XDP ports (`None`: libxdp's program, one per
    /// interface, when this one could not be loaded or the worker opens no AF_XDP port).
    redirect: Option<Arc<RedirectProgram>>,
    /// Readable when the control plane has sent a command; `sleeper` watches it.
    woken: UnixDatagram,
    /// Where the worker sleeps when idle: it watches every socket the worker reads.
    sleeper: Sleeper,
    /// Interfaces whose AF_XDP port closed less than `RELEASE_GRACE` ago, and when.
    recently_closed: Vec<(u32, Instant)>,
    waiting: Vec<WaitingPort>,
    next_retry: Instant,
    /// Ports the keeper is opening; their slots are kept free for them.
    opening: Vec<Opening>,
    /// Steered pairs the keeper is opening, likewise.
    pairs_opening: Vec<PairOpening>,
    /// Steered pairs in place and linked, whose programs the keeper is putting on.
    pairs_steering: Vec<PairSteering>,
    /// Ports closing together once their steering is off and their frames have gone on.
    removing: Vec<Removal>,
    /// When the current pass began: the time frames queued for peers are held from.
    now: Instant,
    /// Impairments and capture taps of the links that have them, and the frames held.
    extras: extras::LinkExtras,
    /// Time spent in passes that moved frames, and when the worker started (`stats`).
    busy: Duration,
    started: Instant,
    /// How long the worker was away from its ports between passes (`stats`).
    away: crate::stats::AwayTimes,
    /// The sizes AF_XDP ports may have, when the worker next looks at their traffic,
    /// and how many resizes are under way.
    limits: sizing::Limits,
    next_look: Instant,
    resizing: usize,
    /// The open ports that share the worker's resting frames (`Slot::rests`).
    resting_ports: usize,
    /// Opens ports and steered pairs, opens and closes the sockets of resizes, and
    /// closes removed ports (`None`: it could not start; the worker opens and closes
    /// ports itself, and ports keep the size they open with).
    keeper: Option<keeper::Keeper>,
    /// The last number given to a resize, an open or a removal, which names it to the
    /// keeper.
    tickets: u64,
    /// DATAGRAM frames the last pass delivered from peers (see `forward::port_batches`).
    from_peers: usize,
    /// Ports frames were queued to in this pass (see `forward::OtherSlots`).
    touched: Vec<u16>,
    /// A sparse pass's ports (`forward::poll_sparse`), those the last one left with
    /// work, each port's number of the last pass it was noted in, and the pass's.
    visit: Vec<usize>,
    carry: Vec<usize>,
    visited: Vec<u32>,
    pass_number: u32,
}

impl Switch {
    /// `wake` is the sending end of `woken`'s pair: the keeper writes to it when it has
    /// opened a port, so that a sleeping worker takes the port at once.
    pub(crate) fn new(
        config: &WorkerConfig,
        woken: UnixDatagram,
        wake: UnixDatagram,
    ) -> Result<Switch, WorkerError> {
        if config.frames_per_port < 2 {
            return Err(WorkerError::Start(format!(
                "frames_per_port must be at least 2 (it is {})",
                config.frames_per_port
            )));
        }
        let sleeper = Sleeper::new()
            .and_then(|s| s.watch(woken.as_fd(), sleep::NOT_A_PORT).map(|()| s))
            .map_err(|e| WorkerError::Start(format!("an epoll set to sleep on: {e}")))?;
        let redirect = match config.ports {
            PortChoice::AfPacket => None,
            _ => RedirectProgram::load(config.max_ports as u32)
                .map_err(|e| tracing::warn!(error = %e, "the worker's XDP program did not load"))
                .ok()
                .map(Arc::new),
        };
        let keeper = keeper::Keeper::spawn(config.core, redirect.clone(), wake)
            .map_err(|e| {
                tracing::warn!(error = %e, "no keeper thread: ports open in the worker and keep their size")
            })
            .ok();
        Ok(Switch {
            sleeper,
            slots: touched_slots(config.max_ports),
            peers: None,
            frame_buf: Vec::with_capacity(64 * 1024),
            table: LinkTable::default(),
            received: Vec::with_capacity(config.batch.max(1)),
            redirect,
            woken,
            recently_closed: Vec::new(),
            waiting: Vec::new(),
            next_retry: Instant::now(),
            opening: Vec::new(),
            pairs_opening: Vec::new(),
            pairs_steering: Vec::new(),
            removing: Vec::new(),
            now: Instant::now(),
            extras: extras::LinkExtras::default(),
            busy: Duration::ZERO,
            started: Instant::now(),
            away: crate::stats::AwayTimes::default(),
            from_peers: 0,
            limits: sizing::Limits::new(
                config.min_frames_per_port,
                config.frames_per_port,
                config.resting_frames_per_worker,
                config.shrink_after,
            ),
            next_look: Instant::now(),
            resizing: 0,
            resting_ports: 0,
            keeper,
            tickets: 0,
            touched: Vec::new(),
            visit: Vec::new(),
            carry: Vec::new(),
            visited: Vec::new(),
            pass_number: 0,
        })
    }

    pub(crate) fn run(mut self, config: &WorkerConfig, inbox: &Receiver<Command>) {
        // Naps as long as asked: a thread's default timer slack (50 µs) would stretch
        // each one by up to that much. Without it (refused), naps are only longer.
        let _ = nix::sys::prctl::set_timerslack(1);
        set_nice(config.nice);
        let pacing = pace::Pacing {
            busy_poll: config.busy_poll,
            idle_spin: config.idle_spin,
            coalesce: config.coalesce,
        };
        let mut idle_since = Instant::now();
        // When a pass last took a frame from the worker's own ports (`pace`).
        let mut ports_idle_since = idle_since;
        // When the last pass started, and how long the worker slept since, having nothing
        // to do: the rest of the time between two passes it was away (`AwayTimes`).
        let mut last_pass: Option<Instant> = None;
        let mut slept = Duration::ZERO;
        // When the passes that have followed one another at once began.
        let mut streak_since: Option<Instant> = None;
        loop {
            // Commands for at most `COMMAND_BUDGET` per pass: a burst of them (a restart
            // opens a port per wire) must not stop forwarding or the peer transport's
            // handshakes for its whole length.
            let commands_since = Instant::now();
            while commands_since.elapsed() < COMMAND_BUDGET {
                match inbox.try_recv() {
                    Ok(Command::Stop) | Err(TryRecvError::Disconnected) => {
                        // Peers learn at once that this node's wires are gone, instead
                        // of after their idle timeout.
                        if let Some(peers) = self.peers.as_mut() {
                            peers.close();
                        }
                        return;
                    }
                    Ok(command) => {
                        let only_reads = command.only_reads();
                        self.apply(command, config);
                        if !only_reads {
                            idle_since = Instant::now();
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
            if !self.waiting.is_empty() {
                self.retry_waiting(config);
            }
            let now = Instant::now();
            if now >= self.next_look {
                self.look_at_sizes(now);
                self.next_look = now + sizing::LOOK_EVERY;
            }
            if self.awaits_keeper() {
                self.take_from_keeper(now);
            }
            if self.resizing > 0 {
                self.advance_resizes(config, now);
            }
            let pass_start = Instant::now();
            // Since the pass before started: the time this pass's frames gathered in.
            let cycle = match last_pass {
                Some(last) => {
                    let cycle = pass_start.saturating_duration_since(last);
                    self.away.record(cycle.saturating_sub(slept));
                    cycle
                }
                None => Duration::MAX,
            };
            last_pass = Some(pass_start);
            slept = Duration::ZERO;
            let pass = self.poll_once(config, config.busy_poll);
            if !self.removing.is_empty() {
                self.finish_removals();
            }
            if pass.moved > 0 {
                idle_since = Instant::now();
                self.busy += idle_since.saturating_duration_since(self.now);
            }
            let now = Instant::now();
            let held_due_in = self
                .extras
                .next_due()
                .map(|due| due.saturating_duration_since(now));
            if pass.from_ports > 0 {
                ports_idle_since = now;
            }
            let streak = match streak_since {
                Some(since) => now.saturating_duration_since(since),
                None => Duration::ZERO,
            };
            let after = pace::AfterPass {
                moved: pass.moved,
                backlog: pass.backlog,
                streak,
                cycle,
                since_work: now.saturating_duration_since(idle_since),
                since_port_work: now.saturating_duration_since(ports_idle_since),
                held_due_in,
            };
            let next = pace::next(pacing, after);
            streak_since = match next {
                pace::Next::Pass => Some(streak_since.unwrap_or(pass_start)),
                _ => None,
            };
            match next {
                pace::Next::Pass => {}
                // The kernel work our sends start (the receiving veth's softirq) runs on
                // this CPU; once it overflows into ksoftirqd, a worker that spins keeps it
                // waiting for a scheduler slice, which costs milliseconds and drops. An
                // empty pass hands it the CPU; with nothing else to run this returns at once.
                // Time yielded to another thread is time away: the worker had work.
                pace::Next::Yield => std::thread::yield_now(),
                pace::Next::Nap(time) => {
                    let asleep = Instant::now();
                    std::thread::sleep(time);
                    // A nap that ends late was kept from the worker by the scheduler.
                    slept += asleep.elapsed().min(time);
                }
                pace::Next::NapUntilPeer { shortest, longest } => {
                    let asleep = Instant::now();
                    match self.peers.as_ref() {
                        Some(peers) => sleep::nap_until_readable(peers.as_fd(), shortest, longest),
                        // No peer transport: nothing would end the wait early, so
                        // only its short part.
                        None => std::thread::sleep(shortest),
                    }
                    slept += asleep.elapsed().min(longest);
                }
                pace::Next::Sleep => {
                    let asleep = Instant::now();
                    self.sleep_until_traffic();
                    slept += asleep.elapsed();
                }
            }
        }
    }

    /// Sleeps until a port or the peer transport has something to read, a command
    /// arrives, or the peer transport's next timer is due; a frame wakes the worker at
    /// once.
    fn sleep_until_traffic(&mut self) {
        let mut limit = if self.waiting.is_empty() {
            SLEEP
        } else {
            REBIND_PAUSE
        };
        if let Some(timer) = self.peers.as_mut().and_then(|peers| peers.timeout()) {
            limit = limit.min(timer);
        }
        if self.resizing > 0 {
            let now = Instant::now();
            let next = self
                .slots
                .iter()
                .flatten()
                .filter_map(|slot| slot.resize.as_ref().map(|r| r.due(now)))
                .min();
            if let Some(due) = next {
                limit = limit.min(due.saturating_duration_since(Instant::now()));
            }
        }
        if let Some(due) = self.extras.next_due() {
            // Wakes `HELD_SPIN` early (waking takes a moment); `run` passes the rest of
            // the way.
            let early = due
                .saturating_duration_since(Instant::now())
                .saturating_sub(pace::HELD_SPIN);
            limit = limit.min(early);
        }
        self.sleeper.sleep(limit);
        let mut drain = [0u8; 64];
        while self.woken.recv(&mut drain).is_ok() {}
    }

    /// Whether the keeper has work of this worker's under way: a resize, an open, or a
    /// steered pair to open, or whose programs to put on or take off.
    fn awaits_keeper(&self) -> bool {
        self.resizing > 0
            || !self.opening.is_empty()
            || !self.pairs_opening.is_empty()
            || !self.pairs_steering.is_empty()
            || !self.removing.is_empty()
    }

    fn port(&self, id: PortId) -> Option<&Port> {
        Some(&self.slots.get(usize::from(id.0))?.as_ref()?.port)
    }

    fn port_mut(&mut self, id: PortId) -> Option<&mut Port> {
        Some(&mut self.slots.get_mut(usize::from(id.0))?.as_mut()?.port)
    }

    /// Closes a port. Its frames, wherever they are, go with its UMEM.
    fn remove_port(&mut self, id: PortId) -> Result<(), WorkerError> {
        let Some(slot) = self.slots.get_mut(usize::from(id.0)).and_then(Option::take) else {
            return Err(WorkerError::NoSuchPort(id));
        };
        if let Some(link) = self.table.link_of_port(id) {
            self.extras.forget(link);
        }
        self.table.remove_port(id);
        self.sleeper.unwatch(slot.port.as_fd());
        self.resting_ports -= usize::from(slot.rests);
        // A port in the middle of a resize, or left an AF_PACKET port by one, still has
        // the worker's program on its interface.
        let (attachment, resize_socket) = match slot.resize {
            Some(resize) => {
                self.resizing -= 1;
                if let Some(keeper) = &self.keeper {
                    keeper.ask(keeper::Job::Cancel(resize.ticket()));
                }
                (Some(resize.attachment()), resize.into_socket())
            }
            None => (slot.stranded, None),
        };
        if let Some((ifindex, index, mode)) = attachment {
            self.release(ifindex, index, mode);
            self.recently_closed
                .retain(|(_, at)| at.elapsed() < RELEASE_GRACE);
            self.recently_closed.push((ifindex, Instant::now()));
        }
        // Only after the program's release: the keeper takes it off the interface before
        // any of the port's sockets closes and frees the queue for a new port (`close`).
        if let (Some(socket), Some(keeper)) = (resize_socket, &self.keeper) {
            keeper.close(socket);
        }
        if let (Port::Steered(port), Some(program)) = (&slot.port, &self.redirect) {
            // Closing the port detaches its program (if `remove_ports` has not already).
            program.unregister_socket(port.slot());
        }
        if let Port::Xdp(xdp) = &slot.port {
            if let Some((ifindex, index)) = xdp.redirect() {
                self.release(ifindex, index, xdp.mode());
            }
            self.recently_closed
                .retain(|(_, at)| at.elapsed() < RELEASE_GRACE);
            self.recently_closed.push((xdp.ifindex(), Instant::now()));
        }
        self.close(slot.port);
        Ok(())
    }

    /// Stops steering interface `ifindex`'s frames to socket `index` at once, and takes
    /// the program off the interface in the keeper where there is one (see `close`).
    fn release(&self, ifindex: u32, index: u32, mode: XdpMode) {
        let Some(program) = &self.redirect else {
            return;
        };
        program.forget(ifindex, index);
        match &self.keeper {
            Some(keeper) => keeper.ask(keeper::Job::Detach { ifindex, mode }),
            None => crate::xdp_redirect::detach(ifindex, mode),
        }
    }

    /// Closes a removed port's socket in the keeper where there is one, after the
    /// program's `release` asked of it. Both wait in the kernel (an AF_XDP socket's
    /// release waits out an RCU grace period, a veth's program comes off under the
    /// interfaces' lock): done here, removing a port held the worker off its other ports
    /// for 5 to 15 ms, and a port carrying 48k frames a second beside it lost frames to
    /// `rx_fill_ring_empty` (`fastpath/tests/away.rs`). A port added again on the same
    /// interface meanwhile waits for the queue as after any close (`still_releasing`).
    fn close(&self, port: Port) {
        // Without a keeper the port closes here, as it drops.
        let Some(keeper) = &self.keeper else {
            return;
        };
        match port {
            Port::Xdp(xdp) => keeper.close(keeper::Closing::Xdp(Box::new(xdp))),
            Port::Packet(packet) => keeper.close(keeper::Closing::Packet(packet)),
            Port::Steered(steered) => keeper.close(keeper::Closing::Steered(steered)),
        }
    }
}

/// Gives the calling (worker) thread the nice value `nice` and the shortest scheduler
/// slice, or says in the log why not.
fn set_nice(nice: i8) {
    if let Err(e) = crate::nice::set(nice, crate::nice::SLICE) {
        tracing::warn!(
            nice,
            error = %e,
            "the worker keeps its nice value {}: lowering it needs CAP_SYS_NICE",
            crate::nice::get()
        );
    }
}
