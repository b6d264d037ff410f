//! The worker thread's place in the ordinary scheduler: nice -20 and the shortest slice,
//! so that an ordinary thread on its core (a build beside the lab, a pod pinned there,
//! the kernel's memory monitor) no longer keeps the worker from its ports while they
//! fill. At -20 the worker weighs 87 times a nice-0 thread, and gets all but about 1% of
//! a core they share while it has work; with a 0.1-ms slice, a worker woken from its
//! nap preempts such a thread within 0.1 ms instead of after the thread's own slice.
//!
//! Why. Issue 36's measurements put the pod ports' fill-ring drops on the time a worker
//! is away from its ports, and an ordinary thread on its core takes that time in
//! slices. `fastpath/tests/away.rs` sends 48k frames a second through a port whose fill
//! ring holds 92 frames (1.9 ms of them) while a thread spins on the worker's core: the
//! kernel dropped 1,631 to 3,005 of about 49,000 frames at nice 0 (five runs), 1,079 to
//! 2,586 at nice 0 with the short slice (four), 0 to 97 at nice -20 alone (three of
//! five runs lost some), and none with both (six). `xwire-perf remote-wire` with a
//! spinning thread on each core: 97k and 128k pps loss-free at 64 B one way with
//! ordinary workers, 145k at nice -20.
//!
//! Why not a real-time class (`SCHED_FIFO`), which measured the same as nice -20 beside
//! a spinning thread (137k to 164k pps, three runs). A real-time worker with more work
//! than it can do starves every ordinary thread of its core, softirq threads included,
//! until the kernel's reserve for them (50 ms a second) runs them in one piece: both
//! nodes' workers of a lab were then away for 45 to 60 ms at once, tens of times per
//! loss-free search, and `ksoftirqd` waited 386 ms. The ordinary scheduler keeps its
//! fair sharing, only weighted.
//!
//! `nix` has neither `sched_setattr` nor `setpriority`, so these calls go to libc.

use std::io;
use std::time::Duration;

/// The shortest scheduler slice the kernel lets a thread ask for (0.1 ms), which the
/// worker asks for: see `set`.
pub(crate) const SLICE: Duration = Duration::from_micros(100);

/// What `sched_setattr` takes, in its first version (48 bytes), as
/// `<linux/sched/types.h>` lays it out. The libc crate does not define it.
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Gives the calling thread (Linux keeps these per thread) the nice value `nice` (-20 to
/// 19) and the scheduler slice `slice`. The slice matters beside a busy thread: the
/// kernel lets a thread it has just picked run at least the shortest slice among those
/// waiting before a woken one preempts it, 0.75 ms or more by default, which is half of
/// what a small port's fill ring holds at 48k frames a second. A kernel before 6.12
/// has no slices to ask for; there only the nice value is set. Lowering the nice value
/// is refused without `CAP_SYS_NICE` (or an `RLIMIT_NICE` that allows it).
pub(crate) fn set(nice: i8, slice: Duration) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice: i32::from(nice),
        priority: 0,
        runtime: slice.as_nanos() as u64,
        deadline: 0,
        period: 0,
    };
    // SAFETY: `sched_setattr` reads `size` bytes from `attr`, a valid, initialised
    // `SchedAttr` whose `size` is its own size, that outlives the call; pid 0 is the
    // calling thread, and flags 0 asks for nothing more.
    let set = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if set == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() != Some(libc::EINVAL) {
        return Err(error);
    }
    // SAFETY: `setpriority` takes plain integers; with `PRIO_PROCESS` and 0 it changes
    // the calling thread's nice value and nothing else.
    let set = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, i32::from(nice)) };
    if set == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The calling thread's nice value.
pub(crate) fn get() -> i8 {
    // SAFETY: `getpriority` takes plain integers and reads the calling thread's nice
    // value. It cannot fail for the calling thread, so -1 is a nice value, not an error.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    nice.clamp(-20, 19) as i8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_takes_the_nice_value_asked_and_others_keep_theirs() {
        let before = get();
        let (set_to, read) = std::thread::spawn(|| (set(-7, SLICE).map_err(|e| e.kind()), get()))
            .join()
            .unwrap();
        // Root here, as in CI: lowering it must succeed.
        assert_eq!((set_to, read), (Ok(()), -7));
        assert_eq!(
            get(),
            before,
            "another thread's nice value changed this one's"
        );
    }
}
