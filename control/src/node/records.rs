//! What the node keeps in its store, as the node reads it: records, batches of writes,
//! and the topologies read so far, each decoded once.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use super::NodeError;
use crate::store::{AttachmentRecord, NodeStore};
use crate::topology::{LinkSpec, Topology};

/// The store and the topologies read from it.
pub(super) struct Records {
    pub(super) store: Box<dyn NodeStore>,
    /// Topologies read from the store, by pod namespace, then pod name (a lookup, one per
    /// port on every pass, makes no key): decoded once, not once per link (a Sync of
    /// thousands of wires of one pod would decode its topology thousands of times).
    /// Emptied whenever the node writes topologies; nothing else writes them while the
    /// daemon runs.
    topologies: RefCell<HashMap<String, PodTopologies>>,
}

/// The topologies of one pod namespace's pods, by pod name; `None`: the pod has none.
type PodTopologies = HashMap<String, Option<Arc<LoadedTopology>>>;

/// What the topology cache keeps of a read: every answer, or only topologies found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Remember {
    Absence,
    Presence,
}

/// A topology as read from the store, with its links parsed (once, here).
pub(super) struct LoadedTopology {
    pub(super) topology: Topology,
    /// By uid, ascending; shared with every pass's `DesiredPod`, which would otherwise
    /// copy every pod's links on every pass.
    pub(super) links: Arc<Vec<LinkSpec>>,
}

impl Records {
    pub(super) fn new(store: Box<dyn NodeStore>) -> Records {
        Records {
            store,
            topologies: RefCell::new(HashMap::new()),
        }
    }

    pub(super) fn attachment_of_pod(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<Option<AttachmentRecord>, NodeError> {
        Ok(self.store.attachment_of_pod(namespace, pod)?)
    }

    /// The topology of `pod`, from the cache or the store.
    pub(super) fn topology(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Result<Option<Arc<LoadedTopology>>, NodeError> {
        self.cached_topology(namespace, pod, Remember::Absence)
    }

    /// The topology of `pod`, from the cache or read into it; a pod with none is
    /// remembered as such only if `remember` says so.
    pub(super) fn cached_topology(
        &self,
        namespace: &str,
        pod: &str,
        remember: Remember,
    ) -> Result<Option<Arc<LoadedTopology>>, NodeError> {
        let topologies = self.topologies.borrow();
        if let Some(cached) = topologies.get(namespace).and_then(|pods| pods.get(pod)) {
            return Ok(cached.clone());
        }
        drop(topologies);
        let read = self.store.topology(namespace, pod)?.map(|topology| {
            Arc::new(LoadedTopology {
                links: Arc::new(topology.link_specs()),
                topology,
            })
        });
        if read.is_some() || remember == Remember::Absence {
            self.topologies
                .borrow_mut()
                .entry(namespace.to_owned())
                .or_default()
                .insert(pod.to_owned(), read.clone());
        }
        Ok(read)
    }

    /// Forgets the cached topology of `pod` (it changed in the store), and returns it.
    pub(super) fn forget_topology(
        &self,
        namespace: &str,
        pod: &str,
    ) -> Option<Arc<LoadedTopology>> {
        self.topologies
            .borrow_mut()
            .get_mut(namespace)
            .and_then(|pods| pods.remove(pod))
            .flatten()
    }

    /// Forgets the cached topologies: the node is about to write some.
    pub(super) fn topologies_changed(&self) {
        self.topologies.borrow_mut().clear();
    }

    pub(super) fn topology_link(
        &self,
        namespace: &str,
        pod: &str,
        uid: u64,
    ) -> Result<Option<LinkSpec>, NodeError> {
        Ok(self
            .topology(namespace, pod)?
            .and_then(|t| t.links.iter().find(|l| l.uid == uid).cloned()))
    }
}
