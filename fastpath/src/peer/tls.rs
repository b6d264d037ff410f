//! QUIC configurations with mutual TLS: every node is a server that requires a client
//! certificate from the cluster CA, and a client that shows its own and checks that the
//! node it dials holds a certificate for that node's name.

use std::sync::Arc;
use std::time::Duration;

use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{AckFrequencyConfig, ClientConfig, ServerConfig, TransportConfig, VarInt};
use rustls::server::WebPkiClientVerifier;

use super::congestion::{OverloadResponse, OwnQueue};
use super::PeerError;
use xwire_pki::NodeIdentity;

/// The ALPN protocol of xwire's peer connections.
const ALPN: &[u8] = b"xwire/1";

/// Packets a peer may receive before it acknowledges them (QUIC's ACK frequency
/// extension; quinn's default acknowledges every other packet). With no congestion
/// window nothing waits for an acknowledgement to send, so frequent ones only cost both
/// nodes a packet to build, encrypt, send and read: at 300 kpps of 64-byte frames they
/// were a third of the datagrams on the wire.
const ACK_EVERY: u32 = 16;
/// How long a peer may hold an acknowledgement when fewer than `ACK_EVERY` packets came.
const MAX_ACK_DELAY: Duration = Duration::from_millis(2);
/// DATAGRAMs quinn holds between two sends of the transport, in bytes.
const DATAGRAM_SEND_BUFFER: usize = 8 << 20;

fn identity_error(what: &str, e: impl std::fmt::Display) -> PeerError {
    PeerError::Identity(format!("{what}: {e}"))
}

fn parts(identity: &NodeIdentity) -> Result<xwire_pki::tls::TlsParts, PeerError> {
    identity.tls_parts().map_err(PeerError::Identity)
}

/// Draws once from the TLS provider's random source on the calling thread, so that the
/// worker never has to seed it. aws-lc seeds its generator the first time a process
/// draws from it, from CPU timing jitter, and that takes one thread 60 to 70 ms here
/// (`tree_jitter_initialize_once` in a profile). Left to the first handshake, it was
/// spent inside the worker, away from every port it had: a node's first peer connection
/// held its worker off its ports for 65 to 72 ms (`fastpath/tests/first_handshake.rs`).
pub(crate) fn seed_random() {
    let mut byte = [0u8; 1];
    if let Err(e) = xwire_pki::tls::provider().secure_random.fill(&mut byte) {
        tracing::warn!(error = ?e, "the TLS provider's random source failed");
    }
}

/// Timers and windows for a wire: keep-alives so that a silent wire stays up, an idle
/// timeout that notices a peer gone within seconds, room for DATAGRAM frames and for
/// stream-carried frames in flight, no congestion window or pacing until the far end
/// loses a sustained share of what it is sent (`congestion.rs` says why), and
/// acknowledgements every `ACK_EVERY` packets.
fn transport(initial_mtu: u16, own_queue: &Arc<OwnQueue>) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    let mut acks = AckFrequencyConfig::default();
    acks.ack_eliciting_threshold(VarInt::from_u32(ACK_EVERY))
        .max_ack_delay(Some(MAX_ACK_DELAY));
    t.congestion_controller_factory(Arc::new(OverloadResponse::new(own_queue.clone())))
        .ack_frequency_config(Some(acks));
    // The underlay's MTU is configured, not guessed: packets start at it, no probes look
    // for more, and none are made smaller after loss. QUIC's black-hole detection took
    // the runs of large packets that a receiver lost while behind (its UDP buffer full)
    // for an MTU black hole and cut packets to 1200 bytes for the rest of the connection
    // (discovery being off, nothing raised them again): every frame over about 1150 bytes
    // then rode the stream, three of four 1514-byte frames of a datagram wire under load.
    // A configured MTU that is too large loses the large frames, as a kernel tunnel's
    // would.
    let mtu = initial_mtu.max(1200);
    t.keep_alive_interval(Some(Duration::from_millis(500)))
        .max_idle_timeout(Some(VarInt::from_u32(3_000).into()))
        .initial_mtu(mtu)
        .min_mtu(mtu)
        .mtu_discovery_config(None)
        .datagram_receive_buffer_size(Some(8 << 20))
        // Room for what one pass of the worker hands the carrier before the transport
        // sends: up to 32 batches of 64 frames from each port, 3.1 MB of 1514-byte
        // frames. At 1 MiB, quinn refused a quarter of a datagram wire's frames both
        // ways at once (`dropped_blocked`) while the network lost none. The stream
        // carrier's backlog has the same 8 MiB (`session.rs`).
        .datagram_send_buffer_size(DATAGRAM_SEND_BUFFER)
        .stream_receive_window(VarInt::from_u32(16 << 20))
        .receive_window(VarInt::from_u32(64 << 20))
        .send_window(64 << 20)
        .max_concurrent_uni_streams(VarInt::from_u32(16))
        .max_concurrent_bidi_streams(VarInt::from_u32(4));
    Arc::new(t)
}

