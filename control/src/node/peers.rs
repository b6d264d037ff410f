//! What nodes tell each other about wires. A node announces each of its pods' wire ends
//! that has no local peer (AddWire to the node that its far end's placement names, and
//! to nobody while there is none), answers AddWire for a pending end of its own by joining it and
//! announcing back, takes DelWire as the far end gone, and sends Sync, the list of all its
//! such ends, whenever a peer comes up, so that what was missed while down is made good.
//!
//! A peer may claim a wire's far end only for a wire of this node's topologies, and only
//! if it runs the far end's pod as the pod's Topology says (its status's `src_ip`,
//! meshnet's field for the node's address, which the owning node writes in a cluster and
//! the lab file gives in a standalone lab). Until that is known, the wire is told to no
//! peer and no claim to it is taken: a peer's word is never the evidence. A waiting end
//! is announced to the node its far end's placement names only, when the placement is
//! known or changes. Any other claim is refused and counted (and logged in
//! a line per peer per interval, `refusals.rs`) and answered with DelWire: whatever the
//! claimant joined to this node for that wire, this node does not hold its far end (a
//! claimant that joined on a far end it heard of before a topology change, while this
//! node has not read the change yet, waits for a far end again). A claim to a wire no
//! topology here has costs a lookup that leaves nothing behind, and such refusals are
//! answered up to a few hundred per peer per interval (not a flood's worth).
//!
//! What peers say is read on the peer desk's thread (`peer_desk.rs`), which judges each
//! claim against a view of this node's topologies and placements and refuses there what
//! it may not take. The node's thread gets the rest: claims the view allows (judged again
//! here against the store, as the view may be a moment old), far ends let go of, and
//! peers coming up. It works through them a turn at a time (`TURN`), big Syncs in parts,
//! so that it answers the local API between turns whatever peers send.

use std::collections::{BTreeSet, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use xwire_proto::control::{Carrier, ControlBody, SyncBody, WireKey, WireSpec};

use super::claims::{judge, Refusal};
use super::peer_desk::PeerNews;
use super::reconcile::Scope;
use super::wiring::Wiring;
use super::{DataPlane, Namespaces, Node, PeerBook, Records, RemoteEnd};
use crate::config::DaemonConfig;
use crate::membership::PeerChange;
use crate::store::{EndKey, PodPlacement, WireRecord, WireState};

/// The parts that taking peers' news and telling peers about wires work on, borrowed
/// from the node for one turn: what it knows of its peers, the records claims are judged
/// against, the data plane its messages leave through, and (for an end a claim moves)
/// what unmaking a wire end needs.
pub(super) struct PeerTalk<'a> {
    pub(super) config: &'a DaemonConfig,
    pub(super) records: &'a mut Records,
    pub(super) data: &'a mut DataPlane,
    pub(super) peers: &'a mut PeerBook,
    pub(super) netns: &'a Namespaces,
}

impl Node {
    /// The node's parts, borrowed to hear and tell peers.
    pub(super) fn peer_talk(&mut self) -> PeerTalk<'_> {
        PeerTalk::new(
            &self.config,
            &mut self.records,
            &mut self.data,
            &mut self.peers,
            &self.netns,
        )
    }
}

impl<'a> PeerTalk<'a> {
    /// The parts it works on.
    pub(super) fn new(
        config: &'a DaemonConfig,
        records: &'a mut Records,
        data: &'a mut DataPlane,
        peers: &'a mut PeerBook,
        netns: &'a Namespaces,
    ) -> PeerTalk<'a> {
        PeerTalk {
            config,
            records,
            data,
            peers,
            netns,
        }
    }
}

impl PeerTalk<'_> {
    /// What unmaking a wire end needs, borrowed from this turn's parts.
    fn wiring(&mut self) -> Wiring<'_> {
        Wiring::new(self.config, self.records, self.data, self.netns, self.peers)
    }
}

impl Node {
    /// Acts on the news the peer desk passed (claims its view allows, far ends let go
    /// of, peers up) for at most `TURN`; what is left waits for the next call
    /// (`has_peer_backlog`). Says whether there was any.
    pub(crate) fn pump_peer_events(&mut self) -> bool {
        let mut any = false;
        let started = Instant::now();
        self.peers.turn_ran_out = false;
        while let Some(desk) = &self.peers.desk {
            if started.elapsed() >= TURN {
                self.peers.turn_ran_out = desk.has_news();
                break;
            }
            let Some(news) = desk.next() else {
                break;
            };
            any = true;
            self.peer_talk().on_news(news);
        }
        self.peers.refusals.log_due(Instant::now());
        self.join_announced();
        any
    }

