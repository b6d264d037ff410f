//! The cluster CA as a Kubernetes Secret holds it (`ca.crt`, `ca.key`: what `xwirectl
//! ca-secret` prints), read by `xwire-signer` and, where a cluster chose it, by each node
//! (`ca_secret`).

use k8s_openapi::api::core::v1::Secret;
use xwire_pki::ClusterCa;

/// The CA that signs, and every CA certificate to trust: `ca.crt` may hold more than one
/// while the CA is rotated; the first is the one `ca.key` belongs to.
pub(crate) struct SecretCa {
    pub ca: ClusterCa,
    pub trusted_pem: String,
}

/// The CA in `secret`, which `what` names in errors.
pub(crate) fn from_secret(secret: &Secret, what: &str) -> Result<SecretCa, String> {
    let field = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .ok_or_else(|| format!("Secret {what} has no {key}"))
    };
    let (trusted_pem, key) = (field("ca.crt")?, field("ca.key")?);
    let signing = trusted_pem
        .split_inclusive("-----END CERTIFICATE-----")
        .next()
        .unwrap_or_default();
    let ca = ClusterCa::from_pem(signing, &key).map_err(|e| format!("Secret {what}: {e}"))?;
    Ok(SecretCa { ca, trusted_pem })
}

/// `namespace/name`, or a bare `name` in namespace `own`.
pub fn object_ref<'a>(reference: &'a str, own: &'a str) -> (&'a str, &'a str) {
    reference.split_once('/').unwrap_or((own, reference))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    fn secret(entries: &[(&str, String)]) -> Secret {
        Secret {
            data: Some(
                entries
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.clone().into_bytes())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn the_first_certificate_signs_and_every_one_is_trusted() {
        let (new, old) = (
            ClusterCa::generate("new").unwrap(),
            ClusterCa::generate("old").unwrap(),
        );
        let both = new.cert_pem() + &old.cert_pem();
        let read = from_secret(
            &secret(&[("ca.crt", both.clone()), ("ca.key", new.key_pem())]),
            "x/ca",
        )
        .unwrap();
        assert_eq!(read.trusted_pem, both);
        // The CA is rebuilt from its certificate and key (its certificate is signed
        // anew, so its bytes differ): the key is what signs.
        assert_eq!(read.ca.key_pem(), new.key_pem());
        let missing = from_secret(&secret(&[("ca.crt", both)]), "x/ca");
        assert_eq!(missing.err().unwrap(), "Secret x/ca has no ca.key");
    }

    #[test]
    fn a_bare_name_is_in_the_own_namespace() {
        assert_eq!(object_ref("ns/name", "own"), ("ns", "name"));
        assert_eq!(object_ref("name", "own"), ("own", "name"));
    }
}
