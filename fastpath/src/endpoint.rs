//! One port used as a traffic endpoint rather than a switch port: it sends frames the
//! caller builds and hands received frames to the caller. `xwire-pktgen` uses it, so that
//! the generator and sink drive the same AF_XDP and AF_PACKET code as the switch.

use std::fs::File;
use std::os::fd::AsFd;

use xwire_netns::Visit;

use crate::packet_port::PacketPort;
use crate::worker::{PortChoice, PortKind, WorkerError};
use crate::xdp_port::{KernelDrops, Lent, PortError, Steering, XdpMode, XdpPort, MAX_FRAME_ROOM};
use crate::xdp_redirect::RedirectProgram;

/// Frames taken from the RX ring at once.
const RECEIVE_BATCH: usize = 64;

/// Kicks per `flush`, at most: 32 frames each in copy mode, so 2,048 frames, more than a
/// generator queues between two flushes, while a kick that keeps failing cannot hold the
/// caller (a sink on the same thread) for long.
const MAX_FLUSH_KICKS: usize = 64;

struct XdpIo {
    /// The program that steers the interface's frames to the port: the worker's, with
    /// this port in slot 0. Unlike libxdp's default program without a bpffs, it is
    /// detached when the endpoint goes, so a run that fails leaves no program behind.
    program: RedirectProgram,
    port: XdpPort,
    /// The network namespace the port was opened in. The program comes off the
    /// interface by its index, which means another interface (or none) in any other
    /// namespace: an endpoint dropped on a thread elsewhere (`xwire-pktgen lossfree`'s
    /// were dropped on its main thread) left its program on the interface and asked the
    /// namespace it was dropped in to detach whatever program its interface of that index
    /// had.
    netns: File,
    /// Frames lent by the port, written, waiting for its TX ring.
    outgoing: Vec<Lent>,
    /// Frames lent by the port's last receive.
    received: Vec<Lent>,
}

impl Drop for XdpIo {
    fn drop(&mut self) {
        let Some((ifindex, slot)) = self.port.redirect() else {
            return;
        };
        // Back in the port's namespace for the detach (a no-op when already there).
        // Failing that, nothing is detached: better a program left behind than another
        // interface's taken off.
        match Visit::enter(self.netns.as_fd()) {
            Ok(_inside) => self.program.release(ifindex, slot, self.port.mode()),
            Err(e) => tracing::warn!(
                ifname = self.port.ifname(),
                error = %e,
                "the endpoint's XDP program stays on its interface: cannot enter its namespace"
            ),
        }
    }
}

enum Io {
    Xdp(Box<XdpIo>),
    Packet(PacketPort),
}

/// A single port that sends and receives whole frames.
pub struct Endpoint {
    io: Io,
    kind: PortKind,
}

impl Endpoint {
    /// Opens an endpoint on `ifname` (in the calling thread's netns) for frames up to
    /// `max_frame` bytes, with rings of `ring` frames. `Auto` takes AF_XDP when it can.
    pub fn open(
        ifname: &str,
        max_frame: usize,
        ring: usize,
        choice: PortChoice,
        xdp_mode: Option<XdpMode>,
    ) -> Result<Endpoint, WorkerError> {
        let ring = ring.max(64).next_power_of_two();
        let packet = || -> Result<Endpoint, WorkerError> {
            let port = PacketPort::open(ifname, max_frame, ring)?;
            Ok(Endpoint {
                io: Io::Packet(port),
                kind: PortKind::AfPacket,
            })
        };
        if choice == PortChoice::AfPacket || max_frame > MAX_FRAME_ROOM {
            return packet();
        }
        match Self::open_xdp(ifname, max_frame, ring, xdp_mode) {
            Ok(endpoint) => Ok(endpoint),
            // `Busy`: another program holds the interface's XDP hook, most often the
            // switch's, steering an impaired or captured same-node wire through itself
            // (`steered_port.rs`). AF_PACKET needs no hook, and the frames it sends go
            // the way the pod's own do. Without this, `lab bench` across such a wire
            // failed at its first trial.
            Err(WorkerError::Port(e @ (PortError::Socket { .. } | PortError::Busy(_))))
                if choice == PortChoice::Auto =>
            {
                tracing::warn!(ifname, reason = %e, "AF_XDP unavailable, using AF_PACKET");
                packet()
            }
            Err(e) => Err(e),
        }
    }

    fn open_xdp(
        ifname: &str,
        max_frame: usize,
        ring: usize,
        mode: Option<XdpMode>,
    ) -> Result<Endpoint, WorkerError> {
        let program = RedirectProgram::load(1).map_err(|source| PortError::Socket {
            ifname: ifname.into(),
            mode: "load the XDP program",
            cause: source,
        })?;
        let netns = File::open("/proc/thread-self/ns/net").map_err(|source| PortError::Socket {
            ifname: ifname.into(),
            mode: "open its network namespace",
            cause: source,
        })?;
        let mut port = XdpPort::open(
            ifname,
            mode,
            max_frame,
            ring * 4,
            Steering::Worker(&program, 0),
        )?;
        // A quarter of the frames wait in the fill ring; the rest are for sending.
        port.set_fill_target(ring);
        port.refill();
        let kind = PortKind::AfXdp(port.mode());
        Ok(Endpoint {
            io: Io::Xdp(Box::new(XdpIo {
                program,
                port,
                netns,
                outgoing: Vec::with_capacity(ring),
                received: Vec::with_capacity(RECEIVE_BATCH),
            })),
            kind,
        })
    }

