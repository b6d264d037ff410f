//! The frames `xwire-pktgen` sends: Ethernet, an experimental EtherType, and a probe header
//! that the sink reads back (a magic number, the sequence number, the send time).

/// EtherType for local experiments (IEEE 802), which hosts' stacks ignore.
pub const ETHERTYPE: u16 = 0x88b5;
const MAGIC: u32 = 0x5857_5047; // "XWPG"
const HEADER_AT: usize = 14;
/// Ethernet header plus probe header: the smallest frame pktgen builds.
pub(crate) const MIN_FRAME: usize = HEADER_AT + 20;

/// A frame template: addresses and padding fixed, sequence and time stamped per send.
#[derive(Debug, Clone)]
pub struct Probe {
    frame: Vec<u8>,
}

impl Probe {
    pub fn new(len: usize, dst: [u8; 6], src: [u8; 6]) -> Probe {
        let mut frame = vec![0u8; len.max(MIN_FRAME)];
        frame[..6].copy_from_slice(&dst);
        frame[6..12].copy_from_slice(&src);
        frame[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        frame[HEADER_AT..HEADER_AT + 4].copy_from_slice(&MAGIC.to_be_bytes());
        for (i, b) in frame[MIN_FRAME..].iter_mut().enumerate() {
            *b = i as u8;
        }
        Probe { frame }
    }

    /// The frame for sequence number `seq` sent at `sent_ns`.
    pub fn stamp(&mut self, seq: u64, sent_ns: u64) -> &[u8] {
        self.frame[HEADER_AT + 4..HEADER_AT + 12].copy_from_slice(&seq.to_be_bytes());
        self.frame[HEADER_AT + 12..HEADER_AT + 20].copy_from_slice(&sent_ns.to_be_bytes());
        &self.frame
    }
}

/// Sequence number and send time of a probe frame; `None` for any other frame.
pub(crate) fn read_probe(frame: &[u8]) -> Option<(u64, u64)> {
    let header = frame.get(HEADER_AT..MIN_FRAME)?;
    if frame[12..14] != ETHERTYPE.to_be_bytes() || header[..4] != MAGIC.to_be_bytes() {
        return None;
    }
    let word = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[at..at + 8]);
        u64::from_be_bytes(b)
    };
    Some((word(4), word(12)))
}

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the machine, so a
/// sink in another process can subtract a sender's stamp.
pub fn now_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .expect("CLOCK_MONOTONIC exists");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamped_probes_read_back() {
        let mut p = Probe::new(64, [0xff; 6], [2, 0, 0, 0, 0, 1]);
        let frame = p.stamp(42, 1234).to_vec();
        assert_eq!(frame.len(), 64);
        assert_eq!(read_probe(&frame), Some((42, 1234)));
        assert_eq!(read_probe(&frame[..MIN_FRAME - 1]), None);
        let mut other = frame.clone();
        other[13] = 0;
        assert_eq!(read_probe(&other), None);
    }

    #[test]
    fn frames_never_shrink_below_the_probe() {
        assert_eq!(Probe::new(10, [0; 6], [0; 6]).stamp(0, 0).len(), MIN_FRAME);
    }
}
