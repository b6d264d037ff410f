//! Same-node wires steered through the switch in place. A wire between two pods of this
//! node is a veth straight between them; while it is impaired (either way) or captured,
//! the worker steers the pair's frames through the switch without remaking it
//! (`xwire_fastpath::steered_port` says how), so the move on and off loses no frame and
//! the pods' interfaces, addresses and routes stay as they are. The store keeps no trace
//! of it: steering is derived from the topology and the captures, and a daemon that dies
//! leaves a plain pair, which the first pass after the restart steers again.
//!
//! Frames larger than native XDP on a veth takes (jumbo MTUs) cannot be steered: such a
//! wire is remade through the node instead (`switched.rs`).

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use xwire_fastpath::{SteeredEnd, NATIVE_MAX_FRAME};
use xwire_proto::control::WireKey;

use super::plan::Desired;
use super::{ErrorKind, Node, NodeError, OpenPort};
use crate::netns::offload::{set_offload, Offload};
use crate::step_times;
use crate::store::{EndKey, WireRecord, WireState};
use crate::topology::LinkSpec;

/// How long taking a wire off the switch path waits for the frames its delay holds.
const RELEASE_LIMIT: Duration = Duration::from_secs(5);

/// The two ends of a steered wire: each pod's record key and port.
pub(super) type SteeredPorts = [(EndKey, OpenPort); 2];

/// The largest frame of a wire of `link`: its MTU, an Ethernet header and a VLAN tag.
pub(super) fn max_frame(link: &LinkSpec) -> usize {
    link.mtu.unwrap_or(1500) as usize + 18
}

/// Whether a same-node wire of `link` can be steered in place (its frames fit native XDP
/// on a veth); a larger one is remade through the node.
pub(super) fn steerable(link: &LinkSpec) -> bool {
    max_frame(link) <= NATIVE_MAX_FRAME
}

/// A wire to steer: its two records (the one of the pod it was found by first) and the
/// largest frame it carries.
struct ToSteer {
    records: [WireRecord; 2],
    max_frame: usize,
}

fn steer_error(wire: &WireKey, e: impl std::fmt::Display) -> NodeError {
    NodeError::new(
        ErrorKind::Fastpath,
        format!(
            "steer wire {} of {} through the switch",
            wire.link_uid, wire.namespace
        ),
        e.to_string(),
    )
}

impl Node {
    /// Steers every same-node veth wire that should go through the switch (impaired or
    /// captured) and is not, and puts back every steered wire that should not any more.
    /// Looks at the impaired links of `desired`, the captures, and the wires steered now.
    /// Returns the failures, one line each.
    pub(super) fn sync_steering(&mut self, desired: &Desired) -> Vec<String> {
        let mut candidates: HashSet<(WireKey, String)> = HashSet::new();
        for pod in &desired.pods {
            for link in pod.links.iter().filter(|l| l.impairment.is_some()) {
                let wire = link.wire(&pod.attachment.pod.namespace);
                candidates.insert((wire, pod.attachment.pod.name.clone()));
            }
        }
        for (wire, ends) in &self.steered {
            candidates.insert((wire.clone(), ends[0].1.pod.clone()));
        }
        let captured: Vec<WireKey> = self
            .captures
            .keys()
            .filter(|w| self.captured(w) && !self.steered.contains_key(*w))
            .cloned()
            .collect();
        if !captured.is_empty() {
            for record in self.store.wires().unwrap_or_default() {
                let wire = record.wire();
                if captured.contains(&wire) {
                    candidates.insert((wire, record.local_pod_name));
                }
            }
        }
        let mut failures = Vec::new();
        let mut seen = HashSet::new();
        for (wire, pod) in candidates {
            if !seen.insert(wire.clone()) {
                continue;
            }
            let wanted = match self.steering_wanted(&wire, &pod) {
                Ok(wanted) => wanted,
                Err(e) => {
                    failures.push(format!("{}: {}", e.msg, e.details));
                    continue;
                }
            };
            let result = match (wanted, self.steered.contains_key(&wire)) {
                (Some(to_steer), false) => self.steer(&wire, &to_steer),
                (None, true) => {
                    self.unsteer(&wire);
                    Ok(())
                }
                _ => Ok(()),
            };
            if let Err(e) = result {
                failures.push(format!("{}: {}", e.msg, e.details));
            }
        }
        failures
    }

    /// The two records of `wire` (the one of `pod` first) when the wire should be
    /// steered now: a straight veth on this node, impaired either way or captured, of a
    /// size that can be steered.
    fn steering_wanted(&self, wire: &WireKey, pod: &str) -> Result<Option<ToSteer>, NodeError> {
        let Some(own) = self
            .store
            .wire(&EndKey::new(&wire.namespace, pod, wire.link_uid))?
        else {
            return Ok(None);
        };
        let Some(peer) =
            self.store
                .wire(&EndKey::new(&wire.namespace, &own.peer_pod, wire.link_uid))?
        else {
            return Ok(None);
        };
        if own.state != WireState::Veth || peer.state != WireState::Veth {
            return Ok(None);
        }
        let links = [
            self.topology_link(&wire.namespace, &own.local_pod_name, wire.link_uid)?,
            self.topology_link(&wire.namespace, &peer.local_pod_name, wire.link_uid)?,
        ];
        let impaired = links.iter().flatten().any(|l| l.impairment.is_some());
        let fits = links.iter().flatten().all(steerable);
        let max_frame = links.iter().flatten().map(max_frame).max().unwrap_or(1518);
        Ok(
            ((impaired || self.captured(wire)) && fits).then_some(ToSteer {
                records: [own, peer],
                max_frame,
            }),
        )
    }

