//! The XDP program of a worker's AF_XDP ports: loaded once per worker and attached to
//! every port's interface, it hands each frame to the socket registered for the interface
//! it arrived on (ingress ifindex -> port slot -> socket, two maps).
//!
//! Why not libxdp's default program: libxdp loads (and the kernel verifies) a program per
//! interface, and finds out what an interface already holds by netlink dumps of every
//! interface in the namespace, several per port. With a thousand ports on a node, opening
//! them took seconds, growing with the square of their number; with this program a port
//! costs a socket, one netlink attach and two map writes. It is hand-assembled because it
//! is sixteen instructions and a compiled one would need clang and a BPF target in the
//! build. Every `unsafe` call into libbpf in the crate is in this file.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::xdp_port::XdpMode;

/// One BPF instruction as the kernel reads it (`struct bpf_insn`: the destination
/// register in the low four bits of `regs`, the source in the high four).
#[repr(C)]
#[derive(Clone, Copy)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: (src << 4) | dst,
        off,
        imm,
    }
}

const LDX_W: u8 = 0x61; // dst = *(u32 *)(src + off)
const STX_W: u8 = 0x63; // *(u32 *)(dst + off) = src
const MOV64_REG: u8 = 0xbf;
const MOV64_IMM: u8 = 0xb7;
const ADD64_IMM: u8 = 0x07;
const LD_IMM64: u8 = 0x18;
const JEQ_IMM: u8 = 0x15;
const JNE_IMM: u8 = 0x55;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
/// `src` of a LD_IMM64 whose immediate is a map's file descriptor.
const PSEUDO_MAP_FD: u8 = 1;
const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
const HELPER_REDIRECT_MAP: i32 = 51;
const XDP_PASS: i32 = 2;
/// `struct xdp_md`: data, data_end, data_meta, then ingress_ifindex and rx_queue_index.
const INGRESS_IFINDEX: i16 = 12;
const RX_QUEUE_INDEX: i16 = 16;
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// ```text
///  0  r2 = ctx->ingress_ifindex
///  1  *(u32 *)(r10 - 4) = r2
///  2  r2 = r10
///  3  r2 += -4
///  4  r1 = slots map                (two instructions)
///  6  r0 = map_lookup_elem(r1, r2)
///  7  if r0 == 0 goto 14            (not an interface of ours: pass it on)
///  8  r2 = *(u32 *)r0               (the port's slot)
///  9  r1 = sockets map              (two instructions)
/// 11  r3 = XDP_PASS                 (what to do when the slot has no socket)
/// 12  r0 = redirect_map(r1, r2, r3)
/// 13  exit
/// 14  r0 = XDP_PASS
/// 15  exit
/// ```
fn program(slots: RawFd, sockets: RawFd) -> [Insn; 16] {
    [
        insn(LDX_W, 2, 1, INGRESS_IFINDEX, 0),
        insn(STX_W, 10, 2, -4, 0),
        insn(MOV64_REG, 2, 10, 0, 0),
        insn(ADD64_IMM, 2, 0, 0, -4),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, slots),
        insn(0, 0, 0, 0, 0),
        insn(CALL, 0, 0, 0, HELPER_MAP_LOOKUP_ELEM),
        insn(JEQ_IMM, 0, 0, 6, 0),
        insn(LDX_W, 2, 0, 0, 0),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, sockets),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_IMM, 3, 0, 0, XDP_PASS),
        insn(CALL, 0, 0, 0, HELPER_REDIRECT_MAP),
        insn(EXIT, 0, 0, 0, 0),
        insn(MOV64_IMM, 0, 0, 0, XDP_PASS),
        insn(EXIT, 0, 0, 0, 0),
    ]
}

/// The program that steers a pod's veth through the switch (`steered_port` says how):
/// frames on the interface's first queue (what the pod at the other end sent) go to the
/// socket in `slot`; frames on another queue (what the switch sent in through the peer's
/// second queue) go on to the pod.
///
/// ```text
/// 0  r2 = ctx->rx_queue_index
/// 1  if r2 != 0 goto 8
/// 2  r1 = sockets map               (two instructions)
/// 4  r2 = slot
/// 5  r3 = XDP_PASS                  (what to do when the slot has no socket)
/// 6  r0 = redirect_map(r1, r2, r3)
/// 7  exit
/// 8  r0 = XDP_PASS
/// 9  exit
/// ```
fn steering_program(sockets: RawFd, slot: u32) -> [Insn; 10] {
    [
        insn(LDX_W, 2, 1, RX_QUEUE_INDEX, 0),
        insn(JNE_IMM, 2, 0, 6, 0),
        insn(LD_IMM64, 1, PSEUDO_MAP_FD, 0, sockets),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_IMM, 2, 0, 0, slot as i32),
        insn(MOV64_IMM, 3, 0, 0, XDP_PASS),
        insn(CALL, 0, 0, 0, HELPER_REDIRECT_MAP),
        insn(EXIT, 0, 0, 0, 0),
        insn(MOV64_IMM, 0, 0, 0, XDP_PASS),
        insn(EXIT, 0, 0, 0, 0),
    ]
}

