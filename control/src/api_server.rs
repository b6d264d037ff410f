//! The local API: a Unix stream socket (mode 0600) speaking `wire_proto::local`. Each
//! connection may carry several requests, answered in order. Requests go to the node's
//! thread one at a time, but for DELs queued together, which have their pods' interfaces
//! deleted at once. A malformed request
//! is answered with a CNI error and the connection stays usable, unless its framing is
//! lost.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use nix::sys::stat::Mode;
use socket2::{Domain, SockAddr, Socket, Type};
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use xwire_proto::local::{self, codes, CniError, Response};
use xwire_proto::DecodeError;

use crate::accept_failures::AcceptFailures;
use crate::metrics::NodeMetrics;
use crate::node::{Answer, CaptureStream, Node};
use crate::step_times;

/// A request on its way to the node, and where its answer goes.
pub struct Job {
    pub request: local::Request,
    /// The answer, and the capture a `Capture` request started (streamed by the
    /// connection after the answer).
    pub reply: oneshot::Sender<(Response, Option<CaptureStream>)>,
    /// When it was queued, for the time it waited (a step of the call's).
    pub queued: Instant,
    /// The caller's view of the namespace the request is about, passed as a descriptor
    /// with the request (`xwire_api_client::call_about_netns`).
    pub netns: Option<OwnedFd>,
}

/// How often the node looks for the peer desk's news when no request comes (it looks
/// after every request too). Not sooner: a node that took the desk's news as it came
/// ran a pass to join announced wires for each piece, while CNI calls waited behind them
/// (`xwire-perf cni-scale`: ADDs waited 1.4 to 2.2 ms in the queue, against 0.6).
const PEER_POLL: Duration = Duration::from_millis(20);
/// How long the node waits, after the last request or peer message, before the
/// reconciliation pass that follows events: a burst of CNI calls gets one pass at its
/// end, not one per call.
const SETTLE: Duration = Duration::from_millis(200);
/// While requests or peer messages keep coming, the timed pass waits for the pass that
/// follows them, up to this many intervals. A whole-node pass opens every pod's
/// namespace: in a 5,000-pod lab coming up (1,000 pods a node), each took about 1.4 s
/// of the node thread, and a node ran 11 to 13 of them while its pods were added, each
/// ADD waiting behind them. What the timer is for, a change that no event announces,
/// waits no longer than this.
const TIMED_PASS_DEFERS: u32 = 6;

