//! Node identities: a cluster CA and the node certificates it signs. The standalone lab
//! and the tests make them here (rcgen); a cluster supplies them as PEM files.

use std::path::Path;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

use super::PeerError;

/// A certificate authority that signs node certificates.
pub struct ClusterCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl ClusterCa {
    /// A new self-signed CA named `name`.
    pub fn generate(name: &str) -> Result<ClusterCa, PeerError> {
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(pki)?;
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().map_err(pki)?;
        let cert = params.self_signed(&key).map_err(pki)?;
        Ok(ClusterCa { cert, key })
    }

    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// A certificate for `node_name` (its DNS subject alternative name, which peers check
    /// when they dial it), signed by this CA.
    pub fn issue(&self, node_name: &str) -> Result<NodeIdentity, PeerError> {
        xwire_proto::control::check_node_name(node_name).map_err(PeerError::Identity)?;
        let mut params = CertificateParams::new(vec![node_name.to_owned()]).map_err(pki)?;
        params
            .distinguished_name
            .push(DnType::CommonName, node_name);
        let key = KeyPair::generate().map_err(pki)?;
        let cert = params.signed_by(&key, &self.cert, &self.key).map_err(pki)?;
        Ok(NodeIdentity {
            node_name: node_name.to_owned(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            ca_pem: self.cert_pem(),
        })
    }
}

fn pki(e: rcgen::Error) -> PeerError {
    PeerError::Identity(e.to_string())
}

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
    ) -> Result<NodeIdentity, PeerError> {
        let read = |path: &Path| {
            std::fs::read_to_string(path)
                .map_err(|e| PeerError::Identity(format!("read {}: {e}", path.display())))
        };
        Ok(NodeIdentity {
            node_name: node_name.to_owned(),
            cert_pem: read(cert)?,
            key_pem: read(key)?,
            ca_pem: read(ca)?,
        })
    }
}
