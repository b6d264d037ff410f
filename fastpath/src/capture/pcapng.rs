//! A capture as pcapng (with the pcap-file crate): one interface per direction, named
//! after the end the frames leave, nanosecond timestamps, and at the end a statistics
//! block per interface with the frames the switch saw and those the capture dropped.

use std::borrow::Cow;
use std::io::Write;
use std::time::Duration;

use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::blocks::interface_statistics::{
    InterfaceStatisticsBlock, InterfaceStatisticsOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;

use super::tap::Captured;

/// `if_tsresol` 9: timestamps count nanoseconds.
const NANOSECONDS: u8 = 9;

pub struct CaptureWriter<W: Write> {
    writer: PcapNgWriter<W>,
}

#[derive(Debug, thiserror::Error)]
#[error("writing the capture: {0}")]
pub struct CaptureError(String);

fn failed(e: impl std::fmt::Display) -> CaptureError {
    CaptureError(e.to_string())
}

impl<W: Write> CaptureWriter<W> {
    /// Starts a capture file with one interface per name (index 0: A to B, 1: B to A).
    pub fn new(
        out: W,
        interfaces: [&str; 2],
        snaplen: u32,
    ) -> Result<CaptureWriter<W>, CaptureError> {
        let mut writer = PcapNgWriter::new(out).map_err(failed)?;
        for name in interfaces {
            let interface = InterfaceDescriptionBlock {
                linktype: DataLink::ETHERNET,
                snaplen,
                options: vec![
                    InterfaceDescriptionOption::IfName(Cow::Owned(name.to_owned())),
                    InterfaceDescriptionOption::IfTsResol(NANOSECONDS),
                ],
            };
            writer.write_pcapng_block(interface).map_err(failed)?;
        }
        Ok(CaptureWriter { writer })
    }

    pub fn write(&mut self, frame: &Captured) -> Result<(), CaptureError> {
        let packet = EnhancedPacketBlock {
            interface_id: frame.direction.index(),
            timestamp: Duration::from_nanos(frame.timestamp_ns),
            original_len: frame.original_len,
            data: Cow::Borrowed(&frame.data),
            options: vec![],
        };
        self.writer.write_pcapng_block(packet).map_err(failed)?;
        Ok(())
    }

    /// Pushes what is written to the reader (a pipe into Wireshark sees it at once).
    pub fn flush(&mut self) -> Result<(), CaptureError> {
        self.writer.get_mut().flush().map_err(failed)
    }

    /// Ends the capture: a statistics block per interface, `seen` frames offered to the
    /// capture and `dropped` of them left out, at `timestamp_ns`.
    pub fn finish(
        mut self,
        timestamp_ns: u64,
        seen: [u64; 2],
        dropped: [u64; 2],
    ) -> Result<W, CaptureError> {
        for interface in 0..2 {
            let statistics = InterfaceStatisticsBlock {
                interface_id: interface as u32,
                timestamp: timestamp_ns,
                options: vec![
                    InterfaceStatisticsOption::IsbIfRecv(seen[interface]),
                    InterfaceStatisticsOption::IsbIfDrop(dropped[interface]),
                ],
            };
            self.writer.write_pcapng_block(statistics).map_err(failed)?;
        }
        self.flush()?;
        Ok(self.writer.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tap::Direction;
    use super::*;
    use pcap_file::pcapng::{Block, PcapNgReader};

    #[test]
    fn a_capture_reads_back_with_its_interfaces_times_and_statistics() {
        let mut writer = CaptureWriter::new(Vec::new(), ["r1:eth1", "r2:eth1"], 64).unwrap();
        let frames = [
            Captured {
                direction: Direction::AToB,
                timestamp_ns: 1_700_000_000_123_456_789,
                original_len: 98,
                data: vec![1; 64],
            },
            Captured {
                direction: Direction::BToA,
                timestamp_ns: 1_700_000_000_123_999_000,
                original_len: 60,
                data: vec![2; 60],
            },
        ];
        for frame in &frames {
            writer.write(frame).unwrap();
        }
        let bytes = writer
            .finish(1_700_000_001_000_000_000, [1, 1], [0, 3])
            .unwrap();

        let mut reader = PcapNgReader::new(&bytes[..]).unwrap();
        let mut names = Vec::new();
        let mut packets = Vec::new();
        let mut drops = Vec::new();
        while let Some(block) = reader.next_block() {
            match block.unwrap() {
                Block::InterfaceDescription(idb) => {
                    names.extend(idb.options.iter().filter_map(|o| match o {
                        InterfaceDescriptionOption::IfName(n) => Some(n.to_string()),
                        _ => None,
                    }))
                }
                Block::EnhancedPacket(p) => {
                    packets.push((p.interface_id, p.timestamp, p.original_len, p.data.len()))
                }
                Block::InterfaceStatistics(s) => {
                    drops.extend(s.options.iter().filter_map(|o| match o {
                        InterfaceStatisticsOption::IsbIfDrop(d) => Some(*d),
                        _ => None,
                    }))
                }
                _ => {}
            }
        }
        assert_eq!(names, ["r1:eth1", "r2:eth1"]);
        assert_eq!(
            packets,
            [
                (0, Duration::from_nanos(1_700_000_000_123_456_789), 98, 64),
                (1, Duration::from_nanos(1_700_000_000_123_999_000), 60, 60)
            ]
        );
        assert_eq!(drops, [0, 3]);
    }
}
