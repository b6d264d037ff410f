//! The caller's side of a capture (`xwirectl capture`, `xwirectl lab capture`): asks a
//! node's daemon to tap a wire end's link and copies the pcapng stream it sends to a
//! file or to standard output, as it comes (so that `| wireshark -k -i -` and
//! `| tshark -r -` show frames while they cross). Ctrl-C (or `seconds` running out)
//! shuts the connection's sending side: the daemon then ends the file with each
//! direction's statistics and closes, and the file is whole.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xwire_proto::local::{CaptureCall, Request, Response};

const TIMEOUT: Duration = Duration::from_secs(60);
/// How long the daemon has to end the file once asked.
const FINISH: Duration = Duration::from_secs(5);

/// Where the file goes.
pub enum Output {
    Stdout,
    File(PathBuf),
}

impl Output {
    pub fn from_arg(arg: &Path) -> Output {
        if arg == Path::new("-") {
            Output::Stdout
        } else {
            Output::File(arg.to_owned())
        }
    }
}

/// Captures until Ctrl-C, or for `seconds`; returns the bytes written.
pub fn capture(
    socket: &Path,
    call: CaptureCall,
    output: &Output,
    seconds: Option<f64>,
) -> Result<u64> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let (response, mut stream, first) =
        xwire_api_client::open(socket, &Request::Capture(call), TIMEOUT)
            .with_context(|| format!("ask the daemon at {}", socket.display()))?;
    let interfaces = match response {
        Response::Capturing { interfaces } => interfaces,
        Response::Error(e) => bail!("{} {}", e.msg, e.details),
        other => bail!("unexpected answer: {other:?}"),
    };
    eprintln!("capturing {} (Ctrl-C ends it)", interfaces.join(" and "));
    let mut out: Box<dyn Write> = match output {
        Output::Stdout => Box::new(std::io::stdout().lock()),
        Output::File(path) => Box::new(create_output(path)?),
    };
    out.write_all(&first)?;
    let mut written = first.len() as u64;
    stream.set_read_timeout(Some(Duration::from_millis(100)))?;
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs_f64(s));
    let mut finishing: Option<Instant> = None;
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let due = deadline.is_some_and(|d| Instant::now() >= d);
        if finishing.is_none() && (stop.load(Ordering::Relaxed) || due) {
            let _ = stream.shutdown(std::net::Shutdown::Write);
            finishing = Some(Instant::now());
        }
        if finishing.is_some_and(|t| t.elapsed() > FINISH) {
            bail!("the daemon did not end the capture file in {FINISH:?}: it may be cut short");
        }
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                if let Err(e) = out.write_all(&chunk[..n]).and_then(|()| out.flush()) {
                    if e.kind() == std::io::ErrorKind::BrokenPipe {
                        // The reader of standard output went away: the capture ends.
                        return Ok(written);
                    }
                    return Err(e.into());
                }
                written += n as u64;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e.into()),
        }
    }
    out.flush()?;
    Ok(written)
}

/// Creates (or truncates) the capture file, but never through a symbolic link: the
/// command runs as root, and a link that someone else left at the path would have it
/// overwrite whatever file the link names.
fn create_output(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(nix::libc::ELOOP) {
                anyhow::anyhow!(
                    "{} is a symbolic link: not followed for a capture file",
                    path.display()
                )
            } else {
                anyhow::Error::new(e).context(format!("create {}", path.display()))
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_file_is_never_written_through_a_link() {
        let dir = std::env::temp_dir().join(format!("xwire-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("precious");
        std::fs::write(&target, "keep me").unwrap();
        let link = dir.join("capture.pcapng");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let refused = create_output(&link);
        let kept = std::fs::read_to_string(&target).unwrap();
        let plain = create_output(&dir.join("plain.pcapng")).map(|_| ());
        let _ = std::fs::remove_dir_all(&dir);
        let e = refused.expect_err("a link is refused");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(kept, "keep me");
        plain.unwrap();
    }
}