/// The node's thread: answers jobs in turn, pumps peer events between them, and
/// reconciles once things settle after events and on the configured timer. Returns when
/// every sender is gone.
pub fn run_node(mut node: Node, jobs: Receiver<Job>) {
    let interval = match node.config().reconcile_interval_secs {
        0 => None,
        secs => Some(Duration::from_secs(secs)),
    };
    let mut last_event: Option<Instant> = None;
    let mut last_pass = Instant::now();
    // A job taken from the queue while gathering DELs, to answer next.
    let mut held: Option<Job> = None;
    loop {
        // Peer news left from the last turn is gone on with at once, after any job.
        let wait = if node.has_peer_backlog() {
            Duration::ZERO
        } else {
            PEER_POLL
        };
        let next = match held.take() {
            Some(job) => Ok(job),
            None => jobs.recv_timeout(wait),
        };
        match next {
            Ok(job) => {
                let mut batch = vec![job];
                if let local::Request::Del(_) = batch[0].request {
                    held = gather(&jobs, &mut batch, DELS_AT_ONCE, |r| {
                        matches!(r, local::Request::Del(_))
                    })
                }
                // Its caller is gone (the daemon is stopping, or the caller gave up): a
                // stopping daemon does not work through a queue nobody waits for.
                batch.retain(|job| !job.reply.is_closed());
                if answer_all(&mut node, batch) {
                    last_event = Some(Instant::now());
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        node.begin_batch();
        if node.pump_membership() | node.pump_store_events() {
            last_event = Some(Instant::now());
        }
        if node.pump_peer_events() {
            last_event = Some(Instant::now());
        }
        node.pump_pools();
        node.captures_ended();
        let settled = last_event.is_some_and(|t| t.elapsed() >= SETTLE);
        let due = interval.is_some_and(|i| {
            let since = last_pass.elapsed();
            since >= i && (last_event.is_none() || since >= i * TIMED_PASS_DEFERS)
        });
        if settled || due {
            if let Err(e) = node.reconcile() {
                tracing::error!("reconciling: {}: {}", e.msg, e.details);
            }
            last_event = None;
            last_pass = Instant::now();
        }
        // No call waits on these writes: a failure is logged (and the work done again).
        node.commit(Vec::new());
    }
}

/// The most DELs taken together.
const DELS_AT_ONCE: usize = 64;

/// Adds to `batch` the jobs of its kind (`same`) queued right behind it, up to `most`,
/// and returns the first other job it took from the queue, to be answered after them:
/// the order of the calls is kept.
fn gather(
    jobs: &Receiver<Job>,
    batch: &mut Vec<Job>,
    most: usize,
    same: impl Fn(&local::Request) -> bool,
) -> Option<Job> {
    while batch.len() < most {
        let job = jobs.try_recv().ok()?;
        if !same(&job.request) {
            return Some(job);
        }
        batch.push(job);
    }
    None
}

/// Answers the jobs in order; DELs that came together first have their pods' interfaces
/// deleted at once (`Call::begin_dels`). Whether any of them may have changed something.
fn answer_all(node: &mut Node, batch: Vec<Job>) -> bool {
    // What the node did between calls is not these calls'.
    step_times::take();
    let started = Instant::now();
    node.call(None)
        .begin_dels(batch.iter().filter_map(|job| match &job.request {
            local::Request::Del(call) => Some(call),
            _ => None,
        }));
    // Every DEL of the batch waited for that, as part of its own handling.
    let shared = step_times::take();
    let shared_took = started.elapsed();
    let mut changed = false;
    for job in batch {
        let reads_only = matches!(
            job.request,
            local::Request::State
                | local::Request::Counters
                | local::Request::TopologyGet(_)
                | local::Request::Status(_)
                | local::Request::Reconcile
        );
        let command = cni_command(&job.request);
        let shares = matches!(job.request, local::Request::Del(_)) && !shared.is_empty();
        let (mut steps, shared_took) = if shares {
            (shared.clone(), shared_took)
        } else {
            (Vec::new(), Duration::ZERO)
        };
        let waited = job.queued.elapsed().saturating_sub(shared_took);
        let handling = Instant::now();
        let Answer { response, capture } = node.call(job.netns).answer_batched(job.request);
        if let Some(command) = command {
            steps.extend(step_times::take());
            let handled = handling.elapsed() + shared_took;
            node.metrics()
                .observe_cni_steps(command, waited, &steps, handled);
        }
        // A capture whose connection has gone ends here, as it is dropped.
        let _ = job.reply.send((response, capture));
        changed |= !reads_only;
    }
    changed
}

/// Binds the socket at `path`: its directory is made if missing, a stale socket (nobody
/// listening) is replaced, a live one is an error, and anything else at the path (a file
/// someone put there) is refused and left alone. The socket file has mode 0600 from the
/// moment it exists.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("another daemon is listening on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a socket: remove it yourself if it is not needed",
                    path.display()
                ),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let socket = Socket::new(Domain::UNIX, Type::STREAM.cloexec(), None)?;
    // Linux gives the socket file the mode of the socket's own inode (less the umask) when
    // it binds: setting that first means the file never exists with a wider mode.
    nix::sys::stat::fchmod(&socket, Mode::from_bits_truncate(0o600))?;
    socket.bind(&SockAddr::unix(path)?)?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    UnixListener::from_std(std::os::unix::net::UnixListener::from(
        std::os::fd::OwnedFd::from(socket),
    ))
}

/// Accepts connections until `stop` resolves, then removes the socket file. CNI calls'
/// times go to `metrics`.
pub async fn serve(
    listener: UnixListener,
    path: PathBuf,
    jobs: Sender<Job>,
    metrics: Arc<NodeMetrics>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut failures = AcceptFailures::new("local API socket");
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, jobs.clone(), Arc::clone(&metrics)));
                }
                Err(e) => tokio::time::sleep(failures.failed(&e)).await,
            },
            () = &mut stop => break,
        }
    }
    let _ = std::fs::remove_file(&path);
}

