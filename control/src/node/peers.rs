//! What nodes tell each other about wires. A node announces each of its pods' wire ends
//! that has no local peer (AddWire to every peer while the far end's node is unknown, to
//! that node once it is), answers AddWire for a pending end of its own by joining it and
//! announcing back, takes DelWire as the far end gone, and sends Sync, the list of all its
//! such ends, whenever a peer comes up, so that what was missed while down is made good.
//!
//! A peer may claim a wire's far end only for a wire of this node's topologies, and only
//! if it runs the far end's pod: where the pod's Topology says which node that is (its
//! status's `src_ip`, meshnet's field for the node's address), only that node; where
//! nothing says, the first node to claim it, until that node lets it go (DelWire, or a
//! Sync that no longer lists it). Any other claim is refused, logged and counted, and
//! answered with DelWire: whatever the claimant joined to this node for that wire, this
//! node does not hold its far end.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

use xwire_fastpath::peer::{PeerEvent, PeerId};
use xwire_proto::control::{Carrier, ControlBody, SyncBody, WireKey, WireSpec, SYNC_PARTS_VERSION};

use super::reconcile::Scope;
use super::{Node, RemoteEnd};
use crate::store::{wire_key, WireRecord, WireState};

impl Node {
    /// Takes the fast path's peer events and acts on them; says whether there were any.
    pub fn pump_peer_events(&mut self) -> bool {
        let Some(fastpath) = &self.fastpath else {
            return false;
        };
        let events = match fastpath.peer_events() {
            Ok(events) => events,
            Err(e) => {
                tracing::error!("reading peer events: {e}");
                return false;
            }
        };
        let any = !events.is_empty();
        for (worker, event) in events {
            // Worker 0's connection to a peer carries the control protocol; the other
            // workers' carry frames only, and their comings and goings change nothing here.
            if worker > 0 {
                match event {
                    PeerEvent::Up { name, .. } => {
                        tracing::info!(peer = %name, worker, "peer up (frames only)")
                    }
                    PeerEvent::Down { peer, reason } => tracing::info!(
                        peer = ?self.peer_name(worker, peer),
                        worker,
                        %reason,
                        "peer down (frames only)"
                    ),
                    PeerEvent::Refused { remote, reason } => {
                        tracing::warn!(%remote, worker, %reason, "peer refused")
                    }
                    PeerEvent::Control { peer, .. } => tracing::warn!(
                        peer = ?self.peer_name(worker, peer),
                        worker,
                        "control message on a connection that carries frames only: ignored"
                    ),
                }
                continue;
            }
            match event {
                PeerEvent::Up { name, version, .. } => {
                    tracing::info!(peer = %name, version, "peer up");
                    self.peer_versions.insert(name.clone(), version);
                    // A Sync cut short by the last connection's end is void.
                    self.sync_in_progress.remove(&name);
                    self.send_sync(&name);
                }
                PeerEvent::Down { peer, reason } => {
                    tracing::info!(peer = ?self.peer_name(0, peer), %reason, "peer down");
                }
                PeerEvent::Refused { remote, reason } => {
                    tracing::warn!(%remote, %reason, "peer refused");
                }
                PeerEvent::Control { peer, message } => {
                    let Some(from) = self.peer_name(0, peer) else {
                        continue;
                    };
                    match message.body {
                        ControlBody::AddWire(spec) => {
                            self.on_add_wire(&from, spec);
                        }
                        ControlBody::DelWire(key) => self.on_del_wire(&from, &key),
                        ControlBody::Sync(sync) => self.on_sync(&from, sync),
                        ControlBody::Error(e) => {
                            tracing::warn!(peer = %from, code = e.code.0, "peer error: {}", e.message)
                        }
                        ControlBody::Hello(_) | ControlBody::Ack => {}
                    }
                }
            }
        }
        self.join_announced();
        any
    }

