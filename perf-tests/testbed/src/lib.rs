//! Test hosts made of network namespaces, joined by veth pairs, configured over netlink.
//!
//! Everything made here has a name unique to the test process (tests run in parallel,
//! in threads or in processes) and is removed by a guard when it drops, also while a test
//! panics: [`Netns`] removes its namespace (and with it every interface inside),
//! [`Veth`] deletes its pair, [`ChildGuard`] kills the process it holds. Namespaces that a
//! killed test process left behind are swept by the next test process.
//!
//! ```no_run
//! use xwire_testbed::{Netns, Veth};
//! let a = Netns::new("pod-a")?;
//! let b = Netns::new("pod-b")?;
//! let wire = Veth::named(&a, "eth1", &b, "eth1")?;
//! a.add_address("eth1", "192.0.2.1/30")?;
//! b.add_address("eth1", "192.0.2.2/30")?;
//! wire.set_up()?;
//! let ping = a.exec(std::process::Command::new("ping").args(["-c1", "192.0.2.2"]))?;
//! assert!(ping.status.success());
//! # Ok::<(), xwire_testbed::Error>(())
//! ```
//!
//! Unsafe code: raw packet sockets for test frames (`raw.rs`) and a sysconf call
//! (`cluster.rs`).

#[cfg(feature = "kube")]
pub mod apiserver;
pub mod assets;
pub mod checks;
pub mod cli;
pub mod cluster;
mod error;
mod flow;
mod link;
mod names;
mod netns;
mod offload;
pub mod processes;
mod raw;
pub mod realnode;
pub mod termination;

pub use error::Error;
pub use flow::{Flow, FlowCounts};
pub use link::{LinkState, LinkStats, Mac, Veth};
pub use names::unique_ifname;
pub use netns::{sweep_stale_namespaces, ChildGuard, Netns};
pub use raw::{PacketSocket, RawSocket};

/// Reports the calling test as skipped, with the reason, instead of passed: a line on
/// stderr, and a file under `XWIRE_SKIP_DIR` (set by `cargo xtask test`, which counts the
/// files as skipped and prints their reasons). The test then returns.
pub fn skip(reason: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .replace("::", "-");
    eprintln!("SKIPPED {test}: {reason}");
    if let Some(dir) = std::env::var_os("XWIRE_SKIP_DIR") {
        let _ = std::fs::create_dir_all(&dir);
        let _ = std::fs::write(std::path::Path::new(&dir).join(&test), reason);
    }
}
