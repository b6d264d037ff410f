//! Veth pairs steered through the switch in place (`steered_port` says how), and ports
//! closed together so that nothing in flight between them is lost.
//!
//! Steering a pair and putting it back both wait in the kernel: each pair's four sockets
//! bind and later release (an RCU grace period each), its interfaces get a second queue,
//! and two programs are loaded, attached and later taken off the veth. Done in the
//! worker, six pairs steered and put back one after another beside a busy port held the
//! worker off it for about 80 ms each (18 ms to steer, 62 to put back), and the port lost
//! 16,000 of 60,000 frames (`fastpath/tests/away.rs`). The keeper does all of that now:
//! the worker keeps two slots while the keeper opens the pair's ports, puts them in place
//! and links them, and only then has the keeper attach the programs; and to put a pair
//! back, it hands the programs' attachments to the keeper, forwards what was in flight
//! once they are off, and hands it the sockets.
//!
//! The programs go on last because a pod's frames are steered from the moment its
//! program is on. When the keeper attached them as it opened the ports, what the pods
//! sent waited in a receiving ring until the worker had the ports: 26 to 88 ms, in which
//! the ring's 1,024 frames ran out at 50 kpps, and each move onto the switch path lost up
//! to 700 frames of the direction steered first (`rx_fill_ring_empty`; measured with
//! `fastpath/tests/steer.rs`'s moves under a 50 kpps flow each way).

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use xwire_proto::WireId;

use crate::link_table::{LinkError, PortId};
use crate::steered_port::{SteerTarget, SteeredEnd, SteeredPort};
use crate::worker::{PortInfo, PortKind, SteeredPair, WorkerConfig, WorkerError};
use crate::xdp_port::{PortError, XdpMode};
use crate::xdp_redirect::RedirectProgram;

use super::{keeper, Port, Slot, Switch, REBIND_PAUSE, RELEASE_GRACE};

/// The longest a removal waits, once its ports' steering is off, for what was in flight
/// through them to go on: frames in their receiving rings and frames queued to send.
const DRAIN_LIMIT: Duration = Duration::from_millis(50);

/// The UMEM frames of a steered pair's sending socket, at most. Its receiving socket gets
/// `WorkerConfig::frames_per_port`, as many as a busy port grows to: a steered pair is
/// not resized (see where the spec is made), and the receiving ring is what holds a
/// burst while the worker is away. The demo lab's same-node wire steered through the
/// switch (`xwirectl lab bench --link 0` with a 0.0001% loss on it, 1514 B, alternated
/// runs on 4 December 2026), loss-free frames a second a->b, b->a, both ways at once:
/// - 1024 receiving and 1024 sending (four runs): 165k-194k (one more search passed no
///   rate), 177k-235k, 86k-123k; besides the impairment's, every frame lost was lost
///   as `rx_fill_ring_empty` at the receiving rings;
/// - 4096 and 4096 (four runs): 233k-355k, 227k-352k, 84k-118k;
/// - 4096 receiving and 1024 sending (five runs): 309k-368k, 285k-358k, 104k-151k.
///
/// No run dropped a frame for want of a sending buffer. What the larger ring costs:
/// memory (20 MiB a pair of 1514-byte wires against 8), and latency at the loss-free
/// rate, where a queue stands (p99 2.3-18 ms one way against 0.6-3.3 ms; 2.8-35 ms with
/// 4096 sending too).
const STEERED_SEND_FRAMES: usize = 1024;

/// What a steered pair's ports are opened with.
pub(super) struct SteerSpec {
    pub(super) ends: Box<[SteeredEnd; 2]>,
    /// The worker's slots for the ports, the first for the port that stands for the pod
    /// of `ends[0]`: their indexes in the program's socket map.
    pub(super) slots: [u32; 2],
    pub(super) max_frame: usize,
    /// The UMEM frames of each receiving socket (the sending ones get at most
    /// `STEERED_SEND_FRAMES`).
    pub(super) frames: usize,
    /// Frames a pass sends at once (`WorkerConfig::batch`): the room each slot keeps.
    pub(super) batch: usize,
}

fn no_program(ifname: &str) -> PortError {
    PortError::Unsteerable {
        ifname: ifname.into(),
        reason: "the worker's XDP program did not load".into(),
    }
}

/// Opens the two ports of a steered pair, their receiving rings filled; nothing is
/// steered to them until `attach_pair`.
pub(super) fn open_steered(
    spec: &SteerSpec,
    program: Option<&RedirectProgram>,
) -> Result<[Slot; 2], PortError> {
    let Some(program) = program else {
        return Err(no_program(&spec.ends[0].ifname));
    };
    // Pod a's port is on b's interface, and b's on a's.
    let first = open_one(program, spec.slots[0], &spec.ends[1], spec)?;
    let second = open_one(program, spec.slots[1], &spec.ends[0], spec)?;
    let mut ports = [first, second];
    for port in &mut ports {
        port.receiver().refill();
    }
    Ok(ports.map(|port| Slot::new(Port::Steered(Box::new(port)), spec.batch)))
}

