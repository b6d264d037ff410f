//! Traffic that tests send between namespaces: ping, a TCP transfer, numbered raw frames.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use super::{Error, Netns};

/// Whether `count` pings from `from` to `to` all get answers.
pub fn ping(from: &Netns, to: &str, count: u32) -> Result<bool, Error> {
    let out = from.exec(Command::new("ping").args([
        "-c",
        &count.to_string(),
        "-i",
        "0.2",
        "-W",
        "2",
        to,
    ]))?;
    Ok(out.status.success())
}

/// Pings `to` from `from` `count` times, 0.1 s apart, and returns the round-trip time of
/// each reply, in milliseconds (fewer than `count` when replies were lost).
pub fn ping_rtts(from: &Netns, to: &str, count: u32) -> Result<Vec<f64>, Error> {
    let out = from.exec(Command::new("ping").args([
        "-c",
        &count.to_string(),
        "-i",
        "0.1",
        "-W",
        "2",
        to,
    ]))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_once("time=")?.1.split(' ').next()?.parse().ok())
        .collect())
}

/// Sends `bytes` bytes of a known pattern over TCP from `client` to a listener at `to` in
/// `server`; returns what the server read, which should equal `pattern(bytes)`.
pub fn tcp_transfer(
    client: &Netns,
    server: &Netns,
    to: SocketAddr,
    bytes: usize,
) -> std::io::Result<Vec<u8>> {
    let listener = server
        .run(|| TcpListener::bind(to))
        .map_err(std::io::Error::other)??;
    let mut sender = client
        .run(|| TcpStream::connect_timeout(&to, Duration::from_secs(5)))
        .map_err(std::io::Error::other)??;
    sender.set_write_timeout(Some(Duration::from_secs(30)))?;
    let (mut receiver, _) = listener.accept()?;
    receiver.set_read_timeout(Some(Duration::from_secs(30)))?;
    let data = pattern(bytes);
    std::thread::scope(|s| {
        let reader = s.spawn(move || {
            let mut got = Vec::with_capacity(bytes);
            receiver.read_to_end(&mut got).map(|_| got)
        });
        sender.write_all(&data)?;
        drop(sender);
        reader.join().expect("reader thread")
    })
}

/// The bytes `tcp_transfer` sends.
pub fn pattern(bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| (i % 251) as u8).collect()
}

/// A broadcast frame of `len` bytes with an experimental EtherType (the pods' stacks
/// ignore it), carrying its sender and sequence number.
pub fn test_frame(len: usize, sender: u8, seq: u16) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, sender]);
    f.extend_from_slice(&TEST_ETHERTYPE);
    f.extend_from_slice(&seq.to_be_bytes());
    f.extend((f.len()..len).map(|i| (i as u8).wrapping_mul(7) ^ sender));
    f
}

/// The EtherType of `test_frame`s.
pub const TEST_ETHERTYPE: [u8; 2] = [0x88, 0xb5];
