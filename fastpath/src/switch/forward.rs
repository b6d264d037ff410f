//! One pass of the worker over its ports: receive, decide, copy to the outgoing port (or
//! hand to a peer), send, and recycle.

use std::time::Instant;

use crate::counters::{Direction, DropReason};
use crate::link_table::{LinkTable, PortId, Verdict};
use crate::remote_transport::RemoteTransport;
use crate::worker::WorkerConfig;
use crate::xdp_port::{Lent, XdpPort, MAX_FRAME_ROOM};

use super::extras::LinkExtras;
use super::{remote, Port, Slot, Switch};

/// A frame (or part of one) on its way out, the link it is counted on, and whether it is
/// the last (or only) descriptor of its frame.
pub(super) struct Outgoing {
    frame: Lent,
    link: usize,
    direction: Direction,
    ends_frame: bool,
}

/// The longest descriptor chain: the largest frame (`MAX_FRAME_LEN`, 65535 bytes) in the
/// room of a 4 KiB UMEM frame (ports that take frames that large have 4 KiB frames),
/// which is 18; also the most the kernel sends as one (a linear part and
/// MAX_SKB_FRAGS = 17 fragments).
pub(super) const MAX_CHAIN: usize = xwire_proto::data::MAX_FRAME_LEN.div_ceil(MAX_FRAME_ROOM);

/// Receive batches per port per pass, at most: enough to empty a fill ring of a few
/// thousand frames, while bounding the time one port can hold a pass. A pass this long
/// can keep a busy worker from its ports for 15-23 ms (1514 B both ways through one
/// node, where writing into the far veth costs 2.5-4 µs a frame); 8 cut that to 6-8 ms
/// but not the loss-free rate there, and cost the remote wire both ways at once
/// (0.95-1.08x VXLAN's at 64 B against 1.14-1.35x, 0.44-0.78x at 1514 B against
/// 0.75-0.87x, three alternated pairs): larger passes give QUIC larger batches.
pub(super) const MAX_BATCHES_PER_PASS: usize = 32;

/// Receive batches per port per pass, at least: however busy the peers' socket is, a
/// port is served every pass.
const MIN_BATCHES_PER_PASS: usize = 4;

/// The batches each port may give a pass that follows one that delivered `from_peers`
/// DATAGRAM frames from the peers' socket: what is left of a pass of
/// `MAX_BATCHES_PER_PASS` batches, between `MIN_BATCHES_PER_PASS` and all of it.
/// Datagrams the socket holds have cost both nodes their encryption and sending
/// already, and a socket that overflows loses them for good; a pod port's frames have
/// cost nothing yet. So a worker that cannot keep up takes the socket's datagrams first
/// and leaves the surplus in the pod port's ring, where the kernel drops it at no
/// further cost. In `remote-wire`, both ways at once at 1514 B at full rate, a pass that
/// took all it could from the pod port first let each node's socket overflow (3,000
/// `RcvbufErrors` and 20,000 QUIC packets lost per node over a search), and the
/// datagram wire carried 0.68 to 1.02 of its loss-free rate in twelve runs; with this,
/// 1.00 to 1.18 in six. A stream's frames do not count (see `poll_peers`).
pub(super) fn port_batches(from_peers: usize, batch: usize) -> usize {
    let left = (MAX_BATCHES_PER_PASS * batch.max(1)).saturating_sub(from_peers);
    (left / batch.max(1)).clamp(MIN_BATCHES_PER_PASS, MAX_BATCHES_PER_PASS)
}

/// Kicks per AF_XDP port per pass: enough for a pass that queued a few hundred frames
/// (a burst from a peer node) while bounding the time one port can take.
const MAX_KICKS_PER_PASS: usize = 16;

/// Ports beyond which a pass visits only the ports with work (`poll_sparse`); up to
/// here, peeking at every port's rings costs less than the epoll call that would say
/// which have frames, and a wire's frames take the path measured in `remote-wire`.
const SPARSE_FROM: usize = 64;

