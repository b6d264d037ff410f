//! `xwire-signer`: the one holder of the cluster CA's key in a cluster. It answers the
//! CertificateSigningRequests of xwire's signer name (`store::SIGNER_NAME`): a node
//! daemon's request for its own node is approved and signed, anything else is denied, with
//! the reason in the object. Each request is judged from the object alone (`judge`), so
//! answering one again, after a restart or a conflict, changes nothing.

pub mod judge;

use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::ByteString;
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use kube::Client;

pub use judge::{judge, Policy, Verdict};

use crate::ca_secret::object_ref;

/// How often pending requests are looked at again, events aside.
const RESCAN: Duration = Duration::from_secs(10);

/// Where the signer finds its CA and whom it signs for.
#[derive(Clone)]
pub struct Signer {
    pub client: Client,
    pub policy: Policy,
    /// The Secret with `ca.crt` and `ca.key`: `namespace/name`.
    pub ca_secret: String,
}

impl Signer {
    /// Answers requests as they come, and every `RESCAN` those still pending (one that
    /// came while the CA Secret was missing, or whose answer failed), until the watch ends
    /// (it does not, but for an error it cannot recover from).
    pub async fn run(&self) -> anyhow::Result<()> {
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let selector = format!("spec.signerName={}", self.policy.signer_name);
        let config = watcher::Config::default().fields(&selector);
        let mut events = std::pin::pin!(watcher(api.clone(), config));
        let mut rescan = tokio::time::interval(RESCAN);
        tracing::info!(signer = %self.policy.signer_name, requester = %self.policy.requester,
            ca = %self.ca_secret, "answering node certificate requests");
        loop {
            let requests = tokio::select! {
                event = events.next() => match event {
                    None => return Ok(()),
                    Some(Ok(watcher::Event::Apply(csr) | watcher::Event::InitApply(csr))) => {
                        vec![csr]
                    }
                    Some(Ok(_)) => continue,
                    Some(Err(e)) => {
                        tracing::warn!("watching CertificateSigningRequests: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                },
                _ = rescan.tick() => {
                    let params = kube::api::ListParams::default().fields(&selector);
                    match api.list(&params).await {
                        Ok(list) => list.items,
                        Err(e) => {
                            tracing::warn!("listing CertificateSigningRequests: {e}");
                            continue;
                        }
                    }
                }
            };
            for csr in requests {
                let name = csr.metadata.name.clone().unwrap_or_default();
                if let Err(e) = self.answer(csr).await {
                    // Left for the next event or rescan: answering again is safe.
                    tracing::warn!(request = %name, "answering: {e:#}");
                }
            }
        }
    }

    /// Approves and signs `csr`, or denies it, as `judge` says.
    pub async fn answer(&self, csr: CertificateSigningRequest) -> anyhow::Result<()> {
        let name = csr.metadata.name.clone().unwrap_or_default();
        match judge(&csr, &self.policy) {
            Verdict::Ignore => Ok(()),
            Verdict::Deny { reason } => self.refuse(csr, &reason).await,
            Verdict::Sign { node, validity } => {
                // Without its CA the signer leaves the request pending: the request is
                // good, the signer is not ready.
                let ca = self.ca().await.context("the CA")?;
                let pem = String::from_utf8_lossy(&csr.spec.request.0).into_owned();
                let cert = match ca.sign_request(&pem, &node, validity) {
                    Ok(cert) => cert,
                    Err(e) => return self.refuse(csr, &e.to_string()).await,
                };
                let mut signed = self.approve(csr, &node).await?;
                signed
                    .status
                    .get_or_insert_with(Default::default)
                    .certificate = Some(ByteString(cert.into_bytes()));
                let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
                api.replace_status(&name, &PostParams::default(), serde_json::to_vec(&signed)?)
                    .await?;
                tracing::info!(request = %name, %node, ?validity, "signed a node certificate");
                Ok(())
            }
        }
    }

    /// The CA, read anew for each certificate: a rotated Secret takes effect at once.
    async fn ca(&self) -> anyhow::Result<xwire_pki::ClusterCa> {
        let (namespace, name) = object_ref(&self.ca_secret, self.client.default_namespace());
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = api.get(name).await?;
        let read =
            crate::ca_secret::from_secret(&secret, &self.ca_secret).map_err(anyhow::Error::msg)?;
        Ok(read.ca)
    }

    async fn approve(
        &self,
        mut csr: CertificateSigningRequest,
        node: &str,
    ) -> anyhow::Result<CertificateSigningRequest> {
        if has_condition(&csr, "Approved") {
            return Ok(csr);
        }
        let message = format!("a node daemon's request for its own node, {node}");
        push_condition(&mut csr, "Approved", "XwireNodeDaemon", &message);
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let name = csr.metadata.name.clone().unwrap_or_default();
        Ok(api
            .replace_subresource(
                "approval",
                &name,
                &PostParams::default(),
                serde_json::to_vec(&csr)?,
            )
            .await?)
    }

    /// Denies `csr`; one that someone else approved is marked Failed instead (the API
    /// does not take both Approved and Denied).
    async fn refuse(&self, mut csr: CertificateSigningRequest, reason: &str) -> anyhow::Result<()> {
        let name = csr.metadata.name.clone().unwrap_or_default();
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        let body = |csr: &CertificateSigningRequest| serde_json::to_vec(csr);
        if has_condition(&csr, "Approved") {
            push_condition(&mut csr, "Failed", "NotANodeRequest", reason);
            api.replace_status(&name, &PostParams::default(), body(&csr)?)
                .await?;
        } else {
            push_condition(&mut csr, "Denied", "NotANodeRequest", reason);
            api.replace_subresource("approval", &name, &PostParams::default(), body(&csr)?)
                .await?;
        }
        tracing::warn!(request = %name, user = ?csr.spec.username, %reason, "refused a certificate request");
        Ok(())
    }
}

fn has_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    let conditions = csr.status.as_ref().and_then(|s| s.conditions.as_ref());
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn push_condition(csr: &mut CertificateSigningRequest, type_: &str, reason: &str, message: &str) {
    let now = Time(k8s_openapi::chrono::Utc::now());
    let status = csr.status.get_or_insert_with(Default::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: type_.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
}
