//! An AF_PACKET port: the fall-back for interfaces where AF_XDP is unavailable, or when
//! configured. One raw socket with memory-mapped TPACKET_V2 RX and TX rings (one mapping,
//! RX slots first): frames are read in place and written in place, and one send() call
//! pushes a whole batch.
//!
//! Written against libc rather than a crate: the AF_PACKET crates on crates.io either do
//! not map a TX ring or copy each frame into a fresh allocation, and the ring protocol is a
//! status word per slot. The `unsafe` here is the mapping and that status word.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::xdp_port::{KernelDrops, PortError};

const ETH_P_ALL: u16 = 0x0003;
/// Where a TX slot's frame starts: the tpacket2 header, aligned (the kernel's
/// `TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)`).
const TX_DATA_OFFSET: usize = 32;
/// Room in a slot for the header and the RX frame's alignment padding.
const SLOT_OVERHEAD: usize = 128;

/// One AF_PACKET socket and its two mapped rings.
pub(crate) struct PacketPort {
    fd: OwnedFd,
    map: NonNull<u8>,
    map_len: usize,
    slot_size: usize,
    slots: usize,
    rx_next: usize,
    tx_next: usize,
    tx_queued: usize,
    /// Kernel drops counted so far (see `kernel_drops`).
    rx_drops: u64,
}

// SAFETY: the mapping is owned by this value alone (no aliasing handles), and the
// kernel's side of it is synchronised through the per-slot status words.
unsafe impl Send for PacketPort {}

/// Sets an integer socket option.
fn set_option(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    set_option_raw(fd, level, name, &value)
}

