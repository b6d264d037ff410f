//! `xwirectl wires` as a table: one line per wire record of the node, with the switch's
//! counters of the ends it carries.

use std::collections::HashMap;

use xwire_lab::status::{peer_cells, PEER_HEADER};
use xwire_lab::table::{self, count};
use xwire_proto::local::{LinkEndCounters, NodeCounters, NodeState};

pub fn render(state: &NodeState, counters: &NodeCounters) -> String {
    let by_end: HashMap<(&str, &str, u64), &LinkEndCounters> = counters
        .links
        .iter()
        .map(|end| ((end.namespace.as_str(), end.pod.as_str(), end.uid), end))
        .collect();
    let mut out = format!(
        "node {}: {}, {}\n\n",
        state.node,
        count(state.attachments.len(), "attachment"),
        count(state.wires.len(), "wire end"),
    );
    let mut wires = table::new(
        &[
            "NAMESPACE",
            "POD",
            "IFACE",
            "UID",
            "PEER",
            "STATE",
            "SENT",
            "RECEIVED",
            "DROPS",
        ],
        &[3, 6, 7, 8],
    );
    for wire in &state.wires {
        let text = |key: &str| wire[key].as_str().unwrap_or("").to_owned();
        let (namespace, pod) = (text("topo_namespace"), text("local_pod_name"));
        let uid = wire["link_uid"].as_u64().unwrap_or(0);
        let peer = match wire["peer_node"].as_str() {
            Some(node) => format!("{}@{node}", text("peer_pod")),
            None => text("peer_pod"),
        };
        let state = match wire["steered"].as_bool() {
            Some(true) => "steered".to_owned(),
            _ => text("state"),
        };
        // A plain veth pair: the switch never sees its frames.
        let (sent, received, drops) = match by_end.get(&(namespace.as_str(), pod.as_str(), uid)) {
            Some(end) => {
                let drops = end.egress.drops.values().sum::<u64>()
                    + end.ingress.drops.values().sum::<u64>()
                    + end.kernel_drops.values().sum::<u64>();
                (
                    end.egress.frames.to_string(),
                    end.ingress.frames.to_string(),
                    drops.to_string(),
                )
            }
            None => ("-".into(), "-".into(), "-".into()),
        };
        wires.add_row(vec![
            namespace,
            pod,
            text("local_pod_ifname"),
            uid.to_string(),
            peer,
            state,
            sent,
            received,
            drops,
        ]);
    }
    out.push_str(&table::render(&wires));
    if !counters.peers.is_empty() {
        let mut peers = table::new(&PEER_HEADER, &[1, 3, 4, 5, 6, 7]);
        for peer in &counters.peers {
            peers.add_row(peer_cells(peer));
        }
        out.push('\n');
        out.push_str(&table::render(&peers));
    }
    if counters.worker_running_seconds > 0.0 {
        // A daemon from before the nice value was reported sends none.
        let nice: Vec<String> = counters.worker_nice.iter().map(i8::to_string).collect();
        let nice = if nice.is_empty() {
            String::new()
        } else {
            format!(" (nice {})", nice.join(","))
        };
        out.push_str(&format!(
            "\nworker busy {:.1}% of {:.0} s{nice}\n",
            100.0 * counters.worker_busy_seconds / counters.worker_running_seconds,
            counters.worker_running_seconds,
        ));
        out.push_str(&format!(
            "worker away from its ports: longest {:.1} ms; over 1/4/16 ms: {}/{}/{} times\n",
            counters.worker_longest_away_seconds * 1000.0,
            counters.worker_away_over_1ms,
            counters.worker_away_over_4ms,
            counters.worker_away_over_16ms
        ));
    }
    out.push_str("\n(SENT/RECEIVED: frames the pod sent into the wire and received from it through the switch; - : a plain veth pair)\n");
    out
}
