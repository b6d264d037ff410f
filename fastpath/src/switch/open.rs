//! Adding a port: the worker keeps a slot for it and hands the open to its keeper thread
//! (`keeper.rs`), which makes the port's whole slot; the worker puts the slot in place
//! when it comes back, and answers. Without a keeper the worker opens the port itself.
//!
//! An open waits in the kernel: the UMEM is pinned and zeroed as it registers (megabytes
//! for a port that opens with a large share of the resting frames), the socket binds,
//! and the program attaches to the veth. Done in the worker, each open held it off its
//! other ports, a node's first for 7 to 31 ms, and a burst of them (a restart, a lab's
//! bring-up) cost a busy port beside them frames (`fastpath/tests/away.rs`).

use std::time::Instant;

use crate::link_table::PortId;
use crate::packet_port::PacketPort;
use crate::worker::{Join, PortChoice, PortInfo, PortKind, WorkerConfig, WorkerError};
use crate::xdp_port::{PortError, Steering, XdpMode, XdpPort};
use crate::xdp_redirect::RedirectProgram;

use super::{keeper, Port, Slot, Switch, PACKET_SLOTS, REBIND_PAUSE, RELEASE_GRACE};

/// What a port is opened with.
pub(super) struct OpenSpec {
    pub(super) ifname: String,
    pub(super) max_frame: usize,
    pub(super) choice: PortChoice,
    /// The AF_XDP mode the configuration asks for (`None`: the fastest that works).
    pub(super) mode: Option<XdpMode>,
    /// UMEM frames of an AF_XDP port.
    pub(super) frames: usize,
    /// The worker's slot the port goes in: its index in the program's socket map.
    pub(super) slot: u32,
    /// Frames a pass sends at once (`WorkerConfig::batch`): the room its slot keeps.
    pub(super) batch: usize,
}

/// Opens the kind of port `spec` asks for; with `Auto`, AF_XDP, or AF_PACKET when
/// AF_XDP cannot be had (but not when another program holds the interface, which
/// AF_PACKET would not fix). An AF_XDP port's fill ring is stocked before it returns:
/// the program steers frames to it from the moment it is registered. Returns the port's
/// whole slot, made where the port is opened (see `keeper::Done::Opened`).
pub(super) fn open_slot(
    spec: &OpenSpec,
    program: Option<&RedirectProgram>,
) -> Result<(Slot, PortKind), PortError> {
    open_port(spec, program).map(|(port, kind)| (Slot::new(port, spec.batch), kind))
}

fn open_port(
    spec: &OpenSpec,
    program: Option<&RedirectProgram>,
) -> Result<(Port, PortKind), PortError> {
    let packet = || {
        PacketPort::open(&spec.ifname, spec.max_frame, PACKET_SLOTS)
            .map(|p| (Port::Packet(p), PortKind::AfPacket))
    };
    if spec.choice == PortChoice::AfPacket {
        return packet();
    }
    let steering = match program {
        Some(program) => Steering::Worker(program, spec.slot),
        None => Steering::Libxdp,
    };
    let opened = XdpPort::open(
        &spec.ifname,
        spec.mode,
        spec.max_frame,
        spec.frames,
        steering,
    )
    .map(|mut port| {
        port.refill();
        let kind = PortKind::AfXdp(port.mode());
        (Port::Xdp(port), kind)
    });
    match (spec.choice, opened) {
        (
            PortChoice::Auto,
            Err(
                e @ (PortError::Socket { .. } | PortError::AlreadyOpen(_) | PortError::Umem { .. }),
            ),
        ) => {
            tracing::warn!(ifname = spec.ifname, reason = %e, "AF_XDP unavailable, using AF_PACKET");
            packet()
        }
        (_, opened) => opened,
    }
}

/// A port asked for: being opened by the keeper, or waiting to be, on an interface whose
/// last port the kernel is still releasing (the worker keeps forwarding and tries again
/// every `REBIND_PAUSE`).
pub(super) struct WaitingPort {
    pub(super) ifname: String,
    pub(super) max_frame: usize,
    pub(super) choice: PortChoice,
    pub(super) join: Option<Join>,
    pub(super) reply: crossbeam_channel::Sender<Result<PortInfo, WorkerError>>,
}

/// A port the keeper is opening, in the slot kept for it.
pub(super) struct Opening {
    pub(super) ticket: u64,
    pub(super) index: usize,
    pub(super) request: WaitingPort,
}

impl Switch {
    /// The index of a slot free for a new port (a new slot up to `max_ports`), not kept
    /// for a port the keeper is opening, and not one of `besides`.
    pub(super) fn free_slot(
        &mut self,
        config: &WorkerConfig,
        besides: &[usize],
    ) -> Result<usize, WorkerError> {
        let kept = |index: usize| {
            besides.contains(&index)
                || self.opening.iter().any(|o| o.index == index)
                || self
                    .pairs_opening
                    .iter()
                    .any(|p| p.indexes.contains(&index))
        };
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
    pub(super) fn open_spec(
        &self,
        ifname: &str,
        max_frame: usize,
        choice: PortChoice,
        config: &WorkerConfig,
        index: usize,
    ) -> OpenSpec {
        OpenSpec {
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
    pub(super) fn add_port(
        &mut self,
        ifname: &str,
        max_frame: usize,
        choice: PortChoice,
        config: &WorkerConfig,
    ) -> Result<PortInfo, WorkerError> {
        let index = self.free_slot(config, &[])?;
        let spec = self.open_spec(ifname, max_frame, choice, config, index);
        let (slot, kind) = open_slot(&spec, self.redirect.as_deref())?;
        self.install(index, slot, ifname, max_frame)?;
        Ok(PortInfo {
            id: PortId(index as u16),
            ifname: ifname.into(),
            kind,
        })
    }

    /// Puts an open port's slot at `index`, its fill ring topped up and its socket
    /// watched.
    pub(super) fn install(
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

    /// Asks the keeper to open the port (or opens it here, without a keeper); the
    /// answer goes out once it is open (`port_opened`).
    pub(super) fn try_add_port(&mut self, request: WaitingPort, config: &WorkerConfig) {
        let index = match self.free_slot(config, &[]) {
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
                let opened = open_slot(&spec, self.redirect.as_deref());
                self.install_opened(index, request, opened);
            }
        }
    }

    /// A port the keeper opened for the request of `ticket` (or could not open).
    pub(super) fn port_opened(&mut self, ticket: u64, opened: Result<(Slot, PortKind), PortError>) {
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
    pub(super) fn install_opened(
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

    pub(super) fn retry_waiting(&mut self, config: &WorkerConfig) {
        if self.next_retry > Instant::now() {
            return;
        }
        self.next_retry = Instant::now() + REBIND_PAUSE;
        for request in std::mem::take(&mut self.waiting) {
            self.try_add_port(request, config);
        }
    }

    /// Whether this worker closed an AF_XDP port on `ifname` less than `RELEASE_GRACE` ago.
    pub(super) fn still_releasing(&mut self, ifname: &str) -> bool {
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
pub(super) fn touched_slots(max_ports: usize) -> Vec<Option<Slot>> {
    let mut slots = Vec::with_capacity(max_ports.min(TOUCHED_SLOTS));
    for room in slots.spare_capacity_mut() {
        *room = std::mem::MaybeUninit::zeroed();
    }
    slots
}

/// Slots whose room a worker makes at its start: 4,096 of about 550 bytes, 2.2 MiB,
/// under what four of the smallest ports' UMEMs pin.
const TOUCHED_SLOTS: usize = 4096;
