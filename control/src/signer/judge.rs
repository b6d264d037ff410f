//! Whether `xwire-signer` signs a CertificateSigningRequest, from the object alone: the
//! API server wrote who asked (`spec.username`, `spec.extra`) and no requester can forge
//! that. A node daemon's pod-bound token carries its node's name
//! (`authentication.kubernetes.io/node-name`), so a node gets a certificate for its own
//! name only. Whether the request itself names that node, and only it, is checked when it
//! is signed (`ClusterCa::sign_request`).

use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;

/// The user extra in which the API server names the node of a pod-bound token.
pub(crate) const NODE_NAME_EXTRA: &str = "authentication.kubernetes.io/node-name";

/// The usages a node certificate may be asked for (the certificate gets the last two).
const ALLOWED_USAGES: [&str; 4] = [
    "digital signature",
    "key encipherment",
    "server auth",
    "client auth",
];

/// The shortest validity the API allows a request to ask for.
const MIN_EXPIRATION: Duration = Duration::from_secs(600);

/// Whose requests are signed, for which signer.
#[derive(Debug, Clone)]
pub struct Policy {
    pub signer_name: String,
    /// The one user whose requests are signed: the node daemons' ServiceAccount,
    /// `system:serviceaccount:<namespace>:<name>`.
    pub requester: String,
    /// The validity of a certificate whose request does not ask for less.
    pub validity: Duration,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Not this signer's, or answered already.
    Ignore,
    /// Sign for `node`, valid for `validity`.
    Sign { node: String, validity: Duration },
    /// Refuse, saying why (the requester reads it in the object's Denied condition).
    Deny { reason: String },
}

pub fn judge(csr: &CertificateSigningRequest, policy: &Policy) -> Verdict {
    let spec = &csr.spec;
    if spec.signer_name != policy.signer_name || answered(csr) {
        return Verdict::Ignore;
    }
    let deny = |reason: String| Verdict::Deny { reason };
    let requester = spec.username.as_deref().unwrap_or_default();
    if requester != policy.requester {
        return deny(format!(
            "requested by {requester:?}: only {} asks for node certificates",
            policy.requester
        ));
    }
    let nodes = spec
        .extra
        .as_ref()
        .and_then(|extra| extra.get(NODE_NAME_EXTRA))
        .map(Vec::as_slice)
        .unwrap_or_default();
    let [node] = nodes else {
        return deny(format!(
            "the requester's token names {} nodes ({NODE_NAME_EXTRA}): a node certificate \
             is signed only for a token bound to a pod on its node",
            nodes.len()
        ));
    };
    if let Some(usage) = spec
        .usages
        .iter()
        .flatten()
        .find(|u| !ALLOWED_USAGES.contains(&u.as_str()))
    {
        return deny(format!("usage {usage:?} is not a node certificate's"));
    }
    let asked = spec
        .expiration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs);
    let validity = asked
        .map_or(policy.validity, |asked| asked.min(policy.validity))
        .max(MIN_EXPIRATION);
    Verdict::Sign {
        node: node.clone(),
        validity,
    }
}

/// Whether the request has a certificate, or was denied or failed: nothing is left to do.
fn answered(csr: &CertificateSigningRequest) -> bool {
    outcome(csr) != Outcome::Pending
}

/// Where a request stands, as the requesting node and the signer both read it.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Pending,
    Issued(String),
    Refused(String),
}

