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

use super::gwire::NODE_LABEL;
use super::{backend, KubeStore};
use crate::ca_secret::object_ref;
use crate::signer::judge::{outcome, Outcome};
use crate::store::StoreError;

/// The usages the request asks for: a node both dials its peers and is dialed.
const USAGES: [&str; 3] = ["digital signature", "server auth", "client auth"];

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
            labels: Some([(NODE_LABEL.to_owned(), store.node.clone())].into()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.csr_pem.clone().into_bytes()),
            signer_name: signer.to_owned(),
            usages: Some(USAGES.iter().map(|u| (*u).to_owned()).collect()),
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
        match outcome(&now) {
            Outcome::Issued(cert_pem) => {
                return request
                    .identity(&cert_pem, &ca_pem)
                    .map_err(|e| backend(format!("CertificateSigningRequest {name}: {e}")));
            }
            Outcome::Refused(why) => {
                return Err(backend(format!(
                    "the signer {signer} refused CertificateSigningRequest {name}: {why}"
                )))
            }
            Outcome::Pending => {}
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

    #[test]
    fn a_long_node_name_is_cut_for_the_request_name() {
        assert_eq!(truncated("node-1", 200), "node-1");
        assert_eq!(truncated(&"n".repeat(253), 200).len(), 200);
        assert_eq!(truncated("aé", 2), "a");
    }
}
