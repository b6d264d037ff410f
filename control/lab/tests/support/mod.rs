//! The programs a lab runs beside `xwirectl` (the daemon, the plugin, the traffic
//! generator), built once per test process into the same target directory: the lab finds
//! them there, as it does in a release.
#![allow(dead_code)] // each test file uses its own part of this

pub mod lab;
pub mod metrics;

use std::path::PathBuf;
use std::sync::Once;

use xwire_testbed::cluster::built_beside;
pub use xwire_testbed::cluster::{eventually, TempDir};

fn xwirectl() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_xwirectl"))
}

pub fn xwired() -> PathBuf {
    static BUILD: Once = Once::new();
    built_beside(&BUILD, &xwirectl(), "xwire-control", "xwired")
}

pub fn plugin_bin() -> PathBuf {
    static BUILD: Once = Once::new();
    built_beside(&BUILD, &xwirectl(), "xwire-cni", "xwire")
}

pub fn pktgen_bin() -> PathBuf {
    static BUILD: Once = Once::new();
    built_beside(&BUILD, &xwirectl(), "xwire-bench", "xwire-pktgen")
}
