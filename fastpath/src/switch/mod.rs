//! The worker thread's state and loop: its ports, their shared UMEM (the frame pool of
//! every port kind), the link table, and one pass of receive, decide, send, recycle.
//!
//! Every frame lives in UMEM frames while it crosses the worker. AF_XDP ports receive into
//! them and send from them by descriptor; an AF_PACKET port copies into them on receive
//! and out of them on send. Each descriptor is in exactly one place at a time: the free
//! list, one kernel ring, one port's partial RX chain, or one pending TX batch.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::os::unix::net::UnixDatagram;

use crossbeam_channel::{Receiver, TryRecvError};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use xsk_rs::config::{FrameSize, UmemConfig};
use xsk_rs::{FrameDesc, Umem};

use crate::counters::{Direction, DropReason};
use crate::link_table::{LinkTable, PortId, Verdict};
use crate::packet_port::PacketPort;
use crate::peer::PeerTransport;
use crate::worker::{Command, PortChoice, PortInfo, PortKind, WorkerConfig, WorkerError};
use crate::xdp_port::{frame_data, write_frame, PortError, XdpPort, UMEM_FRAME_DATA};
use crate::xdp_redirect::RedirectProgram;

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

/// Idle passes before a non-busy worker sleeps in poll(), and how long it sleeps there
/// before looking at its command channel again.
const SPINS_BEFORE_SLEEP: u32 = 1000;
/// Kicks per AF_XDP port per pass: enough for a pass that queued a few hundred frames
/// (a burst from a peer node) while bounding the time one port can take.
const MAX_KICKS_PER_PASS: usize = 16;
const SLEEP_MS: u16 = 10;

mod remote;

enum Port {
    Xdp(XdpPort),
    Packet(PacketPort),
}

impl Port {
    fn raw_fd(&self) -> RawFd {
        match self {
            Port::Xdp(p) => p.raw_fd(),
            Port::Packet(p) => p.raw_fd(),
        }
    }
}

/// The worker thread's state. Field order matters: ports drop before the UMEM.
pub(crate) struct Switch {
    ports: Vec<Option<Port>>,
    /// The QUIC transport to peer nodes, once attached.
    peers: Option<PeerTransport>,
    /// One frame gathered from its descriptor chain on its way to a peer.
    remote_buf: Vec<u8>,
    pending: Vec<Vec<Outgoing>>,
    /// Per port, the descriptors of a frame whose last part has not been received yet.
    rx_chains: Vec<Vec<FrameDesc>>,
    table: LinkTable,
    free: Vec<FrameDesc>,
    scratch: Vec<FrameDesc>,
    tx_scratch: Vec<FrameDesc>,
    /// The XDP program of this worker's AF_XDP ports (`None`: libxdp's program, one per
    /// interface, when this one could not be loaded or the worker opens no AF_XDP port).
    redirect: Option<RedirectProgram>,
    /// Readable when the control plane has sent a command: part of the idle poll().
    woken: UnixDatagram,
    umem: Umem,
}

impl Switch {
    pub(crate) fn new(config: &WorkerConfig, woken: UnixDatagram) -> Result<Switch, WorkerError> {
        let start = |e: &dyn std::fmt::Display| WorkerError::Start(e.to_string());
        let frames = (config.max_ports * config.frames_per_port).max(1) as u32;
        let umem_config = UmemConfig::builder()
            .frame_size(FrameSize::new(4096).map_err(|e| start(&e))?)
            .build()
            .map_err(|e| start(&e))?;
        let count = std::num::NonZeroU32::new(frames).expect("at least one frame");
        let (umem, free) = Umem::new(umem_config, count, false).map_err(|e| start(&e))?;
        Ok(Switch {
            ports: Vec::new(),
            peers: None,
            remote_buf: Vec::with_capacity(64 * 1024),
            pending: Vec::new(),
            rx_chains: Vec::new(),
            table: LinkTable::default(),
            free,
            scratch: vec![FrameDesc::default(); config.batch.max(1)],
            tx_scratch: Vec::with_capacity(config.batch.max(1)),
            redirect: match config.ports {
                PortChoice::AfPacket => None,
                _ => RedirectProgram::load(config.max_ports as u32)
                    .map_err(
                        |e| tracing::warn!(error = %e, "the worker's XDP program did not load"),
                    )
                    .ok(),
            },
            woken,
            umem,
        })
    }