    pub fn kind(&self) -> PortKind {
        self.kind
    }

    /// What the kernel dropped on its way into this endpoint (a sink that fell behind).
    pub fn kernel_drops(&mut self) -> std::io::Result<KernelDrops> {
        match &mut self.io {
            Io::Xdp(x) => x.port.kernel_drops(),
            Io::Packet(port) => port.kernel_drops(),
        }
    }

    /// Queues one frame (at most the endpoint's `max_frame`); `false` when no buffer or
    /// ring slot is free now. Queued frames leave on `flush`.
    pub fn queue(&mut self, frame: &[u8]) -> bool {
        match &mut self.io {
            Io::Xdp(x) => {
                if frame.len() > x.port.frame_room() {
                    return false;
                }
                let Some(mut lent) = x.port.take_free() else {
                    return false;
                };
                x.port.write_frame(&mut lent, frame, false);
                x.outgoing.push(lent);
                true
            }
            Io::Packet(port) => port.queue(std::iter::once(frame)),
        }
    }

    /// Sends what was queued (what the TX ring has no room for stays queued), and takes
    /// back the buffers of frames already sent.
    ///
    /// It kicks until the kernel has sent everything or stops taking frames (at most
    /// `MAX_FLUSH_KICKS` times), as an AF_PACKET port's one send walks its whole TX ring.
    /// It used to kick once, and in copy mode one kick sends at most 32 frames: a sender
    /// whose every frame crosses the kernel inside the kick (kernel VXLAN) fell behind in
    /// its own TX ring. Its frames, stamped as they were queued, waited there up to the
    /// ring's depth before they left: `lab bench` showed the VXLAN baseline's p99 at its
    /// loss-free rate as 47 to 73 ms, which was the generator's ring, and counted frames
    /// still in the ring at the end of a trial as offered within it.
    pub fn flush(&mut self) {
        match &mut self.io {
            Io::Xdp(x) => {
                let XdpIo { port, outgoing, .. } = &mut **x;
                let room = port.tx_room(outgoing.len());
                // The ring has room for these: it takes them all.
                port.send(outgoing.drain(..room));
                // Reclaims after each kick, so what was sent is back on the free list.
                port.drain_tx(MAX_FLUSH_KICKS);
            }
            Io::Packet(port) => port.flush(),
        }
    }

    /// Frames queued or handed to the kernel and not yet sent: a sender stopping after a
    /// burst flushes until this is 0, or its frames are counted as lost.
    pub fn unsent(&self) -> usize {
        match &self.io {
            Io::Xdp(x) => x.outgoing.len() + x.port.in_flight(),
            Io::Packet(port) => port.queued(),
        }
    }

    /// Hands up to `budget` received frames to `take`; returns how many.
    pub fn receive(&mut self, budget: usize, mut take: impl FnMut(&[u8])) -> usize {
        self.receive_timed(budget, |frame, _| take(frame))
    }

    /// As `receive`, with when each frame arrived where the kernel knows it: an AF_PACKET
    /// port's receive timestamp (taken as the kernel hands the frame to the socket, so a
    /// receiver that was not running then does not count), on CLOCK_MONOTONIC in
    /// nanoseconds; `None` for AF_XDP, whose copy mode on a veth stamps nothing.
    pub fn receive_timed(
        &mut self,
        budget: usize,
        mut take: impl FnMut(&[u8], Option<u64>),
    ) -> usize {
        let taken = match &mut self.io {
            Io::Xdp(x) => {
                let XdpIo { port, received, .. } = &mut **x;
                // Batch after batch up to the budget, not one: a generator and sink on one
                // thread send all they queued at each flush, so a sink that took one
                // batch per turn could never take more than its own side sent, and fell
                // behind for good after any stall.
                let mut taken = 0;
                while taken < budget {
                    let n = port.receive((budget - taken).min(RECEIVE_BATCH), received);
                    for lent in received.drain(..) {
                        take(port.frame_data(&lent), None);
                        port.recycle_one(lent);
                    }
                    port.refill();
                    taken += n;
                    if n < RECEIVE_BATCH {
                        break;
                    }
                }
                taken
            }
            Io::Packet(port) => {
                let realtime_ahead =
                    clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC);
                port.receive_stamped(budget, |frame, whole, stamp| {
                    if whole {
                        take(frame, Some((stamp as i128 - realtime_ahead) as u64))
                    }
                })
            }
        };
        taken
    }
}

