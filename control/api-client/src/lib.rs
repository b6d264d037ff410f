//! The caller's side of xwired's local API (`wire_proto::local`): one request, one
//! answer, on a fresh connection, blocking with a timeout. The CNI plugin, `xwirectl`,
//! the lab and the tests use it; it depends on nothing but the wire format, so that the
//! plugin stays small.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use xwire_proto::local::{self, Request, Response};

pub fn call(socket: &Path, request: &Request, timeout: Duration) -> std::io::Result<Response> {
    open(socket, request, timeout).map(|(response, _, _)| response)
}

/// Sends `request` and reads its answer, then hands back the connection and whatever
/// arrived after the answer: for a request whose answer is followed by a stream (a
/// capture's pcapng).
pub fn open(
    socket: &Path,
    request: &Request,
    timeout: Duration,
) -> std::io::Result<(Response, UnixStream, Vec<u8>)> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut out = Vec::new();
    local::encode(1, request, &mut out);
    stream.write_all(&out)?;
    let invalid = |e: xwire_proto::DecodeError| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some((body, used)) = local::next_record(&buf).map_err(invalid)? {
            let response = local::decode_response(body)
                .map(|(_, r)| r)
                .map_err(invalid)?;
            let rest = buf[used..].to_vec();
            return Ok((response, stream, rest));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