/// Whether a worker with `ports` ports passes only over those with work.
pub(super) fn sparse(ports: usize) -> bool {
    ports > SPARSE_FROM
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Pass {
    /// Frames moved (and UDP datagrams taken from peers).
    pub(super) moved: usize,
    /// Frames taken from this worker's own ports (the rest of `moved` came from peers).
    pub(super) from_ports: usize,
    /// A port or the peer transport had more than one pass takes: the next pass should
    /// come at once.
    pub(super) backlog: bool,
}

impl Switch {
    /// One pass over every port. `hold_when_busy`: frames for peers may wait for the next
    /// pass to share their datagram when this one took frames from the ports (a worker
    /// that passes without pause); otherwise they leave at the end of the pass.
    pub(super) fn poll_once(&mut self, config: &WorkerConfig, hold_when_busy: bool) -> Pass {
        if sparse(self.slots.len()) {
            return self.poll_sparse(config, hold_when_busy);
        }
        let mut pass = Pass::default();
        self.now = Instant::now();
        let batches = port_batches(self.from_peers, config.batch);
        for index in 0..self.slots.len() {
            let (taken, more) = self.receive_all(index, config.batch, batches);
            pass.moved += taken;
            pass.from_ports += taken;
            pass.backlog |= more;
        }
        let hold = pass.backlog || (hold_when_busy && pass.moved > 0);
        let peers = self.poll_peers(hold);
        pass.backlog |= peers.backlog;
        pass.moved += peers.moved;
        pass.moved += self.release_held();
        for index in 0..self.slots.len() {
            self.flush_to(index);
        }
        for slot in self.slots.iter_mut().flatten() {
            let (receiver, sender) = match &mut slot.port {
                Port::Packet(_) => continue,
                Port::Xdp(port) => {
                    port.drain_tx(MAX_KICKS_PER_PASS);
                    port.refill();
                    continue;
                }
                Port::Steered(port) => port.both(),
            };
            sender.drain_tx(MAX_KICKS_PER_PASS);
            receiver.refill();
        }
        pass
    }

    /// A pass over the ports that have work, for a worker with many: those whose
    /// sockets are readable (one epoll call, level-triggered), those frames were queued
    /// to, and those left with work by the last pass (more to take, frames to send or in
    /// flight). A pass over every port peeks at each one's rings, and with thousands of
    /// ports that cost more than the frames: in a 10,000-pod lab coming up, the workers'
    /// ring peeks were a third of the machine's CPU, while a trickle of neighbour
    /// discovery kept them from sleeping.
    fn poll_sparse(&mut self, config: &WorkerConfig, hold_when_busy: bool) -> Pass {
        let mut pass = Pass::default();
        self.now = Instant::now();
        self.pass_number = self.pass_number.wrapping_add(1);
        let mut visit = std::mem::take(&mut self.visit);
        visit.clear();
        let mut ready = std::mem::take(&mut self.carry);
        pass.backlog |= self.sleeper.ready_now(&mut ready);
        self.note(&mut visit, ready.drain(..));
        self.carry = ready;
        let batches = port_batches(self.from_peers, config.batch);
        for &index in &visit {
            let (taken, backlog) = self.receive_all(index, config.batch, batches);
            pass.moved += taken;
            pass.from_ports += taken;
            if backlog {
                // Visited again next pass (`note` drops a second mention).
                pass.backlog = true;
                self.carry.push(index);
            }
        }
        let hold = pass.backlog || (hold_when_busy && pass.moved > 0);
        let peers = self.poll_peers(hold);
        pass.backlog |= peers.backlog;
        pass.moved += peers.moved;
        pass.moved += self.release_held();
        let touched = std::mem::take(&mut self.touched);
        self.note(&mut visit, touched.iter().map(|&i| usize::from(i)));
        self.touched = touched;
        self.touched.clear();
        for &index in &visit {
            self.flush_to(index);
            let Some(slot) = self.slots[index].as_mut() else {
                continue;
            };
            let in_flight = match &mut slot.port {
                Port::Packet(_) => 0,
                Port::Xdp(port) => {
                    port.drain_tx(MAX_KICKS_PER_PASS);
                    port.refill();
                    port.in_flight()
                }
                Port::Steered(port) => {
                    let (receiver, sender) = port.both();
                    sender.drain_tx(MAX_KICKS_PER_PASS);
                    receiver.refill();
                    sender.in_flight()
                }
            };
            if in_flight > 0 || !slot.pending.is_empty() {
                self.carry.push(index);
            }
        }
        self.visit = visit;
        pass
    }

    /// Adds to `visit` each of `indexes` that is a port and not in it yet this pass.
    fn note(&mut self, visit: &mut Vec<usize>, indexes: impl Iterator<Item = usize>) {
        if self.visited.len() < self.slots.len() {
            self.visited.resize(self.slots.len(), 0);
        }
        for index in indexes {
            if index < self.slots.len() && self.visited[index] != self.pass_number {
                self.visited[index] = self.pass_number;
                visit.push(index);
            }
        }
    }

    /// Takes from the port at `index` batch after batch until its ring is empty, or
    /// `max_batches` of them (`port_batches` says how many a pass may take; at most
    /// `MAX_BATCHES_PER_PASS`): one batch per pass let a port starve while the
    /// same pass took a thousand frames from a peer's socket, and its fill ring ran empty
    /// (503k frames lost by node B of `remote-wire`'s stream carrier, both ways at once
    /// at 1514 B). Returns how many it took, and whether more may wait.
    pub(super) fn receive_all(
        &mut self,
        index: usize,
        batch: usize,
        max_batches: usize,
    ) -> (usize, bool) {
        let mut total = 0;
        let mut more = true;
        for _ in 0..max_batches {
            let taken = self.receive_from(index, batch);
            total += taken;
            if taken < batch {
                more = false;
                break;
            }
            // More waits: the frames this batch gave back go to the fill ring now, not
            // at the end of the pass, so the kernel has room while the rest is taken.
            if let Some(slot) = self.slots[index].as_mut() {
                slot.refill();
            }
        }
        if total > 0 {
            self.look_early(index);
        }
        (total, more)
    }

    fn receive_from(&mut self, index: usize, batch: usize) -> usize {
        let Switch {
            slots,
            peers,
            table,
            frame_buf,
            received,
            now,
            extras,
            touched,
            ..
        } = self;
        let touched = sparse(slots.len()).then_some(touched);
        let (this, mut others) = split_slot(slots, index, touched);
        let Some(slot) = this.as_mut() else {
            return 0;
        };
        let in_port = PortId(index as u16);
        let port = match &mut slot.port {
            Port::Packet(port) => {
                return port.receive(batch, |frame, whole| {
                    let verdict = match table.decide(in_port, frame.len()) {
                        Verdict::Forward {
                            link, direction, ..
                        } if !whole => Verdict::Drop {
                            reason: DropReason::TooLarge,
                            link: Some((link, direction)),
                        },
                        v => v,
                    };
                    route(table, peers, &mut others, extras, verdict, frame, *now);
                })
            }
            Port::Xdp(port) => port,
            Port::Steered(port) => port.receiver(),
        };
        let n = port.receive(batch, received);
        if let Some(sizing) = slot.sizing.as_mut() {
            sizing.carried += n as u64;
        }
        for lent in received.drain(..) {
            let more = lent.has_more();
            slot.rx_chain.push(lent);
            if slot.rx_overflow {
                // The rest of a frame longer than any frame can be: dropped with
                // the chain's start, up to and including its last descriptor.
                slot.rx_overflow = more;
                port.recycle(&mut slot.rx_chain);
                continue;
            }
            if more && slot.rx_chain.len() < MAX_CHAIN {
                continue;
            }
            // A whole frame: one descriptor, or a chain of them (jumbo frames).
            let len: usize = slot.rx_chain.iter().map(Lent::len).sum();
            let verdict = if more {
                // Longer than any frame can be: drop it whole, and what is still
                // to come of it.
                slot.rx_overflow = true;
                table.oversized(in_port)
            } else {
                table.decide(in_port, len)
            };
            if let Verdict::Drop { .. } = verdict {
                count_drop(table, verdict);
            } else {
                let frame: &[u8] = match slot.rx_chain.as_slice() {
                    [one] => port.frame_data(one),
                    chain => {
                        frame_buf.clear();
                        for part in chain {
                            frame_buf.extend_from_slice(port.frame_data(part));
                        }
                        frame_buf
                    }
                };
                route(table, peers, &mut others, extras, verdict, frame, *now);
            }
            port.recycle(&mut slot.rx_chain);
        }
        n
    }

    /// Sends the held frames whose time has come; returns how many.
    fn release_held(&mut self) -> usize {
        let Switch {
            slots,
            peers,
            table,
            extras,
            now,
            touched,
            ..
        } = self;
        if extras.next_due().is_none_or(|due| due > *now) {
            return 0;
        }
        let touched = sparse(slots.len()).then_some(touched);
        let mut others = OtherSlots {
            before: slots,
            after: &mut [],
            touched,
        };
        extras.release_due(*now, |frame, verdict| {
            send_now(table, peers, &mut others, verdict, frame, *now)
        })
    }

    /// Sends what waits for the port at `index` (see `Slot::flush`).
    fn flush_to(&mut self, index: usize) {
        if let Some(slot) = self.slots[index].as_mut() {
            slot.flush(&self.table);
        }
    }
}

impl Slot {
    /// Sends what waits for this port: whole frames, as many as its TX ring has room
    /// for; the rest are dropped (counted as `TxFull`).
    pub(super) fn flush(&mut self, table: &LinkTable) {
        if let Port::Packet(port) = &mut self.port {
            return port.flush();
        }
        if self.pending.is_empty() {
            return;
        }
        let port = sending_port(&mut self.port).expect("not an AF_PACKET port");
        let pending = &mut self.pending;
        let room = port.tx_room(pending.len());
        let cut = pending[..room]
            .iter()
            .rposition(|o| o.ends_frame)
            .map_or(0, |i| i + 1);
        let counted = |out: &Outgoing, sent: bool| {
            let ends = u64::from(out.ends_frame);
            match table.counters(out.link) {
                Some(c) if sent => c.forwarded(out.direction, ends, out.frame.len() as u64),
                Some(c) => c.dropped(out.direction, DropReason::TxFull, ends),
                // The link went away since this frame was received.
                None => {}
            }
        };
        // The TX ring has room for all of the first `cut`: it takes them all.
        let batch = pending.drain(..cut).map(|out| {
            counted(&out, true);
            out.frame
        });
        let sent = port.send(batch);
        debug_assert_eq!(sent, cut, "the TX ring had room");
        for out in pending.drain(..) {
            counted(&out, false);
            port.recycle_one(out.frame);
        }
    }

    /// Gives this port's free frames to its fill ring (an AF_XDP port; an AF_PACKET
    /// port's ring needs nothing).
    pub(super) fn refill(&mut self) {
        match &mut self.port {
            Port::Xdp(port) => port.refill(),
            Port::Steered(port) => port.receiver().refill(),
            Port::Packet(_) => {}
        }
    }

    /// Sends what waits for this AF_XDP port now and takes back the frames the kernel
    /// has sent. A veth's AF_XDP socket sends in copy mode, where a kick sends and
    /// completes at once: a burst for this port larger than its free frames (a peer's
    /// datagrams after a pause, a hundred frames each) goes out in pieces within one
    /// pass instead of being dropped for want of a buffer.
    pub(super) fn make_room(&mut self, table: &LinkTable) {
        self.flush(table);
        if let Some(port) = sending_port(&mut self.port) {
            port.drain_tx(MAX_KICKS_PER_PASS);
            port.reclaim();
        }
    }
}

/// Every slot but one, which the caller holds on its own: frames received on that one go
/// to these.
pub(super) struct OtherSlots<'a> {
    before: &'a mut [Option<Slot>],
    after: &'a mut [Option<Slot>],
    /// Where the ports frames are queued to are noted, in a sparse pass (which serves
    /// only the ports it visits); `None` in a pass over every port.
    touched: Option<&'a mut Vec<u16>>,
}