    /// The peer node behind `peer` of worker `worker`.
    fn peer_name(&self, worker: usize, peer: PeerId) -> Option<String> {
        let fastpath = self.fastpath.as_ref()?;
        fastpath.peer_name(worker, peer).map(str::to_owned)
    }

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
            key: WireKey {
                namespace: record.topo_namespace.clone(),
                link_uid: record.link_uid,
            },
            sender_pod: record.local_pod_name.clone(),
            sender_intf: record.local_pod_ifname.clone(),
            receiver_pod: link.peer_pod,
            receiver_intf: link.peer_intf,
            carrier,
        })
    }

    /// Announces a pod's ends that have no local peer.
    pub(super) fn announce_pod(&mut self, namespace: &str, pod: &str) {
        let Some(fastpath) = &self.fastpath else {
            return;
        };
        let all_peers: Vec<String> = fastpath.peer_names().cloned().collect();
        let Ok(wires) = self.store.wires_of_pod(namespace, pod) else {
            return;
        };
        for record in &wires {
            let Some(spec) = self.spec_of(record) else {
                continue;
            };
            let targets = match (&record.state, &record.peer_node) {
                (WireState::Pending, _) => all_peers.clone(),
                (WireState::Remote, Some(node)) => vec![node.clone()],
                _ => continue,
            };
            for node in targets {
                self.send_to(&node, ControlBody::AddWire(spec.clone()));
            }
        }
    }

    /// Sends the peer every wire this node believes it shares with it: in parts of
    /// bounded size to a peer that reads them (protocol version 2), in one message to an
    /// older one.
    fn send_sync(&mut self, peer: &str) {
        let Ok(wires) = self.store.wires() else {
            return;
        };
        let specs: Vec<WireSpec> = wires
            .iter()
            .filter(|w| match w.state {
                WireState::Pending => true,
                WireState::Remote => w.peer_node.as_deref() == Some(peer),
                WireState::Veth | WireState::Switched => false,
            })
            .filter_map(|w| self.spec_of(w))
            .collect();
        let in_parts = self
            .peer_versions
            .get(peer)
            .is_some_and(|&v| v >= SYNC_PARTS_VERSION);
        if in_parts {
            for part in SyncBody::parts(specs) {
                self.send_to(peer, ControlBody::Sync(part));
            }
        } else {
            let whole = SyncBody {
                wires: specs,
                more: false,
            };
            self.send_to(peer, ControlBody::Sync(whole));
        }
    }

    /// Why `from` may not hold the far end that `spec` describes, if it may not (see the
    /// module's notes). `record` is this node's end of the wire, if it has one.
    fn claim_refusal(
        &self,
        from: &str,
        spec: &WireSpec,
        record: Option<&WireRecord>,
    ) -> Option<String> {
        let namespace = &spec.key.namespace;
        let link = match self.topology_link(namespace, &spec.receiver_pod, spec.key.link_uid) {
            Ok(Some(link)) => link,
            _ => {
                return Some(format!(
                    "no topology here has wire {} for pod {namespace}/{}",
                    spec.key.link_uid, spec.receiver_pod
                ))
            }
        };
        if link.peer_pod != spec.sender_pod {
            return Some(format!(
                "the topology has {} as the far end, not {}",
                link.peer_pod, spec.sender_pod
            ));
        }
        if let Some(runs_it) = self.placement(namespace, &spec.sender_pod) {
            return (self.peer_ip(from) != Some(runs_it))
                .then(|| format!("pod {} runs on the node at {runs_it}", spec.sender_pod));
        }
        if let Some(end) = self.remote_ends.get(&spec.key) {
            if end.node != from {
                return Some(format!("node {} holds it", end.node));
            }
        }
        match record {
            Some(record) if record.state == WireState::Remote => {
                let holder = record.peer_node.as_deref().unwrap_or_default();
                (holder != from).then(|| format!("node {holder} holds it"))
            }
            _ => None,
        }
    }

    /// The address of the node that runs `pod`, if its Topology says.
    fn placement(&self, namespace: &str, pod: &str) -> Option<IpAddr> {
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

    /// The configured address of peer `name`.
    fn peer_ip(&self, name: &str) -> Option<IpAddr> {
        let address = self.fastpath.as_ref()?.addresses.get(name)?;
        Some(address.parse::<SocketAddr>().ok()?.ip())
    }

    /// Takes `from`'s word that it holds the far end `spec` describes, if it may; says
    /// whether it did.
    fn on_add_wire(&mut self, from: &str, spec: WireSpec) -> bool {
        let key = wire_key(&spec.key.namespace, &spec.receiver_pod, spec.key.link_uid);
        let record = self.store.wire(&key).ok().flatten();
        if let Some(why) = self.claim_refusal(from, &spec, record.as_ref()) {
            self.refused_claims += 1;
            tracing::warn!(
                peer = %from,
                wire = %format!("{}/{}", spec.key.namespace, spec.key.link_uid),
                far_end = %spec.sender_pod,
                "claim refused: {why}"
            );
            // The claimant is told, so that an end it joined to this node on older news
            // (this node's end removed and recorded again while the claim was under way)
            // waits for a far end again instead of waiting on this node for ever: the
            // next announcement of either end then joins the two.
            self.send_to(from, ControlBody::DelWire(spec.key));
            return false;
        }
        self.remote_ends.insert(
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
            WireState::Remote if record.peer_node.as_deref() == Some(from) => {}
            WireState::Veth | WireState::Switched => {
                tracing::warn!(peer = %from, wire = %key, "AddWire for a wire joined on this node");
            }
            WireState::Pending | WireState::Remote => {
                // A Remote end joined elsewhere gets here only when the Topology places
                // the far end's pod on `from`: the pod moved.
                if record.state == WireState::Remote {
                    self.disconnect_end(&record, true);
                    self.set_pending(record.clone());
                }
                // The far end is known now: the pod's next pass joins it.
                self.to_join
                    .insert((record.topo_namespace, record.local_pod_name));
            }
        }
        true
    }

    /// One pass over the pods whose far ends peers announced or let go of (after a batch
    /// of events, so that a Sync of many wires costs one pass, not one each); the pass
    /// tells the peers what it joined.
    fn join_announced(&mut self) {
        if self.to_join.is_empty() {
            return;
        }
        let mut pods = Vec::new();
        for (namespace, pod) in std::mem::take(&mut self.to_join) {
            match self.attachment_of_pod(&namespace, &pod) {
                Ok(Some(attachment)) => pods.push(attachment),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(pod = %format!("{namespace}/{pod}"), "{}: {}", e.msg, e.details)
                }
            }
        }
        let passed = self.pass(Scope::Pods(&pods), &HashSet::new());
        self.withdrawn.clear();
        match passed {
            Ok(done) => {
                for failure in &done.failures {
                    tracing::error!("joining an announced wire failed: {failure}");
                }
            }
            Err(e) => tracing::error!("joining announced wires: {}: {}", e.msg, e.details),
        }
    }

    fn on_del_wire(&mut self, from: &str, key: &WireKey) {
        self.far_ends_gone(from, &HashSet::from([key.clone()]));
    }

    /// `from` no longer holds the far ends of `gone`: the ends joined to them go back to
    /// pending, on the pass that follows the batch of events.
    fn far_ends_gone(&mut self, from: &str, gone: &HashSet<WireKey>) {
        self.remote_ends
            .retain(|key, end| end.node != from || !gone.contains(key));
        let Ok(wires) = self.store.wires() else {
            return;
        };
        for record in wires
            .into_iter()
            .filter(|w| w.state == WireState::Remote && w.peer_node.as_deref() == Some(from))
        {
            let key = WireKey {
                namespace: record.topo_namespace.clone(),
                link_uid: record.link_uid,
            };
            if gone.contains(&key) {
                self.withdrawn.insert(key, from.to_owned());
                self.to_join
                    .insert((record.topo_namespace, record.local_pod_name));
            }
        }
    }

    /// One part of a peer's Sync: its wires are taken as AddWires now; once the last
    /// part is in, what this node believed it shared with the peer and no part listed
    /// is gone. Only wires accepted as claims are remembered between parts, so what a
    /// peer can make this node hold is bounded by this node's own topologies.
    fn on_sync(&mut self, from: &str, sync: SyncBody) {
        let mut listed = self.sync_in_progress.remove(from).unwrap_or_default();
        for spec in sync.wires {
            let key = spec.key.clone();
            if self.on_add_wire(from, spec) {
                listed.insert(key);
            }
        }
        if sync.more {
            self.sync_in_progress.insert(from.to_owned(), listed);
            return;
        }
        // What this node believes it shares with `from`: the ends it heard of, and (after
        // a restart, when it has heard nothing yet) the ends its records join to `from`.
        let mut shared: HashSet<WireKey> = self
            .remote_ends
            .iter()
            .filter(|(_, end)| end.node == from)
            .map(|(key, _)| key.clone())
            .collect();
        if let Ok(records) = self.store.wires() {
            shared.extend(
                records
                    .iter()
                    .filter(|w| {
                        w.state == WireState::Remote && w.peer_node.as_deref() == Some(from)
                    })
                    .map(|w| WireKey {
                        namespace: w.topo_namespace.clone(),
                        link_uid: w.link_uid,
                    }),
            );
        }
        let gone: HashSet<WireKey> = shared.difference(&listed).cloned().collect();
        if !gone.is_empty() {
            self.far_ends_gone(from, &gone);
        }
    }
}

