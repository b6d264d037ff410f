//! The SIOCETHTOOL ioctl on an interface of the calling thread's network namespace.
//!
//! By hand, and the one place in the project that makes this call: rtnetlink has no
//! request for offloads or channels, the ethtool netlink family would pull in a second
//! netlink stack, and its crate is async (a runtime on a worker's thread for two calls).
//!
//! Unsafe: the ioctl takes a pointer to a command structure of the kernel's layout.
//! `EthtoolCommand` is the promise that a type has that layout; `request` is safe to call
//! for any type that keeps it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A structure the kernel reads (and may write) for one ethtool command: `struct
/// ethtool_value`, `struct ethtool_channels` and the like.
///
/// # Safety
///
/// The type is `#[repr(C)]`, starts with the `u32` command, and has exactly the layout
/// and size of the kernel's structure for every command it is sent with: the kernel reads
/// and writes that many bytes through the pointer.
pub unsafe trait EthtoolCommand {}

/// `struct ethtool_value`: the command of a flag or a number (an offload, for one).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EthtoolValue {
    pub cmd: u32,
    pub data: u32,
}

// SAFETY: `#[repr(C)]`, the command then one `u32`, as the kernel's `ethtool_value`.
unsafe impl EthtoolCommand for EthtoolValue {}

/// `struct ethtool_channels`: an interface's queues.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EthtoolChannels {
    pub cmd: u32,
    pub max_rx: u32,
    pub max_tx: u32,
    pub max_other: u32,
    pub max_combined: u32,
    pub rx_count: u32,
    pub tx_count: u32,
    pub other_count: u32,
    pub combined_count: u32,
}

// SAFETY: `#[repr(C)]`, the command then eight `u32`s, as the kernel's `ethtool_channels`.
unsafe impl EthtoolCommand for EthtoolChannels {}

/// Sends `command` about interface `ifname` (in the calling thread's network namespace);
/// the kernel's answer, for a "get" command, is written back into it.
pub fn request<T: EthtoolCommand>(ifname: &str, command: &mut T) -> io::Result<()> {
    // SAFETY: an all-zero `ifreq` is valid (a name of NULs and a null data pointer).
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = ifname.as_bytes();
    if name.is_empty() || name.len() >= request.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {ifname:?}: not 1 to 15 bytes"),
        ));
    }
    for (to, &from) in request.ifr_name.iter_mut().zip(name) {
        *to = from as libc::c_char;
    }
    request.ifr_ifru.ifru_data = (command as *mut T).cast();
    // SAFETY: socket(2) with constant arguments; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a socket just opened here, owned by nothing else.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: SIOCETHTOOL reads the name and the command structure the request points to;
    // both are alive for the call, and `T: EthtoolCommand` promises the kernel's layout,
    // so the kernel reads and writes only within `command`.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCETHTOOL, &mut request) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ETHTOOL_GLINK`: whether the link is up; `lo` answers it in any namespace.
    const ETHTOOL_GLINK: u32 = 0x0a;

    #[test]
    fn the_loopback_interface_answers_a_get_command() {
        let mut link = EthtoolValue {
            cmd: ETHTOOL_GLINK,
            data: 7,
        };
        request("lo", &mut link).unwrap();
        assert!(link.data <= 1, "a flag: {link:?}");
        assert_eq!(link.cmd, ETHTOOL_GLINK);
    }

    #[test]
    fn a_name_the_kernel_cannot_hold_is_refused_before_the_call() {
        let mut link = EthtoolValue::default();
        for name in ["", "a-name-of-16-by!"] {
            let e = request(name, &mut link).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name:?}");
        }
    }

    #[test]
    fn an_interface_that_is_not_there_is_the_kernels_error() {
        let mut link = EthtoolValue {
            cmd: ETHTOOL_GLINK,
            data: 0,
        };
        let e = request("xwt-no-such0", &mut link).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
    }
}