impl OtherSlots<'_> {
    /// The slot of port `id`, if it is open (and not the one held apart), noted (in a
    /// sparse pass) as one that frames go out of.
    pub(super) fn get_mut(&mut self, id: PortId) -> Option<&mut Slot> {
        if let Some(touched) = self.touched.as_mut() {
            touched.push(id.0);
        }
        let index = usize::from(id.0);
        match index.checked_sub(self.before.len()) {
            None => self.before[index].as_mut(),
            Some(0) => None,
            Some(k) => self.after.get_mut(k - 1)?.as_mut(),
        }
    }
}

/// The slot at `index`, and all the others.
fn split_slot<'a>(
    slots: &'a mut [Option<Slot>],
    index: usize,
    touched: Option<&'a mut Vec<u16>>,
) -> (&'a mut Option<Slot>, OtherSlots<'a>) {
    let (before, rest) = slots.split_at_mut(index);
    let (this, after) = rest.split_first_mut().expect("index is a slot");
    (
        this,
        OtherSlots {
            before,
            after,
            touched,
        },
    )
}

/// Sends one received frame where its verdict says: at once, or through its link's
/// impairment (`LinkExtras::admit`).
fn route(
    table: &LinkTable,
    peers: &mut Option<Box<dyn RemoteTransport>>,
    others: &mut OtherSlots<'_>,
    extras: &mut LinkExtras,
    verdict: Verdict,
    frame: &[u8],
    now: Instant,
) {
    match verdict.link() {
        Some((link, _)) if extras.has(link) => {
            extras.admit(table, verdict, frame, now, |bytes, verdict| {
                send_now(table, peers, others, verdict, bytes, now)
            })
        }
        _ => send_now(table, peers, others, verdict, frame, now),
    }
}

