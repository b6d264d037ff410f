//! `xwirectl topology apply/get/delete`: the embedded topology source, and links of
//! running pods following their topology (a link added or removed appears or disappears
//! without restarting the pod).

use std::collections::{BTreeMap, HashSet};

use xwire_proto::local::{Response, TopologyApply, TopologyQuery};

use super::calls::Call;
use super::reconcile::Scope;
use super::{ErrorKind, Node, NodeError};
use crate::store::EndKey;
use crate::topology::{self, Topology};

impl Call<'_> {
    pub(super) fn apply_topologies(&mut self, apply: TopologyApply) -> Result<Response, NodeError> {
        let stored = self.node.records.store.topologies()?;
        let incoming = topology::check_apply(apply.objects, &stored)
            .map_err(|msg| NodeError::new(ErrorKind::TopologyInvalid, msg, ""))?;
        // By key, made once each: every stored object against every incoming one, two
        // keys made per comparison, cost a lab's pieces n² work (5 nodes, 10,000 pods in
        // 4 pieces: 37 million comparisons a node, while the lab waited).
        let incoming_keys: HashSet<String> = incoming.iter().map(Topology::key).collect();
        let old: BTreeMap<String, Topology> = stored
            .into_iter()
            .map(|t| (t.key(), t))
            .filter(|(key, _)| incoming_keys.contains(key))
            .collect();
        self.node.records.topologies_changed();
        self.node.records.store.put_topologies(&incoming)?;

        // Ends whose link changed are made anew; the pass does the rest (links that
        // came are joined, links that went are taken apart).
        let mut rebuild = HashSet::new();
        for t in &incoming {
            if let Some(before) = old.get(&t.key()) {
                rebuild.extend(changed_ends(before, t));
            }
        }
        let failures = self.node.follow_topologies(&incoming, &rebuild)?;
        if !failures.is_empty() {
            return Err(NodeError::new(
                ErrorKind::Interface,
                "the topology is stored, but some links of running pods could not follow it",
                failures.join("\n"),
            ));
        }
        Ok(Response::Topologies {
            objects: incoming.iter().map(to_json).collect(),
        })
    }

    pub(super) fn delete_topologies(
        &mut self,
        query: &TopologyQuery,
    ) -> Result<Response, NodeError> {
        if query.namespace.is_none() && query.name.is_none() {
            return Err(NodeError::new(
                ErrorKind::TopologyInvalid,
                "name a namespace or an object to delete",
                "",
            ));
        }
        let chosen: Vec<Topology> = self
            .node
            .records
            .store
            .topologies()?
            .into_iter()
            .filter(|t| selects(query, t))
            .collect();
        self.node.records.topologies_changed();
        for t in &chosen {
            self.node
                .records
                .store
                .remove_topology(&t.metadata.namespace, &t.metadata.name)?;
        }
        let failures = self.node.follow_topologies(&chosen, &HashSet::new())?;
        if !failures.is_empty() {
            return Err(NodeError::new(
 ErrorKind::Interface,
                "the topologies are deleted, but some wires of running pods could not be taken apart",
                failures.join("\n"),
            ));
        }
        Ok(Response::Topologies {
            objects: chosen.iter().map(to_json).collect(),
        })
    }
}

impl Node {
    /// Follows Topology objects someone else changed (a watched source: the API server).
    /// True when there were any.
    pub(crate) fn pump_store_events(&mut self) -> bool {
        let changed = self.records.store.take_changes();
        if changed.is_empty() {
            return false;
        }
        let mut topologies = Vec::new();
        let mut rebuild = HashSet::new();
        for key in changed
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
        {
            let Some((namespace, name)) = key.split_once('/') else {
                continue;
            };
            let before = self.records.forget_topology(namespace, name);
            let now = match self.records.topology(namespace, name) {
                Ok(now) => now,
                Err(e) => {
                    tracing::warn!(topology = %key, "reading a changed topology: {}", e.msg);
                    continue;
                }
            };
            if let (Some(before), Some(now)) = (&before, &now) {
                rebuild.extend(changed_ends(&before.topology, &now.topology));
            }
            match (now, before) {
                (Some(t), _) | (None, Some(t)) => topologies.push(t.topology.clone()),
                (None, None) => {}
            }
        }
        match self.follow_topologies(&topologies, &rebuild) {
            Ok(failures) => {
                for failure in failures {
                    tracing::warn!("following a changed topology: {failure}");
                }
            }
            Err(e) => tracing::warn!("following changed topologies: {}: {}", e.msg, e.details),
        }
        true
    }

    /// A pass over the attached pods of `topologies`, so that their wires follow what
    /// is stored now (the pass announces what it joined). Returns the failures.
    pub(super) fn follow_topologies(
        &mut self,
        topologies: &[Topology],
        rebuild: &HashSet<EndKey>,
    ) -> Result<Vec<String>, NodeError> {
        let changed: HashSet<(String, String)> = topologies
            .iter()
            .map(|t| (t.metadata.namespace.clone(), t.metadata.name.clone()))
            .collect();
        // The peer desk learns first: a peer answers what this pass announces at once,
        // and the desk must judge its answer by what is stored now.
        self.peer_talk().tell_desk_pods(&changed);
        let mut pods = Vec::new();
        for t in topologies {
            if let Some(attachment) = self
                .records
                .attachment_of_pod(&t.metadata.namespace, &t.metadata.name)?
            {
                pods.push(attachment);
            }
        }
        let failures = if pods.is_empty() {
            Vec::new()
        } else {
            self.pass(Scope::Pods(&pods), rebuild)?.failures
        };
        // A far end's placement may be new: the ends waiting for it are told to its node.
        self.peer_talk().announce_towards(&changed);
        Ok(failures)
    }
}

/// The ends (wire record keys) of links that `now` has with other settings than `before`:
/// they are made anew. Links that came or went are the pass's to join or take apart.
fn changed_ends<'a>(before: &'a Topology, now: &'a Topology) -> impl Iterator<Item = EndKey> + 'a {
    now.spec
        .links
        .iter()
        .filter(|link| {
            before
                .link(link.uid)
                .is_some_and(|b| !same_but_impairment(b, link))
        })
        .map(|link| EndKey::new(&now.metadata.namespace, &now.metadata.name, link.uid))
}

/// An impairment changes without remaking the end: the pass after tells the worker
/// (and moves a same-node wire onto or off the switch path).
fn same_but_impairment(a: &topology::Link, b: &topology::Link) -> bool {
    let bare = |l: &topology::Link| topology::Link {
        impairment: None,
        ..l.clone()
    };
    bare(a) == bare(b)
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

impl super::Records {
    pub(super) fn get_topologies(&self, query: &TopologyQuery) -> Result<Response, NodeError> {
        let objects = self
            .store
            .topologies()?
            .iter()
            .filter(|t| selects(query, t))
            .map(to_json)
            .collect();
        Ok(Response::Topologies { objects })
    }
}
