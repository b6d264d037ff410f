//! This node's certificate from the cluster's signer: the node makes its key and a
//! signing request, posts it as a CertificateSigningRequest for `xwire-signer`
//! (control/src/signer), and waits for the certificate. The key never leaves the node, and
//! no node reads the CA's key: the signer signs only for the node that the request's
//! token names (its `authentication.kubernetes.io/node-name`).

use std::time::{Duration, Instant};

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};
use xwire_pki::{NodeIdentity, NodeRequest};

use super::{backend, KubeStore};
use crate::ca_secret::object_ref;
use crate::store::StoreError;

/// The usages the request asks for: a node both dials its peers and is dialed.
pub const USAGES: [&str; 3] = ["digital signature", "server auth", "client auth"];

/// How often the node looks whether its request was answered.
const POLL: Duration = Duration::from_millis(250);

/// This node's identity, signed by `signer` (a CertificateSigningRequest's `signerName`),
/// trusting the CA certificates of ConfigMap `bundle` (`namespace/name`, or `name` in the
/// daemon's own namespace; key `ca.crt`). Waits up to `timeout` for the signer.
pub(super) fn request_identity(
    store: &KubeStore,
    signer: &str,
    bundle: &str,
    timeout: Duration,
) -> Result<NodeIdentity, StoreError> {
    let ca_pem = trusted_cas(store, bundle)?;
    let request = NodeRequest::new(&store.node)
        .map_err(|e| backend(format!("this node's signing request: {e}")))?;
    let api: Api<CertificateSigningRequest> = Api::all(store.client.clone());
    let object = CertificateSigningRequest {
        metadata: ObjectMeta {
            // The server completes the name: a node asks anew at every start.
            generate_name: Some(format!("xwire-{}-", truncated(&store.node, 200))),
            labels: Some([("xwire.dev/node".to_owned(), store.node.clone())].into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.csr_pem.clone().into_bytes()),
            signer_name: signer.to_owned(),
            usages: Some(USAGES.iter().map(|u| (*u).to_owned()).collect()),
            expiration_seconds: None,
            ..Default::default()
        },
        status: None,
    };
    store.count(1);
    let made = store
        .runtime
        .block_on(api.create(&PostParams::default(), &object))
        .map_err(|e| {
            backend(format!(
                "posting this node's CertificateSigningRequest: {e}"
            ))
        })?;
    let name = made.metadata.name.unwrap_or_default();
    tracing::info!(request = %name, %signer, "asked the cluster's signer for this node's certificate");
    let start = Instant::now();
    loop {
        store.count(1);
        let now = store
            .runtime
            .block_on(api.get_opt(&name))
            .map_err(|e| backend(format!("CertificateSigningRequest {name}: {e}")))?
            .ok_or_else(|| backend(format!("CertificateSigningRequest {name} was deleted")))?;
        match answer(&now) {
            Answer::Issued(cert_pem) => {
                return request
                    .identity(&cert_pem, &ca_pem)
                    .map_err(|e| backend(format!("CertificateSigningRequest {name}: {e}")));
            }
            Answer::Refused(why) => {
                return Err(backend(format!(
                    "the signer {signer} refused CertificateSigningRequest {name}: {why}"
                )))
            }
            Answer::Pending => {}
        }
        if start.elapsed() >= timeout {
            return Err(backend(format!(
                "CertificateSigningRequest {name} was not signed within {timeout:?}: is \
                 xwire-signer running (kubectl -n xwire-system get deploy xwire-signer), \
                 and is {signer} its signer name?"
            )));
        }
        std::thread::sleep(POLL);
    }
}

/// Where a request stands.
#[derive(Debug, PartialEq)]
enum Answer {
    Pending,
    Issued(String),
    Refused(String),
}

fn answer(csr: &CertificateSigningRequest) -> Answer {
    let status = csr.status.as_ref();
    for condition in status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
    {
        if matches!(condition.type_.as_str(), "Denied" | "Failed") && condition.status == "True" {
            let why = condition
                .message
                .clone()
                .or_else(|| condition.reason.clone())
                .unwrap_or_else(|| condition.type_.clone());
            return Answer::Refused(why);
        }
    }
    match status.and_then(|s| s.certificate.as_ref()) {
        Some(cert) if !cert.0.is_empty() => {
            Answer::Issued(String::from_utf8_lossy(&cert.0).into_owned())
        }
        _ => Answer::Pending,
    }
}

/// The CA certificates peers' certificates must chain to: `ca.crt` of ConfigMap
/// `bundle`. During a rotation it holds the new CA and the old one.
fn trusted_cas(store: &KubeStore, bundle: &str) -> Result<String, StoreError> {
    let (namespace, name) = object_ref(bundle, store.client.default_namespace());
    let api: Api<ConfigMap> = Api::namespaced(store.client.clone(), namespace);
    store.count(1);
    let found = store
        .runtime
        .block_on(api.get_opt(name))
        .map_err(|e| backend(format!("ConfigMap {bundle}: {e}")))?
        .ok_or_else(|| {
            backend(format!(
                "ConfigMap {bundle} not found: it comes with the CA, from \
                 `xwirectl ca-secret --namespace {namespace} | kubectl apply -f -`"
            ))
        })?;
    found
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .filter(|pem| pem.contains("BEGIN CERTIFICATE"))
        .cloned()
        .ok_or_else(|| backend(format!("ConfigMap {bundle} has no certificate in ca.crt")))
}

/// At most `max` bytes of `name`, cut at a character boundary.
fn truncated(name: &str, max: usize) -> &str {
    let mut end = name.len().min(max);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    &name[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestStatus,
    };

    fn with(status: CertificateSigningRequestStatus) -> CertificateSigningRequest {
        CertificateSigningRequest {
            status: Some(status),
            ..Default::default()
        }
    }

    fn condition(type_: &str, message: &str) -> CertificateSigningRequestCondition {
        CertificateSigningRequestCondition {
            type_: type_.into(),
            status: "True".into(),
            message: Some(message.into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_request_is_pending_until_it_has_a_certificate_or_is_refused() {
        assert_eq!(
            answer(&CertificateSigningRequest::default()),
            Answer::Pending
        );
        let approved = with(CertificateSigningRequestStatus {
            conditions: Some(vec![condition("Approved", "ok")]),
            ..Default::default()
        });
        assert_eq!(answer(&approved), Answer::Pending);
        let issued = with(CertificateSigningRequestStatus {
            conditions: Some(vec![condition("Approved", "ok")]),
            certificate: Some(ByteString(b"PEM".to_vec())),
        });
        assert_eq!(answer(&issued), Answer::Issued("PEM".into()));
        let denied = with(CertificateSigningRequestStatus {
            conditions: Some(vec![condition("Denied", "names node-2")]),
            ..Default::default()
        });
        assert_eq!(answer(&denied), Answer::Refused("names node-2".into()));
        let failed = with(CertificateSigningRequestStatus {
            conditions: Some(vec![
                condition("Approved", "ok"),
                condition("Failed", "no CA"),
            ]),
            ..Default::default()
        });
        assert_eq!(answer(&failed), Answer::Refused("no CA".into()));
    }

    #[test]
    fn a_long_node_name_is_cut_for_the_request_name() {
        assert_eq!(truncated("node-1", 200), "node-1");
        assert_eq!(truncated(&"n".repeat(253), 200).len(), 200);
        assert_eq!(truncated("aé", 2), "a");
    }
}