    /// One pass over the pods whose far ends peers announced or let go of (after a batch
    /// of events, so that a Sync of many wires costs one pass, not one each); the pass
    /// tells the peers what it joined.
    fn join_announced(&mut self) {
        if self.peers.to_join.is_empty() {
            return;
        }
        let mut pods = Vec::new();
        for (namespace, pod) in std::mem::take(&mut self.peers.to_join) {
            match self.records.attachment_of_pod(&namespace, &pod) {
                Ok(Some(attachment)) => pods.push(attachment),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(pod = %format!("{namespace}/{pod}"), "{}: {}", e.msg, e.details)
                }
            }
        }
        let passed = self.pass(Scope::Pods(&pods), &HashSet::new());
        self.peers.withdrawn.clear();
        match passed {
            Ok(done) => {
                for failure in &done.failures {
                    tracing::error!("joining an announced wire failed: {failure}");
                }
            }
            Err(e) => tracing::error!("joining announced wires: {}: {}", e.msg, e.details),
        }
    }
}

impl Node {
    /// Follows the cluster's nodes (where they are watched: `membership`): a node that joined is
    /// declared to the fast path (or its address updated), one that left is retired and
    /// the ends joined to its pods go back to pending. Says whether anything changed.
    pub(crate) fn pump_membership(&mut self) -> bool {
        let pools_changed = match self.membership.take_pools_change() {
            Some(pools) if self.config.topology.pools_from_labels => {
                self.routing
                    .apply_labelled_pools(pools, &self.config, &self.netns.node_ns);
                true
            }
            _ => false,
        };
        let changes = self.membership.take_peer_changes();
        if changes.is_empty() && pools_changed {
            return true;
        }
        if changes.is_empty() {
            return false;
        }
        let Some(fastpath) = &mut self.data.fastpath else {
            tracing::warn!("nodes joined or left, but this node has no certificate for peers");
            return true;
        };
        let mut left = Vec::new();
        for change in changes {
            match change {
                PeerChange::Joined { name, address } => {
                    match fastpath.add_peer(&name, address, Carrier::Datagram) {
                        Ok(new) => {
                            if new {
                                tracing::info!(peer = %name, %address, "node joined");
                            }
                        }
                        Err(e) => tracing::warn!(peer = %name, "declaring a node that joined: {e}"),
                    }
                }
                PeerChange::Left { name } => {
                    match fastpath.retire_peer(&name) {
                        Ok(false) => continue,
                        Ok(true) => tracing::info!(peer = %name, "node left"),
                        Err(e) => tracing::warn!(peer = %name, "retiring a node that left: {e}"),
                    }
                    left.push(name);
                }
            }
        }
        self.peer_talk().tell_desk_peers();
        for name in left {
            let mut gone: HashSet<WireKey> = self
                .peers
                .remote_ends
                .iter()
                .filter(|(_, end)| end.node == name)
                .map(|(key, _)| key.clone())
                .collect();
            gone.extend(
                self.records
                    .store
                    .wires()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|w| w.peer_node.as_deref() == Some(name.as_str()))
                    .map(|w| w.wire()),
            );
            self.peer_talk().far_ends_gone(&name, &gone);
        }
        true
    }
}

/// How long the node's thread works through the peer desk's news before it answers the
/// local API again.
const TURN: Duration = Duration::from_millis(20);

impl super::Records {
    /// The wire as this node's end describes it to the far end's node.
    fn spec_of(&self, record: &WireRecord) -> Option<WireSpec> {
        let link = self
            .topology_link(
                &record.topo_namespace,
                &record.local_pod_name,
                record.link_uid,
            )
            .ok()??;
        let carrier = link.carrier.unwrap_or(Carrier::Datagram);
        Some(WireSpec {
            key: record.wire(),
            sender_pod: record.local_pod_name.clone(),
            sender_intf: record.local_pod_ifname.clone(),
            receiver_pod: link.peer_pod,
            receiver_intf: link.peer_intf,
            carrier,
        })
    }

    /// The address of the node that runs `pod`, if its Topology says.
    pub(super) fn placement(&self, namespace: &str, pod: &str) -> Option<IpAddr> {
        let loaded = self.topology(namespace, pod).ok()??;
        let src_ip = loaded
            .topology
            .status
            .as_ref()?
            .get("src_ip")?
            .as_str()?
            .to_owned();
        // meshnet writes a plain address; a CIDR is read for its address.
        src_ip.split('/').next()?.parse().ok()
    }
}

