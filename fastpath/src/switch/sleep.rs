//! Where an idle worker sleeps: one epoll set holding every port's socket, the peer
//! transport's UDP socket and the control plane's wake-up socket.
//!
//! poll() was used before. It hands the kernel the whole list on every call, and the
//! kernel polls each socket to register and unregister the wait (for an AF_XDP socket in
//! copy mode, a poll also tries to send its TX ring). With a thousand ports, every sleep
//! and every wake-up cost about a millisecond of CPU: measured with `xwire-perf restart
//! --wires 1000`, the running node's worker spent two thirds of its time in poll() while
//! probes trickled in, and the restarting one a fifth. An epoll set is told of a socket
//! once, when its port opens, and a wait costs the same for ten ports as for ten thousand.

use std::os::fd::BorrowedFd;
use std::time::Duration;

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};

/// How many ready sockets one wait reports; the worker passes over all its ports after a
/// wait anyway, so this only bounds the copy out of the kernel.
const EVENTS: usize = 16;

pub(super) struct Sleeper {
    epoll: Epoll,
}

impl Sleeper {
    pub(super) fn new() -> nix::Result<Sleeper> {
        Ok(Sleeper {
            epoll: Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?,
        })
    }

    /// Wakes the sleeper whenever `fd` has something to read. The caller unwatches it
    /// before closing it (the epoll set refers to the open file, not the number).
    pub(super) fn watch(&self, fd: BorrowedFd<'_>) -> nix::Result<()> {
        self.epoll.add(fd, EpollEvent::new(EpollFlags::EPOLLIN, 0))
    }

    pub(super) fn unwatch(&self, fd: BorrowedFd<'_>) {
        // Closing the descriptor would remove it too; doing it here keeps the set exact
        // even if a library ever holds a duplicate of the socket.
        let _ = self.epoll.delete(fd);
    }

    /// Sleeps until a watched socket is readable or `limit` has passed (an interrupted
    /// wait simply returns early).
    pub(super) fn sleep(&self, limit: Duration) {
        let mut events = [EpollEvent::empty(); EVENTS];
        let limit = EpollTimeout::try_from(limit).unwrap_or(EpollTimeout::MAX);
        let _ = self.epoll.wait(&mut events, limit);
    }
}
