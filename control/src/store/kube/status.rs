//! A pod's Topology status, filled as meshnet fills it: `src_ip` (the address of the
//! pod's node), `net_ns`, `container_id`, and KNE's `plumbing_error` when a link could not
//! be made. `skipped` follows meshnet too: a pod that comes up before its peer leaves
//! `{pod_name, link_id}` in the peer's status, and the peer clears its list as it comes
//! up and makes those links. Status is shared with other writers: a pod's own fields
//! are one merge patch of those fields alone (nothing read, nothing else touched, no
//! conflict possible); an entry added to a peer's `skipped` list reads the object and
//! replaces its status with that resourceVersion, retried on a conflict.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

use super::behind::AllRecords;

/// What the node says about a pod after ADD.
#[derive(Debug, Clone, PartialEq)]
pub struct PodReport {
    pub namespace: String,
    pub pod: String,
    pub net_ns: String,
    pub container_id: String,
    /// Why a link could not be made; none clears an earlier error.
    pub error: Option<String>,
    /// Links left pending because their peer pod is not up: (peer pod, uid).
    pub skipped_by_peers: Vec<(String, u64)>,
}

/// How often a write that meets a conflict is tried in all.
const ATTEMPTS: usize = 8;

/// The pod's own status after ADD, as a JSON merge patch: these fields alone, so that
/// whatever else the status holds stays as it is without a read.
pub(crate) fn own_status_patch(node_ip: &str, report: &PodReport) -> Value {
    json!({"status": {
        "src_ip": node_ip,
        "net_ns": report.net_ns,
        "container_id": report.container_id,
        // The pod made every link it could: nothing is left skipped towards it.
        "skipped": [],
        // null takes an earlier error out.
        "plumbing_error": report.error,
    }})
}

/// A peer's status with each `{pod_name, link_id}` of `entries` in its `skipped`, once;
/// `None` when every one is there already.
pub(crate) fn skipped_status(current: &Value, entries: &[Skip]) -> Option<Value> {
    let mut status = current.as_object().cloned().unwrap_or_default();
    let skipped = status.entry("skipped").or_insert_with(|| json!([]));
    let list = skipped.as_array_mut()?;
    let mut added = false;
    for (pod, uid) in entries {
        let entry = json!({"pod_name": pod, "link_id": uid});
        if !list.contains(&entry) {
            list.push(entry);
            added = true;
        }
    }
    added.then_some(Value::Object(status))
}

/// How long a `skipped` entry waits before it is written: in a lab coming up, the peer's
/// ADD is usually a moment behind, makes the link, and empties its own list; the entry
/// would be written only to be cleared (a request per pod of a ring across nodes).
const HOLD: std::time::Duration = std::time::Duration::from_secs(1);

/// `skipped` entries held back, by (namespace, peer pod): the entries and when they are
/// due. An entry toward a pod of this node is dropped when that pod reports (its report
/// empties the list); when due, an entry is written only if its link still waits for the
/// peer (`still_skipped`): a peer on another node that came up meanwhile made the link,
/// and its node's report emptied the list.
#[derive(Debug, Default)]
pub(crate) struct HeldSkips {
    held: std::collections::BTreeMap<PeerKey, (std::time::Instant, Vec<Skip>)>,
}

/// A pod's Topology: (namespace, pod).
pub(crate) type PeerKey = (String, String);
/// An entry of a `skipped` list: (pod_name, link_id).
pub(crate) type Skip = (String, u64);

impl HeldSkips {
    pub fn hold(
        &mut self,
        namespace: &str,
        peer: &str,
        pod: &str,
        uid: u64,
        now: std::time::Instant,
    ) {
        let key = (namespace.to_owned(), peer.to_owned());
        let (_, entries) = self
            .held
            .entry(key)
            .or_insert_with(|| (now + HOLD, Vec::new()));
        entries.push((pod.to_owned(), uid));
    }

    /// `pod` reported its own status, which empties its `skipped`: nothing held for it is
    /// written. Returns how many entries that spared.
    pub fn reported(&mut self, namespace: &str, pod: &str) -> usize {
        self.held
            .remove(&(namespace.to_owned(), pod.to_owned()))
            .map_or(0, |(_, entries)| entries.len())
    }

    pub fn next_due(&self) -> Option<std::time::Instant> {
        self.held.values().map(|(due, _)| *due).min()
    }

