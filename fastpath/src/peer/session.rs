//! One QUIC connection to a peer node and what rides on it: the control stream (Hello
//! first, then control messages), the data streams, and the DATAGRAM batch being filled.
//! No I/O here: the transport feeds it events and drains what it wants sent.

use std::collections::HashMap;
use std::time::Instant;

use bytes::{Buf, Bytes, BytesMut};
use quinn_proto::{Connection, Dir, ReadError, StreamId, VarInt};
use xwire_proto::control::{ControlBody, ControlMessage, Hello};
use xwire_proto::data::{
    next_stream_frame, parse_stream_preamble, stream_preamble, Datagram, DatagramBatch, FrameRepr,
    StreamKind, RECORD_HEADER_LEN, STREAM_PREAMBLE_LEN,
};
use xwire_proto::framing::split_record;
use xwire_proto::{DecodeError, WireId};

use super::inbox::Inbox;
use super::{Carrier, PeerId, TransportCounters};

/// Bytes a stream may hold back (flow control) before frames for it are dropped.
const MAX_STREAM_BACKLOG: usize = 8 << 20;
/// Stream bytes held for one write into the connection: a write per frame costs more
/// than the frame.
const STREAM_WRITE_BATCH: usize = 64 << 10;
/// Control bytes a session holds for a peer that does not take them (flow control):
/// past this the peer is not reading its control stream, and the connection is closed
/// (the Sync that follows the next connection makes good what was not sent).
const MAX_CONTROL_BACKLOG: usize = 16 << 20;
/// The QUIC application error code on a stream this node will not read (STOP_SENDING).
const STREAM_REFUSED: u32 = 1;

/// An outgoing stream: bytes the connection has not taken yet.
#[derive(Default)]
struct Outgoing {
    id: Option<StreamId>,
    /// What was queued; the first `taken` bytes are in the connection already.
    backlog: Vec<u8>,
    taken: usize,
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

    /// Bytes queued and not yet taken by the connection.
    fn waiting(&self) -> &[u8] {
        &self.backlog[self.taken..]
    }

    /// Marks `n` more bytes as taken by the connection. The taken front is cut off once
    /// it is at least half the buffer, so that each cut moves no more bytes than were
    /// taken since the last one: cutting it after every write moved the whole backlog
    /// (up to `MAX_STREAM_BACKLOG`, 8 MiB) each time the connection took a little.
    fn take(&mut self, n: usize) {
        self.taken += n;
        if self.taken == self.backlog.len() {
            self.backlog.clear();
            self.taken = 0;
        } else if self.taken >= self.backlog.len() / 2 {
            self.backlog.drain(..self.taken);
            self.taken = 0;
        }
    }
}

/// An incoming stream: its kind once the preamble is in, and bytes not yet decoded.
#[derive(Default)]
struct Incoming {
    kind: Option<StreamKind>,
    /// Decoded records are split off the front and handed on without a copy.
    buf: BytesMut,
}

pub(crate) struct Session {
    pub(crate) conn: Connection,
    /// The peer, once known (from the dial, or from its Hello).
    pub(crate) peer: Option<usize>,
    pub(crate) hello_done: bool,
    /// The protocol version the two Hellos agreed on.
    pub(crate) version: u16,
    /// Dialed only to tell a peer that dials this node that it should dial now.
    pub(crate) knock: bool,
    control_out: Outgoing,
    data_out: Outgoing,
    /// What has arrived on the peer's streams and is not decoded yet; a stream's entry
    /// goes when the stream ends.
    incoming: HashMap<StreamId, Incoming>,
    /// Streams not to be read before Hello: the peer's data streams, and the control
    /// stream past its first record. Read once Hello is in (quinn's flow control bounds
    /// what waits in them).
    deferred: Vec<StreamId>,
    batch: DatagramBatch,
    /// Scratch for `read_stream`: the data records one read decoded.
    records: Vec<(std::ops::Range<usize>, WireId)>,
    /// When the oldest frame not yet handed to the connection was queued.
    held_since: Option<Instant>,
}

/// What reading a session's streams and datagrams produced, besides frames.
pub(crate) enum Inbound {
    /// A control message, and the bytes of the record it came in.
    Control {
        message: ControlMessage,
        bytes: usize,
    },
    /// A control record whose fields do not decode (an unknown type, say): answered
    /// with an Error carrying its request id, and skipped; the stream stays in step.
    Undecodable { request_id: u64, error: DecodeError },
    /// Bytes that do not decode: the connection cannot be trusted to stay in step.
    Broken(DecodeError),
}

