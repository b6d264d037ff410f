//! The Kubernetes backend: meshnet's Topology objects as the topology source (watched
//! through a reflector, so reads are from memory and changes wake the node), and
//! GWireKObj objects as the wire store (see `gwire.rs`). The node's thread calls the
//! store's methods synchronously; they run their API calls on this store's own runtime.
//!
//! Writes: the node's records go to a journal on its disk, and behind it to the
//! GWireKObj objects the node owns (`behind.rs`), with server-side apply under the field
//! manager `xwired-<node>`, never forced (a field another manager owns is a conflict,
//! reported, not overwritten). A Topology's status, which other writers share, is
//! replaced with its resourceVersion and retried on a conflict.

mod behind;
mod certificate;
mod gwire;
mod membership;
mod placement;
pub mod pools;
mod records;
mod status;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

pub use status::PodReport;

use self::membership::NodeWatch;
use super::{EmbeddedStore, PodPlacement, StoreError, TopologySource};
use crate::config::TopologySettings;
use crate::membership::{Configured, Membership};
use crate::topology::{self, Topology};

/// Where the API server is and which namespaces are wired: `[topology]` in `xwired.toml`
/// (`config::TopologySettings`), and the port the nodes' peers listen on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct KubeSettings {
    pub topology: TopologySettings,
    /// The UDP port every node's peers listen on (this node's own).
    pub peer_port: u16,
    /// The daemon's state directory, where the journal of the node's records is kept
    /// (`JOURNAL_DIR`).
    pub state_dir: PathBuf,
}

/// The journal's directory in the state directory: the embedded store's file layout, kept
/// apart from an embedded store's own.
pub(crate) const JOURNAL_DIR: &str = "kube-journal";

pub use xwire_model::config::SIGNER_NAME;

/// What a namespace label must say for its pods to be wired.
pub(crate) const LABEL_VALUE: &str = "enabled";

pub(crate) struct KubeStore {
    runtime: tokio::runtime::Runtime,
    client: Client,
    /// Every Pod's node (`placement.rs`): where a wire's far end runs.
    pods: Store<Pod>,
    node: String,
    /// This node's address, written as the `src_ip` of its pods' Topology status.
    node_ip: String,
    /// The uid of this node's Node object, the owner of its GWireKObj objects; none
    /// where there is no Node object of that name.
    node_uid: Option<String>,
    settings: KubeSettings,
    topology_resource: ApiResource,
    gwire_resource: ApiResource,
    topologies: Store<DynamicObject>,
    namespaces: Store<Namespace>,
    /// The node's records, by topology namespace (read from here), the namespaces the
    /// API server has not yet got, and the requests made (for the scale figures).
    shared: behind::Shared,
    /// The node's records on its disk: a change is there before the call that made it
    /// is answered.
    journal: EmbeddedStore,
    /// Writes the records' changes to the node's GWireKObj objects.
    writer: Option<behind::Running>,
    /// Topology objects changed in the API since the node last asked, as `ns/name`.
    changed: Arc<Mutex<Vec<String>>>,
    /// Pods' Topology status, written in order off the node's thread.
    status: Option<tokio::sync::mpsc::UnboundedSender<PodReport>>,
}

fn backend(message: impl std::fmt::Display) -> StoreError {
    StoreError::Backend {
        path: "kubernetes".into(),
        message: message.to_string(),
    }
}

/// Keeps `writer`'s store of `api`'s objects on `runtime`, and hands each object that
/// changes to `on_object`; a failing watch is logged (`what`) and retried with backoff.
pub(super) fn reflect<K>(
    runtime: &tokio::runtime::Runtime,
    writer: reflector::store::Writer<K>,
    api: Api<K>,
    what: &'static str,
    mut on_object: impl FnMut(K) + Send + 'static,
) where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync,
    K: 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    runtime.spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(object) => on_object(object),
                Err(e) => tracing::warn!("watching {what}: {e}"),
            }
        }
    });
}

/// Watches every Topology object on `runtime`; each one made, deleted or whose links
/// change is queued to `changed` as `namespace/name`. A change of status alone is not:
/// the node reads none of it in a cluster (a pod's node is its Pod's), and every pod's
/// ADD writes its own, which made each node go over each pod's links once more as a lab
/// came up.
fn watch_topologies(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    resource: &ApiResource,
    changed: &Arc<Mutex<Vec<String>>>,
) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::new(resource.clone());
    let topologies = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let queue = changed.clone();
    let (reader, resource) = (topologies.clone(), resource.clone());
    // The generation each object had when last queued: the API server counts changes
    // of everything but status (the CRD has a status subresource).
    let mut generations = std::collections::HashMap::<String, Option<i64>>::new();
    reflect(runtime, writer, api, "Topology objects", move |object| {
        let (namespace, name) = (
            object.metadata.namespace.as_deref().unwrap_or_default(),
            object.metadata.name.as_deref().unwrap_or_default(),
        );
        let key = topology::pod_key(namespace, name);
        // The store has taken the event in by now: an object it lacks was deleted.
        let in_store = ObjectRef::new_with(name, resource.clone()).within(namespace);
        if reader.get(&in_store).is_none() {
            generations.remove(&key);
        } else {
            let generation = object.metadata.generation;
            let before = generations.insert(key.clone(), generation);
            if generation.is_some() && before == Some(generation) {
                return;
            }
        }
        queue.lock().expect("not poisoned").push(key);
    });
    topologies
}

