//! What the socket tests ask of a node, over the driver and its endpoint: the time is
//! the clock's, and received frames go to a callback that says whether it knew the link.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Instant;

use xwire_fastpath::peer::{
    Carrier, ControlMessage, Flush, PeerError, PeerEvent, PeerId, PeerTransport,
};
use xwire_proto::WireId;

pub trait TestNode {
    fn add_peer(
        &mut self,
        name: &str,
        addr: SocketAddr,
        carrier: Carrier,
    ) -> Result<PeerId, PeerError>;
    fn is_up(&self, peer: PeerId) -> bool;
    fn send_frame(&mut self, peer: PeerId, link_uid: u64, frame: &[u8]) -> bool;
    fn send_control(&mut self, peer: PeerId, message: &ControlMessage) -> bool;
    fn take_events(&mut self) -> Vec<PeerEvent>;
    fn streams_held(&self) -> usize;
    /// Polls once; each received frame goes to `on_frame`, and one it refuses is counted
    /// as for an unknown link.
    fn poll_frames(&mut self, flush: Flush, on_frame: &mut dyn FnMut(PeerId, u64, &[u8]) -> bool);
}

impl TestNode for PeerTransport {
    fn add_peer(
        &mut self,
        name: &str,
        addr: SocketAddr,
        carrier: Carrier,
    ) -> Result<PeerId, PeerError> {
        self.endpoint_mut()
            .add_peer(name, addr, carrier, Instant::now())
    }

    fn is_up(&self, peer: PeerId) -> bool {
        self.endpoint().is_up(peer)
    }

    fn send_frame(&mut self, peer: PeerId, link_uid: u64, frame: &[u8]) -> bool {
        self.endpoint_mut()
            .send_frame(Instant::now(), peer, WireId(link_uid), frame, None)
            .is_ok()
    }

    fn send_control(&mut self, peer: PeerId, message: &ControlMessage) -> bool {
        self.endpoint_mut()
            .send_control(Instant::now(), peer, message)
    }

    fn take_events(&mut self) -> Vec<PeerEvent> {
        self.endpoint_mut().take_events()
    }

    fn streams_held(&self) -> usize {
        self.endpoint().streams_held()
    }

    fn poll_frames(&mut self, flush: Flush, on_frame: &mut dyn FnMut(PeerId, u64, &[u8]) -> bool) {
        self.poll(flush);
        let endpoint = self.endpoint_mut();
        while let Some(frame) = endpoint.poll_frame() {
            if !on_frame(frame.peer, frame.wire.0, frame.frame) {
                endpoint.count_unknown_link();
            }
        }
    }
}
