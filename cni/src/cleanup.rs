//! DEL with the daemon down: remove the interfaces xwire made in the pod's namespace
//! (they carry an alias starting with `xwire:`), so the pod can go. A veth takes its
//! other end with it, in the peer pod or on the node. Best effort: every failure is
//! ignored, because DEL must succeed.

use std::os::fd::AsFd;
use std::path::Path;

use futures::TryStreamExt;
use netlink_packet_route::link::LinkAttribute;
use xwire_netns::NetnsFd;

/// What `control::interfaces::ALIAS_PREFIX` marks xwire's interfaces with.
const ALIAS_PREFIX: &str = "xwire:";

pub(crate) fn remove_own_interfaces(netns: &str) {
    if netns.is_empty() {
        return;
    }
    // Only a network namespace is opened for reading (a FIFO at the path cannot hang
    // the runtime's DEL).
    let Ok(ns) = NetnsFd::open(Path::new(netns)) else {
        return;
    };
    let _ = std::thread::spawn(move || {
        if xwire_netns::enter(ns.file().as_fd()).is_err() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_io().build() else {
            return;
        };
        runtime.block_on(async {
            let Ok((connection, handle, _)) = rtnetlink::new_connection() else {
                return;
            };
            let driver = tokio::spawn(connection);
            let links: Vec<_> = handle
                .link()
                .get()
                .execute()
                .try_collect()
                .await
                .unwrap_or_default();
            for link in links {
                let ours = link.attributes.iter().any(
                    |a| matches!(a, LinkAttribute::IfAlias(alias) if alias.starts_with(ALIAS_PREFIX)),
                );
                if ours {
                    let _ = handle.link().del(link.header.index).execute().await;
                }
            }
            driver.abort();
        });
    })
    .join();
}