    pub(crate) fn run(mut self, config: &WorkerConfig, inbox: &Receiver<Command>) {
        let mut idle_spins = 0u32;
        loop {
            loop {
                match inbox.try_recv() {
                    Ok(Command::Stop) | Err(TryRecvError::Disconnected) => {
                        // Peers learn at once that this node's wires are gone, instead
                        // of after their idle timeout.
                        if let Some(peers) = self.peers.as_mut() {
                            peers.close();
                        }
                        return;
                    }
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
                // The kernel work our sends start (the receiving veth's softirq) runs on
                // this CPU; once it overflows into ksoftirqd, a worker that spins keeps it
                // waiting for a scheduler slice, which costs milliseconds and drops. An
                // empty pass hands it the CPU; with nothing else to run this returns at once.
                std::thread::yield_now();
            } else {
                self.sleep_until_traffic();
            }
        }
    }

    /// Blocks in poll() on every port's socket; a frame wakes the worker at once.
    fn sleep_until_traffic(&self) {
        let mut fds: Vec<RawFd> = self.ports.iter().flatten().map(Port::raw_fd).collect();
        fds.extend(self.peers.as_ref().map(PeerTransport::raw_fd));
        fds.push(self.woken.as_raw_fd());
        // SAFETY: each fd belongs to a port in `self.ports`, the peer transport or the
        // wake-up socket, all open for this whole call.
        let borrowed: Vec<BorrowedFd<'_>> = fds
            .iter()
            .map(|&fd| unsafe { BorrowedFd::borrow_raw(fd) })
            .collect();
        let mut poll_fds: Vec<PollFd<'_>> = borrowed
            .iter()
            .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
            .collect();
        let _ = poll(&mut poll_fds, PollTimeout::from(SLEEP_MS));
        let mut drain = [0u8; 64];
        while self.woken.recv(&mut drain).is_ok() {}
    }

    fn apply(&mut self, command: Command, config: &WorkerConfig) {
        match command {
            Command::AddPort {
                ifname,
                max_frame,
                choice,
                reply,
            } => {
                let choice = choice.unwrap_or(config.ports);
                let _ = reply.send(self.add_port(&ifname, max_frame, choice, config));
            }
            Command::RemovePort { id, reply } => {
                let _ = reply.send(self.remove_port(id));
            }
            Command::AddLink { uid, a, b, reply } => {
                let missing = [a, b].into_iter().find(|&p| self.port(p).is_none());
                let result = match missing {
                    Some(port) => Err(WorkerError::NoSuchPort(port)),
                    None => self.table.add_link(uid, a, b).map_err(WorkerError::from),
                };
                let _ = reply.send(result);
            }
            Command::RemoveLink { uid, reply } => {
                let _ = reply.send(self.table.remove_link(uid));
            }
            Command::AttachPeers { config, reply } => {
                let result = PeerTransport::bind(*config).map(|t| {
                    let addr = t.local_addr();
                    self.attach_peers(t);
                    addr
                });
                let _ = reply.send(result.map_err(WorkerError::from));
            }
            Command::AddPeer {
                name,
                addr,
                carrier,
                reply,
            } => {
                let result = match self.peers_mut() {
                    Some(peers) => peers
                        .add_peer(&name, addr, carrier)
                        .map_err(WorkerError::from),
                    None => Err(WorkerError::NoPeers),
                };
                let _ = reply.send(result);
            }
            Command::AddRemoteLink {
                uid,
                port,
                peer,
                reply,
            } => {
                let result = match self.port(port) {
                    None => Err(WorkerError::NoSuchPort(port)),
                    Some(_) if self.peers.is_none() => Err(WorkerError::NoPeers),
                    Some(_) => self
                        .table
                        .add_remote_link(uid, port, peer)
                        .map_err(WorkerError::from),
                };
                let _ = reply.send(result);
            }
            Command::PeerStatus { reply } => {
                let _ = reply.send(self.peer_status().ok_or(WorkerError::NoPeers));
            }
            Command::SendControl {
                peer,
                message,
                reply,
            } => {
                let result = match self.peers_mut() {
                    Some(peers) => Ok(peers.send_control(peer, &message)),
                    None => Err(WorkerError::NoPeers),
                };
                let _ = reply.send(result);
            }
            Command::KernelDrops { id, reply } => {
                let drops = match self
                    .ports
                    .get_mut(usize::from(id.0))
                    .and_then(Option::as_mut)
                {
                    None => Err(WorkerError::NoSuchPort(id)),
                    Some(Port::Xdp(port)) => port.kernel_drops().map_err(WorkerError::Statistics),
                    Some(Port::Packet(port)) => {
                        port.kernel_drops().map_err(WorkerError::Statistics)
                    }
                };
                let _ = reply.send(drops);
            }
            Command::Stop => {}
        }
    }

    fn port(&self, id: PortId) -> Option<&Port> {
        self.ports.get(usize::from(id.0))?.as_ref()
    }

    /// Opens the kind of port the configuration asks for; with `Auto`, AF_XDP, or
    /// AF_PACKET when AF_XDP cannot be had (but not when another program holds the
    /// interface, which AF_PACKET would not fix).
    fn open_port(
        &self,
        ifname: &str,
        max_frame: usize,
        choice: PortChoice,
        config: &WorkerConfig,
        slot: usize,
    ) -> Result<(Port, PortKind), PortError> {
        let packet = || {
            PacketPort::open(ifname, max_frame, config.frames_per_port)
                .map(|p| (Port::Packet(p), PortKind::AfPacket))
        };
        if choice == PortChoice::AfPacket {
            return packet();
        }
        let redirect = self.redirect.as_ref().map(|p| (p, slot as u32));
        let opened = XdpPort::open(&self.umem, ifname, config.xdp_mode, max_frame, redirect)
            .map(|p| (PortKind::AfXdp(p.mode()), p))
            .map(|(kind, p)| (Port::Xdp(p), kind));
        match (choice, opened) {
            (PortChoice::Auto, Err(e @ (PortError::Socket { .. } | PortError::AlreadyOpen(_)))) => {
                tracing::warn!(ifname, reason = %e, "AF_XDP unavailable, using AF_PACKET");
                packet()
            }
            (_, opened) => opened,
        }
    }

    fn add_port(
        &mut self,
        ifname: &str,
        max_frame: usize,
        choice: PortChoice,
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
        let (port, kind) = self.open_port(ifname, max_frame, choice, config, slot)?;
        let id = PortId(slot as u16);
        self.ports[slot] = Some(port);
        self.table.set_max_frame(id, max_frame);
        self.refill(config);
        Ok(PortInfo {
            id,
            ifname: ifname.into(),
            kind,
        })
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
        if let (Port::Xdp(xdp), Some(program)) = (&port, &self.redirect) {
            if let Some((ifindex, slot)) = xdp.redirect() {
                program.release(ifindex, slot, xdp.mode());
            }
        }
        // Frames still in a closed AF_XDP socket's rings cannot be taken back one by one;
        // they are lost to this UMEM (a bounded leak of at most frames_per_port).
        drop(port);
        Ok(())
    }

    /// One pass over every port; returns the frames moved.
    fn poll_once(&mut self, config: &WorkerConfig) -> usize {
        let mut moved = 0;
        for slot in 0..self.ports.len() {
            moved += self.receive_from(slot, config.batch);
        }
        moved += self.poll_peers(moved > 0);
        for slot in 0..self.ports.len() {
            self.flush_to(slot);
        }
        for port in self.ports.iter_mut().flatten() {
            let Port::Xdp(port) = port else { continue };
            port.drain_tx(&mut self.scratch, &mut self.free, MAX_KICKS_PER_PASS);
        }
        self.refill(config);
        moved
    }

    fn receive_from(&mut self, slot: usize, batch: usize) -> usize {
        let in_port = PortId(slot as u16);
        match self.ports[slot].as_mut() {
            None => 0,
            Some(Port::Xdp(port)) => {
                // SAFETY: `scratch` is the worker's own buffer of descriptors, overwritten.
                let n = unsafe { port.receive(&mut self.scratch) };
                for i in 0..n {
                    let desc = self.scratch[i];
                    self.rx_chains[slot].push(desc);
                    if desc.has_more_frames() && self.rx_chains[slot].len() < MAX_CHAIN {
                        continue;
                    }
                    // A whole frame: one descriptor, or a chain of them (jumbo frames).
                    let len: usize = self.rx_chains[slot]
                        .iter()
                        .map(|d| d.lengths().data())
                        .sum();
                    let verdict = if desc.has_more_frames() {
                        // Longer than any frame can be: drop it whole.
                        Verdict::Drop {
                            reason: DropReason::TooLarge,
                            link: None,
                        }
                    } else {
                        self.table.decide(in_port, len)
                    };
                    let mut chain = std::mem::take(&mut self.rx_chains[slot]);
                    self.dispatch(verdict, &mut chain);
                    self.rx_chains[slot] = chain;
                }
                n
            }
            Some(Port::Packet(port)) => {
                let (table, free, pending, umem, peers) = (
                    &self.table,
                    &mut self.free,
                    &mut self.pending,
                    &self.umem,
                    &mut self.peers,
                );
                port.receive(batch, |frame, whole| {
                    let verdict = match table.decide(in_port, frame.len()) {
                        Verdict::Forward {
                            link, direction, ..
                        } if !whole => Verdict::Drop {
                            reason: DropReason::TooLarge,
                            link: Some((link, direction)),
                        },
                        v => v,
                    };
                    match verdict {
                        Verdict::Forward {
                            out,
                            link,
                            direction,
                        } => queue_copy(table, free, pending, umem, frame, out, (link, direction)),
                        Verdict::Remote { .. } => remote::send(peers, table, verdict, frame),
                        Verdict::Drop { .. } => count_drop(table, verdict),
                    }
                })
            }
        }
    }

    /// Queues a received frame (its descriptors in `chain`) for its port, or drops it.
    fn dispatch(&mut self, verdict: Verdict, chain: &mut Vec<FrameDesc>) {
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
            Verdict::Remote { .. } => {
                if let [desc] = chain.as_slice() {
                    // SAFETY: received descriptors are the worker's alone until freed below.
                    let frame = unsafe { frame_data(&self.umem, desc) };
                    remote::send(&mut self.peers, &self.table, verdict, frame);
                } else {
                    // A jumbo frame in several UMEM frames: the transport takes one slice.
                    self.remote_buf.clear();
                    for desc in chain.iter() {
                        // SAFETY: as above.
                        let part = unsafe { frame_data(&self.umem, desc) };
                        self.remote_buf.extend_from_slice(part);
                    }
                    remote::send(&mut self.peers, &self.table, verdict, &self.remote_buf);
                }
                self.free.append(chain);
            }
            Verdict::Drop { .. } => {
                count_drop(&self.table, verdict);
                self.free.append(chain);
            }
        }
    }

