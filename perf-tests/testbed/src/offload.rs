//! Offloads on a test interface: TX checksum (see `xwire_netns::offload` for why pods
//! behind the switch need it off), and the segmentation and receive offloads that
//! benchmarks turn off on both paths they compare.

use xwire_netns::offload::{set_offload, Offload};

use super::{Error, Netns};

impl Netns {
    /// Turns TX checksum offload on `ifname` on or off (off also turns off TSO).
    pub fn set_tx_checksum(&self, ifname: &str, on: bool) -> Result<(), Error> {
        self.set_offloads(ifname, &[Offload::TxChecksum], on)
    }

    /// Turns TSO, GSO and GRO on `ifname` on or off, as `ethtool -K IF tso X gso X gro X`.
    pub fn set_segmentation_offloads(&self, ifname: &str, on: bool) -> Result<(), Error> {
        self.set_offloads(ifname, &Offload::SEGMENTATION, on)
    }

    fn set_offloads(&self, ifname: &str, offloads: &[Offload], on: bool) -> Result<(), Error> {
        for &offload in offloads {
            let op = format!(
                "set {} {} on {ifname} in {}",
                offload.name(),
                if on { "on" } else { "off" },
                self.name()
            );
            self.run(|| set_offload(ifname, offload, on))?
                .map_err(|e| Error::io(op, e))?;
        }
        Ok(())
    }
}
