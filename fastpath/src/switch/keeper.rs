//! A thread beside the worker that opens new ports, opens and closes the sockets of port
//! resizes, opens steered pairs and puts their programs on and off, and closes
//! removed ports' sockets and takes the worker's program off their interfaces.
//!
//! A socket's birth and death wait in the kernel: AF_PACKET's ring set-up and bind, and
//! AF_XDP's release, each wait out an RCU grace period (`synchronize_net`), tens of
//! milliseconds on a virtual machine, and a socket's UMEM is pinned and zeroed as it
//! registers. Done in the worker, a resize stalled every port of the worker for 40 to 60
//! ms (measured: the 1024-frame bridge of a 50 kpps port took 43 ms to open), and the
//! ports' fill rings ran empty. The keeper does that work; the worker only swaps ready
//! sockets in and hands the old ones over to be closed. New ports are the same (`open.rs`):
//! the worker keeps a slot for the port and serves its other ports while the keeper opens
//! it, and steered pairs likewise (`steer.rs`). It is started from the worker's thread,
//! so it is in the worker's network namespace.

use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::packet_port::PacketPort;
use crate::steered_port::{SteerTarget, SteeredPort};
use crate::worker::PortKind;
use crate::xdp_port::{PortError, Steering, XdpMode, XdpPort};
use crate::xdp_redirect::RedirectProgram;

use super::open::{open_slot, OpenSpec};
use super::steer::{attach_pair, open_steered, SteerSpec};
use super::Slot;

/// How long the kernel usually takes to let go of a queue after its socket closed (16 ms
/// measured idle): the first bind waits this long, so that few binds are refused.
const FIRST_BIND: Duration = Duration::from_millis(15);
/// Between binds the kernel refused (the queue still held): short at first, as an idle
/// interface's queue comes free within tens of milliseconds; longer after `SLOW_AFTER`.
const BIND_PAUSE: Duration = Duration::from_millis(5);
const SLOW_BIND_PAUSE: Duration = Duration::from_millis(50);
const SLOW_AFTER: Duration = Duration::from_millis(500);

/// A port to open, or a socket to open for a resize, named by its ticket; or a socket
/// to close.
pub(super) enum Job {
    /// A new port, for the worker's slot `spec.slot`.
    Open { ticket: u64, spec: OpenSpec },
    /// A steered pair's two ports, for the worker's slots `spec.slots`; nothing is
    /// steered to them before `Attach`.
    OpenPair { ticket: u64, spec: SteerSpec },
    /// The steering programs of a pair whose ports the worker has linked, to put on.
    Attach {
        ticket: u64,
        targets: Box<[SteerTarget; 2]>,
    },
    /// Steering programs' attachments to close, which takes the programs off their veths;
    /// the worker is told once they are off.
    Unsteer {
        ticket: u64,
        attachments: Vec<OwnedFd>,
    },
    /// The AF_PACKET socket that carries a port's frames while it is resized.
    Bridge {
        ticket: u64,
        ifname: String,
        max_frame: usize,
        slots: usize,
    },
    /// The resized port's new AF_XDP socket, bound to the interface's first queue once
    /// the kernel has released it, and steered to by nothing yet: the worker puts it in
    /// its program's map.
    Socket {
        ticket: u64,
        ifname: String,
        max_frame: usize,
        frames: usize,
    },
    /// A socket to close.
    Close(Closing),
    /// The worker's program to take off an interface (its socket's `Close`, if any,
    /// follows: the queue is not free for another bind before the program is off).
    Detach { ifindex: u32, mode: XdpMode },
    /// The resize of this ticket is over (its port was removed): a bind still waiting for
    /// it stops.
    Cancel(u64),
}

