//! A pass's first stage observed: what the store and the topologies say the node should
//! have, and what its namespaces, its fast path and its peers say it has, as plain data
//! for `plan` (`settings.rs` observes the second stage).

use std::collections::{HashMap, HashSet};

use super::plan::{node_side, Desired, DesiredPod, Interfaces, Observed, PodNetns};
use super::reconcile::{Observation, Scope};
use super::wiring::node_ifname;
use super::{DataPlane, Namespaces, Node, NodeError, PeerBook, Records, Routing};
use crate::config::DaemonConfig;
use crate::interfaces;
use crate::netns::NetnsFd;
use crate::store::{AttachmentKey, AttachmentRecord, EndKey, WireRecord, WireState};

/// What a pass looks at, borrowed from the node and only read: the records and
/// topologies (what should be), and the namespaces, fast path, peers' news and routes
/// (what is). Its methods make the plain data `plan` takes, here for the wire ends and in
/// `settings.rs` for the settings, and what the node reports (`state.rs`, `counters.rs`).
pub(super) struct Observer<'a> {
    pub(super) config: &'a DaemonConfig,
    pub(super) records: &'a Records,
    pub(super) data: &'a DataPlane,
    pub(super) netns: &'a Namespaces,
    pub(super) peers: &'a PeerBook,
    pub(super) routing: &'a Routing,
}

impl Node {
    /// The node's parts, borrowed to observe.
    pub(super) fn observer(&self) -> Observer<'_> {
        Observer {
            config: &self.config,
            records: &self.records,
            data: &self.data,
            netns: &self.netns,
            peers: &self.peers,
            routing: &self.routing,
        }
    }
}

impl super::Records {
    /// The wire records the pass plans with. A pass over some pods plans for theirs only
    /// (the others are taken as they are): it reads their records alone, not every record
    /// of a node that may hold thousands.
    fn records_of(
        &self,
        scope: Scope<'_>,
        looked_at_pods: &HashSet<(String, String)>,
    ) -> Result<Vec<WireRecord>, NodeError> {
        if let Scope::Node = scope {
            return Ok(self.store.wires()?);
        }
        let detached = match scope {
            Scope::Detached(attachment) => Some((&attachment.pod.namespace, &attachment.pod.name)),
            _ => None,
        };
        let mut records = Vec::new();
        for (namespace, pod) in looked_at_pods.iter().map(|(n, p)| (n, p)).chain(detached) {
            records.extend(self.store.wires_of_pod(namespace, pod)?);
        }
        Ok(records)
    }
}

impl super::Namespaces {
    /// The node-side interfaces that the remote records of `pods` name, and those of
    /// their unjoined ends whose pod interface xwire made (a half-made remote end's,
    /// see `Action::Join`).
    fn node_ends_of(
        &self,
        desired: &Desired,
        observed: &Observed,
        pods: &HashSet<(String, String)>,
    ) -> Result<Interfaces, crate::netns::NetnsError> {
        let mut found = Interfaces::new();
        for record in observed.records.values().filter(|r| {
            r.has_node_end() && pods.contains(&(r.topo_namespace.clone(), r.local_pod_name.clone()))
        }) {
            for name in node_side(record) {
                if let Some(state) = interfaces::inspect(&self.node_ns, &name)? {
                    found.insert(name, state);
                }
            }
        }
        for pod in &desired.pods {
            let Some(PodNetns::Open(in_pod)) = observed.pods.get(&pod.attachment.key()) else {
                continue;
            };
            let (namespace, name) = (&pod.attachment.pod.namespace, &pod.attachment.pod.name);
            for link in pod.links.iter() {
                let unjoined = observed
                    .records
                    .get(&EndKey::new(namespace, name, link.uid))
                    .is_none_or(|r| r.state == WireState::Pending);
                let ours = interfaces::pod_alias(namespace, name, link.uid);
                let made_here = in_pod
                    .get(&link.local_intf)
                    .is_some_and(|i| i.alias.as_deref() == Some(ours.as_str()));
                if unjoined && made_here {
                    let node_end = node_ifname(namespace, name, link.uid);
                    if let Some(state) = interfaces::inspect(&self.node_ns, &node_end)? {
                        found.insert(node_end, state);
                    }
                }
            }
        }
        Ok(found)
    }
}

