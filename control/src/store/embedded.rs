//! The embedded backend: one redb file under the daemon's state directory, with a table
//! per record kind, keyed by the record's key and holding its JSON (readable with any
//! redb tool, and tolerant of fields added later).
//!
//! Reads are served from a decoded copy of every record kept in memory. The daemon is
//! the file's only user (redb locks it), so the copy is what the file says plus the batch
//! under way. Before it, each read of all records copied every value out of the file and
//! decoded its JSON: a node with 1,000 wires spent most of an ADD doing that, several
//! times per call, which made a lab's bring-up quadratic in its pods.

// redb's error type is large; it is returned only on a failing disk, far from any hot
// path, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use redb::{Database, ReadableTable, TableDefinition, TableHandle};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{AttachmentRecord, StoreError, TopologySource, WireRecord, WireStore};
use crate::step_times;
use crate::store::{AttachmentKey, EndKey};
use crate::topology::{pod_key, Topology};

const WIRES: TableDefinition<&str, &[u8]> = TableDefinition::new("wires");
const ATTACHMENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("attachments");
const TOPOLOGIES: TableDefinition<&str, &[u8]> = TableDefinition::new("topologies");

/// The file's name inside the state directory.
pub(crate) const DB_FILE: &str = "xwire.redb";

pub struct EmbeddedStore {
    db: Database,
    path: PathBuf,
    /// Between `begin_batch` and `end_batch`: the writes made so far, not yet in the
    /// file, which reads see. One transaction (one fsync) per CNI call instead of one per
    /// record.
    batch: Mutex<Option<Batch>>,
    mirror: Mutex<Mirror>,
}

/// Every record, decoded: the file's, with the batch under way applied.
#[derive(Default)]
struct Mirror {
    wires: BTreeMap<String, WireRecord>,
    attachments: BTreeMap<String, AttachmentRecord>,
    /// The keys of each pod's attachments, by `pod_key`: finding a pod's attachment
    /// (every ADD does, and every pass for the peers of the pods it looks at) went
    /// through all of a node's thousands.
    attachments_by_pod: BTreeMap<String, BTreeSet<String>>,
    topologies: BTreeMap<String, Topology>,
}

/// A kind of record: its table, and where the mirror keeps it.
trait Kind: Serialize + DeserializeOwned + Clone {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]>;
    fn mirrored(mirror: &mut Mirror) -> &mut BTreeMap<String, Self>;
    /// Keeps the mirror's indexes of this kind, after `key` went from `old` to `new`.
    fn reindex(_mirror: &mut Mirror, _key: &str, _old: Option<&Self>, _new: Option<&Self>) {}
}

impl Kind for WireRecord {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = WIRES;
    fn mirrored(mirror: &mut Mirror) -> &mut BTreeMap<String, Self> {
        &mut mirror.wires
    }
}

impl Kind for AttachmentRecord {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = ATTACHMENTS;
    fn mirrored(mirror: &mut Mirror) -> &mut BTreeMap<String, Self> {
        &mut mirror.attachments
    }
    fn reindex(mirror: &mut Mirror, key: &str, old: Option<&Self>, new: Option<&Self>) {
        if let Some(old) = old {
            let pod = pod_key(&old.pod.namespace, &old.pod.name);
            if let Some(keys) = mirror.attachments_by_pod.get_mut(&pod) {
                keys.remove(key);
                if keys.is_empty() {
                    mirror.attachments_by_pod.remove(&pod);
                }
            }
        }
        if let Some(new) = new {
            mirror
                .attachments_by_pod
                .entry(pod_key(&new.pod.namespace, &new.pod.name))
                .or_default()
                .insert(key.to_owned());
        }
    }
}

impl Kind for Topology {
    const TABLE: TableDefinition<'static, &'static str, &'static [u8]> = TOPOLOGIES;
    fn mirrored(mirror: &mut Mirror) -> &mut BTreeMap<String, Self> {
        &mut mirror.topologies
    }
}

/// Writes kept for the batch's end: per table, each key's JSON, or `None` for removed.
#[derive(Default)]
struct Batch {
    tables: BTreeMap<String, BTreeMap<String, Option<Vec<u8>>>>,
}

/// The tables, by name (a `TableDefinition` cannot be a map key).
fn table_named(name: &str) -> TableDefinition<'static, &'static str, &'static [u8]> {
    match name {
        "wires" => WIRES,
        "attachments" => ATTACHMENTS,
        _ => TOPOLOGIES,
    }
}

