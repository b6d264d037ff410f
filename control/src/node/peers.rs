//! What nodes tell each other about wires. A node announces each of its pods' wire ends
//! that has no local peer (AddWire to every peer while the far end's node is unknown, to
//! that node once it is), answers AddWire for a pending end of its own by joining it and
//! announcing back, takes DelWire as the far end gone, and sends Sync, the list of all its
//! such ends, whenever a peer comes up, so that what was missed while down is made good.

use std::collections::HashSet;
use std::path::Path;

use xwire_fastpath::peer::{PeerEvent, PeerId};
use xwire_proto::control::{Carrier, ControlBody, SyncBody, WireKey, WireSpec};

use super::{Journal, Node, RemoteEnd};
use crate::netns::NetnsFd;
use crate::store::{wire_key, WireRecord, WireState, WireStore};

impl Node {
    /// Takes the fast path's peer events and acts on them; says whether there were any.
    pub fn pump_peer_events(&mut self) -> bool {
        let Some(fastpath) = &self.fastpath else {
            return false;
        };
        let events = match fastpath.worker.peer_status() {
            Ok((_, events)) => events,
            Err(e) => {
                tracing::error!("reading peer events: {e}");
                return false;
            }
        };
        let any = !events.is_empty();
        for event in events {
            match event {
                PeerEvent::Up { name, .. } => {
                    tracing::info!(peer = %name, "peer up");
                    self.send_sync(&name);
                }
                PeerEvent::Down { peer, reason } => {
                    tracing::info!(peer = ?self.peer_name(peer), %reason, "peer down");
                }
                PeerEvent::Refused { remote, reason } => {
                    tracing::warn!(%remote, %reason, "peer refused");
                }
                PeerEvent::Control { peer, message } => {
                    let Some(from) = self.peer_name(peer) else {
                        continue;
                    };
                    match message.body {
                        ControlBody::AddWire(spec) => self.on_add_wire(&from, spec),
                        ControlBody::DelWire(key) => self.on_del_wire(&from, &key),
                        ControlBody::Sync(sync) => self.on_sync(&from, sync.wires),
                        ControlBody::Error(e) => {
                            tracing::warn!(peer = %from, code = e.code.0, "peer error: {}", e.message)
                        }
                        ControlBody::Hello(_) | ControlBody::Ack => {}
                    }
                }
            }
        }
        any
    }

    fn peer_name(&self, peer: PeerId) -> Option<String> {
        let fastpath = self.fastpath.as_ref()?;
        fastpath
            .peers
            .iter()
            .find(|(_, &id)| id == peer)
            .map(|(name, _)| name.clone())
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
        let carrier = match link.carrier.as_deref() {
            Some("stream") => Carrier::Stream,
            _ => Carrier::Datagram,
        };
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
        let all_peers: Vec<String> = fastpath.peers.keys().cloned().collect();
        let Ok(wires) = self.store.wires() else {
            return;
        };
        for record in wires
            .iter()
            .filter(|w| w.topo_namespace == namespace && w.local_pod_name == pod)
        {
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

    fn send_sync(&mut self, peer: &str) {
        let Ok(wires) = self.store.wires() else {
            return;
        };
        let specs = wires
            .iter()
            .filter(|w| match w.state {
                WireState::Pending => true,
                WireState::Remote => w.peer_node.as_deref() == Some(peer),
                WireState::Veth => false,
            })
            .filter_map(|w| self.spec_of(w))
            .collect();
        self.send_to(peer, ControlBody::Sync(SyncBody { wires: specs }));
    }

    fn on_add_wire(&mut self, from: &str, spec: WireSpec) {
        self.remote_ends.insert(
            spec.key.clone(),
            RemoteEnd {
                node: from.to_owned(),
                pod: spec.sender_pod.clone(),
            },
        );
        let key = wire_key(&spec.key.namespace, &spec.receiver_pod, spec.key.link_uid);
        let Ok(Some(record)) = self.store.wire(&key) else {
            return;
        };
        if record.peer_pod != spec.sender_pod {
            tracing::warn!(peer = %from, wire = %key, "AddWire names {} as the far end; the topology says {}", spec.sender_pod, record.peer_pod);
            return;
        }
        match record.state {
            WireState::Remote if record.peer_node.as_deref() == Some(from) => {}
            WireState::Veth => {
                tracing::warn!(peer = %from, wire = %key, "AddWire for a wire joined on this node");
            }
            WireState::Pending | WireState::Remote => {
                if record.state == WireState::Remote {
                    self.disconnect_end(&record, true);
                }
                self.join_remote(record, from);
            }
        }
    }

    /// Joins a pending end to the far end on `node`, then tells that node.
    fn join_remote(&mut self, mut record: WireRecord, node: &str) {
        let Ok(Some(link)) = self.topology_link(
            &record.topo_namespace,
            &record.local_pod_name,
            record.link_uid,
        ) else {
            return;
        };
        let pod_ns = match NetnsFd::open(Path::new(&record.local_pod_netns)) {
            Ok(ns) => ns,
            Err(e) => {
                tracing::warn!(wire = %record.key(), "{e}");
                return;
            }
        };
        let mut journal = Journal::default();
        let joined = self
            .connect_remote(&pod_ns, &link, node, &mut record, &mut journal)
            .and_then(|()| self.write_wire(&record).map(drop));
        match joined {
            Ok(()) => {
                tracing::info!(wire = %record.key(), peer = %node, "remote wire up");
                if let Some(spec) = self.spec_of(&record) {
                    self.send_to(node, ControlBody::AddWire(spec));
                }
            }
            Err(e) => {
                tracing::error!(wire = %record.key(), peer = %node, "joining the wire failed: {}: {}", e.msg, e.details);
                self.rollback(journal);
            }
        }
    }

    fn on_del_wire(&mut self, from: &str, key: &WireKey) {
        if self.remote_ends.get(key).is_some_and(|r| r.node == from) {
            self.remote_ends.remove(key);
        }
        let Ok(wires) = self.store.wires() else {
            return;
        };
        for record in wires.into_iter().filter(|w| {
            w.topo_namespace == key.namespace
                && w.link_uid == key.link_uid
                && w.state == WireState::Remote
                && w.peer_node.as_deref() == Some(from)
        }) {
            tracing::info!(wire = %record.key(), peer = %from, "far end gone");
            self.disconnect_end(&record, false);
            self.set_pending(record);
        }
    }

    fn on_sync(&mut self, from: &str, wires: Vec<WireSpec>) {
        let listed: HashSet<WireKey> = wires.iter().map(|w| w.key.clone()).collect();
        for spec in wires {
            self.on_add_wire(from, spec);
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
        let gone: Vec<WireKey> = shared.difference(&listed).cloned().collect();
        for key in gone {
            self.on_del_wire(from, &key);
        }
    }
}
