//! The xwire control plane: the node daemon's configuration, topology sources, the wire
//! store, the interfaces it makes, and the logic that answers CNI calls (see DESIGN.md).
//!
//! Unsafe code: one use, taking ownership of the descriptors that come with a CNI call
//! (`SCM_RIGHTS`, `api_server.rs`).

mod accept_failures;
pub mod api_server;
pub mod ca_secret;
pub(crate) mod capture_stream;
pub mod chain;
pub mod config;
pub mod interfaces;
pub(crate) mod membership;
pub mod metrics;
pub mod metrics_server;
pub mod netns_mount;
pub use xwire_netns as netns;
pub mod node;
pub mod routing;
pub mod signer;
pub(crate) mod step_times;
pub mod store;
// The model's, under the name the daemon's code has always used for it.
pub(crate) use xwire_model::topology;