fn send_now(
    table: &LinkTable,
    peers: &mut Option<Box<dyn RemoteTransport>>,
    others: &mut OtherSlots<'_>,
    verdict: Verdict,
    frame: &[u8],
    now: Instant,
) {
    match verdict {
        Verdict::Forward {
            out,
            link,
            direction,
        } => deliver(table, others.get_mut(out), frame, (link, direction)),
        Verdict::Remote { .. } => remote::send(peers, table, verdict, frame, now),
        Verdict::Drop { .. } => count_drop(table, verdict),
    }
}

/// Copies `frame` out through the port of `out`: into free frames of its UMEM (a chain
/// when the frame is longer than one), queued to send, or into its AF_PACKET TX ring.
/// Counted on `link`; without room it is dropped and counted.
pub(super) fn deliver(
    table: &LinkTable,
    out: Option<&mut Slot>,
    frame: &[u8],
    (link, direction): (usize, Direction),
) {
    let reason = match out {
        // The port closed since the link table decided.
        None => DropReason::NoLink,
        Some(slot) => match queue_out(table, slot, frame, (link, direction)) {
            Ok(()) => return,
            Err(reason) => reason,
        },
    };
    count_drop(
        table,
        Verdict::Drop {
            reason,
            link: Some((link, direction)),
        },
    );
}

