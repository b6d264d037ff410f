//! Whether the directory where the runtime mounts pods' namespaces reaches this daemon.
//! In a cluster the DaemonSet mounts the host's `/var/run/netns` with bidirectional
//! propagation; where the host's `/` is a private mount, the namespaces the runtime
//! mounts there after the daemon started never appear in its view, and every ADD fails
//! far from the cause. The daemon says so in one line when it starts.

use std::path::Path;

/// A mount's propagation, from `/proc/self/mountinfo`'s optional fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Mounts made under it on either side appear on the other.
    Shared,
    /// Mounts made under it on the host appear here (a slave of a shared mount).
    Receives,
    /// Nothing made under it elsewhere appears here.
    Private,
    /// The path is not a mount point (a daemon run as a plain process sees the host's).
    NotAMount,
}

/// The propagation of the mount at `dir` in a `mountinfo` text; the last mount at a
/// path is the one in use.
pub fn propagation(mountinfo: &str, dir: &Path) -> Propagation {
    let Some(dir) = dir.to_str() else {
        return Propagation::NotAMount;
    };
    let mut found = Propagation::NotAMount;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        // id, parent, major:minor, root, mount point, options, optional fields..., "-"
        let Some(mount_point) = fields.get(4) else {
            continue;
        };
        if unescape(mount_point) != dir {
            continue;
        }
        let optional = fields.iter().skip(6).take_while(|f| **f != "-").copied();
        found = Propagation::Private;
        for field in optional {
            if field.starts_with("shared:") {
                found = Propagation::Shared;
                break;
            }
            if field.starts_with("master:") {
                found = Propagation::Receives;
            }
        }
    }
    found
}

/// mountinfo writes a space, tab, newline and backslash in a path as octal escapes.
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Logs one line when a pods' namespace directory is a private mount here.
pub fn warn_if_private() {
    let Ok(mountinfo) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    for dir in ["/var/run/netns", "/run/netns"] {
        if propagation(&mountinfo, Path::new(dir)) == Propagation::Private {
            tracing::warn!(
                dir,
                "the pods' namespace directory is a private mount here: namespaces the runtime mounts there from now on will not reach this daemon; the host's / must be a shared mount (mount --make-rshared /; see deploy/README.md)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
300 22 0:4 net:[4026531840] /var/run/netns rw shared:120 - nsfs nsfs rw
301 22 0:26 /netns /run/netns rw,nosuid master:7 - tmpfs tmpfs rw
302 22 0:26 /xwire /run/xwire rw,nosuid - tmpfs tmpfs rw
303 22 0:26 /a\\040dir /run/a\\040dir rw - tmpfs tmpfs rw
";

    #[test]
    fn a_mounts_propagation_is_read_from_its_optional_fields() {
        let of = |dir: &str| propagation(MOUNTINFO, Path::new(dir));
        assert_eq!(of("/var/run/netns"), Propagation::Shared);
        assert_eq!(of("/run/netns"), Propagation::Receives);
        assert_eq!(of("/run/xwire"), Propagation::Private);
        assert_eq!(of("/run/a dir"), Propagation::Private);
        assert_eq!(of("/var/lib/xwire"), Propagation::NotAMount);
    }

    #[test]
    fn the_last_mount_at_a_path_is_the_one_in_use() {
        let stacked = format!("{MOUNTINFO}310 22 0:30 / /var/run/netns rw - tmpfs tmpfs rw\n");
        assert_eq!(
            propagation(&stacked, Path::new("/var/run/netns")),
            Propagation::Private
        );
    }
}