impl EmbeddedStore {
    /// Opens (or creates) `DB_FILE` in `state_dir`, creating the directory too. A file
    /// that exists but cannot be read is an error, and is left exactly as it is.
    pub fn open(state_dir: &Path) -> Result<EmbeddedStore, StoreError> {
        let path = state_dir.join(DB_FILE);
        let fail = |message: String| StoreError::Backend {
            path: path.display().to_string(),
            message,
        };
        std::fs::create_dir_all(state_dir).map_err(|e| fail(e.to_string()))?;
        if path.exists() {
            return EmbeddedStore::open_existing(state_dir);
        }
        let db = Database::create(&path).map_err(|e| fail(e.to_string()))?;
        EmbeddedStore::with_tables(db, path)
    }

    /// Opens the store in `state_dir`, which must exist; refused while another process
    /// (a running daemon) holds it. Every record is read once, so that a store that
    /// cannot be read fails here rather than part-way through a start.
    pub fn open_existing(state_dir: &Path) -> Result<EmbeddedStore, StoreError> {
        let path = state_dir.join(DB_FILE);
        let fail = |message: String| StoreError::Backend {
            path: path.display().to_string(),
            message,
        };
        let metadata = std::fs::metadata(&path).map_err(|e| fail(e.to_string()))?;
        if !metadata.is_file() {
            return Err(fail("not a regular file".into()));
        }
        // Root reads and writes whatever the mode says; an owner without read and write
        // permission on its own store means someone meant to keep the daemon out.
        let mode = metadata.permissions().mode() & 0o777;
        if mode & 0o600 != 0o600 {
            return Err(fail(format!(
                "its mode is {mode:03o}, and the daemon needs to read and write it (chmod 600 to allow)"
            )));
        }
        // `Database::open`, never `create`: a file redb cannot read is reported, not
        // replaced.
        let db = Database::open(&path).map_err(|e| fail(e.to_string()))?;
        let store = EmbeddedStore::with_tables(db, path)?;
        {
            let mut mirror = store.mirror();
            mirror.wires = store.load()?;
            let attachments: BTreeMap<String, AttachmentRecord> = store.load()?;
            for (key, attachment) in &attachments {
                AttachmentRecord::reindex(&mut mirror, key, None, Some(attachment));
            }
            mirror.attachments = attachments;
            mirror.topologies = store.load()?;
        }
        Ok(store)
    }

    fn with_tables(db: Database, path: PathBuf) -> Result<EmbeddedStore, StoreError> {
        let store = EmbeddedStore {
            db,
            path,
            batch: Mutex::new(None),
            mirror: Mutex::new(Mirror::default()),
        };
        // Reads of a table that was never written fail, so make all of them now.
        store.write(|tx| {
            tx.open_table(WIRES)?;
            tx.open_table(ATTACHMENTS)?;
            tx.open_table(TOPOLOGIES)?;
            Ok(())
        })?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn fail(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError::Backend {
            path: self.path.display().to_string(),
            message: e.to_string(),
        }
    }

    fn write(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<(), redb::Error>,
    ) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(|e| self.fail(e))?;
        f(&tx).map_err(|e| self.fail(e))?;
        tx.commit().map_err(|e| self.fail(e))
    }

    /// The batch under way, if any.
    fn batch(&self) -> std::sync::MutexGuard<'_, Option<Batch>> {
        // A panic while holding it left plain data, still usable.
        self.batch.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn mirror(&self) -> std::sync::MutexGuard<'_, Mirror> {
        // A panic while holding it left plain data, still usable.
        self.mirror.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn put<T: Kind>(&self, entries: &[(String, &T)]) -> Result<(), StoreError> {
        let table = T::TABLE;
        let encoded: Vec<(&str, Vec<u8>)> = entries
            .iter()
            .map(|(key, value)| {
                let json = serde_json::to_vec(value).expect("records serialize to JSON");
                (key.as_str(), json)
            })
            .collect();
        if let Some(batch) = self.batch().as_mut() {
            let pending = batch.tables.entry(table.name().to_owned()).or_default();
            for (key, json) in encoded {
                pending.insert(key.to_owned(), Some(json));
            }
        } else {
            step_times::time(step_times::STORE_WRITE, || {
                self.write(|tx| {
                    let mut t = tx.open_table(table)?;
                    for (key, json) in &encoded {
                        t.insert(*key, json.as_slice())?;
                    }
                    Ok(())
                })
            })?;
        }
        let mut mirror = self.mirror();
        for (key, value) in entries {
            let old = T::mirrored(&mut mirror).insert(key.clone(), (*value).clone());
            T::reindex(&mut mirror, key, old.as_ref(), Some(value));
        }
        Ok(())
    }

