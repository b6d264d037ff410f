//! What the kernel would do for a remote wire on this machine: `lab bench` builds a VXLAN
//! tunnel between the same two emulated nodes, over the same underlay, with a pod of its
//! own at each end, measures it as it measures a wire, and removes it. A remote wire's
//! figures are read against this row of the same run, not against a figure taken on some
//! other machine.
//!
//! Each node gets a bridge joining its baseline pod's veth to a VXLAN device on the
//! node's underlay interface; the pods are namespaces of the lab (`xl.LAB.vx.N`), so
//! `lab down` removes one left by a bench that was killed, and the node's devices are
//! deleted first if a killed bench left them.

use anyhow::{bail, Result};
use xwire_netns::links::{create_veth, EndSettings};

use super::file::Lab;
use super::namespaces;
use super::netdev::{attach, link_named, make_bridge};
use super::paths::LabPaths;
use super::underlay::{node_address, node_underlay_mtu, pool_of};

/// What VXLAN adds to each frame: outer Ethernet, IPv4, UDP and VXLAN headers.
pub(crate) const VXLAN_OVERHEAD: u32 = 50;
/// A VNI and port nothing else in a lab uses: the daemons listen on QUIC's, gateways on
/// theirs, and wires with `carrier: vxlan` on IANA's 4789; this is the kernel's own
/// older default.
const VNI: u32 = 4242;
const VXLAN_PORT: u16 = 8472;
const BRIDGE: &str = "xbase-br";
const TUNNEL: &str = "xbase-vx";
/// The node's end of the baseline pod's veth.
const NODE_END: &str = "xbase-p";
/// The pod's end, as a lab pod's first wire is named.
pub(crate) const POD_END: &str = "eth1";
const UNDERLAY_IF: &str = "underlay0";

/// The baseline between two nodes while it stands; dropping it removes it.
pub(crate) struct VxlanBaseline {
    paths: LabPaths,
    nodes: [String; 2],
    pods: [String; 2],
    /// The MTU of the pods' interfaces.
    pub mtu: u32,
}

/// Why two nodes have no baseline, if they have none: a VXLAN needs them on one
/// underlay bridge, and nodes in different pools reach each other only through their
/// gateways' tunnels.
pub fn unavailable(lab: &Lab, nodes: [&str; 2]) -> Option<String> {
    let pools = nodes.map(|n| pool_of(lab, n));
    (pools[0] != pools[1]).then(|| {
        format!(
            "nodes {} and {} are in different pools: no kernel VXLAN between them to compare with",
            nodes[0], nodes[1]
        )
    })
}

impl VxlanBaseline {
    /// Builds the tunnel between `nodes` with pods whose interfaces have `mtu` (capped
    /// to what the tunnel carries over the lab's underlay).
    pub fn build(lab: &Lab, nodes: [&str; 2], mtu: u32) -> Result<VxlanBaseline> {
        if let Some(why) = unavailable(lab, nodes) {
            bail!("{why}");
        }
        let paths = LabPaths::of(lab);
        let mtu = mtu.min(node_underlay_mtu(lab) - VXLAN_OVERHEAD);
        let baseline = VxlanBaseline {
            pods: [0, 1].map(|i| format!("{}.vx.{i}", paths.lab_netns())),
            nodes: nodes.map(str::to_owned),
            paths,
            mtu,
        };
        baseline.remove_node_devices();
        for pod in &baseline.pods {
            namespaces::remove(pod);
        }
        // From here on, a failure leaves the half-made baseline to `Drop`.
        for i in 0..2 {
            baseline.build_side(lab, i)?;
        }
        Ok(baseline)
    }

    fn build_side(&self, lab: &Lab, i: usize) -> Result<()> {
        let node_ns = namespaces::open(&self.paths.node_netns(&self.nodes[i]))?;
        let pod_ns = namespaces::create(&self.pods[i])?;
        let local: std::net::Ipv4Addr = node_address(lab, &self.nodes[i]).parse()?;
        let remote: std::net::Ipv4Addr = node_address(lab, &self.nodes[1 - i]).parse()?;
        let tunnel_mtu = node_underlay_mtu(lab) - VXLAN_OVERHEAD;
        node_ns.netlink(&format!("add {TUNNEL}"), |h| async move {
            let underlay = link_named(&h, UNDERLAY_IF)
                .await?
                .ok_or(rtnetlink::Error::RequestFailed)?;
            let tunnel = rtnetlink::LinkVxlan::new(TUNNEL, VNI)
                .local(local)
                .remote(remote)
                .port(VXLAN_PORT)
                .dev(underlay.header.index)
                .mtu(tunnel_mtu)
                .up()
                .build();
            h.link().add(tunnel).execute().await
        })?;
        make_bridge(&node_ns, BRIDGE, None, None)?;
        attach(&node_ns, TUNNEL, BRIDGE)?;
        let mut pod_end = EndSettings::named(POD_END);
        pod_end.mtu = Some(self.mtu);
        pod_end.checksum_off = true;
        let mut node_end = EndSettings::named(NODE_END);
        node_end.mtu = Some(self.mtu);
        create_veth(&pod_ns, &pod_end, &node_ns, &node_end)?;
        attach(&node_ns, NODE_END, BRIDGE)?;
        Ok(())
    }

    /// The namespace names of the two pods, in the order of the nodes.
    pub fn pod_netns(&self) -> &[String; 2] {
        &self.pods
    }

    /// The baseline's name in a table: the two nodes it joins.
    pub fn label(&self) -> String {
        format!("{} -> {}", self.nodes[0], self.nodes[1])
    }

    fn remove_node_devices(&self) {
        for node in &self.nodes {
            let Ok(ns) = namespaces::open(&self.paths.node_netns(node)) else {
                continue;
            };
            for name in [NODE_END, TUNNEL, BRIDGE] {
                let _ = ns.netlink(&format!("delete {name}"), |h| async move {
                    if let Ok(Some(link)) = link_named(&h, name).await {
                        h.link().del(link.header.index).execute().await?;
                    }
                    Ok(())
                });
            }
        }
    }
}

impl Drop for VxlanBaseline {
    fn drop(&mut self) {
        self.remove_node_devices();
        for pod in &self.pods {
            namespaces::remove(pod);
        }
    }
}