impl super::Records {
    /// The attachments the pass plans with and their links (`desired`), and the
    /// namespaces of the pods it looks at, opened (`namespaces`) and listed
    /// (`observed`). Returns the pods looked at.
    fn observe_pods(
        &self,
        scope: Scope<'_>,
        desired: &mut Desired,
        observed: &mut Observed,
        namespaces: &mut HashMap<AttachmentKey, NetnsFd>,
    ) -> Result<HashSet<(String, String)>, NodeError> {
        let mut looked_at_pods = HashSet::new();
        // By container and interface, the parts of an attachment's key: a lookup per
        // attachment makes no key.
        let scope_keys: HashSet<(&str, &str)> = match scope {
            Scope::Pods(pods) => pods
                .iter()
                .map(|p| (p.container_id.as_str(), p.ifname.as_str()))
                .collect(),
            Scope::Node | Scope::Detached(_) => HashSet::new(),
        };
        let attachments = match scope {
            Scope::Node => self.store.attachments()?,
            Scope::Pods(pods) => self.attachments_and_peers(pods)?,
            // Nothing is planned for the attached pods; the detached pod's records go.
            Scope::Detached(_) => Vec::new(),
        };
        for attachment in attachments {
            let (namespace, name) = (&attachment.pod.namespace, &attachment.pod.name);
            let links = self
                .topology(namespace, name)?
                .map(|t| t.links.clone())
                .unwrap_or_default();
            let looked_at = match scope {
                Scope::Node => true,
                Scope::Pods(_) => scope_keys
                    .contains(&(attachment.container_id.as_str(), attachment.ifname.as_str())),
                Scope::Detached(_) => false,
            };
            if looked_at {
                looked_at_pods.insert((namespace.clone(), name.clone()));
                let seen = match attachment.open_netns() {
                    Ok(ns) => {
                        let seen = match interfaces::observe(&ns) {
                            Ok(interfaces) => PodNetns::Open(interfaces),
                            Err(e) => PodNetns::Unreadable(format!("list its interfaces: {e}")),
                        };
                        namespaces.insert(attachment.key(), ns);
                        seen
                    }
                    Err(e) if e.is_gone() => PodNetns::Gone,
                    Err(e) => PodNetns::Unreadable(e.to_string()),
                };
                observed.pods.insert(attachment.key(), seen);
            }
            desired.pods.push(DesiredPod { attachment, links });
        }
        Ok(looked_at_pods)
    }

    /// The stored attachments of `pods`, and of the pods attached here that their links
    /// lead to, by key: what a pass over some pods plans with. The plan looks at the
    /// pods of a scoped pass alone, and at the others only as the far ends of those
    /// pods' links. Every attachment of the node, copied with its links at every ADD,
    /// made a lab's ADDs cost the square of its pods: `perf` during a 3,000-pod
    /// `lab up` found the node threads' time in copies, allocation and hashing.
    fn attachments_and_peers(
        &self,
        pods: &[AttachmentRecord],
    ) -> Result<Vec<AttachmentRecord>, NodeError> {
        let mut found = std::collections::BTreeMap::new();
        let mut peers_sought = HashSet::new();
        for pod in pods {
            let Some(stored) = self.store.attachment(&pod.key())? else {
                continue;
            };
            let (namespace, name) = (&stored.pod.namespace, &stored.pod.name);
            if let Some(topology) = self.topology(namespace, name)? {
                for link in topology.links.iter() {
                    if !peers_sought.insert((namespace.clone(), link.peer_pod.clone())) {
                        continue;
                    }
                    if let Some(peer) = self.store.attachment_of_pod(namespace, &link.peer_pod)? {
                        found.insert(peer.key(), peer);
                    }
                }
            }
            found.insert(stored.key(), stored);
        }
        Ok(found.into_values().collect())
    }
}

impl Observer<'_> {
    /// Gathers what should be and what is, as plain data: the attachments and their
    /// topologies' links, the wire records, the interfaces of each pod's namespace (and
    /// of the node's), the open fast-path ports and the far ends peers announced.
    pub(super) fn observe(&self, scope: Scope<'_>) -> Result<Observation, NodeError> {
        let mut desired = Desired::default();
        let mut observed = Observed {
            node_name: self.config.node_name.clone(),
            whole_node: matches!(scope, Scope::Node),
            ..Observed::default()
        };
        let mut namespaces = HashMap::new();
        let looked_at_pods =
            self.records
                .observe_pods(scope, &mut desired, &mut observed, &mut namespaces)?;
        let records = self.records.records_of(scope, &looked_at_pods)?;
        observed.records = records.into_iter().map(|w| (w.key(), w)).collect();
        let node_interfaces = match scope {
            Scope::Node => interfaces::observe(&self.netns.node_ns),
            // Only the node ends of the pods looked at: one read each, rather than a dump
            // of a node namespace that may hold thousands.
            Scope::Pods(_) | Scope::Detached(_) => {
                self.netns
                    .node_ends_of(&desired, &observed, &looked_at_pods)
            }
        };
        match node_interfaces {
            Ok(interfaces) => observed.node_interfaces = interfaces,
            Err(e) => observed.node_unreadable = Some(format!("list its interfaces: {e}")),
        }
        if let Scope::Detached(attachment) = scope {
            observed.detached = Some(attachment.pod.clone());
        }
        self.observe_ports_and_far_ends(&mut desired, &mut observed);
        desired.withdrawn = self.peers.withdrawn.clone();
        desired.switched = self.data.switched_wires(&desired);
        desired.bridged = self.data.bridged_wires(&desired);
        Ok(Observation {
            desired,
            observed,
            namespaces,
            failures: Vec::new(),
        })
    }

    /// The open fast-path ports and the far ends peers announced, of the records the
    /// plan has only: a pass over some pods looks up the ports and far ends of their
    /// wires, rather than copying the node's thousands.
    fn observe_ports_and_far_ends(&self, desired: &mut Desired, observed: &mut Observed) {
        if observed.whole_node {
            observed.ports = self.data.ports.keys().cloned().collect();
            desired.remote_ends = self
                .peers
                .remote_ends
                .iter()
                .map(|(key, end)| (key.clone(), end.pod.clone()))
                .collect();
            return;
        }
        for (key, record) in &observed.records {
            if self.data.ports.contains_key(key) {
                observed.ports.insert(key.clone());
            }
            let wire = record.wire();
            if let Some(end) = self.peers.remote_ends.get(&wire) {
                desired.remote_ends.insert(wire, end.pod.clone());
            }
        }
    }
}
