//! The network-namespace test bed that every xwire crate's tests use (as a
//! dev-dependency), and the end-to-end perf scenarios of `xwire-perf`.

#![forbid(unsafe_code)]

pub mod cni_scale;
pub(crate) mod cni_steps;
pub mod impair_accuracy;
pub mod kube_scale;
pub mod lab_size;
pub mod local_fwd;
pub mod measure;
pub mod remote_wire;
pub mod restart;
pub mod tools;
pub mod worker_settings;
pub use xwire_testbed as testbed;
