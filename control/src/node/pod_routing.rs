//! The routes and rules in pods (router mode's tables and rules, the Topology's static
//! routes), brought to what each pod's Topology asks for after the passes and ADDs that
//! may have made its interfaces, and taken away at DEL. `crate::routing` decides and does
//! the netlink; this file picks the pods and reads their Topology.

use std::collections::{BTreeMap, HashMap};

use super::plan::Desired;
use super::reconcile::Reconciled;
use super::{ErrorKind, Node, NodeError};
use crate::netns::NetnsFd;
use crate::routing::{self, AddressedEnd, PodRoutingSpec};
use crate::store::{AttachmentKey, AttachmentRecord};

impl Node {
    /// What the Topology of `namespace/pod` asks for; nothing for a pod without one.
    fn routing_spec(&self, namespace: &str, pod: &str) -> Result<PodRoutingSpec, NodeError> {
        let Some(loaded) = self.topology(namespace, pod)? else {
            return Ok(PodRoutingSpec::default());
        };
        let spec = &loaded.topology.spec;
        let router_mode = spec
            .policy_routing
            .unwrap_or(self.config.routing.policy_routing);
        Ok(PodRoutingSpec {
            ends: loaded
                .links
                .iter()
                .filter_map(|link| {
                    Some(AddressedEnd {
                        ifname: link.local_intf.clone(),
                        address: link.local_ip?,
                        peer: link.peer_ip.map(|(ip, _)| ip),
                        present: false,
                    })
                })
                .collect(),
            // A stored Topology passed `check`: its routes parse.
            statics: spec.routes.iter().filter_map(|r| r.parse().ok()).collect(),
            policy: router_mode.then(|| self.config.routing.settings()),
        })
    }

    /// Brings the routing of the pods a pass looked at (in `namespaces`), and of the
    /// pods on this node at the other end of their wires (a same-node wire is made from
    /// either end), to what their Topologies ask for.
    ///
    /// A pod that asks for nothing and was given nothing since the start is skipped,
    /// so that the timer's pass and an ADD do not read the routes of pods without any,
    /// except that with `clear_stale` the pods looked at are read all the same: a pass
    /// over a few pods (a topology change) takes away what an older Topology, or one
    /// changed while the daemon was down, had asked for.
    pub(super) fn sync_pod_routing(
        &mut self,
        desired: &Desired,
        namespaces: &HashMap<AttachmentKey, NetnsFd>,
        clear_stale: bool,
        report: &mut Reconciled,
    ) {
        let by_pod: HashMap<(&str, &str), &AttachmentRecord> = desired
            .pods
            .iter()
            .map(|p| {
                let pod = &p.attachment.pod;
                ((pod.namespace.as_str(), pod.name.as_str()), &p.attachment)
            })
            .collect();
        let mut pods: BTreeMap<AttachmentKey, &AttachmentRecord> = BTreeMap::new();
        for pod in desired
            .pods
            .iter()
            .filter(|p| namespaces.contains_key(&p.attachment.key()))
        {
            pods.insert(pod.attachment.key(), &pod.attachment);
            let namespace = pod.attachment.pod.namespace.as_str();
            for link in pod.links.iter() {
                if let Some(peer) = by_pod.get(&(namespace, link.peer_pod.as_str())) {
                    pods.insert(peer.key(), peer);
                }
            }
        }
        for (key, attachment) in pods {
            let pod = &attachment.pod;
            let label = format!("{}/{}", pod.namespace, pod.name);
            let spec = match self.routing_spec(&pod.namespace, &pod.name) {
                Ok(spec) => spec,
                Err(e) => {
                    report
                        .failures
                        .push(format!("{label}: routes: {}", e.details));
                    continue;
                }
            };
            let looked_at = namespaces.contains_key(&key);
            let given = self.routed_pods.contains(&key);
            if spec.is_empty() && !given && !(clear_stale && looked_at) {
                continue;
            }
            let opened;
            let ns = match namespaces.get(&key) {
                Some(ns) => ns,
                None => match attachment.open_netns() {
                    Ok(ns) => {
                        opened = ns;
                        &opened
                    }
                    Err(_) => continue, // the pass that looks at that pod handles it
                },
            };
            match routing::sync(ns, &spec) {
                Ok(synced) => {
                    for change in synced.changed {
                        tracing::info!(pod = %label, "routing: {change}");
                        report.changes.push(format!("{label}: {change}"));
                    }
                    for refused in synced.refused {
                        tracing::warn!(pod = %label, "routing: {refused}");
                        report.failures.push(format!("{label}: {refused}"));
                    }
                }
                Err(e) => report.failures.push(format!("{label}: routes: {e}")),
            }
            if spec.is_empty() {
                self.routed_pods.remove(&key);
            } else {
                self.routed_pods.insert(key);
            }
        }
    }

    /// Takes away every route and rule xwire gave the pod of `attachment` (DEL), where
    /// its namespace is still there (the runtime's other plugins may still use it).
    pub(super) fn remove_pod_routing(
        &mut self,
        attachment: &AttachmentRecord,
    ) -> Result<(), NodeError> {
        self.routed_pods.remove(&attachment.key());
        let ns = match attachment.open_netns() {
            Ok(ns) => ns,
            Err(e) if e.is_gone() => return Ok(()),
            Err(e) => return Err(routing_error(attachment, e)),
        };
        let synced = routing::remove_all(&ns).map_err(|e| routing_error(attachment, e))?;
        for change in &synced.changed {
            tracing::info!(pod = %format!("{}/{}", attachment.pod.namespace, attachment.pod.name), "routing: {change}");
        }
        match synced.refused.first() {
            None => Ok(()),
            Some(refused) => Err(NodeError::new(
                ErrorKind::Interface,
                format!(
                    "pod {}/{}: its routes and rules could not all be taken away",
                    attachment.pod.namespace, attachment.pod.name
                ),
                refused.clone(),
            )),
        }
    }
}

fn routing_error(attachment: &AttachmentRecord, e: crate::netns::NetnsError) -> NodeError {
    NodeError::new(
        ErrorKind::Interface,
        format!(
            "pod {}/{}: reading its routes and rules",
            attachment.pod.namespace, attachment.pod.name
        ),
        e.to_string(),
    )
}
