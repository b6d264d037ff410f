//! Parting a wire end of a pod (its interfaces, ports and tunnels gone, its record back
//! to pending and its far end's node told), and undoing a journal's steps when a change
//! failed halfway.

use std::path::Path;

use xwire_proto::control::ControlBody;

use super::wiring::{log_removal, Wiring};
use super::{Journal, Step};
use crate::interfaces::{self, Removal};
use crate::netns::NetnsFd;
use crate::step_times;
use crate::store::{EndKey, WireRecord, WireState};

impl Wiring<'_> {
    /// Takes a wire end apart (its interfaces, port and link) and tells the peer node
    /// when `tell_peer`; the record is left to the caller. A same-node veth takes the
    /// peer pod's end with it, whose record goes back to pending.
    pub(super) fn disconnect_end(&mut self, record: &WireRecord, tell_peer: bool) {
        match record.state {
            // A waiting end was announced to the node its far end's pod is placed on
            // (`announce_pod`): that node forgets it, or it would join a later end of this
            // wire at once, to a pod that is gone.
            WireState::Pending if tell_peer => {
                if let Some(node) =
                    self.data
                        .placed_peer(self.records, &record.topo_namespace, &record.peer_pod)
                {
                    self.data
                        .send_to(&node, ControlBody::DelWire(record.wire()));
                }
            }
            WireState::Pending => {}
            WireState::Veth => {
                self.data.forget_steering(&record.wire());
                self.release_pod_end(record);
                let peer_key =
                    EndKey::new(&record.topo_namespace, &record.peer_pod, record.link_uid);
                if let Ok(Some(peer)) = self.records.store.wire(&peer_key) {
                    if peer.state == WireState::Veth {
                        self.records.set_pending(peer);
                    }
                }
            }
            WireState::Switched => self.disconnect_switched(record),
            WireState::Remote | WireState::Vxlan => {
                match record.state {
                    WireState::Vxlan if record.has_node_end() => self.release_bridged(record),
                    WireState::Vxlan => self.release_pod_end(record),
                    _ => self.release_node_end(record),
                }
                if tell_peer {
                    if let Some(node) = &record.peer_node {
                        self.data.send_to(node, ControlBody::DelWire(record.wire()));
                    }
                }
            }
        }
    }

    /// Deletes the pod's interface of `record`, if it is still xwire's.
    fn release_pod_end(&self, record: &WireRecord) {
        if let Ok(ns) = record.open_local_pod_netns() {
            let alias = interfaces::pod_alias(
                &record.topo_namespace,
                &record.local_pod_name,
                record.link_uid,
            );
            log_removal(
                interfaces::delete(&ns, &record.local_pod_ifname, &alias),
                &record.local_pod_ifname,
            );
        }
    }

    /// Undoes a journal's steps, last first.
    pub(super) fn rollback(&mut self, journal: Journal) {
        for step in journal.into_undo_order() {
            let result = match step {
                Step::Interface { netns, name, alias } => {
                    let ns = if netns.is_empty() {
                        Ok(None)
                    } else {
                        NetnsFd::open(Path::new(&netns)).map(Some)
                    };
                    let removed = match ns {
                        Ok(Some(ns)) => interfaces::delete(&ns, &name, &alias),
                        Ok(None) => interfaces::delete(&self.netns.node_ns, &name, &alias),
                        Err(_) => Ok(Removal::Absent),
                    };
                    log_removal(removed, &name);
                    Ok(())
                }
                Step::Port { key, wire, id } => {
                    self.data.ports.remove(&key);
                    if self.data.tunnel_ports.get(&key) == Some(&id) {
                        self.data.tunnel_ports.remove(&key);
                    }
                    match &self.data.fastpath {
                        Some(f) => step_times::time(step_times::PORT_CLOSE, || {
                            f.worker_of(wire).remove_port(id).map_err(|e| e.to_string())
                        }),
                        None => Ok(()),
                    }
                }
                Step::RemoteLink { wire } => match &self.data.fastpath {
                    Some(f) => f
                        .worker_of(wire)
                        .remove_link(wire)
                        .map(drop)
                        .map_err(|e| e.to_string()),
                    None => Ok(()),
                },
                Step::Wire { key, previous } => match previous {
                    Some(previous) => self.records.store.put_wire(&previous),
                    None => self.records.store.remove_wire(&key).map(drop),
                }
                .map_err(|e| e.to_string()),
                Step::Attachment { key } => self
                    .records
                    .store
                    .remove_attachment(&key)
                    .map(drop)
                    .map_err(|e| e.to_string()),
            };
            if let Err(e) = result {
                tracing::error!("undoing a step: {e}");
            }
        }
    }
}
