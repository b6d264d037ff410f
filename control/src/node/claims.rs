//! Whether a peer may hold the far end of a wire it claims (see `peers.rs` for the rule).
//! The judgement is made twice with the same function: first on the peer desk's thread,
//! against a `ClaimView` that the node keeps up to date, so that a flood of bad claims
//! never reaches the node's thread; then on the node's thread, against the store, for
//! the claims the view let through (the view may be a moment old). Pure: no store, no
//! socket, no clock.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use xwire_proto::control::{Carrier, WireSpec};

use crate::topology::LinkSpec;

/// Who runs a pod, by the evidence this node accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Holder {
    /// Nothing says yet.
    NotPlaced,
    /// The cluster's word: the Pod's node.
    Node(String),
    /// The Topology's status (`src_ip`), where the source knows no pods: the node at
    /// this address.
    Address(IpAddr),
}

/// What a judgement reads.
pub(super) trait ClaimFacts {
    /// The links of `pod`'s Topology, if it has one.
    fn links(&self, namespace: &str, pod: &str) -> Option<Arc<Vec<LinkSpec>>>;
    fn holder(&self, namespace: &str, pod: &str) -> Holder;
    /// The configured address of peer `name`.
    fn peer_ip(&self, name: &str) -> Option<IpAddr>;
}

/// Why a claim was refused. Said in words only when it is logged (see `refusals.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// No topology here has the wire for the pod the claim names.
    NoSuchWire,
    /// The topology has this pod, not the claim's, as the far end.
    OtherFarEnd(String),
    /// The far end's pod runs on another node than the claimant.
    RunsElsewhere,
    /// Nothing says where the far end's pod runs yet.
    NotPlaced,
    /// One end's link says `carrier: vxlan` and the other's does not: a kernel tunnel at
    /// one end and a QUIC wire at the other would never meet.
    OtherCarrier { vxlan_here: bool },
}

/// Whether `from` may hold the far end that `spec` describes.
pub(super) fn judge(facts: &impl ClaimFacts, from: &str, spec: &WireSpec) -> Result<(), Refusal> {
    let namespace = &spec.key.namespace;
    let links = facts
        .links(namespace, &spec.receiver_pod)
        .ok_or(Refusal::NoSuchWire)?;
    let link = links
        .iter()
        .find(|l| l.uid == spec.key.link_uid)
        .ok_or(Refusal::NoSuchWire)?;
    if link.peer_pod != spec.sender_pod {
        return Err(Refusal::OtherFarEnd(link.peer_pod.clone()));
    }
    let vxlan_here = link.carrier == Some(Carrier::Vxlan);
    if vxlan_here != (spec.carrier == Carrier::Vxlan) {
        return Err(Refusal::OtherCarrier { vxlan_here });
    }
    // Only the placement says who holds the far end: a claim's own word never does.
    match facts.holder(namespace, &spec.sender_pod) {
        Holder::NotPlaced => Err(Refusal::NotPlaced),
        Holder::Node(node) if node == from => Ok(()),
        Holder::Address(ip) if facts.peer_ip(from) == Some(ip) => Ok(()),
        Holder::Node(_) | Holder::Address(_) => Err(Refusal::RunsElsewhere),
    }
}

impl Refusal {
    pub(super) fn describe(&self, spec: &WireSpec) -> String {
        let (wire, far_end) = (&spec.key, &spec.sender_pod);
        let why = match self {
            Refusal::NoSuchWire => format!(
                "no topology here has wire {} for pod {}/{}",
                wire.link_uid, wire.namespace, spec.receiver_pod
            ),
            Refusal::OtherFarEnd(pod) => {
                format!("the topology has {pod} as the far end, not {far_end}")
            }
            Refusal::RunsElsewhere => format!("pod {far_end} runs on another node"),
            Refusal::OtherCarrier { vxlan_here: true } => {
                "its link here says carrier vxlan, and the far end's does not".to_owned()
            }
            Refusal::OtherCarrier { vxlan_here: false } => {
                "the far end's link says carrier vxlan, and its link here does not".to_owned()
            }
            Refusal::NotPlaced => format!(
                "pod {far_end} has no placement yet (in a cluster, its Pod's node; elsewhere, its Topology's status.src_ip)"
            ),
        };
        format!(
            "wire {}/{} with far end {far_end}: {why}",
            wire.namespace, wire.link_uid
        )
    }
}

