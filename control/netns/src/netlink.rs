//! Netlink requests into a namespace, made from the caller's own thread.
//!
//! A netlink socket belongs to the namespace it was opened in, whichever thread uses it
//! later. So an open namespace keeps a socket of each kind (plain, strict), opened inside
//! it (`NetnsFd::run`) at its second request, and its later requests go out on that socket.
//! One runtime, on a thread of its own, polls every such socket in the process; the
//! caller only waits for its answers.
//!
//! Why not a thread, a runtime and a socket per request, as before: a 3,000-pod lab made
//! about 19 requests per pod ADD (17,420 `setns` in 10 s across three daemons), and each
//! cost 150 µs before any work was done. One link lookup in a fresh namespace takes
//! 40 to 75 µs this way (56 µs was the thread and its `setns` alone).

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, TryLockError};

use rtnetlink::sys::{protocols::NETLINK_ROUTE, AsyncSocket, TokioSocket};
use rtnetlink::Handle;

use crate::{NetnsError, NetnsFd};

/// The sockets a namespace's requests go out on, each kept from its second use.
#[derive(Default)]
pub(crate) struct Connections {
    plain: Mutex<Option<Connection>>,
    strict: Mutex<Option<Connection>>,
    /// Requests made so far. The first goes out on a socket of its own, closed after
    /// it: a reconciliation pass opens every pod's namespace at once to list its
    /// interfaces, one request each, and a connection kept for each (72 KiB of buffers)
    /// grew a 1,000-pod daemon by 35 MiB.
    requests: AtomicU64,
}

impl fmt::Debug for Connections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connections").finish_non_exhaustive()
    }
}

/// One socket's connection, polled on the driver's thread until this is dropped.
struct Connection {
    handle: Handle,
    task: tokio::task::JoinHandle<()>,
    /// Its descriptor, for the tests to tell one socket from another.
    #[cfg(test)]
    fd: std::os::fd::RawFd,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // Dropping the handle ends the connection too, once the driver polls it again;
        // aborting closes the socket without waiting for that.
        self.task.abort();
    }
}

impl Connections {
    /// Runs `f` with a handle on `ns`'s socket of the kind asked for (opened now if
    /// there is none, or if the one there ended: a socket error closes a connection for
    /// good), and waits for its answer on this thread.
    ///
    /// One request at a time has the kept socket: the kernel runs one dump per socket
    /// and refuses a second while the first is under way (EBUSY). A request that finds
    /// it taken goes out on a socket of its own, opened for it, as does a namespace's
    /// first request.
    pub(crate) fn request<T, F, Fut>(
        &self,
        ns: &NetnsFd,
        op: &str,
        strict: bool,
        f: F,
    ) -> Result<T, NetnsError>
    where
        F: FnOnce(Handle) -> Fut,
        Fut: Future<Output = Result<T, rtnetlink::Error>>,
    {
        let first = self.requests.fetch_add(1, Ordering::Relaxed) == 0;
        let slot = if strict { &self.strict } else { &self.plain };
        let kept = if first {
            None
        } else {
            match slot.try_lock() {
                Ok(kept) => Some(kept),
                Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            }
        };
        let Some(mut kept) = kept else {
            let own = open(ns, op, strict)?;
            return answer(ns, op, f(own.handle.clone()));
        };
        let handle = match kept.as_ref() {
            Some(connection) if !connection.task.is_finished() => connection.handle.clone(),
            _ => {
                let connection = open(ns, op, strict)?;
                let handle = connection.handle.clone();
                *kept = Some(connection);
                handle
            }
        };
        answer(ns, op, f(handle))
    }
}

#[cfg(test)]
impl Connections {
    /// The open sockets, as `/proc/self/fd` names them (`socket:[inode]`).
    pub(crate) fn sockets(&self) -> Vec<String> {
        [&self.plain, &self.strict]
            .iter()
            .filter_map(|slot| slot.lock().unwrap().as_ref().map(|c| c.fd))
            .filter_map(|fd| std::fs::read_link(format!("/proc/self/fd/{fd}")).ok())
            .map(|target| target.to_string_lossy().into_owned())
            .collect()
    }