    fn remove<T: Kind>(&self, key: &str) -> Result<bool, StoreError> {
        let table = T::TABLE;
        if let Some(batch) = self.batch().as_mut() {
            let pending = batch.tables.entry(table.name().to_owned()).or_default();
            pending.insert(key.to_owned(), None);
        } else {
            step_times::time(step_times::STORE_WRITE, || {
                self.write(|tx| {
                    tx.open_table(table)?.remove(key)?;
                    Ok(())
                })
            })?;
        }
        let mut mirror = self.mirror();
        let old = T::mirrored(&mut mirror).remove(key);
        T::reindex(&mut mirror, key, old.as_ref(), None);
        Ok(old.is_some())
    }

    fn get<T: Kind>(&self, key: &str) -> Option<T> {
        T::mirrored(&mut self.mirror()).get(key).cloned()
    }

    fn all<T: Kind>(&self) -> Vec<T> {
        T::mirrored(&mut self.mirror()).values().cloned().collect()
    }

    /// The JSON of `key` in the file.
    #[cfg(test)]
    fn stored(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        step_times::time(step_times::STORE_READ, || {
            let tx = self.db.begin_read().map_err(|e| self.fail(e))?;
            let t = tx.open_table(table).map_err(|e| self.fail(e))?;
            let value = t.get(key).map_err(|e| self.fail(e))?;
            Ok(value.map(|v| v.value().to_vec()))
        })
    }

    /// Every record of a kind in the file, decoded (at open: the mirror's start).
    fn load<T: Kind>(&self) -> Result<BTreeMap<String, T>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.fail(e))?;
        let t = tx.open_table(T::TABLE).map_err(|e| self.fail(e))?;
        let mut out = BTreeMap::new();
        for entry in t.iter().map_err(|e| self.fail(e))? {
            let (key, value) = entry.map_err(|e| self.fail(e))?;
            let key = key.value().to_owned();
            let record = decode(&key, value.value())?;
            out.insert(key, record);
        }
        Ok(out)
    }

    /// Writes the batch's changes in one transaction. On failure they stay pending, for
    /// the next batch's end.
    fn commit_batch(&self) -> Result<(), StoreError> {
        let mut guard = self.batch();
        let Some(batch) = guard.as_mut() else {
            return Ok(());
        };
        if batch.tables.values().all(|t| t.is_empty()) {
            *guard = None;
            return Ok(());
        }
        self.write(|tx| {
            for (name, pending) in &batch.tables {
                let mut t = tx.open_table(table_named(name))?;
                for (key, json) in pending {
                    match json {
                        Some(json) => t.insert(key.as_str(), json.as_slice())?,
                        None => t.remove(key.as_str())?,
                    };
                }
            }
            Ok(())
        })?;
        *guard = None;
        Ok(())
    }
}

fn decode<T: DeserializeOwned>(key: &str, json: &[u8]) -> Result<T, StoreError> {
    serde_json::from_slice(json).map_err(|e| StoreError::Corrupt {
        key: key.into(),
        message: e.to_string(),
    })
}

impl WireStore for EmbeddedStore {
    fn put_wire(&self, wire: &WireRecord) -> Result<(), StoreError> {
        self.put(&[(wire.key().to_string(), wire)])
    }

    fn wire(&self, key: &EndKey) -> Result<Option<WireRecord>, StoreError> {
        Ok(self.get(key.as_str()))
    }

    fn remove_wire(&self, key: &EndKey) -> Result<bool, StoreError> {
        self.remove::<WireRecord>(key.as_str())
    }

    fn wires(&self) -> Result<Vec<WireRecord>, StoreError> {
        Ok(self.all())
    }

    fn wires_of_pod(&self, namespace: &str, pod: &str) -> Result<Vec<WireRecord>, StoreError> {
        let prefix = EndKey::prefix_of_pod(namespace, pod);
        let mirror = self.mirror();
        Ok(mirror
            .wires
            .range(prefix.clone()..)
            .take_while(|(key, _)| key.starts_with(&prefix))
            .map(|(_, wire)| wire.clone())
            .collect())
    }

