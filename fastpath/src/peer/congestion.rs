//! The congestion response of a peer connection: CUBIC (quinn-proto's), with a window
//! that never falls below a floor.
//!
//! A wire is a cable, not a TCP flow. What rides a peer connection are frames that pods
//! send, and their own TCP already answers congestion; the kernel's VXLAN, the baseline a
//! user compares with, has no congestion control at all. Plain CUBIC starts a new
//! connection at ten packets and grows it by the acknowledgements, paced by a round-trip
//! time that the handshake inflates (certificates, a peer still starting): measured with
//! `xwire-perf remote-wire --verbose`, the first milliseconds of a 300 kpps wire queued
//! more than quinn's 1 MiB of DATAGRAM buffer and dropped frames (`dropped_blocked`)
//! while QUIC itself had lost nothing. With the floor, a connection sends from the first
//! packet at whatever rate frames come, up to the floor's bytes in flight per round trip
//! (far above any line rate on a LAN: 8 MiB per 100 µs); above it, on a long path that
//! really is congested, CUBIC's response still applies to the excess, and the stream
//! carrier keeps QUIC's retransmissions whatever the window.
//!
//! Written here because quinn-proto offers the controllers but no floor; it is a
//! wrapper that delegates every event to CUBIC.

use std::any::Any;
use std::sync::Arc;

use std::time::Instant;

use quinn_proto::congestion::{Controller, ControllerFactory, ControllerMetrics, CubicConfig};
use quinn_proto::RttEstimator;

/// The bytes in flight a connection may always have: what the peer's UDP receive buffer
/// holds (`udp::SOCKET_BUFFER`), so that the floor never sends more than the receiver
/// can take while its worker is busy elsewhere.
pub(crate) const WINDOW_FLOOR: u64 = super::udp::SOCKET_BUFFER as u64;

/// Builds a floored CUBIC controller for each connection.
#[derive(Debug)]
pub(crate) struct FlooredCubic {
    floor: u64,
    cubic: Arc<CubicConfig>,
}

impl FlooredCubic {
    pub(crate) fn new(floor: u64) -> FlooredCubic {
        FlooredCubic {
            floor,
            cubic: Arc::new(CubicConfig::default()),
        }
    }
}

impl ControllerFactory for FlooredCubic {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Floored {
            inner: self.cubic.clone().build(now, current_mtu),
            floor: self.floor,
        })
    }
}

struct Floored {
    inner: Box<dyn Controller>,
    floor: u64,
}

impl Controller for Floored {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt);
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.inner.window().max(self.floor)
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut metrics = self.inner.metrics();
        metrics.congestion_window = self.window();
        metrics
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Floored {
            inner: self.inner.clone_box(),
            floor: self.floor,
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window().max(self.floor)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_window_starts_at_the_floor_and_loss_never_takes_it_below() {
        let now = Instant::now();
        let factory = Arc::new(FlooredCubic::new(1 << 20));
        let mut controller = factory.build(now, 1200);
        assert_eq!(controller.initial_window(), 1 << 20);
        assert_eq!(controller.window(), 1 << 20);
        for k in 0..10 {
            let at = now + Duration::from_millis(k);
            controller.on_congestion_event(at, at, k == 9, 100_000);
            assert_eq!(controller.window(), 1 << 20, "after loss event {k}");
        }
        assert_eq!(controller.metrics().congestion_window, 1 << 20);
    }

    #[test]
    fn above_the_floor_the_window_is_cubics() {
        let now = Instant::now();
        let mut controller = Arc::new(FlooredCubic::new(1)).build(now, 1200);
        let cubic = Arc::new(CubicConfig::default()).build(now, 1200);
        assert_eq!(controller.window(), cubic.window());
        controller.on_congestion_event(now, now, false, 1200);
        assert!(
            controller.window() < cubic.window(),
            "CUBIC backs off above the floor"
        );
    }
}