impl Session {
    pub(crate) fn new(conn: Connection, peer: Option<usize>) -> Session {
        Session {
            conn,
            peer,
            hello_done: false,
            version: 0,
            knock: false,
            control_out: Outgoing::default(),
            data_out: Outgoing::default(),
            incoming: HashMap::new(),
            deferred: Vec::new(),
            batch: DatagramBatch::new(1200),
            records: Vec::new(),
            held_since: None,
        }
    }

    /// Queues a control message on the control stream (opened by the first message).
    /// False, and nothing queued, when the peer has left too much unread.
    pub(crate) fn send_control(&mut self, message: &ControlMessage) -> bool {
        if self.control_out.waiting().len() > MAX_CONTROL_BACKLOG {
            return false;
        }
        self.control_out.start(StreamKind::Control);
        message.encode(&mut self.control_out.backlog);
        Self::push_stream(&mut self.conn, &mut self.control_out, Dir::Bi);
        true
    }

    /// Sends the Hello that opens the control stream.
    pub(crate) fn send_hello(&mut self, hello: Hello) {
        // The first message on a new stream: there is no backlog to refuse it.
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
        wire: WireId,
        frame: &[u8],
        counters: &mut TransportCounters,
        now: Instant,
    ) -> bool {
        if self.held_since.is_none() {
            self.held_since = Some(now);
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
                    return self.batch.push(wire, frame).is_ok();
                }
            }
        }
        if self.data_out.waiting().len() > MAX_STREAM_BACKLOG {
            counters.dropped_blocked += 1;
            return false;
        }
        self.data_out.start(StreamKind::Data);
        if (FrameRepr { wire, frame })
            .append_to(&mut self.data_out.backlog)
            .is_err()
        {
            counters.dropped_blocked += 1;
            return false;
        }
        counters.stream_frames_sent += 1;
        if self.data_out.waiting().len() >= STREAM_WRITE_BATCH {
            Self::push_stream(&mut self.conn, &mut self.data_out, Dir::Uni);
        }
        true
    }

    /// Since when frames have been held back (none: nothing is held).
    pub(crate) fn held_since(&self) -> Option<Instant> {
        self.held_since
    }

    /// Hands everything queued to the connection: the DATAGRAM batch and stream bytes.
    pub(crate) fn flush(&mut self, counters: &mut TransportCounters) {
        self.flush_datagrams(counters);
        self.flush_streams();
        self.held_since = None;
    }

    /// Sends the DATAGRAM batch, if any.
    fn flush_datagrams(&mut self, counters: &mut TransportCounters) {
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
        if out.waiting().is_empty() {
            return;
        }
        let id = match out.id {
            Some(id) => id,
            None => match conn.streams().open(dir) {
                Some(id) => *out.id.insert(id),
                None => return,
            },
        };
        while !out.waiting().is_empty() {
            match conn.send_stream(id).write(out.waiting()) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.take(n),
            }
        }
    }

    /// Takes the datagrams that arrived into `to`.
    pub(crate) fn read_datagrams(
        &mut self,
        counters: &mut TransportCounters,
        to: &mut Delivery<'_>,
    ) {
        while let Some(datagram) = self.conn.datagrams().recv() {
            counters.datagrams_received += 1;
            match Datagram::new_checked(datagram) {
                Ok(view) => {
                    let frames = view.frame_count() as u64;
                    counters.frames_received += frames;
                    match to.peer {
                        Some(peer) if to.inbox.push_datagram(peer, view.into_inner()) => {}
                        Some(_) => counters.dropped_unread += frames,
                        // Nothing crosses before Hello.
                        None => counters.dropped_unknown_link += frames,
                    }
                }
                Err(_) => counters.malformed += 1,
            }
        }
    }

    /// Reads what arrived on `id`: frames go to `to`, control messages and decode
    /// failures are returned. Before Hello, only the control stream's first record is
    /// read; the rest waits in `deferred`. Control records are decoded while
    /// `control_room` bytes of them are left (the one under way is finished); the rest
    /// waits in `deferred`, and unread in QUIC's buffers, which then holds the peer. A
    /// stream's state goes when the stream ends.
    pub(crate) fn read_stream(
        &mut self,
        id: StreamId,
        counters: &mut TransportCounters,
        to: &mut Delivery<'_>,
        inbound: &mut Vec<Inbound>,
        mut control_room: usize,
    ) {
        let before_hello = !self.hello_done;
        if before_hello && id.dir() == Dir::Uni {
            self.defer(id);
            return;
        }
        let control = id.dir() == Dir::Bi;
        if control && control_room == 0 {
            self.defer(id);
            return;
        }
        // Enough to finish a record of the largest size beyond the room, so that one
        // record always completes; a data stream's frames are read as they come.
        let read_limit = if control {
            control_room.saturating_add(RECORD_HEADER_LEN + xwire_proto::control::MAX_CONTROL_BODY)
        } else {
            usize::MAX
        };
        let state = self.incoming.entry(id).or_default();
        let (mut ended, unread) = pull(&mut self.conn, id, state, read_limit);
        match take_preamble(state) {
            Ok(true) => {}
            Ok(false) => {
                if ended {
                    self.incoming.remove(&id);
                }
                return;
            }
            Err(e) => {
                counters.malformed += 1;
                inbound.push(Inbound::Broken(e));
                self.incoming.remove(&id);
                return;
            }
        }
        let mut used = 0;
        let mut held_back = false;
        // The data records decoded: where each frame lies in `state.buf`, and its wire.
        let records = &mut self.records;
        records.clear();
        loop {
            let rest = &state.buf[used..];
            if before_hello && used > 0 {
                // One record before Hello: the Hello. The rest is read once it is in.
                held_back = !rest.is_empty();
                break;
            }
            if control && control_room == 0 {
                held_back = !rest.is_empty() || unread;
                break;
            }
            let step = match state.kind {
                Some(StreamKind::Data) => next_data_record(rest, used, records),
                _ => next_control_record(rest, &mut control_room, inbound, counters),
            };
            match step {
                Ok(Some(len)) => used += len,
                Ok(None) => break,
                Err(e) => {
                    counters.malformed += 1;
                    inbound.push(Inbound::Broken(e));
                    used = state.buf.len();
                    ended = true;
                    break;
                }
            }
        }
        let decoded = state.buf.split_to(used).freeze();
        for (range, wire) in records.drain(..) {
            to.stream_frame(counters, wire, decoded.slice(range));
        }
        if held_back || (unread && !ended) {
            self.defer(id);
        } else if ended {
            self.incoming.remove(&id);
        }
    }

    fn defer(&mut self, id: StreamId) {
        if !self.deferred.contains(&id) {
            self.deferred.push(id);
        }
    }

    /// Whether streams wait to be read (see `read_stream`).
    pub(crate) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }

    /// The streams left unread (before Hello, or for want of room), to be read now.
    pub(crate) fn take_deferred(&mut self) -> Vec<StreamId> {
        std::mem::take(&mut self.deferred)
    }

    /// Streams the peer opened since the last call that are to be read: its data
    /// streams, and its control stream when this node has none yet. Any other
    /// bidirectional stream is refused (STOP_SENDING) and never read.
    pub(crate) fn accept_streams(&mut self) -> Vec<StreamId> {
        let mut opened = Vec::new();
        while let Some(id) = self.conn.streams().accept(Dir::Bi) {
            if self.control_out.id.is_none() {
                self.control_out.id = Some(id);
                opened.push(id);
            } else {
                let _ = self
                    .conn
                    .recv_stream(id)
                    .stop(VarInt::from_u32(STREAM_REFUSED));
            }
        }
        while let Some(id) = self.conn.streams().accept(Dir::Uni) {
            opened.push(id);
        }
        opened
    }

    /// Streams whose state this session holds: read in part, or waiting for Hello.
    pub(crate) fn streams_held(&self) -> usize {
        self.incoming.len()
            + self
                .deferred
                .iter()
                .filter(|id| !self.incoming.contains_key(id))
                .count()
    }
}

