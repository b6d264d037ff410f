//! Benchmarks for xwire: the criterion benches under benches/, and the pieces of
//! `xwire-pktgen` (its probe frames and its sink's statistics).

#![forbid(unsafe_code)]

pub mod lossfree;
pub mod probe;
pub mod stats;
pub mod traffic;
pub mod trial;
