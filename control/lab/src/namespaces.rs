//! The lab's named network namespaces (made as `ip netns add` makes them, by
//! `xwire_netns::named`), so `ip netns exec`, CNI runtimes and people can use them too.

use std::path::PathBuf;

use xwire_netns::named;

use xwire_netns::NetnsFd;

pub(crate) fn netns_path(name: &str) -> PathBuf {
    named::path(name)
}

/// Makes the namespace `name` with `lo` up. Fails if it exists.
pub fn create(name: &str) -> anyhow::Result<NetnsFd> {
    let ns = named::add(name)?;
    let up = ns.netlink("set lo up", |h| async move {
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
    });
    if let Err(e) = up {
        named::remove(&named::path(name));
        return Err(e.into());
    }
    Ok(ns)
}

/// Removes the namespace `name` if it exists; the kernel frees it, and every interface in
/// it, once no process is left inside.
pub fn remove(name: &str) {
    named::remove(&named::path(name));
}

/// The names of every named namespace.
pub fn all() -> Vec<String> {
    named::names()
}

pub fn open(name: &str) -> anyhow::Result<NetnsFd> {
    Ok(NetnsFd::open(&netns_path(name))?)
}
