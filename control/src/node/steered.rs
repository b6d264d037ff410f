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

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use xwire_fastpath::{SteeredEnd, NATIVE_MAX_FRAME};
use xwire_proto::control::WireKey;

use super::{ErrorKind, NodeError, OpenPort};
use crate::netns::offload::{set_offload, Offload};
use crate::step_times;
use crate::store::{EndKey, WireRecord};
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

impl super::DataPlane {
    /// Steers the pair of `records` through the worker and records its two ports.
    pub(super) fn steer(
        &mut self,
        wire: &WireKey,
        records: [WireRecord; 2],
        max_frame: usize,
    ) -> Result<(), NodeError> {
        let records = &records;
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
            .steer_pair(id, ends, max_frame)
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
    pub(super) fn unsteer(&mut self, wire: &WireKey) {
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
