//! An AF_XDP port: one socket on a node-side veth end, with its RX, TX, fill and
//! completion rings, on a UMEM of its own.
//!
//! A UMEM per port, not one per worker: the kernel gives every socket bound to another
//! interface of a shared UMEM a buffer pool sized to the whole UMEM, so a shared UMEM costs
//! kernel memory in the square of the ports (about 26 GB for 1000 ports of 256 frames),
//! and it pins every port's frames at start whether or not the port ever opens. With one
//! per port both grow with the ports actually open, closing a port returns all of its
//! frames, and the switch copies a frame once from one port's UMEM into the other's (the
//! kernel copies it on the way in and out anyway: veth has no zero-copy AF_XDP).
//!
//! Every `unsafe` call into xsk-rs in the crate is in this file (`umem.rs` makes the UMEM,
//! which xsk-rs does safely). xsk-rs leaves one thing to
//! the caller: a descriptor handed to a ring must belong to the ring's UMEM and must not be
//! in any other ring or in use elsewhere. A port's descriptors are in exactly one place:
//! its free list, one of its kernel rings, or lent out (by `receive` and `take_free`) as a
//! `Lent`, which is neither `Copy` nor `Clone` and goes back (by `recycle` or `send`) only
//! to the port it came from, so the rest of the crate holds no `unsafe` for frames and
//! cannot put one frame in two places.

mod error;
mod kernel_drops;
mod mode;
mod umem;

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::xdp_redirect::RedirectProgram;

use xsk_rs::config::{BindFlags, Interface, LibxdpFlags, SocketConfig, XdpFlags};
use xsk_rs::{CompQueue, FillQueue, FrameDesc, RxQueue, TxQueue, Umem};

use error::socket_error;
pub use error::PortError;
pub use kernel_drops::KernelDrops;
pub use mode::{XdpMode, NATIVE_MAX_FRAME};
pub(crate) use umem::MAX_FRAME_ROOM;
use umem::{new_umem, tx_reserve, UmemLayout};

/// One UMEM frame lent out by a port: received data to read, or a free frame to write
/// and send. It is in one place at a time (not `Copy`, not `Clone`), and a port takes
/// back only its own (each port has a serial number, checked).
#[derive(Debug)]
pub(crate) struct Lent {
    desc: FrameDesc,
    port: u32,
}

impl Lent {
    /// Bytes of frame data in it.
    pub(crate) fn len(&self) -> usize {
        self.desc.lengths().data()
    }

    /// Whether the frame continues in the next descriptor (a jumbo frame's chain).
    pub(crate) fn has_more(&self) -> bool {
        self.desc.has_more_frames()
    }
}

/// Serial numbers of ports, so that a `Lent` goes back only to its own.
static NEXT_SERIAL: AtomicU32 = AtomicU32::new(0);

/// A port's mode, its four rings, and its interface and slot in the redirect program.
type Opened = (
    XdpMode,
    (TxQueue, RxQueue, FillQueue, CompQueue),
    Option<(u32, u32)>,
);

/// One AF_XDP socket, the frames it holds in kernel rings, and its UMEM.
/// Field order matters: the rings drop before the UMEM.
pub(crate) struct XdpPort {
    mode: XdpMode,
    tx: TxQueue,
    rx: RxQueue,
    fill: FillQueue,
    completion: CompQueue,
    /// Frames in the fill ring, waiting for received data.
    in_fill: usize,
    /// Frames in the TX ring, not yet completed.
    in_tx: usize,
    /// The interface index and slot of this port in the worker's program's maps.
    redirect: Option<(u32, u32)>,
    ifindex: u32,
    /// Frames in no ring and lent to no one.
    free: Vec<FrameDesc>,
    /// Descriptors on their way from the RX ring to the caller.
    scratch: Vec<FrameDesc>,
    /// Descriptors on their way from the caller to the TX ring.
    outgoing: Vec<FrameDesc>,
    serial: u32,
    /// How many frames the fill ring is kept topped up to.
    fill_target: usize,
    /// The fewest frames the fill ring held since `take_low_water` (how close a burst
    /// came to emptying it).
    low_water: usize,
    /// The UMEM's frames, and the interface the socket is on.
    frames: usize,
    ifname: String,
    /// Bytes of frame data one UMEM frame holds.
    frame_room: usize,
    umem: Umem,
}

