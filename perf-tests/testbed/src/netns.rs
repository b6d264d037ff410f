//! A named network namespace for a test (made by `xwire_netns::named` as `ip netns add`
//! makes one), so that `ip netns exec`, CNI runtimes and people can use it too; it is
//! removed when the test's guard drops.

use std::fs::{self, File};
use std::future::Future;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::Once;

use rtnetlink::Handle;
use xwire_netns::named;

use super::names::{namespace_name, namespace_owner};
use super::Error;

/// A network namespace that exists as long as this value does.
#[derive(Debug)]
pub struct Netns {
    name: String,
    path: PathBuf,
    fd: File,
}

impl Netns {
    /// A new namespace named after `label` and made unique, with `lo` up and IPv6
    /// disabled, so that a test sees only the frames it sends (no ND or MLD).
    pub fn new(label: &str) -> Result<Netns, Error> {
        static SWEEP: Once = Once::new();
        SWEEP.call_once(sweep_stale_namespaces);

        let name = namespace_name(label);
        let path = named::path(&name);
        let fd = named::add(&name)
            .map_err(|e| Error::invalid(format!("make namespace {name}"), e.to_string()))?
            .file()
            .try_clone()
            .map_err(|e| Error::io("hold the namespace", e));
        // From here on the guard owns the mount point and removes it on any failure.
        let fd = match fd {
            Ok(fd) => fd,
            Err(e) => {
                named::remove(&path);
                return Err(e);
            }
        };
        let ns = Netns { name, path, fd };
        ns.set_up("lo")?;
        ns.sysctl("net/ipv6/conf/all/disable_ipv6", "1")?;
        ns.sysctl("net/ipv6/conf/default/disable_ipv6", "1")?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/<name>`: what a CNI runtime passes as CNI_NETNS.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Runs `f` on a thread that has entered this namespace: sockets it opens, and
    /// processes it starts, belong to the namespace. A panic in `f` is passed on.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T, Error> {
        std::thread::scope(|s| {
            let joined = s
                .spawn(|| -> Result<T, Error> {
                    xwire_netns::enter(self.fd.as_fd())
                        .map_err(|e| Error::io(format!("setns into {}", self.name), e))?;
                    Ok(f())
                })
                .join();
            match joined {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs a command inside the namespace to completion and returns its output.
    pub fn exec(&self, cmd: &mut Command) -> Result<Output, Error> {
        let what = format!("run {:?} in {}", cmd.get_program(), self.name);
        self.run(|| cmd.output())?.map_err(|e| Error::io(what, e))
    }

    /// Starts a command inside the namespace; the process is killed when the guard drops.
    pub fn spawn(&self, cmd: &mut Command) -> Result<ChildGuard, Error> {
        let what = format!("start {:?} in {}", cmd.get_program(), self.name);
        let child = self.run(|| cmd.spawn())?.map_err(|e| Error::io(what, e))?;
        Ok(ChildGuard(Some(child)))
    }

    /// Writes a sysctl of this namespace, e.g. `("net/ipv4/ip_forward", "1")`.
    pub fn sysctl(&self, key: &str, value: &str) -> Result<(), Error> {
        let path = Path::new("/proc/sys").join(key);
        let what = format!("write {} in {}", path.display(), self.name);
        // /proc/sys/net belongs to the netns of the task that opens it.
        self.run(|| fs::write(&path, value))?
            .map_err(|e| Error::io(what, e))
    }

    /// The namespace's UDP counters in `/proc/net/snmp`, by name: where the kernel
    /// dropped datagrams (`RcvbufErrors`: a socket's receive buffer was full).
    pub fn udp_counters(&self) -> Result<Vec<(String, u64)>, Error> {
        let what = format!("read the UDP counters of {}", self.name);
        // /proc/self/net is the main thread's namespace; thread-self is this thread's.
        let snmp = self
            .run(|| fs::read_to_string("/proc/thread-self/net/snmp"))?
            .map_err(|e| Error::io(&what, e))?;
        let mut udp = snmp.lines().filter(|l| l.starts_with("Udp:"));
        let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
            return Err(Error::invalid(what, "no Udp lines in /proc/net/snmp"));
        };
        Ok(names
            .split_whitespace()
            .zip(values.split_whitespace())
            .skip(1)
            .filter_map(|(n, v)| Some((n.to_owned(), v.parse().ok()?)))
            .collect())
    }

    /// One of `udp_counters`, e.g. `"RcvbufErrors"`.
    pub fn udp_counter(&self, name: &str) -> Result<u64, Error> {
        self.udp_counters()?
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| Error::invalid(format!("read UDP counter {name}"), "no such counter"))
    }

    /// Steers the receive work of `ifname` (its RPS mask) to `cpu`: a veth's receive
    /// otherwise runs in the sender's softirq, on the sender's CPU.
    pub fn steer_receive_to_cpu(&self, ifname: &str, cpu: usize) -> Result<(), Error> {
        let path = rps_path(ifname);
        self.in_own_sysfs(
            format!("write {path} in {}", self.name),
            &format!("printf '%x' {} > {path}", 1u64 << cpu),
        )
        .map(drop)
    }

    /// The CPUs that `ifname`'s receive work is steered to (RPS), as a mask; 0: none,
    /// the receive runs where the frame arrived.
    pub fn receive_cpus(&self, ifname: &str) -> Result<u64, Error> {
        let path = rps_path(ifname);
        let what = format!("read {path} in {}", self.name);
        let text = self.in_own_sysfs(what.clone(), &format!("cat {path}"))?;
        // Masks of more than 32 CPUs come in comma-separated words.
        let mask = text.trim().replace(',', "");
        u64::from_str_radix(&mask, 16).map_err(|e| Error::invalid(what, format!("{text:?}: {e}")))
    }

    /// Runs `script` with this namespace's own /sys and returns its standard output. A
    /// thread's /sys shows the namespace sysfs was mounted in, not its netns, so this goes
    /// through `ip netns exec`, which mounts the namespace's own.
    fn in_own_sysfs(&self, what: String, script: &str) -> Result<String, Error> {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "sh", "-c", script])
            .output()
            .map_err(|e| Error::io(&what, e))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
            return Err(Error::invalid(what, why));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs an rtnetlink request from a socket inside this namespace.
    pub(crate) fn netlink<T, F, Fut>(&self, op: &str, f: F) -> Result<T, Error>
    where
        T: Send,
        F: FnOnce(Handle) -> Fut + Send,
        Fut: Future<Output = Result<T, rtnetlink::Error>>,
    {
        self.run(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .map_err(|e| Error::io(format!("{op}: start a runtime"), e))?;
            runtime.block_on(async {
                let (connection, handle, _) = rtnetlink::new_connection()
                    .map_err(|e| Error::io(format!("{op}: open netlink"), e))?;
                let driver = tokio::spawn(connection);
                let result = f(handle).await;
                driver.abort();
                result.map_err(|e| Error::netlink(op, e))
            })
        })?
    }

    pub(crate) fn fd(&self) -> &File {
        &self.fd
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        named::remove(&self.path);
    }
}

/// Removes the namespaces of test processes that are gone (killed before their guards
/// could run). The first `Netns::new` of every process calls this.
pub fn sweep_stale_namespaces() {
    remove_namespaces_where(|owner| !Path::new("/proc").join(owner.to_string()).exists());
}

/// Removes the namespaces process `pid` made (it is being taken down without its guards).
pub(crate) fn remove_namespaces_of(pid: u32) {
    remove_namespaces_where(|owner| owner == pid);
}

fn remove_namespaces_where(doomed: impl Fn(u32) -> bool) {
    let Ok(entries) = fs::read_dir(named::NETNS_DIR) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name.to_str().and_then(namespace_owner).is_some_and(&doomed) {
            named::remove(&entry.path());
        }
    }
}

/// A process started inside a namespace; killed and reaped when dropped.
#[derive(Debug)]
pub struct ChildGuard(Option<Child>);

impl ChildGuard {
    /// Starts `cmd` in the calling thread's namespace, to be killed when dropped.
    pub fn spawn(cmd: &mut Command) -> std::io::Result<ChildGuard> {
        cmd.spawn().map(|child| ChildGuard(Some(child)))
    }

    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("the child is held until drop")
    }

    /// Waits for the process to end by itself and returns its output.
    pub fn wait_with_output(mut self) -> std::io::Result<Output> {
        self.0
            .take()
            .expect("the child is held until drop")
            .wait_with_output()
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(child) = self.0.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Where `ifname`'s RPS mask is, in the namespace's own /sys.
fn rps_path(ifname: &str) -> String {
    format!("/sys/class/net/{ifname}/queues/rx-0/rps_cpus")
}
