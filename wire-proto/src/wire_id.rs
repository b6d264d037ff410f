//! The one name a wire goes by wherever a number stands for it: in the frames that cross
//! between nodes, in the fast path's link table, and in the wire records.

use serde::{Deserialize, Serialize};

/// A wire's id: the topology namespace's hash in the high 32 bits, the link's uid (below
/// 2^32, see the topology checks) in the low. Both nodes of a wire compute it alike, so a
/// frame tagged with it finds the same wire on either side.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct WireId(pub u64);

impl WireId {
    /// The id of link `uid` of topology namespace `namespace`.
    pub fn new(namespace: &str, uid: u64) -> WireId {
        WireId((u64::from(fnv1a32(namespace.as_bytes())) << 32) | (uid & 0xffff_ffff))
    }

    /// The link's uid in its topology namespace.
    pub fn uid(self) -> u64 {
        self.0 & 0xffff_ffff
    }
}

impl std::fmt::Display for WireId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// FNV-1a: a stable hash that every node computes identically; std's hashers are keyed
/// per process, and a crate for ten lines is not worth it.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_distinct_per_namespace_and_keep_the_uid() {
        assert_eq!(WireId::new("lab", 3), WireId::new("lab", 3));
        assert_ne!(WireId::new("lab", 3), WireId::new("lab2", 3));
        assert_eq!(WireId::new("lab", 3).uid(), 3);
        // The FNV-1a test vector: both nodes must agree with it, whatever their build.
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(WireId(0x2a).to_string(), "0x2a");
    }
}
