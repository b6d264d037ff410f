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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
    use pcap_file::pcapng::blocks::interface_statistics::InterfaceStatisticsOption;
    use pcap_file::pcapng::{Block, PcapNgReader};
    use xwire_fastpath::capture::{Direction, Tap};

    use super::*;

    /// The frames a full queue left out are in the file's statistics block, and the
    /// file ends whole when the caller shuts its side down.
    #[test]
    fn the_file_ends_whole_with_what_each_direction_saw_and_left_out() {
        let (tap, reader) = Tap::new(&[Direction::AToB, Direction::BToA], 65535, 2);
        for n in 0..5u8 {
            tap.offer(Direction::AToB, 1_000 + u64::from(n), &[n; 60]);
        }
        tap.offer(Direction::BToA, 2_000, &[9; 60]);
        let capture = CaptureStream {
            reader,
            interfaces: ["r1:eth1".into(), "r2:eth1".into()],
            snaplen: 0,
            alive: Arc::new(()),
        };
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || serve(ours, capture));
        theirs.shutdown(std::net::Shutdown::Write).unwrap();
        let mut file = Vec::new();
        theirs.read_to_end(&mut file).unwrap();
        writer.join().unwrap();
        drop(tap);

        let mut reader = PcapNgReader::new(file.as_slice()).unwrap();
        let (mut packets, mut names, mut stats) = (0, Vec::new(), Vec::new());
        while let Some(block) = reader.next_block() {
            match block.unwrap() {
                Block::EnhancedPacket(_) => packets += 1,
                Block::InterfaceDescription(idb) => {
                    names.extend(idb.options.iter().filter_map(|o| match o {
                        InterfaceDescriptionOption::IfName(n) => Some(n.to_string()),
                        _ => None,
                    }))
                }
                Block::InterfaceStatistics(isb) => {
                    let count = |want: fn(&InterfaceStatisticsOption) -> Option<u64>| {
                        isb.options.iter().find_map(want)
                    };
                    stats.push((
                        isb.interface_id,
                        count(|o| match o {
                            InterfaceStatisticsOption::IsbIfRecv(n) => Some(*n),
                            _ => None,
                        }),
                        count(|o| match o {
                            InterfaceStatisticsOption::IsbIfDrop(n) => Some(*n),
                            _ => None,
                        }),
                    ));
                }
                _ => {}
            }
        }
        assert_eq!(names, ["r1:eth1", "r2:eth1"]);
        assert_eq!(packets, 2, "the two the queue held");
        assert_eq!(stats, [(0, Some(5), Some(3)), (1, Some(1), Some(1))]);
    }
}