/// Copies `frame` into `slot`'s port to send (see `deliver`), or says why it could not.
fn queue_out(
    table: &LinkTable,
    slot: &mut Slot,
    frame: &[u8],
    (link, direction): (usize, Direction),
) -> Result<(), DropReason> {
    if let Some(sizing) = slot.sizing.as_mut() {
        sizing.carried += 1;
    }
    let Some(port) = sending_port(&mut slot.port) else {
        let Port::Packet(port) = &mut slot.port else {
            unreachable!("only an AF_PACKET port sends without a UMEM")
        };
        // A full TX ring is sent at once and the frame queued again: a peer's burst
        // (a hundred frames in one datagram) came to a port being resized, whose
        // AF_PACKET bridge sends only at the end of a pass, and filled its ring
        // (thousands of `TxFull` in a TCP transfer through `remote-wire`). A veth takes
        // what send(2) gives it before the call returns, which frees the ring's slots.
        if !port.queue(std::iter::once(frame)) {
            port.flush();
            if !port.queue(std::iter::once(frame)) {
                return Err(DropReason::TxFull);
            }
        }
        if let Some(counters) = table.counters(link) {
            counters.forwarded(direction, 1, frame.len() as u64);
        }
        return Ok(());
    };
    let parts = frame.len().div_ceil(port.frame_room());
    if port.free_frames() < parts {
        slot.make_room(table);
    }
    let port = sending_port(&mut slot.port).expect("an AF_XDP port, as above");
    if port.free_frames() < parts {
        return Err(DropReason::NoBuffer);
    }
    let room = port.frame_room();
    for (k, bytes) in frame.chunks(room).enumerate() {
        let mut lent = port.take_free().expect("checked above");
        port.write_frame(&mut lent, bytes, k + 1 < parts);
        slot.pending.push(Outgoing {
            frame: lent,
            link,
            direction,
            ends_frame: k + 1 == parts,
        });
    }
    Ok(())
}

