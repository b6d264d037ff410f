//! Peers and identity from the cluster. Peers: every other Node object, at its
//! InternalIP (else ExternalIP) and this node's peer port, watched, so that a node that
//! joins or leaves is picked up while the daemon runs. Identity: the cluster CA lives in
//! a Secret (`ca.crt`, `ca.key`; see deploy/README.md for making and rotating it), and
//! each daemon issues its own node certificate from it at start, in memory: no human
//! copies files, and no node key is ever written to disk.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node as KubeNode, Secret};
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use xwire_fastpath::peer::NodeIdentity;

use super::pools::{pools_from_nodes, NodeSeat};
use super::{backend, KubeStore};
use crate::ca_secret::object_ref;
use crate::membership::{LabelledPools, Membership, PeerChange};
use crate::store::{ClusterApi, StoreError};

/// The address peers dial a node at: its InternalIP, else its ExternalIP.
pub fn node_address(node: &KubeNode, port: u16) -> Option<SocketAddr> {
    let addresses = node.status.as_ref()?.addresses.as_ref()?;
    ["InternalIP", "ExternalIP"].iter().find_map(|kind| {
        addresses
            .iter()
            .filter(|a| a.type_ == *kind)
            .find_map(|a| a.address.parse::<IpAddr>().ok())
            .map(|ip| SocketAddr::new(ip, port))
    })
}

/// The node's membership from the cluster's Node objects: what the watch
/// (`watch_nodes`) queued since the node last asked.
#[derive(Default)]
pub(crate) struct NodeWatch {
    /// Nodes that joined or left.
    peer_changes: Arc<Mutex<Vec<PeerChange>>>,
    /// The pools the Node labels make, when they changed.
    pools_change: Arc<Mutex<Option<Option<LabelledPools>>>>,
}

impl Membership for NodeWatch {
    fn take_peer_changes(&self) -> Vec<PeerChange> {
        std::mem::take(&mut *self.peer_changes.lock().expect("not poisoned"))
    }

    fn take_pools_change(&self) -> Option<Option<LabelledPools>> {
        self.pools_change.lock().expect("not poisoned").take()
    }
}

