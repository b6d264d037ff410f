//! The host's neighbour tables (ARP, and IPv6 neighbour discovery) hold the entries of
//! every network namespace on the machine, up to `gc_thresh3` entries (1,024 by
//! default). Past it the kernel refuses new entries ("neighbor table overflow" in the
//! kernel log), and a pod's address resolution waits for its retry a second later: in a
//! 1,500-pod lab, 48 of 1,500 first pings across its wires took 1 to 8 s, and none did
//! with the neighbours set by hand. So `lab up` raises the limits to what the lab needs.
//! It never lowers them: other labs, and whatever else runs on the host, share them.

use std::path::Path;

use anyhow::{Context, Result};

use super::file::Lab;

/// Neighbour entries the lab's pods and host make in one table: each end of a link learns
/// its peer's (IPv4 where the link has addresses, IPv6 link-local on every link), and on
/// the management network each pod learns the host's and the host each pod's. Both
/// tables are sized for every link's ends.
pub(crate) fn entries_needed(lab: &Lab) -> u64 {
    let mgmt = if lab.mgmt.is_some() {
        2 * lab.pods.len()
    } else {
        0
    };
    (2 * lab.links.len() + mgmt) as u64
}

/// The three thresholds for `needed` entries: no collection below what the lab needs,
/// and twice and four times that before the kernel collects or refuses.
pub(crate) fn thresholds(needed: u64) -> [u64; 3] {
    [needed, 2 * needed, 4 * needed]
}

const TABLES: [&str; 2] = [
    "/proc/sys/net/ipv4/neigh/default",
    "/proc/sys/net/ipv6/neigh/default",
];

/// Raises the host's neighbour table limits that are below what `lab` needs, and says
/// which it raised. A host whose limits are not in this namespace (`xwirectl` run in
/// another network namespace) or have no IPv6 table is left as it is.
pub(crate) fn raise_for(lab: &Lab) -> Result<Vec<String>> {
    let wanted = thresholds(entries_needed(lab));
    let mut raised = Vec::new();
    for table in TABLES {
        // The largest first: the kernel uses them as they are written.
        for (name, want) in ["gc_thresh3", "gc_thresh2", "gc_thresh1"]
            .into_iter()
            .zip(wanted.into_iter().rev())
        {
            let path = Path::new(table).join(name);
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let now: u64 = text.trim().parse().unwrap_or(0);
            if now >= want {
                continue;
            }
            std::fs::write(&path, want.to_string())
                .with_context(|| format!("raise {} to {want}", path.display()))?;
            raised.push(format!("{} {now} -> {want}", path.display()));
        }
    }
    Ok(raised)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lab_needs_an_entry_per_link_end_and_two_per_pod_on_the_management_network() {
        let text = "name: n\nnodes: [a]\npods:\n  p: {node: a}\n  q: {node: a}\n  r: {node: a}\n\
                    links:\n  - endpoints: [p:eth1, q:eth1]\n  - endpoints: [q:eth2, r:eth1]\n";
        let lab = xwire_model::lab::parse(text, None).unwrap();
        let mgmt = if lab.mgmt.is_some() { 6 } else { 0 };
        assert_eq!(entries_needed(&lab), 4 + mgmt);
        assert_eq!(thresholds(100), [100, 200, 400]);
    }
}
