//! What the worker reports when asked for its counters: every link's per-direction
//! counters, what the kernel dropped at each of its ports, each peer connection's QUIC
//! statistics, the transport's totals, and how much of its time the worker spent moving
//! frames. A copy taken at one moment; the control plane turns it into the API's answer
//! and the metrics endpoint's.

use std::time::Duration;

use crate::counters::DirectionSnapshot;
use crate::link_table::PortId;
use crate::peer::TransportCounters;
use crate::xdp_port::KernelDrops;
use xwire_proto::WireId;

#[derive(Debug, Clone, Default)]
pub struct WorkerStats {
    pub links: Vec<LinkStats>,
    /// `None` when the worker has no peer transport.
    pub transport: Option<TransportCounters>,
    pub peers: Vec<PeerStats>,
    /// Time spent in passes that moved at least one frame, and time since the worker
    /// started: their ratio is how busy the worker is (a poll-mode worker's CPU time says
    /// nothing, it is always 100 %).
    pub busy: Duration,
    pub running: Duration,
    /// How long the worker was away from its ports, at most and how often over each of
    /// `AWAY_THRESHOLDS`.
    pub away: AwayTimes,
    /// The nice value the worker's thread runs at.
    pub nice: i8,
}

/// The times `AwayTimes` counts returns over: an AF_XDP port whose fill ring holds 4,096
/// frames lasts 13.7 ms at 300k frames a second.
pub(crate) const AWAY_THRESHOLDS: [Duration; 3] = [
    Duration::from_millis(1),
    Duration::from_millis(4),
    Duration::from_millis(16),
];

/// How long the worker was away from its ports: from the start of one pass to the start
/// of the next, less the time it slept because it had nothing to do. Its own pass is in
/// it, and whatever else ran on its core meanwhile (another thread, the kernel's own): a
/// port's fill ring must hold what arrives in that time, or the kernel drops frames
/// (`rx_fill_ring_empty`). Drops at a port say that frames were lost; this says why.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AwayTimes {
    /// The longest since the worker started.
    pub longest: Duration,
    /// Returns after more than each of `AWAY_THRESHOLDS`.
    pub over: [u64; 3],
}

impl AwayTimes {
    pub fn record(&mut self, away: Duration) {
        self.longest = self.longest.max(away);
        for (count, threshold) in self.over.iter_mut().zip(AWAY_THRESHOLDS) {
            if away > threshold {
                *count += 1;
            }
        }
    }
}

/// One link: its first end's port, its second end (a port, or `None` for a peer node),
/// and its two directions (`a_to_b` is what the first end's port received).
#[derive(Debug, Clone)]
pub struct LinkStats {
    pub wire: WireId,
    pub a: PortId,
    pub b: Option<PortId>,
    pub a_to_b: DirectionSnapshot,
    pub b_to_a: DirectionSnapshot,
    /// What the kernel dropped at each end's port before the worker saw it (`None`: a
    /// peer end, or the port's statistics could not be read).
    pub kernel_drops: [Option<KernelDrops>; 2],
    /// The UMEM frames of each end's AF_XDP socket now (`None`: a peer end, an AF_PACKET
    /// port, a steered pair, or a port in the middle of a resize).
    pub umem_frames: [Option<usize>; 2],
}

/// One peer node's connection, from quinn's statistics (zeros while it is down).
#[derive(Debug, Clone, Default)]
pub struct PeerStats {
    pub name: String,
    pub up: bool,
    pub rtt: Option<Duration>,
    pub udp_datagrams_sent: u64,
    pub udp_bytes_sent: u64,
    pub udp_datagrams_received: u64,
    pub udp_bytes_received: u64,
    pub lost_packets: u64,
    /// The congestion controller's window, in bytes, and how many times QUIC told it of
    /// loss (a wire should see none on a healthy underlay).
    pub congestion_window: u64,
    pub congestion_events: u64,
    /// QUIC DATAGRAM frames sent and received (the datagram carrier's frames, batched).
    pub datagram_frames_sent: u64,
    pub datagram_frames_received: u64,
}

impl PeerStats {
    /// The window while sustained loss holds it capped (`peer/congestion.rs`); `None`
    /// while it is open, as it is unless the far end loses what it is sent.
    pub fn window_cap(&self) -> Option<u64> {
        (self.up && self.congestion_window < crate::peer::UNTHROTTLED_WINDOW)
            .then_some(self.congestion_window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absence_counts_against_each_threshold_it_passes() {
        let mut away = AwayTimes::default();
        for ms in [0, 1, 2, 5, 17, 3] {
            away.record(Duration::from_millis(ms));
        }
        assert_eq!(away.longest, Duration::from_millis(17));
        // Over 1 ms: 2, 5, 17 and 3; over 4 ms: 5 and 17; over 16 ms: 17.
        assert_eq!(away.over, [4, 2, 1]);
    }
}
