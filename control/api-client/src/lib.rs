//! The caller's side of xwired's local API (`wire_proto::local`): one request, one
//! answer, on a fresh connection, blocking with a timeout. The CNI plugin, `xwirectl`,
//! the lab and the tests use it; it depends on nothing but the wire format, so that the
//! plugin stays small.

#![forbid(unsafe_code)]

use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use xwire_proto::local::{self, Request, Response};

pub fn call(socket: &Path, request: &Request, timeout: Duration) -> std::io::Result<Response> {
    open(socket, request, timeout).map(|(response, _, _)| response)
}

/// As `call`, for a request about the network namespace at `netns` (CNI_NETNS): the
/// namespace as this process sees it goes with the request, as a descriptor, so that
/// the daemon can tell whether the path names the same namespace in its own view (a
/// `/proc/<pid>` path, or a mount only the caller has, may not). The path is opened with
/// `O_PATH`, which opens no device or FIFO whatever the path holds; one that cannot be
/// opened here goes without, and the daemon judges the path alone.
pub fn call_about_netns(
    socket: &Path,
    request: &Request,
    netns: &Path,
    timeout: Duration,
) -> std::io::Result<Response> {
    let handle = File::options()
        .read(true)
        .custom_flags(nix::libc::O_PATH | nix::libc::O_CLOEXEC)
        .open(netns)
        .ok();
    exchange(socket, request, handle.as_ref(), timeout).map(|(response, _, _)| response)
}

/// Sends `request` and reads its answer, then hands back the connection and whatever
/// arrived after the answer: for a request whose answer is followed by a stream (a
/// capture's pcapng).
pub fn open(
    socket: &Path,
    request: &Request,
    timeout: Duration,
) -> std::io::Result<(Response, UnixStream, Vec<u8>)> {
    exchange(socket, request, None, timeout)
}

/// Sends `request`, with `passed` as a descriptor alongside its bytes, and reads the
/// answer (see `open`).
fn exchange(
    socket: &Path,
    request: &Request,
    passed: Option<&File>,
    timeout: Duration,
) -> std::io::Result<(Response, UnixStream, Vec<u8>)> {
    let mut out = Vec::new();
    local::encode(1, request, &mut out);
    // The daemon would read the length, answer that it is too long and close, and the
    // caller, still writing, would see only a broken pipe.
    if local::next_record(&out).is_err() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "the {} request is {} bytes, over the {} bytes the daemon takes in one call",
                request.name(),
                out.len(),
                local::MAX_LOCAL_BODY
            ),
        ));
    }
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut sent = 0;
    if let Some(file) = passed {
        // The descriptor rides on the request's first bytes.
        let fds = [file.as_fd().as_raw_fd()];
        let rights = [ControlMessage::ScmRights(&fds)];
        sent = sendmsg::<()>(
            stream.as_raw_fd(),
            &[IoSlice::new(&out)],
            &rights,
            MsgFlags::empty(),
            None,
        )
        .map_err(std::io::Error::from)?;
    }
    stream.write_all(&out[sent..])?;
    let invalid = |e: xwire_proto::DecodeError| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some((body, used)) = local::next_response_record(&buf).map_err(invalid)? {
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

#[cfg(test)]
mod tests {
    use super::*;
    use xwire_proto::local::TopologyApply;

    #[test]
    fn a_request_over_the_limit_is_refused_before_it_is_sent() {
        let padding = "x".repeat(local::MAX_LOCAL_BODY);
        let request = Request::TopologyApply(TopologyApply {
            objects: vec![padding.into()],
        });
        // No daemon at this path: the size is checked first.
        let e = call(
            Path::new("/nonexistent/xwire.sock"),
            &request,
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains("topology_apply request is"), "{e}");
    }
}
