//! `xwirectl lab save`: each pod's running configuration made its startup one, by the
//! command its image has for that (the lab file's `save`), run in its container as
//! `sh -c`. Pods run one after another; one that fails does not stop the others.

use std::fmt::Write;

use anyhow::Result;

use super::file::Lab;

#[derive(Debug, Default)]
pub struct SaveReport {
    /// Pods whose save command ran and succeeded.
    pub saved: Vec<String>,
    /// Pods whose save command failed, with what it said.
    pub failed: Vec<(String, String)>,
    /// Pods with no save command (no container, or an image without one).
    pub without: Vec<String>,
}

/// Runs every pod's save command.
pub fn save(lab: &Lab) -> Result<SaveReport> {
    let mut report = SaveReport::default();
    for pod in lab.pods.keys() {
        let Some(line) = lab.containers.get(pod).and_then(|c| c.save.as_ref()) else {
            report.without.push(pod.clone());
            continue;
        };
        let command = ["sh".to_owned(), "-c".to_owned(), line.clone()];
        let out = super::exec_captured(lab, pod, &command)?;
        if out.status.success() {
            report.saved.push(pod.clone());
        } else {
            let said = String::from_utf8_lossy(&out.stderr);
            let said = said.trim();
            let said = if said.is_empty() {
                String::from_utf8_lossy(&out.stdout).trim().to_owned()
            } else {
                said.to_owned()
            };
            report
                .failed
                .push((pod.clone(), format!("{line:?}: {}: {said}", out.status)));
        }
    }
    Ok(report)
}

impl SaveReport {
    pub fn render(&self) -> String {
        let mut out = String::new();
        if !self.saved.is_empty() {
            let _ = writeln!(out, "saved: {}", self.saved.join(", "));
        }
        for (pod, why) in &self.failed {
            let _ = writeln!(out, "not saved: {pod}: {why}");
        }
        if !self.without.is_empty() {
            let _ = writeln!(
                out,
                "no save command: {} (set `save` in the lab file for a pod whose image has one)",
                self.without.join(", ")
            );
        }
        out
    }
}
