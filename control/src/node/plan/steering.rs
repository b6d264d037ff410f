//! Which same-node wires go through the switch in place (`node/steered.rs` says how): a
//! straight veth between two pods of this node whose link is impaired either way, or
//! captured, and whose frames fit native XDP on a veth. One that should not any more
//! goes back to a straight veth.

use xwire_proto::control::WireKey;

use super::{Action, Desired, Observed};
use crate::store::EndKey;

/// What a same-node wire's links, and the captures, ask of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SteeringWanted {
    /// Its link is impaired on either end, or a capture runs on it.
    pub(crate) through_switch: bool,
    /// Its largest frame fits native XDP on a veth (else it is switched: `switched.rs`).
    pub(crate) fits: bool,
    /// The largest frame either link's MTU allows.
    pub(crate) max_frame: usize,
}

/// A same-node wire as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SteeringSeen {
    /// The pods of its two ends (the one it was found by first).
    pub(crate) pods: [String; 2],
    /// Both ends' records say it is a straight veth between the two pods.
    pub(crate) straight_veth: bool,
    /// The worker steers it now.
    pub(crate) steered: bool,
}

pub(super) fn plan(desired: &Desired, observed: &Observed) -> Vec<Action> {
    let mut actions = Vec::new();
    for (wire, seen) in &observed.steering {
        let wanted = desired.steering.get(wire);
        let steer = seen.straight_veth && wanted.is_some_and(|w| w.through_switch && w.fits);
        match (steer, seen.steered, wanted) {
            (true, false, Some(wanted)) => actions.push(Action::Steer {
                wire: wire.clone(),
                pods: seen.pods.clone(),
                max_frame: wanted.max_frame,
            }),
            (false, true, _) => actions.push(Action::Unsteer {
                wire: wire.clone(),
                pods: seen.pods.clone(),
            }),
            _ => {}
        }
    }
    actions
}

/// The two ends' keys of a steered (or to be steered) wire.
pub(super) fn ends(wire: &WireKey, pods: &[String; 2]) -> [EndKey; 2] {
    pods.clone()
        .map(|pod| EndKey::new(&wire.namespace, &pod, wire.link_uid))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(uid: u64) -> WireKey {
        WireKey {
            namespace: "lab".into(),
            link_uid: uid,
        }
    }

    fn seen(straight_veth: bool, steered: bool) -> SteeringSeen {
        SteeringSeen {
            pods: ["a".into(), "b".into()],
            straight_veth,
            steered,
        }
    }

    fn wanted(through_switch: bool, fits: bool) -> SteeringWanted {
        SteeringWanted {
            through_switch,
            fits,
            max_frame: 1518,
        }
    }

    /// One wire, found as `seen`, asked for as `wanted` (`None`: its links are gone).
    fn plan_one(seen: SteeringSeen, wanted: Option<SteeringWanted>) -> Vec<Action> {
        let mut desired = Desired::default();
        let mut observed = Observed::default();
        observed.steering.insert(wire(1), seen);
        if let Some(wanted) = wanted {
            desired.steering.insert(wire(1), wanted);
        }
        plan(&desired, &observed)
    }

    #[test]
    fn an_impaired_or_captured_veth_that_fits_is_steered_and_one_no_longer_so_goes_back() {
        let steer = Action::Steer {
            wire: wire(1),
            pods: ["a".into(), "b".into()],
            max_frame: 1518,
        };
        let unsteer = Action::Unsteer {
            wire: wire(1),
            pods: ["a".into(), "b".into()],
        };
        let rows = [
            (
                seen(true, false),
                Some(wanted(true, true)),
                vec![steer.clone()],
            ),
            (seen(true, true), Some(wanted(true, true)), vec![]),
            (
                seen(true, true),
                Some(wanted(false, true)),
                vec![unsteer.clone()],
            ),
            (seen(true, false), Some(wanted(false, true)), vec![]),
            // Too large to steer: switched instead (the wires' stage remakes it).
            (seen(true, false), Some(wanted(true, false)), vec![]),
            // Not a straight veth (switched, or pending): nothing to steer.
            (seen(false, false), Some(wanted(true, true)), vec![]),
            (
                seen(false, true),
                Some(wanted(true, true)),
                vec![unsteer.clone()],
            ),
            // Its links are gone.
            (seen(true, true), None, vec![unsteer]),
        ];
        for (i, (seen, wanted, expected)) in rows.into_iter().enumerate() {
            assert_eq!(plan_one(seen, wanted), expected, "row {i}");
        }
    }
}
