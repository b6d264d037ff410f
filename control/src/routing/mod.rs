//! Routing in pods: router mode's per-interface tables and rules, and the static routes
//! a pod's Topology lists. `plan` decides (plain data), `netlink` reads and writes.

pub mod netlink;
pub mod plan;

pub use netlink::{observe, remove_all, sync, PodRoutingSpec, RoutingSeen};
pub(crate) use netlink::{observe_table, sync_table};
pub use plan::{AddressedEnd, PodRouting, PolicySettings, Route, Rule, Selector, StaticRoute};
