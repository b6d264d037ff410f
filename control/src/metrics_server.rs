//! The metrics endpoint: `GET /metrics` answers the Prometheus text format (OpenMetrics)
//! of the node's counters, read from the node at each scrape, and its histograms.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use crossbeam_channel::Sender;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use xwire_proto::local;

use crate::api_server::{ask, Job};
use crate::metrics::NodeMetrics;

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
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                tracing::warn!("accept on the metrics socket: {e}");
                continue;
            }
        };
        let (jobs, metrics) = (jobs.clone(), Arc::clone(&metrics));
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                answer(request, jobs.clone(), Arc::clone(&metrics))
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = connection.await {
                tracing::debug!("a metrics connection: {e}");
            }
        });
    }
}

async fn answer(
    request: Request<Incoming>,
    jobs: Sender<Job>,
    metrics: Arc<NodeMetrics>,
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
    match ask(&jobs, local::Request::Counters).await {
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
