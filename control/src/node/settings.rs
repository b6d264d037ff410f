//! A pass's second stage: what is set on wire ends and pods once the ends are there.
//! Steering same-node wires through the switch, the impairments told to ports, and the
//! pods' routes and rules are observed here, for the pods an observation opened (a
//! pass's, an ADD's or a CHECK's), planned by `plan::settings` and applied by the one
//! `apply` of `apply.rs`.

use std::collections::{BTreeMap, HashMap};

use xwire_proto::control::WireKey;

use super::plan::{self, Desired, Observed, SteeringSeen, SteeringWanted};
use super::reconcile::{Observation, OnFailure, Reconciled};
use super::steered::{max_frame, steerable};
use super::{Node, NodeError};
use crate::routing::{self, PodRoutingSpec, RoutingSeen};
use crate::store::{AttachmentKey, AttachmentRecord, EndKey, WireState};

impl Node {
    /// The settings stage of `observation`: observes, plans and applies. `clear_stale`:
    /// the routes of the pods looked at are read even where their Topology asks for
    /// none and none were given since the start (a pass over a few pods: an older
    /// Topology, or one changed while the daemon was down, may have asked for some).
    pub(super) fn settle(
        &mut self,
        observation: &mut Observation,
        clear_stale: bool,
    ) -> Reconciled {
        self.observer().observe_settings(observation, clear_stale);
        let actions = plan::settings(&observation.desired, &observation.observed);
        // Every end waiting to be told was looked at: those that still wait (their
        // remote link is not up yet) wait again (`impair`).
        self.data.impairments_unsynced.clear();
        let mut report = Reconciled {
            failures: std::mem::take(&mut observation.failures),
            ..Reconciled::default()
        };
        match self.apply(actions, observation, OnFailure::GoOn) {
            Ok(applied) => report.merge(applied),
            Err(e) => report.failures.push(format!("{}: {}", e.msg, e.details)),
        }
        for (key, spec) in &observation.desired.routing {
            if spec.is_empty() {
                self.routing.routed_pods.remove(key);
            } else {
                self.routing.routed_pods.insert(key.clone());
            }
        }
        report
    }
}

fn routes_error(pod: &str, e: impl std::fmt::Display) -> NodeError {
    NodeError::new(
        super::ErrorKind::Interface,
        format!("pod {pod}: its routes and rules"),
        e.to_string(),
    )
}

impl super::Records {
    /// Brings the routes and rules of the pod of `attachment` to what its Topology asks
    /// for (`Action::Route`): each change is reported, and what the kernel refused (a
    /// static route whose gateway is not reachable yet) is the action's failure, tried
    /// again by the next pass.
    pub(super) fn route(
        &mut self,
        observation: &Observation,
        attachment: &AttachmentKey,
        pod: &str,
        report: &mut Reconciled,
    ) -> Result<(), NodeError> {
        let spec = observation
            .desired
            .routing
            .get(attachment)
            .cloned()
            .unwrap_or_default();
        let opened;
        let ns = match observation.namespaces.get(attachment) {
            Some(ns) => ns,
            None => {
                let record = self.store.attachment(attachment)?.ok_or_else(|| {
                    NodeError::new(
                        super::ErrorKind::Store,
                        format!("no attachment {attachment}"),
                        "",
                    )
                })?;
                opened = record.open_netns().map_err(|e| routes_error(pod, e))?;
                &opened
            }
        };
        let synced = routing::sync(ns, &spec).map_err(|e| routes_error(pod, e))?;
        for change in synced.changed {
            report.changed(pod, format!("routing: {change}"));
        }
        if synced.refused.is_empty() {
            Ok(())
        } else {
            Err(NodeError::new(
                super::ErrorKind::Interface,
                "routes and rules refused",
                synced.refused.join("; "),
            ))
        }
    }
}

