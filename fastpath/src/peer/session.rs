//! One QUIC connection to a peer node and what rides on it: the control stream (Hello
//! first, then control messages), the data streams, and the DATAGRAM batch being filled.
//! No I/O here: the transport feeds it events and drains what it wants sent.

use std::collections::HashMap;
use std::time::Instant;

use quinn_proto::{Connection, Dir, StreamId};
use xwire_proto::control::{ControlBody, ControlMessage, Hello};
use xwire_proto::data::{
    next_stream_frame, parse_stream_preamble, stream_preamble, Datagram, DatagramBatch, FrameRepr,
    StreamKind, STREAM_PREAMBLE_LEN,
};
use xwire_proto::framing::split_record;
use xwire_proto::DecodeError;

use super::{Carrier, PeerCounters};

/// Bytes a stream may hold back (flow control) before frames for it are dropped.
const MAX_STREAM_BACKLOG: usize = 8 << 20;
/// Stream bytes held for one write into the connection: a write per frame costs more
/// than the frame.
const STREAM_WRITE_BATCH: usize = 64 << 10;

/// An outgoing stream: bytes the connection has not taken yet.
#[derive(Default)]
struct Outgoing {
    id: Option<StreamId>,
    backlog: Vec<u8>,
    /// Whether the preamble has been queued: every direction of a stream starts with one.
    started: bool,
}

impl Outgoing {
    fn start(&mut self, kind: StreamKind) {
        if !self.started {
            self.backlog.extend_from_slice(&stream_preamble(kind));
            self.started = true;
        }
    }
}

/// An incoming stream: its kind once the preamble is in, and bytes not yet decoded.
#[derive(Default)]
struct Incoming {
    kind: Option<StreamKind>,
    buf: Vec<u8>,
}

pub(crate) struct Session {
    pub(crate) conn: Connection,
    /// The peer, once known (from the dial, or from its Hello).
    pub(crate) peer: Option<usize>,
    pub(crate) hello_done: bool,
    /// Dialed only to tell a peer that dials this node that it should dial now.
    pub(crate) knock: bool,
    control_out: Outgoing,
    data_out: Outgoing,
    incoming: HashMap<StreamId, Incoming>,
    batch: DatagramBatch,
    /// When the oldest frame not yet handed to the connection was queued.
    held_since: Option<Instant>,
}

/// What reading a session's streams and datagrams produced, besides frames.
pub(crate) enum Inbound {
    Control(ControlMessage),
    /// Bytes that do not decode: the connection cannot be trusted to stay in step.
    Broken(DecodeError),
}

impl Session {
    pub(crate) fn new(conn: Connection, peer: Option<usize>) -> Session {
        Session {
            conn,
            peer,
            hello_done: false,
            knock: false,
            control_out: Outgoing::default(),
            data_out: Outgoing::default(),
            incoming: HashMap::new(),
            batch: DatagramBatch::new(1200),
            held_since: None,
        }
    }

    /// Queues a control message on the control stream (opened by the first message).
    pub(crate) fn send_control(&mut self, message: &ControlMessage) {
        self.control_out.start(StreamKind::Control);
        message.encode(&mut self.control_out.backlog);
        Self::push_stream(&mut self.conn, &mut self.control_out, Dir::Bi);
    }

    /// Sends the Hello that opens the control stream.
    pub(crate) fn send_hello(&mut self, hello: Hello) {
        self.send_control(&ControlMessage {
            request_id: 0,
            body: ControlBody::Hello(hello),
        });
    }

    /// Queues one frame on the given carrier: into the DATAGRAM batch (a full batch goes
    /// out first; a frame too large for any datagram goes on the data stream), or on the
    /// data stream. What is queued leaves on `flush`. Returns false when the frame had to
    /// be dropped.
    pub(crate) fn send_frame(
        &mut self,
        carrier: Carrier,
        link_uid: u64,
        frame: &[u8],
        counters: &mut PeerCounters,
        now: impl FnOnce() -> Instant,
    ) -> bool {
        if self.held_since.is_none() {
            self.held_since = Some(now());
        }
        if carrier == Carrier::Datagram {
            if let Some(max) = self.conn.datagrams().max_size() {
                if max != self.batch.max_len() {
                    self.flush_datagrams(counters);
                    self.batch.set_max_len(max);
                }
                if self.batch.ever_fits(frame.len()) {
                    if !self.batch.fits(frame.len()) {
                        self.flush_datagrams(counters);
                    }
                    return self.batch.push(link_uid, frame).is_ok();
                }
            }
        }
        if self.data_out.backlog.len() > MAX_STREAM_BACKLOG {
            counters.dropped_blocked += 1;
            return false;
        }
        self.data_out.start(StreamKind::Data);
        let repr = FrameRepr { link_uid, frame };
        let at = self.data_out.backlog.len();
        self.data_out.backlog.resize(at + repr.buffer_len(), 0);
        if repr.emit(&mut self.data_out.backlog[at..]).is_err() {
            self.data_out.backlog.truncate(at);
            counters.dropped_blocked += 1;
            return false;
        }
        counters.stream_frames_sent += 1;
        if self.data_out.backlog.len() >= STREAM_WRITE_BATCH {
            Self::push_stream(&mut self.conn, &mut self.data_out, Dir::Uni);
        }
        true
    }

    /// Since when frames have been held back (none: nothing is held).
    pub(crate) fn held_since(&self) -> Option<Instant> {
        self.held_since
    }

