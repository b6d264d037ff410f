//! A pod's Topology status, filled as meshnet fills it: `src_ip` (the address of the
//! pod's node), `net_ns`, `container_id`, and KNE's `plumbing_error` when a link could not
//! be made. `skipped` follows meshnet too: a pod that comes up before its peer leaves
//! `{pod_name, link_id}` in the peer's status, and the peer clears its list as it comes
//! up and makes those links. Status is shared with other writers, so each write reads
//! the object and replaces its status with that resourceVersion, retried on a conflict.

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{json, Value};

use super::KubeStore;

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

/// The pod's own status after ADD.
pub fn own_status(current: &Value, node_ip: &str, report: &PodReport) -> Value {
    let mut status = current.as_object().cloned().unwrap_or_default();
    status.insert("src_ip".into(), json!(node_ip));
    status.insert("net_ns".into(), json!(report.net_ns));
    status.insert("container_id".into(), json!(report.container_id));
    // The pod made every link it could: nothing is left skipped towards it.
    status.insert("skipped".into(), json!([]));
    match &report.error {
        Some(error) => status.insert("plumbing_error".into(), json!(error)),
        None => status.remove("plumbing_error"),
    };
    Value::Object(status)
}

/// A peer's status with `{pod_name, link_id}` in its `skipped`, once.
pub fn skipped_status(current: &Value, pod: &str, uid: u64) -> Option<Value> {
    let mut status = current.as_object().cloned().unwrap_or_default();
    let entry = json!({"pod_name": pod, "link_id": uid});
    let skipped = status.entry("skipped").or_insert_with(|| json!([]));
    let list = skipped.as_array_mut()?;
    if list.contains(&entry) {
        return None;
    }
    list.push(entry);
    Some(Value::Object(status))
}

/// Writes the report; returns the API requests it took. Failures are logged: status is
/// a report for people and KNE, not state the node depends on.
pub(super) fn write(store: &KubeStore, report: &PodReport) -> u64 {
    let mut requests = 0;
    let own = |current: &Value| Some(own_status(current, &store.node_ip, report));
    requests += replace(store, &report.namespace, &report.pod, own);
    for (peer, uid) in &report.skipped_by_peers {
        let add = |current: &Value| skipped_status(current, &report.pod, *uid);
        requests += replace(store, &report.namespace, peer, add);
    }
    requests
}

fn replace(
    store: &KubeStore,
    namespace: &str,
    name: &str,
    change: impl Fn(&Value) -> Option<Value>,
) -> u64 {
    let api: Api<DynamicObject> =
        Api::namespaced_with(store.client.clone(), namespace, &store.topology_resource);
    let mut requests = 0;
    for attempt in 0..ATTEMPTS {
        // The first try starts from the watch's copy; after a conflict, from a fresh read.
        let cached = (attempt == 0)
            .then(|| store.cached_topology(namespace, name))
            .flatten();
        let object = match cached {
            Some(object) => object,
            None => {
                requests += 1;
                match store.runtime.block_on(api.get_opt(name)) {
                    Ok(Some(object)) => object,
                    Ok(None) => return requests,
                    Err(e) => {
                        tracing::warn!(topology = %format!("{namespace}/{name}"), "reading for status: {e}");
                        return requests;
                    }
                }
            }
        };
        let Some(status) = change(object.data.get("status").unwrap_or(&Value::Null)) else {
            return requests;
        };
        let mut updated = object.clone();
        updated.data["status"] = status;
        let body = serde_json::to_vec(&updated).expect("serializes");
        requests += 1;
        match store
            .runtime
            .block_on(api.replace_status(name, &PostParams::default(), body))
        {
            Ok(_) => return requests,
            // Someone wrote in between (or the copy was stale): read again and
            // reapply, never overwrite.
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => {
                tracing::warn!(topology = %format!("{namespace}/{name}"), "writing status: {e}");
                return requests;
            }
        }
    }
    tracing::warn!(topology = %format!("{namespace}/{name}"), "status not written: conflicts {ATTEMPTS} times");
    requests
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
    fn own_status_has_meshnet_fields_and_keeps_others() {
        let before = json!({"skipped": [{"pod_name": "r2", "link_id": 1}], "other": 5});
        let after = own_status(&before, "192.0.2.1", &report(Some("link 1: EEXIST")));
        assert_eq!(after["src_ip"], "192.0.2.1");
        assert_eq!(after["net_ns"], "/var/run/netns/cni-1");
        assert_eq!(after["container_id"], "c1");
        assert_eq!(after["skipped"], json!([]));
        assert_eq!(after["plumbing_error"], "link 1: EEXIST");
        assert_eq!(after["other"], 5);
        let cleared = own_status(&after, "192.0.2.1", &report(None));
        assert!(cleared.get("plumbing_error").is_none());
    }

    #[test]
    fn a_skip_is_listed_once() {
        let once = skipped_status(&Value::Null, "r1", 4).unwrap();
        assert_eq!(once["skipped"], json!([{"pod_name": "r1", "link_id": 4}]));
        assert_eq!(skipped_status(&once, "r1", 4), None);
    }
}
