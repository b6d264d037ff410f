//! CNI chaining: xwire's entry at the end of the node's primary configuration list, kept
//! there while the daemon runs and taken out when it stops (see DESIGN.md, CNI chaining).

pub mod conflist;
mod installer;

pub use installer::{run, ChainConfig, Ensured, Installer};
