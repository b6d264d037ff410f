//! The embedded backend: one redb file under the daemon's state directory, with a table
//! per record kind, keyed by the record's key and holding its JSON (readable with any
//! redb tool, and tolerant of fields added later).

// redb's error type is large; it is returned only on a failing disk, far from any hot
// path, so boxing it would buy nothing.
#![allow(clippy::result_large_err)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use redb::{Database, ReadableTable, TableDefinition};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{AttachmentRecord, StoreError, TopologySource, WireRecord, WireStore};
use crate::topology::{pod_key, Topology};

const WIRES: TableDefinition<&str, &[u8]> = TableDefinition::new("wires");
const ATTACHMENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("attachments");
const TOPOLOGIES: TableDefinition<&str, &[u8]> = TableDefinition::new("topologies");

/// The file's name inside the state directory.
pub const DB_FILE: &str = "xwire.redb";

pub struct EmbeddedStore {
    db: Database,
    path: PathBuf,
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
        store.wires()?;
        store.attachments()?;
        store.topologies()?;
        Ok(store)
    }

    fn with_tables(db: Database, path: PathBuf) -> Result<EmbeddedStore, StoreError> {
        let store = EmbeddedStore { db, path };
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

    fn put<T: Serialize>(
        &self,
        table: TableDefinition<&str, &[u8]>,
        entries: &[(String, &T)],
    ) -> Result<(), StoreError> {
        let encoded: Vec<(&str, Vec<u8>)> = entries
            .iter()
            .map(|(key, value)| {
                let json = serde_json::to_vec(value).expect("records serialize to JSON");
                (key.as_str(), json)
            })
            .collect();
        self.write(|tx| {
            let mut t = tx.open_table(table)?;
            for (key, json) in &encoded {
                t.insert(*key, json.as_slice())?;
            }
            Ok(())
        })
    }

    fn remove(&self, table: TableDefinition<&str, &[u8]>, key: &str) -> Result<bool, StoreError> {
        let mut removed = false;
        self.write(|tx| {
            let mut t = tx.open_table(table)?;
            removed = t.remove(key)?.is_some();
            Ok(())
        })?;
        Ok(removed)
    }

    fn get<T: DeserializeOwned>(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.fail(e))?;
        let t = tx.open_table(table).map_err(|e| self.fail(e))?;
        let Some(value) = t.get(key).map_err(|e| self.fail(e))? else {
            return Ok(None);
        };
        decode(key, value.value()).map(Some)
    }

    fn all<T: DeserializeOwned>(
        &self,
        table: TableDefinition<&str, &[u8]>,
    ) -> Result<Vec<T>, StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.fail(e))?;
        let t = tx.open_table(table).map_err(|e| self.fail(e))?;
        let mut out = Vec::new();
        for entry in t.iter().map_err(|e| self.fail(e))? {
            let (key, value) = entry.map_err(|e| self.fail(e))?;
            out.push(decode(key.value(), value.value())?);
        }
        Ok(out)
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
        self.put(WIRES, &[(wire.key(), wire)])
    }

    fn wire(&self, key: &str) -> Result<Option<WireRecord>, StoreError> {
        self.get(WIRES, key)
    }

    fn remove_wire(&self, key: &str) -> Result<bool, StoreError> {
        self.remove(WIRES, key)
    }

    fn wires(&self) -> Result<Vec<WireRecord>, StoreError> {
        self.all(WIRES)
    }

    fn put_attachment(&self, attachment: &AttachmentRecord) -> Result<(), StoreError> {
        self.put(ATTACHMENTS, &[(attachment.key(), attachment)])
    }

    fn attachment(&self, key: &str) -> Result<Option<AttachmentRecord>, StoreError> {
        self.get(ATTACHMENTS, key)
    }

    fn remove_attachment(&self, key: &str) -> Result<bool, StoreError> {
        self.remove(ATTACHMENTS, key)
    }

    fn attachments(&self) -> Result<Vec<AttachmentRecord>, StoreError> {
        self.all(ATTACHMENTS)
    }
}

impl TopologySource for EmbeddedStore {
    fn topology(&self, namespace: &str, name: &str) -> Result<Option<Topology>, StoreError> {
        self.get(TOPOLOGIES, &pod_key(namespace, name))
    }

    fn topologies(&self) -> Result<Vec<Topology>, StoreError> {
        self.all(TOPOLOGIES)
    }

    fn put_topologies(&self, topologies: &[Topology]) -> Result<(), StoreError> {
        let entries: Vec<(String, &Topology)> = topologies.iter().map(|t| (t.key(), t)).collect();
        self.put(TOPOLOGIES, &entries)
    }

    fn remove_topology(&self, namespace: &str, name: &str) -> Result<bool, StoreError> {
        self.remove(TOPOLOGIES, &pod_key(namespace, name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::WireState;
    use xwire_proto::local::PodRef;

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
                .put_attachment(&AttachmentRecord {
                    container_id: "c1".into(),
                    ifname: "eth0".into(),
                    network: "labnet".into(),
                    pod: PodRef {
                        namespace: "lab".into(),
                        name: "r1".into(),
                    },
                    netns: "/run/netns/r1".into(),
                })
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
