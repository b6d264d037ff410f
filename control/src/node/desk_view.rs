//! What the node tells its peer desk (`peer_desk.rs`): a view of every topology's links
//! and every pod's placement at the start, and of the pods whose topology or placement
//! changed since, so that the desk judges claims as the node would. The node's own
//! judgement of the claims the desk lets through reads the store (`ClaimFacts for
//! Node`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use xwire_proto::control::WireKey;

use super::claims::{ClaimFacts, Holder, PodFacts, ViewChange};
use super::peer_desk::PeerDesk;
use super::Node;
use crate::store::PodPlacement;
use crate::topology::LinkSpec;

/// The node's own judgement reads the store (and, in a cluster, may ask the API server
/// where a pod runs that its watch has not seen yet).
impl ClaimFacts for super::peers::PeerTalk<'_> {
    fn links(&self, namespace: &str, pod: &str) -> Option<Arc<Vec<LinkSpec>>> {
        // A pod with no topology is not remembered as such (made-up names would fill the
        // cache), and a store that cannot be read says no.
        let loaded = self
            .records
            .cached_topology(namespace, pod, super::Remember::Presence)
            .ok()??;
        Some(Arc::clone(&loaded.links))
    }

    fn holder(&self, namespace: &str, pod: &str) -> Holder {
        holder_from(self.records.store.pod_placement(namespace, pod), || {
            self.records.placement(namespace, pod)
        })
    }

    fn peer_ip(&self, name: &str) -> Option<IpAddr> {
        self.data.peer_ip(name)
    }
}

/// Who runs a pod: the cluster's word where the source knows pods, else the address its
/// Topology's status names (`status_address`).
fn holder_from(placement: PodPlacement, status_address: impl FnOnce() -> Option<IpAddr>) -> Holder {
    match placement {
        PodPlacement::On(node) => Holder::Node(node),
        PodPlacement::Unplaced => Holder::NotPlaced,
        PodPlacement::NotTracked => status_address().map_or(Holder::NotPlaced, Holder::Address),
    }
}

impl Node {
    /// Starts the peer desk (where the node has peers), with a view of every topology
    /// and taking the far ends this node's records join to a peer as that peer's.
    pub(super) fn open_desk(&mut self) {
        let Some(fastpath) = &self.data.fastpath else {
            return;
        };
        let controls = match fastpath.peer_controls() {
            Ok(controls) => controls,
            Err(e) => {
                tracing::error!("the peer desk: {e}");
                return;
            }
        };
        let held: HashMap<WireKey, String> = self
            .records
            .store
            .wires()
            .unwrap_or_default()
            .into_iter()
            .filter(|w| w.state.crosses_nodes())
            .filter_map(|w| {
                let key = w.wire();
                Some((key, w.peer_node?))
            })
            .collect();
        let view = self.peer_talk().whole_view();
        match PeerDesk::start(
            controls,
            view,
            held,
            Arc::clone(&self.peers.refused_claims),
            Arc::clone(&self.metrics),
        ) {
            Ok(desk) => self.peers.desk = Some(desk),
            Err(e) => tracing::error!("starting the peer desk: {e}"),
        }
    }
}

impl super::Records {
    fn known_holder(&self, namespace: &str, pod: &str) -> Holder {
        holder_from(self.store.known_placement(namespace, pod), || {
            self.placement(namespace, pod)
        })
    }
}

impl super::DataPlane {
    fn peer_ips(&self) -> HashMap<String, IpAddr> {
        let Some(fastpath) = &self.fastpath else {
            return HashMap::new();
        };
        fastpath
            .addresses
            .keys()
            .filter_map(|name| Some((name.clone(), self.peer_ip(name)?)))
            .collect()
    }
}

impl super::Records {
    /// What the desk's view holds of `pods` and of the far ends their links name. A
    /// placement is what the source already knows: building a view asks no server.
    fn pod_facts(&self, pods: BTreeSet<(String, String)>) -> Vec<PodFacts> {
        let mut far_ends = BTreeSet::new();
        let mut facts = Vec::with_capacity(pods.len());
        for (namespace, pod) in pods {
            let links = self
                .topology(&namespace, &pod)
                .ok()
                .flatten()
                .map(|t| Arc::clone(&t.links));
            for link in links.iter().flat_map(|l| l.iter()) {
                far_ends.insert((namespace.clone(), link.peer_pod.clone()));
            }
            facts.push(PodFacts {
                holder: self.known_holder(&namespace, &pod),
                namespace,
                pod,
                links,
            });
        }
        let named: HashSet<(String, String)> = facts
            .iter()
            .map(|f| (f.namespace.clone(), f.pod.clone()))
            .collect();
        for (namespace, pod) in far_ends {
            if named.contains(&(namespace.clone(), pod.clone())) {
                continue;
            }
            facts.push(PodFacts {
                links: self
                    .topology(&namespace, &pod)
                    .ok()
                    .flatten()
                    .map(|t| Arc::clone(&t.links)),
                holder: self.known_holder(&namespace, &pod),
                namespace,
                pod,
            });
        }
        facts
    }
}

impl super::peers::PeerTalk<'_> {
    /// The desk's view of every pod of every topology, and of the peers.
    fn whole_view(&self) -> ViewChange {
        let pods = match self.records.store.topologies() {
            Ok(all) => all
                .into_iter()
                .map(|t| (t.metadata.namespace, t.metadata.name))
                .collect(),
            Err(e) => {
                tracing::error!("reading the topologies for the peer desk: {e}");
                BTreeSet::new()
            }
        };
        ViewChange::All {
            pods: self.records.pod_facts(pods),
            peer_ips: self.data.peer_ips(),
        }
    }

    /// Tells the desk these pods' topologies or placements may have changed.
    pub(super) fn tell_desk_pods(&self, pods: &HashSet<(String, String)>) {
        if let Some(desk) = &self.peers.desk {
            desk.tell(ViewChange::Pods(
                self.records.pod_facts(pods.iter().cloned().collect()),
            ));
        }
    }

    /// Tells the desk the peers' addresses (after nodes joined or left).
    pub(super) fn tell_desk_peers(&self) {
        if let Some(desk) = &self.peers.desk {
            desk.tell(ViewChange::PeerIps(self.data.peer_ips()));
        }
    }
}
