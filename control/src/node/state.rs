//! `Request::State`: the node's records as JSON, with what its other parts add to them
//! (a wire steered through the switch now, the claims judged, its pool).

use std::sync::atomic::Ordering;

use xwire_proto::local::NodeState;

use super::observe::Observer;
use super::pools;
use super::NodeError;

impl Observer<'_> {
    pub(super) fn state(&self) -> Result<NodeState, NodeError> {
        Ok(NodeState {
            node: self.config.node_name.clone(),
            attachments: self
                .records
                .store
                .attachments()?
                .iter()
                .map(to_json)
                .collect(),
            wires: self
                .records
                .store
                .wires()?
                .iter()
                .map(|record| {
                    let mut json = to_json(record);
                    // A straight veth steered through the switch now (not in the store).
                    let wire = record.wire();
                    if self.data.steered.contains_key(&wire) {
                        json["steered"] = serde_json::Value::Bool(true);
                    }
                    json
                })
                .collect(),
            refused_claims: self.peers.refused_claims.load(Ordering::Relaxed),
            claims_judged_by_node: self.peers.claims_judged,
            store_requests: self.records.store.requests(),
            store_unwritten: self.records.store.unwritten() as u64,
            pool: self.routing.pools.as_ref().map(pools::PoolRole::state),
        })
    }
}

fn to_json<T: serde::Serialize>(record: &T) -> serde_json::Value {
    serde_json::to_value(record).expect("records serialize to JSON")
}
