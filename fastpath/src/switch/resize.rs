//! Resizing an AF_XDP port while it carries traffic, without losing a frame: the worker
//! looks at its ports' traffic every `sizing::LOOK_EVERY` (`sizing.rs` decides), and a
//! port that should have another number of UMEM frames gets a new socket of that size.
//!
//! A UMEM's size is fixed when it is registered, and an interface's queue takes a second
//! socket only once the kernel has released the first, in deferred work (tens of
//! milliseconds, hundreds while namespaces are being deleted). Meanwhile an AF_PACKET
//! socket on the interface, the bridge, carries the port's frames both ways: with the
//! old socket's entry gone from the worker's socket map, the XDP program passes the
//! interface's frames to the kernel's stack, where the bridge sees them. The keeper
//! thread opens and closes the sockets (`keeper.rs` says why). In steps:
//! 1. `Bridging`: the keeper opens the bridge; the old socket carries on.
//! 2. `Leaving`: the old socket is out of the map and no longer fed; the worker's passes
//!    empty it for `HANDOVER` (frames the kernel was redirecting as the entry went land
//!    within it), while the bridge gathers what comes.
//! 3. `Rebinding`: the bridge is the port, and the old socket goes to the keeper to be
//!    closed; the keeper binds the new socket once the kernel lets it.
//! 4. `Settling`: the new socket is in the map and gathers frames for `HANDOVER` while
//!    the passes empty the bridge; then it is the port and the bridge goes to the keeper.
//!
//! What reached a socket earlier is forwarded before anything a later one took, so the
//! order of a wire's frames holds. A port whose new socket cannot be bound stays an
//! AF_PACKET port.

use std::time::{Duration, Instant};

use crate::link_table::PortId;
use crate::worker::WorkerConfig;
use crate::xdp_port::{KernelDrops, XdpMode};

use super::keeper::{Closing, Done, Job};
use super::sizing::{self, Traffic};
use super::{Port, Slot, Switch};

/// How long a socket leaving the map, or joining it, overlaps with the bridge: far more
/// than a NAPI poll, in which the kernel hands redirected frames to a socket. With busy
/// CPUs that poll may run late (in ksoftirqd, behind other threads): at 250 us the
/// sizing test lost 4-19 frames, uncounted, in 1 run of 5 with both cores spinning, and
/// none in 20 at 5 ms. A new socket is sized for 20 ms of its traffic, so it holds what
/// gathers meanwhile. (An RCU grace period after the entry goes, `membarrier`'s global
/// command, would make the old socket's last frames certain rather than likely.)
const HANDOVER: Duration = Duration::from_millis(5);
/// The least a bridge's rings hold. A busy interface keeps its queue from the new
/// socket for as long as its traffic flows (see `keeper.rs`), so the bridge may carry the
/// port for seconds, at whatever rate the traffic climbs to: the first look saw only the
/// start of it (a TCP transfer's first 20 ms asked for 256 frames, and its bridge of
/// 256 then dropped 1379 frames in 3 s).
const BRIDGE_SLOTS: usize = 1024;
/// How often the worker asks the keeper for what it opened, at least, while a resize
/// waits on it.
pub(super) const KEEPER_POLL: Duration = Duration::from_millis(1);

/// What the worker keeps of a resizable port's traffic between two looks.
pub(super) struct Sizing {
    /// Descriptors received, and frames given to send, since the last look: the UMEM
    /// holds both what waits in the fill ring and what waits to be sent. Sized by what
    /// it received alone, the port that carries a TCP flow's data to its pod (and only
    /// the ACKs back) stayed small, and dropped data as TxFull and NoBuffer.
    pub(super) carried: u64,
    last_look: Instant,
    /// When frames were first taken from the port since the last look: its rate is
    /// what it carried over the time since then. Over the whole round, a flow that
    /// began late in it read as a fraction of its rate, and the port grew too little.
    busy_since: Option<Instant>,
    /// Since when the port has needed less than a quarter of its frames.
    calm_since: Option<Instant>,
    /// The kernel's count of frames it found no fill buffer for, at the last look.
    fill_empty_seen: u64,
}

impl Sizing {
    /// The stretch the port's rate is measured over: from its first frames since the
    /// last look (no shorter than `EARLIEST_LOOK`, so a burst is not read as a rate), or
    /// from the last look for a port that only sent.
    fn window(&self, now: Instant) -> Duration {
        let since_look = now.saturating_duration_since(self.last_look);
        match self.busy_since {
            Some(since) => now
                .saturating_duration_since(since)
                .max(sizing::EARLIEST_LOOK.min(since_look)),
            None => since_look,
        }
    }

    pub(super) fn new(now: Instant) -> Sizing {
        Sizing {
            carried: 0,
            last_look: now,
            busy_since: None,
            calm_since: None,
            fill_empty_seen: 0,
        }
    }
}

