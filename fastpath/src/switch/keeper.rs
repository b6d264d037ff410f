//! A thread beside the worker that opens and closes the sockets of port resizes.
//!
//! A socket's birth and death wait in the kernel: AF_PACKET's ring set-up and bind, and
//! AF_XDP's release, each wait out an RCU grace period (`synchronize_net`), tens of
//! milliseconds on a virtual machine, and a socket's UMEM is pinned and zeroed as it
//! registers. Done in the worker, a resize stalled every port of the worker for 40 to 60
//! ms (measured: the 1024-frame bridge of a 50 kpps port took 43 ms to open), and the
//! ports' fill rings ran empty. The keeper does that work; the worker only swaps ready
//! sockets in and hands the old ones over to be closed. It is started from the worker's
//! thread, so it is in the worker's network namespace.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::packet_port::PacketPort;
use crate::xdp_port::{PortError, Steering, XdpPort};

use super::RELEASE_GRACE;

/// How long the kernel usually takes to let go of a queue after its socket closed (16 ms
/// measured idle): the first bind waits this long, so that few binds (each pins and
/// zeroes a new UMEM) are refused.
const FIRST_BIND: Duration = Duration::from_millis(15);
/// Between binds the kernel refused (the queue still held).
const BIND_PAUSE: Duration = Duration::from_millis(5);

/// A socket to open for a resize, named by the resize's ticket.
pub(super) enum Job {
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
}

/// Held only to be dropped, which closes it.
pub(super) enum Closing {
    Xdp(#[allow(dead_code)] Box<XdpPort>),
    Packet(#[allow(dead_code)] PacketPort),
}

/// A socket the keeper opened (or why it could not).
pub(super) enum Done {
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
    /// Starts the keeper: call it from the worker's thread.
    pub(super) fn spawn() -> std::io::Result<Keeper> {
        let (jobs, inbox) = unbounded();
        let (outbox, done) = unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xwire-keeper".into())
            .spawn(move || {
                for job in inbox {
                    if let Some(done) = work(job, &stopping) {
                        if outbox.send(done).is_err() {
                            return;
                        }
                    }
                }
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

fn work(job: Job, stop: &AtomicBool) -> Option<Done> {
    match job {
        Job::Bridge {
            ticket,
            ifname,
            max_frame,
            slots,
        } => Some(Done::Bridge {
            ticket,
            result: PacketPort::open(&ifname, max_frame, slots),
        }),
        Job::Socket {
            ticket,
            ifname,
            max_frame,
            frames,
        } => Some(Done::Socket {
            ticket,
            result: bind_when_released(&ifname, max_frame, frames, stop).map(Box::new),
        }),
        Job::Close(socket) => {
            drop(socket);
            None
        }
    }
}

/// Binds a new socket on `ifname`'s first queue, trying again while the kernel still
/// holds it for a socket that closed (`RELEASE_GRACE` at most).
fn bind_when_released(
    ifname: &str,
    max_frame: usize,
    frames: usize,
    stop: &AtomicBool,
) -> Result<XdpPort, PortError> {
    let since = Instant::now();
    std::thread::sleep(FIRST_BIND);
    loop {
        let opened = XdpPort::open(
            ifname,
            None,
            max_frame,
            frames,
            Steering::SendOnly { queue: 0 },
        );
        match opened {
            Err(PortError::Busy(_))
                if since.elapsed() < RELEASE_GRACE && !stop.load(Ordering::Relaxed) =>
            {
                std::thread::sleep(BIND_PAUSE);
            }
            result => return result,
        }
    }
}
