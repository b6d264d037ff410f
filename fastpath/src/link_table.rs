//! The link table and the forwarding decision: which port a frame leaves by, or why it
//! is dropped. Plain data, no I/O, so the decision is tested without sockets.

use std::collections::HashMap;
use std::sync::Arc;

use crate::counters::{Direction, DropReason, LinkCounters};
use crate::peer::PeerId;
use xwire_proto::control::Carrier;
use xwire_proto::WireId;

/// A port's index in its worker (`PortId(3)` is the worker's fourth port slot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u16);

/// The shortest frame forwarded: an Ethernet header.
pub const MIN_FRAME_LEN: usize = 14;

/// The second end of a link: a port of this worker, or a peer node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Far {
    Port(PortId),
    /// A peer node, and the carrier this link's frames take to it (`None`: the peer's).
    Peer(PeerId, Option<Carrier>),
}

/// Where the frames of one port go.
#[derive(Debug, Clone)]
struct Route {
    out: Far,
    direction: Direction,
    link: usize,
}

#[derive(Debug)]
struct Link {
    wire: WireId,
    a: PortId,
    b: Far,
    counters: Arc<LinkCounters>,
}

/// What to do with one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Forward {
        out: PortId,
        link: usize,
        direction: Direction,
    },
    /// To the peer node, tagged with the wire's id, on the link's carrier (`None`: the
    /// peer's).
    Remote {
        peer: PeerId,
        wire: WireId,
        carrier: Option<Carrier>,
        link: usize,
        direction: Direction,
    },
    Drop {
        reason: DropReason,
        link: Option<(usize, Direction)>,
    },
}

impl Verdict {
    /// The link a frame is sent on, and its direction (`None` for a drop).
    pub fn link(&self) -> Option<(usize, Direction)> {
        match *self {
            Verdict::Forward {
                link, direction, ..
            }
            | Verdict::Remote {
                link, direction, ..
            } => Some((link, direction)),
            Verdict::Drop { .. } => None,
        }
    }
}

/// Why a link could not be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkError {
    #[error("link {0} exists")]
    DuplicateWire(WireId),
    #[error("port {0:?} is already in link {1}")]
    PortInUse(PortId, WireId),
    #[error("a link needs two different ports")]
    SamePort,
}

/// Links between pairs of ports or between a port and a peer node, and each port's
/// largest frame.
#[derive(Debug, Default)]
pub(crate) struct LinkTable {
    routes: Vec<Option<Route>>,
    max_frame: Vec<usize>,
    links: Vec<Option<Link>>,
    /// Links with a peer node at the far end, by (peer, wire id).
    remote: HashMap<(PeerId, WireId), usize>,
}

impl LinkTable {
    /// The largest frame port `port` takes (0: none set).
    pub fn max_frame(&self, port: PortId) -> usize {
        self.max_frame
            .get(usize::from(port.0))
            .copied()
            .unwrap_or(0)
    }

    /// Records the largest frame `port` can send (its MTU plus the Ethernet header).
    pub(crate) fn set_max_frame(&mut self, port: PortId, max_frame: usize) {
        let i = usize::from(port.0);
        if self.max_frame.len() <= i {
            self.max_frame.resize(i + 1, 0);
        }
        self.max_frame[i] = max_frame;
    }

    /// Joins two ports; frames from each go out of the other.
    pub fn add_link(
        &mut self,
        wire: WireId,
        a: PortId,
        b: PortId,
    ) -> Result<Arc<LinkCounters>, LinkError> {
        if a == b {
            return Err(LinkError::SamePort);
        }
        self.insert(wire, a, Far::Port(b))
    }

    /// Joins a port to a peer node: its frames go to the peer tagged with `wire`, and the
    /// peer's frames tagged with `wire` come out of the port.
    pub fn add_remote_link(
        &mut self,
        wire: WireId,
        port: PortId,
        peer: PeerId,
        carrier: Option<Carrier>,
    ) -> Result<Arc<LinkCounters>, LinkError> {
        self.insert(wire, port, Far::Peer(peer, carrier))
    }