/// Steers each pod's frames to its port, which the worker already forwards: the two
/// programs' attachments, in the order of the ports. If the second cannot go on, the
/// first comes off again.
pub(super) fn attach_pair(
    targets: &[SteerTarget; 2],
    program: Option<&RedirectProgram>,
) -> Result<[OwnedFd; 2], PortError> {
    let Some(program) = program else {
        return Err(no_program(targets[0].ifname()));
    };
    let first = targets[0].steer(program)?;
    let second = targets[1].steer(program)?;
    Ok([first, second])
}

/// One port of the pair, on `far`'s interface; a pair steered a moment ago may still have
/// its queues held by the kernel, which is waited out.
fn open_one(
    program: &RedirectProgram,
    slot: u32,
    far: &SteeredEnd,
    spec: &SteerSpec,
) -> Result<SteeredPort, PortError> {
    let frames = (spec.frames, spec.frames.min(STEERED_SEND_FRAMES));
    let since = Instant::now();
    loop {
        match SteeredPort::open(program, slot, far, spec.max_frame, frames) {
            Err(PortError::Busy(_)) if since.elapsed() < RELEASE_GRACE => {
                std::thread::sleep(REBIND_PAUSE);
            }
            result => return result,
        }
    }
}

/// A steered pair being opened, in the two slots kept for it.
pub(super) struct PairOpening {
    ticket: u64,
    wire: WireId,
    pub(super) indexes: [usize; 2],
    /// The interface each port is on (the other pod's).
    ifnames: [String; 2],
    max_frame: usize,
    reply: Sender<Result<SteeredPair, WorkerError>>,
}

/// A steered pair whose ports are in place and linked, while the keeper puts its
/// programs on.
pub(super) struct PairSteering {
    ticket: u64,
    reply: Sender<Result<SteeredPair, WorkerError>>,
    /// What the answer says once the programs are on.
    linked: SteeredPair,
}

/// Ports being closed together (`remove_ports`): first their steering stops, then what
/// was in flight through them goes on, then they close.
pub(super) struct Removal {
    ticket: u64,
    ids: Vec<PortId>,
    reply: RemovalReply,
    /// Since when no frame is steered to the ports (`None`: the keeper is still taking
    /// the programs off).
    draining_since: Option<Instant>,
}

/// Who is answered once a removal's ports are closed.
enum RemovalReply {
    /// The caller of `remove_ports`.
    Removed(Sender<Result<(), WorkerError>>),
    /// The caller of `steer_pair`, whose pair could not be steered: told why once its
    /// ports are gone, so that steering the wire again can start at once.
    NotSteered(Sender<Result<SteeredPair, WorkerError>>, WorkerError),
}

impl RemovalReply {
    fn send(self, removed: Result<(), WorkerError>) {
        match self {
            RemovalReply::Removed(reply) => {
                let _ = reply.send(removed);
            }
            RemovalReply::NotSteered(reply, why) => {
                let _ = reply.send(Err(why));
            }
        }
    }
}

impl Switch {
    /// Steers the veth pair whose two ends are `ends` through the switch as `wire`: a
    /// port for each pod (on the other pod's interface), linked. Answers with the ports,
    /// the first standing for the pod of `ends[0]`, once the pods' frames are steered to
    /// them.
    pub(super) fn steer_pair(
        &mut self,
        wire: WireId,
        ends: Box<[SteeredEnd; 2]>,
        max_frame: usize,
        reply: Sender<Result<SteeredPair, WorkerError>>,
        config: &WorkerConfig,
    ) {
        // Refused before any pod's frames are steered, as the link would be.
        if self.table.link_index(wire).is_some()
            || self.pairs_opening.iter().any(|p| p.wire == wire)
        {
            let _ = reply.send(Err(LinkError::DuplicateWire(wire).into()));
            return;
        }
        let indexes = match self.free_slot(config, &[]).and_then(|first| {
            let second = self.free_slot(config, &[first])?;
            Ok([first, second])
        }) {
            Ok(indexes) => indexes,
            Err(e) => {
                let _ = reply.send(Err(e));
                return;
            }
        };
        let ifnames = [ends[1].ifname.clone(), ends[0].ifname.clone()];
        let spec = SteerSpec {
            ends,
            slots: indexes.map(|index| index as u32),
            max_frame,
            // Not resized (a bridge would let its frames bypass the switch, impairments
            // and all): a steered pair is a same-node wire that asked for impairment or
            // capture, and there are few of them, so each receives into as many frames as
            // a busy port grows to.
            frames: config.frames_per_port,
            batch: config.batch,
        };
        let mut pair = PairOpening {
            ticket: 0,
            wire,
            indexes,
            ifnames,
            max_frame,
            reply,
        };
        match &self.keeper {
            Some(keeper) => {
                self.tickets += 1;
                pair.ticket = self.tickets;
                keeper.ask(keeper::Job::OpenPair {
                    ticket: pair.ticket,
                    spec,
                });
                self.pairs_opening.push(pair);
            }
            None => {
                let opened = open_steered(&spec, self.redirect.as_deref());
                self.install_pair(pair, opened);
            }
        }
    }

