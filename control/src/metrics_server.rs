//! The metrics endpoint: `GET /metrics` answers the Prometheus text format (OpenMetrics)
//! of the node's counters, read from the node at each scrape, and its histograms.
//!
//! Anyone who reaches the port may connect (an unprivileged local user included), so
//! what a client can hold is bounded: [`MAX_CONNECTIONS`] connections are served at once
//! (the rest wait in the kernel's accept queue, which holds none of the daemon's file
//! descriptors: the CNI socket and the store keep theirs), a request head must arrive
//! whole within [`HEAD_TIMEOUT`] (also between requests on a kept-alive connection),
//! no connection lives past [`CONNECTION_LIFETIME`], and one scrape at a time asks the
//! node for its counters, so scrapes cannot fill the node's queue ahead of CNI calls.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{Mutex, Semaphore};
use xwire_proto::local;

use crate::accept_failures::AcceptFailures;
use crate::api_server::{ask, Job};
use crate::metrics::NodeMetrics;

/// Connections served at once. A scraper needs one; a few people with curl a few more.
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client has to send a whole request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection is kept, whatever it does (a scraper that keeps its
/// connection alive opens another).
pub(crate) const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);
/// Read buffer per connection: a scrape's request head is a few hundred bytes (hyper's
/// default would let each connection hold 400 KB).
const MAX_BUFFER: usize = 16 * 1024;

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds the endpoint's socket, in the network namespace at `netns` when one is given
/// (the lab's daemons live in their nodes' namespaces but serve metrics on the host's).
pub fn bind(address: SocketAddr, netns: Option<&Path>) -> std::io::Result<std::net::TcpListener> {
    let listener = match netns {
        None => std::net::TcpListener::bind(address)?,
        Some(path) => {
            let ns = xwire_netns::NetnsFd::open(path).map_err(std::io::Error::other)?;
            ns.run("bind the metrics socket", || {
                std::net::TcpListener::bind(address)
            })
            .map_err(std::io::Error::other)??
        }
    };
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves scrapes until the runtime stops.
pub async fn serve(listener: std::net::TcpListener, jobs: Sender<Job>, metrics: Arc<NodeMetrics>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!("the metrics socket: {e}");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let one_scrape = Arc::new(Mutex::new(()));
    let mut failures = AcceptFailures::new("metrics socket");
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_BUFFER);
    loop {
        // A slot before the accept: at the limit, connections wait in the kernel's queue.
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tokio::time::sleep(failures.failed(&e)).await;
                continue;
            }
        };
        let (jobs, metrics, one_scrape) =
            (jobs.clone(), Arc::clone(&metrics), Arc::clone(&one_scrape));
        let connection = http.serve_connection(
            TokioIo::new(stream),
            hyper::service::service_fn(move |request| {
                answer(
                    request,
                    jobs.clone(),
                    Arc::clone(&metrics),
                    Arc::clone(&one_scrape),
                )
            }),
        );
        tokio::spawn(async move {
            match tokio::time::timeout(CONNECTION_LIFETIME, connection).await {
                Ok(Err(e)) => tracing::debug!("a metrics connection: {e}"),
                Ok(Ok(())) => {}
                Err(_) => tracing::debug!("a metrics connection reached its lifetime"),
            }
            drop(slot);
        });
    }
}

async fn answer(
    request: Request<Incoming>,
    jobs: Sender<Job>,
    metrics: Arc<NodeMetrics>,
    one_scrape: Arc<Mutex<()>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, content_type: &str, body: String| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = content_type.parse() {
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_TYPE, value);
        }
        Ok(response)
    };
    let text = "text/plain; charset=utf-8";
    if request.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, text, "see /metrics\n".into());
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, text, "GET only\n".into());
    }
    let counters = {
        let _turn = one_scrape.lock().await;
        ask(&jobs, local::Request::Counters).await
    };
    match counters {
        (local::Response::Counters(counters), _) => {
            reply(StatusCode::OK, CONTENT_TYPE, metrics.encode(&counters))
        }
        (local::Response::Error(e), _) => reply(
            StatusCode::SERVICE_UNAVAILABLE,
            text,
            format!("{}: {}\n", e.msg, e.details),
        ),
        (other, _) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            text,
            format!("unexpected answer {other:?}\n"),
        ),
    }
}
