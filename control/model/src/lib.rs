//! What xwire's files and objects say, read and checked: meshnet's Topology and xwire's
//! fields in it, a link's impairment as users write it and as the fast path applies it,
//! the carrier names, the node pools, the lab file, and the daemon's configuration file. Plain data and
//! pure functions: no file, socket or namespace is touched here (the daemon reads its
//! configuration file; the lab, the daemon and the fast path take these types from here),
//! so that a tool that only reads or writes these formats links none of the data plane
//! or the stores. The one call to the system is the host name, the default node name.

#![forbid(unsafe_code)]

pub mod bench_report;
pub mod config;
pub mod impairment;
pub mod lab;
pub mod pools;
pub mod route;
pub mod topology;
pub mod worker_defaults;