    /// A pair the keeper opened for the request of `ticket` (or could not).
    pub(super) fn pair_opened(&mut self, ticket: u64, opened: Result<[Slot; 2], PortError>) {
        let Some(at) = self.pairs_opening.iter().position(|p| p.ticket == ticket) else {
            // Every open is answered, and only once: nothing else could have taken it.
            for slot in opened.into_iter().flatten() {
                self.close(slot.port);
            }
            return;
        };
        let pair = self.pairs_opening.swap_remove(at);
        self.install_pair(pair, opened);
    }

    /// Puts an opened pair's ports in place and links them, then has their programs
    /// attached (by the keeper, if there is one); answers once they are on.
    fn install_pair(&mut self, pair: PairOpening, opened: Result<[Slot; 2], PortError>) {
        let linked = opened
            .map_err(WorkerError::from)
            .and_then(|slots| self.put_pair_in_place(&pair, slots));
        let linked = match linked {
            Ok(linked) => linked,
            Err(e) => {
                let _ = pair.reply.send(Err(e));
                return;
            }
        };
        let targets = match self.steer_targets(&linked) {
            Ok(targets) => targets,
            Err(e) => {
                let ids = linked.ports.iter().map(|port| port.id).collect();
                self.unlink_unsteered(ids, RemovalReply::NotSteered(pair.reply, e));
                return;
            }
        };
        match &self.keeper {
            Some(keeper) => {
                self.tickets += 1;
                let ticket = self.tickets;
                keeper.ask(keeper::Job::Attach {
                    ticket,
                    targets: Box::new(targets),
                });
                self.pairs_steering.push(PairSteering {
                    ticket,
                    reply: pair.reply,
                    linked,
                });
            }
            None => {
                let attached = attach_pair(&targets, self.redirect.as_deref());
                self.steer_linked(pair.reply, linked, attached);
            }
        }
    }

    /// The programs of the pair of `ticket` are on (or could not go on).
    pub(super) fn pair_attached(&mut self, ticket: u64, attached: Result<[OwnedFd; 2], PortError>) {
        // Every attach is answered, and only once: the pair is there (and if it were not,
        // the attachments dropping here take the programs off).
        if let Some(at) = self.pairs_steering.iter().position(|p| p.ticket == ticket) {
            let PairSteering { reply, linked, .. } = self.pairs_steering.swap_remove(at);
            self.steer_linked(reply, linked, attached);
        }
    }

    /// Gives a linked pair's ports their programs' attachments and answers; or, if the
    /// programs could not go on, takes the ports away (forwarding what the first program
    /// steered before it came off) and then answers with why.
    fn steer_linked(
        &mut self,
        reply: Sender<Result<SteeredPair, WorkerError>>,
        linked: SteeredPair,
        attached: Result<[OwnedFd; 2], PortError>,
    ) {
        match attached {
            Ok(attachments) => {
                for (info, attachment) in linked.ports.iter().zip(attachments) {
                    // Both ports are the worker's until it answers: no caller knows them.
                    if let Some(Port::Steered(port)) = self.port_mut(info.id) {
                        port.set_attachment(attachment);
                    }
                }
                let _ = reply.send(Ok(linked));
            }
            Err(e) => {
                let ids = linked.ports.iter().map(|port| port.id).collect();
                self.unlink_unsteered(ids, RemovalReply::NotSteered(reply, e.into()));
            }
        }
    }

    /// Where each of a linked pair's programs goes.
    fn steer_targets(&self, linked: &SteeredPair) -> Result<[SteerTarget; 2], WorkerError> {
        let target = |info: &PortInfo| match self.port(info.id) {
            Some(Port::Steered(port)) => Ok(port.target()?),
            _ => Err(WorkerError::NoSuchPort(info.id)),
        };
        Ok([target(&linked.ports[0])?, target(&linked.ports[1])?])
    }

    /// Closes ports nothing is steered to any more, once what was in flight through
    /// them has gone on, and then answers `reply`.
    fn unlink_unsteered(&mut self, ids: Vec<PortId>, reply: RemovalReply) {
        self.removing.push(Removal {
            ticket: 0,
            ids,
            reply,
            draining_since: Some(Instant::now()),
        });
    }