/// A resize under way.
pub(super) struct Resize {
    /// Names what the keeper hands back for this resize.
    ticket: u64,
    ifname: String,
    frames: usize,
    max_frame: usize,
    mode: XdpMode,
    /// The interface and the port's slot in the worker's program.
    ifindex: u32,
    program_slot: u32,
    stage: Stage,
}

enum Stage {
    Bridging,
    Leaving {
        bridge: crate::packet_port::PacketPort,
        until: Instant,
    },
    Rebinding,
    Settling {
        port: Box<crate::xdp_port::XdpPort>,
        until: Instant,
    },
}

impl Resize {
    /// When this resize next has something to do: a time, or a moment after the keeper
    /// may have answered.
    pub(super) fn due(&self, now: Instant) -> Instant {
        match &self.stage {
            Stage::Leaving { until, .. } | Stage::Settling { until, .. } => *until,
            Stage::Bridging | Stage::Rebinding => now + KEEPER_POLL,
        }
    }

    /// Whether a handover (the `Leaving` or `Settling` stage) has run its time.
    fn handover_ends(&self, now: Instant) -> bool {
        match self.stage {
            Stage::Leaving { until, .. } | Stage::Settling { until, .. } => until <= now,
            Stage::Bridging | Stage::Rebinding => false,
        }
    }

    /// What names this resize to the keeper.
    pub(super) fn ticket(&self) -> u64 {
        self.ticket
    }

    /// The interface, slot and mode the worker's program must let go of when the port
    /// is removed in the middle of this.
    pub(super) fn attachment(&self) -> (u32, u32, XdpMode) {
        (self.ifindex, self.program_slot, self.mode)
    }

    /// The socket this resize holds apart from the port's, to close.
    pub(super) fn into_socket(self) -> Option<Closing> {
        match self.stage {
            Stage::Leaving { bridge, .. } => Some(Closing::Packet(bridge)),
            Stage::Settling { port, .. } => Some(Closing::Xdp(port)),
            Stage::Bridging | Stage::Rebinding => None,
        }
    }
}

impl Switch {
    /// Looks at every resizable port's traffic, and starts the resizes it calls for.
    pub(super) fn look_at_sizes(&mut self, now: Instant) {
        for index in 0..self.slots.len() {
            self.look_at_size(index, now);
        }
    }

    /// After frames were taken from port `index`: looks at its size now if its traffic
    /// since the last look already asks for more frames (`sizing::outgrown`), rather
    /// than at the next round.
    pub(super) fn look_early(&mut self, index: usize) {
        let now = self.now;
        let Some(Slot {
            sizing: Some(sizing),
            resize: None,
            port: Port::Xdp(port),
            ..
        }) = self.slots[index].as_mut()
        else {
            return;
        };
        let busy_since = *sizing.busy_since.get_or_insert(now);
        if sizing::outgrown(
            sizing.carried,
            now.saturating_duration_since(busy_since),
            port.frames(),
            port.low_water(),
            self.limits,
        ) {
            self.look_at_size(index, now);
        }
    }

