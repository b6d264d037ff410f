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
use crate::worker::{Command, Join, PortChoice, PortInfo, PortKind, WorkerConfig, WorkerError};
use crate::xdp_port::{KernelDrops, Lent, PortError, XdpMode, XdpPort};
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

use forward::{Outgoing, MAX_CHAIN};
use sleep::Sleeper;

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

/// A port asked for: being opened by the keeper, or waiting to be, on an interface whose
/// last port the kernel is still releasing (the worker keeps forwarding and tries again
/// every `REBIND_PAUSE`).
struct WaitingPort {
    ifname: String,
    max_frame: usize,
    choice: PortChoice,
    join: Option<Join>,
    reply: crossbeam_channel::Sender<Result<PortInfo, WorkerError>>,
}

/// A port the keeper is opening, in the slot kept for it.
struct Opening {
    ticket: u64,
    index: usize,
    request: WaitingPort,
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
    /// Opens ports, opens and closes the sockets of resizes, and closes removed ports
    /// (`None`: it could not start; the worker opens and closes ports itself, and ports
    /// keep the size they open with).
    keeper: Option<keeper::Keeper>,
    /// The last number given to a resize or an open, which names it to the keeper.
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
        // When the last pass started, and how long the worker slept since, having nothing
        // to do: the rest of the time between two passes it was away (`AwayTimes`).
        let mut last_pass: Option<Instant> = None;
        let mut slept = Duration::ZERO;
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
            if self.resizing > 0 || !self.opening.is_empty() {
                self.take_from_keeper(now);
            }
            if self.resizing > 0 {
                self.advance_resizes(config, now);
            }
            let pass_start = Instant::now();
            if let Some(last) = last_pass {
                self.away.record(
                    pass_start
                        .saturating_duration_since(last)
                        .saturating_sub(slept),
                );
            }
            last_pass = Some(pass_start);
            slept = Duration::ZERO;
            let pass = self.poll_once(config, config.busy_poll);
            if pass.moved > 0 {
                idle_since = Instant::now();
                self.busy += idle_since.saturating_duration_since(self.now);
            }
            let now = Instant::now();
            let held_due_in = self
                .extras
                .next_due()
                .map(|due| due.saturating_duration_since(now));
            let since_work = now.saturating_duration_since(idle_since);
            match pace::next(pacing, pass.moved, pass.backlog, since_work, held_due_in) {
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

    fn port(&self, id: PortId) -> Option<&Port> {
        Some(&self.slots.get(usize::from(id.0))?.as_ref()?.port)
    }

    /// The index of a slot free for a new port (a new slot up to `max_ports`), and not
    /// kept for a port the keeper is opening.
    fn free_slot(&mut self, config: &WorkerConfig) -> Result<usize, WorkerError> {
        let kept = |index: usize| self.opening.iter().any(|o| o.index == index);
        let free = (0..self.slots.len()).find(|&i| self.slots[i].is_none() && !kept(i));
        match free {
            Some(free) => Ok(free),
            None if self.slots.len() < config.max_ports => {
                self.slots.push(None);
                Ok(self.slots.len() - 1)
            }
            None => Err(PortError::NoRoom(config.max_ports).into()),
        }
    }

    /// What a port for slot `index` opens with: its share of the resting frames, with
    /// itself and the ports being opened among the ports (traffic grows it, see
    /// `sizing`).
    fn open_spec(
        &self,
        ifname: &str,
        max_frame: usize,
        choice: PortChoice,
        config: &WorkerConfig,
        index: usize,
    ) -> open::OpenSpec {
        open::OpenSpec {
            ifname: ifname.into(),
            max_frame,
            choice,
            mode: config.xdp_mode,
            frames: self
                .limits
                .resting(self.resting_ports + self.opening.len() + 1),
            slot: index as u32,
            batch: config.batch,
        }
    }

    /// Opens a port here, in the worker, and installs it.
    #[cfg(test)]
    fn add_port(
        &mut self,
        ifname: &str,
        max_frame: usize,
        choice: PortChoice,
        config: &WorkerConfig,
    ) -> Result<PortInfo, WorkerError> {
        let index = self.free_slot(config)?;
        let spec = self.open_spec(ifname, max_frame, choice, config, index);
        let (port, kind) = open::open_port(&spec, self.redirect.as_deref())?;
        self.install(index, Slot::new(port, config.batch), ifname, max_frame)?;
        Ok(PortInfo {
            id: PortId(index as u16),
            ifname: ifname.into(),
            kind,
        })
    }

    /// Puts an open port's slot at `index`, its fill ring topped up and its socket
    /// watched.
    fn install(
        &mut self,
        index: usize,
        mut slot: Slot,
        ifname: &str,
        max_frame: usize,
    ) -> Result<(), WorkerError> {
        match &mut slot.port {
            Port::Xdp(port) => port.refill(),
            Port::Steered(port) => port.receiver().refill(),
            Port::Packet(_) => {}
        }
        let id = PortId(index as u16);
        let watched = self.sleeper.watch(slot.port.as_fd(), index as u64);
        self.resting_ports += usize::from(slot.rests);
        self.slots[index] = Some(slot);
        self.table.set_max_frame(id, max_frame);
        // A port the worker could not wake for would be served only while it spins.
        if let Err(source) = watched {
            let _ = self.remove_port(id);
            return Err(PortError::Unwatched {
                ifname: ifname.into(),
                cause: source,
            }
            .into());
        }
        Ok(())
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
            // Dropping the port detaches its program (if `remove_ports` has not already).
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
        // Without a keeper, or for a steered port, the port closes here, as it drops.
        let Some(keeper) = &self.keeper else {
            return;
        };
        match port {
            Port::Xdp(xdp) => keeper.close(keeper::Closing::Xdp(Box::new(xdp))),
            Port::Packet(packet) => keeper.close(keeper::Closing::Packet(packet)),
            Port::Steered(_) => {}
        }
    }

    /// Asks the keeper to open the port (or opens it here, without a keeper); the
    /// answer goes out once it is open (`port_opened`).
    fn try_add_port(&mut self, request: WaitingPort, config: &WorkerConfig) {
        let index = match self.free_slot(config) {
            Ok(index) => index,
            Err(e) => {
                let _ = request.reply.send(Err(e));
                return;
            }
        };
        let spec = self.open_spec(
            &request.ifname,
            request.max_frame,
            request.choice,
            config,
            index,
        );
        match &self.keeper {
            Some(keeper) => {
                self.tickets += 1;
                let ticket = self.tickets;
                keeper.ask(keeper::Job::Open { ticket, spec });
                self.opening.push(Opening {
                    ticket,
                    index,
                    request,
                });
            }
            None => {
                let opened = open::open_port(&spec, self.redirect.as_deref())
                    .map(|(port, kind)| (Slot::new(port, spec.batch), kind));
                self.install_opened(index, request, opened);
            }
        }
    }

    /// A port the keeper opened for the request of `ticket` (or could not open).
    fn port_opened(&mut self, ticket: u64, opened: Result<(Slot, PortKind), PortError>) {
        let Some(at) = self.opening.iter().position(|o| o.ticket == ticket) else {
            // Every open is answered, and only once: nothing else could have taken it.
            if let Ok((slot, _)) = opened {
                self.close(slot.port);
            }
            return;
        };
        let Opening { index, request, .. } = self.opening.swap_remove(at);
        self.install_opened(index, request, opened);
    }

    /// Puts an opened port in slot `index`, joins it to its peer if asked, and replies;
    /// or, when this worker closed a port on the interface a moment ago and the kernel
    /// still holds it, keeps the request for `retry_waiting`.
    fn install_opened(
        &mut self,
        index: usize,
        request: WaitingPort,
        opened: Result<(Slot, PortKind), PortError>,
    ) {
        let (slot, kind) = match opened {
            Err(PortError::Busy(_)) if self.still_releasing(&request.ifname) => {
                self.waiting.push(request);
                return;
            }
            Err(e) => {
                let _ = request.reply.send(Err(e.into()));
                return;
            }
            Ok(opened) => opened,
        };
        let installed = self
            .install(index, slot, &request.ifname, request.max_frame)
            .map(|()| PortInfo {
                id: PortId(index as u16),
                ifname: request.ifname.clone(),
                kind,
            });
        let result = match (installed, request.join) {
            (Ok(port), Some(join)) => match self.join_remote(port.id, join) {
                Ok(_) => Ok(port),
                Err(e) => {
                    let _ = self.remove_port(port.id);
                    Err(e)
                }
            },
            (result, _) => result,
        };
        let _ = request.reply.send(result);
    }

    fn retry_waiting(&mut self, config: &WorkerConfig) {
        if self.next_retry > Instant::now() {
            return;
        }
        self.next_retry = Instant::now() + REBIND_PAUSE;
        for request in std::mem::take(&mut self.waiting) {
            self.try_add_port(request, config);
        }
    }

    /// Whether this worker closed an AF_XDP port on `ifname` less than `RELEASE_GRACE` ago.
    fn still_releasing(&mut self, ifname: &str) -> bool {
        self.recently_closed
            .retain(|(_, at)| at.elapsed() < RELEASE_GRACE);
        let Ok(ifindex) = nix::net::if_::if_nametoindex(ifname) else {
            return false;
        };
        self.recently_closed.iter().any(|&(i, _)| i == ifindex)
    }
}

/// Room for the first `max_ports` slots (up to `TOUCHED_SLOTS`), its pages written once
/// now. A worker that grows its heap or touches a new page while its keeper maps and
/// pins a new port's UMEM waits for the keeper's hold on the process's memory map:
/// measured, one page fault in putting a new port's slot in place took 120 µs to 3.4
/// ms while the keeper opened other ports, and a busy 128-frame port beside lost frames.
fn touched_slots(max_ports: usize) -> Vec<Option<Slot>> {
    let mut slots = Vec::with_capacity(max_ports.min(TOUCHED_SLOTS));
    for room in slots.spare_capacity_mut() {
        *room = std::mem::MaybeUninit::zeroed();
    }
    slots
}

/// Slots whose room a worker makes at its start: 4,096 of about 550 bytes, 2.2 MiB,
/// under what four of the smallest ports' UMEMs pin.
const TOUCHED_SLOTS: usize = 4096;

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