/// Held only to be dropped, which closes it.
pub(super) enum Closing {
    Xdp(#[allow(dead_code)] Box<XdpPort>),
    Packet(#[allow(dead_code)] PacketPort),
    Steered(#[allow(dead_code)] Box<SteeredPort>),
}

/// A port or socket the keeper opened (or why it could not).
// One is sent per open or resize step; a box around the slot would only be one more
// allocation for the keeper and one more free for the worker.
#[allow(clippy::large_enum_variant)]
pub(super) enum Done {
    /// A new port in the slot the worker puts it in as it is: everything the slot
    /// holds is made here, so that the worker allocates nothing for it (see
    /// `touched_slots`).
    Opened {
        ticket: u64,
        result: Result<(Slot, PortKind), PortError>,
    },
    /// A steered pair's ports, for the slots the worker kept.
    PairOpened {
        ticket: u64,
        result: Result<[Slot; 2], PortError>,
    },
    /// The programs of an `Attach` are on: their attachments, in the order of its targets.
    Attached {
        ticket: u64,
        result: Result<[OwnedFd; 2], PortError>,
    },
    /// The programs of an `Unsteer` are off.
    Unsteered { ticket: u64 },
    Bridge {
        ticket: u64,
        result: Result<PacketPort, PortError>,
    },
    Socket {
        ticket: u64,
        result: Result<Box<XdpPort>, PortError>,
    },
}

pub(super) struct Keeper {
    jobs: Option<Sender<Job>>,
    done: Receiver<Done>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Keeper {
    /// Starts the keeper: call it from the worker's thread. It opens AF_XDP ports with
    /// `program` (`None`: libxdp's), and writes to `wake` whenever it has something for
    /// the worker.
    pub(super) fn spawn(
        worker_core: Option<usize>,
        program: Option<Arc<RedirectProgram>>,
        wake: UnixDatagram,
    ) -> std::io::Result<Keeper> {
        let (jobs, inbox) = unbounded();
        let (outbox, done) = unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xwire-keeper".into())
            .spawn(move || {
                if let Some(core) = worker_core {
                    leave_the_workers_core(core);
                }
                let mut keeper = KeeperThread {
                    inbox,
                    outbox,
                    wake,
                    program,
                    stop: stopping,
                    later: VecDeque::new(),
                };
                keeper.run();
            })?;
        Ok(Keeper {
            jobs: Some(jobs),
            done,
            stop,
            thread: Some(thread),
        })
    }

    pub(super) fn ask(&self, job: Job) {
        if let Some(jobs) = &self.jobs {
            // The keeper ends only when this sender goes.
            let _ = jobs.send(job);
        }
    }

    pub(super) fn close(&self, socket: Closing) {
        self.ask(Job::Close(socket));
    }

    /// A socket the keeper has opened since the last call, if any.
    pub(super) fn done(&self) -> Option<Done> {
        self.done.try_recv().ok()
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The keeper's side of the channels.
struct KeeperThread {
    inbox: Receiver<Job>,
    outbox: Sender<Done>,
    /// Wakes the worker: it may be asleep with nothing to forward.
    wake: UnixDatagram,
    program: Option<Arc<RedirectProgram>>,
    stop: Arc<AtomicBool>,
    /// Socket jobs that came while another waited for its queue: they take their turn
    /// after it.
    later: VecDeque<Job>,
}

impl KeeperThread {
    fn run(&mut self) {
        loop {
            let job = match self.later.pop_front() {
                Some(job) => job,
                None => match self.inbox.recv() {
                    Ok(job) => job,
                    Err(_) => return,
                },
            };
            let done = match job {
                Job::Socket {
                    ticket,
                    ifname,
                    max_frame,
                    frames,
                } => self.bind_when_released(ticket, &ifname, max_frame, frames),
                other => self.work(other),
            };
            if let Some(done) = done {
                if !self.hand_over(done) {
                    return;
                }
            }
        }
    }

    /// Gives the worker what was opened, and wakes it; false once the worker is gone.
    fn hand_over(&self, done: Done) -> bool {
        if self.outbox.send(done).is_err() {
            return false;
        }
        // Full only when the worker already has a wake-up waiting.
        let _ = self.wake.send(&[1]);
        true
    }

    /// Every job but a socket's: done at once.
    fn work(&mut self, job: Job) -> Option<Done> {
        match job {
            Job::Open { ticket, spec } => Some(Done::Opened {
                ticket,
                result: open_slot(&spec, self.program.as_deref()),
            }),
            Job::OpenPair { ticket, spec } => Some(Done::PairOpened {
                ticket,
                result: open_steered(&spec, self.program.as_deref()),
            }),
            Job::Attach { ticket, targets } => Some(Done::Attached {
                ticket,
                result: attach_pair(&targets, self.program.as_deref()),
            }),
            Job::Unsteer {
                ticket,
                attachments,
            } => {
                drop(attachments);
                Some(Done::Unsteered { ticket })
            }
            Job::Bridge {
                ticket,
                ifname,
                max_frame,
                slots,
            } => Some(Done::Bridge {
                ticket,
                result: PacketPort::open(&ifname, max_frame, slots),
            }),
            Job::Socket { .. } => {
                self.later.push_back(job);
                None
            }
            Job::Close(socket) => {
                drop(socket);
                None
            }
            Job::Detach { ifindex, mode } => {
                crate::xdp_redirect::detach(ifindex, mode);
                None
            }
            Job::Cancel(ticket) => {
                self.later
                    .retain(|job| !matches!(job, Job::Socket { ticket: t, .. } if *t == ticket));
                None
            }
        }
    }

    /// Binds a new socket on `ifname`'s first queue once the kernel has let go of it for
    /// the socket that closed, for as long as that takes, doing every other job that
    /// comes meanwhile. The kernel holds the queue until no frame comes to the
    /// interface: measured with `remote-wire`'s TCP pass, the bind was refused for as
    /// long as the transfer ran (3 s of a 3 s run, 5 s of a 5 s one), and succeeded at
    /// once after. Meanwhile the bridge carries the port. `None`: the resize was
    /// cancelled, or the worker is stopping.
    fn bind_when_released(
        &mut self,
        ticket: u64,
        ifname: &str,
        max_frame: usize,
        frames: usize,
    ) -> Option<Done> {
        let since = Instant::now();
        std::thread::sleep(FIRST_BIND);
        let mut refused = 0u32;
        let mut cancelled = false;
        let mut wait = || {
            refused += 1;
            let pause = if since.elapsed() < SLOW_AFTER {
                BIND_PAUSE
            } else {
                SLOW_BIND_PAUSE
            };
            std::thread::sleep(pause);
            while let Ok(job) = self.inbox.try_recv() {
                match job {
                    Job::Cancel(t) if t == ticket => cancelled = true,
                    other => {
                        if let Some(done) = self.work(other) {
                            self.hand_over(done);
                        }
                    }
                }
            }
            !cancelled && !self.stop.load(Ordering::Relaxed)
        };
        let opened = XdpPort::open(
            ifname,
            None,
            max_frame,
            frames,
            Steering::SendOnly {
                queue: 0,
                while_busy: Some(&mut wait),
            },
        );
        tracing::debug!(ifname, frames, refused, waited = ?since.elapsed(), ok = opened.is_ok(), "rebound a resized port");
        if cancelled {
            return None;
        }
        Some(Done::Socket {
            ticket,
            result: opened.map(Box::new),
        })
    }
}

/// Moves the calling thread (the keeper, which started on its worker's thread and so on
/// its core) to every other core of the machine. The sockets it closes are released by
/// the kernel in work that runs where they were closed: on the worker's own core, that
/// work waited behind the worker and the traffic it carried, and a port's new socket
/// could not be bound for as long as the traffic flowed (5 s, in `remote-wire`'s TCP
/// pass). A worker that is not pinned, or a machine of one core, keeps it where it is.
fn leave_the_workers_core(worker_core: usize) {
    use nix::sched::{sched_setaffinity, CpuSet};
    use nix::unistd::Pid;
    let online = usize::try_from(online_cores())
        .unwrap_or(0)
        .min(CpuSet::count());
    if online < 2 {
        return;
    }
    let mut elsewhere = CpuSet::new();
    for core in (0..online).filter(|&c| c != worker_core) {
        let _ = elsewhere.set(core);
    }
    let _ = sched_setaffinity(Pid::from_raw(0), &elsewhere);
}

/// The cores online now.
fn online_cores() -> i64 {
    // SAFETY: sysconf reads a system value; it has no memory effects.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }
}
