//! The UDP socket under the QUIC endpoint, with quinn-udp's batched receive (GRO) and
//! segmented send (GSO) where the kernel offers them.

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;

use nix::sys::socket::{setsockopt, sockopt};
use quinn_udp::{RecvMeta, Transmit, UdpSocketState};

use super::PeerError;

/// Receive buffers per recvmmsg call, each large enough for a GRO batch.
pub(crate) const RECV_BATCH: usize = 8;
const RECV_BUFFER: usize = 64 * 1024;
/// Receive buffers kept at most. A buffer is reused once every datagram cut from it is
/// dropped; until then (its frames wait in QUIC or in the switch's inbox) the next
/// receive takes another. A poll receives a few batches before its frames are taken, so
/// a few batches' worth are in use at once.
const MAX_RECV_BUFFERS: usize = 8 * RECV_BATCH;
/// Each UDP socket buffer (receive and send): the kernel doubles it, to 32 MiB. It is
/// four times the congestion response's cap (`congestion::FIRST_CAP`), so that a capped
/// window never overflows the receiver, with room for each packet's overhead.
const SOCKET_BUFFER: usize = 16 << 20;

/// The ioctl that reads when the kernel received the datagram a socket last returned
/// (`SIOCGSTAMPNS` of `asm-generic/sockios.h`, a `struct timespec`); the libc crate does
/// not name it.
const SIOCGSTAMPNS: u32 = 0x8907;

pub(crate) struct Udp {
    socket: UdpSocket,
    state: UdpSocketState,
    /// Pooled receive buffers: datagrams are cut out of them without a copy, and handed
    /// on as they are (quinn decrypts them in place).
    buffers: Vec<BytesMut>,
    /// The buffers of the receive under way.
    chosen: Vec<usize>,
    /// Buffers made since the socket opened.
    pub(crate) buffers_made: u64,
    meta: [RecvMeta; RECV_BATCH],
}

impl Udp {
    pub(crate) fn bind(addr: SocketAddr) -> Result<Udp, PeerError> {
        let error = |source| PeerError::Socket {
            addr,
            cause: source,
        };
        let socket = UdpSocket::bind(addr).map_err(error)?;
        socket.set_nonblocking(true).map_err(error)?;
        let state = UdpSocketState::new((&socket).into()).map_err(error)?;
        // Room for bursts of a busy wire while the worker is elsewhere. The plain
        // options are capped by net.core.[rw]mem_max (about 200 KiB by default), which a
        // busy wire overflows in a millisecond; a node daemon has CAP_NET_ADMIN, which
        // the FORCE variants need. Without it, the capped size is what there is.
        let recv = setsockopt(&socket, sockopt::RcvBufForce, &SOCKET_BUFFER).is_ok()
            || state
                .set_recv_buffer_size((&socket).into(), SOCKET_BUFFER)
                .is_ok();
        let send = setsockopt(&socket, sockopt::SndBufForce, &SOCKET_BUFFER).is_ok()
            || state
                .set_send_buffer_size((&socket).into(), SOCKET_BUFFER)
                .is_ok();
        if !(recv && send) {
            tracing::debug!(%addr, "cannot size the UDP socket's buffers");
        }
        // The first reading turns on the kernel's receive timestamps for this socket (and
        // finds none yet). The kernel does so in deferred work, moments later: until
        // then a datagram reads as not having waited, which widens no window.
        let _ = last_received_at(&socket);
        Ok(Udp {
            socket,
            state,
            buffers: Vec::new(),
            chosen: Vec::with_capacity(RECV_BATCH),
            buffers_made: 0,
            meta: [RecvMeta::default(); RECV_BATCH],
        })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    pub(crate) fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.socket)
    }

    pub(crate) fn max_gso_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    /// Receives one batch; `each` gets every UDP datagram (GRO batches split) with its
    /// source and local address. Returns how many datagrams there were, and whether the
    /// socket had no more than this batch (fewer messages came than there were buffers:
    /// another receive now would find nothing).
    pub(crate) fn recv(&mut self, mut each: impl FnMut(&RecvMeta, BytesMut)) -> (usize, bool) {
        self.choose_buffers();
        let (count, drained) = {
            // On the stack: this runs on every pass of the worker.
            let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(&mut []));
            let mut filled = 0;
            for (index, buffer) in self.buffers.iter_mut().enumerate() {
                if self.chosen.get(filled) == Some(&index) {
                    slices[filled] = IoSliceMut::new(&mut buffer[..]);
                    filled += 1;
                }
            }
            match self.state.recv(
                (&self.socket).into(),
                &mut slices[..filled],
                &mut self.meta[..filled],
            ) {
                Ok(n) => (n, n < filled),
                Err(_) => return (0, true),
            }
        };
        let mut datagrams = 0;
        for (meta, &index) in self.meta.iter().zip(&self.chosen).take(count) {
            let mut filled = self.buffers[index].split_to(meta.len);
            let stride = meta.stride.max(1);
            while !filled.is_empty() {
                let datagram = filled.split_to(stride.min(filled.len()));
                each(meta, datagram);
                datagrams += 1;
            }
        }
        (datagrams, drained)
    }

    /// Picks up to `RECV_BATCH` whole buffers for the next receive: reused ones whose
    /// datagrams are all dropped, or new ones.
    fn choose_buffers(&mut self) {
        self.chosen.clear();
        for (index, buffer) in self.buffers.iter_mut().enumerate() {
            if self.chosen.len() == RECV_BATCH {
                return;
            }
            if buffer.len() < RECV_BUFFER {
                buffer.clear();
                if !buffer.try_reclaim(RECV_BUFFER) {
                    continue;
                }
                // SAFETY: `try_reclaim` succeeded, so `buffer` is again the whole of the
                // allocation it was made with (it never allocates), whose first
                // `RECV_BUFFER` bytes were zeroed when it was made and written since,
                // never uninitialized: they are initialized bytes.
                unsafe { buffer.set_len(RECV_BUFFER) };
            }
            self.chosen.push(index);
        }
        while self.chosen.len() < RECV_BATCH && self.buffers.len() < MAX_RECV_BUFFERS {
            self.chosen.push(self.buffers.len());
            self.buffers.push(BytesMut::zeroed(RECV_BUFFER));
            self.buffers_made += 1;
        }
        if self.chosen.is_empty() {
            // Every buffer still lends datagrams: the first is replaced, and its memory
            // goes when they do.
            self.buffers[0] = BytesMut::zeroed(RECV_BUFFER);
            self.buffers_made += 1;
            self.chosen.push(0);
        }
    }

    /// How long the datagram that the last `recv` returned waited in this socket: how far
    /// behind the socket this node's worker is.
    pub(crate) fn last_datagram_wait(&self) -> Option<Duration> {
        let received = last_received_at(&self.socket)?;
        SystemTime::now().duration_since(received).ok()
    }

    /// Sends one transmit (possibly several GSO segments). A full socket buffer drops
    /// it, which QUIC's loss recovery treats as a lost packet; the error is returned so
    /// that the drop is counted.
    pub(crate) fn send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        self.state.try_send((&self.socket).into(), transmit)
    }
}

