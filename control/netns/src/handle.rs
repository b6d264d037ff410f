//! An open network namespace: a pod's (`CNI_NETNS`, a path), a node's, or the caller's
//! own. Work inside one runs on a short-lived thread that has joined it, so that the
//! caller's own threads never change namespace.

use std::fs::File;
#[cfg(feature = "netlink")]
use std::future::Future;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::OnceLock;

#[cfg(feature = "netlink")]
use rtnetlink::Handle;

/// An open network namespace; it stays valid (the kernel keeps it) while this is held.
#[derive(Debug)]
pub struct NetnsFd {
    file: File,
    label: String,
    /// The namespace's `/proc/sys/net/ipv6/conf`, opened from inside it on first use;
    /// `None`: the kernel has no IPv6.
    ipv6_conf: OnceLock<Option<File>>,
    /// The netlink sockets opened inside it, kept for its later requests.
    #[cfg(feature = "netlink")]
    netlink: crate::netlink::Connections,
}

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("network namespace {path}: {cause}")]
    Open { path: String, cause: std::io::Error },
    #[error("{path} is not a network namespace")]
    NotNetns { path: String },
    /// The path names another namespace than the one recorded when it was first given
    /// (a `/proc/<pid>/ns/net` whose process died and whose pid was reused, say).
    #[error("{path} is now another network namespace ({found}) than the pod's ({recorded})")]
    Replaced {
        path: String,
        recorded: NetnsIdentity,
        found: NetnsIdentity,
    },
    #[error("{op} in {ns}: {cause}")]
    Io {
        op: String,
        ns: String,
        cause: std::io::Error,
    },
    #[cfg(feature = "netlink")]
    #[error("{op} in {ns}: {cause}")]
    Netlink {
        op: String,
        ns: String,
        cause: rtnetlink::Error,
    },
}

impl NetnsError {
    /// Whether this says that the namespace is gone for good: nothing is at the path,
    /// what is there is not a network namespace (a pod's namespace file, once unmounted,
    /// is an empty file), or it is another namespace than the one recorded. Any other failure (no file descriptors left, no permission)
    /// says nothing of the pod, whose wires must then be left as they are.
    pub fn is_gone(&self) -> bool {
        match self {
            NetnsError::NotNetns { .. } | NetnsError::Replaced { .. } => true,
            NetnsError::Open { cause, .. } => matches!(
                cause.raw_os_error(),
                Some(libc::ENOENT) | Some(libc::ENOTDIR)
            ),
            _ => false,
        }
    }

    /// Whether the namespace could not be opened for want of file descriptors or memory:
    /// nothing is wrong with the caller's path, and a later try may succeed.
    pub fn is_shortage(&self) -> bool {
        matches!(
            self,
            NetnsError::Open { cause, .. } if matches!(
                cause.raw_os_error(),
                Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOMEM)
            )
        )
    }

    /// The errno the kernel answered with, if it refused a request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            #[cfg(feature = "netlink")]
            NetnsError::Netlink {
                cause: rtnetlink::Error::NetlinkError(m),
                ..
            } => m.code.map(|c| -c.get()),
            NetnsError::Io { cause, .. } | NetnsError::Open { cause, .. } => cause.raw_os_error(),
            _ => None,
        }
    }
}

/// Which namespace a descriptor refers to: the device and inode of its nsfs file, the same
/// however the namespace was reached (`/run/netns/x`, `/proc/<pid>/ns/net`, a descriptor
/// passed over a socket), and held by no other namespace while this one lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct NetnsIdentity {
    pub dev: u64,
    pub ino: u64,
}

impl std::fmt::Display for NetnsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "device {} inode {}", self.dev, self.ino)
    }
}

/// NSFS_MAGIC: what statfs reports for a namespace file.
const NSFS_MAGIC: i64 = 0x6e73_6673;

// NS_GET_NSTYPE (linux/nsfs.h): _IO(0xb7, 0x3), the CLONE_NEW* kind of a namespace file.
nix::ioctl_none!(ns_get_nstype, 0xb7, 3);

