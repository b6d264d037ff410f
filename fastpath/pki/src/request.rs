//! A node's certificate by request: the node makes its key and a signing request (PKCS
//! #10) naming itself, and only the CA's holder signs it. The key never leaves the node
//! and the CA key never reaches it (in a cluster: a CertificateSigningRequest object and
//! `xwire-signer`).

use rcgen::{
    CertificateSigningRequestParams, ExtendedKeyUsagePurpose, KeyPair, KeyUsagePurpose, SanType,
};

use crate::ca::{node_params, pki, ClusterCa};
use crate::{NodeIdentity, PkiError};

/// A node's new key and its request for a certificate naming the node.
pub struct NodeRequest {
    node_name: String,
    key: KeyPair,
    /// The request, PEM (`-----BEGIN CERTIFICATE REQUEST-----`).
    pub csr_pem: String,
}

impl std::fmt::Debug for NodeRequest {
    // The private key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeRequest")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

impl NodeRequest {
    /// A new key (ECDSA P-256) and a request signed with it, for `node_name` as its common
    /// name and its one DNS name.
    pub fn new(node_name: &str) -> Result<NodeRequest, PkiError> {
        let params = node_params(node_name)?;
        let key = KeyPair::generate().map_err(pki)?;
        let csr_pem = params
            .serialize_request(&key)
            .and_then(|csr| csr.pem())
            .map_err(pki)?;
        Ok(NodeRequest {
            node_name: node_name.to_owned(),
            key,
            csr_pem,
        })
    }

    /// The identity made of this request's key and the certificate the signer issued for
    /// it (`cert_pem`), trusting `ca_pem`. The certificate must carry this request's
    /// public key: a certificate for another key would fail every handshake later, with
    /// a less clear error.
    pub fn identity(self, cert_pem: &str, ca_pem: &str) -> Result<NodeIdentity, PkiError> {
        if !carries_key(cert_pem, &self.key.public_key_der())? {
            return Err(PkiError::Certificate(
                "the issued certificate is not for this node's key".into(),
            ));
        }
        Ok(NodeIdentity {
            node_name: self.node_name,
            cert_pem: cert_pem.to_owned(),
            key_pem: self.key.serialize_pem(),
            ca_pem: ca_pem.to_owned(),
        })
    }
}

/// Whether the first certificate of `cert_pem` holds the public key `spki_der`.
fn carries_key(cert_pem: &str, spki_der: &[u8]) -> Result<bool, PkiError> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let block = x509_parser::pem::parse_x509_pem(cert_pem.as_bytes())
        .map_err(|e| PkiError::Certificate(format!("the issued certificate: {e}")))?
        .1;
    let cert = X509Certificate::from_der(&block.contents)
        .map_err(|e| PkiError::Certificate(format!("the issued certificate: {e}")))?
        .1;
    Ok(cert.public_key().raw == spki_der)
}

/// How long a signed node certificate is valid, at most and by default.
pub const MAX_VALIDITY: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

