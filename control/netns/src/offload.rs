//! Offloads of an interface in the calling thread's network namespace.
//!
//! Checksum offload matters to every port of the switch. A veth end that leaves TX
//! checksums to "the hardware" sends TCP and UDP frames whose checksum was never filled
//! in; the kernel fixes that up only on its own paths, so a frame that leaves through
//! AF_XDP or AF_PACKET and re-enters elsewhere is dropped by the receiver. Pod interfaces
//! behind the switch therefore have it off, as labs do (`ethtool -K eth1 tx off`).
//!
//! Set with the SIOCETHTOOL ioctl: rtnetlink has no call for it, and the ethtool netlink
//! family would pull in a second netlink stack for one flag.

use std::io;
use std::os::fd::AsRawFd;

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

/// Turns `offload` on `ifname` (in this thread's network namespace) on or off.
pub fn set_offload(ifname: &str, offload: Offload, on: bool) -> io::Result<()> {
    if ifname.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {ifname:?} too long"),
        ));
    }
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a socket this function just opened and owns.
    let socket = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut value = EthtoolValue {
        cmd: offload.command(),
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