    /// Looks at port `index`'s traffic since its last look, and starts the resize it
    /// calls for.
    fn look_at_size(&mut self, index: usize, now: Instant) {
        let Some(slot) = self.slots[index].as_mut() else {
            return;
        };
        let (Some(sizing), None, Port::Xdp(port)) =
            (&mut slot.sizing, &slot.resize, &mut slot.port)
        else {
            return;
        };
        let window = sizing.window(now);
        let (lowest_fill, fill_target) = port.take_low_water();
        // The kernel's count costs a system call: read only for a port with traffic.
        let ran_empty = sizing.carried > 0
            && port.kernel_drops().is_ok_and(|d| {
                let seen = std::mem::replace(&mut sizing.fill_empty_seen, d.rx_fill_ring_empty);
                if d.rx_fill_ring_empty > seen {
                    tracing::debug!(
                        ifname = port.ifname(),
                        frames = port.frames(),
                        dropped = d.rx_fill_ring_empty - seen,
                        lowest_fill,
                        fill_target,
                        "the kernel found the port's fill ring empty"
                    );
                }
                d.rx_fill_ring_empty > seen
            });
        let traffic = Traffic {
            frames: port.frames(),
            rate: sizing.carried as f64 / window.as_secs_f64().max(1e-3),
            lowest_fill,
            fill_target,
            ran_empty,
            calm_for: sizing
                .calm_since
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since)),
        };
        sizing.carried = 0;
        sizing.last_look = now;
        sizing.busy_since = None;
        let look = sizing::look(
            traffic,
            self.limits,
            self.limits.resting(self.resting_ports),
        );
        sizing.calm_since = match (look.calm, sizing.calm_since) {
            (true, since) => since.or(Some(now)),
            (false, _) => None,
        };
        if let Some(frames) = look.resize {
            self.start_resize(index, frames);
        }
    }

    /// Asks the keeper for a bridge for port `index`, to reopen it with `frames`.
    fn start_resize(&mut self, index: usize, frames: usize) {
        let (Some(keeper), Some(slot)) = (&self.keeper, self.slots[index].as_mut()) else {
            return;
        };
        let Port::Xdp(port) = &slot.port else {
            return;
        };
        let Some((ifindex, program_slot)) = port.redirect() else {
            // Steered by libxdp's program, whose map the worker cannot empty.
            return;
        };
        let max_frame = self.table.max_frame(PortId(index as u16));
        tracing::debug!(
            ifname = port.ifname(),
            from = port.frames(),
            to = frames,
            "resizing a port"
        );
        self.tickets += 1;
        let ticket = self.tickets;
        keeper.ask(Job::Bridge {
            ticket,
            ifname: port.ifname().to_owned(),
            max_frame,
            slots: frames.max(BRIDGE_SLOTS),
        });
        slot.resize = Some(Box::new(Resize {
            ticket,
            ifname: port.ifname().to_owned(),
            frames,
            max_frame,
            mode: port.mode(),
            ifindex,
            program_slot,
            stage: Stage::Bridging,
        }));
        self.resizing += 1;
    }

    /// Takes what the keeper has done: new ports and steered pairs opened, pairs'
    /// steering taken off, and the sockets of resizes.
    pub(super) fn take_from_keeper(&mut self, now: Instant) {
        while let Some(done) = self.keeper.as_ref().and_then(|k| k.done()) {
            self.keeper_done(done, now);
        }
    }

    /// Moves every resize whose time has come a step on.
    pub(super) fn advance_resizes(&mut self, config: &WorkerConfig, now: Instant) {
        for index in 0..self.slots.len() {
            let due = self.slots[index]
                .as_ref()
                .and_then(|slot| slot.resize.as_ref())
                .is_some_and(|resize| resize.handover_ends(now));
            if due {
                self.hand_over(index, config, now);
            }
        }
    }

    /// A port or a steered pair from the keeper (`port_opened`, `pair_opened`), a pair's
    /// steering put on (`pair_attached`) or taken off (`pair_unsteered`), or a socket: the
    /// next step of its resize, or closed again if that resize is gone (its port was
    /// removed).
    fn keeper_done(&mut self, done: Done, now: Instant) {
        let ticket = match done {
            Done::Opened { ticket, result } => return self.port_opened(ticket, result),
            Done::PairOpened { ticket, result } => return self.pair_opened(ticket, result),
            Done::Attached { ticket, result } => return self.pair_attached(ticket, result),
            Done::Unsteered { ticket } => return self.pair_unsteered(ticket),
            Done::Bridge { ticket, .. } | Done::Socket { ticket, .. } => ticket,
        };
        let found = self.slots.iter().position(|slot| {
            slot.as_ref()
                .and_then(|s| s.resize.as_ref())
                .is_some_and(|r| r.ticket == ticket)
        });
        let Some(index) = found else {
            if let Some(keeper) = &self.keeper {
                match done {
                    Done::Bridge { result: Ok(b), .. } => keeper.close(Closing::Packet(b)),
                    Done::Socket { result: Ok(p), .. } => keeper.close(Closing::Xdp(p)),
                    _ => {}
                }
            }
            return;
        };
        let program = self.redirect.as_ref().expect("a resize needs the program");
        let slot = self.slots[index].as_mut().expect("found above");
        let mut resize = slot.resize.take().expect("found above");
        let stage = std::mem::replace(&mut resize.stage, Stage::Rebinding);
        match (done, stage) {
            (
                Done::Bridge {
                    result: Ok(bridge), ..
                },
                Stage::Bridging,
            ) => {
                program.unregister_socket(resize.program_slot);
                resize.stage = Stage::Leaving {
                    bridge,
                    until: now + HANDOVER,
                };
                slot.resize = Some(resize);
            }
            (
                Done::Socket {
                    result: Ok(mut port),
                    ..
                },
                Stage::Rebinding,
            ) => {
                port.refill();
                let registered = program
                    .register(resize.ifindex, resize.program_slot, port.raw_fd())
                    .map(|()| port.steered_by(resize.ifindex, resize.program_slot, resize.mode));
                match registered {
                    Ok(()) => {
                        resize.stage = Stage::Settling {
                            port,
                            until: now + HANDOVER,
                        };
                        slot.resize = Some(resize);
                    }
                    Err(e) => {
                        tracing::warn!(ifname = %resize.ifname, error = %e, "cannot steer to the resized socket: the port stays an AF_PACKET port");
                        if let Some(keeper) = &self.keeper {
                            keeper.close(Closing::Xdp(port));
                        }
                        slot.strand(resize.attachment());
                        self.resizing -= 1;
                    }
                }
            }
            (Done::Bridge { result: Err(e), .. }, Stage::Bridging) => {
                tracing::warn!(ifname = %resize.ifname, error = %e, "cannot resize the port: no bridge");
                slot.sizing = None;
                self.resizing -= 1;
            }
            (Done::Socket { result: Err(e), .. }, Stage::Rebinding) => {
                tracing::warn!(ifname = %resize.ifname, error = %e, "cannot reopen the port's AF_XDP socket: it stays an AF_PACKET port");
                slot.strand(resize.attachment());
                self.resizing -= 1;
            }
            (_, stage) => {
                // An answer that does not fit its stage cannot happen: one job at a time.
                resize.stage = stage;
                slot.resize = Some(resize);
            }
        }
    }

    /// The end of a handover: the old socket, or the bridge, has been emptied and goes
    /// to the keeper; the bridge, or the new socket, is the port from now on.
    fn hand_over(&mut self, index: usize, config: &WorkerConfig, now: Instant) {
        // Everything the port has received now, as a pass takes it.
        self.receive_all(index, config.batch, super::forward::MAX_BATCHES_PER_PASS);
        let Switch {
            slots,
            sleeper,
            table,
            keeper,
            resizing,
            ..
        } = self;
        let (Some(slot), Some(keeper)) = (slots[index].as_mut(), keeper.as_ref()) else {
            return;
        };
        let Some(mut resize) = slot.resize.take() else {
            return;
        };
        match std::mem::replace(&mut resize.stage, Stage::Rebinding) {
            Stage::Leaving { bridge, .. } => {
                slot.make_room(table);
                sleeper.unwatch(slot.port.as_fd());
                let _ = sleeper.watch(bridge.as_fd(), index as u64);
                let old = std::mem::replace(&mut slot.port, Port::Packet(bridge));
                if let Port::Xdp(old) = old {
                    let drops = old.kernel_drops().unwrap_or_default();
                    tracing::debug!(ifname = %resize.ifname, frames = old.frames(), ?drops, "the old socket is out");
                    slot.drops_before += drops;
                    keeper.close(Closing::Xdp(Box::new(old)));
                }
                slot.pending.clear();
                slot.rx_chain.clear();
                slot.rx_overflow = false;
                keeper.ask(Job::Socket {
                    ticket: resize.ticket,
                    ifname: resize.ifname.clone(),
                    max_frame: resize.max_frame,
                    frames: resize.frames,
                });
                slot.resize = Some(resize);
            }
            Stage::Settling { port, .. } => {
                slot.flush(table);
                sleeper.unwatch(slot.port.as_fd());
                let _ = sleeper.watch(port.as_fd(), index as u64);
                let bridge = std::mem::replace(&mut slot.port, Port::Xdp(*port));
                if let Port::Packet(mut bridge) = bridge {
                    let drops = bridge.kernel_drops().unwrap_or_default();
                    tracing::debug!(ifname = %resize.ifname, ?drops, "the bridge is out");
                    slot.drops_before += drops;
                    keeper.close(Closing::Packet(bridge));
                }
                if let Some(sizing) = slot.sizing.as_mut() {
                    *sizing = Sizing::new(now);
                }
                *resizing -= 1;
            }
            other => {
                resize.stage = other;
                slot.resize = Some(resize);
            }
        }
    }

    /// The kernel drops of port `index` over its whole life: its sockets before the
    /// current one, and the current one.
    pub(super) fn lifetime_drops(&mut self, index: usize) -> std::io::Result<KernelDrops> {
        let Some(slot) = self.slots.get_mut(index).and_then(Option::as_mut) else {
            return Ok(KernelDrops::default());
        };
        let mut drops = slot.drops_before;
        drops += match &mut slot.port {
            Port::Xdp(port) => port.kernel_drops()?,
            Port::Packet(port) => port.kernel_drops()?,
            Port::Steered(port) => port.kernel_drops()?,
        };
        Ok(drops)
    }
}

impl Slot {
    /// The UMEM frames of this port's socket (`None`: an AF_PACKET port, or a steered one).
    pub(super) fn umem_frames(&self) -> Option<usize> {
        match &self.port {
            Port::Xdp(port) => Some(port.frames()),
            _ => None,
        }
    }

    /// The port stays the AF_PACKET port its resize left it: it is not resized again,
    /// and its interface keeps the worker's program until it is removed.
    fn strand(&mut self, attachment: (u32, u32, XdpMode)) {
        self.sizing = None;
        self.stranded = Some(attachment);
    }
}
