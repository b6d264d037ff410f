//! The congestion response of a peer connection: none while the far end takes what it
//! is sent, as with the kernel's VXLAN (the baseline a user compares a wire with), and a
//! window only while the far end is losing a sustained share of it.
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
//! So a connection starts, and stays, unthrottled: quinn-proto paces only windows up to
//! `u32::MAX` (`connection/pacing.rs`), and this window is far above that.
//!
//! No response at all collapsed under overload, though. Offered 170 kpps of 1514-byte
//! frames where it carried about 120k, a wire delivered 99k (42% lost): the receiving
//! node's UDP buffer overflowed (`RcvbufErrors`), and on two shared cores the sending node
//! kept spending the core both share on encrypting and sending what the receiver would
//! drop (the kernel's delivery into the receiver's socket runs on the sender's time, too).
//! So once a measured share of what is sent is lost, over an epoch, the window closes to
//! a cap well below the receiver's buffer (`FIRST_CAP`), where nothing overflows it:
//! what the receiver cannot take then waits, and is dropped, in the sender's DATAGRAM
//! queue, before any work is spent on it (`dropped_blocked`). A cap grown past that
//! which loses goes back to it, and it goes no lower: the cap is sized from the
//! receiver's buffer, which every node sets alike, so a loss under it is not that buffer
//! overflowing (most often a round trip stretched by a busy core, taken for loss).
//! Halving on such losses, down to a floor of 256 KiB, starved the demo's datagram wire
//! when both directions ran at full rate at once: it delivered 154–172k pps both ways
//! together against the old build's 199–231k (`lab bench --flows both`, alternated). A
//! cap that loses nothing holds while a queue builds at the receiver (the smoothed round
//! trip over twice the least, plus `QUEUE_SLACK`): the receiver is what limits, and more
//! window would only fill its buffer until it overflows again (in a test with a slow
//! receiver, growing anyway lost a datagram for every frame delivered). Without that
//! queue the cap is what limits (a long round trip), and it grows each epoch by a quarter
//! of what the epoch delivered. It opens fully after an epoch in which the sender never
//! had more to send than the window let out (the overload has passed).
//! Isolated losses (less than `LOSS_PERCENT` of an epoch, or less than `MIN_LOST_BYTES`)
//! move nothing, and losses of packets sent before the last change of window are not
//! counted again. The stream carrier keeps QUIC's retransmission of what is lost, and its
//! flow-control windows (16 MiB a stream, 64 MiB a connection, `tls::transport`).
//!
//! A capped window counts only what can be at the receiver. Bytes in flight, as QUIC
//! counts them, include those the receiver has taken and acknowledged while the
//! acknowledgement waits in this node's own UDP socket, behind the other direction's
//! frames when both run at full rate. Counted against the cap, that wait halved a wire
//! both ways at once: each direction's acknowledgements queued behind the other's
//! frames, round trips stretched to tens of milliseconds, and a capped wire carried a
//! cap a round trip (59–82k pps in one direction where 117–148k were loss-free,
//! `lab bench --flows both`). So a capped window is widened by what arrives in the time
//! this node's socket holds datagrams (`OwnQueue`, from the kernel's receive timestamps:
//! the delivery rate of the last epoch times that wait), and that wait is taken out of
//! the round trip that judges whether a queue builds at the receiver.
//!
//! Written here because quinn-proto has no controller that stays out of the way until
//! loss; it is the trait's smallest implementation with a loss response.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn_proto::congestion::{Controller, ControllerFactory};
use quinn_proto::RttEstimator;

/// The window while nothing is lost: above `u32::MAX`, where quinn-proto stops pacing,
/// and far above any bytes in flight (a terabyte).
pub(crate) const UNTHROTTLED: u64 = 1 << 40;

/// The window that sustained loss first closes to. The receiver's socket holds 32 MiB as
/// the kernel counts it (`udp::SOCKET_BUFFER`, doubled by the kernel), and a packet costs
/// it more than its payload (the skb and its page): a quarter of that in payload leaves
/// room for the overhead. A window also bounds the rate, at a window a round trip, and
/// round trips stretch on busy cores: at 4 MiB (with a 16-MiB socket) the demo's datagram
/// wire carried 181–183k pps both ways together at full rate, against 221–224k with no
/// cap, its round trip near 30 ms.
pub(crate) const FIRST_CAP: u64 = 8 << 20;

/// A capped window this large opens fully.
const LARGEST_CAP: u64 = 1 << 30;

/// How long losses and deliveries are summed before the window is judged.
pub(crate) const EPOCH: Duration = Duration::from_millis(50);

/// The share of an epoch's bytes lost that counts as sustained loss.
const LOSS_PERCENT: u64 = 1;

/// Less than this lost in an epoch is never sustained loss, whatever the share.
const MIN_LOST_BYTES: u64 = 64 << 10;