/// The server side: accepts only clients with a certificate from the cluster CA.
pub(crate) fn server_config(
    identity: &NodeIdentity,
    initial_mtu: u16,
    own_queue: &Arc<OwnQueue>,
) -> Result<Arc<ServerConfig>, PeerError> {
    let p = parts(identity)?;
    let verifier = WebPkiClientVerifier::builder_with_provider(p.roots, p.provider.clone())
        .build()
        .map_err(|e| identity_error("client verifier", e))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(p.provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| identity_error("TLS versions", e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(p.chain, p.key)
        .map_err(|e| identity_error("node certificate", e))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    tls.max_early_data_size = 0;
    let quic = QuicServerConfig::try_from(tls).map_err(|e| identity_error("QUIC TLS", e))?;
    let mut config = ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(transport(initial_mtu, own_queue));
    Ok(Arc::new(config))
}

/// The client side: shows this node's certificate, trusts only the cluster CA.
pub(crate) fn client_config(
    identity: &NodeIdentity,
    initial_mtu: u16,
    own_queue: &Arc<OwnQueue>,
) -> Result<ClientConfig, PeerError> {
    let p = parts(identity)?;
    let mut tls = rustls::ClientConfig::builder_with_provider(p.provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| identity_error("TLS versions", e))?
        .with_root_certificates(p.roots)
        .with_client_auth_cert(p.chain, p.key)
        .map_err(|e| identity_error("node certificate", e))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicClientConfig::try_from(tls).map_err(|e| identity_error("QUIC TLS", e))?;
    let mut config = ClientConfig::new(Arc::new(quic));
    config.transport_config(transport(initial_mtu, own_queue));
    Ok(config)
}

/// Whether the peer's certificate (checked against the CA in the handshake) is for `name`.
pub(crate) fn certificate_names(conn: &quinn_proto::Connection, name: &str) -> bool {
    xwire_pki::tls::certificate_is_for(conn.crypto_session().peer_identity(), name)
}

/// An HMAC key for stateless-reset tokens that only this node's private key yields.
pub(crate) fn reset_key(identity: &NodeIdentity) -> ring::hmac::Key {
    let secret = derived(identity, "stateless reset");
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, secret.as_ref())
}

/// The key of the hash that marks this node's connection ids as its own.
pub(crate) fn cid_key(identity: &NodeIdentity) -> u64 {
    let secret = derived(identity, "connection ids");
    let mut first = [0u8; 8];
    first.copy_from_slice(&secret.as_ref()[..8]);
    u64::from_le_bytes(first)
}

fn derived(identity: &NodeIdentity, purpose: &str) -> ring::digest::Digest {
    ring::digest::digest(
        &ring::digest::SHA256,
        format!("xwire {purpose}\n{}", identity.key_pem).as_bytes(),
    )
}