    fn insert(&mut self, wire: WireId, a: PortId, b: Far) -> Result<Arc<LinkCounters>, LinkError> {
        if self.links.iter().flatten().any(|l| l.wire == wire) {
            return Err(LinkError::DuplicateWire(wire));
        }
        let ports = [Some(a), if let Far::Port(p) = b { Some(p) } else { None }];
        for port in ports.into_iter().flatten() {
            if let Some(route) = self.route(port) {
                let owner = self.links[route.link]
                    .as_ref()
                    .map_or(WireId(0), |l| l.wire);
                return Err(LinkError::PortInUse(port, owner));
            }
        }
        let counters = Arc::new(LinkCounters::default());
        let link = Link {
            wire,
            a,
            b,
            counters: Arc::clone(&counters),
        };
        let index = match self.links.iter().position(Option::is_none) {
            Some(free) => {
                self.links[free] = Some(link);
                free
            }
            None => {
                self.links.push(Some(link));
                self.links.len() - 1
            }
        };
        self.set_route(
            a,
            Some(Route {
                out: b,
                direction: Direction::AToB,
                link: index,
            }),
        );
        match b {
            Far::Port(b) => self.set_route(
                b,
                Some(Route {
                    out: Far::Port(a),
                    direction: Direction::BToA,
                    link: index,
                }),
            ),
            Far::Peer(peer, _) => {
                self.remote.insert((peer, wire), index);
            }
        }
        Ok(counters)
    }

    /// Removes a link; its ports stay, and their frames are dropped as `NoLink`.
    pub fn remove_link(&mut self, wire: WireId) -> bool {
        let Some(index) = self
            .links
            .iter()
            .position(|l| l.as_ref().is_some_and(|l| l.wire == wire))
        else {
            return false;
        };
        if let Some(link) = self.links[index].take() {
            self.set_route(link.a, None);
            match link.b {
                Far::Port(b) => self.set_route(b, None),
                Far::Peer(peer, _) => {
                    self.remote.remove(&(peer, link.wire));
                }
            }
        }
        true
    }

    /// Forgets a port: its link, if any, goes too. Returns the removed link's wire.
    pub fn remove_port(&mut self, port: PortId) -> Option<WireId> {
        let wire = self
            .route(port)
            .and_then(|r| self.links[r.link].as_ref())
            .map(|l| l.wire);
        if let Some(wire) = wire {
            self.remove_link(wire);
        }
        if let Some(max) = self.max_frame.get_mut(usize::from(port.0)) {
            *max = 0;
        }
        wire
    }

    /// The verdict on a frame received on `port` that is longer than any frame can be:
    /// dropped, and counted on the port's link.
    pub fn oversized(&self, port: PortId) -> Verdict {
        Verdict::Drop {
            reason: DropReason::TooLarge,
            link: self.route(port).map(|r| (r.link, r.direction)),
        }
    }

    /// The forwarding decision for a frame of `len` bytes received on `port`.
    pub fn decide(&self, port: PortId, len: usize) -> Verdict {
        let Some(route) = self.route(port) else {
            return Verdict::Drop {
                reason: DropReason::NoLink,
                link: None,
            };
        };
        let on_link = Some((route.link, route.direction));
        if len < MIN_FRAME_LEN {
            return Verdict::Drop {
                reason: DropReason::Runt,
                link: on_link,
            };
        }
        let out = match route.out {
            Far::Port(out) => out,
            Far::Peer(peer, carrier) => {
                if len > xwire_proto::data::MAX_FRAME_LEN {
                    return Verdict::Drop {
                        reason: DropReason::TooLarge,
                        link: on_link,
                    };
                }
                let wire = self.links[route.link]
                    .as_ref()
                    .map_or(WireId(0), |l| l.wire);
                return Verdict::Remote {
                    peer,
                    wire,
                    carrier,
                    link: route.link,
                    direction: route.direction,
                };
            }
        };
        self.forward_to(out, len, route.link, route.direction)
    }

