//! The UDP socket under the QUIC endpoint, with quinn-udp's batched receive (GRO) and
//! segmented send (GSO) where the kernel offers them.

use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};

use nix::sys::socket::{setsockopt, sockopt};
use quinn_udp::{RecvMeta, Transmit, UdpSocketState};

use super::PeerError;

/// Receive buffers per recvmmsg call, each large enough for a GRO batch.
pub(crate) const RECV_BATCH: usize = 8;
const RECV_BUFFER: usize = 64 * 1024;
/// Each UDP socket buffer (receive and send).
const SOCKET_BUFFER: usize = 8 << 20;

pub(crate) struct Udp {
    socket: UdpSocket,
    state: UdpSocketState,
    buffers: Vec<Vec<u8>>,
    meta: [RecvMeta; RECV_BATCH],
}

impl Udp {
    pub(crate) fn bind(addr: SocketAddr) -> Result<Udp, PeerError> {
        let error = |source| PeerError::Socket { addr, source };
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
        Ok(Udp {
            socket,
            state,
            buffers: vec![vec![0u8; RECV_BUFFER]; RECV_BATCH],
            meta: [RecvMeta::default(); RECV_BATCH],
        })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.socket)
    }

    pub(crate) fn max_gso_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    /// Receives one batch; `each` gets every UDP datagram (GRO batches split) with its
    /// source and local address. Returns how many datagrams there were.
    pub(crate) fn recv(&mut self, mut each: impl FnMut(&RecvMeta, &[u8])) -> usize {
        // On the stack: this runs on every pass of the worker.
        let mut buffers = self.buffers.iter_mut();
        let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
            std::array::from_fn(|_| IoSliceMut::new(buffers.next().expect("RECV_BATCH buffers")));
        let count = match self
            .state
            .recv((&self.socket).into(), &mut slices, &mut self.meta)
        {
            Ok(n) => n,
            Err(_) => return 0,
        };
        let mut datagrams = 0;
        for (meta, buf) in self.meta.iter().zip(&slices).take(count) {
            let stride = meta.stride.max(1);
            for segment in buf[..meta.len].chunks(stride) {
                each(meta, segment);
                datagrams += 1;
            }
        }
        datagrams
    }

    /// Sends one transmit (possibly several GSO segments). A full socket buffer drops
    /// it, which QUIC's loss recovery treats as a lost packet; the error is returned so
    /// that the drop is counted.
    pub(crate) fn send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        self.state.try_send((&self.socket).into(), transmit)
    }
}
