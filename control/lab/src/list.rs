//! `lab list`: the labs on this machine, each with its size, its age and whether its
//! supervisor still runs.

use std::time::SystemTime;

use serde::Serialize;

use crate::paths::LabPaths;

/// One lab, as `lab list` shows it.
#[derive(Debug, Serialize)]
pub struct LabSummary {
    pub name: String,
    pub nodes: usize,
    pub pods: usize,
    pub wires: usize,
    /// Since `lab up` wrote the lab's file; none when there is no file.
    pub age_seconds: Option<u64>,
    /// `running` (its supervisor keeps its daemons), `stopped` (its supervisor is gone),
    /// or `broken` (what is left has no lab file); `lab down` clears the last two.
    pub state: &'static str,
}

/// Every lab present, by name.
pub fn list() -> Vec<LabSummary> {
    crate::down::labs_present()
        .into_iter()
        .map(|name| summary(&name))
        .collect()
}

fn summary(name: &str) -> LabSummary {
    let lab = crate::status::read_lab(name).ok();
    let paths = LabPaths::new(name).ok();
    let age_seconds = (paths.as_ref())
        .and_then(|p| std::fs::metadata(p.lab_file()).ok()?.modified().ok())
        .and_then(|made| SystemTime::now().duration_since(made).ok())
        .map(|age| age.as_secs());
    let running = paths.as_ref().is_some_and(crate::down::supervisor_runs);
    LabSummary {
        name: name.to_owned(),
        nodes: lab.as_ref().map_or(0, |l| l.nodes.len()),
        pods: lab.as_ref().map_or(0, |l| l.pods.len()),
        wires: lab.as_ref().map_or(0, |l| l.links.len()),
        age_seconds,
        state: match (&lab, running) {
            (None, _) => "broken",
            (Some(_), true) => "running",
            (Some(_), false) => "stopped",
        },
    }
}

/// A table, one lab a line; nothing when there are no labs (as `ls` of an empty
/// directory).
pub fn render(labs: &[LabSummary]) -> String {
    if labs.is_empty() {
        return String::new();
    }
    let mut table = super::table::new(
        &["NAME", "NODES", "PODS", "WIRES", "AGE", "STATE"],
        &[1, 2, 3, 4],
    );
    for lab in labs {
        table.add_row(vec![
            lab.name.clone(),
            lab.nodes.to_string(),
            lab.pods.to_string(),
            lab.wires.to_string(),
            lab.age_seconds.map_or("-".to_owned(), age),
            lab.state.to_string(),
        ]);
    }
    super::table::render(&table)
}

/// `45s`, `12m`, `3h`, `2d`: the largest unit that is at least one.
fn age(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_in_their_largest_whole_unit() {
        assert_eq!(age(45), "45s");
        assert_eq!(age(60), "1m");
        assert_eq!(age(7199), "1h");
        assert_eq!(age(3 * 86_400 + 5), "3d");
    }

    #[test]
    fn no_labs_print_nothing_and_a_lab_prints_under_its_headers() {
        assert_eq!(render(&[]), "");
        let table = render(&[LabSummary {
            name: "demo".into(),
            nodes: 2,
            pods: 3,
            wires: 3,
            age_seconds: Some(125),
            state: "running",
        }]);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("NAME") && lines[0].ends_with("STATE"));
        let fields: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(fields, ["demo", "2", "3", "3", "2m", "running"]);
    }
}