/// Loads an XDP program; returns its fd.
fn load_program(name: &str, code: &[Insn]) -> io::Result<OwnedFd> {
    let name = CString::new(name).expect("no NUL in a program's name");
    let license = CString::new("Dual MIT/GPL").expect("no NUL in a literal");
    let mut opts = libbpf_sys::bpf_prog_load_opts {
        sz: std::mem::size_of::<libbpf_sys::bpf_prog_load_opts>() as _,
        // A frame larger than one UMEM frame (jumbo MTU) comes as several buffers.
        prog_flags: BPF_F_XDP_HAS_FRAGS,
        ..Default::default()
    };
    // SAFETY: `code` is a slice of `struct bpf_insn`s (same size and layout, see `Insn`)
    // that outlives the call; the strings and opts too; a non-negative result is a new
    // fd we own.
    unsafe {
        let fd = check(libbpf_sys::bpf_prog_load(
            libbpf_sys::BPF_PROG_TYPE_XDP,
            name.as_ptr(),
            license.as_ptr(),
            code.as_ptr().cast(),
            code.len() as _,
            &mut opts,
        ))?;
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// The loaded program and its two maps; dropping it closes them (the kernel keeps what
/// is still attached to an interface alive).
pub(crate) struct RedirectProgram {
    program: OwnedFd,
    slots: OwnedFd,
    sockets: OwnedFd,
}

/// libbpf returns a negative errno.
fn check(rc: i32) -> io::Result<i32> {
    if rc < 0 {
        Err(io::Error::from_raw_os_error(-rc))
    } else {
        Ok(rc)
    }
}

impl RedirectProgram {
    /// Loads the program for up to `max_ports` ports.
    pub(crate) fn load(max_ports: u32) -> io::Result<RedirectProgram> {
        let name = |n: &str| CString::new(n).expect("no NUL in a literal name");
        let (slots_name, sockets_name) = (name("xwire_slots"), name("xwire_xsks"));
        // Interfaces come and go, so the slots map has room for a few per port.
        let interfaces = max_ports.saturating_mul(4).max(64);
        // SAFETY: the names are NUL-terminated strings that outlive the calls; a null
        // opts pointer asks for the defaults; a non-negative result is a new fd we own.
        let slots = unsafe {
            let fd = check(libbpf_sys::bpf_map_create(
                libbpf_sys::BPF_MAP_TYPE_HASH,
                slots_name.as_ptr(),
                4,
                4,
                interfaces,
                std::ptr::null(),
            ))?;
            OwnedFd::from_raw_fd(fd)
        };
        // SAFETY: as above.
        let sockets = unsafe {
            let fd = check(libbpf_sys::bpf_map_create(
                libbpf_sys::BPF_MAP_TYPE_XSKMAP,
                sockets_name.as_ptr(),
                4,
                4,
                max_ports.max(1),
                std::ptr::null(),
            ))?;
            OwnedFd::from_raw_fd(fd)
        };
        let code = program(slots.as_raw_fd(), sockets.as_raw_fd());
        let program = load_program("xwire_redirect", &code)?;
        Ok(RedirectProgram {
            program,
            slots,
            sockets,
        })
    }

    /// Attaches the program to interface `ifindex` in `mode`, in place of any XDP
    /// program there. The caller has bound an AF_XDP socket to the interface first, so
    /// no live socket was served by what is replaced: it is a previous run's.
    pub(crate) fn attach(&self, ifindex: u32, mode: XdpMode) -> io::Result<()> {
        // SAFETY: plain integers and a null opts pointer (the defaults).
        check(unsafe {
            libbpf_sys::bpf_xdp_attach(
                ifindex as i32,
                self.program.as_raw_fd(),
                mode_flags(mode),
                std::ptr::null(),
            )
        })
        .map(drop)
    }

    /// Sends frames arriving on `ifindex` to socket `xsk` in `slot`.
    pub(crate) fn register(&self, ifindex: u32, slot: u32, xsk: RawFd) -> io::Result<()> {
        let fd = xsk as u32;
        // SAFETY: the keys and values are u32s that live across the calls, of the maps'
        // key and value sizes.
        unsafe {
            check(libbpf_sys::bpf_map_update_elem(
                self.sockets.as_raw_fd(),
                (&slot as *const u32).cast(),
                (&fd as *const u32).cast(),
                0,
            ))?;
            check(libbpf_sys::bpf_map_update_elem(
                self.slots.as_raw_fd(),
                (&ifindex as *const u32).cast(),
                (&slot as *const u32).cast(),
                0,
            ))?;
        }
        Ok(())
    }

    /// Puts socket `xsk` in `slot`, for a program that names the slot itself (`steer`).
    pub(crate) fn register_socket(&self, slot: u32, xsk: RawFd) -> io::Result<()> {
        let fd = xsk as u32;
        // SAFETY: as in `register`.
        check(unsafe {
            libbpf_sys::bpf_map_update_elem(
                self.sockets.as_raw_fd(),
                (&slot as *const u32).cast(),
                (&fd as *const u32).cast(),
                0,
            )
        })
        .map(drop)
    }

    /// Empties `slot` (the socket in it is closing).
    pub(crate) fn unregister_socket(&self, slot: u32) {
        // SAFETY: as in `register`; a missing entry is an error we ignore.
        unsafe {
            libbpf_sys::bpf_map_delete_elem(self.sockets.as_raw_fd(), (&slot as *const u32).cast());
        }
    }

    /// Attaches to interface `ifindex` of the calling thread's network namespace, in
    /// native mode, a program that steers the frames on its first queue to the socket in
    /// `slot` (see `steering_program`). The attachment is a BPF link that lasts as long as
    /// the returned fd: when the worker closes it, or when the daemon dies, the interface
    /// is a plain veth again.
    pub(crate) fn steer(&self, ifindex: u32, slot: u32) -> io::Result<OwnedFd> {
        let code = steering_program(self.sockets.as_raw_fd(), slot);
        let program = load_program("xwire_steer", &code)?;
        // SAFETY: a zeroed `bpf_link_create_opts` is its default (plain integers and a
        // null pointer); `sz` says which version of it this is.
        let mut opts: libbpf_sys::bpf_link_create_opts = unsafe { std::mem::zeroed() };
        opts.sz = std::mem::size_of::<libbpf_sys::bpf_link_create_opts>() as _;
        opts.flags = XDP_FLAGS_DRV_MODE;
        // SAFETY: plain integers and opts that outlive the call; a non-negative result is
        // a new fd we own (the link keeps the program loaded after `program` closes).
        unsafe {
            let fd = check(libbpf_sys::bpf_link_create(
                program.as_raw_fd(),
                ifindex as i32,
                libbpf_sys::BPF_XDP,
                &opts,
            ))?;
            Ok(OwnedFd::from_raw_fd(fd))
        }
    }

    /// Undoes `register` and `attach` (an interface already gone is no error).
    pub(crate) fn release(&self, ifindex: u32, slot: u32, mode: XdpMode) {
        self.forget(ifindex, slot);
        detach(ifindex, mode);
    }

    /// Undoes `register`: no frame goes to `slot`'s socket from here on, while the
    /// program stays on the interface until `detach`.
    pub(crate) fn forget(&self, ifindex: u32, slot: u32) {
        // SAFETY: as in `register`; a missing entry is an error we ignore.
        unsafe {
            libbpf_sys::bpf_map_delete_elem(
                self.slots.as_raw_fd(),
                (&ifindex as *const u32).cast(),
            );
            libbpf_sys::bpf_map_delete_elem(self.sockets.as_raw_fd(), (&slot as *const u32).cast());
        }
    }
}

/// Takes the program attached in `mode` off interface `ifindex` of the calling thread's
/// network namespace (an interface already gone is no error). It waits in the kernel:
/// the interface's lock, and a veth's receive path stopping.
pub(crate) fn detach(ifindex: u32, mode: XdpMode) {
    // SAFETY: plain integers and a null options pointer, which libbpf takes as defaults.
    unsafe {
        libbpf_sys::bpf_xdp_detach(ifindex as i32, mode_flags(mode), std::ptr::null());
    }
}

fn mode_flags(mode: XdpMode) -> u32 {
    match mode {
        XdpMode::Native => XDP_FLAGS_DRV_MODE,
        XdpMode::Generic => XDP_FLAGS_SKB_MODE,
    }
}
