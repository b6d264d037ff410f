//! A node's identity as PEM text.

use std::path::Path;

use crate::PkiError;

/// What a node shows its peers and what it trusts: its certificate and key, and the
/// cluster CA's certificate, all PEM.
#[derive(Clone)]
pub struct NodeIdentity {
    pub node_name: String,
    pub cert_pem: String,
    pub key_pem: String,
    pub ca_pem: String,
}

impl std::fmt::Debug for NodeIdentity {
    // The private key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeIdentity")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

impl NodeIdentity {
    /// Reads a node's identity from PEM files.
    pub fn load(
        node_name: &str,
        cert: &Path,
        key: &Path,
        ca: &Path,
    ) -> Result<NodeIdentity, PkiError> {
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| PkiError::Read {
                path: path.display().to_string(),
                cause: source,
            })
        };
        Ok(NodeIdentity {
            node_name: node_name.to_owned(),
            cert_pem: read(cert)?,
            key_pem: read(key)?,
            ca_pem: read(ca)?,
        })
    }
}
