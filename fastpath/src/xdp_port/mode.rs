//! How a port's XDP program runs, and what that allows.

use xsk_rs::config::XdpFlags;

/// How the XDP program runs on the interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver (veth supports it for MTUs up to about 3.5 KB).
    Native,
    /// On the kernel's generic path, after the skb is built: works on any interface.
    Generic,
}

impl XdpMode {
    pub fn name(self) -> &'static str {
        match self {
            XdpMode::Native => "native",
            XdpMode::Generic => "generic",
        }
    }

    pub(super) fn flags(self) -> XdpFlags {
        match self {
            XdpMode::Native => XdpFlags::XDP_FLAGS_DRV_MODE,
            XdpMode::Generic => XdpFlags::XDP_FLAGS_SKB_MODE,
        }
    }
}

/// The largest frame native XDP on a veth takes: a 4 KiB page less XDP's headroom
/// (258 bytes) and the skb's shared info (320 bytes), as the kernel's veth driver computes
/// its XDP MTU limit. Larger frames (jumbo MTUs) need generic mode.
pub const NATIVE_MAX_FRAME: usize = 4096 - 258 - 320;
