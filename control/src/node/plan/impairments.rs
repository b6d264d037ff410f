//! Which ports are to be told their link's impairment: every port the settings stage
//! looks at whose worker was last told other than what its link asks for. The ends of a
//! wire the same plan steers start with none; those of a wire it unsteers are closed.

use std::collections::BTreeMap;

use xwire_fastpath::impairment::ImpairmentSpec;

use super::steering::ends;
use super::{Action, Desired, Observed};
use crate::store::EndKey;

pub(super) fn plan(desired: &Desired, observed: &Observed, steering: &[Action]) -> Vec<Action> {
    let mut told: BTreeMap<&EndKey, Option<ImpairmentSpec>> = observed
        .impairments
        .iter()
        .map(|(key, told)| (key, *told))
        .collect();
    let mut opened = Vec::new();
    for action in steering {
        match action {
            Action::Steer { wire, pods, .. } => opened.extend(ends(wire, pods)),
            Action::Unsteer { wire, pods } => {
                for key in ends(wire, pods) {
                    told.remove(&key);
                }
            }
            _ => {}
        }
    }
    for key in &opened {
        told.insert(key, None);
    }
    told.into_iter()
        .filter_map(|(key, told)| {
            let wanted = desired.impairments.get(key).copied().flatten();
            (wanted != told).then(|| Action::Impair {
                key: key.clone(),
                impairment: wanted,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use xwire_proto::control::WireKey;

    use super::*;

    fn key(pod: &str) -> EndKey {
        EndKey::new("lab", pod, 1)
    }

    fn delay(ms: u64) -> Option<ImpairmentSpec> {
        Some(ImpairmentSpec {
            delay: Duration::from_millis(ms),
            ..ImpairmentSpec::default()
        })
    }

    #[test]
    fn a_port_told_other_than_its_link_says_is_told_again_and_a_new_steered_ports_too() {
        let mut desired = Desired::default();
        let mut observed = Observed::default();
        desired.impairments.insert(key("a"), delay(5));
        desired.impairments.insert(key("b"), None);
        desired.impairments.insert(key("c"), delay(7));
        observed.impairments.insert(key("a"), None);
        observed.impairments.insert(key("b"), delay(3));
        observed.impairments.insert(key("c"), delay(7));
        // A port no link asks anything of any more: its impairment goes.
        observed.impairments.insert(key("d"), delay(1));
        let expected = vec![
            Action::Impair {
                key: key("a"),
                impairment: delay(5),
            },
            Action::Impair {
                key: key("b"),
                impairment: None,
            },
            Action::Impair {
                key: key("d"),
                impairment: None,
            },
        ];
        assert_eq!(plan(&desired, &observed, &[]), expected);

        // Steered in this plan: both ends' ports open with none, and one is to have one.
        let wire = WireKey {
            namespace: "lab".into(),
            link_uid: 1,
        };
        let steer = Action::Steer {
            wire: wire.clone(),
            pods: ["e".into(), "f".into()],
            max_frame: 1518,
        };
        desired.impairments.insert(key("e"), delay(9));
        let planned = plan(&desired, &observed, &[steer]);
        assert!(planned.contains(&Action::Impair {
            key: key("e"),
            impairment: delay(9),
        }));
        assert!(!planned.iter().any(|a| a.subject() == key("f").to_string()));

        // Unsteered in this plan: its ports close, and nothing is told them.
        let unsteer = Action::Unsteer {
            wire,
            pods: ["a".into(), "b".into()],
        };
        let planned = plan(&desired, &observed, &[unsteer]);
        assert_eq!(
            planned,
            vec![Action::Impair {
                key: key("d"),
                impairment: None,
            }]
        );
    }
}
