//! A raw AF_PACKET socket bound to one interface of a namespace, for tests that send and
//! receive whole Ethernet frames.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::time::Duration;

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

use super::{Error, Netns};

/// Every protocol: the socket sees all frames on its interface.
const ETH_P_ALL: u16 = 0x0003;

/// An AF_PACKET socket on one interface; frames go out unchanged and come in whole.
#[derive(Debug)]
pub struct RawSocket {
    socket: Socket,
}

impl RawSocket {
    /// Opens a socket on `ifname` in `ns`.
    pub fn open(ns: &Netns, ifname: &str) -> Result<RawSocket, Error> {
        let index = ns.ifindex(ifname)?;
        let op = format!("open a packet socket on {ifname} in {}", ns.name());
        // No protocol until `bind` names it with the interface: a socket opened for
        // ETH_P_ALL takes every interface's frames until then, and keeps them.
        let socket = ns
            .run(|| Socket::new(Domain::PACKET, Type::RAW, None))?
            .map_err(|e| Error::io(&op, e))?;
        ignore_outgoing(&socket).map_err(|e| Error::io(&op, e))?;
        socket
            .bind(&link_address(index))
            .map_err(|e| Error::io(&op, e))?;
        // Room for a few thousand frames, so that a test's reader that falls behind for a
        // moment loses nothing.
        socket
            .set_recv_buffer_size(8 << 20)
            .map_err(|e| Error::io(&op, e))?;
        Ok(RawSocket { socket })
    }

    /// Sends one frame as it is.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        let sent = self.socket.send(frame)?;
        if sent != frame.len() {
            return Err(io::Error::other(format!(
                "sent {sent} of {} bytes",
                frame.len()
            )));
        }
        Ok(())
    }

    /// The next frame that arrived on the interface (frames sent from it are not seen),
    /// or `None` after `timeout` with nothing.
    pub fn recv(&self, timeout: Duration) -> io::Result<Option<Vec<u8>>> {
        self.socket.set_read_timeout(Some(timeout))?;
        let mut buf = [0u8; 65_536];
        match (&self.socket).read(&mut buf) {
            Ok(len) => Ok(Some(buf[..len].to_vec())),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Frames the kernel dropped on their way into this socket since the last call
    /// (its receive buffer was full): a reader that fell behind, not the interface.
    pub fn take_drops(&self) -> io::Result<u64> {
        let mut stats = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: PACKET_STATISTICS writes a `tpacket_stats` into the buffer given, whose
        // size is passed in `len`; both live across the call. Reading resets the counts.
        let rc = unsafe {
            libc::getsockopt(
                self.socket.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut stats as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::from(stats.tp_drops))
    }
}

/// An AF_PACKET socket for one EtherType on every interface of a namespace: sends on
/// the interface it is told, receives from all. For probing many wires with few sockets.
#[derive(Debug)]
pub struct PacketSocket {
    socket: Socket,
}

impl PacketSocket {
    pub fn open(ns: &Netns, ethertype: [u8; 2]) -> Result<PacketSocket, Error> {
        let protocol = u16::from_be_bytes(ethertype);
        let op = format!("open a packet socket in {}", ns.name());
        let socket = ns
            .run(|| {
                Socket::new(
                    Domain::PACKET,
                    Type::RAW,
                    Some(Protocol::from(i32::from(protocol.to_be()))),
                )
            })?
            .map_err(|e| Error::io(&op, e))?;
        ignore_outgoing(&socket).map_err(|e| Error::io(&op, e))?;
        socket
            .set_recv_buffer_size(8 << 20)
            .map_err(|e| Error::io(&op, e))?;
        socket
            .set_nonblocking(true)
            .map_err(|e| Error::io(&op, e))?;
        Ok(PacketSocket { socket })
    }

    /// Sends `frame` out of the interface with index `ifindex`.
    pub fn send_on(&self, ifindex: u32, frame: &[u8]) -> io::Result<()> {
        self.socket.send_to(frame, &link_address(ifindex)).map(drop)
    }

    /// The next frame that has arrived, if any (never waits).
    pub fn try_recv(&self) -> io::Result<Option<Vec<u8>>> {
        let mut buf = [0u8; 2048];
        match (&self.socket).read(&mut buf) {
            Ok(len) => Ok(Some(buf[..len].to_vec())),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A `sockaddr_ll` naming interface `index`, for bind().
fn link_address(index: u32) -> SockAddr {
    // SAFETY: sockaddr_ll is plain old data for which all-zero bytes are a valid value.
    let mut ll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    ll.sll_family = libc::AF_PACKET as u16;
    ll.sll_protocol = ETH_P_ALL.to_be();
    ll.sll_ifindex = index as i32;
    // SAFETY: the storage is zeroed, then the sockaddr_ll is copied into its start; the
    // length given is that of a sockaddr_ll, which fits in sockaddr_storage.
    unsafe {
        let (_, address) = SockAddr::try_init(|storage, len| {
            std::ptr::copy_nonoverlapping(
                (&ll as *const libc::sockaddr_ll).cast::<u8>(),
                storage.cast::<u8>(),
                std::mem::size_of::<libc::sockaddr_ll>(),
            );
            *len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            Ok(())
        })
        .expect("filling a sockaddr cannot fail");
        address
    }
}

/// Leaves out of the socket the frames the interface sends, so that it sees only arrivals.
fn ignore_outgoing(socket: &Socket) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: a valid socket fd, and an int option value of the size given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