    fn flush_to(&mut self, slot: usize) {
        if self.pending[slot].is_empty() {
            return;
        }
        let pending = &mut self.pending[slot];
        let sent = match self.ports[slot].as_mut() {
            None => 0,
            Some(Port::Xdp(port)) => {
                // Send only whole frames, as many as the TX ring has room for.
                let room = port.tx_room(pending.len());
                let cut = pending[..room]
                    .iter()
                    .rposition(|o| o.ends_frame)
                    .map_or(0, |i| i + 1);
                self.tx_scratch.clear();
                self.tx_scratch
                    .extend(pending[..cut].iter().map(|o| o.desc));
                // SAFETY: each pending descriptor is the worker's alone; those the TX
                // ring takes pass to the kernel until they complete.
                unsafe { port.send(&self.tx_scratch) }
            }
            Some(Port::Packet(port)) => {
                // Copied out into the TX ring; the descriptors go back to the free list
                // below. `sent` counts the descriptors of the frames that fitted.
                let mut sent = 0;
                let mut start = 0;
                for end in 0..pending.len() {
                    if !pending[end].ends_frame {
                        continue;
                    }
                    let umem = &self.umem;
                    // SAFETY: pending descriptors are the worker's alone, in no ring.
                    let parts = pending[start..=end]
                        .iter()
                        .map(|o| unsafe { frame_data(umem, &o.desc) });
                    if port.queue(parts) {
                        sent = end + 1;
                    } else {
                        break;
                    }
                    start = end + 1;
                }
                port.flush();
                for out in &pending[..sent] {
                    self.free.push(out.desc);
                }
                sent
            }
        };
        for (i, out) in pending.drain(..).enumerate() {
            let ends = u64::from(out.ends_frame);
            match self.table.counters(out.link) {
                Some(c) if i < sent => {
                    c.forwarded(out.direction, ends, out.desc.lengths().data() as u64)
                }
                Some(c) => c.dropped(out.direction, DropReason::TxFull, ends),
                // The link went away since this frame was received.
                None => {}
            }
            if i >= sent {
                self.free.push(out.desc);
            }
        }
    }

