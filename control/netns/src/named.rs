//! Named network namespaces, made the way `ip netns add` makes them: a file under
//! /run/netns with the namespace bind-mounted onto it. rtnetlink's own helper forks the
//! calling process, which a multi-threaded program should not do; a thread that
//! unshares does the same without a fork.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};

use crate::{NetnsError, NetnsFd};

/// Where named namespaces are, as `ip netns` keeps them.
pub const NETNS_DIR: &str = "/run/netns";

pub fn path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Makes the namespace `name` (nothing in it is up, not even `lo`). Fails if a namespace
/// or file of that name exists; on any failure nothing is left behind.
pub fn add(name: &str) -> Result<NetnsFd, NetnsError> {
    let path = path(name);
    let fail = |op: &str, source: std::io::Error| NetnsError::Io {
        op: op.into(),
        ns: name.into(),
        cause: source,
    };
    fs::create_dir_all(NETNS_DIR).map_err(|e| fail("make /run/netns", e))?;
    share_dir().map_err(|e| fail("make /run/netns a shared mount", e.into()))?;
    File::options()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| fail("make the namespace's file", e))?;
    let mounted = std::thread::scope(|s| {
        s.spawn(|| -> nix::Result<()> {
            // The thread's namespace changes, and the thread ends with it.
            unshare(CloneFlags::CLONE_NEWNET)?;
            mount(
                Some("/proc/thread-self/ns/net"),
                &path,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
        })
        .join()
        .unwrap_or(Err(nix::Error::EIO))
    });
    if let Err(e) = mounted {
        let _ = fs::remove_file(&path);
        return Err(fail("mount the namespace", e.into()));
    }
    NetnsFd::open(&path).inspect_err(|_| remove(&path))
}

/// Names the calling thread's namespace at `path` (any file path, made now): a handle
/// that stays valid, for other processes to open, until `remove(path)`.
pub fn bind_current(path: &Path) -> Result<(), NetnsError> {
    let fail = |op: &str, source: std::io::Error| NetnsError::Io {
        op: op.into(),
        ns: path.display().to_string(),
        cause: source,
    };
    File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| fail("make the namespace's file", e))?;
    mount(
        Some("/proc/thread-self/ns/net"),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| {
        let _ = fs::remove_file(path);
        fail("mount the namespace", e.into())
    })
}

/// Removes the namespace mounted at `path` (a name's `path`), if there is one; the kernel
/// frees it, and every interface in it, once no process or open file holds it.
pub fn remove(path: &Path) {
    let _ = umount2(path, MntFlags::MNT_DETACH);
    let _ = fs::remove_file(path);
}

/// The names of every named namespace.
pub fn names() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(NETNS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

/// Makes /run/netns a shared mount point, as `ip netns add` does, before a namespace is
/// mounted in it. Otherwise the first tool that does so later (podman does) bind-mounts
/// the directory onto itself, which hides the mounts already under it: their files can
/// then be neither unmounted nor removed, and stay behind.
pub(crate) fn share_dir() -> nix::Result<()> {
    let shared = || {
        mount(
            None::<&str>,
            NETNS_DIR,
            None::<&str>,
            MsFlags::MS_SHARED | MsFlags::MS_REC,
            None::<&str>,
        )
    };
    match shared() {
        // Not a mount point yet: make it one (recursively, keeping what is under it).
        Err(nix::Error::EINVAL) => {
            mount(
                Some(NETNS_DIR),
                NETNS_DIR,
                None::<&str>,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None::<&str>,
            )?;
            shared()
        }
        other => other,
    }
}
