//! Network namespaces, for the daemon, the lab and the test bed alike:
//!
//! * [`NetnsFd`]: an open namespace (a pod's `CNI_NETNS`, a node's, the caller's own),
//!   checked to be a network namespace, and work run inside it on a short-lived thread
//!   (so that no long-lived thread ever changes namespace);
//! * [`named`]: namespaces made, listed and removed by name under /run/netns, as
//!   `ip netns` does, so that `ip netns exec`, CNI runtimes and people can use them too;
//! * [`offload`]: an interface's offloads, which netlink cannot set (run it inside the
//!   namespace, with `NetnsFd::run`);
//! * [`links`] (with the `netlink` feature): veth pairs across two namespaces, and an
//!   interface's settings, as the daemon and the lab make them; netlink requests go out
//!   on sockets opened inside the namespace and kept with its handle (`netlink.rs`).
//!
//! Unsafe code: asking the kernel what a namespace descriptor is (`NS_GET_NSTYPE`,
//! `handle.rs`). The ethtool ioctl of `offload.rs` is `xwire-ethtool`'s.

mod enter;
mod handle;
#[cfg(feature = "netlink")]
pub mod links;
pub mod named;
#[cfg(feature = "netlink")]
mod netlink;
pub mod offload;

pub use enter::{enter, Visit};
pub use handle::{NetnsError, NetnsFd, NetnsIdentity};

#[cfg(test)]
mod tests {
    /// Removes a named namespace when dropped, the test passed or not.
    pub(crate) struct Removed(std::path::PathBuf);

    impl Removed {
        pub(crate) fn named(name: &str) -> Removed {
            Removed(crate::named::path(name))
        }
    }

    impl Drop for Removed {
        fn drop(&mut self) {
            crate::named::remove(&self.0);
        }
    }
}