    /// Tops up every AF_XDP port's fill ring to half its share of frames.
    fn refill(&mut self, config: &WorkerConfig) {
        let target = config.frames_per_port / 2;
        for port in self.ports.iter_mut().flatten() {
            let Port::Xdp(port) = port else { continue };
            let want = target.saturating_sub(port.in_fill).min(self.free.len());
            if want == 0 {
                continue;
            }
            let from = self.free.len() - want;
            // SAFETY: the free list holds descriptors of this UMEM that nothing else uses.
            let given = unsafe { port.fill(&self.free[from..]) };
            // The ring took all it was offered, or nothing.
            self.free.drain(from..from + given);
        }
    }
}

/// Copies a frame into free UMEM frames (a chain when it is longer than one) queued for
/// `out`, counted on `link`; without enough free frames it is dropped and counted.
fn queue_copy(
    table: &LinkTable,
    free: &mut Vec<FrameDesc>,
    pending: &mut [Vec<Outgoing>],
    umem: &Umem,
    frame: &[u8],
    out: PortId,
    (link, direction): (usize, Direction),
) {
    let parts = frame.len().div_ceil(UMEM_FRAME_DATA);
    if free.len() < parts {
        count_drop(
            table,
            Verdict::Drop {
                reason: DropReason::NoBuffer,
                link: Some((link, direction)),
            },
        );
        return;
    }
    for (k, bytes) in frame.chunks(UMEM_FRAME_DATA).enumerate() {
        let mut desc = free.pop().expect("checked above");
        // SAFETY: taken from the free list, so owned by the worker alone.
        unsafe { write_frame(umem, &mut desc, bytes, k + 1 < parts) };
        pending[usize::from(out.0)].push(Outgoing {
            desc,
            link,
            direction,
            ends_frame: k + 1 == parts,
        });
    }
}

fn count_drop(table: &LinkTable, verdict: Verdict) {
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