/// A smoothed round trip this much over twice the least one means a queue is building.
const QUEUE_SLACK: Duration = Duration::from_millis(1);

/// A wait in this node's socket longer than this is taken for a stale reading.
const LONGEST_OWN_WAIT: Duration = Duration::from_secs(1);

/// How long datagrams wait in this node's UDP socket before its worker reads them:
/// written by the socket's driver, read by every connection's controller.
#[derive(Debug, Default)]
pub(crate) struct OwnQueue {
    wait_nanos: AtomicU64,
}

impl OwnQueue {
    pub(crate) fn set_wait(&self, wait: Duration) {
        let wait = wait.min(LONGEST_OWN_WAIT).as_nanos() as u64;
        self.wait_nanos.store(wait, Ordering::Relaxed);
    }

    pub(crate) fn wait(&self) -> Duration {
        Duration::from_nanos(self.wait_nanos.load(Ordering::Relaxed))
    }
}

/// Builds the controller of every connection of one endpoint.
#[derive(Debug, Default)]
pub(crate) struct OverloadResponse {
    own_queue: Arc<OwnQueue>,
}

impl OverloadResponse {
    pub(crate) fn new(own_queue: Arc<OwnQueue>) -> OverloadResponse {
        OverloadResponse { own_queue }
    }
}

impl ControllerFactory for OverloadResponse {
    fn build(self: Arc<Self>, now: Instant, _current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Controlled {
            window: Window::new(now),
            own_queue: self.own_queue.clone(),
        })
    }
}

/// A connection's controller: the window, and where to read this node's own wait.
#[derive(Debug, Clone)]
struct Controlled {
    window: Window,
    own_queue: Arc<OwnQueue>,
}

/// The window and what the current epoch has seen. Pure: quinn-proto's calls come in,
/// a window goes out.
#[derive(Debug, Clone)]
struct Window {
    window: u64,
    /// Acknowledged bytes that may still wait in this node's own socket: added to a
    /// capped window, so that the cap counts only what can be at the receiver.
    behind_own_queue: u64,
    /// Bytes a second that the last epoch delivered.
    delivery_rate: u64,
    epoch_start: Instant,
    acked_bytes: u64,
    lost_bytes: u64,
    /// Whether any acknowledgement this epoch came while the window held data back.
    window_limited: bool,
    /// Whether the latest round trip showed a queue building at the receiver.
    queue_building: bool,
    /// Losses of packets sent before this were caused by an earlier window.
    changed_at: Instant,
}

impl Window {
    fn new(now: Instant) -> Self {
        Window {
            window: UNTHROTTLED,
            behind_own_queue: 0,
            delivery_rate: 0,
            epoch_start: now,
            acked_bytes: 0,
            lost_bytes: 0,
            window_limited: false,
            queue_building: false,
            changed_at: now,
        }
    }

    /// `rtts.own_wait` is how long acknowledgements now wait in this node's socket: it
    /// widens a capped window, and it is no queue at the receiver.
    fn acked(&mut self, now: Instant, bytes: u64, app_limited: bool, rtts: Rtts) {
        self.acked_bytes += bytes;
        self.window_limited |= !app_limited;
        let beyond_own = rtts.smoothed.saturating_sub(rtts.own_wait);
        self.queue_building = beyond_own > rtts.least * 2 + QUEUE_SLACK;
        // Whole microseconds keep this in u64 (it runs on every acknowledgement): a rate
        // of 10 GB/s times a second's wait is 10^16.
        let wait_micros = rtts.own_wait.as_micros() as u64;
        let behind = self.delivery_rate.saturating_mul(wait_micros) / 1_000_000;
        self.behind_own_queue = behind.min(LARGEST_CAP);
        self.judge(now);
    }

    /// The window quinn sees.
    fn window(&self) -> u64 {
        if self.window == UNTHROTTLED {
            UNTHROTTLED
        } else {
            self.window + self.behind_own_queue
        }
    }

    fn lost(&mut self, now: Instant, sent: Instant, bytes: u64) {
        if sent > self.changed_at {
            self.lost_bytes += bytes;
        }
        self.judge(now);
    }

    /// At the end of an epoch, moves the window by what it saw.
    fn judge(&mut self, now: Instant) {
        if now.saturating_duration_since(self.epoch_start) < EPOCH {
            return;
        }
        let elapsed = now.saturating_duration_since(self.epoch_start).as_nanos();
        self.delivery_rate = (u128::from(self.acked_bytes) * 1_000_000_000 / elapsed.max(1)) as u64;
        let sent = self.acked_bytes + self.lost_bytes;
        let sustained_loss =
            self.lost_bytes >= MIN_LOST_BYTES && self.lost_bytes * 100 >= sent * LOSS_PERCENT;
        let before = self.window;
        self.window = if sustained_loss {
            self.window.min(FIRST_CAP)
        } else if self.window == UNTHROTTLED || !self.window_limited {
            UNTHROTTLED
        } else if self.queue_building {
            self.window
        } else {
            let grown = self.window + self.acked_bytes / 4;
            if grown >= LARGEST_CAP {
                UNTHROTTLED
            } else {
                grown
            }
        };
        if self.window != before {
            self.changed_at = now;
        }
        self.epoch_start = now;
        self.acked_bytes = 0;
        self.lost_bytes = 0;
        self.window_limited = false;
    }
}

