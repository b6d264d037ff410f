//! `xwirectl topology apply/get/delete`: the embedded topology source, and links of
//! running pods following their topology (a link added or removed appears or disappears
//! without restarting the pod).

use std::collections::BTreeMap;
use std::path::Path;

use xwire_proto::local::{codes, CniError, Response, TopologyApply, TopologyQuery};

use super::{cni_error, store_error, Journal, Node};
use crate::netns::NetnsFd;
use crate::store::{wire_key, WireState};
use crate::topology::{self, Link, Topology};

impl Node {
    pub(super) fn apply_topologies(&mut self, apply: TopologyApply) -> Result<Response, CniError> {
        let stored = self.store.topologies().map_err(store_error)?;
        let incoming = topology::check_apply(apply.objects, &stored)
            .map_err(|msg| cni_error(codes::TOPOLOGY_INVALID, msg, ""))?;
        let old: BTreeMap<String, Topology> = stored
            .into_iter()
            .filter(|t| incoming.iter().any(|i| i.key() == t.key()))
            .map(|t| (t.key(), t))
            .collect();
        self.topologies_changed();
        self.store.put_topologies(&incoming).map_err(store_error)?;

        let mut failures = Vec::new();
        for t in &incoming {
            let before = old
                .get(&t.key())
                .map(|o| o.spec.links.as_slice())
                .unwrap_or(&[]);
            if let Err(e) = self.relink(
                &t.metadata.namespace,
                &t.metadata.name,
                before,
                &t.spec.links,
            ) {
                failures.push(format!("{}: {}: {}", t.key(), e.msg, e.details));
            }
        }
        if !failures.is_empty() {
            return Err(cni_error(
                codes::INTERFACE_FAILED,
                "the topology is stored, but some links of running pods could not follow it",
                failures.join("\n"),
            ));
        }
        Ok(Response::Topologies {
            objects: incoming.iter().map(to_json).collect(),
        })
    }

    pub(super) fn get_topologies(&self, query: &TopologyQuery) -> Result<Response, CniError> {
        let objects = self
            .store
            .topologies()
            .map_err(store_error)?
            .iter()
            .filter(|t| selects(query, t))
            .map(to_json)
            .collect();
        Ok(Response::Topologies { objects })
    }

    pub(super) fn delete_topologies(
        &mut self,
        query: &TopologyQuery,
    ) -> Result<Response, CniError> {
        if query.namespace.is_none() && query.name.is_none() {
            return Err(cni_error(
                codes::TOPOLOGY_INVALID,
                "name a namespace or an object to delete",
                "",
            ));
        }
        let chosen: Vec<Topology> = self
            .store
            .topologies()
            .map_err(store_error)?
            .into_iter()
            .filter(|t| selects(query, t))
            .collect();
        for t in &chosen {
            self.relink(&t.metadata.namespace, &t.metadata.name, &t.spec.links, &[])?;
            self.topologies_changed();
            self.store
                .remove_topology(&t.metadata.namespace, &t.metadata.name)
                .map_err(store_error)?;
        }
        Ok(Response::Topologies {
            objects: chosen.iter().map(to_json).collect(),
        })
    }

    /// Brings an attached pod's wires from `before` to `after`: links that went or
    /// changed are taken apart, links that came or changed are joined. A pod that is not
    /// attached here has nothing to change.
    fn relink(
        &mut self,
        namespace: &str,
        pod: &str,
        before: &[Link],
        after: &[Link],
    ) -> Result<(), CniError> {
        let Some(attachment) = self.attachment_of_pod(namespace, pod)? else {
            return Ok(());
        };
        let wires = self.wires_of(&attachment)?;
        for link in before {
            if after.contains(link) {
                continue;
            }
            let key = wire_key(namespace, pod, link.uid);
            if let Some(wire) = wires.iter().find(|w| w.key() == key) {
                self.disconnect_end(wire, true);
                self.store.remove_wire(&key).map_err(store_error)?;
            }
        }
        let pod_ns = NetnsFd::open(Path::new(&attachment.netns)).map_err(|e| {
            cni_error(
                codes::INVALID_ENVIRONMENT,
                "the pod's namespace is gone",
                e.to_string(),
            )
        })?;
        for link in after {
            if before.contains(link) {
                continue;
            }
            // The peer's half of this apply may have joined it already.
            let key = wire_key(namespace, pod, link.uid);
            let joined = self
                .store
                .wire(&key)
                .map_err(store_error)?
                .is_some_and(|w| w.state != WireState::Pending);
            if joined {
                continue;
            }
            let mut journal = Journal::default();
            if let Err(e) = self.connect_end(&attachment, &pod_ns, link, &mut journal) {
                self.rollback(journal);
                return Err(e);
            }
        }
        self.announce_pod(namespace, pod);
        Ok(())
    }
}

fn selects(query: &TopologyQuery, t: &Topology) -> bool {
    query
        .namespace
        .as_ref()
        .is_none_or(|n| *n == t.metadata.namespace)
        && query.name.as_ref().is_none_or(|n| *n == t.metadata.name)
}

fn to_json(t: &Topology) -> serde_json::Value {
    serde_json::to_value(t).expect("a Topology serializes")
}
