//! Runs `cargo test` and counts what libtest reports, for one closing summary line.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

#[derive(Debug, Default)]
pub struct Totals {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
}

impl Totals {
    pub fn add(&mut self, other: Totals) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
    }

    /// Adds the counts of one libtest summary line:
    /// `test result: ok. 17 passed; 0 failed; 0 ignored; 0 measured; ...`.
    fn add_summary_line(&mut self, line: &str) {
        let Some(counts) = line.strip_prefix("test result: ") else {
            return;
        };
        for part in counts.split(['.', ';']) {
            let mut words = part.split_whitespace();
            if let (Some(n), Some(what)) = (words.next(), words.next()) {
                let Ok(n) = n.parse::<u64>() else { continue };
                match what {
                    "passed" => self.passed += n,
                    "failed" => self.failed += n,
                    "ignored" => self.ignored += n,
                    _ => {}
                }
            }
        }
    }
}

/// Runs a `cargo test`, passing its output through, and counts its results; the tests
/// that left a reason in `skips` (see `xwire_testbed::skip`) count as skipped, not
/// passed, whether or not the run failed.
pub fn run_tests(cmd: &mut Command, skips: Option<&Path>) -> Result<Totals> {
    eprintln!("+ {cmd:?}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("start {cmd:?}"))?;
    let mut totals = Totals::default();
    let stdout = child.stdout.take().context("test output")?;
    for line in BufReader::new(stdout).lines() {
        let line = line.context("read test output")?;
        println!("{line}");
        totals.add_summary_line(&line);
    }
    let status = child.wait().context("wait for cargo test")?;
    if let Some(dir) = skips {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let reason = std::fs::read_to_string(entry.path()).unwrap_or_default();
            println!("skipped {}: {reason}", entry.file_name().to_string_lossy());
            totals.passed = totals.passed.saturating_sub(1);
            totals.ignored += 1;
        }
    }
    if !status.success() {
        println!(
            "tests: {} passed, {} failed, {} skipped",
            totals.passed,
            totals.failed.max(1),
            totals.ignored
        );
        bail!("{cmd:?} failed ({status})");
    }
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use super::Totals;

    #[test]
    fn libtest_summaries_are_counted() {
        let mut t = Totals::default();
        t.add_summary_line("test result: ok. 17 passed; 2 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.01s");
        t.add_summary_line(
            "test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out",
        );
        t.add_summary_line("running 3 tests");
        assert_eq!((t.passed, t.failed, t.ignored), (18, 3, 3));
    }
}
