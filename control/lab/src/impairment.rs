//! `xwirectl lab impair LINK ...`: changes a running lab's impairments. The lab's record
//! changes and its Topology objects go to every node again; the daemons tell their
//! workers, and a same-node wire moves onto the switch path (or back off it, once
//! nothing impairs or captures it). LINK is a uid or one endpoint, `POD:IF`; A is the
//! link's first endpoint in the lab file.

use anyhow::{bail, Result};
use xwire_model::impairment::Impairment;

use super::file::{Lab, LabLink};
use super::node_api;
use super::paths::LabPaths;

/// Which directions of a link a command is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Directions {
    AToB,
    BToA,
    Both,
}

impl Directions {
    fn indices(self) -> &'static [usize] {
        match self {
            Directions::AToB => &[0],
            Directions::BToA => &[1],
            Directions::Both => &[0, 1],
        }
    }
}

/// The link LINK names: its uid, or one of its endpoints as `POD:IF`.
pub fn find_link<'a>(lab: &'a Lab, link: &str) -> Result<&'a LabLink> {
    let found = match link.parse::<u64>() {
        Ok(uid) => lab.links.iter().find(|l| l.uid == uid),
        Err(_) => lab
            .links
            .iter()
            .find(|l| l.endpoints.iter().any(|e| e.to_string() == link)),
    };
    match found {
        Some(l) => Ok(l),
        None => bail!(
            "lab {} has no link {link} (give its uid, or one endpoint as POD:IF; `xwirectl lab status` lists them)",
            lab.name
        ),
    }
}

/// The lab with `link`'s impairment changed: `settings` laid over what is in force on
/// each of `directions`, or with `clear`, nothing in force there.
pub fn changed(
    lab: &Lab,
    link: &str,
    directions: Directions,
    settings: &Impairment,
    clear: bool,
) -> Result<Lab> {
    let uid = find_link(lab, link)?.uid;
    if !clear && settings.is_empty() {
        bail!("nothing to set: give --delay, --jitter, --loss, --rate, --corrupt, --duplicate or --reorder (or --clear)");
    }
    let mut new = lab.clone();
    let link = new
        .links
        .iter_mut()
        .find(|l| l.uid == uid)
        .expect("found above");
    for &i in directions.indices() {
        link.impair[i] = if clear {
            None
        } else {
            let merged = link.impair[i].clone().unwrap_or_default().merged(settings);
            merged
                .spec()
                .map_err(|e| anyhow::anyhow!("link {uid}: {e}"))?;
            Some(merged)
        };
    }
    Ok(new)
}

/// Applies a changed lab to its nodes and records it.
pub fn apply(lab: &Lab) -> Result<()> {
    let paths = LabPaths::of(lab);
    node_api::apply_topology(lab, &paths)?;
    std::fs::write(paths.lab_file(), serde_json::to_vec_pretty(lab)?)?;
    Ok(())
}

/// What is in force on a link, one line per direction.
pub fn describe(link: &LabLink) -> Vec<String> {
    let [a, b] = &link.endpoints;
    [(a, b, &link.impair[0]), (b, a, &link.impair[1])]
        .into_iter()
        .map(|(from, to, impair)| match impair {
            Some(i) => format!("{from} -> {to}: {i}"),
            None => format!("{from} -> {to}: not impaired"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lab() -> Lab {
        super::super::file::parse(
            "name: t\nnodes: [n1]\npods: {r1: {node: n1}, r2: {node: n1}}\nlinks:\n  - endpoints: [r1:eth1, r2:eth1]\n    impair: {delay: 10ms}\n",
            None,
        )
        .unwrap()
    }

    #[test]
    fn settings_are_laid_over_one_direction_and_cleared() {
        let lab = lab();
        let loss = Impairment {
            loss: Some(5.0),
            ..Impairment::default()
        };
        let new = changed(&lab, "r2:eth1", Directions::BToA, &loss, false).unwrap();
        let link = &new.links[0];
        assert_eq!(link.impair[0].as_ref().unwrap().loss, None);
        let b_to_a = link.impair[1].as_ref().unwrap();
        assert_eq!(
            (b_to_a.delay.as_deref(), b_to_a.loss),
            (Some("10ms"), Some(5.0))
        );
        let cleared = changed(&new, "0", Directions::Both, &Impairment::default(), true).unwrap();
        assert_eq!(cleared.links[0].impair, [None, None]);
        assert!(changed(&lab, "r9:eth1", Directions::Both, &loss, false).is_err());
        let bad = Impairment {
            loss: Some(500.0),
            ..Impairment::default()
        };
        let refused = changed(&lab, "0", Directions::Both, &bad, false).unwrap_err();
        assert!(refused.to_string().contains("loss"), "{refused}");
        assert!(changed(&lab, "0", Directions::Both, &Impairment::default(), false).is_err());
    }
}
