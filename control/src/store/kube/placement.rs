//! Where pods run, from the Pod objects: a reflector of every Pod's node, so that the
//! node judges a claim on a wire by what the scheduler wrote, not by a Topology status
//! that any node's daemon may write. A pod whose node changes (scheduled, or made again
//! elsewhere) is queued as a change, as a Topology is, so that the node tells the new
//! node about the pod's wires.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::Client;

use crate::store::PodPlacement;
use crate::topology;

/// Starts watching the Pods of every namespace on `runtime`; a pod that has a Topology
/// (in `topologies`, the watch of them) and whose node is new or changed is pushed to
/// `changed` as `namespace/name`. Other pods' moves are no concern of the node's.
pub(super) fn watch(
    runtime: &tokio::runtime::Runtime,
    client: Client,
    changed: Arc<Mutex<Vec<String>>>,
    topologies: (Store<DynamicObject>, ApiResource),
) -> Store<Pod> {
    let (pods, writer) = reflector::store();
    let api: Api<Pod> = Api::all(client);
    // A pod's status changes often; only its node matters here.
    let mut nodes: HashMap<String, Option<String>> = HashMap::new();
    super::reflect(runtime, writer, api, "Pod objects", move |pod: Pod| {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let of_a_topology = ObjectRef::new_with(name, topologies.1.clone()).within(namespace);
        if topologies.0.get(&of_a_topology).is_none() {
            return;
        }
        let key = topology::pod_key(namespace, name);
        let node = node_of(&pod);
        if nodes.get(&key) != Some(&node) {
            nodes.insert(key.clone(), node);
            changed.lock().expect("not poisoned").push(key);
        }
    });
    pods
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
}

/// Where `namespace/name` runs by the watch's copy alone (a pod it has not seen is not
/// placed yet: when it is, the watch queues it as a change).
pub(super) fn known(pods: &Store<Pod>, namespace: &str, name: &str) -> PodPlacement {
    pods.get(&ObjectRef::new(name).within(namespace))
        .map_or(PodPlacement::Unplaced, |pod| {
            node_of(&pod).map_or(PodPlacement::Unplaced, PodPlacement::On)
        })
}

/// Where `namespace/name` runs: from the watch's copy, or from the API server for a pod
/// the watch has not seen yet (made a moment ago).
pub(super) fn placement(
    pods: &Store<Pod>,
    client: &Client,
    runtime: &tokio::runtime::Runtime,
    namespace: &str,
    name: &str,
) -> (PodPlacement, bool) {
    let of = |pod: &Pod| node_of(pod).map_or(PodPlacement::Unplaced, PodPlacement::On);
    if let Some(pod) = pods.get(&ObjectRef::new(name).within(namespace)) {
        return (of(&pod), false);
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let placed = match runtime.block_on(api.get_opt(name)) {
        Ok(pod) => pod.as_ref().map_or(PodPlacement::Unplaced, of),
        Err(e) => {
            tracing::warn!(%namespace, pod = %name, "reading where the pod runs: {e}");
            PodPlacement::Unplaced
        }
    };
    (placed, true)
}
