//! Names unique to this test process: the pid tells processes apart, a counter tells
//! apart the objects of one process, so tests in parallel threads or processes never meet.

use std::sync::atomic::{AtomicU32, Ordering};

/// Namespaces made here are named `NS_PREFIX<label>-<pid>-<n>`.
pub(crate) const NS_PREFIX: &str = "xwt-";

static NEXT: AtomicU32 = AtomicU32::new(0);

fn next() -> u32 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

pub(crate) fn namespace_name(label: &str) -> String {
    let label: String = label
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(24)
        .collect();
    format!("{NS_PREFIX}{label}-{}-{}", std::process::id(), next())
}

/// An interface name no other test is using: `x`, the pid and a counter, in hex, within
/// the kernel's 15 characters.
pub fn unique_ifname() -> String {
    format!("x{:x}t{:x}", std::process::id(), next() & 0xffff)
}

/// The pid inside a name from `namespace_name`, for sweeping what a dead process left.
pub(crate) fn namespace_owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(NS_PREFIX)?;
    let mut parts = rest.rsplitn(3, '-');
    let _counter: u32 = parts.next()?.parse().ok()?;
    parts.next()?.parse().ok()
}

/// Removes the temporary directories (`cluster::TempDir`) that process `pid` made: they
/// are named as its namespaces are.
pub(crate) fn remove_temp_dirs_of(pid: u32) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_str().and_then(namespace_owner) == Some(pid) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_fit_the_kernel_limits() {
        let a = unique_ifname();
        let b = unique_ifname();
        assert_ne!(a, b);
        assert!(a.len() <= 15, "{a}");
        let ns = namespace_name("pod a/../b");
        assert!(ns.starts_with("xwt-podab-"), "{ns}");
        assert_eq!(namespace_owner(&ns), Some(std::process::id()));
        assert_eq!(namespace_owner("other-ns"), None);
    }
}
