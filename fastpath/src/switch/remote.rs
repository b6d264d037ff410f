//! The switch's side of remote wires: frames to and from the node's transport to its
//! peers (whatever carries them: see `remote_transport.rs`), counted on their links like
//! any other.

use std::time::Instant;

use crate::counters::DropReason;
use crate::link_table::{LinkTable, Verdict};
use crate::remote_transport::{
    Flush, NotSent, PeerEvent, ReceivedFrame, RemoteTransport, TransportCounters,
};

use super::extras::LinkExtras;
use super::forward::{count_drop, deliver, Pass};
use super::{sleep, Slot, Switch};

/// Hands one frame with a `Verdict::Remote` to the transport, counted on its link.
pub(super) fn send(
    peers: &mut Option<Box<dyn RemoteTransport>>,
    table: &LinkTable,
    verdict: Verdict,
    frame: &[u8],
    now: Instant,
) {
    let Verdict::Remote {
        peer,
        wire,
        carrier,
        link,
        direction,
    } = verdict
    else {
        return;
    };
    let sent = match peers.as_mut() {
        Some(p) => p.send_frame(now, peer, wire, frame, carrier),
        None => Err(NotSent::NotConnected),
    };
    let reason = match sent {
        Ok(()) => {
            if let Some(counters) = table.counters(link) {
                counters.forwarded(direction, 1, frame.len() as u64);
            }
            return;
        }
        Err(NotSent::NotConnected) => DropReason::PeerDown,
        Err(NotSent::CarrierFull) => DropReason::CarrierFull,
    };
    count_drop(
        table,
        Verdict::Drop {
            reason,
            link: Some((link, direction)),
        },
    );
}

/// Sends one frame from a peer on its link. False when no link has its wire id from that
/// peer (the endpoint counts it).
fn deliver_remote(
    table: &LinkTable,
    slots: &mut [Option<Slot>],
    extras: &mut LinkExtras,
    touched: Option<&mut Vec<u16>>,
    received: ReceivedFrame<'_>,
) -> bool {
    let ReceivedFrame {
        peer, wire, frame, ..
    } = received;
    match table.decide_remote(peer, wire, frame.len()) {
        Verdict::Forward {
            out,
            link,
            direction,
        } => {
            // Impaired where it left its node; only a capture here.
            if extras.has(link) {
                extras.tap(link, direction, frame);
            }
            if let Some(touched) = touched {
                touched.push(out.0);
            }
            let slot = slots.get_mut(usize::from(out.0)).and_then(Option::as_mut);
            deliver(table, slot, frame, (link, direction));
            true
        }
        verdict @ Verdict::Drop { link: Some(_), .. } => {
            count_drop(table, verdict);
            true
        }
        _ => false,
    }
}

impl Switch {
    /// Runs the peer transport once, then copies the frames it received out through
    /// their ports (see `deliver`). `hold`: frames for peers may wait a little for more
    /// to share their datagram (more are coming at once). Returns the UDP datagrams that
    /// arrived, and whether more were waiting than one poll takes.
    pub(super) fn poll_peers(&mut self, hold: bool) -> Pass {
        let flush = if hold { Flush::WhenDue } else { Flush::Now };
        let Switch {
            peers,
            table,
            slots,
            extras,
            touched,
            from_peers,
            ..
        } = self;
        *from_peers = 0;
        let Some(peers) = peers.as_mut() else {
            return Pass::default();
        };
        let polled = peers.poll(flush);
        let sparse = super::forward::sparse(slots.len());
        while let Some(frame) = peers.next_frame() {
            // Only DATAGRAM frames count: a stream's flow control already holds its
            // sender back, and giving the socket a stream's frames first only tipped the
            // balance between the two directions (see `forward::port_batches`).
            *from_peers += usize::from(!frame.on_stream);
            let touched = sparse.then_some(&mut *touched);
            if !deliver_remote(table, slots, extras, touched, frame) {
                peers.count_unknown_link();
            }
        }
        Pass {
            moved: polled.datagrams,
            from_ports: 0,
            backlog: polled.more,
        }
    }

    /// Takes the transport, or gives it back when the worker cannot watch its socket
    /// (it would then hear peers only while it spins).
    pub(super) fn attach_peers(&mut self, transport: Box<dyn RemoteTransport>) -> nix::Result<()> {
        self.sleeper.watch(transport.as_fd(), sleep::NOT_A_PORT)?;
        self.peers = Some(transport);
        Ok(())
    }

    pub(super) fn peers_mut(&mut self) -> Option<&mut (dyn RemoteTransport + 'static)> {
        self.peers.as_deref_mut()
    }

    pub(super) fn peer_status(&mut self) -> Option<(TransportCounters, Vec<PeerEvent>)> {
        let peers = self.peers.as_mut()?;
        Some((peers.counters(), peers.take_events()))
    }
}
