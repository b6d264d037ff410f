//! Captures of a wire end's link: the node puts a tap on the link in the worker and
//! hands the reader to the API connection that asked, which writes the pcapng stream
//! (`api_server::capture`). A same-node wire that is a straight veth is steered through
//! the switch for as long as a capture of it runs, and back when the last one ends.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use xwire_fastpath::capture::{Direction, Tap, TapReader};
use xwire_proto::control::WireKey;
use xwire_proto::local::{CaptureCall, CaptureDirection, Response};

use super::calls::Call;
use super::reconcile::Observation;
use super::reconcile::Scope;
use super::steered::steerable;
use super::{ErrorKind, Node, NodeError};
use crate::store::{EndKey, WireRecord, WireState};

/// Frames a capture holds that its writer has not taken yet; beyond them frames are
/// left out of the capture and counted in the file's statistics.
const CAPTURE_QUEUE: usize = 8192;

/// A capture the node started, for the connection to stream.
pub struct CaptureStream {
    pub reader: TapReader,
    /// The file's interfaces: the tap's A-to-B direction (what the pod sends) first.
    pub interfaces: [String; 2],
    pub snaplen: u32,
    /// Held while the capture runs; the node sees it gone and puts the wire back.
    pub alive: Arc<()>,
}

impl Call<'_> {
    pub(super) fn start_capture(&mut self, call: CaptureCall) -> Result<Response, NodeError> {
        let record = self.node.records.captured_end(&call)?;
        let wire = record.wire();
        let alive = Arc::new(());
        self.node
            .data
            .captures
            .entry(wire.clone())
            .or_default()
            .push(Arc::downgrade(&alive));
        let (reader, interfaces) = match self.tap(&call, record) {
            Ok(tapped) => tapped,
            Err(e) => {
                // A wire moved for this capture goes back.
                drop(alive);
                self.node.captures_ended();
                return Err(e);
            }
        };
        self.capture = Some(CaptureStream {
            reader,
            interfaces: interfaces.clone(),
            snaplen: call.snaplen,
            alive,
        });
        Ok(Response::Capturing {
            interfaces: interfaces.to_vec(),
        })
    }

    /// Puts the tap on the end's link, moving a straight veth onto the switch path first.
    fn tap(
        &mut self,
        call: &CaptureCall,
        mut record: WireRecord,
    ) -> Result<(TapReader, [String; 2]), NodeError> {
        let wire = record.wire();
        let link = self.node.records.topology_link(
            &record.topo_namespace,
            &record.local_pod_name,
            record.link_uid,
        )?;
        if record.state == WireState::Veth && link.as_ref().is_none_or(steerable) {
            let failures = self
                .node
                .settle(&mut Observation::default(), false)
                .failures;
            if !self.node.data.steered.contains_key(&wire) {
                return Err(NodeError::new(
                    ErrorKind::Fastpath,
                    format!(
                        "wire {} could not be steered through the switch to capture it",
                        record.key()
                    ),
                    failures.join("\n"),
                ));
            }
        } else if record.state == WireState::Veth
            || (record.state == WireState::Vxlan && !record.has_node_end())
        {
            // Remade through the switch: a same-node wire switched, a VXLAN one bridged.
            let was = record.state;
            self.node.repass_wire(&record)?;
            record = self
                .node
                .records
                .store
                .wire(&record.key())?
                .unwrap_or(record);
            let moved = match was {
                WireState::Veth => record.state == WireState::Switched,
                _ => record.has_node_end(),
            };
            if !moved {
                return Err(NodeError::new(
                    ErrorKind::Fastpath,
                    format!(
                        "wire {} could not be moved onto the switch path to capture it",
                        record.key()
                    ),
                    "see the daemon's log",
                ));
            }
        }
        let Some(port) = self.node.data.end_port(&record.key()) else {
            return Err(NodeError::new(
                ErrorKind::Fastpath,
                format!("wire {} has no fast-path port now", record.key()),
                "its far end's node may be down",
            ));
        };
        let directions: &[Direction] = match call.direction {
            CaptureDirection::Egress => &[Direction::AToB],
            CaptureDirection::Ingress => &[Direction::BToA],
            CaptureDirection::Both => &[Direction::AToB, Direction::BToA],
        };
        let snaplen = match call.snaplen {
            0 => usize::from(u16::MAX),
            n => n as usize,
        };
        let (tap, reader) = Tap::new(directions, snaplen, CAPTURE_QUEUE);
        let fastpath = self
            .node
            .data
            .fastpath
            .as_ref()
            .expect("a port means a fast path");
        let wire = record.wire().id();
        fastpath
            .worker_of(wire)
            .capture(wire, port.id, tap)
            .map_err(|e| {
                NodeError::new(
                    ErrorKind::Fastpath,
                    format!("tap wire {}", record.key()),
                    e.to_string(),
                )
            })?;
        let peer_intf = link.map_or_else(String::new, |l| l.peer_intf);
        Ok((
            reader,
            [
                format!("{}:{}", record.local_pod_name, record.local_pod_ifname),
                format!("{}:{peer_intf}", record.peer_pod),
            ],
        ))
    }
}

