//! Veth mode (the plugin's `vethMode` keys, cni/README.md): a veth from the pod to its
//! node, for pods whose primary interface cannot reach the node. `plan` decides,
//! `netlink` makes, checks and removes.

pub mod netlink;
pub mod plan;

pub use plan::VethMode;