impl NetnsFd {
    /// Opens the namespace at `path` (e.g. `/run/netns/x` or `/proc/<pid>/ns/net`).
    /// Whatever the path holds, nothing but a namespace file is ever opened for reading:
    /// the path is opened with `O_PATH` first, which opens no FIFO or device (opening a
    /// device can act: a watchdog arms, a tape rewinds), and only an nsfs file is then
    /// opened for real, through that same descriptor (not the path again, which may
    /// have changed meanwhile). A namespace of another kind is refused too.
    pub fn open(path: &Path) -> Result<NetnsFd, NetnsError> {
        let label = path.display().to_string();
        let open_error = |cause: std::io::Error| NetnsError::Open {
            path: label.clone(),
            cause,
        };
        let handle = File::options()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(path)
            .map_err(open_error)?;
        NetnsFd::from_handle(handle.into(), &label)
    }

    /// Opens the namespace at `path`, as `open` does, and checks that it is the one
    /// recorded when the path was first given (when there is a record): a path opened
    /// again later (DEL, a reconcile, a peer pod's wire) may have come to name another
    /// namespace, and nothing must be done there.
    pub fn open_recorded(
        path: &Path,
        recorded: Option<NetnsIdentity>,
    ) -> Result<NetnsFd, NetnsError> {
        let ns = NetnsFd::open(path)?;
        let Some(recorded) = recorded else {
            return Ok(ns);
        };
        let found = ns.identity().map_err(|cause| NetnsError::Open {
            path: path.display().to_string(),
            cause,
        })?;
        if found != recorded {
            return Err(NetnsError::Replaced {
                path: path.display().to_string(),
                recorded,
                found,
            });
        }
        Ok(ns)
    }

