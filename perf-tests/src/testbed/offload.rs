//! Offloads on a test interface: TX checksum, and the segmentation and receive offloads
//! that benchmarks turn off on both paths they compare.
//!
//! Checksum offload. A veth end that leaves TX checksums to "the
//! hardware" sends TCP and UDP frames whose checksum was never filled in; the kernel
//! fixes that up only on its own paths, so a frame that leaves through AF_XDP or
//! AF_PACKET and re-enters elsewhere is dropped by the receiver. Pods behind a
//! userspace switch therefore turn it off, as labs do (`ethtool -K eth1 tx off`).
//!
//! Set with the SIOCETHTOOL ioctl: rtnetlink has no call for it, and the ethtool netlink
//! family would pull in a second netlink stack for one flag.

use std::io;
use std::os::fd::AsRawFd;

use socket2::{Domain, Socket, Type};

use super::{Error, Netns};

const ETHTOOL_STXCSUM: u32 = 0x17;
const ETHTOOL_STSO: u32 = 0x1f;
const ETHTOOL_SGSO: u32 = 0x24;
const ETHTOOL_SGRO: u32 = 0x2c;

/// The segmentation and receive offloads, each set on or off together by
/// [`Netns::set_segmentation_offloads`].
const SEGMENTATION_OFFLOADS: [(u32, &str); 3] = [
    (ETHTOOL_STSO, "tso"),
    (ETHTOOL_SGSO, "gso"),
    (ETHTOOL_SGRO, "gro"),
];

#[repr(C)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut EthtoolValue,
    _pad: [u8; 16],
}

impl Netns {
    /// Turns TX checksum offload on `ifname` on or off (off also turns off TSO).
    pub fn set_tx_checksum(&self, ifname: &str, on: bool) -> Result<(), Error> {
        let op = format!(
            "set tx checksum {} on {ifname} in {}",
            if on { "on" } else { "off" },
            self.name()
        );
        if ifname.len() >= libc::IFNAMSIZ {
            return Err(Error::invalid(op, "interface name too long"));
        }
        self.run(|| set_flag(ifname, ETHTOOL_STXCSUM, on))?
            .map_err(|e| Error::io(op, e))
    }

    /// Turns TSO, GSO and GRO on `ifname` on or off, as `ethtool -K IF tso X gso X gro X`.
    pub fn set_segmentation_offloads(&self, ifname: &str, on: bool) -> Result<(), Error> {
        if ifname.len() >= libc::IFNAMSIZ {
            return Err(Error::invalid(
                format!("set offloads on {ifname}"),
                "interface name too long",
            ));
        }
        for (cmd, name) in SEGMENTATION_OFFLOADS {
            let op = format!(
                "set {name} {} on {ifname} in {}",
                if on { "on" } else { "off" },
                self.name()
            );
            self.run(|| set_flag(ifname, cmd, on))?
                .map_err(|e| Error::io(op, e))?;
        }
        Ok(())
    }
}

/// One ethtool "set" command with a 0/1 value.
fn set_flag(ifname: &str, cmd: u32, on: bool) -> io::Result<()> {
    let socket = Socket::new(Domain::IPV4, Type::DGRAM, None)?;
    let mut value = EthtoolValue {
        cmd,
        data: u32::from(on),
    };
    let mut request = IfreqData {
        name: [0; libc::IFNAMSIZ],
        data: &mut value,
        _pad: [0; 16],
    };
    for (dst, src) in request.name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: `request` is an ifreq-shaped struct (name, then the ifr_data pointer, padded
    // to the size of ifreq) whose pointer refers to `value`, alive for the call.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCETHTOOL, &mut request) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
