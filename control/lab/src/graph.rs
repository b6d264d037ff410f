//! `xwirectl lab graph`: the lab's topology as a Mermaid flowchart or a Graphviz graph,
//! nodes as groups holding their pods, each wire an edge labelled with its uid, its two
//! interfaces, its kind and its carrier (as `lab status` reports them now).

use std::fmt::Write;

use crate::file::Lab;
use crate::status::LabStatus;

/// The text format of the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Mermaid,
    Dot,
}

/// One wire's edge label: `uid: a_if - b_if (kind, carrier)`.
fn label(lab: &Lab, status: &LabStatus, index: usize) -> String {
    let link = &lab.links[index];
    let [a, b] = &link.endpoints;
    let (kind, carrier) = status
        .wires
        .iter()
        .find(|w| w.uid == link.uid)
        .map_or(("?", "?"), |w| (w.kind, w.carrier.as_str()));
    format!(
        "{}: {} - {} ({kind}, {carrier})",
        link.uid, a.ifname, b.ifname
    )
}

/// Mermaid ids are letters, digits and `_`; names are shown as labels.
fn mermaid_id(prefix: &str, name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{prefix}_{safe}")
}

/// DOT strings are quoted; a quote or backslash inside is escaped.
fn dot_quote(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

pub fn render(lab: &Lab, status: &LabStatus, format: Format) -> String {
    let mut out = String::new();
    match format {
        Format::Mermaid => {
            let _ = writeln!(out, "flowchart LR");
            for node in &lab.nodes {
                let _ = writeln!(out, "  subgraph {}[\"{node}\"]", mermaid_id("n", node));
                for (pod, _) in lab.pods.iter().filter(|(_, n)| *n == node) {
                    let _ = writeln!(out, "    {}[\"{pod}\"]", mermaid_id("p", pod));
                }
                let _ = writeln!(out, "  end");
            }
            for (index, link) in lab.links.iter().enumerate() {
                let [a, b] = &link.endpoints;
                let _ = writeln!(
                    out,
                    "  {} ---|\"{}\"| {}",
                    mermaid_id("p", &a.pod),
                    label(lab, status, index).replace('"', "'"),
                    mermaid_id("p", &b.pod)
                );
            }
        }
        Format::Dot => {
            let _ = writeln!(out, "graph {} {{", dot_quote(&lab.name));
            for node in &lab.nodes {
                let _ = writeln!(
                    out,
                    "  subgraph {} {{",
                    dot_quote(&format!("cluster_{node}"))
                );
                let _ = writeln!(out, "    label={};", dot_quote(node));
                for (pod, _) in lab.pods.iter().filter(|(_, n)| *n == node) {
                    let _ = writeln!(out, "    {};", dot_quote(pod));
                }
                let _ = writeln!(out, "  }}");
            }
            for (index, link) in lab.links.iter().enumerate() {
                let [a, b] = &link.endpoints;
                let _ = writeln!(
                    out,
                    "  {} -- {} [label={}];",
                    dot_quote(&a.pod),
                    dot_quote(&b.pod),
                    dot_quote(&label(lab, status, index))
                );
            }
            let _ = writeln!(out, "}}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::WireStatus;

    fn lab() -> Lab {
        crate::file::parse(
            "name: g
nodes: [node-a, node-b]
pods:
  r1: {node: node-a}
  r2: {node: node-a}
  r3: {node: node-b}
links:
  - endpoints: [r1:eth1, r2:eth1]
  - endpoints: [r1:eth2, r3:eth1]
    carrier: stream
",
            None,
        )
        .unwrap()
    }

    fn status(lab: &Lab) -> LabStatus {
        let wire = |uid: u64, kind: &'static str, carrier: &str| WireStatus {
            uid,
            endpoints: [String::new(), String::new()],
            interface_names: [None, None],
            kind,
            carrier: carrier.into(),
            ips: None,
            state: "up".into(),
            end_states: ["veth".into(), "veth".into()],
            counters: Default::default(),
            switch: [None, None],
            impairments: [None, None],
        };
        LabStatus {
            name: lab.name.clone(),
            nodes: Vec::new(),
            pods: Vec::new(),
            wires: vec![wire(0, "local", "veth"), wire(1, "remote", "stream")],
            mgmt: None,
        }
    }

    #[test]
    fn mermaid_groups_pods_by_node_and_labels_each_wire() {
        let lab = lab();
        let text = render(&lab, &status(&lab), Format::Mermaid);
        assert_eq!(
            text,
            "flowchart LR
  subgraph n_node_a[\"node-a\"]
    p_r1[\"r1\"]
    p_r2[\"r2\"]
  end
  subgraph n_node_b[\"node-b\"]
    p_r3[\"r3\"]
  end
  p_r1 ---|\"0: eth1 - eth1 (local, veth)\"| p_r2
  p_r1 ---|\"1: eth2 - eth1 (remote, stream)\"| p_r3
"
        );
    }

    #[test]
    fn dot_puts_each_node_in_a_cluster() {
        let lab = lab();
        let text = render(&lab, &status(&lab), Format::Dot);
        assert!(text.starts_with("graph \"g\" {\n"), "{text}");
        assert!(
            text.contains(
                "  subgraph \"cluster_node-b\" {\n    label=\"node-b\";\n    \"r3\";\n  }\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  \"r1\" -- \"r3\" [label=\"1: eth2 - eth1 (remote, stream)\"];\n"),
            "{text}"
        );
        assert!(text.ends_with("}\n"), "{text}");
    }
}