/// How frames reach a port's socket.
pub(crate) enum Steering<'a> {
    /// Through libxdp's default program, which libxdp attaches to the interface.
    Libxdp,
    /// Through the worker's program, attached to the interface, with the port in `slot`.
    Worker(&'a RedirectProgram, u32),
    /// Through a program the caller attaches later (`RedirectProgram::steer`) that names
    /// `slot` itself; the socket is bound to the interface's first queue.
    Later(&'a RedirectProgram, u32),
    /// None: the socket only sends, from the interface's queue `queue`. While the
    /// kernel still holds the queue for a socket that closed (`Busy`), the bind is tried
    /// again on the same UMEM for as long as `while_busy` says (it waits, then answers
    /// whether to try again); without it, `Busy` is returned at once.
    SendOnly {
        queue: u32,
        while_busy: Option<&'a mut dyn FnMut() -> bool>,
    },
}

impl XdpPort {
    /// Opens a port on `ifname` (in the calling thread's network namespace) with `frames`
    /// UMEM frames for frames up to `max_frame` bytes, in `mode` or, with `None`, the
    /// fastest mode that can carry such frames: native (falling back to generic), or
    /// generic alone for frames above `NATIVE_MAX_FRAME`. `steering` says how frames reach
    /// the socket.
    pub(crate) fn open(
        ifname: &str,
        mode: Option<XdpMode>,
        max_frame: usize,
        frames: usize,
        steering: Steering<'_>,
    ) -> Result<XdpPort, PortError> {
        let interface: Interface = ifname
            .parse()
            .map_err(|_| PortError::BadName(ifname.into()))?;
        let Ok(ifindex) = nix::net::if_::if_nametoindex(ifname) else {
            return Err(PortError::NoSuchInterface(ifname.into()));
        };
        let layout = UmemLayout::for_port(ifname, max_frame, frames)?;
        let (umem, free) = new_umem(ifname, &layout)?;
        let modes: &[XdpMode] = match mode {
            Some(XdpMode::Native) => &[XdpMode::Native],
            Some(XdpMode::Generic) => &[XdpMode::Generic],
            // Frames above one buffer go to generic mode, though the worker's program
            // takes multi-buffer frames and a veth then takes native mode: with native
            // mode on the demo's 9000-byte wire, 1514-byte frames both ways at once were
            // loss-free at 65-83k frames a second against 90-98k with generic (three
            // alternated rounds of `lab bench`). Through libxdp's program, whose native
            // attach fails after the bind and leaves the UMEM's first socket bound (every
            // later try gets EBUSY), deciding before trying matters too.
            None if max_frame > NATIVE_MAX_FRAME => &[XdpMode::Generic],
            None => &[XdpMode::Native, XdpMode::Generic],
        };
        let config = SocketConfig::builder()
            .libxdp_flags(LibxdpFlags::XSK_LIBXDP_FLAGS_INHIBIT_PROG_LOAD)
            .bind_flags(BindFlags::XDP_USE_NEED_WAKEUP | BindFlags::XDP_USE_SG)
            .rx_queue_size(layout.ring)
            .tx_queue_size(layout.ring)
            .build();
        let at = (&interface, ifname, ifindex);
        let (mode, rings, redirect) = match steering {
            Steering::Worker(program, slot) => {
                XdpPort::open_redirected(&umem, config, at, modes, program, slot)?
            }
            Steering::Libxdp => {
                XdpPort::open_with_libxdp(&umem, &layout, &interface, ifname, modes)?
            }
            Steering::Later(program, slot) => {
                let rings = XdpPort::bind(&umem, config, at, 0)?;
                program
                    .register_socket(slot, rings.1.fd().as_raw_fd())
                    .map_err(|source| PortError::Socket {
                        ifname: ifname.into(),
                        mode: XdpMode::Native.name(),
                        cause: source,
                    })?;
                (XdpMode::Native, rings, None)
            }
            Steering::SendOnly {
                queue,
                mut while_busy,
            } => {
                // One UMEM for every try: a new one per try pinned and zeroed megabytes
                // each time, and each failed try's release queued one more work item
                // in the kernel ahead of the very release the bind waits for. Under
                // load that kept a queue held for over 5 s (`remote-wire`'s TCP pass).
                let rings = loop {
                    match XdpPort::bind(&umem, config, at, queue) {
                        Err(PortError::Busy(_)) if while_busy.as_mut().is_some_and(|w| w()) => {}
                        bound => break bound?,
                    }
                };
                (XdpMode::Native, rings, None)
            }
        };
        let frame_size = layout.frame_size;
        tracing::info!(
            ifname,
            mode = mode.name(),
            frames,
            frame_size,
            "AF_XDP port open"
        );
        let (tx, rx, fill, completion) = rings;
        Ok(XdpPort {
            mode,
            tx,
            rx,
            fill,
            completion,
            in_fill: 0,
            in_tx: 0,
            redirect,
            ifindex,
            fill_target: free.len() - tx_reserve(free.len()),
            low_water: free.len(),
            frames: free.len(),
            ifname: ifname.into(),
            frame_room: layout.frame_room(),
            scratch: Vec::with_capacity(free.len()),
            outgoing: Vec::with_capacity(free.len()),
            free,
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            umem,
        })
    }

    /// Binds the socket first (a live socket on the interface makes that fail: `Busy`),
    /// then attaches the worker's program in the first mode the interface takes.
    fn open_redirected(
        umem: &Umem,
        config: SocketConfig,
        (interface, ifname, ifindex): (&Interface, &str, u32),
        modes: &[XdpMode],
        program: &RedirectProgram,
        slot: u32,
    ) -> Result<Opened, PortError> {
        let (tx, rx, fill, completion) =
            XdpPort::bind(umem, config, (interface, ifname, ifindex), 0)?;
        let mut last_error = None;
        for &mode in modes {
            match program.attach(ifindex, mode) {
                Ok(()) => {
                    program
                        .register(ifindex, slot, rx.fd().as_raw_fd())
                        .map_err(|source| PortError::Socket {
                            ifname: ifname.into(),
                            mode: mode.name(),
                            cause: source,
                        })?;
                    let rings = (tx, rx, fill, completion);
                    return Ok((mode, rings, Some((ifindex, slot))));
                }
                Err(source) => {
                    tracing::info!(ifname, mode = mode.name(), error = %source, "XDP program refused");
                    last_error = Some(PortError::Socket {
                        ifname: ifname.into(),
                        mode: mode.name(),
                        cause: source,
                    });
                }
            }
        }
        Err(last_error.expect("at least one mode was tried"))
    }

    /// Binds a socket to queue `queue` of the interface, with no program.
    fn bind(
        umem: &Umem,
        config: SocketConfig,
        (interface, ifname, _): (&Interface, &str, u32),
        queue: u32,
    ) -> Result<(TxQueue, RxQueue, FillQueue, CompQueue), PortError> {
        // SAFETY: as in `open_with_libxdp`.
        let (tx, rx, rings) = unsafe { xsk_rs::Socket::new(config, umem, interface, queue) }
            .map_err(|e| socket_error(ifname, "bind", &e))?;
        let Some((fill, completion)) = rings else {
            return Err(PortError::AlreadyOpen(ifname.into()));
        };
        Ok((tx, rx, fill, completion))
    }

    fn open_with_libxdp(
        umem: &Umem,
        layout: &UmemLayout,
        interface: &Interface,
        ifname: &str,
        modes: &[XdpMode],
    ) -> Result<Opened, PortError> {
        let mut last_error = None;
        for &mode in modes {
            // XDP_USE_SG: a frame larger than one UMEM frame (jumbo MTU) arrives as a chain
            // of descriptors, and is sent as one.
            let config = SocketConfig::builder()
                .xdp_flags(mode.flags() | XdpFlags::XDP_FLAGS_UPDATE_IF_NOEXIST)
                .bind_flags(BindFlags::XDP_USE_NEED_WAKEUP | BindFlags::XDP_USE_SG)
                .rx_queue_size(layout.ring)
                .tx_queue_size(layout.ring)
                .build();
            // SAFETY: xsk-rs requires that the UMEM outlive the socket's use of its frames;
            // the socket keeps a clone of the UMEM, and the port drops its rings first.
            match unsafe { xsk_rs::Socket::new(config, umem, interface, 0) } {
                Ok((tx, rx, Some((fill, completion)))) => {
                    return Ok((mode, (tx, rx, fill, completion), None));
                }
                Ok((_, _, None)) => return Err(PortError::AlreadyOpen(ifname.into())),
                Err(e) => last_error = Some(socket_error(ifname, mode.name(), &e)),
            }
        }
        Err(last_error.expect("at least one mode was tried"))
    }

    /// Records that the worker's program, attached in `mode`, now sends the frames of
    /// `ifindex` to this socket from `slot` (a socket bound with `Steering::SendOnly` and
    /// put in the program's map afterwards).
    pub(crate) fn steered_by(&mut self, ifindex: u32, slot: u32, mode: XdpMode) {
        self.redirect = Some((ifindex, slot));
        self.mode = mode;
    }

    /// The interface and slot the worker's program sends this port's frames by, if any.
    pub(crate) fn redirect(&self) -> Option<(u32, u32)> {
        self.redirect
    }

    pub(crate) fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub(crate) fn mode(&self) -> XdpMode {
        self.mode
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.rx.fd().as_raw_fd()
    }

    /// The socket, for an epoll set that wakes the worker when it is readable.
    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the descriptor is the socket's, which `self` owns (through its RX ring)
        // and keeps open for as long as the borrow lasts.
        unsafe { BorrowedFd::borrow_raw(self.raw_fd()) }
    }

    /// What the kernel dropped on its way into this socket, since it opened.
    pub(crate) fn kernel_drops(&self) -> io::Result<KernelDrops> {
        let stats = self.rx.fd().xdp_statistics()?;
        Ok(KernelDrops {
            rx_ring_full: stats.rx_ring_full(),
            rx_fill_ring_empty: stats.rx_fill_ring_empty_descs(),
            // The kernel counts a missing fill buffer in rx_dropped as well.
            rx_other: stats
                .rx_dropped()
                .saturating_sub(stats.rx_fill_ring_empty_descs())
                + stats.rx_invalid_descs(),
            tx_invalid: stats.tx_invalid_descs(),
        })
    }

    /// Takes up to `max` received frames, lent to the caller, onto `into`; returns how
    /// many.
    pub(crate) fn receive(&mut self, max: usize, into: &mut Vec<Lent>) -> usize {
        // Sized once, not cleared and filled per call: a worker asks each of its ports
        // on every pass, and with a thousand idle ports, refilling this buffer with
        // defaults was most of the worker's time (the ring overwrites what it yields).
        if self.scratch.len() < max {
            self.scratch.resize(max, FrameDesc::default());
        }
        // SAFETY: `scratch` is this port's buffer, only written; the ring yields
        // descriptors of this port's UMEM, which pass from the kernel to the caller.
        let n = unsafe { self.rx.consume(&mut self.scratch[..max]) };
        // The fill ring's level is what was put in it less what the kernel has taken
        // out, which includes frames still waiting in the RX ring. Counted after this
        // batch alone, a burst taken in batches (with refills between them) read as a
        // fill ring never below its target less one batch, while the kernel had found
        // it empty (96 frames lost by a 2048-frame port whose low water read 1728).
        // Only a full batch can leave frames waiting, so only then is the ring read
        // again (two peeks at its producer).
        let waiting = if n == max {
            n + self.rx.nb_avail_exact() as usize
        } else {
            n
        };
        self.low_water = self.low_water.min(self.in_fill.saturating_sub(waiting));
        self.in_fill -= n;
        let port = self.serial;
        into.extend(self.scratch[..n].iter().map(|&desc| Lent { desc, port }));
        n
    }

    /// Lends a free frame to the caller (to write with `write_frame`), if one is left.
    pub(crate) fn take_free(&mut self) -> Option<Lent> {
        let desc = self.free.pop()?;
        Some(Lent {
            desc,
            port: self.serial,
        })
    }

    /// Bytes of frame data one of this port's UMEM frames holds: longer frames take a
    /// chain of them.
    pub(crate) fn frame_room(&self) -> usize {
        self.frame_room
    }

    /// Free frames left.
    pub(crate) fn free_frames(&self) -> usize {
        self.free.len()
    }

    /// Panics on a frame of another port: a bug that would corrupt both ports' rings.
    fn check(&self, frame: &Lent) {
        assert_eq!(
            frame.port, self.serial,
            "a frame given back to the wrong port"
        );
    }

    /// Takes back frames this port lent, emptying `frames`.
    pub(crate) fn recycle(&mut self, frames: &mut Vec<Lent>) {
        for frame in frames.drain(..) {
            self.recycle_one(frame);
        }
    }

    /// Takes back one frame this port lent.
    pub(crate) fn recycle_one(&mut self, frame: Lent) {
        self.check(&frame);
        self.free.push(frame.desc);
    }

    /// Writes `bytes` (at most `frame_room`) as the data of `frame`, marked as continued
    /// in the next descriptor when `more`.
    pub(crate) fn write_frame(&self, frame: &mut Lent, bytes: &[u8], more: bool) {
        self.check(frame);
        frame.desc.set_options(if more { XDP_PKT_CONTD } else { 0 });
        // SAFETY: the frame is this port's (checked) and lent: the caller holds the only
        // `Lent` for it, mutably, so nothing else reads or writes it now.
        let mut data = unsafe { self.umem.data_mut(&mut frame.desc) };
        let mut cursor = data.cursor();
        cursor.set_pos(0);
        // The cursor writes into the frame's fixed buffer; what does not fit is cut.
        let _ = std::io::Write::write_all(&mut cursor, bytes);
    }

    /// The data of `frame`, borrowed with it (so it cannot be given back meanwhile).
    pub(crate) fn frame_data<'a>(&'a self, frame: &'a Lent) -> &'a [u8] {
        self.check(frame);
        // SAFETY: the frame is this port's (checked) and lent, and the returned slice
        // borrows the `Lent`: it cannot be given back, sent or written while read.
        unsafe { self.umem.data(&frame.desc) }.contents()
    }

    /// Free slots in the TX ring, up to `wanted`.
    pub(crate) fn tx_room(&mut self, wanted: usize) -> usize {
        (self.tx.nb_free(wanted as u32) as usize).min(wanted)
    }

    /// Queues frames for sending (`kick` then asks the kernel to send them); returns how
    /// many the TX ring took: all of them, or none when it has less room (see
    /// `tx_room`), in which case they come back to the free list. The ones taken go to
    /// the kernel, and return to the free list once sent.
    pub(crate) fn send(&mut self, frames: impl IntoIterator<Item = Lent>) -> usize {
        self.outgoing.clear();
        for frame in frames {
            self.check(&frame);
            self.outgoing.push(frame.desc);
        }
        // SAFETY: every descriptor was lent by this port (checked) and moved in here by
        // value, so it is in no ring and in use nowhere else.
        let n = unsafe { self.tx.produce(&self.outgoing) };
        self.in_tx += n;
        if n == 0 {
            self.free.extend_from_slice(&self.outgoing);
        }
        n
    }

    /// Frames received and not yet taken (`receive`).
    pub(crate) fn received_waiting(&mut self) -> usize {
        self.rx.nb_avail_exact() as usize
    }

    /// Frames in the TX ring the kernel has not finished sending.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_tx
    }

    /// Asks the kernel to send what waits in the TX ring.
    pub(crate) fn kick(&mut self) {
        if self.in_tx > 0 && self.tx.needs_wakeup() {
            // A failed kick (EAGAIN, ENOBUFS) leaves the frames queued for the next one.
            let _ = self.tx.wakeup();
        }
    }

    /// Kicks and reclaims until the TX ring is empty, a kick sends nothing, or
    /// `max_kicks` is reached. In copy mode one kick sends at most a small batch (32
    /// frames on Linux 6.x) and completes it before returning, so a pass that queued more
    /// than that needs several; with a zero-copy driver the first kick completes nothing
    /// at once, and the loop stops there.
    pub(crate) fn drain_tx(&mut self, max_kicks: usize) {
        for _ in 0..max_kicks {
            if self.in_tx == 0 {
                break;
            }
            self.kick();
            if self.reclaim() == 0 {
                break;
            }
        }
    }

    /// Moves every frame the kernel finished sending to the free list; returns how many.
    pub(crate) fn reclaim(&mut self) -> usize {
        let mut total = 0;
        loop {
            self.scratch.clear();
            self.scratch.resize(RECLAIM_BATCH, FrameDesc::default());
            // SAFETY: `scratch` is this port's buffer, only written; what comes back are
            // descriptors this port sent, now in no ring.
            let n = unsafe { self.completion.consume(&mut self.scratch) };
            self.in_tx -= n;
            total += n;
            self.free.extend_from_slice(&self.scratch[..n]);
            if n < RECLAIM_BATCH {
                return total;
            }
        }
    }

    /// The fewest frames the fill ring held since `take_low_water`, and its target,
    /// left as they are.
    pub(crate) fn low_water(&self) -> (usize, usize) {
        (self.low_water, self.fill_target)
    }

    /// The fewest frames the fill ring held since the last call, and what it is kept
    /// topped up to.
    pub(crate) fn take_low_water(&mut self) -> (usize, usize) {
        let lowest = self.low_water;
        self.low_water = self.in_fill;
        (lowest, self.fill_target)
    }

    /// The frames of the port's UMEM.
    pub(crate) fn frames(&self) -> usize {
        self.frames
    }

    /// The interface the port's socket is on.
    pub(crate) fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Keeps `frames` in the fill ring from now on (all but `tx_reserve` by default).
    pub(crate) fn set_fill_target(&mut self, frames: usize) {
        self.fill_target = frames;
    }

    /// Tops the fill ring up to its target, from the free list.
    pub(crate) fn refill(&mut self) {
        let want = self
            .fill_target
            .saturating_sub(self.in_fill)
            .min(self.free.len());
        if want == 0 {
            return;
        }
        let from = self.free.len() - want;
        // SAFETY: free frames are this port's and in no ring.
        let given = unsafe { self.fill.produce(&self.free[from..]) };
        self.in_fill += given;
        // The ring took all it was offered, or nothing.
        self.free.truncate(self.free.len() - given);
        if self.fill.needs_wakeup() {
            // Non-blocking poll: tells the kernel the fill ring has frames again.
            let _ = self.fill.wakeup(self.rx.fd_mut(), 0);
        }
    }
}

