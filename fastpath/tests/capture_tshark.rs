//! A capture file as Wireshark's own reader sees it: tshark (Debian's `tshark`, installed
//! by `cargo xtask test`) reads the pcapng the capture writer makes of an ICMP echo
//! exchange, and names each frame's interface, type and time as written.

use std::process::Command;

use xwire_fastpath::capture::{CaptureWriter, Captured, Direction};

fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = bytes
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An Ethernet frame holding an ICMP echo request (type 8) or reply (type 0).
fn echo(icmp_type: u8, seq: u16, from: [u8; 4], to: [u8; 4]) -> Vec<u8> {
    let mut icmp = vec![icmp_type, 0, 0, 0, 0x12, 0x34];
    icmp.extend_from_slice(&seq.to_be_bytes());
    icmp.extend_from_slice(b"xwire capture test payload");
    let sum = checksum(&icmp);
    icmp[2..4].copy_from_slice(&sum.to_be_bytes());
    let total = (20 + icmp.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 0, 0x40, 0, 64, 1, 0, 0]);
    ip.extend_from_slice(&from);
    ip.extend_from_slice(&to);
    let sum = checksum(&ip);
    ip[10..12].copy_from_slice(&sum.to_be_bytes());
    let mut frame = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1, 0x08, 0x00];
    frame.extend(ip);
    frame.extend(icmp);
    frame
}

#[test]
fn tshark_reads_both_directions_of_an_echo_exchange_in_order() {
    let dir = std::env::temp_dir().join(format!("xwire-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("echo.pcapng");
    let file = std::fs::File::create(&path).unwrap();
    let mut writer = CaptureWriter::new(file, ["r1:eth1", "r2:eth1"], 65535).unwrap();
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let start = 1_700_000_000_000_000_000u64;
    let mut written = Vec::new();
    for seq in 0..3u16 {
        for (direction, icmp_type, from, to) in
            [(Direction::AToB, 8, a, b), (Direction::BToA, 0, b, a)]
        {
            let data = echo(icmp_type, seq, from, to);
            let timestamp_ns = start + written.len() as u64 * 1_000_123;
            writer
                .write(&Captured {
                    direction,
                    timestamp_ns,
                    original_len: data.len() as u32,
                    data,
                })
                .unwrap();
            written.push((direction, icmp_type, timestamp_ns));
        }
    }
    writer
        .finish(start + 10_000_000_000, [3, 3], [0, 0])
        .unwrap();

    let out = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=,"])
        .args([
            "-e",
            "frame.interface_name",
            "-e",
            "icmp.type",
            "-e",
            "icmp.seq",
            "-e",
            "frame.time_epoch",
        ])
        .output()
        .expect("tshark runs (cargo xtask test installs Debian's tshark)");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), written.len(), "{text}");
    for (line, (i, (direction, icmp_type, timestamp_ns))) in
        lines.iter().zip(written.iter().enumerate())
    {
        let fields: Vec<&str> = line.split(',').collect();
        let interface = if *direction == Direction::AToB {
            "r1:eth1"
        } else {
            "r2:eth1"
        };
        assert_eq!(fields[0], interface, "{line}");
        assert_eq!(fields[1], icmp_type.to_string(), "{line}");
        assert_eq!(fields[2], (i / 2).to_string(), "{line}");
        // Nanoseconds survive: tshark prints the epoch time with nine decimals.
        let want = format!(
            "{}.{:09}",
            timestamp_ns / 1_000_000_000,
            timestamp_ns % 1_000_000_000
        );
        assert_eq!(fields[3], want, "{line}");
    }
}
