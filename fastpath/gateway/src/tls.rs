//! The tunnel's QUIC configurations: mutual TLS with the node certificates the cluster
//! CA issued (the same as the fast path's peer connections), and timers short enough
//! that a gateway that dies is noticed within a second.

use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{
    ClientConfig, EndpointConfig, MtuDiscoveryConfig, ServerConfig, TransportConfig, VarInt,
};
use rustls::server::WebPkiClientVerifier;
use xwire_pki::NodeIdentity;

use crate::GatewayError;

/// The ALPN protocol of the gateways' tunnels (not the fast path's: a tunnel and a wire
/// never answer each other).
const ALPN: &[u8] = b"xwire-gateway/1";
/// How often a quiet tunnel says it is alive, and how long a silent one lives.
pub const KEEP_ALIVE: Duration = Duration::from_millis(200);
pub const IDLE_TIMEOUT_MS: u32 = 1_000;

fn error(what: &str, e: impl std::fmt::Display) -> GatewayError {
    GatewayError::Identity(format!("{what}: {e}"))
}

fn parts(identity: &NodeIdentity) -> Result<xwire_pki::tls::TlsParts, GatewayError> {
    identity.tls_parts().map_err(GatewayError::Identity)
}

/// IPv6's and UDP's headers (the larger IP header, so that the sizes hold on either WAN).
const IP_UDP_OVERHEAD: u16 = 48;
/// How long after a suspected MTU black hole the tunnel tries its packets' full size again.
const BLACK_HOLE_COOLDOWN: Duration = Duration::from_secs(5);

/// The largest UDP payload on a WAN whose MTU is `wan_mtu`: the size of the tunnel's
/// QUIC packets.
fn udp_payload(wan_mtu: u16) -> u16 {
    wan_mtu.saturating_sub(IP_UDP_OVERHEAD).max(1200)
}

/// The endpoint's side of the packet size: the largest packet it takes, which it tells
/// its peers (quinn's default, 1472, held every tunnel to a 1500-byte WAN's packets
/// whatever `wan_mtu` said, so a jumbo WAN carried no inner packet over about 1400 bytes).
pub fn endpoint_config(wan_mtu: u16) -> Result<EndpointConfig, GatewayError> {
    let mut config = EndpointConfig::default();
    config
        .max_udp_payload_size(udp_payload(wan_mtu))
        .map_err(|e| error(&format!("WAN MTU {wan_mtu}"), e))?;
    Ok(config)
}

fn transport(wan_mtu: u16) -> Arc<TransportConfig> {
    let mut t = TransportConfig::default();
    let full = udp_payload(wan_mtu);
    // The WAN's MTU is configured: an inner packet of the tunnel's MTU fits one DATAGRAM
    // from the first packet on, so packets start at the full size and no probe looks for
    // more. A WAN is not a lab's underlay, though: should QUIC take a run of losses for an
    // MTU black hole and shrink its packets, it tries the full size again after a
    // cooldown instead of keeping the tunnel too small for the nodes' packets for good.
    let mut mtu_discovery = MtuDiscoveryConfig::default();
    mtu_discovery
        .upper_bound(full)
        .black_hole_cooldown(BLACK_HOLE_COOLDOWN);
    t.keep_alive_interval(Some(KEEP_ALIVE))
        .max_idle_timeout(Some(VarInt::from_u32(IDLE_TIMEOUT_MS).into()))
        .initial_mtu(full)
        .mtu_discovery_config(Some(mtu_discovery))
        .datagram_receive_buffer_size(Some(8 << 20))
        .datagram_send_buffer_size(4 << 20);
    Arc::new(t)
}

pub fn server_config(identity: &NodeIdentity, wan_mtu: u16) -> Result<ServerConfig, GatewayError> {
    let p = parts(identity)?;
    let verifier = WebPkiClientVerifier::builder_with_provider(p.roots, p.provider.clone())
        .build()
        .map_err(|e| error("client verifier", e))?;
    let mut tls = rustls::ServerConfig::builder_with_provider(p.provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| error("TLS versions", e))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(p.chain, p.key)
        .map_err(|e| error("node certificate", e))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicServerConfig::try_from(tls).map_err(|e| error("QUIC TLS", e))?;
    let mut config = ServerConfig::with_crypto(Arc::new(quic));
    config.transport_config(transport(wan_mtu));
    Ok(config)
}

pub fn client_config(identity: &NodeIdentity, wan_mtu: u16) -> Result<ClientConfig, GatewayError> {
    let p = parts(identity)?;
    let mut tls = rustls::ClientConfig::builder_with_provider(p.provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| error("TLS versions", e))?
        .with_root_certificates(p.roots)
        .with_client_auth_cert(p.chain, p.key)
        .map_err(|e| error("node certificate", e))?;
    tls.alpn_protocols = vec![ALPN.to_vec()];
    let quic = QuicClientConfig::try_from(tls).map_err(|e| error("QUIC TLS", e))?;
    let mut config = ClientConfig::new(Arc::new(quic));
    config.transport_config(transport(wan_mtu));
    Ok(config)
}

/// Whether the certificate the peer showed (checked against the CA in the handshake) is
/// for node `name`.
pub(crate) fn is_for(connection: &quinn::Connection, name: &str) -> bool {
    xwire_pki::tls::certificate_is_for(connection.peer_identity(), name)
}
