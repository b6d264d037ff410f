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

pub use xwire_model::worker_defaults::NATIVE_MAX_FRAME;