/// A clock's reading in nanoseconds.
fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given, which lives across the call.
    unsafe { libc::clock_gettime(clock, &mut t) };
    i128::from(t.tv_sec) * 1_000_000_000 + i128::from(t.tv_nsec)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use xwire_testbed::checks::test_frame;
    use xwire_testbed::{unique_ifname, Netns, RawSocket, Veth};

    use super::Endpoint;
    use crate::worker::{PortChoice, PortKind, WorkerError};
    use crate::xdp_port::PortError;

    /// Queues up to `frames` 1514-byte frames (tagged `tag`) and flushes once: how many
    /// were queued, and how many were still unsent after the flush.
    fn queue_and_flush(endpoint: &mut Endpoint, frames: usize, tag: u8) -> (usize, usize) {
        let queued = (0..frames)
            .take_while(|&seq| endpoint.queue(&test_frame(1514, tag, seq as u16)))
            .count();
        endpoint.flush();
        (queued, endpoint.unsent())
    }

    #[test]
    fn one_flush_sends_every_frame_queued_not_one_kicks_worth() {
        // Well above the 32 frames one copy-mode kick sends, within one flush's kicks.
        const FRAMES: usize = 400;
        let a = Netns::new("xep-flush-a").unwrap();
        let b = Netns::new("xep-flush-b").unwrap();
        let veth = Veth::named(&a, "eth1", &b, &unique_ifname()).unwrap();
        veth.set_up().unwrap();
        let before = b.link_stats(veth.b_name()).unwrap().rx_packets;
        let (queued, unsent) = a
            .run(|| {
                let mut endpoint = Endpoint::open("eth1", 1514, 512, PortChoice::AfXdp, None)
                    .expect("an AF_XDP endpoint");
                queue_and_flush(&mut endpoint, FRAMES, 0xe)
            })
            .unwrap();
        let arrived = b.link_stats(veth.b_name()).unwrap().rx_packets - before;
        assert_eq!(queued, FRAMES);
        assert_eq!(unsent, 0, "frames left in the endpoint after one flush");
        assert_eq!(arrived, FRAMES as u64, "frames that reached the other end");
    }

    #[test]
    fn one_receive_takes_up_to_its_budget_not_one_batch() {
        const FRAMES: usize = 200;
        let a = Netns::new("xep-recv-a").unwrap();
        let b = Netns::new("xep-recv-b").unwrap();
        let veth = Veth::named(&a, "eth1", &b, &unique_ifname()).unwrap();
        veth.set_up().unwrap();
        let sender = RawSocket::open(&b, veth.b_name()).unwrap();
        let taken = a
            .run(|| {
                let mut endpoint = Endpoint::open("eth1", 1514, 512, PortChoice::AfXdp, None)
                    .expect("an AF_XDP endpoint");
                for seq in 0..FRAMES {
                    sender.send(&test_frame(60, 0xd, seq as u16)).unwrap();
                }
                // Until the kernel has put them all in the RX ring (or 5 s).
                let deadline = Instant::now() + Duration::from_secs(5);
                let mut taken = 0;
                while taken == 0 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                    taken = endpoint.receive(256, |_| {});
                }
                taken
            })
            .unwrap();
        assert_eq!(taken, FRAMES, "frames one receive of 256 took");
    }

    #[test]
    fn an_interface_whose_xdp_hook_is_held_gets_an_af_packet_endpoint_that_sends() {
        // What `lab bench` meets on a same-node wire that the switch steers: the pod's
        // interface has the switch's XDP program on it. Here an AF_XDP endpoint holds it.
        const FRAMES: usize = 50;
        let a = Netns::new("xep-held-a").unwrap();
        let b = Netns::new("xep-held-b").unwrap();
        let veth = Veth::named(&a, "eth1", &b, &unique_ifname()).unwrap();
        veth.set_up().unwrap();
        let before = b.link_stats(veth.b_name()).unwrap().rx_packets;
        let (refused, kind, queued, unsent) = a
            .run(|| {
                let _holder = Endpoint::open("eth1", 1514, 512, PortChoice::AfXdp, None)
                    .expect("the AF_XDP endpoint that holds the hook");
                let refused = Endpoint::open("eth1", 1514, 512, PortChoice::AfXdp, None).err();
                let mut second = Endpoint::open("eth1", 1514, 512, PortChoice::Auto, None)
                    .expect("an endpoint, AF_PACKET if need be");
                let (queued, unsent) = queue_and_flush(&mut second, FRAMES, 0xc);
                (refused, second.kind(), queued, unsent)
            })
            .unwrap();
        let arrived = b.link_stats(veth.b_name()).unwrap().rx_packets - before;
        assert!(
            matches!(refused, Some(WorkerError::Port(PortError::Busy(_)))),
            "{refused:?}"
        );
        assert_eq!(kind, PortKind::AfPacket);
        assert_eq!((queued, unsent), (FRAMES, 0));
        assert_eq!(arrived, FRAMES as u64, "frames that reached the other end");
    }
}
