//! Questions a lab asks its nodes' daemons over their local API sockets.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use xwire_proto::local::{LinkEndCounters, NodeCounters, Request, Response, TopologyApply};

use super::file::Lab;
use super::paths::LabPaths;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Asks a daemon; its error answer becomes an error.
pub fn ask(socket: &Path, request: &Request) -> Result<Response> {
    let response = xwire_api_client::call(socket, request, TIMEOUT)?;
    if let Response::Error(e) = response {
        bail!("{} (code {}) {}", e.msg, e.code, e.details);
    }
    Ok(response)
}

/// Stores the lab's Topology objects on every node, as every node of a cluster sees
/// all of them.
pub(crate) fn apply_topology(lab: &Lab, paths: &LabPaths) -> Result<()> {
    let objects: Vec<Value> = super::file::topologies(lab)
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<_, _>>()?;
    // A large lab's list is over what one call takes: it goes in pieces.
    let pieces = TopologyApply::in_pieces(objects);
    for node in &lab.nodes {
        for piece in &pieces {
            let request = Request::TopologyApply(piece.clone());
            ask(&paths.node_socket(node), &request)
                .with_context(|| format!("apply the topology on node {node}"))?;
        }
    }
    Ok(())
}

/// The wire records of this lab on every node that answers.
pub(crate) fn wire_records(lab: &Lab, paths: &LabPaths) -> Vec<Value> {
    lab.nodes
        .iter()
        .filter_map(
            |node| match ask(&paths.node_socket(node), &Request::State) {
                Ok(Response::State(state)) => Some(state.wires),
                _ => None,
            },
        )
        .flatten()
        .filter(|w| w["topo_namespace"] == lab.name.as_str())
        .collect()
}

/// Each wire end's state ("pending", "veth", "remote") by (pod, uid).
pub(crate) fn wire_states(lab: &Lab, paths: &LabPaths) -> HashMap<(String, u64), String> {
    wire_records(lab, paths)
        .iter()
        .filter_map(|w| {
            let pod = w["local_pod_name"].as_str()?.to_owned();
            let uid = w["link_uid"].as_u64()?;
            // A straight veth steered through the switch (impaired or captured).
            let state = match w["steered"].as_bool() {
                Some(true) => "steered",
                _ => w["state"].as_str()?,
            };
            Some(((pod, uid), state.to_owned()))
        })
        .collect()
}

/// Every node's fast-path counters (a node whose daemon does not answer is left out).
pub(crate) fn node_counters(lab: &Lab, paths: &LabPaths) -> Vec<NodeCounters> {
    lab.nodes
        .iter()
        .filter_map(
            |node| match ask(&paths.node_socket(node), &Request::Counters) {
                Ok(Response::Counters(counters)) => Some(counters),
                _ => None,
            },
        )
        .collect()
}

/// The switch's counters of this lab's wire ends, by (pod, uid).
pub(crate) fn switch_counters(
    nodes: &[NodeCounters],
    lab: &Lab,
) -> HashMap<(String, u64), LinkEndCounters> {
    nodes
        .iter()
        .flat_map(|node| &node.links)
        .filter(|end| end.namespace == lab.name)
        .map(|end| ((end.pod.clone(), end.uid), end.clone()))
        .collect()
}
