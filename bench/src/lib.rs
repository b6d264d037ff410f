//! Benchmarks for xwire: the criterion benches live under benches/.
