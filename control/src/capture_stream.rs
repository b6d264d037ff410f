//! The daemon's side of a capture's connection: the pcapng file written as frames
//! arrive, flushed whenever the tap's queue is empty (so that `wireshark -k -i -` shows
//! frames as they cross), until the caller shuts its side down or goes away. The file
//! then ends with each direction's statistics (frames seen, frames left out).

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::RecvTimeoutError;
use xwire_fastpath::capture::CaptureWriter;

use crate::node::CaptureStream;

/// How often the writer looks whether the caller has shut its side down.
const CHECK: Duration = Duration::from_millis(100);

pub fn serve(socket: UnixStream, capture: CaptureStream) {
    if let Err(e) = stream(socket, &capture) {
        tracing::debug!("capture stream ended: {e}");
    }
}

fn stream(socket: UnixStream, capture: &CaptureStream) -> std::io::Result<()> {
    socket.set_nonblocking(false)?;
    let mut watch = socket.try_clone()?;
    watch.set_nonblocking(true)?;
    let names = [
        capture.interfaces[0].as_str(),
        capture.interfaces[1].as_str(),
    ];
    let snaplen = match capture.snaplen {
        0 => u32::from(u16::MAX),
        n => n,
    };
    let failed = |e: xwire_fastpath::capture::CaptureError| std::io::Error::other(e.to_string());
    let mut writer =
        CaptureWriter::new(std::io::BufWriter::new(socket), names, snaplen).map_err(failed)?;
    writer.flush().map_err(failed)?;
    let frames = &capture.reader.frames;
    loop {
        match frames.recv_timeout(CHECK) {
            Ok(frame) => {
                writer.write(&frame).map_err(failed)?;
                if frames.is_empty() {
                    writer.flush().map_err(failed)?;
                }
                continue;
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // The caller sends nothing after its request: a read of 0 bytes is its shutdown.
        let mut byte = [0u8; 1];
        match watch.read(&mut byte) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    while let Ok(frame) = frames.try_recv() {
        writer.write(&frame).map_err(failed)?;
    }
    let counters = &capture.reader.counters;
    let load = |c: &[std::sync::atomic::AtomicU64; 2]| {
        [c[0].load(Ordering::Relaxed), c[1].load(Ordering::Relaxed)]
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut out = writer
        .finish(now, load(&counters.offered), load(&counters.dropped))
        .map_err(failed)?;
    std::io::Write::flush(&mut out)
}
