//! `xwirectl lab logs [NODE]`: the logs a lab keeps. The supervisor's (daemons started,
//! exited, restarted) is `supervisor.log` in the lab's directory; each node's daemon
//! writes its lines (filtered by `XWIRE_LOG` or `RUST_LOG` in `lab up`'s environment)
//! to `nodes/NODE/xwired.log`.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::file::Lab;
use super::paths::LabPaths;

/// How often `--follow` looks whether the lab is still there when nothing was written
/// (its directory's removal wakes it too; this is the bound if that event is missed).
const GONE_CHECK: Duration = Duration::from_secs(2);

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
    if follow {
        follow_sources(&sources, &mut offsets, &LabPaths::of(lab).dir, &prefix, out)?;
    }
    Ok(())
}

/// Writes what each source gains, woken by inotify (the `notify` crate) on writes to the
/// directories that hold them, until `dir` (the lab's) goes away.
fn follow_sources(
    sources: &[(String, PathBuf)],
    offsets: &mut [u64],
    dir: &Path,
    prefix: &dyn Fn(&str) -> String,
    out: &mut impl Write,
) -> Result<()> {
    use notify::Watcher;
    let (tx, changes) = std::sync::mpsc::channel();
    let mut watcher = notify::recommended_watcher(move |event| {
        let _ = tx.send(event);
    })
    .context("watching the logs")?;
    let mut watched = BTreeSet::new();
    watched.insert(dir.to_owned());
    watched.extend(
        sources
            .iter()
            .filter_map(|(_, p)| p.parent().map(Path::to_owned)),
    );
    for watched_dir in &watched {
        // A node whose directory is not there yet has no log to follow; the lab's own
        // directory must be, or the lab is gone.
        if let Err(e) = watcher.watch(watched_dir, notify::RecursiveMode::NonRecursive) {
            if watched_dir == dir {
                return Err(e).with_context(|| format!("watching {}", dir.display()));
            }
        }
    }
    while dir.exists() {
        match changes.recv_timeout(GONE_CHECK) {
            Ok(_) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        while changes.try_recv().is_ok() {}
        for ((label, path), offset) in sources.iter().zip(offsets.iter_mut()) {
            write_gained(path, offset, &prefix(label), out)?;
        }
        out.flush()?;
    }
    Ok(())
}

/// Writes the whole lines `path` gained since `offset` (the rest waits for its end).
fn write_gained(path: &Path, offset: &mut u64, prefix: &str, out: &mut impl Write) -> Result<()> {
    let Ok(mut file) = File::open(path) else {
        return Ok(());
    };
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    if length < *offset {
        // Truncated: start again from its beginning.
        *offset = 0;
    }
    if length == *offset {
        return Ok(());
    }
    file.seek(SeekFrom::Start(*offset))?;
    let mut gained = Vec::new();
    file.read_to_end(&mut gained)
        .with_context(|| format!("reading {}", path.display()))?;
    let whole = gained
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    *offset += whole as u64;
    for line in String::from_utf8_lossy(&gained[..whole]).lines() {
        writeln!(out, "{prefix}{line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn following_prints_whole_lines_as_they_are_written_until_the_lab_goes() {
        let dir = std::env::temp_dir().join(format!("xwire-logs-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("nodes/n1")).unwrap();
        let log = dir.join("nodes/n1/xwired.log");
        std::fs::write(&log, "before\n").unwrap();
        let sources = vec![("n1".to_owned(), log.clone())];
        let mut offsets = vec![7];
        let writer = {
            let (dir, log) = (dir.clone(), log.clone());
            std::thread::spawn(move || {
                use std::io::Write;
                let pause = || std::thread::sleep(Duration::from_millis(150));
                let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
                pause();
                file.write_all(b"one\ntw").unwrap();
                pause();
                file.write_all(b"o\n").unwrap();
                pause();
                std::fs::remove_dir_all(&dir).unwrap();
            })
        };
        let mut out = Vec::new();
        let prefix = |label: &str| format!("[{label}] ");
        follow_sources(&sources, &mut offsets, &dir, &prefix, &mut out).unwrap();
        writer.join().unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "[n1] one\n[n1] two\n");
    }
}