    fn put_attachment(&self, attachment: &AttachmentRecord) -> Result<(), StoreError> {
        self.put(&[(attachment.key().to_string(), attachment)])
    }

    fn attachment(&self, key: &AttachmentKey) -> Result<Option<AttachmentRecord>, StoreError> {
        Ok(self.get(key.as_str()))
    }

    fn attachment_of_pod(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<Option<AttachmentRecord>, StoreError> {
        let mirror = self.mirror();
        Ok(mirror
            .attachments_by_pod
            .get(&pod_key(namespace, pod))
            .and_then(|keys| keys.first())
            .and_then(|key| mirror.attachments.get(key))
            .cloned())
    }

    fn remove_attachment(&self, key: &AttachmentKey) -> Result<bool, StoreError> {
        self.remove::<AttachmentRecord>(key.as_str())
    }

    fn attachments(&self) -> Result<Vec<AttachmentRecord>, StoreError> {
        Ok(self.all())
    }

    fn begin_batch(&self) {
        let mut batch = self.batch();
        // A batch whose writing failed is still pending: its changes go with this one.
        if batch.is_none() {
            *batch = Some(Batch::default());
        }
    }

    fn end_batch(&self) -> Result<(), StoreError> {
        self.commit_batch()
    }
}

impl TopologySource for EmbeddedStore {
    fn topology(&self, namespace: &str, name: &str) -> Result<Option<Topology>, StoreError> {
        Ok(self.get(&pod_key(namespace, name)))
    }

    fn topologies(&self) -> Result<Vec<Topology>, StoreError> {
        Ok(self.all())
    }

    fn put_topologies(&self, topologies: &[Topology]) -> Result<(), StoreError> {
        let entries: Vec<(String, &Topology)> = topologies.iter().map(|t| (t.key(), t)).collect();
        self.put(&entries)
    }