/// When the kernel received the datagram that `socket` last returned; `None` before the
/// first.
fn last_received_at(socket: &UdpSocket) -> Option<SystemTime> {
    let fd = std::os::fd::AsRawFd::as_raw_fd(socket);
    let mut stamp = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: SIOCGSTAMPNS writes one `struct timespec` through its argument, which points
    // at `stamp`, a `timespec` that outlives the call; `fd` is the open socket `socket`
    // borrows.
    let rc = unsafe { libc::ioctl(fd, SIOCGSTAMPNS as _, &mut stamp as *mut libc::timespec) };
    if rc != 0 {
        return None;
    }
    let since_epoch = Duration::new(
        u64::try_from(stamp.tv_sec).ok()?,
        u32::try_from(stamp.tv_nsec).ok()?,
    );
    Some(UNIX_EPOCH + since_epoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn the_wait_of_a_datagram_in_the_socket_is_read_from_the_kernel() {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        let mut udp = Udp::bind(loopback).unwrap();
        let to = udp.local_addr().unwrap();
        let sender = UdpSocket::bind(loopback).unwrap();
        assert_eq!(udp.last_datagram_wait(), None, "nothing received yet");

        // The kernel turns its receive timestamps on in deferred work, after the first
        // socket asks: a datagram that came before reads as not having waited at all. So
        // datagrams are left waiting until one shows its wait (at once, where another
        // socket has them on already).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            sender.send_to(b"waits", to).unwrap();
            std::thread::sleep(Duration::from_millis(60));
            let (datagrams, _) = udp.recv(|_, _| {});
            assert_eq!(datagrams, 1);
            let waited = udp.last_datagram_wait().unwrap();
            if waited >= Duration::from_millis(50) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "a datagram left 60 ms in the socket still reads {waited:?} after 5 s"
            );
        }

        sender.send_to(b"read at once", to).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while udp.recv(|_, _| {}).0 == 0 {
            assert!(std::time::Instant::now() < deadline, "never arrived");
        }
        let waited = udp.last_datagram_wait().unwrap();
        assert!(waited < Duration::from_millis(50), "{waited:?}");
    }
}