    /// The forwarding decision for a frame of `len` bytes from peer node `peer`, tagged
    /// with wire id `wire`.
    pub(crate) fn decide_remote(&self, peer: PeerId, wire: WireId, len: usize) -> Verdict {
        let Some(&link) = self.remote.get(&(peer, wire)) else {
            return Verdict::Drop {
                reason: DropReason::NoLink,
                link: None,
            };
        };
        let Some(out) = self.links[link].as_ref().map(|l| l.a) else {
            return Verdict::Drop {
                reason: DropReason::NoLink,
                link: None,
            };
        };
        if len < MIN_FRAME_LEN {
            return Verdict::Drop {
                reason: DropReason::Runt,
                link: Some((link, Direction::BToA)),
            };
        }
        self.forward_to(out, len, link, Direction::BToA)
    }

    fn forward_to(&self, out: PortId, len: usize, link: usize, direction: Direction) -> Verdict {
        let max = self.max_frame.get(usize::from(out.0)).copied().unwrap_or(0);
        if len > max {
            return Verdict::Drop {
                reason: DropReason::TooLarge,
                link: Some((link, direction)),
            };
        }
        Verdict::Forward {
            out,
            link,
            direction,
        }
    }

    /// The index (as given in a `Verdict`) of the link of `wire`.
    pub(crate) fn link_index(&self, wire: WireId) -> Option<usize> {
        self.links
            .iter()
            .position(|l| l.as_ref().is_some_and(|l| l.wire == wire))
    }

    /// The link of `wire` and the direction of the frames it receives on `port`, when
    /// `port` is one of its ends.
    pub(crate) fn direction_from(&self, wire: WireId, port: PortId) -> Option<(usize, Direction)> {
        let index = self.link_index(wire)?;
        self.route(port)
            .filter(|r| r.link == index)
            .map(|r| (index, r.direction))
    }

    /// The index of the link `port` is an end of.
    pub(crate) fn link_of_port(&self, port: PortId) -> Option<usize> {
        self.route(port).map(|r| r.link)
    }

    /// Every link: its wire, its first port, its second port (`None`: a peer node) and
    /// its counters.
    pub fn links(&self) -> impl Iterator<Item = (WireId, PortId, Option<PortId>, &LinkCounters)> {
        self.links.iter().flatten().map(|link| {
            let b = match link.b {
                Far::Port(port) => Some(port),
                Far::Peer(..) => None,
            };
            (link.wire, link.a, b, &*link.counters)
        })
    }

    /// The counters of the link at `index` (as given in a `Verdict`).
    pub fn counters(&self, index: usize) -> Option<&LinkCounters> {
        self.links.get(index)?.as_ref().map(|l| &*l.counters)
    }

    fn route(&self, port: PortId) -> Option<&Route> {
        self.routes.get(usize::from(port.0))?.as_ref()
    }