/// Watches the Node objects and queues what changed in `watch`.
pub(super) fn watch_nodes(
    store: &KubeStore,
    port: u16,
    watch: &NodeWatch,
    listed: Arc<std::sync::atomic::AtomicBool>,
) {
    let queue = watch.peer_changes.clone();
    let pools_change = watch.pools_change.clone();
    let api: Api<KubeNode> = Api::all(store.client.clone());
    let me = store.node.clone();
    let stream = watcher(api, watcher::Config::default()).default_backoff();
    store.runtime.spawn(async move {
        futures::pin_mut!(stream);
        // The nodes known now, and those seen by a relist under way (a relist after a
        // broken watch is how a deletion missed in between shows).
        let mut known = BTreeSet::new();
        let mut relisted = BTreeSet::new();
        // Every node's pool labels (this node's too), and the pools they made last.
        let mut seats: BTreeMap<String, NodeSeat> = BTreeMap::new();
        let mut published: Option<Option<LabelledPools>> = None;
        while let Some(event) = stream.next().await {
            match &event {
                Ok(watcher::Event::Apply(node)) | Ok(watcher::Event::InitApply(node)) => {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    seats.insert(name, NodeSeat::of(node));
                }
                Ok(watcher::Event::Delete(node)) => {
                    seats.remove(&node.metadata.name.clone().unwrap_or_default());
                }
                _ => {}
            }
            let settled = !matches!(
                event,
                Ok(watcher::Event::Init) | Ok(watcher::Event::InitApply(_))
            );
            if settled {
                let pools = pools_from_nodes(&me, &seats, xwire_model::pools::DEFAULT_GATEWAY_PORT);
                if published.as_ref() != Some(&pools) {
                    published = Some(pools.clone());
                    *pools_change.lock().expect("not poisoned") = Some(pools);
                }
            }
            let mut changes = Vec::new();
            let joined = |node: &KubeNode, changes: &mut Vec<PeerChange>| {
                let name = node.metadata.name.clone().unwrap_or_default();
                if name == me {
                    return None;
                }
                let address = node_address(node, port)?;
                changes.push(PeerChange::Joined {
                    name: name.clone(),
                    address,
                });
                Some(name)
            };
            match event {
                Ok(watcher::Event::Apply(node)) => {
                    if let Some(name) = joined(&node, &mut changes) {
                        known.insert(name);
                    }
                }
                Ok(watcher::Event::Delete(node)) => {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    if known.remove(&name) {
                        changes.push(PeerChange::Left { name });
                    }
                }
                Ok(watcher::Event::Init) => relisted.clear(),
                Ok(watcher::Event::InitApply(node)) => {
                    if let Some(name) = joined(&node, &mut changes) {
                        relisted.insert(name);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    for name in known.difference(&relisted) {
                        changes.push(PeerChange::Left { name: name.clone() });
                    }
                    known = std::mem::take(&mut relisted);
                    listed.store(true, std::sync::atomic::Ordering::Release);
                }
                Err(e) => tracing::warn!("watching Node objects: {e}"),
            }
            queue.lock().expect("not poisoned").extend(changes);
        }
    });
}

/// This node's identity, issued from the CA in `secret` (`namespace/name`, or `name` in
/// the daemon's own namespace: the one its ServiceAccount token names, which an overlay
/// may have changed).
pub(super) fn issue_identity(store: &KubeStore, secret: &str) -> Result<NodeIdentity, StoreError> {
    let (namespace, name) = object_ref(secret, store.client.default_namespace());
    let api: Api<Secret> = Api::namespaced(store.client.clone(), namespace);
    store.count(1);
    let found = store
        .runtime
        .block_on(api.get_opt(name))
        .map_err(|e| backend(format!("Secret {secret}: {e}")))?
        .ok_or_else(|| {
            backend(format!(
                "Secret {secret} not found: make the cluster CA with \
                 `xwirectl ca-secret --namespace {namespace} --name {name} | kubectl apply -f -`"
            ))
        })?;
    let read = crate::ca_secret::from_secret(&found, secret).map_err(backend)?;
    let mut identity = read
        .ca
        .issue(&store.node)
        .map_err(|e| backend(format!("issuing this node's certificate: {e}")))?;
    identity.ca_pem = read.trusted_pem;
    Ok(identity)
}

impl ClusterApi for KubeStore {
    fn requests(&self) -> u64 {
        (self.shared.requests).load(std::sync::atomic::Ordering::Relaxed)
    }

    fn unwritten(&self) -> usize {
        self.shared.unwritten.lock().expect("not poisoned").len()
    }

    fn node_identity(&self) -> Result<Option<NodeIdentity>, StoreError> {
        let settings = &self.settings;
        if !settings.topology.ca_secret.is_empty() {
            return issue_identity(self, &settings.topology.ca_secret).map(Some);
        }
        if settings.topology.certificate_signer.is_empty() {
            return Ok(None);
        }
        super::certificate::request_identity(
            self,
            &settings.topology.certificate_signer,
            &settings.topology.ca_bundle,
            std::time::Duration::from_secs(settings.topology.certificate_timeout_secs),
        )
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};

    fn node(addresses: &[(&str, &str)]) -> KubeNode {
        KubeNode {
            status: Some(NodeStatus {
                addresses: Some(
                    addresses
                        .iter()
                        .map(|(t, a)| NodeAddress {
                            type_: (*t).into(),
                            address: (*a).into(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_is_dialed_at_its_internal_address_else_its_external_one() {
        let both = node(&[
            ("Hostname", "n1"),
            ("ExternalIP", "198.51.100.1"),
            ("InternalIP", "10.0.0.5"),
        ]);
        assert_eq!(
            node_address(&both, 7470),
            Some("10.0.0.5:7470".parse().unwrap())
        );
        let external = node(&[("ExternalIP", "198.51.100.1")]);
        assert_eq!(
            node_address(&external, 1),
            Some("198.51.100.1:1".parse().unwrap())
        );
        assert_eq!(node_address(&node(&[("Hostname", "n1")]), 1), None);
        assert_eq!(node_address(&KubeNode::default(), 1), None);
    }
}