    /// Steers the pair of `records` through the worker and records its two ports.
    fn steer(&mut self, wire: &WireKey, to_steer: &ToSteer) -> Result<(), NodeError> {
        let records = &to_steer.records;
        let Some(fastpath) = &self.fastpath else {
            return Err(NodeError::new(
                ErrorKind::Fastpath,
                format!(
                    "wire {} of {} is impaired or captured, which needs the node's fast path",
                    wire.link_uid, wire.namespace
                ),
                "the fast path starts with the node's certificates ([certs] in xwired.toml, or the cluster's CA)",
            ));
        };
        let mut ends = Vec::with_capacity(2);
        for record in records {
            let ns = record
                .open_local_pod_netns()
                .map_err(|e| steer_error(wire, e))?;
            // The switch forwards what the pod sent as it is: a checksum left to an
            // offload would never be filled in.
            let ifname = record.local_pod_ifname.clone();
            ns.run("turn tx checksum off", || {
                set_offload(&ifname, Offload::TxChecksum, false)
            })
            .map_err(|e| steer_error(wire, e))?
            .map_err(|e| steer_error(wire, e))?;
            let netns = OwnedFd::from(ns.file().try_clone().map_err(|e| steer_error(wire, e))?);
            ends.push(SteeredEnd {
                netns,
                ifname: record.local_pod_ifname.clone(),
            });
        }
        let ends: [SteeredEnd; 2] = ends.try_into().expect("two ends");
        let id = wire.id();
        let ports = fastpath
            .worker_of(id)
            .steer_pair(id, ends, to_steer.max_frame)
            .map_err(|e| steer_error(wire, e))?
            .ports;
        let end = |i: usize| {
            (
                records[i].key(),
                OpenPort {
                    id: ports[i].id,
                    wire: wire.clone(),
                    wire_id: id,
                    pod: records[i].local_pod_name.clone(),
                    impairment: None,
                },
            )
        };
        self.steered.insert(wire.clone(), [end(0), end(1)]);
        tracing::info!(
            namespace = wire.namespace,
            uid = wire.link_uid,
            "wire steered through the switch"
        );
        Ok(())
    }

    /// Takes `wire` off the switch path: its impairments cleared, the frames its delay
    /// holds sent on (for up to `RELEASE_LIMIT`), then its ports closed together, which
    /// forwards what was in flight. Nothing is lost.
    fn unsteer(&mut self, wire: &WireKey) {
        let Some(ends) = self.steered.remove(wire) else {
            return;
        };
        let Some(fastpath) = &self.fastpath else {
            return;
        };
        let id = wire.id();
        for (_, port) in &ends {
            let _ = fastpath.worker_of(id).set_impairment(id, port.id, None);
        }
        let since = Instant::now();
        while since.elapsed() < RELEASE_LIMIT
            && ends.iter().any(|(_, port)| {
                fastpath
                    .worker_of(id)
                    .held_frames(id, port.id)
                    .is_ok_and(|held| held > 0)
            })
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        if let Err(e) = fastpath
            .worker_of(id)
            .remove_ports(&[ends[0].1.id, ends[1].1.id])
        {
            tracing::warn!(
                namespace = wire.namespace,
                uid = wire.link_uid,
                "take the wire off the switch path: {e}"
            );
        }
        tracing::info!(
            namespace = wire.namespace,
            uid = wire.link_uid,
            "wire back to a straight veth"
        );
    }

    /// Stops steering `wire` at once, for a wire being taken apart: what it holds goes.
    pub(super) fn forget_steering(&mut self, wire: &WireKey) {
        if let (Some(ends), Some(fastpath)) = (self.steered.remove(wire), &self.fastpath) {
            let id = wire.id();
            step_times::time(step_times::PORT_CLOSE, || {
                let _ = fastpath
                    .worker_of(id)
                    .remove_ports(&[ends[0].1.id, ends[1].1.id]);
            });
        }
    }

    /// The port of a wire end with one (remote, switched or steered), by record key.
    pub(super) fn end_port(&self, key: &EndKey) -> Option<&OpenPort> {
        self.ports.get(key).or_else(|| {
            self.steered
                .values()
                .flatten()
                .find(|(k, _)| k == key)
                .map(|(_, port)| port)
        })
    }

    pub(super) fn end_port_mut(&mut self, key: &EndKey) -> Option<&mut OpenPort> {
        if self.ports.contains_key(key) {
            return self.ports.get_mut(key);
        }
        self.steered
            .values_mut()
            .flatten()
            .find(|(k, _)| k == key)
            .map(|(_, port)| port)
    }
}