fn set_option_raw<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl PacketPort {
    /// Opens a port on `ifname` (in the calling thread's namespace) for frames up to
    /// `max_frame` bytes, with `slots` slots in each ring.
    pub(crate) fn open(
        ifname: &str,
        max_frame: usize,
        slots: usize,
    ) -> Result<PacketPort, PortError> {
        let index = nix::net::if_::if_nametoindex(ifname)
            .map_err(|_| PortError::NoSuchInterface(ifname.into()))?;
        let fail = |what: &str, e: io::Error| PortError::Socket {
            ifname: ifname.into(),
            mode: "af_packet",
            cause: io::Error::new(e.kind(), format!("{what}: {e}")),
        };
        // Protocol 0: a socket opened for ETH_P_ALL takes every interface's frames until
        // `bind` narrows it to one, and keeps them in its ring. A resize's bridge opened
        // while another pod sent forwarded that pod's frames over its own link (extra
        // frames on a wire in `switch.rs`'s tests when ports were resized every 20 ms),
        // and a port opened in a daemon's namespace took the host's. `bind` below names
        // the protocol and the interface together.
        // SAFETY: plain socket(2) call; the fd is owned at once.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
        if raw < 0 {
            return Err(fail("socket", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a new, valid fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let slot_size = (max_frame + SLOT_OVERHEAD).next_power_of_two().max(2048);
        let block_size = slot_size.max(4096);
        let slots = slots.max(block_size / slot_size).next_power_of_two();
        let request = libc::tpacket_req {
            tp_block_size: block_size as u32,
            tp_block_nr: (slots * slot_size / block_size) as u32,
            tp_frame_size: slot_size as u32,
            tp_frame_nr: slots as u32,
        };
        let fdn = fd.as_raw_fd();
        set_option(
            fdn,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            libc::tpacket_versions::TPACKET_V2 as i32,
        )
        .map_err(|e| fail("PACKET_VERSION", e))?;
        set_option(fdn, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, 1)
            .map_err(|e| fail("PACKET_IGNORE_OUTGOING", e))?;
        // The frames are a switch's, not the host's: skip the qdisc layer.
        set_option(fdn, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, 1)
            .map_err(|e| fail("PACKET_QDISC_BYPASS", e))?;
        set_option_raw(fdn, libc::SOL_PACKET, libc::PACKET_RX_RING, &request)
            .map_err(|e| fail("PACKET_RX_RING", e))?;
        set_option_raw(fdn, libc::SOL_PACKET, libc::PACKET_TX_RING, &request)
            .map_err(|e| fail("PACKET_TX_RING", e))?;
        let map_len = 2 * slots * slot_size;
        // SAFETY: maps the two rings the kernel just allocated for this socket, shared.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fdn,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(fail("mmap", io::Error::last_os_error()));
        }
        let port = PacketPort {
            fd,
            map: NonNull::new(map.cast()).expect("mmap returned a mapping"),
            map_len,
            slot_size,
            slots,
            rx_next: 0,
            tx_next: 0,
            tx_queued: 0,
            rx_drops: 0,
        };
        // SAFETY: an all-zero sockaddr_ll is valid; the fields bind to this interface.
        let mut address: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        address.sll_family = libc::AF_PACKET as u16;
        address.sll_protocol = ETH_P_ALL.to_be();
        address.sll_ifindex = index as i32;
        // SAFETY: `address` is a sockaddr_ll of the length passed.
        let rc = unsafe {
            libc::bind(
                fdn,
                (&address as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(fail("bind", io::Error::last_os_error()));
        }
        tracing::info!(ifname, slot_size, slots, "AF_PACKET port open");
        Ok(port)
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Frames the kernel dropped for want of a free RX slot, since the port opened.
    /// Reading PACKET_STATISTICS resets the kernel's count, so the total is kept here.
    pub(crate) fn kernel_drops(&mut self) -> io::Result<KernelDrops> {
        let mut stats = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `stats` and `len` are live locals of the size passed.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut stats as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        self.rx_drops += u64::from(stats.tp_drops);
        Ok(KernelDrops {
            rx_fill_ring_empty: self.rx_drops,
            ..KernelDrops::default()
        })
    }

    fn slot(&self, index: usize) -> *mut u8 {
        debug_assert!(index < 2 * self.slots);
        // SAFETY: `index` is below the number of slots in the mapping.
        unsafe { self.map.as_ptr().add(index * self.slot_size) }
    }

    fn status(&self, index: usize) -> &AtomicU32 {
        // SAFETY: every slot starts with its tpacket2_hdr, whose first field is the u32
        // status word; slots are 16-byte aligned in a page-aligned mapping. The kernel
        // writes it concurrently, hence the atomic view.
        unsafe { &*self.slot(index).cast::<AtomicU32>() }
    }

    /// Hands up to `budget` received frames to `take` (the frame, and whether it arrived
    /// whole: a frame larger than a slot is cut short), returning each slot to the kernel
    /// afterwards. Returns how many frames were taken.
    pub(crate) fn receive(&mut self, budget: usize, mut take: impl FnMut(&[u8], bool)) -> usize {
        self.receive_stamped(budget, |frame, whole, _| take(frame, whole))
    }

    /// As `receive`, with the time the kernel gave each frame to the socket (its
    /// software receive timestamp, CLOCK_REALTIME nanoseconds).
    pub(crate) fn receive_stamped(
        &mut self,
        budget: usize,
        mut take: impl FnMut(&[u8], bool, u64),
    ) -> usize {
        let mut taken = 0;
        while taken < budget {
            let index = self.rx_next;
            let status = self.status(index).load(Ordering::Acquire);
            if status & libc::TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the slot belongs to user space while its status has TP_STATUS_USER;
            // the header and the frame lie inside the slot (the kernel checked tp_mac and
            // tp_snaplen against the slot size).
            let frame = unsafe {
                let header = &*self.slot(index).cast::<libc::tpacket2_hdr>();
                let data = self.slot(index).add(usize::from(header.tp_mac));
                let whole = header.tp_snaplen == header.tp_len;
                let stamp = u64::from(header.tp_sec) * 1_000_000_000 + u64::from(header.tp_nsec);
                (
                    std::slice::from_raw_parts(data, header.tp_snaplen as usize),
                    whole,
                    stamp,
                )
            };
            take(frame.0, frame.1, frame.2);
            self.status(index)
                .store(libc::TP_STATUS_KERNEL, Ordering::Release);
            self.rx_next = (index + 1) % self.slots;
            taken += 1;
        }
        taken
    }

    /// Copies a frame, given as consecutive parts, into the next TX slot. `false` when the
    /// ring is full (the kernel has not sent the slot's previous frame yet).
    pub(crate) fn queue<'a>(&mut self, parts: impl Iterator<Item = &'a [u8]> + Clone) -> bool {
        let index = self.slots + self.tx_next;
        let status = self.status(index).load(Ordering::Acquire);
        if status != libc::TP_STATUS_AVAILABLE && status & libc::TP_STATUS_WRONG_FORMAT == 0 {
            return false;
        }
        let len: usize = parts.clone().map(<[u8]>::len).sum();
        if len > self.slot_size - TX_DATA_OFFSET {
            return false;
        }
        // SAFETY: the slot is user space's while AVAILABLE; `len` bytes fit after the
        // header, as checked above.
        unsafe {
            let mut at = self.slot(index).add(TX_DATA_OFFSET);
            for part in parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), at, part.len());
                at = at.add(part.len());
            }
            let header = &mut *self.slot(index).cast::<libc::tpacket2_hdr>();
            header.tp_len = len as u32;
        }
        self.status(index)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx_next = (self.tx_next + 1) % self.slots;
        self.tx_queued += 1;
        true
    }

    /// Frames queued and not yet handed to the kernel by a flush.
    pub(crate) fn queued(&self) -> usize {
        self.tx_queued
    }

    /// Asks the kernel to send every queued frame.
    pub(crate) fn flush(&mut self) {
        if self.tx_queued == 0 {
            return;
        }
        // SAFETY: send(2) with no buffer: the kernel walks the TX ring.
        let rc =
            unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
        if rc >= 0 {
            self.tx_queued = 0;
        }
        // On EAGAIN/ENOBUFS the frames stay queued and the next flush retries.
    }
}

impl Drop for PacketPort {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `open`, which nothing else refers to.
        unsafe {
            libc::munmap(self.map.as_ptr().cast(), self.map_len);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use xwire_testbed::checks::test_frame;
    use xwire_testbed::{unique_ifname, Netns, RawSocket, Veth};

    use super::PacketPort;

    #[test]
    fn a_port_opened_while_another_interface_is_busy_takes_none_of_its_frames() {
        // A resize's bridge opened while another pod sent through the node forwarded
        // that pod's frames over its own link: the socket took every interface's frames
        // from its opening until its bind.
        const OPENS: usize = 50;
        let pod = Netns::new("xpp-open-pod").unwrap();
        let node = Netns::new("xpp-open-node").unwrap();
        let quiet = Veth::named(&pod, "eth1", &node, &unique_ifname()).unwrap();
        let busy = Veth::named(&pod, "eth2", &node, &unique_ifname()).unwrap();
        quiet.set_up().unwrap();
        busy.set_up().unwrap();
        let flood = RawSocket::open(&pod, "eth2").unwrap();
        let stop = AtomicBool::new(false);
        let foreign = std::thread::scope(|s| {
            s.spawn(|| {
                // Bounded in time; the frames go only to the node's end of `busy`.
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut seq = 0u16;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    let _ = flood.send(&test_frame(100, 0xf, seq));
                    seq = seq.wrapping_add(1);
                }
            });
            std::thread::sleep(Duration::from_millis(20));
            let foreign = node.run(|| {
                let mut foreign = 0;
                for _ in 0..OPENS {
                    let mut port = PacketPort::open(quiet.b_name(), 1514, 64).unwrap();
                    port.receive(64, |frame, _| {
                        foreign += usize::from(frame.get(11) == Some(&0xf));
                    });
                }
                foreign
            });
            stop.store(true, Ordering::Relaxed);
            foreign.unwrap()
        });
        assert_eq!(
            foreign, 0,
            "frames of the busy interface taken by {OPENS} ports opened on the quiet one"
        );
    }
}