/// Completions read from the ring at once.
const RECLAIM_BATCH: usize = 64;
/// The descriptor option that says "the frame continues in the next descriptor".
const XDP_PKT_CONTD: u32 = 1;

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use xwire_testbed::checks::test_frame;
    use xwire_testbed::{unique_ifname, Netns, RawSocket, Veth};

    use super::{Steering, XdpPort};

    #[test]
    fn the_fill_rings_low_water_counts_the_frames_waiting_in_the_rx_ring() {
        // A burst taken one batch at a time must read as the fill ring it emptied, not
        // as a ring that only ever lost one batch: the port's growth is decided by it.
        const BURST: usize = 60;
        let pod = Netns::new("xxp-low-pod").unwrap();
        let node = Netns::new("xxp-low-node").unwrap();
        let veth = Veth::named(&pod, "eth1", &node, &unique_ifname()).unwrap();
        veth.set_up().unwrap();
        let sender = RawSocket::open(&pod, "eth1").unwrap();
        let (low_water, fill_target, taken) = node
            .run(|| {
                let mut port =
                    XdpPort::open(veth.b_name(), None, 1514, 128, Steering::Libxdp).unwrap();
                port.refill();
                let (_, fill_target) = port.take_low_water();
                for seq in 0..BURST {
                    sender.send(&test_frame(60, 0xb, seq as u16)).unwrap();
                }
                // The burst is in the RX ring once the kernel has handed it over.
                let deadline = Instant::now() + Duration::from_secs(5);
                while port.rx.nb_avail_exact() < BURST as u32 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let mut lent = Vec::new();
                let taken = port.receive(16, &mut lent);
                port.recycle(&mut lent);
                let (low_water, _) = port.low_water();
                (low_water, fill_target, taken)
            })
            .unwrap();
        assert_eq!(taken, 16);
        assert!(
            low_water <= fill_target - BURST,
            "low water {low_water} of {fill_target} after a burst of {BURST}"
        );
    }
}
