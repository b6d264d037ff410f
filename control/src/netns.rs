//! Entering network namespaces: a pod's (`CNI_NETNS`, a path) or the daemon's own.
//! Work inside one runs on a short-lived thread that has joined it, so the daemon's own
//! threads never change namespace.

use std::fs::File;
use std::future::Future;
use std::os::fd::AsFd;
use std::path::Path;

use nix::sched::{setns, CloneFlags};
use rtnetlink::Handle;

/// An open network namespace; it stays valid (the kernel keeps it) while this is held.
#[derive(Debug)]
pub struct NetnsFd {
    file: File,
    label: String,
}

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("network namespace {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a network namespace")]
    NotNetns { path: String },
    #[error("{op} in {ns}: {source}")]
    Io {
        op: String,
        ns: String,
        source: std::io::Error,
    },
    #[error("{op} in {ns}: {source}")]
    Netlink {
        op: String,
        ns: String,
        source: rtnetlink::Error,
    },
}

impl NetnsError {
    /// The errno the kernel answered with, if it refused a request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetnsError::Netlink {
                source: rtnetlink::Error::NetlinkError(m),
                ..
            } => m.code.map(|c| -c.get()),
            NetnsError::Io { source, .. } | NetnsError::Open { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }
}

/// NSFS_MAGIC: what statfs reports for a namespace file.
const NSFS_MAGIC: i64 = 0x6e73_6673;

impl NetnsFd {
    /// Opens the namespace at `path` (e.g. `/run/netns/x` or `/proc/<pid>/ns/net`).
    pub fn open(path: &Path) -> Result<NetnsFd, NetnsError> {
        let label = path.display().to_string();
        let file = File::open(path).map_err(|source| NetnsError::Open {
            path: label.clone(),
            source,
        })?;
        let fs = nix::sys::statfs::fstatfs(&file).map_err(|e| NetnsError::Open {
            path: label.clone(),
            source: e.into(),
        })?;
        if fs.filesystem_type().0 as i64 != NSFS_MAGIC {
            return Err(NetnsError::NotNetns { path: label });
        }
        Ok(NetnsFd { file, label })
    }

    /// The namespace of the calling thread.
    pub fn current() -> Result<NetnsFd, NetnsError> {
        let mut ns = NetnsFd::open(Path::new("/proc/thread-self/ns/net"))?;
        ns.label = "the node".into();
        Ok(ns)
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Runs `f` on a thread inside this namespace. A panic in `f` is passed on.
    pub fn run<T: Send>(&self, op: &str, f: impl FnOnce() -> T + Send) -> Result<T, NetnsError> {
        std::thread::scope(|s| {
            let joined = s
                .spawn(|| -> Result<T, NetnsError> {
                    setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|e| {
                        NetnsError::Io {
                            op: op.into(),
                            ns: self.label.clone(),
                            source: e.into(),
                        }
                    })?;
                    Ok(f())
                })
                .join();
            match joined {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs rtnetlink requests from a socket inside this namespace.
    pub fn netlink<T, F, Fut>(&self, op: &str, f: F) -> Result<T, NetnsError>
    where
        T: Send,
        F: FnOnce(Handle) -> Fut + Send,
        Fut: Future<Output = Result<T, rtnetlink::Error>>,
    {
        let io = |source| NetnsError::Io {
            op: op.into(),
            ns: self.label.clone(),
            source,
        };
        self.run(op, || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .map_err(io)?;
            runtime.block_on(async {
                let (connection, handle, _) = rtnetlink::new_connection().map_err(io)?;
                let driver = tokio::spawn(connection);
                let result = f(handle).await;
                driver.abort();
                result.map_err(|source| NetnsError::Netlink {
                    op: op.into(),
                    ns: self.label.clone(),
                    source,
                })
            })
        })?
    }
}