impl super::observe::Observer<'_> {
    /// Fills in the settings' parts of `observation` (what was there is replaced): of
    /// the pods whose namespace it opened, and of every steered or captured wire.
    pub(super) fn observe_settings(&self, observation: &mut Observation, clear_stale: bool) {
        let looked_at: Vec<&AttachmentRecord> = observation
            .desired
            .pods
            .iter()
            .map(|p| &p.attachment)
            .filter(|a| observation.namespaces.contains_key(&a.key()))
            .collect();
        let mut desired = Desired::default();
        let mut observed = Observed::default();
        let mut failures = Vec::new();
        self.observe_steering(&looked_at, &mut desired, &mut observed, &mut failures);
        self.observe_impairments(&looked_at, &mut desired, &mut observed, &mut failures);
        let routing = self.observe_routing(observation, clear_stale, &mut failures);
        let Observation {
            desired: into_desired,
            observed: into_observed,
            ..
        } = observation;
        into_desired.steering = desired.steering;
        into_desired.impairments = desired.impairments;
        into_observed.steering = observed.steering;
        into_observed.impairments = observed.impairments;
        (into_desired.routing, into_observed.routing) = routing;
        (into_desired.pool_routing, into_observed.pool_routing) = if into_observed.whole_node {
            self.routing
                .observe_pool_routing(&self.netns.node_ns, &mut failures)
        } else {
            (None, None)
        };
        observation.failures.extend(failures);
    }

    /// The same-node wires to look at: those of the pods' links impaired at either end,
    /// every steered wire, and every captured one.
    fn observe_steering(
        &self,
        pods: &[&AttachmentRecord],
        desired: &mut Desired,
        observed: &mut Observed,
        failures: &mut Vec<String>,
    ) {
        let mut candidates: BTreeMap<WireKey, String> = BTreeMap::new();
        for attachment in pods {
            let (namespace, name) = (&attachment.pod.namespace, &attachment.pod.name);
            let links = match self.records.topology(namespace, name) {
                Ok(Some(topology)) => topology.links.clone(),
                Ok(None) => continue,
                Err(e) => {
                    failures.push(format!("{namespace}/{name}: {}: {}", e.msg, e.details));
                    continue;
                }
            };
            for link in links.iter() {
                // The far end's link is looked at in the cache: its pod may be the one
                // whose link is impaired.
                let far_impaired = self
                    .records
                    .topology(namespace, &link.peer_pod)
                    .ok()
                    .flatten()
                    .is_some_and(|t| {
                        let far = t.links.iter().find(|l| l.uid == link.uid);
                        far.is_some_and(|l| l.impairment.is_some())
                    });
                if link.impairment.is_some() || far_impaired {
                    candidates
                        .entry(link.wire(namespace))
                        .or_insert_with(|| name.clone());
                }
            }
        }
        for (wire, ends) in &self.data.steered {
            candidates
                .entry(wire.clone())
                .or_insert_with(|| ends[0].1.pod.clone());
        }
        let captured: Vec<&WireKey> = self
            .data
            .captures
            .keys()
            .filter(|w| self.data.captured(w) && !candidates.contains_key(*w))
            .collect();
        if !captured.is_empty() {
            let mut found = Vec::new();
            for record in self.records.store.wires().unwrap_or_default() {
                let wire = record.wire();
                if captured.contains(&&wire) {
                    found.push((wire, record.local_pod_name));
                }
            }
            for (wire, pod) in found {
                candidates.entry(wire).or_insert(pod);
            }
        }
        for (wire, pod) in candidates {
            match self.steering_of(&wire, &pod) {
                Ok(Some((wanted, seen))) => {
                    if let Some(wanted) = wanted {
                        desired.steering.insert(wire.clone(), wanted);
                    }
                    observed.steering.insert(wire, seen);
                }
                Ok(None) => {}
                Err(e) => failures.push(format!("{}: {}", e.msg, e.details)),
            }
        }
    }

    /// What `wire`'s links ask of it and what it is, found from the end of `pod`;
    /// nothing for a wire that is not between two pods of this node and not steered.
    fn steering_of(
        &self,
        wire: &WireKey,
        pod: &str,
    ) -> Result<Option<(Option<SteeringWanted>, SteeringSeen)>, NodeError> {
        let steered = self.data.steered.get(wire);
        let own = self
            .records
            .store
            .wire(&EndKey::new(&wire.namespace, pod, wire.link_uid))?;
        let peer = match &own {
            Some(own) => self.records.store.wire(&EndKey::new(
                &wire.namespace,
                &own.peer_pod,
                wire.link_uid,
            ))?,
            None => None,
        };
        let (Some(own), Some(peer)) = (own, peer) else {
            // Its records are gone: a steered wire goes back (its ends go with them).
            return Ok(steered.map(|ends| {
                let seen = SteeringSeen {
                    pods: [ends[0].1.pod.clone(), ends[1].1.pod.clone()],
                    straight_veth: false,
                    steered: true,
                };
                (None, seen)
            }));
        };
        let links = [
            self.records
                .topology_link(&wire.namespace, &own.local_pod_name, wire.link_uid)?,
            self.records
                .topology_link(&wire.namespace, &peer.local_pod_name, wire.link_uid)?,
        ];
        let wanted = SteeringWanted {
            through_switch: links.iter().flatten().any(|l| l.impairment.is_some())
                || self.data.captured(wire),
            fits: links.iter().flatten().all(steerable),
            max_frame: links.iter().flatten().map(max_frame).max().unwrap_or(1518),
        };
        let seen = SteeringSeen {
            straight_veth: own.state == WireState::Veth && peer.state == WireState::Veth,
            pods: [own.local_pod_name, peer.local_pod_name],
            steered: steered.is_some(),
        };
        Ok(Some((Some(wanted), seen)))
    }

    /// The ends to look at: those of the pods' links, those waiting to be told, and
    /// those of the steered wires and of the wires `observe_steering` found. What each
    /// one's link asks for, and, of those with a port, what the port was told.
    fn observe_impairments(
        &self,
        pods: &[&AttachmentRecord],
        desired: &mut Desired,
        observed: &mut Observed,
        failures: &mut Vec<String>,
    ) {
        let mut ends: BTreeMap<EndKey, (WireKey, String)> = BTreeMap::new();
        let mut add = |wire: &WireKey, pod: &str| {
            let key = EndKey::new(&wire.namespace, pod, wire.link_uid);
            ends.entry(key)
                .or_insert_with(|| (wire.clone(), pod.to_owned()));
        };
        for attachment in pods {
            let (namespace, name) = (&attachment.pod.namespace, &attachment.pod.name);
            if let Ok(Some(topology)) = self.records.topology(namespace, name) {
                for link in topology.links.iter() {
                    add(&link.wire(namespace), name);
                }
            }
        }
        for key in &self.data.impairments_unsynced {
            if let Some(port) = self.data.end_port(key) {
                add(&port.wire, &port.pod);
            }
        }
        for (wire, steered) in &self.data.steered {
            for (_, port) in steered {
                add(wire, &port.pod);
            }
        }
        for (wire, seen) in &observed.steering {
            for pod in &seen.pods {
                add(wire, pod);
            }
        }
        for (key, (wire, pod)) in ends {
            let port = self.data.end_port(&key);
            if port.is_none() && !observed.steering.contains_key(&wire) {
                continue;
            }
            // The link is looked at in the cache, not copied.
            let wanted = match self.records.topology(&wire.namespace, &pod) {
                Ok(topology) => topology.and_then(|t| {
                    let link = t.links.iter().find(|l| l.uid == wire.link_uid);
                    link.and_then(|l| l.impairment)
                }),
                Err(e) => {
                    failures.push(format!("{key}: {}", e.msg));
                    continue;
                }
            };
            if let Some(port) = port {
                observed.impairments.insert(key.clone(), port.impairment);
            }
            desired.impairments.insert(key, wanted);
        }
    }

    /// The pods whose routes to look at: those whose namespace the observation opened,
    /// and the pods on this node at the other end of their links (a same-node wire is
    /// made from either end, and makes the interface a route goes through). A pod
    /// whose Topology asks for nothing, and that was given nothing since the start, is
    /// not read (so that the timer's pass and an ADD read no routes of pods without
    /// any), except with `clear_stale` for the pods looked at.
    #[allow(clippy::type_complexity)]
    fn observe_routing(
        &self,
        observation: &Observation,
        clear_stale: bool,
        failures: &mut Vec<String>,
    ) -> (
        BTreeMap<AttachmentKey, PodRoutingSpec>,
        BTreeMap<AttachmentKey, RoutingSeen>,
    ) {
        let (mut wanted, mut seen) = (BTreeMap::new(), BTreeMap::new());
        let pods = &observation.desired.pods;
        let by_pod: HashMap<(&str, &str), &AttachmentRecord> = pods
            .iter()
            .map(|p| {
                let pod = &p.attachment.pod;
                ((pod.namespace.as_str(), pod.name.as_str()), &p.attachment)
            })
            .collect();
        let mut to_read: BTreeMap<AttachmentKey, (&AttachmentRecord, bool)> = BTreeMap::new();
        for pod in pods
            .iter()
            .filter(|p| observation.namespaces.contains_key(&p.attachment.key()))
        {
            to_read.insert(pod.attachment.key(), (&pod.attachment, true));
            let namespace = pod.attachment.pod.namespace.as_str();
            for link in pod.links.iter() {
                if let Some(peer) = by_pod.get(&(namespace, link.peer_pod.as_str())) {
                    to_read.entry(peer.key()).or_insert((peer, false));
                }
            }
        }
        for (key, (attachment, looked_at)) in to_read {
            let pod = &attachment.pod;
            let label = format!("{}/{}", pod.namespace, pod.name);
            let spec = match self.routing_spec(&pod.namespace, &pod.name) {
                Ok(spec) => spec,
                Err(e) => {
                    failures.push(format!("{label}: routes: {}", e.details));
                    continue;
                }
            };
            let given = self.routing.routed_pods.contains(&key);
            if spec.is_empty() && !given && !(clear_stale && looked_at) {
                continue;
            }
            let opened;
            let ns = match observation.namespaces.get(&key) {
                Some(ns) => ns,
                None => match attachment.open_netns() {
                    Ok(ns) => {
                        opened = ns;
                        &opened
                    }
                    Err(_) => continue, // the pass that looks at that pod handles it
                },
            };
            match routing::observe(ns) {
                Ok(found) => {
                    wanted.insert(key.clone(), spec);
                    seen.insert(key, found);
                }
                Err(e) => failures.push(format!("{label}: routes: {e}")),
            }
        }
        (wanted, seen)
    }
}
