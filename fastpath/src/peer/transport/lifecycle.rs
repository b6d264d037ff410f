//! How peer connections begin and end: dialing (and knocking), the Hello exchange that
//! names the peer, and what a lost connection means.

use std::time::Instant;

use quinn_proto::ConnectionHandle;
use rustls::pki_types::{CertificateDer, ServerName};
use xwire_proto::control::{
    Capabilities, ControlBody, ControlMessage, ErrorBody, ErrorCode, Hello,
};
use xwire_proto::DecodeError;

use super::{send_or_close, PeerTransport, CLOSE_SHUTDOWN, MAX_BACKOFF, MIN_BACKOFF};
use crate::peer::session::{Inbound, Session};
use crate::peer::{PeerEvent, PeerId};

/// QUIC application close codes for a refused peer.
const CLOSE_PROTOCOL: u32 = 1;
const CLOSE_NAME: u32 = 2;
/// A knock was heard: the node that dials is dialing now.
pub(super) const CLOSE_KNOCK_HEARD: u32 = 4;
/// A queue for this peer overflowed (it does not read, or sends faster than the control
/// plane takes its messages): the next connection's Sync makes good what was lost.
pub(super) const CLOSE_OVERFLOW: u32 = 5;
/// Why a connection ended when its peer knocked (it restarted).
const KNOCK_REASON: &str = "the peer restarted (it knocked)";

impl PeerTransport {
    pub(super) fn dial(&mut self, now: Instant) {
        for index in 0..self.peers.len() {
            let peer = &mut self.peers[index];
            if let (Some(addr), true) = (peer.addr, peer.knock) {
                peer.knock = false;
                match self
                    .endpoint
                    .connect(now, self.client.clone(), addr, &peer.name)
                {
                    Ok((handle, conn)) => {
                        let mut session = Session::new(conn, Some(index));
                        session.knock = true;
                        self.sessions.insert(handle, session);
                    }
                    Err(e) => tracing::warn!(peer = %peer.name, %addr, error = %e, "cannot knock"),
                }
                continue;
            }
            let (Some(addr), true, None) = (peer.addr, peer.dials, peer.session) else {
                continue;
            };
            if now < peer.next_dial {
                continue;
            }
            peer.next_dial = now + peer.backoff;
            peer.backoff = (peer.backoff * 2).min(MAX_BACKOFF);
            match self
                .endpoint
                .connect(now, self.client.clone(), addr, &peer.name)
            {
                Ok((handle, conn)) => {
                    self.counters.dials += 1;
                    peer.session = Some(handle);
                    self.sessions
                        .insert(handle, Session::new(conn, Some(index)));
                }
                Err(e) => tracing::warn!(peer = %peer.name, %addr, error = %e, "cannot dial"),
            }
        }
    }

    pub(super) fn hello(&self) -> Hello {
        Hello {
            min_version: *self.versions.start(),
            max_version: *self.versions.end(),
            ..Hello::current(
                self.name.clone(),
                Capabilities::DATAGRAM.union(Capabilities::STREAM),
            )
        }
    }