impl Node {
    /// A pass over the pods of a same-node wire, so that it is made as it should be now
    /// (switched or a straight veth).
    pub(super) fn repass_wire(&mut self, record: &WireRecord) -> Result<(), NodeError> {
        let mut pods = Vec::new();
        for pod in [&record.local_pod_name, &record.peer_pod] {
            if let Some(attachment) = self
                .records
                .attachment_of_pod(&record.topo_namespace, pod)?
            {
                pods.push(attachment);
            }
        }
        let done = self.pass(Scope::Pods(&pods), &HashSet::new())?;
        match done.failures.first() {
            None => Ok(()),
            Some(failure) => Err(NodeError::new(
                ErrorKind::Interface,
                format!("wire {}: {failure}", record.key()),
                done.failures.join("\n"),
            )),
        }
    }

    /// Forgets captures that ended; a same-node wire moved only for them goes back to a
    /// straight veth. Returns whether any ended.
    pub(crate) fn captures_ended(&mut self) -> bool {
        let mut ended = Vec::new();
        self.data.captures.retain(|wire, captures| {
            captures.retain(|c: &Weak<()>| c.strong_count() > 0);
            if captures.is_empty() {
                ended.push(wire.clone());
            }
            !captures.is_empty()
        });
        if ended
            .iter()
            .any(|wire| self.data.steered.contains_key(wire))
        {
            for failure in self.settle(&mut Observation::default(), false).failures {
                tracing::warn!("after a capture: {failure}");
            }
        }
        for wire in &ended {
            let switched = self.records.store.wires().ok().and_then(|wires| {
                wires.into_iter().find(|w| {
                    w.topo_namespace == wire.namespace
                        && w.link_uid == wire.link_uid
                        && matches!(w.state, WireState::Switched | WireState::Vxlan)
                        && w.has_node_end()
                })
            });
            if let Some(record) = switched {
                if let Err(e) = self.repass_wire(&record) {
                    tracing::warn!("after a capture: {}: {}", e.msg, e.details);
                }
            }
        }
        !ended.is_empty()
    }
}

impl super::DataPlane {
    /// Whether a capture of `wire` runs.
    pub(super) fn captured(&self, wire: &WireKey) -> bool {
        self.captures
            .get(wire)
            .is_some_and(|c| c.iter().any(|w| w.strong_count() > 0))
    }
}

impl super::Records {
    /// The record of the end a capture names, joined.
    fn captured_end(&self, call: &CaptureCall) -> Result<WireRecord, NodeError> {
        let not_found = |what: String| NodeError::new(ErrorKind::UnknownContainer, what, "");
        let uid = match (call.link_uid, &call.ifname) {
            (Some(uid), _) => uid,
            (None, Some(ifname)) => self
                .store
                .wires()?
                .into_iter()
                .find(|w| {
                    w.topo_namespace == call.namespace
                        && w.local_pod_name == call.pod
                        && &w.local_pod_ifname == ifname
                })
                .map(|w| w.link_uid)
                .ok_or_else(|| {
                    not_found(format!(
                        "pod {}/{} has no wire on {ifname} on this node",
                        call.namespace, call.pod
                    ))
                })?,
            (None, None) => {
                return Err(NodeError::new(
                    ErrorKind::TopologyInvalid,
                    "a capture names its link by uid or by interface",
                    "",
                ))
            }
        };
        let key = EndKey::new(&call.namespace, &call.pod, uid);
        match self.store.wire(&key)? {
            None => Err(not_found(format!("no wire {key} on this node"))),
            Some(r) if r.state == WireState::Pending => Err(NodeError::new(
                ErrorKind::Fastpath,
                format!("wire {key} is not up (its far end is not there yet): nothing crosses it"),
                "",
            )),
            Some(r) => Ok(r),
        }
    }
}
