//! Offloads of an interface in the calling thread's network namespace.
//!
//! Checksum offload matters to every port of the switch. A veth end that leaves TX
//! checksums to "the hardware" sends TCP and UDP frames whose checksum was never filled
//! in; the kernel fixes that up only on its own paths, so a frame that leaves through
//! AF_XDP or AF_PACKET and re-enters elsewhere is dropped by the receiver. Pod interfaces
//! behind the switch therefore have it off, as labs do (`ethtool -K eth1 tx off`).
//!
//! Set with the SIOCETHTOOL ioctl (`xwire-ethtool`): rtnetlink has no call for it.

use std::io;

use xwire_ethtool::EthtoolValue;

/// An offload that can be turned on or off, as `ethtool -K` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offload {
    /// `tx`; off also turns off TSO.
    TxChecksum,
    Tso,
    Gso,
    Gro,
}

impl Offload {
    /// TSO, GSO and GRO: what benchmarks turn off on every path they compare.
    pub const SEGMENTATION: [Offload; 3] = [Offload::Tso, Offload::Gso, Offload::Gro];

    /// The ethtool "set" command.
    fn command(self) -> u32 {
        match self {
            Offload::TxChecksum => 0x17,
            Offload::Tso => 0x1f,
            Offload::Gso => 0x24,
            Offload::Gro => 0x2c,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Offload::TxChecksum => "tx",
            Offload::Tso => "tso",
            Offload::Gso => "gso",
            Offload::Gro => "gro",
        }
    }
}

/// Turns `offload` on `ifname` (in this thread's network namespace) on or off.
pub fn set_offload(ifname: &str, offload: Offload, on: bool) -> io::Result<()> {
    let mut value = EthtoolValue {
        cmd: offload.command(),
        data: u32::from(on),
    };
    xwire_ethtool::request(ifname, &mut value)
}
