//! The cluster CA: a self-signed certificate authority that signs node certificates.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};

use crate::{NodeIdentity, PkiError};

/// A certificate authority that signs node certificates.
pub struct ClusterCa {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl ClusterCa {
    /// A new self-signed CA named `name`.
    pub fn generate(name: &str) -> Result<ClusterCa, PkiError> {
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

    /// The CA's private key, PEM: for the Secret a cluster keeps it in.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The CA kept as PEM (`cert_pem`, `key_pem`), to issue more node certificates. The
    /// certificate is rebuilt from its own fields and key, so what it signs chains to
    /// the certificate peers already trust.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<ClusterCa, PkiError> {
        let key = KeyPair::from_pem(key_pem).map_err(pki)?;
        let params = CertificateParams::from_ca_cert_pem(cert_pem).map_err(pki)?;
        let cert = params.self_signed(&key).map_err(pki)?;
        Ok(ClusterCa { cert, key })
    }

    pub(crate) fn cert(&self) -> &rcgen::Certificate {
        &self.cert
    }

    pub(crate) fn key(&self) -> &KeyPair {
        &self.key
    }

    /// A certificate for `node_name` (its DNS subject alternative name, which peers check
    /// when they dial it), signed by this CA. The name must be a node name
    /// (`xwire_proto::control::check_node_name`): no wildcard, no path.
    pub fn issue(&self, node_name: &str) -> Result<NodeIdentity, PkiError> {
        let params = node_params(node_name)?;
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

/// What every node certificate says: the node's name as its common name and its one DNS
/// name. The name must be a node name (`xwire_proto::control::check_node_name`).
pub(crate) fn node_params(node_name: &str) -> Result<CertificateParams, PkiError> {
    xwire_proto::control::check_node_name(node_name).map_err(PkiError::Name)?;
    let mut params = CertificateParams::new(vec![node_name.to_owned()]).map_err(pki)?;
    params
        .distinguished_name
        .push(DnType::CommonName, node_name);
    Ok(params)
}

pub(crate) fn pki(e: rcgen::Error) -> PkiError {
    PkiError::Certificate(e.to_string())
}