/// Where a session's received frames go: the endpoint's inbox, tagged with the peer
/// (`None` before Hello, when nothing crosses and frames are dropped).
pub(crate) struct Delivery<'a> {
    pub(crate) inbox: &'a mut Inbox,
    pub(crate) peer: Option<PeerId>,
}

impl Delivery<'_> {
    fn stream_frame(&mut self, counters: &mut TransportCounters, wire: WireId, frame: Bytes) {
        counters.frames_received += 1;
        match self.peer {
            Some(peer) if self.inbox.push_stream_frame(peer, wire, frame) => {}
            Some(_) => counters.dropped_unread += 1,
            None => counters.dropped_unknown_link += 1,
        }
    }
}

/// Reads what stream `id` has into `state.buf`, while it holds fewer than `limit` bytes.
/// Returns whether the stream ended (or was reset), and whether bytes were left unread
/// for want of room.
fn pull(conn: &mut Connection, id: StreamId, state: &mut Incoming, limit: usize) -> (bool, bool) {
    let mut stream = conn.recv_stream(id);
    let mut chunks = match stream.read(true) {
        Ok(chunks) => chunks,
        // No such stream any more (it ended, and was read to its end).
        Err(_) => return (true, false),
    };
    let mut ended = false;
    let mut unread = false;
    loop {
        let Some(room) = limit.checked_sub(state.buf.len()).filter(|&r| r > 0) else {
            unread = true;
            break;
        };
        match chunks.next(room) {
            Ok(Some(chunk)) => state.buf.extend_from_slice(&chunk.bytes),
            Ok(None) | Err(ReadError::Reset(_)) => {
                ended = true;
                break;
            }
            Err(ReadError::Blocked) => break,
        }
    }
    let _ = chunks.finalize();
    (ended, unread)
}