    pub(super) fn on_inbound(
        &mut self,
        handle: ConnectionHandle,
        session: &mut Session,
        inbound: Inbound,
        now: Instant,
    ) {
        let message = match inbound {
            Inbound::Control(message) => message,
            Inbound::Broken(e) => {
                self.refuse(session, now, CLOSE_PROTOCOL, format!("undecodable: {e}"));
                return;
            }
            Inbound::Undecodable { request_id, error } if session.hello_done => {
                // Framing is intact: answer, skip, and keep the connection (a newer peer
                // may send what this build does not know).
                let code = match error {
                    DecodeError::UnknownControlType { .. } => ErrorCode::UNKNOWN_TYPE,
                    _ => ErrorCode::MALFORMED,
                };
                self.answer_error(session, request_id, code, error.to_string(), now);
                return;
            }
            Inbound::Undecodable { error, .. } => {
                let reason = format!("its first message does not decode: {error}");
                self.refuse(session, now, CLOSE_PROTOCOL, reason);
                return;
            }
        };
        let ControlBody::Hello(hello) = &message.body else {
            match (session.peer, session.hello_done) {
                (Some(peer), true) => {
                    let event = PeerEvent::Control {
                        peer: PeerId(peer as u32),
                        message,
                    };
                    if !self.push_event(event) {
                        session.conn.close(
                            now,
                            CLOSE_OVERFLOW.into(),
                            "control messages arrive faster than they are handled".into(),
                        );
                    }
                }
                _ => {
                    let reason = "a control message before Hello".to_owned();
                    self.refuse(session, now, CLOSE_PROTOCOL, reason);
                }
            }
            return;
        };
        if session.hello_done {
            // One Hello per connection: another would make this node Sync all over again.
            let reason = "Hello was already exchanged on this connection".to_owned();
            self.answer_error(
                session,
                message.request_id,
                ErrorCode::CONFLICT,
                reason,
                now,
            );
            return;
        }
        let Some(version) = hello.negotiate(&self.hello()) else {
            let _ = session.send_control(&ControlMessage {
                request_id: message.request_id,
                body: ControlBody::Error(ErrorBody {
                    code: ErrorCode::UNSUPPORTED_VERSION,
                    message: format!(
                        "this node speaks versions {}..={}",
                        self.versions.start(),
                        self.versions.end()
                    ),
                }),
            });
            let reason = format!(
                "{} speaks versions {}..={}",
                hello.node_name, hello.min_version, hello.max_version
            );
            self.refuse(session, now, CLOSE_PROTOCOL, reason);
            return;
        };
        if !certificate_names(session, &hello.node_name) {
            let reason = format!("Hello names {:?}, not its certificate", hello.node_name);
            self.refuse(session, now, CLOSE_NAME, reason);
            return;
        }
        let index = match session.peer {
            Some(index) => index,
            None if self
                .peers
                .iter()
                .any(|p| p.name == hello.node_name && p.dials) =>
            {
                // A knock from a peer that this node dials: the peer (re)started, so an
                // established connection to it is stale. Dial it now.
                //
                // A dial still in its handshake is stale too if the peer has not
                // answered it: its first packet went out while the peer was down (the
                // peer has since finished a whole handshake for its knock). Left alone,
                // it would resend only after QUIC's first timeout (about a second, with
                // no RTT measured yet), and the peer's wires would wait that long. A dial
                // the peer has answered crossed the knock (both nodes starting at once)
                // and is left to finish.
                let index = self.peer_index(&hello.node_name);
                let peer = &mut self.peers[index];
                tracing::debug!(peer = %peer.name, "knock heard");
                let current = peer.session.and_then(|h| self.sessions.get(&h));
                let was_up = current.is_some_and(|s| s.hello_done);
                let unanswered =
                    current.is_some_and(|s| !s.hello_done && s.conn.stats().udp_rx.datagrams == 0);
                let stale = (was_up || unanswered).then(|| peer.session.take());
                if peer.session.is_none() {
                    peer.next_dial = now;
                    peer.backoff = MIN_BACKOFF;
                }
                if was_up {
                    tracing::info!(peer = %peer.name, "peer down: it restarted");
                    self.push_event(PeerEvent::Down {
                        peer: PeerId(index as u32),
                        reason: KNOCK_REASON.into(),
                    });
                }
                if let Some(old) = stale.flatten().and_then(|old| self.sessions.get_mut(&old)) {
                    old.conn
                        .close(now, CLOSE_SHUTDOWN.into(), KNOCK_REASON.into());
                }
                session
                    .conn
                    .close(now, CLOSE_KNOCK_HEARD.into(), "dialing".into());
                return;
            }
            None => {
                // Accepted side: the peer is who its Hello (and certificate) say, and must
                // be a configured peer at the address it connects from.
                let remote = session.conn.remote_address();
                let Some(index) = self.peers.iter().position(|p| {
                    p.name == hello.node_name && p.addr.is_some_and(|a| a.ip() == remote.ip())
                }) else {
                    let reason =
                        format!("{:?} at {remote} is not a configured peer", hello.node_name);
                    self.refuse(session, now, CLOSE_NAME, reason);
                    return;
                };
                session.peer = Some(index);
                session.send_hello(self.hello());
                index
            }
        };
        let peer = &mut self.peers[index];
        if let Some(old) = peer.session.replace(handle).filter(|&old| old != handle) {
            // A newer connection (the peer restarted) replaces the old one.
            if let Some(old) = self.sessions.get_mut(&old) {
                old.conn
                    .close(now, CLOSE_SHUTDOWN.into(), "replaced".into());
            }
        }
        peer.backoff = MIN_BACKOFF;
        session.hello_done = true;
        session.version = version;
        self.push_event(PeerEvent::Up {
            peer: PeerId(index as u32),
            name: hello.node_name.clone(),
            version,
        });
    }

