//! The fast-path worker's settings by default, here so that the daemon's configuration and
//! the worker (and the perf scenarios, which run workers directly) share one set; and the
//! one limit of the kernel's that the lab sizes its measurements by.

use std::time::Duration;

/// The fast-path worker's `idle_spin` by default. Measured with `xwire-perf restart --wires 1000`
/// (two nodes on two cores): 2 ms let the running node's worker spin through a 1 ms flow
/// and took a core from the restarting node (all wires back in 1.49 s, the running
/// daemon using 1.06 s of CPU meanwhile); 200 µs: 0.95 and 1.09 s, with 0.42 and 0.51 s.
pub const DEFAULT_IDLE_SPIN: Duration = Duration::from_micros(200);

/// The worker's `coalesce` by default: see the fast path's `switch::pace` for how it was
/// chosen.
pub const DEFAULT_COALESCE: Duration = Duration::from_micros(50);

/// The worker thread's nice value by default: the most a nice value weighs, so that
/// ordinary threads on the worker's core do not hold it off while it has frames (the
/// fast path's `nice` says why, and why not a real-time class).
pub const DEFAULT_WORKER_NICE: i8 = -20;

/// The worker's port sizes by default (see `DaemonConfig::frames_per_port`).
pub const DEFAULT_FRAMES_PER_PORT: usize = 4096;
pub const DEFAULT_MIN_FRAMES_PER_PORT: usize = 128;
pub const DEFAULT_RESTING_FRAMES_PER_WORKER: usize = 16_384;
pub const DEFAULT_SHRINK_AFTER: Duration = Duration::from_secs(30);

/// The largest frame native XDP on a veth takes in one buffer: a 4 KiB page less XDP's
/// headroom (258 bytes) and the skb's shared info (320 bytes), as the kernel's veth driver
/// computes its XDP MTU limit. Larger frames (jumbo MTUs) come as several buffers, which
/// native mode takes only from a program that says it handles them (the worker's does,
/// libxdp's does not); ports for them open in generic mode, which measured faster (the
/// fast path's `XdpPort::open` says how). Control steers a same-node wire in place only
/// up to this size.
pub const NATIVE_MAX_FRAME: usize = 4096 - 258 - 320;
