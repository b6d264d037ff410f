//! The node's records in a cluster, written behind. The node reads them from memory.
//! A change is made durable on the node's own disk first (the journal: a redb file under
//! the state directory, one fsync per CNI call as in the embedded store), and that is
//! when a CNI call is answered. This writer then copies the changed namespaces to the
//! node's GWireKObj objects off the node's thread: each namespace's object once for
//! every change made within a gathering window, and the next write no sooner than three
//! times the last one took. An ADD that waited for the API server took 4 to 5 requests
//! of 35 ms each (`xwire-perf kube-scale`, 150 pods); every write sends the node's whole
//! object of a namespace, so writing one per change made a lab's bring-up grow with the
//! square of its pods.
//!
//! The API server's copy is what operators, KNE and a node that lost its disk read. A
//! node that stops before its writes are done finds them in its journal at start and
//! writes them then.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use tokio::sync::Notify;

use super::gwire::{self, NamespaceRecords};
use crate::store::{AttachmentRecord, WireRecord};

/// How long a change waits for others to share its write. Each write costs the API
/// server tens of milliseconds of CPU at 150 pods (the whole status is sent, decoded,
/// validated and stored): gathering for 250 ms, a 150-pod ring's bring-up made 0.14 to
/// 0.16 writes a pod; for a second, 0.08 (`xwire-perf kube-scale`).
const GATHER: Duration = Duration::from_secs(1);
/// How long a write that failed waits before it is tried again.
const RETRY: Duration = Duration::from_secs(2);
/// How long a stopping node waits for its last writes.
const LAST_WRITES: Duration = Duration::from_secs(5);

/// The node's records, by topology namespace.
pub(super) type AllRecords = BTreeMap<String, NamespaceRecords>;

/// The node's objects, by namespace and name (`gwire::parts`).
pub(super) type Objects = BTreeMap<String, BTreeMap<String, NamespaceRecords>>;

/// The records the objects hold, each namespace's parts joined.
pub(super) fn joined(objects: &Objects) -> AllRecords {
    let mut all = AllRecords::new();
    for (namespace, parts) in objects {
        let records: &mut NamespaceRecords = all.entry(namespace.clone()).or_default();
        for part in parts.values() {
            records.wires.extend(part.wires.clone());
            records.attachments.extend(part.attachments.clone());
        }
    }
    all.retain(|_, records| !records.is_empty());
    all
}

/// Namespaces changed since the API server last got them, each with the number of its
/// latest change: a write clears a namespace only if no change came while it was sent.
#[derive(Debug, Default)]
pub(super) struct Unwritten {
    changes: BTreeMap<String, u64>,
    next: u64,
}

impl Unwritten {
    pub fn mark(&mut self, namespace: &str) {
        self.next += 1;
        self.changes.insert(namespace.to_owned(), self.next);
    }

    pub fn len(&self) -> usize {
        self.changes.len()
    }

    fn snapshot(&self) -> Vec<(String, u64)> {
        self.changes.iter().map(|(n, c)| (n.clone(), *c)).collect()
    }

    fn written(&mut self, namespace: &str, change: u64) {
        if self.changes.get(namespace) == Some(&change) {
            self.changes.remove(namespace);
        }
    }
}

/// The records grouped as the objects hold them: wires by their topology namespace,
/// attachments by their pod's.
pub(super) fn by_namespace(
    wires: Vec<WireRecord>,
    attachments: Vec<AttachmentRecord>,
) -> AllRecords {
    let mut all = AllRecords::new();
    for w in wires {
        all.entry(w.topo_namespace.clone())
            .or_default()
            .wires
            .insert(w.key(), w);
    }
    for a in attachments {
        all.entry(a.pod.namespace.clone())
            .or_default()
            .attachments
            .insert(a.key(), a);
    }
    all
}

/// What a node starts from: its journal's records when it has one (written before the
/// API server's, so never behind them), else the API server's (a node whose disk was
/// emptied, or its first start with a journal). With them, the namespaces where the API
/// server's copy differs: changes that were not written before the node stopped.
pub(super) fn starting_records(
    journal: Option<AllRecords>,
    api: &AllRecords,
) -> (AllRecords, Vec<String>) {
    let Some(journal) = journal else {
        return (api.clone(), Vec::new());
    };
    let namespaces: BTreeSet<&String> = journal.keys().chain(api.keys()).collect();
    let differ = namespaces
        .into_iter()
        .filter(|ns| journal.get(*ns) != api.get(*ns))
        .cloned()
        .collect();
    (journal, differ)
}