    /// The entries due by `now`, by (namespace, peer), taken out.
    pub fn take_due(&mut self, now: std::time::Instant) -> Vec<(PeerKey, Vec<Skip>)> {
        let due: Vec<PeerKey> = (self.held.iter())
            .filter(|(_, (at, _))| *at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        due.into_iter()
            .filter_map(|key| self.held.remove(&key).map(|(_, entries)| (key, entries)))
            .collect()
    }
}

/// Whether the link `uid` of pod `pod` still waits for its peer, by the node's records.
fn still_skipped(records: &AllRecords, namespace: &str, pod: &str, uid: u64) -> bool {
    let key = crate::store::EndKey::new(namespace, pod, uid);
    (records.get(namespace).and_then(|r| r.wires.get(&key)))
        .is_some_and(|w| w.state == crate::store::WireState::Pending)
}

/// Writes reports in the order they come, off the node's thread: status is a report for
/// people and KNE (and the claim rule's `src_ip`), not state the node waits for, so an ADD
/// does not wait for it either. Failures are logged.
pub(super) struct StatusWriter {
    pub(super) client: kube::Client,
    pub(super) resource: kube::api::ApiResource,
    pub(super) topologies: kube::runtime::reflector::Store<DynamicObject>,
    pub(super) node_ip: String,
    pub(super) requests: Arc<AtomicU64>,
    /// The node's records: whether a held entry's link still waits.
    pub(super) records: Arc<std::sync::Mutex<AllRecords>>,
}

impl StatusWriter {
    /// Starts the writer on `runtime`; reports sent to the answer are written one by one.
    pub(super) fn spawn(
        self,
        runtime: &tokio::runtime::Runtime,
    ) -> tokio::sync::mpsc::UnboundedSender<PodReport> {
        let (reports, mut inbox) = tokio::sync::mpsc::unbounded_channel::<PodReport>();
        runtime.spawn(async move {
            let mut held = HeldSkips::default();
            loop {
                // Far enough to mean "nothing held": the loop wakes for the next report.
                let wake = held
                    .next_due()
                    .unwrap_or_else(|| std::time::Instant::now() + HOLD * 3600);
                tokio::select! {
                    work = inbox.recv() => match work {
                        Some(report) => self.write(&report, &mut held).await,
                        None => break,
                    },
                    _ = tokio::time::sleep_until(wake.into()) => {
                        for ((namespace, peer), entries) in held.take_due(std::time::Instant::now()) {
                            let add = |current: &Value| {
                                let records = self.records.lock().expect("not poisoned");
                                let waiting: Vec<Skip> = (entries.iter())
                                    .filter(|(pod, uid)| still_skipped(&records, &namespace, pod, *uid))
                                    .cloned()
                                    .collect();
                                skipped_status(current, &waiting)
                            };
                            self.replace(&namespace, &peer, add).await;
                        }
                    }
                }
            }
        });
        reports
    }

    async fn write(&self, report: &PodReport, held: &mut HeldSkips) {
        held.reported(&report.namespace, &report.pod);
        self.patch_own(report).await;
        let now = std::time::Instant::now();
        for (peer, uid) in &report.skipped_by_peers {
            held.hold(&report.namespace, peer, &report.pod, *uid, now);
        }
    }