/// What the node knows of one pod, for the view.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct PodFacts {
    pub(super) namespace: String,
    pub(super) pod: String,
    pub(super) links: Option<Arc<Vec<LinkSpec>>>,
    pub(super) holder: Holder,
}

/// A change the node sends the view.
#[derive(Debug, Clone)]
pub(super) enum ViewChange {
    /// What the view holds now: every pod of every topology, each far end they name,
    /// and the peers' addresses.
    All {
        pods: Vec<PodFacts>,
        peer_ips: HashMap<String, IpAddr>,
    },
    /// These pods are as said now.
    Pods(Vec<PodFacts>),
    /// The peers' configured addresses now.
    PeerIps(HashMap<String, IpAddr>),
}

/// A pod's links, if it has a topology, and who runs it.
type ViewedPod = (Option<Arc<Vec<LinkSpec>>>, Holder);

/// The node's topologies and placements, as the peer desk judges claims by them: plain
/// maps, looked up without allocating (a flood's claims cost a lookup each).
#[derive(Debug, Default)]
pub(super) struct ClaimView {
    /// By namespace, then pod.
    pods: HashMap<String, HashMap<String, ViewedPod>>,
    peer_ips: HashMap<String, IpAddr>,
}

impl ClaimView {
    pub(super) fn apply(&mut self, change: ViewChange) {
        match change {
            ViewChange::All { pods, peer_ips } => {
                self.pods.clear();
                self.peer_ips = peer_ips;
                self.set(pods);
            }
            ViewChange::Pods(pods) => self.set(pods),
            ViewChange::PeerIps(peer_ips) => self.peer_ips = peer_ips,
        }
    }

    fn set(&mut self, pods: Vec<PodFacts>) {
        for facts in pods {
            let known = facts.links.is_some() || facts.holder != Holder::NotPlaced;
            if known {
                self.pods
                    .entry(facts.namespace)
                    .or_default()
                    .insert(facts.pod, (facts.links, facts.holder));
            } else if let Some(pods) = self.pods.get_mut(&facts.namespace) {
                pods.remove(&facts.pod);
                if pods.is_empty() {
                    self.pods.remove(&facts.namespace);
                }
            }
        }
    }

    fn facts(&self, namespace: &str, pod: &str) -> Option<&ViewedPod> {
        self.pods.get(namespace)?.get(pod)
    }
}

impl ClaimFacts for ClaimView {
    fn links(&self, namespace: &str, pod: &str) -> Option<Arc<Vec<LinkSpec>>> {
        self.facts(namespace, pod)?.0.clone()
    }

    fn holder(&self, namespace: &str, pod: &str) -> Holder {
        self.facts(namespace, pod)
            .map_or(Holder::NotPlaced, |(_, holder)| holder.clone())
    }

