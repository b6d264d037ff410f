//! The node's wire and attachment records in a cluster: kept in memory, made durable in
//! the node's journal before a call is answered, and copied to its GWireKObj objects by
//! the writer (`behind.rs`), which this starts.

use kube::api::{Api, DynamicObject};

use super::behind;
use super::gwire::{self, NamespaceRecords};
use super::{backend, KubeStore};
use crate::store::{
    AttachmentKey, AttachmentRecord, EmbeddedStore, EndKey, StoreError, WireRecord, WireStore,
};

impl KubeStore {
    /// The node's GWireKObj objects, by namespace and name.
    fn read_records(&self) -> Result<behind::Objects, StoreError> {
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &self.gwire_resource);
        let selector = format!("{}={}", gwire::NODE_LABEL, self.node);
        self.count(1);
        let list = self
            .runtime
            .block_on(api.list(&kube::api::ListParams::default().labels(&selector)))
            .map_err(backend)?;
        let mut objects = behind::Objects::new();
        for object in list.items {
            let namespace = object.metadata.namespace.clone().unwrap_or_default();
            let name = object.metadata.name.clone().unwrap_or_default();
            let value = serde_json::to_value(&object).map_err(backend)?;
            let (read, bad) = gwire::records(&value);
            if !bad.is_empty() {
                tracing::warn!(%namespace, %name, ?bad, "GWireKObj items that do not parse are left out");
            }
            objects.entry(namespace).or_default().insert(name, read);
        }
        Ok(objects)
    }

    /// Takes the records the node starts from (`behind::starting_records`): a journal
    /// made now is filled from the API server's. Then starts the writer, which writes
    /// first what the API server lacks.
    pub(super) fn start_writing(&mut self, has_journal: bool) -> Result<(), StoreError> {
        let objects = self.read_records()?;
        let api = behind::joined(&objects);
        let journal = match has_journal {
            true => Some(behind::by_namespace(
                self.journal.wires()?,
                self.journal.attachments()?,
            )),
            false => None,
        };
        let (records, differ) = behind::starting_records(journal, &api);
        if !has_journal {
            self.journal.begin_batch();
            for r in records.values() {
                r.wires
                    .values()
                    .try_for_each(|w| self.journal.put_wire(w))?;
                (r.attachments.values()).try_for_each(|a| self.journal.put_attachment(a))?;
            }
            self.journal.end_batch()?;
        }
        if !differ.is_empty() {
            tracing::info!(namespaces = ?differ, "start: records the API server lacks are written");
        }
        *self.shared.records.lock().expect("not poisoned") = records;
        {
            let mut unwritten = self.shared.unwritten.lock().expect("not poisoned");
            differ.iter().for_each(|ns| unwritten.mark(ns));
        }
        let writer = behind::Writer {
            client: self.client.clone(),
            resource: self.gwire_resource.clone(),
            node: self.node.clone(),
            node_uid: self.node_uid.clone(),
            shared: self.shared.clone(),
            written: objects,
        }
        .spawn(&self.runtime);
        if !differ.is_empty() {
            writer.wake();
        }
        self.writer = Some(writer);
        Ok(())
    }

    /// Changes the records of `namespace` in memory with `change`, after the journal
    /// took it (`journal`): a change the journal refused is not made. None of it when
    /// `unchanged` says the records are as the change would leave them. The writer is
    /// woken, and copies the namespace to the API server once its gathering time is up
    /// (by then the call's batch is committed, or has failed and the call with it).
    fn update(
        &self,
        namespace: &str,
        unchanged: impl FnOnce(Option<&NamespaceRecords>) -> bool,
        journal: impl FnOnce(&EmbeddedStore) -> Result<bool, StoreError>,
        change: impl FnOnce(&mut NamespaceRecords),
    ) -> Result<bool, StoreError> {
        let mut all = self.shared.records.lock().expect("not poisoned");
        if unchanged(all.get(namespace)) {
            return Ok(false);
        }
        journal(&self.journal)?;
        let records = all.entry(namespace.to_owned()).or_default();
        change(records);
        if records.is_empty() {
            all.remove(namespace);
        }
        drop(all);
        self.shared
            .unwritten
            .lock()
            .expect("not poisoned")
            .mark(namespace);
        if let Some(writer) = &self.writer {
            writer.wake();
        }
        Ok(true)
    }
}

impl WireStore for KubeStore {
    fn begin_batch(&self) {
        self.journal.begin_batch();
    }

