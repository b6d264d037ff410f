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

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

/// How many ready sockets one wait reports; the worker passes over all its ports after a
/// wait anyway, so this only bounds the copy out of the kernel.
const EVENTS: usize = 16;

/// How many ready ports one look (`ready_now`) reports; the rest are reported by the
/// next, the set being level-triggered.
const READY_EVENTS: usize = 256;

/// The token of a watched socket that is not a port's (the peer transport, the command
/// socket); a port's token is its index.
pub(super) const NOT_A_PORT: u64 = u64::MAX;
/// The timer's token.
const TIMER: u64 = u64::MAX - 1;

pub(super) struct Sleeper {
    epoll: Epoll,
    /// A one-shot timer in the set, armed for each sleep: epoll's own timeout counts
    /// whole milliseconds, and a worker whose next deadline was less than one away (a
    /// QUIC acknowledgement due, a delayed frame) got a timeout of zero and spun until
    /// it passed. Measured with `xwire-perf remote-wire`: with QUIC's 2 ms ACK timer
    /// pending, the receiving worker of a 50 kpps wire was busy 55% of the time instead
    /// of 22%.
    timer: TimerFd,
}

impl Sleeper {
    pub(super) fn new() -> nix::Result<Sleeper> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )?;
        epoll.add(timer.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, TIMER))?;
        Ok(Sleeper { epoll, timer })
    }

    /// Wakes the sleeper whenever `fd` has something to read; `token` is the port's
    /// index, or `NOT_A_PORT`. The caller unwatches it before closing it (the epoll set
    /// refers to the open file, not the number).
    pub(super) fn watch(&self, fd: BorrowedFd<'_>, token: u64) -> nix::Result<()> {
        self.epoll
            .add(fd, EpollEvent::new(EpollFlags::EPOLLIN, token))
    }

    /// Appends the indexes of the ports readable now, without waiting; true when there
    /// may be more than one look reports.
    pub(super) fn ready_now(&self, ready: &mut Vec<usize>) -> bool {
        let mut events = [EpollEvent::empty(); READY_EVENTS];
        let Ok(n) = self.epoll.wait(&mut events, EpollTimeout::ZERO) else {
            return false;
        };
        ready.extend(
            events[..n]
                .iter()
                .map(EpollEvent::data)
                .filter(|&token| token < TIMER)
                .map(|token| token as usize),
        );
        n == READY_EVENTS
    }

    pub(super) fn unwatch(&self, fd: BorrowedFd<'_>) {
        // Closing the descriptor would remove it too; doing it here keeps the set exact
        // even if a library ever holds a duplicate of the socket.
        let _ = self.epoll.delete(fd);
    }

    /// Sleeps until a watched socket is readable or `limit` has passed, to the
    /// microsecond (an interrupted wait simply returns early).
    pub(super) fn sleep(&self, limit: Duration) {
        let mut events = [EpollEvent::empty(); EVENTS];
        // Arming the timer also clears a tick left from an earlier sleep that a socket
        // ended first. A zero time would disarm it: a microsecond at least.
        let time = TimeSpec::from_duration(limit.max(Duration::from_micros(1)));
        let timeout = match self
            .timer
            .set(Expiration::OneShot(time), TimerSetTimeFlags::empty())
        {
            Ok(()) => EpollTimeout::NONE,
            // Whole milliseconds, rounded up: late rather than spinning.
            Err(_) => EpollTimeout::try_from(limit + Duration::from_micros(999))
                .unwrap_or(EpollTimeout::MAX),
        };
        let _ = self.epoll.wait(&mut events, timeout);
    }
}

/// Naps until `fd` is readable, but at least `shortest` and at most `longest`
/// (`pace::Next::NapUntilPeer`). One descriptor: `ppoll` takes its timeout to the
/// nanosecond, where epoll's own counts whole milliseconds, and costs what a plain sleep
/// costs.
pub(super) fn nap_until_readable(fd: BorrowedFd<'_>, shortest: Duration, longest: Duration) {
    let start = std::time::Instant::now();
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    // An interrupted or failed wait only ends the nap early; the floor below still holds.
    let _ = ppoll(&mut fds, Some(TimeSpec::from_duration(longest)), None);
    if let Some(rest) = shortest.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn a_sleep_shorter_than_a_millisecond_lasts_as_asked_and_a_readable_socket_ends_it() {
        let sleeper = Sleeper::new().unwrap();
        // epoll's own timeout, in whole milliseconds, made this a zero timeout: the
        // worker returned at once and spun until its timer was due.
        for _ in 0..5 {
            let start = Instant::now();
            sleeper.sleep(Duration::from_micros(300));
            assert!(
                start.elapsed() >= Duration::from_micros(300),
                "{:?}",
                start.elapsed()
            );
        }
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        sleeper.watch(b.as_fd(), 7).unwrap();
        let mut ready = Vec::new();
        assert!(!sleeper.ready_now(&mut ready));
        assert!(ready.is_empty());
        a.send(&[1]).unwrap();
        let start = Instant::now();
        sleeper.sleep(Duration::from_secs(5));
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
        // Readable until read: reported by every look, by its token.
        for _ in 0..2 {
            sleeper.ready_now(&mut ready);
            assert_eq!(ready, [7]);
            ready.clear();
        }
    }

    #[test]
    fn a_nap_until_readable_lasts_its_longest_or_ends_at_its_shortest_once_readable() {
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        // Nothing to read: the longest, to the microsecond as `sleep` keeps it.
        let start = Instant::now();
        nap_until_readable(
            b.as_fd(),
            Duration::from_micros(150),
            Duration::from_micros(300),
        );
        assert!(
            start.elapsed() >= Duration::from_micros(300),
            "{:?}",
            start.elapsed()
        );
        // Readable from the start: the shortest, not the longest.
        a.send(&[1]).unwrap();
        let start = Instant::now();
        nap_until_readable(
            b.as_fd(),
            Duration::from_micros(150),
            Duration::from_secs(5),
        );
        let took = start.elapsed();
        assert!(took >= Duration::from_micros(150), "{took:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");
        // Made readable while napping: ends then.
        let (a, b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            a.send(&[1]).unwrap();
        });
        let start = Instant::now();
        nap_until_readable(b.as_fd(), Duration::ZERO, Duration::from_secs(5));
        let took = start.elapsed();
        sender.join().unwrap();
        assert!(took >= Duration::from_millis(20), "{took:?}");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}