/// What the writer shares with the store.
#[derive(Clone)]
pub(super) struct Shared {
    pub records: Arc<Mutex<AllRecords>>,
    pub unwritten: Arc<Mutex<Unwritten>>,
    pub requests: Arc<AtomicU64>,
}

/// Writes the node's GWireKObj objects as its records change.
pub(super) struct Writer {
    pub client: kube::Client,
    pub resource: ApiResource,
    pub node: String,
    /// The uid of the node's Node object, the owner of its objects.
    pub node_uid: Option<String>,
    pub shared: Shared,
    /// What the API server holds: as read at start, then as written.
    pub written: Objects,
}

/// The running writer: `wake` after a change; `stop` for the last writes.
pub(super) struct Running {
    wake: Arc<Notify>,
    stop: Arc<Notify>,
    done: tokio::task::JoinHandle<()>,
}

impl Running {
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Asks for the last writes and waits for them, for at most `LAST_WRITES`.
    pub fn stop(self, runtime: &tokio::runtime::Runtime) {
        self.stop.notify_one();
        let done = runtime.block_on(async { tokio::time::timeout(LAST_WRITES, self.done).await });
        if done.is_err() {
            tracing::warn!("stopping: GWireKObj writes not done in {LAST_WRITES:?}; the journal keeps them for the next start");
        }
    }
}

impl Writer {
    pub fn spawn(self, runtime: &tokio::runtime::Runtime) -> Running {
        let wake = Arc::new(Notify::new());
        let stop = Arc::new(Notify::new());
        let done = runtime.spawn(self.run(wake.clone(), stop.clone()));
        Running { wake, stop, done }
    }

    async fn run(mut self, wake: Arc<Notify>, stop: Arc<Notify>) {
        let mut gap = GATHER;
        loop {
            let stopping = tokio::select! {
                _ = wake.notified() => false,
                _ = stop.notified() => true,
            };
            let stopping = stopping
                || tokio::select! {
                    _ = tokio::time::sleep(gap) => false,
                    _ = stop.notified() => true,
                };
            let started = Instant::now();
            let all_written = self.write_changed().await;
            if stopping {
                return;
            }
            // The API server spends on this writer at most about a quarter of the time,
            // however large the objects grow (its time for a write grows with the
            // object: the whole status is sent, decoded, validated and stored).
            gap = GATHER.max(started.elapsed() * 3);
            if !all_written {
                tokio::select! {
                    _ = tokio::time::sleep(RETRY) => {}
                    _ = stop.notified() => { self.write_changed().await; return; }
                }
                wake.notify_one();
            }
        }
    }

    /// Writes each namespace changed since its last write; false if one failed (it stays
    /// unwritten).
    async fn write_changed(&mut self) -> bool {
        let changed = self
            .shared
            .unwritten
            .lock()
            .expect("not poisoned")
            .snapshot();
        let mut all_written = true;
        for (namespace, change) in changed {
            let now = (self.shared.records.lock().expect("not poisoned"))
                .get(&namespace)
                .cloned()
                .unwrap_or_default();
            if self.write_namespace(&namespace, &now).await {
                (self.shared.unwritten.lock().expect("not poisoned")).written(&namespace, change);
            } else {
                all_written = false;
            }
        }
        all_written
    }

    /// Writes the objects of `namespace` that differ from `records`' parts, and deletes
    /// those it no longer needs; false if one failed.
    async fn write_namespace(&mut self, namespace: &str, records: &NamespaceRecords) -> bool {
        let wanted = match records.is_empty() {
            true => Vec::new(),
            false => gwire::parts(&self.node, namespace, records),
        };
        let held = self.written.remove(namespace).unwrap_or_default();
        let mut now_held = BTreeMap::new();
        let mut all_written = true;
        for (name, part) in &wanted {
            let before = held.get(name);
            let result = match before == Some(part) {
                true => Ok(()),
                false => self.apply(namespace, name, before, part).await,
            };
            match result {
                Ok(()) => {
                    now_held.insert(name.clone(), part.clone());
                }
                Err(e) => {
                    all_written = false;
                    self.failed(namespace, name, &e);
                    if let Some(before) = before {
                        now_held.insert(name.clone(), before.clone());
                    }
                }
            }
        }
        for (name, part) in held {
            if wanted.iter().any(|(wanted, _)| *wanted == name) {
                continue;
            }
            if let Err(e) = self.delete(namespace, &name).await {
                all_written = false;
                self.failed(namespace, &name, &e);
                now_held.insert(name, part);
            }
        }
        if !now_held.is_empty() {
            self.written.insert(namespace.to_owned(), now_held);
        }
        all_written
    }