    fn remove_topology(&self, namespace: &str, name: &str) -> Result<bool, StoreError> {
        self.remove::<Topology>(&pod_key(namespace, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::WireState;

    fn temp_dir(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xwire-store-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn wire(uid: u64) -> WireRecord {
        WireRecord {
            node_name: "n1".into(),
            link_uid: uid,
            topo_namespace: "lab".into(),
            local_pod_netns: "/run/netns/r1".into(),
            local_pod_netns_id: None,
            local_pod_name: "r1".into(),
            local_pod_ip: Some("10.0.0.1/30".into()),
            local_pod_ifname: "eth1".into(),
            wire_ifname: "xw0123".into(),
            peer_intf_id: xwire_proto::WireId(7),
            peer_node_ip: Some("192.0.2.2:7470".into()),
            peer_pod: "r2".into(),
            peer_node: Some("n2".into()),
            state: WireState::Remote,
            container_id: "c1".into(),
        }
    }

    #[test]
    fn records_survive_reopening_the_file() {
        let dir = temp_dir("reopen");
        {
            let store = EmbeddedStore::open(&dir).unwrap();
            store.put_wire(&wire(1)).unwrap();
            store.put_wire(&wire(2)).unwrap();
            assert!(store.remove_wire(&wire(1).key()).unwrap());
            assert!(!store.remove_wire(&wire(1).key()).unwrap());
            store
                .put_attachment(&crate::store::tests::attachment_c1())
                .unwrap();
            let topology = crate::topology::parse(
                "apiVersion: networkop.co.uk/v1beta1\nkind: Topology\nmetadata: {name: r1, namespace: lab}\nspec: {links: []}\n",
            )
            .unwrap();
            store.put_topologies(&topology).unwrap();
        }
        let store = EmbeddedStore::open(&dir).unwrap();
        assert_eq!(store.wires().unwrap(), vec![wire(2)]);
        assert_eq!(store.attachments().unwrap().len(), 1);
        assert!(store.topology("lab", "r1").unwrap().is_some());
        assert!(store.remove_topology("lab", "r1").unwrap());
        assert!(store.topologies().unwrap().is_empty());
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_pods_attachment_is_found_by_its_pod_as_it_is_added_replaced_removed_and_reread() {
        let dir = temp_dir("by-pod");
        let first = crate::store::tests::attachment_c1();
        let again = AttachmentRecord {
            container_id: "c2".into(),
            ..first.clone()
        };
        let moved = AttachmentRecord {
            pod: crate::store::PodRef {
                namespace: "lab".into(),
                name: "r9".into(),
            },
            ..again.clone()
        };
        {
            let store = EmbeddedStore::open(&dir).unwrap();
            assert_eq!(store.attachment_of_pod("lab", "r1").unwrap(), None);
            store.put_attachment(&first).unwrap();
            store.put_attachment(&again).unwrap();
            // Two of one pod: the first by key, as a search through all of them found.
            assert_eq!(
                store.attachment_of_pod("lab", "r1").unwrap(),
                Some(first.clone())
            );
            assert!(store.remove_attachment(&first.key()).unwrap());
            assert_eq!(
                store.attachment_of_pod("lab", "r1").unwrap(),
                Some(again.clone())
            );
            // The same key, now another pod's.
            store.put_attachment(&moved).unwrap();
            assert_eq!(store.attachment_of_pod("lab", "r1").unwrap(), None);
            assert_eq!(
                store.attachment_of_pod("lab", "r9").unwrap(),
                Some(moved.clone())
            );
            assert_eq!(store.attachment_of_pod("other", "r9").unwrap(), None);
        }
        let store = EmbeddedStore::open(&dir).unwrap();
        assert_eq!(store.attachment_of_pod("lab", "r9").unwrap(), Some(moved));
        assert_eq!(store.attachment_of_pod("lab", "r1").unwrap(), None);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_is_read_back_at_once_and_written_in_one_go_at_its_end() {
        let dir = temp_dir("batch");
        {
            let store = EmbeddedStore::open(&dir).unwrap();
            store.put_wire(&wire(1)).unwrap();
            store.put_wire(&wire(2)).unwrap();
            store.begin_batch();
            store.put_wire(&wire(3)).unwrap();
            assert!(store.remove_wire(&wire(1).key()).unwrap());
            assert!(
                !store.remove_wire(&wire(1).key()).unwrap(),
                "already removed in the batch"
            );
            assert!(
                store.remove_wire(&wire(3).key()).unwrap(),
                "written in the batch"
            );
            store.put_wire(&wire(4)).unwrap();
            // Reads see the batch; the file does not yet.
            assert_eq!(store.wires().unwrap(), vec![wire(2), wire(4)]);
            assert_eq!(store.wire(&wire(4).key()).unwrap(), Some(wire(4)));
            assert_eq!(store.wire(&wire(1).key()).unwrap(), None);
            assert!(store
                .stored(WIRES, wire(1).key().as_str())
                .unwrap()
                .is_some());
            assert!(store
                .stored(WIRES, wire(4).key().as_str())
                .unwrap()
                .is_none());
            store.end_batch().unwrap();
            assert!(store
                .stored(WIRES, wire(1).key().as_str())
                .unwrap()
                .is_none());
            // A batch that never ends (the daemon killed in a call) leaves the file as it
            // was before the call.
            store.begin_batch();
            store.remove_wire(&wire(2).key()).unwrap();
        }
        let store = EmbeddedStore::open(&dir).unwrap();
        assert_eq!(store.wires().unwrap(), vec![wire(2), wire(4)]);
        drop(store);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_store_that_cannot_be_read_is_refused_and_left_as_it_is() {
        let dir = temp_dir("unreadable");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(DB_FILE);
        let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, &garbage).unwrap();
        let err = EmbeddedStore::open(&dir).err().expect("garbage is refused");
        assert!(err.to_string().contains(DB_FILE), "{err}");
        assert_eq!(
            std::fs::read(&path).unwrap(),
            garbage,
            "the file was changed"
        );

        std::fs::remove_file(&path).unwrap();
        EmbeddedStore::open(&dir)
            .unwrap()
            .put_wire(&wire(3))
            .unwrap();
        let before = std::fs::read(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        let err = EmbeddedStore::open(&dir)
            .err()
            .expect("mode 000 is refused");
        assert!(err.to_string().contains("mode is 000"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), before);
        assert_eq!(
            EmbeddedStore::open(&dir).unwrap().wires().unwrap(),
            vec![wire(3)]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_second_opener_is_refused_while_the_first_holds_the_store() {
        let dir = temp_dir("held");
        let _first = EmbeddedStore::open(&dir).unwrap();
        assert!(EmbeddedStore::open_existing(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