    /// Answers the request `request_id` with an Error, and counts it.
    fn answer_error(
        &mut self,
        session: &mut Session,
        request_id: u64,
        code: ErrorCode,
        message: String,
        now: Instant,
    ) {
        let remote = session.conn.remote_address();
        tracing::debug!(%remote, request_id, code = code.0, %message, "control message refused");
        self.counters.control_refused += 1;
        let error = ControlMessage {
            request_id,
            body: ControlBody::Error(ErrorBody { code, message }),
        };
        send_or_close(session, &error, &mut self.counters, now);
    }

    fn refuse(&mut self, session: &mut Session, now: Instant, code: u32, reason: String) {
        let remote = session.conn.remote_address();
        tracing::warn!(%remote, %reason, "peer connection refused");
        session.conn.close(now, code.into(), reason.clone().into());
        self.push_event(PeerEvent::Refused { remote, reason });
    }

    pub(super) fn lost(&mut self, handle: ConnectionHandle, session: &Session, reason: String) {
        let remote = session.conn.remote_address();
        match session.peer {
            // A knock ends when it is heard (or when no one answers): the peer dials.
            Some(peer) if session.knock && !session.hello_done => {
                tracing::debug!(peer = %self.peers[peer].name, %reason, "knock closed");
            }
            // A connection that a newer one replaced goes quietly: the peer is up, or
            // being dialed again.
            Some(peer) if self.peers[peer].session != Some(handle) => {
                tracing::debug!(peer = %self.peers[peer].name, %reason, "replaced connection closed");
            }
            Some(peer) if session.hello_done => {
                tracing::info!(peer = %self.peers[peer].name, %remote, %reason, "peer down");
                self.push_event(PeerEvent::Down {
                    peer: PeerId(peer as u32),
                    reason,
                });
            }
            _ => {
                // A handshake that failed: most often a certificate this node does not
                // trust, or a peer that does not trust this node's.
                tracing::warn!(%remote, %reason, "peer connection failed");
                self.push_event(PeerEvent::Refused { remote, reason });
            }
        }
    }
}

/// Whether the peer's certificate (checked against the CA in the handshake) is for `name`.
fn certificate_names(session: &Session, name: &str) -> bool {
    let Some(identity) = session.conn.crypto_session().peer_identity() else {
        return false;
    };
    let Ok(chain) = identity.downcast::<Vec<CertificateDer<'static>>>() else {
        return false;
    };
    let (Some(cert), Ok(server_name)) = (chain.first(), ServerName::try_from(name.to_owned()))
    else {
        return false;
    };
    match rustls::server::ParsedCertificate::try_from(cert) {
        Ok(parsed) => rustls::client::verify_server_name(&parsed, &server_name).is_ok(),
        Err(_) => false,
    }
}