impl ClusterCa {
    /// Signs `csr_pem` for `node_name` if the request names that node and nothing else
    /// (its one DNS name, no address, no other extension) and is signed by the key it
    /// carries. What the certificate says is this CA's choice, not the request's: the node
    /// name as common name and DNS name, server and client authentication, valid from a
    /// few minutes ago for `validity` (at most `MAX_VALIDITY`).
    pub fn sign_request(
        &self,
        csr_pem: &str,
        node_name: &str,
        validity: std::time::Duration,
    ) -> Result<String, PkiError> {
        let mut params = node_params(node_name)?;
        let mut request = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| PkiError::Request(format!("not a signed request: {e}")))?;
        let names = &request.params.subject_alt_names;
        if names.as_slice() != [SanType::DnsName(node_name.try_into().map_err(pki)?)] {
            return Err(PkiError::Request(format!(
                "it names {names:?}, not only the node {node_name}"
            )));
        }
        let now = time::OffsetDateTime::now_utc();
        // Another node's clock may be a little behind.
        let skew = time::Duration::minutes(5);
        let validity = validity.min(MAX_VALIDITY);
        params.not_before = now - skew;
        params.not_after = now
            + time::Duration::try_from(validity)
                .map_err(|e| PkiError::Request(format!("validity {validity:?}: {e}")))?;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params.use_authority_key_identifier_extension = true;
        request.params = params;
        let cert = request.signed_by(self.cert(), self.key()).map_err(pki)?;
        Ok(cert.pem())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::CertificateParams;
    use std::time::Duration;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn a_request_signed_by_the_ca_makes_an_identity_that_trusts_the_ca() {
        let ca = ClusterCa::generate("test-ca").unwrap();
        let request = NodeRequest::new("node-1").unwrap();
        assert!(request.csr_pem.contains("BEGIN CERTIFICATE REQUEST"));
        assert!(!request.csr_pem.contains("PRIVATE KEY"));
        let cert = ca.sign_request(&request.csr_pem, "node-1", DAY).unwrap();
        let identity = request.identity(&cert, &ca.cert_pem()).unwrap();
        assert_eq!(identity.node_name, "node-1");
        assert_eq!(identity.ca_pem, ca.cert_pem());
        let issued = CertificateParams::from_ca_cert_pem(&identity.cert_pem).unwrap();
        assert_eq!(
            issued.subject_alt_names,
            [SanType::DnsName("node-1".try_into().unwrap())]
        );
        let lifetime = issued.not_after - issued.not_before;
        assert!(lifetime <= time::Duration::days(1) + time::Duration::minutes(6));
        assert!(lifetime >= time::Duration::days(1));
    }

    #[test]
    fn the_ca_signs_a_request_only_for_the_node_it_names() {
        let ca = ClusterCa::generate("test-ca").unwrap();
        let request = NodeRequest::new("node-1").unwrap();
        let error = ca
            .sign_request(&request.csr_pem, "node-2", DAY)
            .unwrap_err();
        assert!(
            error.to_string().contains("not only the node node-2"),
            "{error}"
        );
        // A request naming more than the node (here an address too) is refused.
        let mut params = CertificateParams::new(vec!["node-1".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(SanType::IpAddress([10, 0, 0, 1].into()));
        let key = KeyPair::generate().unwrap();
        let wider = params.serialize_request(&key).unwrap().pem().unwrap();
        assert!(ca.sign_request(&wider, "node-1", DAY).is_err());
        // Nor is what is not a request.
        assert!(ca.sign_request("not pem", "node-1", DAY).is_err());
        assert!(ca.sign_request(&ca.cert_pem(), "node-1", DAY).is_err());
    }

    #[test]
    fn the_validity_is_capped_and_the_request_cannot_widen_the_certificate() {
        let ca = ClusterCa::generate("test-ca").unwrap();
        let mut params = CertificateParams::new(vec!["node-1".to_owned()]).unwrap();
        // A request asking to sign certificates and code.
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        let key = KeyPair::generate().unwrap();
        let csr = params.serialize_request(&key).unwrap().pem().unwrap();
        let cert = ca.sign_request(&csr, "node-1", 100 * MAX_VALIDITY).unwrap();
        let issued = CertificateParams::from_ca_cert_pem(&cert).unwrap();
        assert!(!matches!(issued.is_ca, rcgen::IsCa::Ca(_)));
        assert_eq!(issued.key_usages, [KeyUsagePurpose::DigitalSignature]);
        assert_eq!(
            issued.extended_key_usages,
            [
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth
            ]
        );
        assert!(issued.not_after - issued.not_before <= time::Duration::days(366));
    }

    #[test]
    fn an_identity_needs_the_certificate_of_its_own_key() {
        let ca = ClusterCa::generate("test-ca").unwrap();
        let mine = NodeRequest::new("node-1").unwrap();
        let other = NodeRequest::new("node-1").unwrap();
        let cert = ca.sign_request(&other.csr_pem, "node-1", DAY).unwrap();
        let error = mine.identity(&cert, &ca.cert_pem()).unwrap_err();
        assert!(
            error.to_string().contains("not for this node's key"),
            "{error}"
        );
    }
}
