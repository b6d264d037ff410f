//! The lab file: what it may say, and its checks, are the model's (`xwire_model::lab`);
//! reading it, and the Topology objects of a checked lab (which need its nodes' underlay
//! addresses), are here.

use xwire_model::topology::Topology;

pub use xwire_model::lab::*;

/// The largest lab file read (a lab of `MAX_PODS` pods with their links takes a few MiB).
pub(crate) const MAX_FILE_BYTES: u64 = 16 << 20;

/// Reads a lab file, or a containerlab file to import: at most `MAX_FILE_BYTES`, so that a
/// huge file (or a path such as /dev/zero) is refused before it fills memory.
pub fn read(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(std::io::Error::other(format!(
            "larger than {} MiB, the most a lab file may be",
            MAX_FILE_BYTES >> 20
        )));
    }
    Ok(text)
}

/// The Topology objects of a lab (`xwire_model::lab::topologies`), each with the address
/// of the node that runs the pod as its status's `src_ip` (meshnet's field), so that a
/// node takes a wire's far end only from that node.
pub fn topologies(lab: &Lab) -> Vec<Topology> {
    let mut objects = xwire_model::lab::topologies(lab);
    for object in &mut objects {
        object.status = lab
            .pods
            .get(&object.metadata.name)
            .map(|node| serde_json::json!({ "src_ip": super::underlay::node_address(lab, node) }));
    }
    objects
}

#[cfg(test)]
mod tests {
    use super::*;
    use xwire_model::topology;

    /// The model's demo lab (`xwire_model::lab`'s tests).
    const DEMO: &str = include_str!("../../model/tests/fixtures/demo-lab.yaml");

    #[test]
    fn the_topologies_are_one_per_pod_and_describe_each_wire_from_both_ends() {
        let lab = parse(DEMO, None).unwrap();
        let objects = topologies(&lab);
        let names: Vec<&str> = objects.iter().map(|t| t.metadata.name.as_str()).collect();
        assert_eq!(names, ["r1", "r2", "r3"]);
        assert!(objects.iter().all(|t| t.metadata.namespace == "demo"));
        // Each says where its pod runs: its node's underlay address.
        assert_eq!(
            objects[2].status.as_ref().unwrap()["src_ip"],
            super::super::underlay::node_address(&lab, "node-b")
        );
        topology::check_together(&objects).unwrap();
        let r3 = &objects[2];
        let link = r3.link(7).unwrap();
        assert_eq!(
            (link.peer_pod.as_str(), link.local_intf.as_str()),
            ("r1", "eth1")
        );
        assert_eq!(link.local_ip.as_deref(), Some("192.0.2.2/30"));
        assert_eq!(link.peer_ip.as_deref(), Some("192.0.2.1/30"));
        assert_eq!(link.carrier.as_deref(), Some("datagram"));
        // The same objects, as JSON, are what `xwirectl topology apply` takes.
        let json = serde_json::to_string(&objects).unwrap();
        assert_eq!(topology::parse(&json).unwrap(), objects);
    }

    #[test]
    fn a_file_larger_than_a_lab_file_may_be_is_refused_unread() {
        // /dev/zero never ends: reading it whole would fill memory.
        let e = read(std::path::Path::new("/dev/zero")).unwrap_err();
        assert!(e.to_string().contains("the most a lab file may be"), "{e}");
    }
}
