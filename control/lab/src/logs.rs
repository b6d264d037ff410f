//! `xwirectl lab logs [NODE]`: the logs a lab keeps. The supervisor's (daemons started,
//! exited, restarted) is `supervisor.log` in the lab's directory; each node's daemon
//! writes its lines (filtered by `XWIRE_LOG` or `RUST_LOG` in `lab up`'s environment)
//! to `nodes/NODE/xwired.log`.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::file::Lab;
use super::paths::LabPaths;

const FOLLOW_EVERY: Duration = Duration::from_millis(200);

/// The logs to show: `node`'s daemon's, or the supervisor's and every daemon's, each with
/// the label its lines are prefixed with.
pub fn sources(lab: &Lab, node: Option<&str>) -> Result<Vec<(String, PathBuf)>> {
    let paths = LabPaths::of(lab);
    match node {
        Some(node) if lab.nodes.iter().any(|n| n == node) => {
            Ok(vec![(node.to_owned(), paths.node_log(node))])
        }
        Some(node) => bail!(
            "lab {} has no node {node} (its nodes: {})",
            lab.name,
            lab.nodes.join(", ")
        ),
        None => Ok(
            std::iter::once(("supervisor".to_owned(), paths.supervisor_log()))
                .chain(lab.nodes.iter().map(|n| (n.clone(), paths.node_log(n))))
                .collect(),
        ),
    }
}

/// Writes the last `lines` lines (all, with `None`) of each source to `out`, prefixed by
/// its label when there are several; with `follow`, then writes what they gain until the
/// lab's directory goes away (or the caller is interrupted).
pub fn show(
    lab: &Lab,
    node: Option<&str>,
    lines: Option<usize>,
    follow: bool,
    out: &mut impl Write,
) -> Result<()> {
    let sources = sources(lab, node)?;
    let labelled = sources.len() > 1;
    let prefix = |label: &str| {
        if labelled {
            format!("[{label}] ")
        } else {
            String::new()
        }
    };
    let mut offsets = Vec::new();
    for (label, path) in &sources {
        let text = std::fs::read(path).unwrap_or_default();
        offsets.push(text.len() as u64);
        let text = String::from_utf8_lossy(&text);
        let all: Vec<&str> = text.lines().collect();
        let first = lines.map_or(0, |n| all.len().saturating_sub(n));
        for line in &all[first..] {
            writeln!(out, "{}{line}", prefix(label))?;
        }
    }
    out.flush()?;
    let dir = LabPaths::of(lab).dir;
    while follow && dir.exists() {
        std::thread::sleep(FOLLOW_EVERY);
        for ((label, path), offset) in sources.iter().zip(&mut offsets) {
            let Ok(mut file) = File::open(path) else {
                continue;
            };
            let length = file.metadata().map(|m| m.len()).unwrap_or(0);
            if length < *offset {
                // Truncated: start again from its beginning.
                *offset = 0;
            }
            if length == *offset {
                continue;
            }
            file.seek(SeekFrom::Start(*offset))?;
            let mut gained = Vec::new();
            file.read_to_end(&mut gained)
                .with_context(|| format!("reading {}", path.display()))?;
            // Only whole lines; the rest waits for its end.
            let whole = gained
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            *offset += whole as u64;
            for line in String::from_utf8_lossy(&gained[..whole]).lines() {
                writeln!(out, "{}{line}", prefix(label))?;
            }
        }
        out.flush()?;
    }
    Ok(())
}