pub fn outcome(csr: &CertificateSigningRequest) -> Outcome {
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
            return Outcome::Refused(why);
        }
    }
    match status.and_then(|s| s.certificate.as_ref()) {
        Some(cert) if !cert.0.is_empty() => {
            Outcome::Issued(String::from_utf8_lossy(&cert.0).into_owned())
        }
        _ => Outcome::Pending,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestCondition, CertificateSigningRequestSpec,
        CertificateSigningRequestStatus,
    };
    use k8s_openapi::ByteString;

    const DAEMON: &str = "system:serviceaccount:xwire-system:xwired";

    fn policy() -> Policy {
        Policy {
            signer_name: "xwire.dev/node".into(),
            requester: DAEMON.into(),
            validity: Duration::from_secs(86_400),
        }
    }

    fn request(user: &str, nodes: &[&str]) -> CertificateSigningRequest {
        let extra = [(
            NODE_NAME_EXTRA.to_owned(),
            nodes.iter().map(|n| (*n).to_owned()).collect(),
        )];
        CertificateSigningRequest {
            spec: CertificateSigningRequestSpec {
                signer_name: "xwire.dev/node".into(),
                username: Some(user.into()),
                extra: Some(extra.into()),
                usages: Some(vec!["digital signature".into(), "server auth".into()]),
                ..Default::default()
            },
            ..Default::default()
        }
    }

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
            outcome(&CertificateSigningRequest::default()),
            Outcome::Pending
        );
        let approved = with(CertificateSigningRequestStatus {
            conditions: Some(vec![condition("Approved", "ok")]),
            ..Default::default()
        });
        assert_eq!(outcome(&approved), Outcome::Pending);
        let issued = with(CertificateSigningRequestStatus {
            conditions: Some(vec![condition("Approved", "ok")]),
            certificate: Some(ByteString(b"PEM".to_vec())),
        });
        assert_eq!(outcome(&issued), Outcome::Issued("PEM".into()));
        let denied = with(CertificateSigningRequestStatus {
            conditions: Some(vec![condition("Denied", "names node-2")]),
            ..Default::default()
        });
        assert_eq!(outcome(&denied), Outcome::Refused("names node-2".into()));
        let failed = with(CertificateSigningRequestStatus {
            conditions: Some(vec![
                condition("Approved", "ok"),
                condition("Failed", "no CA"),
            ]),
            ..Default::default()
        });
        assert_eq!(outcome(&failed), Outcome::Refused("no CA".into()));
    }

    #[test]
    fn a_daemon_request_is_signed_for_the_node_its_token_names() {
        assert_eq!(
            judge(&request(DAEMON, &["kv1"]), &policy()),
            Verdict::Sign {
                node: "kv1".into(),
                validity: Duration::from_secs(86_400)
            }
        );
        // A shorter validity asked for is given; a longer one is not, nor one below the
        // API's least.
        let mut short = request(DAEMON, &["kv1"]);
        short.spec.expiration_seconds = Some(3_600);
        assert!(matches!(judge(&short, &policy()),
            Verdict::Sign { validity, .. } if validity == Duration::from_secs(3_600)));
        short.spec.expiration_seconds = Some(10);
        assert!(matches!(judge(&short, &policy()),
            Verdict::Sign { validity, .. } if validity == MIN_EXPIRATION));
        short.spec.expiration_seconds = Some(10 << 30);
        assert!(matches!(judge(&short, &policy()),
            Verdict::Sign { validity, .. } if validity == Duration::from_secs(86_400)));
    }

    #[test]
    fn another_user_or_a_token_without_one_node_is_denied() {
        let other = judge(
            &request("system:serviceaccount:default:default", &["kv1"]),
            &policy(),
        );
        assert!(
            matches!(other, Verdict::Deny { reason } if reason.contains("only system:serviceaccount:xwire-system:xwired"))
        );
        let unbound = judge(&request(DAEMON, &[]), &policy());
        assert!(matches!(unbound, Verdict::Deny { reason } if reason.contains("names 0 nodes")));
        let two = judge(&request(DAEMON, &["kv1", "kv2"]), &policy());
        assert!(matches!(two, Verdict::Deny { reason } if reason.contains("names 2 nodes")));
        let mut no_extra = request(DAEMON, &["kv1"]);
        no_extra.spec.extra = None;
        assert!(matches!(judge(&no_extra, &policy()), Verdict::Deny { .. }));
        let mut signing = request(DAEMON, &["kv1"]);
        signing.spec.usages = Some(vec!["cert sign".into()]);
        assert!(matches!(judge(&signing, &policy()),
            Verdict::Deny { reason } if reason.contains("\"cert sign\"")));
    }

    #[test]
    fn another_signers_request_and_an_answered_one_are_left_alone() {
        let mut kubelet = request(DAEMON, &["kv1"]);
        kubelet.spec.signer_name = "kubernetes.io/kubelet-serving".into();
        assert_eq!(judge(&kubelet, &policy()), Verdict::Ignore);
        let mut issued = request(DAEMON, &["kv1"]);
        issued.status = Some(CertificateSigningRequestStatus {
            certificate: Some(ByteString(b"PEM".to_vec())),
            ..Default::default()
        });
        assert_eq!(judge(&issued, &policy()), Verdict::Ignore);
        let mut denied = request(DAEMON, &["kv1"]);
        denied.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: "Denied".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert_eq!(judge(&denied, &policy()), Verdict::Ignore);
        // Approved by someone else and not yet signed: still judged.
        let mut approved = request("system:serviceaccount:default:default", &["kv1"]);
        approved.status = Some(CertificateSigningRequestStatus {
            conditions: Some(vec![CertificateSigningRequestCondition {
                type_: "Approved".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(matches!(judge(&approved, &policy()), Verdict::Deny { .. }));
    }
}