async fn connection(mut stream: UnixStream, jobs: Sender<Job>, metrics: Arc<NodeMetrics>) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    // Descriptors that came with the bytes not yet decoded: the next request's.
    let mut passed: Vec<OwnedFd> = Vec::new();
    loop {
        loop {
            let (id, response, used) = match local::next_record(&buf) {
                Ok(None) => break,
                Err(e) => {
                    // The length prefix is beyond reason: framing is lost, so answer once
                    // and close.
                    let _ = write(&mut stream, 0, &decode_error(&e)).await;
                    return;
                }
                Ok(Some((body, used))) => match local::decode_request(body) {
                    Ok((id, request)) => {
                        let (kind, command) = (request.name(), cni_command(&request));
                        let started = Instant::now();
                        // One descriptor per request at most; more are closed.
                        let netns = passed.drain(..).next();
                        let answer = ask_about(&jobs, request, netns).await;
                        let took = started.elapsed();
                        if let Some(command) = command {
                            metrics.observe_cni_call(command, took.as_secs_f64());
                        }
                        let failed = matches!(answer.0, Response::Error(_));
                        tracing::debug!(
                            id,
                            kind,
                            failed,
                            took_us = took.as_micros() as u64,
                            "local API request"
                        );
                        (id, answer, used)
                    }
                    Err(e) => (request_id(&e, body), (decode_error(&e), None), used),
                },
            };
            buf.drain(..used);
            let (response, capture) = response;
            if write(&mut stream, id, &response).await.is_err() {
                return;
            }
            if let Some(capture) = capture {
                // The rest of the connection is the capture's pcapng stream, written by
                // a blocking thread (the writer blocks on the tap's queue).
                let Ok(socket) = stream.into_std() else {
                    return;
                };
                tokio::task::spawn_blocking(move || crate::capture_stream::serve(socket, capture));
                return;
            }
        }
        match read_with_descriptors(&stream, &mut chunk, &mut passed).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads what the caller sent, and the descriptors that came with it (`SCM_RIGHTS`),
/// at most 4 at once; the kernel closes any beyond.
async fn read_with_descriptors(
    stream: &UnixStream,
    chunk: &mut [u8],
    passed: &mut Vec<OwnedFd>,
) -> std::io::Result<usize> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::{AsRawFd, FromRawFd, RawFd};
    loop {
        stream.readable().await?;
        let read = stream.try_io(tokio::io::Interest::READABLE, || {
            let mut iov = [std::io::IoSliceMut::new(chunk)];
            let mut space = nix::cmsg_space!([RawFd; 4]);
            let message = recvmsg::<()>(
                stream.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(std::io::Error::from)?;
            for control in message.cmsgs().map_err(std::io::Error::from)? {
                if let ControlMessageOwned::ScmRights(fds) = control {
                    // SAFETY: the kernel installed these descriptors in this process for
                    // this message; nothing else owns them.
                    passed.extend(
                        fds.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
            Ok(message.bytes)
        });
        match read {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

/// The CNI command a request is, for its latency histogram.
fn cni_command(request: &local::Request) -> Option<&'static str> {
    use local::Request::*;
    matches!(request, Add(_) | Del(_) | Check(_) | Status(_) | Gc(_)).then(|| request.name())
}

/// Hands a request to the node and awaits its answer (also for the metrics endpoint). The queue to the node is bounded
/// and this never blocks the runtime on it: with the queue full, the caller is told at
/// once to try again later (the code a CNI runtime retries on), and the runtime goes on
/// serving, stop signals included.
pub async fn ask(jobs: &Sender<Job>, request: local::Request) -> (Response, Option<CaptureStream>) {
    ask_about(jobs, request, None).await
}

/// As `ask`, with the caller's view of the namespace the request is about.
async fn ask_about(
    jobs: &Sender<Job>,
    request: local::Request,
    netns: Option<OwnedFd>,
) -> (Response, Option<CaptureStream>) {
    let (reply, answer) = oneshot::channel();
    let try_again = |msg: String| {
        let error = Response::Error(CniError {
            code: codes::TRY_AGAIN_LATER,
            msg,
            details: String::new(),
        });
        (error, None)
    };
    match jobs.try_send(Job {
        request,
        reply,
        queued: Instant::now(),
        netns,
    }) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            return try_again(format!(
                "the daemon is busy ({} requests wait): try again",
                jobs.len()
            ))
        }
        Err(TrySendError::Disconnected(_)) => return try_again("the daemon is stopping".into()),
    }
    answer
        .await
        .unwrap_or_else(|_| try_again("the daemon is stopping".into()))
}

async fn write(stream: &mut UnixStream, id: u64, response: &Response) -> std::io::Result<()> {
    let mut out = Vec::new();
    local::encode(id, response, &mut out);
    stream.write_all(&out).await
}

/// The id to answer with: the request's where it could be read.
fn request_id(e: &DecodeError, body: &[u8]) -> u64 {
    if let DecodeError::UnknownLocalType { id, .. } = e {
        return *id;
    }
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("id").and_then(serde_json::Value::as_u64))
        .unwrap_or(0)
}

fn decode_error(e: &DecodeError) -> Response {
    let code = match e {
        DecodeError::UnsupportedVersion(_) => codes::INCOMPATIBLE_VERSION,
        _ => codes::DECODE_FAILURE,
    };
    Response::Error(CniError {
        code,
        msg: "the daemon could not read the request".into(),
        details: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node that never answers: the queue fills, and the server must still answer
    /// every caller (the ones past the queue at once, "busy") and still stop on its
    /// signal.
    #[test]
    fn a_full_queue_answers_busy_and_the_server_still_stops() {
        let dir = std::env::temp_dir().join(format!("xwire-api-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("api.sock");
        let (jobs, stuck_node) = crossbeam_channel::bounded::<Job>(4);
        let (stop, stopped) = oneshot::channel::<()>();
        let (done_tx, done) = std::sync::mpsc::channel();
        let server_path = path.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let listener = bind(&server_path).unwrap();
                serve(listener, server_path, jobs, Arc::default(), async {
                    let _ = stopped.await;
                })
                .await;
            });
            let _ = done_tx.send(());
        });
        while !path.exists() {
            std::thread::sleep(Duration::from_millis(5));
        }
        let callers: Vec<_> = (0..12)
            .map(|_| {
                let path = path.clone();
                std::thread::spawn(move || {
                    xwire_api_client::call(&path, &local::Request::State, Duration::from_secs(3))
                })
            })
            .collect();
        let answers: Vec<_> = callers.into_iter().map(|c| c.join().unwrap()).collect();
        let busy = answers
            .iter()
            .filter(|a| matches!(a, Ok(Response::Error(e)) if e.code == codes::TRY_AGAIN_LATER))
            .count();
        // Four wait in the queue for a node that never answers; the rest are told to
        // come back.
        assert_eq!(busy, 8, "{answers:?}");
        assert_eq!(stuck_node.len(), 4);
        stop.send(()).unwrap();
        done.recv_timeout(Duration::from_secs(5))
            .expect("the server did not stop with its queue full");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