/// Watches the namespaces where pods opt in by `label`; with none, nothing is watched
/// (and the store stays empty).
fn watch_namespaces(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    label: &str,
) -> Store<Namespace> {
    let (namespaces, writer) = reflector::store();
    if !label.is_empty() {
        let api: Api<Namespace> = Api::all(client.clone());
        reflect(runtime, writer, api, "namespaces", |_| {});
    }
    namespaces
}

impl KubeStore {
    /// Connects, starts the watches and reads the node's GWireKObj objects: a node that
    /// starts with an empty disk gets its records back from here. With it, the node's
    /// membership: the Node objects watched (`discover_peers`), or the configuration's.
    pub(crate) fn open(
        node: &str,
        node_ip: &str,
        settings: KubeSettings,
    ) -> Result<(KubeStore, Box<dyn Membership>), StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("xwire-kube")
            .enable_all()
            .build()
            .map_err(backend)?;
        let client = runtime.block_on(connect(&settings))?;
        let topology_resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("networkop.co.uk", "v1beta1", topology::KIND),
            "topologies",
        );
        let gwire_resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(gwire::GROUP, gwire::VERSION, gwire::KIND),
            gwire::PLURAL,
        );
        let journal_dir = settings.state_dir.join(JOURNAL_DIR);
        let has_journal = journal_dir.join(super::embedded::DB_FILE).exists();
        let journal = EmbeddedStore::open(&journal_dir)?;
        let changed = Arc::new(Mutex::new(Vec::new()));
        let topologies = watch_topologies(&runtime, &client, &topology_resource, &changed);
        let namespaces = watch_namespaces(&runtime, &client, &settings.topology.namespace_label);
        let pods = placement::watch(
            &runtime,
            client.clone(),
            changed.clone(),
            (topologies.clone(), topology_resource.clone()),
        );
        let mut store = KubeStore {
            client,
            pods,
            node: node.to_owned(),
            node_ip: node_ip.to_owned(),
            node_uid: None,
            topology_resource,
            gwire_resource,
            topologies,
            namespaces,
            shared: behind::Shared {
                records: Default::default(),
                unwritten: Default::default(),
                requests: Default::default(),
            },
            journal,
            writer: None,
            changed,
            status: None,
            settings,
            runtime,
        };
        let timeout = Duration::from_secs(store.settings.topology.sync_timeout_secs);
        store.wait_for_lists(timeout)?;
        let membership: Box<dyn Membership> = if store.settings.topology.discover_peers {
            Box::new(store.follow_nodes(timeout)?)
        } else {
            Box::new(Configured)
        };
        store.node_uid = store.find_node_uid()?;
        store.status = Some(
            status::StatusWriter {
                client: store.client.clone(),
                resource: store.topology_resource.clone(),
                topologies: store.topologies.clone(),
                node_ip: store.node_ip.clone(),
                requests: store.shared.requests.clone(),
                records: store.shared.records.clone(),
            }
            .spawn(&store.runtime),
        );
        store.start_writing(has_journal)?;
        // The first list's objects are not changes.
        store.changed.lock().expect("not poisoned").clear();
        Ok((store, membership))
    }

    /// Waits for the watches' first lists (Topology objects, Pods, and the namespaces
    /// where they are watched), for at most `timeout`.
    fn wait_for_lists(&self, timeout: Duration) -> Result<(), StoreError> {
        let ready = async {
            self.topologies.wait_until_ready().await.map_err(backend)?;
            self.pods.wait_until_ready().await.map_err(backend)?;
            if !self.settings.topology.namespace_label.is_empty() {
                self.namespaces.wait_until_ready().await.map_err(backend)?;
            }
            Ok::<(), StoreError>(())
        };
        self.runtime
            .block_on(async { tokio::time::timeout(timeout, ready).await })
            .map_err(|_| backend(format!("no list of Topology objects within {timeout:?}")))?
    }

    /// Starts watching the cluster's nodes, and waits for the first list of them (for at
    /// most `timeout`): the node's first pass already knows every peer.
    fn follow_nodes(&self, timeout: Duration) -> Result<NodeWatch, StoreError> {
        let listed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = NodeWatch::default();
        membership::watch_nodes(self, self.settings.peer_port, &watch, listed.clone());
        let deadline = std::time::Instant::now() + timeout;
        while !listed.load(std::sync::atomic::Ordering::Acquire) {
            if std::time::Instant::now() > deadline {
                return Err(backend(format!(
                    "no list of Node objects within {timeout:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(watch)
    }

    fn count(&self, n: u64) {
        (self.shared.requests).fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    fn find_node_uid(&self) -> Result<Option<String>, StoreError> {
        let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        self.count(1);
        match self.runtime.block_on(api.get_opt(&self.node)) {
            Ok(node) => Ok(node.and_then(|n| n.metadata.uid)),
            Err(e) => Err(backend(format!("Node {}: {e}", self.node))),
        }
    }

    fn get_topology(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<DynamicObject>, StoreError> {
        if let Some(object) = watched(&self.topologies, &self.topology_resource, namespace, name) {
            return Ok(Some(object));
        }
        // Not in the cache yet (an object made a moment ago): the API server decides.
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &self.topology_resource);
        self.count(1);
        self.runtime.block_on(api.get_opt(name)).map_err(backend)
    }
}

/// The watch's copy of an object, if it has one.
fn watched(
    store: &Store<DynamicObject>,
    resource: &ApiResource,
    namespace: &str,
    name: &str,
) -> Option<DynamicObject> {
    let key = ObjectRef::new_with(name, resource.clone()).within(namespace);
    store.get(&key).map(|object| (*object).clone())
}

async fn connect(settings: &KubeSettings) -> Result<Client, StoreError> {
    client(settings.topology.kubeconfig.as_deref()).await
}

/// A client of the API server that `kubeconfig` names; none: the in-cluster service
/// account (or `KUBECONFIG`).
pub async fn client(kubeconfig: Option<&std::path::Path>) -> Result<Client, StoreError> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| backend(format!("{}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .map_err(|e| backend(format!("{}: {e}", path.display())))?
        }
        None => kube::Config::infer().await.map_err(backend)?,
    };
    xwire_pki::tls::install_process_default();
    Client::try_from(config).map_err(backend)
}

fn to_topology(object: &DynamicObject) -> Result<Topology, StoreError> {
    let value = serde_json::to_value(object).map_err(backend)?;
    serde_json::from_value(value).map_err(|e| StoreError::Corrupt {
        key: topology::pod_key(
            object.metadata.namespace.as_deref().unwrap_or_default(),
            object.metadata.name.as_deref().unwrap_or_default(),
        ),
        message: e.to_string(),
    })
}

impl TopologySource for KubeStore {
    fn topology(&self, namespace: &str, name: &str) -> Result<Option<Topology>, StoreError> {
        self.get_topology(namespace, name)?
            .as_ref()
            .map(to_topology)
            .transpose()
    }

    fn topologies(&self) -> Result<Vec<Topology>, StoreError> {
        self.topologies
            .state()
            .iter()
            .map(|object| to_topology(object))
            .collect()
    }

    fn put_topologies(&self, topologies: &[Topology]) -> Result<(), StoreError> {
        let params = PatchParams::apply("xwirectl");
        for t in topologies {
            let api: Api<DynamicObject> = Api::namespaced_with(
                self.client.clone(),
                &t.metadata.namespace,
                &self.topology_resource,
            );
            let mut value = serde_json::to_value(t).map_err(backend)?;
            if let Some(object) = value.as_object_mut() {
                object.remove("status");
            }
            self.count(1);
            self.runtime
                .block_on(api.patch(&t.metadata.name, &params, &Patch::Apply(&value)))
                .map_err(|e| backend(format!("Topology {}: {e}", t.key())))?;
        }
        Ok(())
    }

    fn remove_topology(&self, namespace: &str, name: &str) -> Result<bool, StoreError> {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &self.topology_resource);
        self.count(1);
        match self
            .runtime
            .block_on(api.delete(name, &DeleteParams::default()))
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
            Err(e) => Err(backend(format!("Topology {namespace}/{name}: {e}"))),
        }
    }

    fn take_changes(&self) -> Vec<String> {
        std::mem::take(&mut *self.changed.lock().expect("not poisoned"))
    }

    fn wires_namespace(&self, namespace: &str) -> bool {
        let label = &self.settings.topology.namespace_label;
        if label.is_empty() {
            return true;
        }
        let labelled = |ns: &Namespace| {
            ns.metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(label))
                .is_some_and(|value| value == LABEL_VALUE)
        };
        if let Some(ns) = self.namespaces.get(&ObjectRef::new(namespace)) {
            return labelled(&ns);
        }
        // Not in the cache yet (made a moment ago): the API server decides.
        self.count(1);
        let api: Api<Namespace> = Api::all(self.client.clone());
        match self.runtime.block_on(api.get_opt(namespace)) {
            Ok(ns) => ns.is_some_and(|ns| labelled(&ns)),
            Err(e) => {
                tracing::warn!(%namespace, "reading the namespace's labels: {e}");
                false
            }
        }
    }

    fn report_pod(&self, report: &PodReport) {
        if let Some(status) = &self.status {
            let _ = status.send(report.clone());
        }
    }

    fn known_placement(&self, namespace: &str, pod: &str) -> PodPlacement {
        placement::known(&self.pods, namespace, pod)
    }

    fn pod_placement(&self, namespace: &str, pod: &str) -> PodPlacement {
        let (placed, asked) =
            placement::placement(&self.pods, &self.client, &self.runtime, namespace, pod);
        if asked {
            self.count(1);
        }
        placed
    }
}