/// The AF_XDP socket a port sends from (`None`: an AF_PACKET port, which has no UMEM).
fn sending_port(port: &mut Port) -> Option<&mut XdpPort> {
    match port {
        Port::Xdp(port) => Some(port),
        Port::Steered(port) => Some(port.sender()),
        Port::Packet(_) => None,
    }
}

pub(super) fn count_drop(table: &LinkTable, verdict: Verdict) {
    if let Verdict::Drop {
        reason,
        link: Some((link, direction)),
    } = verdict
    {
        if let Some(counters) = table.counters(link) {
            counters.dropped(direction, reason, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixDatagram;
    use std::time::{Duration, Instant};

    use xwire_testbed::checks::test_frame;
    use xwire_testbed::{unique_ifname, Netns, RawSocket, Veth};

    use crate::worker::{PortChoice, WorkerConfig};

    use super::super::Switch;
    use super::{port_batches, MAX_BATCHES_PER_PASS, MIN_BATCHES_PER_PASS};

    #[test]
    fn a_port_gives_a_pass_what_the_peers_socket_left_of_it_and_never_nothing() {
        let batch = 64;
        assert_eq!(port_batches(0, batch), MAX_BATCHES_PER_PASS);
        assert_eq!(port_batches(100, batch), MAX_BATCHES_PER_PASS - 2);
        assert_eq!(
            port_batches(MAX_BATCHES_PER_PASS * batch / 2, batch),
            MAX_BATCHES_PER_PASS / 2
        );
        assert_eq!(
            port_batches(MAX_BATCHES_PER_PASS * batch, batch),
            MIN_BATCHES_PER_PASS
        );
        assert_eq!(port_batches(1_000_000, batch), MIN_BATCHES_PER_PASS);
        // A worker configured with a batch of 1 still takes its minimum.
        assert_eq!(port_batches(1_000_000, 1), MIN_BATCHES_PER_PASS);
    }

    /// The cause of `rx_fill_ring_empty` on a busy pod port (503k frames lost by node B of
    /// `remote-wire`'s stream carrier, both ways at once at 1514 B): a pass took one batch
    /// from each port and then all that the peer's socket held, so a port whose pod sent
    /// more than a batch between passes fell behind for good. A pass now empties a port
    /// batch after batch. Here a pod sends ten batches while no pass runs (a switch
    /// without its worker thread), and one pass takes all of them.
    #[test]
    fn one_pass_takes_all_that_a_port_received_since_the_last_not_one_batch() {
        const FRAMES: u16 = 640;
        let pod = Netns::new("xfw-drain-pod").unwrap();
        let node = Netns::new("xfw-drain-node").unwrap();
        let wire = Veth::named(&pod, "eth1", &node, &unique_ifname()).unwrap();
        pod.set_tx_checksum("eth1", false).unwrap();
        wire.set_up().unwrap();
        let config = WorkerConfig {
            frames_per_port: 4096,
            min_frames_per_port: 4096,
            ..WorkerConfig::default()
        };
        assert!(usize::from(FRAMES) > 4 * config.batch);
        assert!(usize::from(FRAMES) < MAX_BATCHES_PER_PASS * config.batch);
        let sock = RawSocket::open(&pod, "eth1").unwrap();
        // The switch lives on one thread in the node's namespace, as a worker's does.
        node.run(|| {
            let (wake, woken) = UnixDatagram::pair().unwrap();
            let mut switch = Switch::new(&config, woken, wake).unwrap();
            let port = (switch.add_port(wire.b_name(), 1514, PortChoice::AfXdp, &config)).unwrap();
            let index = usize::from(port.id.0);
            for seq in 0..FRAMES {
                sock.send(&test_frame(200, 0xa, seq)).unwrap();
            }
            // The veth hands frames to the socket in its NAPI poll, a moment after a send:
            // the first look comes well after that, and later ones only if it took none.
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut taken = 0;
            while taken == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(300));
                let (n, more) = switch.receive_all(index, config.batch, MAX_BATCHES_PER_PASS);
                assert!(!more, "{n} frames and more waiting");
                taken = n;
            }
            let drops = switch.kernel_drops(port.id).unwrap();
            assert_eq!(taken, usize::from(FRAMES), "kernel drops: {drops:?}");
            assert_eq!(
                drops.rx_fill_ring_empty + drops.rx_ring_full,
                0,
                "{drops:?}"
            );
        })
        .unwrap();
    }
}
