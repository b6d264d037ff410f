//! Node identities: what a node shows its peers and what it trusts (its certificate and
//! key, and the cluster CA's certificate, all PEM), and, with the `ca` feature, a cluster
//! CA that makes them (rcgen): the standalone lab, `xwirectl certs` and the tests use it;
//! a cluster supplies identities as PEM files. The data plane needs only the identity,
//! so the CA (and rcgen) stays out of it.

#![forbid(unsafe_code)]

#[cfg(feature = "ca")]
mod ca;
mod identity;
mod key_file;
#[cfg(feature = "ca")]
mod request;
#[cfg(feature = "tls")]
pub mod tls;

#[cfg(feature = "ca")]
pub use ca::ClusterCa;
pub use identity::NodeIdentity;
pub use key_file::write_private;
#[cfg(feature = "ca")]
pub use request::{NodeRequest, MAX_VALIDITY};

#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    #[error("{0}")]
    Name(String),
    #[error("read {path}: {cause}")]
    Read { path: String, cause: std::io::Error },
    #[error("making a certificate: {0}")]
    Certificate(String),
    #[error("the signing request: {0}")]
    Request(String),
}