/// Takes a stream's preamble off the front of `state.buf` once it is all in, and notes
/// the stream's kind. `Ok(false)`: not all in yet.
fn take_preamble(state: &mut Incoming) -> Result<bool, DecodeError> {
    if state.kind.is_some() {
        return Ok(true);
    }
    if state.buf.len() < STREAM_PREAMBLE_LEN {
        return Ok(false);
    }
    state.kind = Some(parse_stream_preamble(&state.buf)?);
    state.buf.advance(STREAM_PREAMBLE_LEN);
    Ok(true)
}

/// The next data record of `rest` (which starts at `used` in its buffer): where its frame
/// lies in the buffer and its wire go to `records`. Returns the record's length, or
/// `None` when it is not all in yet.
fn next_data_record(
    rest: &[u8],
    used: usize,
    records: &mut Vec<(std::ops::Range<usize>, WireId)>,
) -> Result<Option<usize>, DecodeError> {
    Ok(next_stream_frame(rest)?.map(|(frame, len)| {
        let start = used + RECORD_HEADER_LEN;
        records.push((start..start + frame.frame.len(), frame.wire));
        len
    }))
}

/// The next control record of `rest`, decoded into `inbound` (one whose fields do not
/// decode is counted, and answered as `Undecodable`), its length taken from
/// `control_room`. Returns the record's length, or `None` when it is not all in yet.
fn next_control_record(
    rest: &[u8],
    control_room: &mut usize,
    inbound: &mut Vec<Inbound>,
    counters: &mut TransportCounters,
) -> Result<Option<usize>, DecodeError> {
    let Some((body, len)) = split_record(rest, xwire_proto::control::MAX_CONTROL_BODY)? else {
        return Ok(None);
    };
    *control_room = control_room.saturating_sub(len);
    inbound.push(match ControlMessage::decode(body) {
        Ok(message) => Inbound::Control {
            message,
            bytes: len,
        },
        Err(error) => {
            counters.malformed += 1;
            Inbound::Undecodable {
                request_id: ControlMessage::request_id_of(body),
                error,
            }
        }
    });
    Ok(Some(len))
}

#[cfg(test)]
mod tests {
    use super::Outgoing;

    #[test]
    fn an_outgoing_stream_gives_its_bytes_in_order_however_they_are_taken() {
        let mut out = Outgoing::default();
        let mut expected = Vec::new();
        let mut written = Vec::new();
        let mut next = 0u8;
        // Queue in pieces and take in pieces of other sizes, so that every path of `take`
        // (all taken, a cut, neither) runs many times.
        for round in 0..200usize {
            for _ in 0..(round % 7 + 1) {
                out.backlog.push(next);
                expected.push(next);
                next = next.wrapping_add(1);
            }
            let n = out.waiting().len().min(round % 5 + 1);
            written.extend_from_slice(&out.waiting()[..n]);
            out.take(n);
            assert!(out.taken <= out.backlog.len());
            assert!(out.taken < out.backlog.len() / 2 + 1 || out.backlog.is_empty());
        }
        let n = out.waiting().len();
        written.extend_from_slice(out.waiting());
        out.take(n);
        assert_eq!(written, expected);
        assert!(out.backlog.is_empty() && out.taken == 0);
    }
}