    /// The namespace that `handle` refers to (a descriptor opened with `O_PATH`, or any
    /// other; one another process passed, say), checked as `open` checks a path's, and
    /// called `label`.
    pub fn from_handle(handle: std::os::fd::OwnedFd, label: &str) -> Result<NetnsFd, NetnsError> {
        let label = label.to_owned();
        let open_error = |cause: std::io::Error| NetnsError::Open {
            path: label.clone(),
            cause,
        };
        let fs = nix::sys::statfs::fstatfs(&handle).map_err(|e| open_error(e.into()))?;
        if fs.filesystem_type().0 as i64 != NSFS_MAGIC {
            return Err(NetnsError::NotNetns {
                path: label.clone(),
            });
        }
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(format!("/proc/thread-self/fd/{}", handle.as_raw_fd()))
            .map_err(open_error)?;
        // SAFETY: NS_GET_NSTYPE takes no argument and only reads which kind of namespace
        // the open nsfs file (checked just above) refers to.
        let kind = unsafe { ns_get_nstype(file.as_raw_fd()) }.map_err(|e| open_error(e.into()))?;
        if kind != libc::CLONE_NEWNET {
            return Err(NetnsError::NotNetns { path: label });
        }
        Ok(NetnsFd {
            file,
            label,
            ipv6_conf: OnceLock::new(),
            #[cfg(feature = "netlink")]
            netlink: Default::default(),
        })
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

    /// Which namespace this is.
    pub fn identity(&self) -> std::io::Result<NetnsIdentity> {
        let stat = nix::sys::stat::fstat(&self.file)?;
        Ok(NetnsIdentity {
            dev: stat.st_dev,
            ino: stat.st_ino,
        })
    }

    /// Whether `self` and `other` are the same namespace (the same nsfs inode), however
    /// each was reached.
    pub fn is_same(&self, other: &NetnsFd) -> std::io::Result<bool> {
        Ok(self.identity()? == other.identity()?)
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    /// Runs `f` inside this namespace, on the calling thread, which goes back to the
    /// namespace it was in afterwards (also when `f` panics; the panic is passed on).
    ///
    /// Why not a thread made for `f`, as before: a pod's ADD made about 14 of them (a
    /// socket opened in its namespace, an ethtool call, its IPv6 settings), and each
    /// thread's stack was mapped and unmapped in a process whose other threads run on
    /// the other cores. A `setns` there and back costs a few microseconds.
    pub fn run<T>(&self, op: &str, f: impl FnOnce() -> T) -> Result<T, NetnsError> {
        let _visit =
            crate::enter::Visit::enter(self.file.as_fd()).map_err(|cause| NetnsError::Io {
                op: op.into(),
                ns: self.label.clone(),
                cause,
            })?;
        Ok(f())
    }

    /// Writes IPv6 settings (`name`, `value`) of interface `ifname`, the files under
    /// `/proc/sys/net/ipv6/conf/IFNAME/`; a kernel without IPv6 has none to write.
    ///
    /// Each file is opened relative to the namespace's `conf` directory, which is opened
    /// once. A whole path walks, at `net` and at `ipv6`, one directory entry per network
    /// namespace on the machine (the kernel keeps every namespace's sysctl directories of
    /// one name in one hash chain): with the thousands of namespaces of a big lab, those
    /// walks took an eighth of the machine's CPU while its pods were added.
    pub fn write_ipv6_settings(
        &self,
        op: &str,
        ifname: &str,
        settings: &[(&str, &str)],
    ) -> Result<(), NetnsError> {
        let written = self.run(op, || -> std::io::Result<()> {
            // Opened on this thread, which is inside the namespace: /proc/sys/net is the
            // namespace of the thread that opens it.
            let conf = match self.ipv6_conf.get() {
                Some(conf) => conf,
                None => {
                    let opened = match File::open("/proc/sys/net/ipv6/conf") {
                        Ok(dir) => Some(dir),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                        Err(e) => return Err(e),
                    };
                    self.ipv6_conf.get_or_init(|| opened)
                }
            };
            let Some(conf) = conf else {
                return Ok(());
            };
            for (name, value) in settings {
                let opened = nix::fcntl::openat(
                    conf,
                    format!("{ifname}/{name}").as_str(),
                    nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
                    nix::sys::stat::Mode::empty(),
                );
                match opened {
                    Ok(fd) => std::io::Write::write_all(&mut File::from(fd), value.as_bytes())?,
                    // An interface without IPv6 (an MTU below 1280) has no settings.
                    Err(nix::errno::Errno::ENOENT) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(())
        })?;
        written.map_err(|cause| NetnsError::Io {
            op: op.into(),
            ns: self.label.clone(),
            cause,
        })
    }

    #[cfg(feature = "netlink")]
    /// Runs rtnetlink requests from a socket inside this namespace: one kept with this
    /// handle for all its requests, which the calling thread waits for (`netlink.rs`).
    pub fn netlink<T, F, Fut>(&self, op: &str, f: F) -> Result<T, NetnsError>
    where
        T: Send,
        F: FnOnce(Handle) -> Fut + Send,
        Fut: Future<Output = Result<T, rtnetlink::Error>>,
    {
        self.netlink.request(self, op, false, f)
    }

    #[cfg(feature = "netlink")]
    /// Like `netlink`, from a socket with strict checking on (`NETLINK_GET_STRICT_CHK`):
    /// the kernel then honours a dump's filter in its header (an address dump for one
    /// interface index walks that interface only, not every interface of a namespace
    /// that may hold thousands), and refuses a dump request whose header has fields it
    /// does not filter on (rtnetlink's route dumps set some: they go through `netlink`).
    pub fn netlink_strict<T, F, Fut>(&self, op: &str, f: F) -> Result<T, NetnsError>
    where
        T: Send,
        F: FnOnce(Handle) -> Fut + Send,
        Fut: Future<Output = Result<T, rtnetlink::Error>>,
    {
        self.netlink.request(self, op, true, f)
    }

    #[cfg(all(test, feature = "netlink"))]
    pub(crate) fn netlink_connections(&self) -> &crate::netlink::Connections {
        &self.netlink
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Opens `path` on a thread and waits at most a few seconds for the answer.
    fn open_within_limit(path: &Path) -> Result<NetnsFd, NetnsError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let path = path.to_owned();
        std::thread::spawn(move || {
            let _ = tx.send(NetnsFd::open(&path));
        });
        rx.recv_timeout(std::time::Duration::from_secs(5))
            .expect("opening the path blocked")
    }

    #[test]
    fn another_kind_of_namespace_is_refused() {
        let mount_ns = open_within_limit(Path::new("/proc/self/ns/mnt"));
        assert!(
            matches!(mount_ns, Err(NetnsError::NotNetns { .. })),
            "{mount_ns:?}"
        );
        assert!(open_within_limit(Path::new("/proc/self/ns/net")).is_ok());
    }

    /// Refused at once, and without being opened for reading.
    #[test]
    fn a_fifo_is_never_opened_for_reading() {
        let dir = std::env::temp_dir().join(format!("xwire-netns-w-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        let _ = std::fs::remove_file(&fifo);
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        // A writer's open waits until the FIFO has a reader: it tells whether one came.
        let (opened, writer_in) = std::sync::mpsc::channel();
        let path = fifo.clone();
        let writer = std::thread::spawn(move || {
            let _file = File::options().write(true).open(&path);
            let _ = opened.send(());
        });
        let refused = open_within_limit(&fifo);
        let reader_came = writer_in.recv_timeout(std::time::Duration::from_millis(300));
        // Lets the writer go, whatever happened.
        let _release = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
        writer.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            matches!(refused, Err(NetnsError::NotNetns { .. })),
            "{refused:?}"
        );
        assert!(reader_came.is_err(), "the FIFO was opened for reading");
    }

    #[test]
    fn only_absence_and_not_being_a_netns_mean_gone() {
        let missing = NetnsFd::open(Path::new("/run/netns/xwire-no-such-namespace")).unwrap_err();
        assert!(missing.is_gone(), "{missing:?}");
        let not_netns = NetnsFd::open(Path::new("/proc/self/ns/mnt")).unwrap_err();
        assert!(not_netns.is_gone());
        for errno in [libc::EMFILE, libc::EACCES, libc::ENFILE, libc::EIO] {
            let e = NetnsError::Open {
                path: "p".into(),
                cause: std::io::Error::from_raw_os_error(errno),
            };
            assert!(!e.is_gone(), "{errno}");
            assert_eq!(
                e.is_shortage(),
                errno == libc::EMFILE || errno == libc::ENFILE,
                "{errno}"
            );
        }
    }

    #[test]
    fn ipv6_settings_are_written_in_the_namespace_and_only_there() {
        let name = format!("xw-v6set-{}", std::process::id());
        let ns = crate::named::add(&name).unwrap();
        let _named = crate::tests::Removed::named(&name);
        let read = |ns: &NetnsFd, setting: &str| {
            ns.run("read", || {
                std::fs::read_to_string(format!("/proc/sys/net/ipv6/conf/lo/{setting}"))
            })
            .unwrap()
            .unwrap()
        };
        let host = NetnsFd::current().unwrap();
        let host_before = read(&host, "accept_dad");
        assert_ne!(read(&ns, "accept_dad").trim(), "0");

        ns.write_ipv6_settings("quiet", "lo", &[("accept_dad", "0"), ("disable_ipv6", "1")])
            .unwrap();
        assert_eq!(read(&ns, "accept_dad").trim(), "0");
        assert_eq!(read(&ns, "disable_ipv6").trim(), "1");
        // Again, through the directory opened by the first call.
        ns.write_ipv6_settings("on", "lo", &[("disable_ipv6", "0")])
            .unwrap();
        assert_eq!(read(&ns, "disable_ipv6").trim(), "0");
        assert_eq!(read(&host, "accept_dad"), host_before);

        // An interface without IPv6 settings has none to write; a bad value is refused.
        ns.write_ipv6_settings("absent", "xw-no-such-if", &[("disable_ipv6", "1")])
            .unwrap();
        let refused = ns
            .write_ipv6_settings("bad", "lo", &[("accept_dad", "not a number")])
            .unwrap_err();
        assert!(
            matches!(&refused, NetnsError::Io { op, .. } if op == "bad"),
            "{refused:?}"
        );
    }
}
