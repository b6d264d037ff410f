//! An identity as rustls takes it (the `tls` feature): the certificate chain, the key,
//! the CA as the only root, and the crypto provider (`provider`); and the check that a
//! peer's certificate (already verified against that CA) names the node it claims to be.
//! The fast path's peer connections and the pool gateways' tunnels both use them.

use std::any::Any;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::RootCertStore;

use crate::NodeIdentity;

pub struct TlsParts {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    pub roots: Arc<RootCertStore>,
    pub provider: Arc<rustls::crypto::CryptoProvider>,
}

impl NodeIdentity {
    /// The identity's PEM, parsed for rustls; the error says which part is wrong.
    pub fn tls_parts(&self) -> Result<TlsParts, String> {
        let chain = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("node certificate: {e}"))?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes())
            .map_err(|e| format!("node key: {e}"))?;
        let mut roots = RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            roots
                .add(ca.map_err(|e| format!("CA certificate: {e}"))?)
                .map_err(|e| format!("CA certificate: {e}"))?;
        }
        if roots.is_empty() {
            return Err("no CA certificate".into());
        }
        Ok(TlsParts {
            chain,
            key,
            roots: Arc::new(roots),
            provider: Arc::new(provider()),
        })
    }
}

/// aws-lc-rs, with AES-128-GCM first. Every frame of a wire is sealed once and opened
/// once, so the AEAD is a fixed share of a wire's cost per byte; `cargo bench -p
/// xwire-bench --bench aead` measures the choices on the machine at hand. Here (x86_64
/// with AVX-512 and VAES), sealing and opening one 9000-byte QUIC packet took 1.06 µs
/// with aws-lc-rs's AES-128-GCM, 1.22 µs with its AES-256-GCM, and 1.44 and 1.72 µs with
/// ring's (ring's AES-256-GCM was what peers negotiated before: rustls prefers it); a
/// 1200-byte packet 274 against 328 ns. Both ends are xwire nodes that offer all three
/// TLS 1.3 suites, so the order decides, and a node of an older build still agrees on
/// AES-128-GCM.
pub fn provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::aws_lc_rs::cipher_suite::{
        TLS13_AES_128_GCM_SHA256, TLS13_AES_256_GCM_SHA384, TLS13_CHACHA20_POLY1305_SHA256,
    };
    rustls::crypto::CryptoProvider {
        cipher_suites: vec![
            TLS13_AES_128_GCM_SHA256,
            TLS13_AES_256_GCM_SHA384,
            TLS13_CHACHA20_POLY1305_SHA256,
        ],
        ..rustls::crypto::aws_lc_rs::default_provider()
    }
}

/// Makes `provider()` the process's default rustls provider, unless one is set already.
/// rustls chooses a default by itself only when one backend is built in; a build with
/// two (kube's client brings ring, this crate aws-lc-rs) makes any library that asks for
/// the default, kube's client among them, panic instead.
pub fn install_process_default() {
    // An error means a default is set already, which is as good.
    let _ = provider().install_default();
}

/// Whether the certificate chain a QUIC connection reports for its peer (its
/// `peer_identity()`, checked against the CA in the handshake) is for node `name`.
pub fn certificate_is_for(peer_identity: Option<Box<dyn Any>>, name: &str) -> bool {
    let Some(identity) = peer_identity else {
        return false;
    };
    let Ok(chain) = identity.downcast::<Vec<CertificateDer<'static>>>() else {
        return false;
    };
    let (Some(cert), Ok(server_name)) = (chain.first(), ServerName::try_from(name.to_owned()))
    else {
        return false;
    };
    match rustls::server::ParsedCertificate::try_from(cert) {
        Ok(parsed) => rustls::client::verify_server_name(&parsed, &server_name).is_ok(),
        Err(_) => false,
    }
}
