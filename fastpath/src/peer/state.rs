//! One peer node's life, as one state machine: who dials, when, and what a knock, a
//! Hello or a lost connection changes. Pure: the endpoint feeds it what happened and
//! does what it answers (dial, close a connection, tell the control plane).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use quinn_proto::ConnectionHandle;

use super::Carrier;

/// The first wait before a redial; it doubles with each failed dial up to `MAX_BACKOFF`.
pub(crate) const MIN_BACKOFF: Duration = Duration::from_millis(100);
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Where a peer is. Of two nodes, the one whose name sorts first dials (`BackingOff`,
/// `Dialing`); the other accepts (`KnockOwed`, `Knocked`, `Awaiting`); both end `Up`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PeerState {
    /// This node accepts and has just (re)started: it owes the peer a knock, a short
    /// connection that tells the peer to dial now rather than when its old connection
    /// next times out (after a loss-recovery timeout of hundreds of milliseconds).
    KnockOwed,
    /// The knock is on its way on `knock`; hearing it, the peer dials.
    Knocked { knock: ConnectionHandle },
    /// This node accepts, and waits for the peer to dial.
    Awaiting,
    /// This node dials, next at `at`.
    BackingOff { at: Instant },
    /// This node dialed on `conn`: the handshake or the Hello exchange is under way. If
    /// it fails, the next dial is at `retry_at`.
    Dialing {
        conn: ConnectionHandle,
        retry_at: Instant,
    },
    /// Hello exchanged on `conn`: frames and control messages cross, at `version`.
    Up {
        conn: ConnectionHandle,
        version: u16,
    },
}

/// What the endpoint is to do for a peer on this pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    Knock,
    Dial,
}

/// How a connection's end changed its peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// It was the peer's connection and Hello had been exchanged: the peer is down.
    WasUp,
    /// It was this node's dial, and it failed before Hello: the next dial waits.
    DialFailed,
    /// It was the knock: heard, or unanswered.
    Knock,
    /// It was not the peer's connection (replaced by a newer one, or never its own).
    NotCurrent,
}

/// What hearing a knock changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct KnockHeard {
    /// A connection of the peer's last life, to close.
    pub(crate) stale: Option<ConnectionHandle>,
    /// The peer was up: it is down now (it restarted).
    pub(crate) was_up: bool,
}

#[derive(Debug)]
pub(crate) struct Peer {
    pub(crate) name: String,
    pub(crate) addr: SocketAddr,
    pub(crate) carrier: Carrier,
    /// This node dials (its name sorts first) and redials after a loss.
    pub(crate) dials: bool,
    pub(crate) state: PeerState,
    /// The wait after the next failed dial.
    backoff: Duration,
    /// The node left the cluster: nothing is dialed or knocked until it is declared
    /// again (its connections are closed as it retires).
    pub(crate) retired: bool,
}

impl Peer {
    /// A peer just declared: the dialing side dials at once, the other knocks.
    pub(crate) fn new(
        local: &str,
        name: &str,
        addr: SocketAddr,
        carrier: Carrier,
        now: Instant,
    ) -> Peer {
        let dials = local < name;
        Peer {
            name: name.to_owned(),
            addr,
            carrier,
            dials,
            state: if dials {
                PeerState::BackingOff { at: now }
            } else {
                PeerState::KnockOwed
            },
            backoff: MIN_BACKOFF,
            retired: false,
        }
    }

    /// The peer declared again, perhaps at a new address or with a new carrier. A node
    /// that accepts and has no connection knocks again (at the new address).
    pub(crate) fn redeclare(&mut self, addr: SocketAddr, carrier: Carrier, now: Instant) {
        self.addr = addr;
        self.carrier = carrier;
        if std::mem::take(&mut self.retired) {
            // Back from retirement: as new, but a live connection stays.
            self.backoff = MIN_BACKOFF;
            if self.connection().is_none() {
                self.state = if self.dials {
                    PeerState::BackingOff { at: now }
                } else {
                    PeerState::KnockOwed
                };
            }
            return;
        }
        if matches!(self.state, PeerState::Awaiting | PeerState::Knocked { .. }) {
            self.state = PeerState::KnockOwed;
        }
    }

    /// The connection Hello was exchanged on, and its version.
    pub(crate) fn up(&self) -> Option<(ConnectionHandle, u16)> {
        match self.state {
            PeerState::Up { conn, version } => Some((conn, version)),
            _ => None,
        }
    }

    /// The connection that is this peer's (or is becoming so): up, or being dialed.
    pub(crate) fn connection(&self) -> Option<ConnectionHandle> {
        match self.state {
            PeerState::Up { conn, .. } | PeerState::Dialing { conn, .. } => Some(conn),
            _ => None,
        }
    }

