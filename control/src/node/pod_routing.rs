//! The routes and rules in pods (router mode's tables and rules, the Topology's static
//! routes): what each pod's Topology asks for, which the settings stage of every pass
//! brings them to (`settings.rs`), and taking them away at DEL. `crate::routing`
//! decides and does the netlink.

use super::{ErrorKind, NodeError};
use crate::routing::{self, AddressedEnd, PodRoutingSpec};
use crate::store::AttachmentRecord;

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

impl super::Routing {
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

impl super::observe::Observer<'_> {
    /// What the Topology of `namespace/pod` asks for; nothing for a pod without one.
    pub(super) fn routing_spec(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<PodRoutingSpec, NodeError> {
        let Some(loaded) = self.records.topology(namespace, pod)? else {
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
}
