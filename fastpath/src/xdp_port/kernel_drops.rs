//! What the kernel dropped at a port, from the socket's own statistics.

/// Frames the kernel dropped at a port before the worker could see them: the drops that
/// the link counters cannot count, read from the socket's own statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelDrops {
    /// The RX ring was full: the worker fell behind.
    pub rx_ring_full: u64,
    /// No buffer in the fill ring (AF_XDP) or a full RX ring (AF_PACKET).
    pub rx_fill_ring_empty: u64,
    /// Other receive drops.
    pub rx_other: u64,
    /// Descriptors the kernel refused to send.
    pub tx_invalid: u64,
}

impl std::ops::AddAssign for KernelDrops {
    fn add_assign(&mut self, other: KernelDrops) {
        self.rx_ring_full += other.rx_ring_full;
        self.rx_fill_ring_empty += other.rx_fill_ring_empty;
        self.rx_other += other.rx_other;
        self.tx_invalid += other.tx_invalid;
    }
}

impl KernelDrops {
    pub fn total(&self) -> u64 {
        self.rx_ring_full + self.rx_fill_ring_empty + self.rx_other + self.tx_invalid
    }
}