impl super::DataPlane {
    /// The configured peer that runs `pod` by its placement (in a cluster, the Pod's
    /// node; elsewhere, the node at the address its Topology's status names), if any.
    pub(super) fn placed_peer(
        &self,
        records: &super::Records,
        namespace: &str,
        pod: &str,
    ) -> Option<String> {
        let fastpath = self.fastpath.as_ref()?;
        match records.store.pod_placement(namespace, pod) {
            PodPlacement::On(node) => {
                return fastpath.addresses.contains_key(&node).then_some(node)
            }
            PodPlacement::Unplaced => return None,
            PodPlacement::NotTracked => {}
        }
        let runs_it = records.placement(namespace, pod)?;
        fastpath
            .addresses
            .keys()
            .find(|name| self.peer_ip(name) == Some(runs_it))
            .cloned()
    }

    /// The configured address of peer `name`.
    pub(super) fn peer_ip(&self, name: &str) -> Option<IpAddr> {
        let address = self.fastpath.as_ref()?.addresses.get(name)?;
        Some(address.parse::<SocketAddr>().ok()?.ip())
    }
}

impl PeerTalk<'_> {
    fn on_news(&mut self, news: PeerNews) {
        match news {
            PeerNews::Up { name } => {
                // A Sync cut short by the last connection's end is void.
                self.peers.sync_in_progress.remove(&name);
                self.send_sync(&name);
            }
            PeerNews::Claims {
                from,
                specs,
                sync: None,
            } => {
                for spec in specs {
                    self.on_add_wire(&from, spec);
                }
            }
            PeerNews::Claims {
                from,
                specs,
                sync: Some(more),
            } => self.on_sync(&from, specs, more),
            PeerNews::Gone { from, key } => self.on_del_wire(&from, &key),
        }
    }

    /// Announces a pod's ends that have no local peer.
    pub(super) fn announce_pod(&mut self, namespace: &str, pod: &str) {
        let Some(fastpath) = &self.data.fastpath else {
            return;
        };
        if fastpath.peer_names().next().is_none() {
            return;
        }
        let Ok(wires) = self.records.store.wires_of_pod(namespace, pod) else {
            return;
        };
        for record in &wires {
            let Some(spec) = self.records.spec_of(record) else {
                continue;
            };
            // A waiting end is told only to the node that runs its far end's pod, as the
            // pod's placement says; with none, to nobody (see the module's notes).
            let target = match (&record.state, &record.peer_node) {
                (WireState::Pending, _) => {
                    self.data
                        .placed_peer(self.records, namespace, &record.peer_pod)
                }
                (WireState::Remote | WireState::Vxlan, Some(node)) => Some(node.clone()),
                _ => None,
            };
            if let Some(node) = target {
                self.data.send_to(&node, ControlBody::AddWire(spec));
            }
        }
    }

    /// Announces the waiting ends of this node's pods whose far end is a pod of
    /// `changed` (namespace, pod): its placement may have just become known.
    pub(super) fn announce_towards(&mut self, changed: &HashSet<(String, String)>) {
        if changed.is_empty() || self.data.fastpath.is_none() {
            return;
        }
        let Ok(wires) = self.records.store.wires() else {
            return;
        };
        let pods: BTreeSet<(String, String)> = wires
            .into_iter()
            .filter(|w| {
                w.state == WireState::Pending
                    && changed.contains(&(w.topo_namespace.clone(), w.peer_pod.clone()))
            })
            .map(|w| (w.topo_namespace, w.local_pod_name))
            .collect();
        for (namespace, pod) in pods {
            self.announce_pod(&namespace, &pod);
        }
    }

    /// Sends the peer every wire this node believes it shares with it, in parts of
    /// bounded size (every peer speaks protocol version 3, so reads parts).
    fn send_sync(&mut self, peer: &str) {
        let Ok(wires) = self.records.store.wires() else {
            return;
        };
        let specs: Vec<WireSpec> = wires
            .iter()
            .filter(|w| match w.state {
                WireState::Pending => {
                    self.data
                        .placed_peer(self.records, &w.topo_namespace, &w.peer_pod)
                        .as_deref()
                        == Some(peer)
                }
                WireState::Remote | WireState::Vxlan => w.peer_node.as_deref() == Some(peer),
                WireState::Veth | WireState::Switched => false,
            })
            .filter_map(|w| self.records.spec_of(w))
            .collect();
        for part in SyncBody::parts(specs) {
            self.data.send_to(peer, ControlBody::Sync(part));
        }
    }

    /// Why `from` may not hold the far end that `spec` describes, if it may not (see the
    /// module's notes), and otherwise this node's end of the wire, if it has one.
    fn claim_refusal(
        &mut self,
        from: &str,
        spec: &WireSpec,
    ) -> Result<Option<WireRecord>, Refusal> {
        self.peers.claims_judged += 1;
        judge(self, from, spec)?;
        let key = EndKey::new(&spec.key.namespace, &spec.receiver_pod, spec.key.link_uid);
        Ok(self.records.store.wire(&key).ok().flatten())
    }

    /// Takes `from`'s word that it holds the far end `spec` describes, if it may; says
    /// whether it did.
    fn on_add_wire(&mut self, from: &str, spec: WireSpec) -> bool {
        let key = EndKey::new(&spec.key.namespace, &spec.receiver_pod, spec.key.link_uid);
        let record = match self.claim_refusal(from, &spec) {
            Ok(record) => record,
            Err(refusal) => {
                // The claimant is told, so that an end it joined to this node on older
                // news (this node's end removed and recorded again while the claim was
                // under way) waits for a far end again instead of waiting on this node
                // for ever: the next announcement of either end then joins the two.
                if self
                    .peers
                    .refusals
                    .refuse(from, &refusal, &spec, Instant::now())
                {
                    self.data.send_to(from, ControlBody::DelWire(spec.key));
                }
                return false;
            }
        };
        self.peers.remote_ends.insert(
            spec.key.clone(),
            RemoteEnd {
                node: from.to_owned(),
                pod: spec.sender_pod.clone(),
            },
        );
        let Some(record) = record else {
            return true;
        };
        match record.state {
            WireState::Remote | WireState::Vxlan if record.peer_node.as_deref() == Some(from) => {}
            WireState::Veth | WireState::Switched => {
                tracing::warn!(peer = %from, wire = %key, "AddWire for a wire joined on this node");
            }
            WireState::Pending | WireState::Remote | WireState::Vxlan => {
                // An end joined elsewhere gets here only when the Topology places the
                // far end's pod on `from`: the pod moved.
                if record.state.crosses_nodes() {
                    self.wiring().disconnect_end(&record, true);
                    self.records.set_pending(record.clone());
                }
                // The far end is known now: the pod's next pass joins it.
                self.peers
                    .to_join
                    .insert((record.topo_namespace, record.local_pod_name));
            }
        }
        true
    }

    fn on_del_wire(&mut self, from: &str, key: &WireKey) {
        self.far_ends_gone(from, &HashSet::from([key.clone()]));
    }

    /// `from` no longer holds the far ends of `gone`: the ends joined to them go back to
    /// pending, on the pass that follows the batch of events.
    fn far_ends_gone(&mut self, from: &str, gone: &HashSet<WireKey>) {
        self.peers
            .remote_ends
            .retain(|key, end| end.node != from || !gone.contains(key));
        let Ok(wires) = self.records.store.wires() else {
            return;
        };
        for record in wires
            .into_iter()
            .filter(|w| w.state.crosses_nodes() && w.peer_node.as_deref() == Some(from))
        {
            let key = record.wire();
            if gone.contains(&key) {
                self.peers.withdrawn.insert(key, from.to_owned());
                self.peers
                    .to_join
                    .insert((record.topo_namespace, record.local_pod_name));
            }
        }
    }

    /// One part of a peer's Sync (its claims the desk's view allows): they are taken as
    /// AddWires now; once the last part is in (`more` false), what this node believed it
    /// shared with the peer and no part listed is gone. Only wires accepted as claims are
    /// remembered between parts, so what a peer can make this node hold is bounded by
    /// this node's own topologies.
    fn on_sync(&mut self, from: &str, specs: Vec<WireSpec>, more: bool) {
        let mut listed = self.peers.sync_in_progress.remove(from).unwrap_or_default();
        for spec in specs {
            let key = spec.key.clone();
            if self.on_add_wire(from, spec) {
                listed.insert(key);
            }
        }
        if more {
            self.peers.sync_in_progress.insert(from.to_owned(), listed);
            return;
        }
        // What this node believes it shares with `from`: the ends it heard of, and (after
        // a restart, when it has heard nothing yet) the ends its records join to `from`.
        let mut shared: HashSet<WireKey> = self
            .peers
            .remote_ends
            .iter()
            .filter(|(_, end)| end.node == from)
            .map(|(key, _)| key.clone())
            .collect();
        if let Ok(records) = self.records.store.wires() {
            shared.extend(
                records
                    .iter()
                    .filter(|w| w.state.crosses_nodes() && w.peer_node.as_deref() == Some(from))
                    .map(|w| w.wire()),
            );
        }
        let gone: HashSet<WireKey> = shared.difference(&listed).cloned().collect();
        if !gone.is_empty() {
            self.far_ends_gone(from, &gone);
        }
    }
}
