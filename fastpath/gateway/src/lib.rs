//! A node pool's gateway (docs/routing.md, "Gateways between node pools"): a TUN device
//! that the node routes the other pools' addresses into, and QUIC connections with mutual
//! TLS to the other pools' gateways that carry each packet whole in a DATAGRAM frame.
//!
//! The nodes' own QUIC connections, which carry the wires multiplexed by link uid, run
//! through the tunnels unchanged: a wire between pools crosses both pools' gateways and
//! stays one connection end to end. The pools and the decisions about them are the model's
//! (`xwire_model::pools`, pure); `tunnel` moves packets.

#![forbid(unsafe_code)]

mod packet;
pub mod probe;
mod tls;
mod tunnel;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::Serialize;
use xwire_model::pools::Pools;
use xwire_pki::NodeIdentity;

pub use probe::GatewayProbe;
pub use tls::{IDLE_TIMEOUT_MS, KEEP_ALIVE};

#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("gateway identity: {0}")]
    Identity(String),
    #[error("{0}")]
    Config(String),
    #[error("{what}: {cause}")]
    Io { what: String, cause: std::io::Error },
}

/// What a gateway needs to know.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// This gateway's node name; it must be one of `pools`' gateways.
    pub node: String,
    pub pools: Pools,
    /// The TUN device the node routes the other pools' addresses into.
    pub tun_name: String,
    /// The largest packet the tunnel carries (the TUN device's MTU).
    pub tunnel_mtu: u16,
    /// The MTU of the network between the gateways.
    pub wan_mtu: u16,
}

/// Packets counted, and every drop by reason.
#[derive(Debug, Default)]
pub struct Counters {
    pub sent: AtomicU64,
    pub received: AtomicU64,
    /// A packet for an address in no pool (or in this gateway's own).
    pub dropped_no_pool: AtomicU64,
    /// No tunnel to any gateway of the packet's pool is up.
    pub dropped_no_tunnel: AtomicU64,
    /// Not an IP packet (from the TUN device, or a peer's DATAGRAM).
    pub dropped_malformed: AtomicU64,
    /// Larger than a DATAGRAM frame on the tunnel can be.
    pub dropped_too_big: AtomicU64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct CountersSnapshot {
    pub sent: u64,
    pub received: u64,
    pub dropped_no_pool: u64,
    pub dropped_no_tunnel: u64,
    pub dropped_malformed: u64,
    pub dropped_too_big: u64,
}

impl Counters {
    pub fn snapshot(&self) -> CountersSnapshot {
        let read = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CountersSnapshot {
            sent: read(&self.sent),
            received: read(&self.received),
            dropped_no_pool: read(&self.dropped_no_pool),
            dropped_no_tunnel: read(&self.dropped_no_tunnel),
            dropped_malformed: read(&self.dropped_malformed),
            dropped_too_big: read(&self.dropped_too_big),
        }
    }
}

/// A running gateway: its thread, and what it shares. Dropping it stops the tunnels and
/// removes the TUN device.
pub struct Gateway {
    running: Option<tunnel::Running>,
    counters: Arc<Counters>,
    tunnels: tunnel::Tunnels,
}

impl Gateway {
    /// Makes the TUN device, binds the tunnel's endpoint and starts dialing; returns once
    /// the device is there (so that the caller can route into it).
    pub fn start(config: GatewayConfig, identity: &NodeIdentity) -> Result<Gateway, GatewayError> {
        let counters = Arc::new(Counters::default());
        let tunnels = tunnel::Tunnels::default();
        let running = tunnel::start(config, identity, counters.clone(), tunnels.clone())?;
        Ok(Gateway {
            running: Some(running),
            counters,
            tunnels,
        })
    }

    pub fn counters(&self) -> CountersSnapshot {
        self.counters.snapshot()
    }

    /// The gateways this one has a tunnel to now.
    pub fn tunnels_up(&self) -> Vec<String> {
        self.tunnels.names()
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop();
        }
    }
}
