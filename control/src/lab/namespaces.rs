//! Named network namespaces, made the way `ip netns add` makes them (a bind mount of the
//! namespace onto a file under /run/netns), so `ip netns exec`, CNI runtimes and people
//! can use a lab's namespaces too. rtnetlink's own helper forks the calling process,
//! which a multi-threaded program should not do; a thread that unshares does the same
//! without a fork.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};

use super::paths::NETNS_DIR;
use crate::netns::NetnsFd;

pub fn netns_path(name: &str) -> PathBuf {
    Path::new(NETNS_DIR).join(name)
}

/// Makes the namespace `name` with `lo` up. Fails if it exists.
pub fn create(name: &str) -> anyhow::Result<NetnsFd> {
    let path = netns_path(name);
    fs::create_dir_all(NETNS_DIR)?;
    share_netns_dir().map_err(|e| anyhow::anyhow!("make {NETNS_DIR} a shared mount: {e}"))?;
    File::options()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| anyhow::anyhow!("create {}: {e}", path.display()))?;
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
        anyhow::bail!("make network namespace {name}: {e}");
    }
    let ns = NetnsFd::open(&path)?;
    ns.netlink("set lo up", |h| async move {
        use futures::TryStreamExt;
        let lo = h
            .link()
            .get()
            .match_name("lo".to_string())
            .execute()
            .try_next()
            .await?;
        if let Some(lo) = lo {
            let up = rtnetlink::LinkUnspec::new_with_index(lo.header.index)
                .up()
                .build();
            h.link().set(up).execute().await?;
        }
        Ok(())
    })?;
    Ok(ns)
}

/// Makes /run/netns a shared mount point, as `ip netns add` does, before a namespace is
/// mounted in it: a tool that does so later (podman does) bind-mounts the directory onto
/// itself, which would hide the lab's mounts under it and leave them behind at `down`.
fn share_netns_dir() -> nix::Result<()> {
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

/// Removes the namespace `name` if it exists; the kernel frees it, and every interface in
/// it, once no process is left inside.
pub fn remove(name: &str) {
    let path = netns_path(name);
    let _ = umount2(&path, MntFlags::MNT_DETACH);
    let _ = fs::remove_file(&path);
}

/// The names of every named namespace.
pub fn all() -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(NETNS_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    names
}

pub fn open(name: &str) -> anyhow::Result<NetnsFd> {
    Ok(NetnsFd::open(&netns_path(name))?)
}