    /// Whether a knock or a dial is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> Option<Due> {
        if self.retired {
            return None;
        }
        match self.state {
            PeerState::KnockOwed => Some(Due::Knock),
            PeerState::BackingOff { at } if at <= now => Some(Due::Dial),
            _ => None,
        }
    }

    /// The next moment `due` may change without anything arriving.
    pub(crate) fn next_timeout(&self) -> Option<Instant> {
        if self.retired {
            return None;
        }
        match self.state {
            PeerState::BackingOff { at } => Some(at),
            _ => None,
        }
    }

    /// A dial went out on `conn` (`Some`), or could not even begin (`None`): either way
    /// the next one waits the backoff, which doubles.
    pub(crate) fn dialed(&mut self, conn: Option<ConnectionHandle>, now: Instant) {
        let retry_at = now + self.backoff;
        self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
        self.state = match conn {
            Some(conn) => PeerState::Dialing { conn, retry_at },
            None => PeerState::BackingOff { at: retry_at },
        };
    }

    /// The knock went out on `conn` (`None`: it could not, and the peer dials when its
    /// old connection times out).
    pub(crate) fn knocked(&mut self, conn: Option<ConnectionHandle>) {
        self.state = match conn {
            Some(knock) => PeerState::Knocked { knock },
            None => PeerState::Awaiting,
        };
    }

    /// Hello was exchanged on `conn`: the peer is up on it. Returns the connection it
    /// replaces (the peer restarted, or a dial and an accept crossed), to close.
    pub(crate) fn hello_done(
        &mut self,
        conn: ConnectionHandle,
        version: u16,
    ) -> Option<ConnectionHandle> {
        let replaced = self.connection().filter(|&old| old != conn);
        self.state = PeerState::Up { conn, version };
        self.backoff = MIN_BACKOFF;
        replaced
    }

    /// `conn` ended (lost, closed, or drained).
    pub(crate) fn ended(&mut self, conn: ConnectionHandle, now: Instant) -> Ended {
        match self.state {
            PeerState::Up { conn: current, .. } if current == conn => {
                self.state = if self.dials {
                    PeerState::BackingOff { at: now }
                } else {
                    PeerState::Awaiting
                };
                Ended::WasUp
            }
            PeerState::Dialing {
                conn: current,
                retry_at,
            } if current == conn => {
                self.state = PeerState::BackingOff { at: retry_at };
                Ended::DialFailed
            }
            PeerState::Knocked { knock } if knock == conn => {
                self.state = PeerState::Awaiting;
                Ended::Knock
            }
            _ => Ended::NotCurrent,
        }
    }

    /// The peer, which this node dials, knocked: it (re)started, so a connection of its
    /// last life is stale, and this node dials now. A dial still in its handshake is stale
    /// too if the peer never `answered` it: its first packet went out while the peer was
    /// down, and would be resent only after QUIC's first timeout (about a second with no
    /// RTT measured yet). A dial the peer has answered crossed the knock (both nodes
    /// starting at once) and is left to finish.
    pub(crate) fn knock_heard(&mut self, answered: bool, now: Instant) -> KnockHeard {
        debug_assert!(self.dials, "only a dialing node hears knocks");
        let heard = match self.state {
            PeerState::Up { conn, .. } => KnockHeard {
                stale: Some(conn),
                was_up: true,
            },
            PeerState::Dialing { conn, .. } if !answered => KnockHeard {
                stale: Some(conn),
                was_up: false,
            },
            PeerState::Dialing { .. } => return KnockHeard::default(),
            _ => KnockHeard::default(),
        };
        self.state = PeerState::BackingOff { at: now };
        self.backoff = MIN_BACKOFF;
        heard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(n: usize) -> ConnectionHandle {
        ConnectionHandle(n)
    }

    fn addr() -> SocketAddr {
        "192.0.2.1:4789".parse().unwrap()
    }

    #[test]
    fn the_node_whose_name_sorts_first_dials_and_the_other_knocks() {
        let now = Instant::now();
        let a = Peer::new("node-a", "node-b", addr(), Carrier::Datagram, now);
        let b = Peer::new("node-b", "node-a", addr(), Carrier::Datagram, now);
        assert_eq!(a.due(now), Some(Due::Dial));
        assert_eq!(b.due(now), Some(Due::Knock));
    }

    #[test]
    fn failed_dials_back_off_doubling_up_to_the_limit_and_hello_resets_it() {
        let mut now = Instant::now();
        let mut peer = Peer::new("a", "b", addr(), Carrier::Datagram, now);
        let mut waits = Vec::new();
        for n in 0..8 {
            assert_eq!(peer.due(now), Some(Due::Dial));
            peer.dialed(Some(handle(n)), now);
            assert_eq!(peer.due(now), None, "dialing: nothing more is due");
            assert_eq!(peer.ended(handle(n), now), Ended::DialFailed);
            let at = peer.next_timeout().unwrap();
            waits.push(at - now);
            now = at;
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        peer.dialed(Some(handle(9)), now);
        assert_eq!(peer.hello_done(handle(9), 2), None);
        assert_eq!(peer.up(), Some((handle(9), 2)));
        // Lost once up: redialed at once, and the wait starts again from the least.
        assert_eq!(peer.ended(handle(9), now), Ended::WasUp);
        assert_eq!(peer.due(now), Some(Due::Dial));
        peer.dialed(None, now);
        assert_eq!(peer.next_timeout(), Some(now + MIN_BACKOFF));
    }

    #[test]
    fn a_retired_peer_is_neither_dialed_nor_knocked_until_declared_again() {
        let now = Instant::now();
        for (local, remote, due) in [("a", "b", Due::Dial), ("b", "a", Due::Knock)] {
            let mut peer = Peer::new(local, remote, addr(), Carrier::Datagram, now);
            peer.retired = true;
            assert_eq!((peer.due(now), peer.next_timeout()), (None, None));
            // A lost dial does not bring it back either.
            peer.dialed(Some(handle(1)), now);
            peer.ended(handle(1), now);
            assert_eq!(peer.due(now + MAX_BACKOFF), None);
            peer.redeclare(addr(), Carrier::Stream, now);
            assert_eq!(peer.due(now), Some(due), "{local}");
            assert_eq!(peer.carrier, Carrier::Stream);
        }
    }

    #[test]
    fn a_knock_once_sent_ends_in_waiting_and_a_redeclared_peer_is_knocked_again() {
        let now = Instant::now();
        let mut peer = Peer::new("b", "a", addr(), Carrier::Datagram, now);
        peer.knocked(Some(handle(1)));
        assert_eq!(peer.due(now), None);
        assert_eq!(peer.ended(handle(2), now), Ended::NotCurrent);
        assert_eq!(peer.ended(handle(1), now), Ended::Knock);
        assert_eq!(peer.state, PeerState::Awaiting);
        peer.redeclare("192.0.2.9:1".parse().unwrap(), Carrier::Stream, now);
        assert_eq!(peer.due(now), Some(Due::Knock));
        // Up, it is not knocked again when redeclared.
        peer.hello_done(handle(3), 2);
        peer.redeclare(addr(), Carrier::Datagram, now);
        assert_eq!(peer.up(), Some((handle(3), 2)));
        assert_eq!(peer.ended(handle(3), now), Ended::WasUp);
        assert_eq!(peer.state, PeerState::Awaiting, "the accepting side waits");
    }

    #[test]
    fn a_newer_connection_replaces_the_old_which_then_ends_quietly() {
        let now = Instant::now();
        let mut peer = Peer::new("b", "a", addr(), Carrier::Datagram, now);
        assert_eq!(peer.hello_done(handle(1), 2), None);
        assert_eq!(peer.hello_done(handle(2), 2), Some(handle(1)));
        assert_eq!(peer.ended(handle(1), now), Ended::NotCurrent);
        assert_eq!(peer.up(), Some((handle(2), 2)));
    }

    #[test]
    fn a_knock_makes_the_dialing_node_drop_a_stale_connection_and_dial_now() {
        let now = Instant::now();
        let later = now + Duration::from_secs(3);
        // Up: the connection is of the peer's last life.
        let mut peer = Peer::new("a", "b", addr(), Carrier::Datagram, now);
        peer.dialed(Some(handle(1)), now);
        peer.hello_done(handle(1), 2);
        let heard = peer.knock_heard(true, later);
        assert_eq!(
            heard,
            KnockHeard {
                stale: Some(handle(1)),
                was_up: true
            }
        );
        assert_eq!(peer.due(later), Some(Due::Dial));

        // A dial the peer never answered is stale; one it answered is left to finish.
        let mut peer = Peer::new("a", "b", addr(), Carrier::Datagram, now);
        for n in 0..3 {
            peer.dialed(Some(handle(n)), now);
            peer.ended(handle(n), now);
        }
        peer.dialed(Some(handle(7)), now);
        assert_eq!(peer.knock_heard(true, later), KnockHeard::default());
        assert_eq!(peer.connection(), Some(handle(7)));
        let heard = peer.knock_heard(false, later);
        assert_eq!(heard.stale, Some(handle(7)));
        assert!(!heard.was_up);
        assert_eq!(
            peer.due(later),
            Some(Due::Dial),
            "at once, not after the backoff"
        );
        peer.dialed(None, later);
        assert_eq!(peer.next_timeout(), Some(later + MIN_BACKOFF));

        // Backing off: the wait is cut short.
        let mut peer = Peer::new("a", "b", addr(), Carrier::Datagram, now);
        peer.dialed(None, now);
        assert_eq!(peer.due(now), None);
        assert_eq!(peer.knock_heard(false, now), KnockHeard::default());
        assert_eq!(peer.due(now), Some(Due::Dial));
    }
}
