//! The node's answers to local API requests: CNI calls (`cni_calls.rs`), topology calls
//! (`topology_calls.rs`), captures (`capture.rs`), and its state and counters. A call
//! carries what came with its request (the caller's view of the namespace it is about)
//! and what goes back with the answer (a capture it started); the node keeps neither.

use std::os::fd::OwnedFd;

use xwire_proto::local::{Request, Response};

use super::capture::CaptureStream;
use super::{Node, NodeError};
use crate::netns::NetnsFd;

/// One request on the node: the node, and what the request brought or starts.
pub(crate) struct Call<'a> {
    pub(super) node: &'a mut Node,
    /// The caller's view of the namespace the request is about, if it sent one (or why
    /// what it sent is not a network namespace).
    pub(super) caller_netns: Option<Result<NetnsFd, String>>,
    /// The capture the request started, for the API connection to stream.
    pub(super) capture: Option<CaptureStream>,
}

/// A request's answer, and the capture it started (streamed by the connection after the
/// answer).
pub struct Answer {
    pub response: Response,
    pub capture: Option<CaptureStream>,
}

impl Node {
    /// A request on the node, with the caller's view of the namespace it is about (see
    /// `cni_calls::open_pod_netns`), if it sent one.
    pub(crate) fn call(&mut self, caller_netns: Option<OwnedFd>) -> Call<'_> {
        Call {
            node: self,
            caller_netns: caller_netns.map(|fd| {
                NetnsFd::from_handle(fd, "the caller's CNI_NETNS").map_err(|e| e.to_string())
            }),
            capture: None,
        }
    }
}

impl Call<'_> {
    /// Answers `request` with the store's writes made together at its end (see
    /// `Node::commit`).
    pub(crate) fn answer_batched(mut self, request: Request) -> Answer {
        self.node.begin_batch();
        let changes = changes(&request);
        let response = self.respond(request);
        let response = self.node.commit(vec![(changes, response)]).pop();
        Answer {
            response: response.expect("one response for one call"),
            capture: self.capture,
        }
    }

    fn respond(&mut self, request: Request) -> Response {
        self.handle(request)
            .unwrap_or_else(|e| Response::Error(e.to_cni()))
    }

    fn handle(&mut self, request: Request) -> Result<Response, NodeError> {
        match request {
            Request::Add(call) => self.add(call),
            Request::Del(call) => self.del(call).map(|()| Response::Ok),
            Request::Check(call) => self.check(call).map(|()| Response::Ok),
            Request::Status(_) => Ok(Response::Ok),
            Request::Gc(call) => self.gc(call).map(|()| Response::Ok),
            Request::TopologyApply(apply) => self.apply_topologies(apply),
            Request::TopologyGet(query) => self.node.records.get_topologies(&query),
            Request::TopologyDelete(query) => self.delete_topologies(&query),
            Request::State => self.node.observer().state().map(Response::State),
            Request::Counters => self.node.observer().counters().map(Response::Counters),
            Request::Reconcile => self.node.reconcile().map(|done| Response::Reconciled {
                changes: done.changes,
                failures: done.failures,
            }),
            Request::Capture(call) => self.start_capture(call),
        }
    }
}

/// Whether answering `request` may change the node's records.
fn changes(request: &Request) -> bool {
    !matches!(
        request,
        Request::State | Request::Counters | Request::TopologyGet(_) | Request::Status(_)
    )
}
