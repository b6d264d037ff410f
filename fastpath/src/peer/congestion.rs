//! The congestion response of a peer connection: none at the QUIC level, as with the
//! kernel's VXLAN, the baseline a user compares a wire with.
//!
//! A wire is a cable, not a TCP flow: what rides a peer connection are frames that pods
//! send, and the pods' own TCP already answers loss on a wire. quinn-proto's controllers
//! (NewReno, CUBIC, BBR) each hold frames back that the receiver could take, measured
//! with `xwire-perf remote-wire --verbose`:
//! - slow start: a new connection begins at ten packets, grown by acknowledgements; the
//!   first milliseconds of a 300 kpps wire queued more than quinn's 1 MiB of DATAGRAM
//!   buffer and dropped 713 frames (`dropped_blocked`), QUIC itself having lost nothing;
//! - pacing: quinn spreads a window over a smoothed round trip, and a round trip measured
//!   while the machine was busy (the handshake of a node that had just started) held a
//!   50 kpps wire of 1514-byte frames below its rate: 40 times "blocked by pacing" in
//!   quinn's trace and 90 frames dropped, with a CUBIC window held at 8 MiB or more.
//!
//! quinn-proto paces only windows up to `u32::MAX` (`connection/pacing.rs`), so this
//! controller's window is far above that and never changes: frames leave as they come.
//! What bounds a burst is the receiver's UDP buffer (`udp::SOCKET_BUFFER`, 8 MiB), where
//! an overflow is counted (`RcvbufErrors`) like a full queue on a real link. The stream
//! carrier keeps QUIC's retransmission of what is lost, and its flow-control windows
//! (16 MiB a stream, 64 MiB a connection, `tls::transport`) bound what it has in flight.
//!
//! Written here because quinn-proto has no controller that stays out of the way; it is
//! the trait's smallest implementation.

use std::any::Any;
use std::sync::Arc;
use std::time::Instant;

use quinn_proto::congestion::{Controller, ControllerFactory};

/// The window: above `u32::MAX`, where quinn-proto stops pacing, and far above any
/// bytes in flight (a terabyte).
pub(crate) const UNTHROTTLED: u64 = 1 << 40;

/// Builds the controller of every connection.
#[derive(Debug, Default)]
pub(crate) struct Unthrottled;

impl ControllerFactory for Unthrottled {
    fn build(self: Arc<Self>, _now: Instant, _current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Window)
    }
}

struct Window;

impl Controller for Window {
    fn on_congestion_event(
        &mut self,
        _now: Instant,
        _sent: Instant,
        _is_persistent_congestion: bool,
        _lost_bytes: u64,
    ) {
    }

    fn on_mtu_update(&mut self, _new_mtu: u16) {}

    fn window(&self) -> u64 {
        UNTHROTTLED
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Window)
    }

    fn initial_window(&self) -> u64 {
        UNTHROTTLED
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_is_above_what_quinn_paces_and_loss_does_not_move_it() {
        let now = Instant::now();
        let mut controller = Arc::new(Unthrottled).build(now, 1200);
        assert!(controller.window() > u64::from(u32::MAX));
        assert_eq!(controller.initial_window(), controller.window());
        controller.on_congestion_event(now, now, true, 1 << 20);
        assert_eq!(controller.window(), UNTHROTTLED);
    }
}