    /// Hands everything queued to the connection: the DATAGRAM batch and stream bytes.
    pub(crate) fn flush(&mut self, counters: &mut PeerCounters) {
        self.flush_datagrams(counters);
        self.flush_streams();
        self.held_since = None;
    }

    /// Sends the DATAGRAM batch, if any.
    fn flush_datagrams(&mut self, counters: &mut PeerCounters) {
        let frames = self.batch.frame_count() as u64;
        if let Some(datagram) = self.batch.take() {
            match self.conn.datagrams().send(datagram, false) {
                Ok(()) => counters.datagrams_sent += 1,
                Err(_) => counters.dropped_blocked += frames,
            }
        }
    }

    /// Moves backlogged stream bytes into the connection as far as flow control allows.
    pub(crate) fn flush_streams(&mut self) {
        Self::push_stream(&mut self.conn, &mut self.control_out, Dir::Bi);
        Self::push_stream(&mut self.conn, &mut self.data_out, Dir::Uni);
    }

    fn push_stream(conn: &mut Connection, out: &mut Outgoing, dir: Dir) {
        if out.backlog.is_empty() {
            return;
        }
        let id = match out.id {
            Some(id) => id,
            None => match conn.streams().open(dir) {
                Some(id) => *out.id.insert(id),
                None => return,
            },
        };
        let mut sent = 0;
        while sent < out.backlog.len() {
            match conn.send_stream(id).write(&out.backlog[sent..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => sent += n,
            }
        }
        out.backlog.drain(..sent);
    }

    /// Takes the datagrams that arrived: each frame goes to `on_frame`.
    pub(crate) fn read_datagrams(
        &mut self,
        counters: &mut PeerCounters,
        on_frame: &mut dyn FnMut(u64, &[u8]) -> bool,
    ) {
        while let Some(datagram) = self.conn.datagrams().recv() {
            counters.datagrams_received += 1;
            match Datagram::new_checked(datagram) {
                Ok(view) => {
                    for frame in view.frames() {
                        deliver(counters, on_frame, frame.link_uid, frame.frame);
                    }
                }
                Err(_) => counters.malformed += 1,
            }
        }
    }

    /// Reads what arrived on `id`: frames go to `on_frame`, control messages and decode
    /// failures are returned.
    pub(crate) fn read_stream(
        &mut self,
        id: StreamId,
        counters: &mut PeerCounters,
        on_frame: &mut dyn FnMut(u64, &[u8]) -> bool,
        inbound: &mut Vec<Inbound>,
    ) {
        let state = self.incoming.entry(id).or_default();
        let mut recv = self.conn.recv_stream(id);
        if let Ok(mut chunks) = recv.read(true) {
            while let Ok(Some(chunk)) = chunks.next(usize::MAX) {
                state.buf.extend_from_slice(&chunk.bytes);
            }
            let _ = chunks.finalize();
        }
        if state.kind.is_none() {
            if state.buf.len() < STREAM_PREAMBLE_LEN {
                return;
            }
            match parse_stream_preamble(&state.buf) {
                Ok(kind) => state.kind = Some(kind),
                Err(e) => {
                    counters.malformed += 1;
                    inbound.push(Inbound::Broken(e));
                    state.buf.clear();
                    return;
                }
            }
            state.buf.drain(..STREAM_PREAMBLE_LEN);
        }
        let mut used = 0;
        loop {
            let rest = &state.buf[used..];
            let step = match state.kind {
                Some(StreamKind::Data) => next_stream_frame(rest).map(|next| {
                    next.map(|(frame, len)| {
                        deliver(counters, on_frame, frame.link_uid, frame.frame);
                        len
                    })
                }),
                _ => split_record(rest, xwire_proto::control::MAX_CONTROL_BODY).and_then(|next| {
                    match next {
                        None => Ok(None),
                        Some((body, len)) => {
                            inbound.push(Inbound::Control(ControlMessage::decode(body)?));
                            Ok(Some(len))
                        }
                    }
                }),
            };
            match step {
                Ok(Some(len)) => used += len,
                Ok(None) => break,
                Err(e) => {
                    counters.malformed += 1;
                    inbound.push(Inbound::Broken(e));
                    used = state.buf.len();
                    break;
                }
            }
        }
        state.buf.drain(..used);
    }

    /// Streams the peer opened since the last call.
    pub(crate) fn accept_streams(&mut self) -> Vec<StreamId> {
        let mut opened = Vec::new();
        for dir in [Dir::Bi, Dir::Uni] {
            while let Some(id) = self.conn.streams().accept(dir) {
                opened.push(id);
            }
        }
        opened
    }

    pub(crate) fn forget_stream(&mut self, id: StreamId) {
        self.incoming.remove(&id);
    }

    /// The one bidirectional stream: the peer's control stream, when it opened it.
    pub(crate) fn adopt_control_stream(&mut self, id: StreamId) {
        if id.dir() == Dir::Bi && self.control_out.id.is_none() {
            self.control_out.id = Some(id);
        }
    }
}

fn deliver(
    counters: &mut PeerCounters,
    on_frame: &mut dyn FnMut(u64, &[u8]) -> bool,
    uid: u64,
    frame: &[u8],
) {
    if on_frame(uid, frame) {
        counters.frames_received += 1;
    } else {
        counters.dropped_unknown_link += 1;
    }
}