    /// Puts a steered pair's ports in their slots and links them, in one step; nothing
    /// is steered to them yet.
    fn put_pair_in_place(
        &mut self,
        pair: &PairOpening,
        slots: [Slot; 2],
    ) -> Result<SteeredPair, WorkerError> {
        let ids = pair.indexes.map(|index| PortId(index as u16));
        let mut slots = slots.into_iter();
        for n in 0..2 {
            let slot = slots.next().expect("two slots");
            if let Err(e) = self.install(pair.indexes[n], slot, &pair.ifnames[n], pair.max_frame) {
                for &id in &ids[..n] {
                    let _ = self.remove_port(id);
                }
                for rest in slots {
                    self.close(rest.port);
                }
                return Err(e);
            }
        }
        match self.table.add_link(pair.wire, ids[0], ids[1]) {
            Ok(counters) => Ok(SteeredPair {
                ports: [0, 1].map(|n| PortInfo {
                    id: ids[n],
                    ifname: pair.ifnames[n].clone(),
                    kind: PortKind::AfXdp(XdpMode::Native),
                }),
                counters,
            }),
            Err(e) => {
                for id in ids {
                    let _ = self.remove_port(id);
                }
                Err(e.into())
            }
        }
    }

    /// Closes ports together: steered ones stop steering first (their programs come off
    /// in the keeper), then what was in flight through them goes on (for at most
    /// `DRAIN_LIMIT`), then all close and the answer goes out (`finish_removals`). A
    /// steered pair closed this way loses no frame.
    pub(super) fn remove_ports(
        &mut self,
        ids: Vec<PortId>,
        reply: Sender<Result<(), WorkerError>>,
    ) {
        let gone = |id: &PortId| {
            self.port(*id).is_none() || self.removing.iter().any(|r| r.ids.contains(id))
        };
        if let Some(&missing) = ids.iter().find(|id| gone(id)) {
            let _ = reply.send(Err(WorkerError::NoSuchPort(missing)));
            return;
        }
        let mut steered = false;
        let mut attachments: Vec<OwnedFd> = Vec::new();
        for &id in &ids {
            if let Some(Port::Steered(port)) = self.port_mut(id) {
                steered = true;
                attachments.extend(port.take_attachment());
            }
        }
        if !steered {
            let result = ids.iter().try_for_each(|&id| self.remove_port(id));
            let _ = reply.send(result);
            return;
        }
        let mut removal = Removal {
            ticket: 0,
            ids,
            reply: RemovalReply::Removed(reply),
            draining_since: None,
        };
        match &self.keeper {
            Some(keeper) if !attachments.is_empty() => {
                self.tickets += 1;
                removal.ticket = self.tickets;
                keeper.ask(keeper::Job::Unsteer {
                    ticket: removal.ticket,
                    attachments,
                });
            }
            _ => {
                drop(attachments);
                removal.draining_since = Some(Instant::now());
            }
        }
        self.removing.push(removal);
    }

    /// The keeper has taken the programs of the removal of `ticket` off: no frame comes
    /// to its ports any more.
    pub(super) fn pair_unsteered(&mut self, ticket: u64) {
        if let Some(removal) = self.removing.iter_mut().find(|r| r.ticket == ticket) {
            removal.draining_since = Some(Instant::now());
        }
    }

    /// Closes the ports of every removal whose ports have passed on what was in flight
    /// (or that waited `DRAIN_LIMIT` for it), and answers.
    pub(super) fn finish_removals(&mut self) {
        let now = Instant::now();
        // Called after every pass while a removal waits: nothing here allocates.
        let mut at = 0;
        while at < self.removing.len() {
            let removal = &self.removing[at];
            let done = removal.draining_since.is_some_and(|since| {
                now.saturating_duration_since(since) >= DRAIN_LIMIT
                    || drained(&mut self.slots, &removal.ids)
            });
            if !done {
                at += 1;
                continue;
            }
            let removal = self.removing.swap_remove(at);
            let result = removal.ids.iter().try_for_each(|&id| self.remove_port(id));
            removal.reply.send(result);
        }
    }
}

/// Whether none of `ids` has frames waiting to be taken from its receiving ring, to be
/// sent, or in its TX ring.
fn drained(slots: &mut [Option<Slot>], ids: &[PortId]) -> bool {
    ids.iter().all(|id| {
        slots[usize::from(id.0)].as_mut().is_none_or(|slot| {
            let port_idle = match &mut slot.port {
                Port::Steered(port) => {
                    port.sending() == 0 && port.receiver().received_waiting() == 0
                }
                Port::Xdp(port) => port.in_flight() == 0,
                Port::Packet(_) => true,
            };
            port_idle && slot.pending.is_empty() && slot.rx_chain.is_empty()
        })
    })
}