impl Node {
    /// Follows the cluster's nodes (where the store watches them): a node that joined is
    /// declared to the fast path (or its address updated), one that left is retired and
    /// the ends joined to its pods go back to pending. Says whether anything changed.
    pub fn pump_membership(&mut self) -> bool {
        let pools_changed = match self.store.take_pools_change() {
            Some(pools) if self.config.topology.pools_from_labels => {
                self.apply_labelled_pools(pools);
                true
            }
            _ => false,
        };
        let changes = self.store.take_peer_changes();
        if changes.is_empty() && pools_changed {
            return true;
        }
        if changes.is_empty() {
            return false;
        }
        let Some(fastpath) = &mut self.fastpath else {
            tracing::warn!("nodes joined or left, but this node has no certificate for peers");
            return true;
        };
        let mut left = Vec::new();
        for change in changes {
            match change {
                crate::store::PeerChange::Joined { name, address } => {
                    match fastpath.add_peer(&name, address, Carrier::Datagram) {
                        Ok(new) => {
                            if new {
                                tracing::info!(peer = %name, %address, "node joined");
                            }
                        }
                        Err(e) => tracing::warn!(peer = %name, "declaring a node that joined: {e}"),
                    }
                }
                crate::store::PeerChange::Left { name } => {
                    match fastpath.retire_peer(&name) {
                        Ok(false) => continue,
                        Ok(true) => tracing::info!(peer = %name, "node left"),
                        Err(e) => tracing::warn!(peer = %name, "retiring a node that left: {e}"),
                    }
                    left.push(name);
                }
            }
        }
        for name in left {
            let mut gone: HashSet<WireKey> = self
                .remote_ends
                .iter()
                .filter(|(_, end)| end.node == name)
                .map(|(key, _)| key.clone())
                .collect();
            gone.extend(
                self.store
                    .wires()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|w| w.peer_node.as_deref() == Some(name.as_str()))
                    .map(|w| WireKey {
                        namespace: w.topo_namespace,
                        link_uid: w.link_uid,
                    }),
            );
            self.far_ends_gone(&name, &gone);
        }
        true
    }
}