    fn failed(&self, namespace: &str, name: &str, e: &kube::Error) {
        tracing::warn!("writing GWireKObj {namespace}/{name}: {e} (tried again in {RETRY:?})");
    }

    fn count(&self) {
        self.shared.requests.fetch_add(1, Ordering::Relaxed);
    }

    fn api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), namespace, &self.resource)
    }

    /// Writes object `name` of `namespace` as `records`: applied (created if missing)
    /// when it is new or its uids change, then its status.
    async fn apply(
        &self,
        namespace: &str,
        name: &str,
        before: Option<&NamespaceRecords>,
        records: &NamespaceRecords,
    ) -> Result<(), kube::Error> {
        let api = self.api(namespace);
        let params = PatchParams::apply(&format!("xwired-{}", self.node));
        // Most writes change only the status (a wire joined, an attachment added).
        if before.is_none_or(|b| b.uids() != records.uids()) {
            let object = gwire::object(
                name,
                &self.node,
                self.node_uid.as_deref(),
                namespace,
                records,
            );
            self.count();
            api.patch(name, &params, &Patch::Apply(&object)).await?;
        }
        let status = gwire::status(name, namespace, records);
        self.count();
        api.patch_status(name, &params, &Patch::Apply(&status))
            .await
            .map(|_| ())
    }

    async fn delete(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        self.count();
        match self
            .api(namespace)
            .delete(name, &DeleteParams::default())
            .await
        {
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xwire_proto::local::PodRef;

    fn attachment(namespace: &str, pod: &str) -> AttachmentRecord {
        AttachmentRecord {
            container_id: format!("c-{pod}"),
            ifname: "eth0".into(),
            network: "kindnet".into(),
            pod: PodRef {
                namespace: namespace.into(),
                name: pod.into(),
            },
            netns: format!("/var/run/netns/{pod}"),
            netns_id: None,
        }
    }

    fn records(pods: &[(&str, &str)]) -> AllRecords {
        by_namespace(
            Vec::new(),
            pods.iter().map(|(ns, pod)| attachment(ns, pod)).collect(),
        )
    }

    #[test]
    fn a_node_starts_from_its_journal_and_writes_where_the_api_server_is_behind() {
        let api = records(&[("lab", "r1"), ("old", "r9")]);
        let journal = records(&[("lab", "r1"), ("lab", "r2"), ("new", "r3")]);
        let (start, differ) = starting_records(Some(journal.clone()), &api);
        assert_eq!(start, journal);
        // `lab` gained r2, `new` is not in the API server, `old` went while the node
        // was not writing.
        assert_eq!(differ, ["lab", "new", "old"]);
        let (start, differ) = starting_records(Some(api.clone()), &api);
        assert_eq!((start, differ.len()), (api.clone(), 0));
    }

    #[test]
    fn a_node_without_a_journal_starts_from_the_api_server() {
        let api = records(&[("lab", "r1")]);
        let (start, differ) = starting_records(None, &api);
        assert_eq!(start, api);
        assert!(differ.is_empty());
        // An empty journal is a node with nothing: the API server's objects are stale.
        let (start, differ) = starting_records(Some(AllRecords::new()), &api);
        assert!(start.is_empty());
        assert_eq!(differ, ["lab"]);
    }

    #[test]
    fn a_change_made_while_its_namespace_is_written_stays_unwritten() {
        let mut unwritten = Unwritten::default();
        unwritten.mark("lab");
        unwritten.mark("other");
        let sent = unwritten.snapshot();
        // A change to `lab` while the write of the snapshot was under way.
        unwritten.mark("lab");
        for (namespace, change) in sent {
            unwritten.written(&namespace, change);
        }
        assert_eq!(unwritten.len(), 1);
        assert_eq!(unwritten.snapshot()[0].0, "lab");
    }

    #[test]
    fn records_are_grouped_by_the_namespace_of_their_pod() {
        let all = records(&[("lab", "r1"), ("lab", "r2"), ("b", "r1")]);
        assert_eq!(all.keys().collect::<Vec<_>>(), ["b", "lab"]);
        assert_eq!(all["lab"].attachments.len(), 2);
    }
}