    fn peer_ip(&self, name: &str) -> Option<IpAddr> {
        self.peer_ips.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xwire_proto::control::WireKey;

    fn link(uid: u64, peer_pod: &str) -> LinkSpec {
        LinkSpec::bare(uid, peer_pod, "eth1")
    }

    fn pod(name: &str, links: Option<Vec<LinkSpec>>, holder: Holder) -> PodFacts {
        PodFacts {
            namespace: "lab".into(),
            pod: name.into(),
            links: links.map(Arc::new),
            holder,
        }
    }

    /// `sender` on the far end claims wire `uid` of `receiver`.
    fn claim(uid: u64, sender: &str, receiver: &str) -> WireSpec {
        WireSpec {
            key: WireKey::new("lab", uid),
            sender_pod: sender.into(),
            sender_intf: "eth1".into(),
            receiver_pod: receiver.into(),
            receiver_intf: "eth1".into(),
            carrier: Carrier::Datagram,
        }
    }

    fn view() -> ClaimView {
        let mut view = ClaimView::default();
        view.apply(ViewChange::All {
            pods: vec![
                pod(
                    "r1",
                    Some(vec![link(1, "r2"), link(2, "r3")]),
                    Holder::NotPlaced,
                ),
                pod("r2", None, Holder::Node("n2".into())),
                pod("r3", None, Holder::Address("10.0.0.3".parse().unwrap())),
            ],
            peer_ips: HashMap::from([
                ("n2".into(), "10.0.0.2".parse().unwrap()),
                ("n3".into(), "10.0.0.3".parse().unwrap()),
            ]),
        });
        view
    }

    #[test]
    fn only_the_node_the_placement_names_may_claim_the_far_end() {
        let view = view();
        assert_eq!(judge(&view, "n2", &claim(1, "r2", "r1")), Ok(()));
        assert_eq!(judge(&view, "n3", &claim(2, "r3", "r1")), Ok(()));
        assert_eq!(
            judge(&view, "n3", &claim(1, "r2", "r1")),
            Err(Refusal::RunsElsewhere)
        );
        assert_eq!(
            judge(&view, "n2", &claim(2, "r3", "r1")),
            Err(Refusal::RunsElsewhere)
        );
        assert_eq!(
            judge(&view, "n2", &claim(1, "r9", "r1")),
            Err(Refusal::OtherFarEnd("r2".into()))
        );
        assert_eq!(
            judge(&view, "n2", &claim(7, "r2", "r1")),
            Err(Refusal::NoSuchWire)
        );
        assert_eq!(
            judge(&view, "n2", &claim(1, "r1", "nobody")),
            Err(Refusal::NoSuchWire)
        );
    }

    #[test]
    fn a_claim_on_a_kernel_tunnel_meets_only_a_link_that_says_vxlan_too() {
        let vxlan = |spec: WireSpec| WireSpec {
            carrier: Carrier::Vxlan,
            ..spec
        };
        let mut tunnel = link(1, "r2");
        tunnel.carrier = Some(Carrier::Vxlan);
        let mut view = super::tests::view();
        assert_eq!(
            judge(&view, "n2", &vxlan(claim(1, "r2", "r1"))),
            Err(Refusal::OtherCarrier { vxlan_here: false })
        );
        let stream = WireSpec {
            carrier: Carrier::Stream,
            ..claim(2, "r3", "r1")
        };
        // A stream end meets a datagram end: each sender picks its own direction's.
        assert_eq!(judge(&view, "n3", &stream), Ok(()));
        view.apply(ViewChange::Pods(vec![pod(
            "r1",
            Some(vec![tunnel]),
            Holder::NotPlaced,
        )]));
        assert_eq!(judge(&view, "n2", &vxlan(claim(1, "r2", "r1"))), Ok(()));
        let refused = judge(&view, "n2", &claim(1, "r2", "r1"));
        assert_eq!(refused, Err(Refusal::OtherCarrier { vxlan_here: true }));
        let said = refused.unwrap_err().describe(&claim(1, "r2", "r1"));
        assert!(said.contains("carrier vxlan"), "{said}");
    }

    #[test]
    fn the_view_follows_what_the_node_sends() {
        let mut view = view();
        // r2 is not placed any more, and r3's node has moved.
        view.apply(ViewChange::Pods(vec![pod("r2", None, Holder::NotPlaced)]));
        assert_eq!(
            judge(&view, "n2", &claim(1, "r2", "r1")),
            Err(Refusal::NotPlaced)
        );
        view.apply(ViewChange::PeerIps(HashMap::from([(
            "n3".into(),
            "10.0.0.30".parse().unwrap(),
        )])));
        assert_eq!(
            judge(&view, "n3", &claim(2, "r3", "r1")),
            Err(Refusal::RunsElsewhere)
        );
        // r1's topology is gone: its wires are no wire of this node's.
        view.apply(ViewChange::Pods(vec![pod("r1", None, Holder::NotPlaced)]));
        assert_eq!(
            judge(&view, "n3", &claim(2, "r3", "r1")),
            Err(Refusal::NoSuchWire)
        );
        assert!(!view.pods["lab"].contains_key("r1"));
    }
}