    fn set_route(&mut self, port: PortId, route: Option<Route>) {
        let i = usize::from(port.0);
        if self.routes.len() <= i {
            self.routes.resize(i + 1, None);
        }
        self.routes[i] = route;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P0: PortId = PortId(0);
    const P1: PortId = PortId(1);
    const P2: PortId = PortId(2);

    fn table() -> LinkTable {
        let mut t = LinkTable::default();
        for p in [P0, P1, P2] {
            t.set_max_frame(p, 1514);
        }
        t
    }

    #[test]
    fn frames_cross_a_link_in_both_directions() {
        let mut t = table();
        t.add_link(WireId(7), P0, P1).unwrap();
        assert!(matches!(
            t.decide(P0, 60),
            Verdict::Forward {
                out: P1,
                direction: Direction::AToB,
                ..
            }
        ));
        assert!(matches!(
            t.decide(P1, 1514),
            Verdict::Forward {
                out: P0,
                direction: Direction::BToA,
                ..
            }
        ));
    }

    #[test]
    fn drops_carry_their_reason() {
        let mut t = table();
        t.add_link(WireId(7), P0, P1).unwrap();
        t.set_max_frame(P1, 1000);
        assert!(matches!(
            t.decide(P2, 60),
            Verdict::Drop {
                reason: DropReason::NoLink,
                link: None
            }
        ));
        assert!(matches!(
            t.decide(P0, 13),
            Verdict::Drop {
                reason: DropReason::Runt,
                link: Some(_)
            }
        ));
        assert!(matches!(
            t.decide(P0, 1001),
            Verdict::Drop {
                reason: DropReason::TooLarge,
                link: Some(_)
            }
        ));
        assert!(matches!(t.decide(P1, 1001), Verdict::Forward { .. }));
    }

    #[test]
    fn removing_a_link_stops_forwarding_and_frees_its_ports() {
        let mut t = table();
        t.add_link(WireId(7), P0, P1).unwrap();
        assert!(t.remove_link(WireId(7)));
        assert!(!t.remove_link(WireId(7)));
        assert!(matches!(
            t.decide(P0, 60),
            Verdict::Drop {
                reason: DropReason::NoLink,
                ..
            }
        ));
        t.add_link(WireId(8), P1, P2).unwrap();
        assert!(matches!(t.decide(P2, 60), Verdict::Forward { out: P1, .. }));
    }

    #[test]
    fn a_port_or_uid_is_used_once() {
        let mut t = table();
        t.add_link(WireId(7), P0, P1).unwrap();
        assert_eq!(
            t.add_link(WireId(7), P2, PortId(3)).unwrap_err(),
            LinkError::DuplicateWire(WireId(7))
        );
        assert_eq!(
            t.add_link(WireId(9), P1, P2).unwrap_err(),
            LinkError::PortInUse(P1, WireId(7))
        );
        assert_eq!(
            t.add_link(WireId(9), P2, P2).unwrap_err(),
            LinkError::SamePort
        );
    }

    #[test]
    fn removing_a_port_takes_its_link() {
        let mut t = table();
        t.add_link(WireId(7), P0, P1).unwrap();
        assert_eq!(t.remove_port(P0), Some(WireId(7)));
        assert!(matches!(
            t.decide(P1, 60),
            Verdict::Drop {
                reason: DropReason::NoLink,
                ..
            }
        ));
        assert_eq!(t.remove_port(P0), None);
    }

    #[test]
    fn counters_stay_with_their_link() {
        let mut t = table();
        let c = t.add_link(WireId(7), P0, P1).unwrap();
        let Verdict::Forward {
            link, direction, ..
        } = t.decide(P0, 100)
        else {
            panic!("forward")
        };
        t.counters(link).unwrap().forwarded(direction, 1, 100);
        assert_eq!(c.snapshot(Direction::AToB).bytes, 100);
    }

    #[test]
    fn remote_links_send_to_the_peer_and_take_its_frames_by_uid() {
        let mut t = table();
        let peer = PeerId(3);
        t.add_remote_link(WireId(9), P0, peer, None).unwrap();
        assert!(matches!(
            t.decide(P0, 9000),
            Verdict::Remote {
                peer: PeerId(3),
                wire: WireId(9),
                direction: Direction::AToB,
                ..
            }
        ));
        assert!(matches!(
            t.decide_remote(peer, WireId(9), 60),
            Verdict::Forward {
                out: P0,
                direction: Direction::BToA,
                ..
            }
        ));
        // Too large for the pod's port, unknown wire id, unknown peer, runt.
        assert!(matches!(
            t.decide_remote(peer, WireId(9), 1515),
            Verdict::Drop {
                reason: DropReason::TooLarge,
                link: Some((_, Direction::BToA)),
            }
        ));
        for (p, wire) in [(peer, WireId(10)), (PeerId(4), WireId(9))] {
            assert!(matches!(
                t.decide_remote(p, wire, 60),
                Verdict::Drop {
                    reason: DropReason::NoLink,
                    link: None
                }
            ));
        }
        assert!(matches!(
            t.decide_remote(peer, WireId(9), 10),
            Verdict::Drop {
                reason: DropReason::Runt,
                ..
            }
        ));
        // One wire id space for local and remote links; the port is taken.
        assert_eq!(
            t.add_link(WireId(9), P1, P2).unwrap_err(),
            LinkError::DuplicateWire(WireId(9))
        );
        assert_eq!(
            t.add_remote_link(WireId(10), P0, peer, None).unwrap_err(),
            LinkError::PortInUse(P0, WireId(9))
        );
        assert!(t.remove_link(WireId(9)));
        assert!(matches!(
            t.decide_remote(peer, WireId(9), 60),
            Verdict::Drop {
                reason: DropReason::NoLink,
                ..
            }
        ));
        assert!(matches!(
            t.decide(P0, 60),
            Verdict::Drop {
                reason: DropReason::NoLink,
                ..
            }
        ));
    }
}