    /// The journal's commit: what the node's calls wait for. The API server's copy is
    /// written behind.
    fn end_batch(&self) -> Result<(), StoreError> {
        self.journal.end_batch()
    }

    fn put_wire(&self, wire: &WireRecord) -> Result<(), StoreError> {
        let key = wire.key();
        self.update(
            &wire.topo_namespace,
            |r| r.and_then(|r| r.wires.get(&key)) == Some(wire),
            |journal| journal.put_wire(wire).map(|_| true),
            |r| {
                r.wires.insert(key.clone(), wire.clone());
            },
        )
        .map(|_| ())
    }

    fn wire(&self, key: &EndKey) -> Result<Option<WireRecord>, StoreError> {
        let namespace = key.as_str().split('/').next().unwrap_or_default();
        let all = self.shared.records.lock().expect("not poisoned");
        Ok(all.get(namespace).and_then(|r| r.wires.get(key)).cloned())
    }

    fn remove_wire(&self, key: &EndKey) -> Result<bool, StoreError> {
        let namespace = key.as_str().split('/').next().unwrap_or_default();
        self.update(
            namespace,
            |r| !r.is_some_and(|r| r.wires.contains_key(key)),
            |journal| journal.remove_wire(key),
            |r| {
                r.wires.remove(key);
            },
        )
    }

    /// The pod's ends alone, from their namespace's map in key order: copying every
    /// wire to pick a pod's (the trait's default) took a third of a node's thread at 600
    /// pods (`xwire-perf kube-scale`).
    fn wires_of_pod(&self, namespace: &str, pod: &str) -> Result<Vec<WireRecord>, StoreError> {
        let prefix = EndKey::prefix_of_pod(namespace, pod);
        let all = self.shared.records.lock().expect("not poisoned");
        let Some(records) = all.get(namespace) else {
            return Ok(Vec::new());
        };
        Ok((records.wires.range(EndKey::from_text(&prefix)..))
            .take_while(|(key, _)| key.as_str().starts_with(&prefix))
            .map(|(_, wire)| wire.clone())
            .collect())
    }

    fn wires(&self) -> Result<Vec<WireRecord>, StoreError> {
        let all = self.shared.records.lock().expect("not poisoned");
        Ok(all
            .values()
            .flat_map(|r| r.wires.values().cloned())
            .collect())
    }

    fn put_attachment(&self, attachment: &AttachmentRecord) -> Result<(), StoreError> {
        let key = attachment.key();
        self.update(
            &attachment.pod.namespace,
            |r| r.and_then(|r| r.attachments.get(&key)) == Some(attachment),
            |journal| journal.put_attachment(attachment).map(|_| true),
            |r| {
                r.attachments.insert(key.clone(), attachment.clone());
            },
        )
        .map(|_| ())
    }

    fn attachment(&self, key: &AttachmentKey) -> Result<Option<AttachmentRecord>, StoreError> {
        let all = self.shared.records.lock().expect("not poisoned");
        Ok(all.values().find_map(|r| r.attachments.get(key)).cloned())
    }

    /// Looks in the pod's namespace alone, without copying every attachment: a pass
    /// asks this for each local peer of the pods it looks at.
    fn attachment_of_pod(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<Option<AttachmentRecord>, StoreError> {
        let all = self.shared.records.lock().expect("not poisoned");
        Ok(all
            .get(namespace)
            .and_then(|r| r.attachments.values().find(|a| a.pod.name == pod))
            .cloned())
    }

    fn remove_attachment(&self, key: &AttachmentKey) -> Result<bool, StoreError> {
        let namespace = {
            let all = self.shared.records.lock().expect("not poisoned");
            all.iter()
                .find(|(_, r)| r.attachments.contains_key(key))
                .map(|(ns, _)| ns.clone())
        };
        match namespace {
            Some(namespace) => self.update(
                &namespace,
                |r| !r.is_some_and(|r| r.attachments.contains_key(key)),
                |journal| journal.remove_attachment(key),
                |r| {
                    r.attachments.remove(key);
                },
            ),
            None => Ok(false),
        }
    }

    fn attachments(&self) -> Result<Vec<AttachmentRecord>, StoreError> {
        let all = self.shared.records.lock().expect("not poisoned");
        Ok(all
            .values()
            .flat_map(|r| r.attachments.values().cloned())
            .collect())
    }
}

impl Drop for KubeStore {
    /// The writer's last writes, for a while: what it cannot write in that time stays in
    /// the journal, and is written at the next start.
    fn drop(&mut self) {
        if let Some(writer) = self.writer.take() {
            writer.stop(&self.runtime);
        }
    }
}