/// The round trips an acknowledgement judges by.
#[derive(Debug, Clone, Copy)]
struct Rtts {
    smoothed: Duration,
    least: Duration,
    own_wait: Duration,
}

impl Controller for Controlled {
    fn on_ack(
        &mut self,
        now: Instant,
        _sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        let rtts = Rtts {
            smoothed: rtt.get(),
            least: rtt.min(),
            own_wait: self.own_queue.wait(),
        };
        self.window.acked(now, bytes, app_limited, rtts);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        _is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        // ECN marks come with no lost bytes; nothing on a lab's underlay sets them.
        self.window.lost(now, sent, lost_bytes);
    }

    fn on_mtu_update(&mut self, _new_mtu: u16) {}

    fn window(&self) -> u64 {
        self.window.window()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
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

    const MB: u64 = 1 << 20;

    /// Round trips of a path with no queue anywhere.
    fn quiet() -> Rtts {
        Rtts {
            smoothed: Duration::from_millis(1),
            least: Duration::from_millis(1),
            own_wait: Duration::ZERO,
        }
    }

    /// Round trips of a path whose receiver holds a queue.
    fn queued() -> Rtts {
        Rtts {
            smoothed: Duration::from_millis(10),
            ..quiet()
        }
    }

    /// Runs one epoch: `acked` bytes delivered (window-limited or not), `lost` bytes of
    /// packets sent in the epoch lost, and the epoch judged at its end.
    fn epoch(
        w: &mut Window,
        start: Instant,
        acked: u64,
        lost: u64,
        window_limited: bool,
    ) -> Instant {
        let sent = start + Duration::from_millis(1);
        w.acked(sent, acked, !window_limited, quiet());
        if lost > 0 {
            w.lost(start + Duration::from_millis(2), sent, lost);
        }
        let end = start + EPOCH;
        w.acked(end, 0, true, quiet());
        end
    }

    /// A window that an epoch of sustained loss has just capped, and the epoch's end.
    fn capped() -> (Window, Instant) {
        let start = Instant::now();
        let mut w = Window::new(start);
        let t = epoch(&mut w, start, 10 * MB, 5 * MB, true);
        assert_eq!(w.window(), FIRST_CAP);
        (w, t)
    }

    #[test]
    fn a_new_connection_is_unthrottled_above_what_quinn_paces() {
        let controller = Arc::new(OverloadResponse::default()).build(Instant::now(), 1200);
        assert!(controller.window() > u64::from(u32::MAX));
        assert_eq!(controller.initial_window(), controller.window());
    }

    #[test]
    fn isolated_losses_leave_the_window_open() {
        let start = Instant::now();
        let mut w = Window::new(start);
        let mut t = start;
        // Under the share: 10 KB of 100 MB.
        t = epoch(&mut w, t, 100 * MB, 10 << 10, true);
        assert_eq!(w.window(), UNTHROTTLED);
        // Over the share, under the bytes: one 1500-byte packet of 20 KB.
        epoch(&mut w, t, 20 << 10, 1500, true);
        assert_eq!(w.window(), UNTHROTTLED);
    }

    #[test]
    fn sustained_loss_caps_the_window_and_loss_under_the_cap_leaves_it_there() {
        let start = Instant::now();
        let mut w = Window::new(start);
        let mut t = start;
        t = epoch(&mut w, t, 10 * MB, 5 * MB, true);
        assert_eq!(w.window(), FIRST_CAP);
        for _ in 0..10 {
            t = epoch(&mut w, t, 10 * MB, MB, true);
            assert_eq!(w.window(), FIRST_CAP);
        }
        // A cap grown past the first that loses goes back to it.
        t = epoch(&mut w, t, 10 * MB, 0, true);
        assert!(w.window() > FIRST_CAP);
        epoch(&mut w, t, 10 * MB, MB, true);
        assert_eq!(w.window(), FIRST_CAP);
    }

    #[test]
    fn losses_of_packets_sent_before_the_cap_do_not_close_it_again() {
        let (mut w, t) = capped();
        // The next epoch learns of losses from before the cap, sent at the epoch's start.
        let before_cap = t - Duration::from_millis(5);
        w.acked(t + Duration::from_millis(1), 10 * MB, false, quiet());
        w.lost(t + Duration::from_millis(2), before_cap, 5 * MB);
        w.acked(t + EPOCH, 0, true, quiet());
        assert_eq!(w.window(), FIRST_CAP + 10 * MB / 4);
    }

    #[test]
    fn a_cap_that_loses_nothing_grows_and_opens_fully_once_the_overload_has_passed() {
        let start = Instant::now();
        let mut w = Window::new(start);
        let mut t = epoch(&mut w, start, 10 * MB, 5 * MB, true);
        assert_eq!(w.window(), FIRST_CAP);
        // Still held back by the window, losing nothing: grows by a quarter of what the
        // epoch delivered...
        t = epoch(&mut w, t, 10 * MB, 0, true);
        assert_eq!(w.window(), FIRST_CAP + 10 * MB / 4);
        t = epoch(&mut w, t, 64 << 10, 0, true);
        assert_eq!(w.window(), FIRST_CAP + 10 * MB / 4 + (16 << 10));
        // ...and opens once an epoch never had more to send than the window let out.
        epoch(&mut w, t, 10 * MB, 0, false);
        assert_eq!(w.window(), UNTHROTTLED);
    }

    #[test]
    fn a_cap_grown_past_the_largest_opens_fully() {
        let start = Instant::now();
        let mut w = Window::new(start);
        let mut t = epoch(&mut w, start, 10 * MB, 5 * MB, true);
        let mut epochs = 0;
        while w.window() != UNTHROTTLED {
            t = epoch(&mut w, t, 100 * MB, 0, true);
            epochs += 1;
            assert!(epochs < 100, "the window never opened: {}", w.window());
        }
        assert!(epochs > 1);
    }

    #[test]
    fn nothing_moves_the_window_within_an_epoch() {
        let start = Instant::now();
        let mut w = Window::new(start);
        let t = start;
        w.acked(t + Duration::from_millis(1), MB, false, quiet());
        w.lost(
            t + Duration::from_millis(2),
            t + Duration::from_millis(1),
            50 * MB,
        );
        assert_eq!(w.window(), UNTHROTTLED);
        w.acked(t + EPOCH, 0, true, quiet());
        assert_eq!(w.window(), FIRST_CAP);
    }

    #[test]
    fn a_cap_holds_while_a_queue_builds_at_the_receiver() {
        let (mut w, t) = capped();
        w.acked(t + Duration::from_millis(1), 10 * MB, false, queued());
        w.acked(t + EPOCH, 0, false, queued());
        assert_eq!(w.window(), FIRST_CAP, "held, not grown");
        // The queue drained and the sender wants no more than the window: open.
        w.acked(t + EPOCH * 2, MB, true, quiet());
        assert_eq!(w.window(), UNTHROTTLED);
    }

    #[test]
    fn a_capped_window_widens_by_what_waits_in_its_own_socket() {
        let (mut w, t) = capped();
        // The capping epoch delivered 10 MiB in 50 ms: 200 MiB a second, so 20 ms in
        // this node's socket hold 4 MiB of acknowledged bytes.
        let waiting = Rtts {
            own_wait: Duration::from_millis(20),
            ..quiet()
        };
        w.acked(t + Duration::from_millis(1), 1500, false, waiting);
        assert_eq!(w.window(), FIRST_CAP + 4 * MB);
        // Read at once again: the cap alone.
        w.acked(t + Duration::from_millis(2), 1500, false, quiet());
        assert_eq!(w.window(), FIRST_CAP);
    }

    #[test]
    fn a_round_trip_stretched_by_its_own_socket_is_no_queue_at_the_receiver() {
        let (mut w, t) = capped();
        let own = Rtts {
            smoothed: Duration::from_millis(30),
            least: Duration::from_millis(1),
            own_wait: Duration::from_millis(29),
        };
        w.acked(t + Duration::from_millis(1), 10 * MB, false, own);
        w.acked(t + EPOCH, 0, false, own);
        assert!(w.window > FIRST_CAP, "grown, not held: {}", w.window);
    }

    #[test]
    fn the_wait_in_its_own_socket_reaches_every_connection_of_the_endpoint() {
        let own_queue = Arc::new(OwnQueue::default());
        let factory = Arc::new(OverloadResponse::new(own_queue.clone()));
        let controller = factory.build(Instant::now(), 1200);
        let controlled = controller.into_any().downcast::<Controlled>().unwrap();
        own_queue.set_wait(Duration::from_millis(7));
        assert_eq!(controlled.own_queue.wait(), Duration::from_millis(7));
        own_queue.set_wait(Duration::from_secs(30));
        assert_eq!(
            controlled.own_queue.wait(),
            LONGEST_OWN_WAIT,
            "a stale reading is bounded"
        );
    }
}