    /// Ends both connections as a socket error would, leaving them in place.
    pub(crate) fn end_all(&self) {
        for slot in [&self.plain, &self.strict] {
            if let Some(connection) = slot.lock().unwrap().as_ref() {
                connection.task.abort();
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while !connection.task.is_finished() && std::time::Instant::now() < deadline {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        }
    }
}

/// Waits on this thread for a request's answer. Its futures wait on channels only (the
/// socket is the driver's), so any executor can wait for them, inside a runtime or not.
fn answer<T>(
    ns: &NetnsFd,
    op: &str,
    request: impl Future<Output = Result<T, rtnetlink::Error>>,
) -> Result<T, NetnsError> {
    futures::executor::block_on(request).map_err(|cause| NetnsError::Netlink {
        op: op.into(),
        ns: ns.label().into(),
        cause,
    })
}

/// Opens a socket inside `ns` (the calling thread visits it), registered with the driver,
/// and starts its connection there.
fn open(ns: &NetnsFd, op: &str, strict: bool) -> Result<Connection, NetnsError> {
    let io = |cause| NetnsError::Io {
        op: op.into(),
        ns: ns.label().into(),
        cause,
    };
    let driver = driver().map_err(io)?;
    let socket = ns.run(op, || -> std::io::Result<TokioSocket> {
        // The socket is registered with the reactor of the runtime entered here.
        let _entered = driver.enter();
        let mut socket = TokioSocket::new(NETLINK_ROUTE)?;
        if strict {
            socket.socket_mut().set_netlink_get_strict_chk(true)?;
        }
        Ok(socket)
    })?;
    let socket = socket.map_err(io)?;
    #[cfg(test)]
    let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
    let (connection, handle, _unsolicited) = rtnetlink::from_socket(socket);
    let task = driver.spawn(connection);
    Ok(Connection {
        handle,
        task,
        #[cfg(test)]
        fd,
    })
}

/// The process's netlink runtime, started on first use on a thread that does nothing
/// else.
fn driver() -> std::io::Result<&'static tokio::runtime::Handle> {
    static DRIVER: OnceLock<Result<tokio::runtime::Handle, String>> = OnceLock::new();
    let started = DRIVER.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(|e| format!("start the netlink runtime: {e}"))?;
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("xwire-netlink".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .map_err(|e| format!("start the netlink thread: {e}"))?;
        Ok(handle)
    });
    started
        .as_ref()
        .map_err(|e| std::io::Error::other(e.clone()))
}

#[cfg(test)]
mod tests {
    use futures::TryStreamExt;

    use super::*;

    fn link_names(ns: &NetnsFd) -> Vec<String> {
        use rtnetlink::packet_route::link::LinkAttribute;
        ns.netlink("list links", |h| async move {
            let links: Vec<_> = h.link().get().execute().try_collect().await?;
            Ok(links
                .into_iter()
                .filter_map(|l| {
                    l.attributes.into_iter().find_map(|a| match a {
                        LinkAttribute::IfName(name) => Some(name),
                        _ => None,
                    })
                })
                .collect())
        })
        .unwrap()
    }

    /// Requests made from a thread of another namespace, one after another and from
    /// several threads at once, act in the namespace they were made for, on one socket;
    /// a socket whose connection ended is opened again.
    #[test]
    fn requests_act_in_their_namespace_from_any_thread() {
        let name = format!("xw-nlconn-{}", std::process::id());
        let ns = crate::named::add(&name).unwrap();
        let _named = crate::tests::Removed::named(&name);
        // Both ends inside the namespace.
        let veth = format!("xwnl{}", std::process::id() % 100_000);
        let add = |ns: &NetnsFd, ifname: String| {
            ns.netlink("add a veth pair", |h| async move {
                let peer = format!("{ifname}p");
                h.link()
                    .add(rtnetlink::LinkVeth::new(&ifname, &peer).build())
                    .execute()
                    .await
            })
        };
        add(&ns, veth.clone()).unwrap();
        let mut names = link_names(&ns);
        names.sort();
        assert_eq!(
            names,
            vec!["lo".to_string(), veth.clone(), format!("{veth}p")]
        );
        // Not in the namespace of the thread that asked.
        let here = NetnsFd::current().unwrap();
        assert!(!link_names(&here).contains(&veth));

        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..25 {
                        assert_eq!(link_names(&ns).len(), 3);
                    }
                });
            }
        });

        // The kernel's refusal comes back as the request's error, and the socket stays.
        let refused = add(&ns, veth.clone()).unwrap_err();
        assert_eq!(refused.errno(), Some(libc::EEXIST), "{refused:?}");
        let sockets = ns.netlink_connections().sockets();
        assert_eq!(sockets.len(), 1);
        for _ in 0..20 {
            link_names(&ns);
        }
        assert_eq!(
            ns.netlink_connections().sockets(),
            sockets,
            "a socket per request"
        );

        // A connection that ended (its socket failed, say) is replaced on the next use.
        ns.netlink_connections().end_all();
        assert_eq!(link_names(&ns).len(), 3);
        assert_ne!(ns.netlink_connections().sockets(), sockets);
    }

    /// A namespace's sockets close with it.
    #[test]
    fn sockets_close_when_the_namespace_is_dropped() {
        let name = format!("xw-nlclose-{}", std::process::id());
        let _named = crate::tests::Removed::named(&name);
        // Sockets by inode, which no other socket takes while the process lives.
        let open_sockets = || -> Vec<String> {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
                .map(|target| target.to_string_lossy().into_owned())
                .filter(|target| target.starts_with("socket:"))
                .collect()
        };
        let ns = crate::named::add(&name).unwrap();
        link_names(&ns);
        assert!(
            ns.netlink_connections().sockets().is_empty(),
            "kept from the first"
        );
        link_names(&ns);
        ns.netlink_strict("strict", |h| async move {
            h.link().get().execute().try_collect::<Vec<_>>().await
        })
        .unwrap();
        let ours = ns.netlink_connections().sockets();
        assert_eq!(ours.len(), 2);
        assert!(ours.iter().all(|s| open_sockets().contains(s)));
        drop(ns);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while ours.iter().any(|s| open_sockets().contains(s))
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!ours.iter().any(|s| open_sockets().contains(s)));
    }
}