    /// The pod's own fields, in one request whatever else writes the status.
    async fn patch_own(&self, report: &PodReport) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &report.namespace, &self.resource);
        self.requests.fetch_add(1, Ordering::Relaxed);
        let patch = Patch::Merge(own_status_patch(&self.node_ip, report));
        match api
            .patch_status(&report.pod, &PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {}
            // No Topology for the pod (deleted meanwhile): nothing to report into.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(topology = %format!("{}/{}", report.namespace, report.pod), "writing status: {e}");
            }
        }
    }

    async fn replace(&self, namespace: &str, name: &str, change: impl Fn(&Value) -> Option<Value>) {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &self.resource);
        let count = || self.requests.fetch_add(1, Ordering::Relaxed);
        for attempt in 0..ATTEMPTS {
            // The first try starts from the watch's copy; after a conflict, from a
            // fresh read.
            let object = match (attempt == 0)
                .then(|| super::watched(&self.topologies, &self.resource, namespace, name))
                .flatten()
            {
                Some(object) => object,
                None => {
                    count();
                    match api.get_opt(name).await {
                        Ok(Some(object)) => object,
                        Ok(None) => return,
                        Err(e) => {
                            tracing::warn!(topology = %format!("{namespace}/{name}"), "reading for status: {e}");
                            return;
                        }
                    }
                }
            };
            let Some(status) = change(object.data.get("status").unwrap_or(&Value::Null)) else {
                return;
            };
            let mut updated = object;
            updated.data["status"] = status;
            let body = serde_json::to_vec(&updated).expect("serializes");
            count();
            match api.replace_status(name, &PostParams::default(), body).await {
                Ok(_) => return,
                // Someone wrote in between (or the copy was stale): read again and
                // reapply, never overwrite.
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => {
                    tracing::warn!(topology = %format!("{namespace}/{name}"), "writing status: {e}");
                    return;
                }
            }
        }
        tracing::warn!(topology = %format!("{namespace}/{name}"), "status not written: conflicts {ATTEMPTS} times");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(error: Option<&str>) -> PodReport {
        PodReport {
            namespace: "lab".into(),
            pod: "r1".into(),
            net_ns: "/var/run/netns/cni-1".into(),
            container_id: "c1".into(),
            error: error.map(str::to_owned),
            skipped_by_peers: vec![],
        }
    }

    #[test]
    fn the_own_status_patch_sets_meshnet_fields_alone_and_clears_an_old_error() {
        let patch = own_status_patch("192.0.2.1", &report(Some("link 1: EEXIST")));
        let status = patch["status"].as_object().unwrap();
        assert_eq!(status["src_ip"], "192.0.2.1");
        assert_eq!(status["net_ns"], "/var/run/netns/cni-1");
        assert_eq!(status["container_id"], "c1");
        assert_eq!(status["skipped"], json!([]));
        assert_eq!(status["plumbing_error"], "link 1: EEXIST");
        assert_eq!(status.len(), 5, "nothing else is touched: {patch}");
        assert_eq!(patch.as_object().unwrap().len(), 1);
        // JSON merge patch: null removes the field.
        let cleared = own_status_patch("192.0.2.1", &report(None));
        assert_eq!(cleared["status"]["plumbing_error"], Value::Null);
        assert!(cleared["status"]
            .as_object()
            .unwrap()
            .contains_key("plumbing_error"));
    }

    #[test]
    fn a_skip_is_listed_once() {
        let entry = [("r1".to_owned(), 4)];
        let once = skipped_status(&Value::Null, &entry).unwrap();
        assert_eq!(once["skipped"], json!([{"pod_name": "r1", "link_id": 4}]));
        assert_eq!(skipped_status(&once, &entry), None);
        let both = [("r1".to_owned(), 4), ("r3".to_owned(), 2)];
        let more = skipped_status(&once, &both).unwrap();
        assert_eq!(
            more["skipped"],
            json!([{"pod_name": "r1", "link_id": 4}, {"pod_name": "r3", "link_id": 2}])
        );
    }

    #[test]
    fn a_skip_is_written_only_while_its_link_still_waits() {
        let end = |uid: u64, state| crate::store::WireRecord {
            node_name: "n1".into(),
            link_uid: uid,
            topo_namespace: "lab".into(),
            local_pod_netns: "/var/run/netns/cni-1".into(),
            local_pod_netns_id: None,
            local_pod_name: "r1".into(),
            local_pod_ip: None,
            local_pod_ifname: format!("eth{uid}"),
            wire_ifname: String::new(),
            peer_intf_id: xwire_proto::WireId(uid),
            peer_node_ip: None,
            peer_pod: "r2".into(),
            peer_node: None,
            state,
            container_id: "c1".into(),
        };
        let wires = vec![
            end(1, crate::store::WireState::Pending),
            end(2, crate::store::WireState::Remote),
        ];
        let records = super::super::behind::by_namespace(wires, Vec::new());
        assert!(still_skipped(&records, "lab", "r1", 1));
        // The peer came up meanwhile and the link was made.
        assert!(!still_skipped(&records, "lab", "r1", 2));
        // Taken down meanwhile (DEL): nothing waits.
        assert!(!still_skipped(&records, "lab", "r1", 3));
        assert!(!still_skipped(&records, "other", "r1", 1));
    }

    #[test]
    fn a_held_skip_is_dropped_when_its_pod_reports_and_written_when_due() {
        let t0 = std::time::Instant::now();
        let mut held = HeldSkips::default();
        held.hold("lab", "r2", "r1", 0, t0);
        held.hold("lab", "r3", "r2", 1, t0);
        held.hold("lab", "r3", "r4", 2, t0);
        assert_eq!(held.next_due(), Some(t0 + HOLD));
        // r2 came up: what r1 left for it is never written.
        assert_eq!(held.reported("lab", "r2"), 1);
        assert!(held.take_due(t0 + HOLD / 2).is_empty());
        // r3 did not: both entries for it, in one write.
        let due = held.take_due(t0 + HOLD);
        assert_eq!(
            due,
            vec![(
                ("lab".to_owned(), "r3".to_owned()),
                vec![("r2".to_owned(), 1), ("r4".to_owned(), 2)]
            )]
        );
        assert_eq!(held.next_due(), None);
        assert_eq!(held.reported("lab", "r3"), 0);
    }
}
