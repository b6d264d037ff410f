//! Frames received from peers and not yet taken by the switch, none of them copied:
//! DATAGRAM frames stay in the datagram quinn handed over, and stream frames are slices of
//! the stream's reassembly buffer.

use std::collections::VecDeque;

use bytes::Bytes;
use xwire_proto::data::{FrameRepr, DATAGRAM_HEADER_LEN};
use xwire_proto::WireId;

use super::PeerId;

/// Bytes of frames the inbox holds at most: the switch empties it on every pass, so
/// only an owner that never takes frames reaches this, and new frames are then dropped.
const MAX_HELD_BYTES: usize = 16 << 20;

/// One received frame, borrowed from the inbox until the next call that changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedFrame<'a> {
    pub peer: PeerId,
    pub wire: WireId,
    pub frame: &'a [u8],
    /// It came on a stream (the reliable carrier), not in a DATAGRAM.
    pub on_stream: bool,
}

#[derive(Default)]
pub(crate) struct Inbox {
    /// Checked datagrams (see `Datagram::new_checked`), and how far the first is read.
    datagrams: VecDeque<(PeerId, Bytes)>,
    datagram_offset: usize,
    stream_frames: VecDeque<(PeerId, WireId, Bytes)>,
    held: usize,
    /// What the frame handed out last came from: it is let go of on the next call.
    last: Option<Taken>,
}

#[derive(Clone, Copy)]
enum Taken {
    Datagram,
    Stream,
}

impl Inbox {
    /// Keeps a checked datagram from `peer`. False (nothing kept) when the inbox is full.
    pub(crate) fn push_datagram(&mut self, peer: PeerId, datagram: Bytes) -> bool {
        if self.held + datagram.len() > MAX_HELD_BYTES {
            return false;
        }
        self.held += datagram.len();
        if self.datagrams.is_empty() {
            self.datagram_offset = DATAGRAM_HEADER_LEN;
        }
        self.datagrams.push_back((peer, datagram));
        true
    }

    /// Keeps one stream frame from `peer`. False (nothing kept) when the inbox is full.
    pub(crate) fn push_stream_frame(&mut self, peer: PeerId, wire: WireId, frame: Bytes) -> bool {
        if self.held + frame.len() > MAX_HELD_BYTES {
            return false;
        }
        self.held += frame.len();
        self.stream_frames.push_back((peer, wire, frame));
        true
    }

    /// The next frame, if any: DATAGRAM frames first, then stream frames.
    pub(crate) fn next(&mut self) -> Option<ReceivedFrame<'_>> {
        self.release_last();
        if let Some((peer, datagram)) = self.datagrams.front() {
            // Checked when the datagram arrived: every record parses.
            if let Ok((frame, len)) = FrameRepr::parse(&datagram[self.datagram_offset..]) {
                self.datagram_offset += len;
                self.last = Some(Taken::Datagram);
                return Some(ReceivedFrame {
                    peer: *peer,
                    wire: frame.wire,
                    frame: frame.frame,
                    on_stream: false,
                });
            }
        }
        let (peer, wire, frame) = self.stream_frames.front()?;
        self.last = Some(Taken::Stream);
        Some(ReceivedFrame {
            peer: *peer,
            wire: *wire,
            frame,
            on_stream: true,
        })
    }

    /// Lets go of what the frame handed out last used up.
    fn release_last(&mut self) {
        match self.last.take() {
            Some(Taken::Datagram) => {
                let (_, datagram) = self.datagrams.front().expect("the last frame's datagram");
                if self.datagram_offset >= datagram.len() {
                    self.held -= datagram.len();
                    self.datagrams.pop_front();
                    self.datagram_offset = DATAGRAM_HEADER_LEN;
                }
            }
            Some(Taken::Stream) => {
                let (_, _, frame) = self.stream_frames.pop_front().expect("the last frame");
                self.held -= frame.len();
            }
            None => {}
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.datagrams.is_empty() && self.stream_frames.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use xwire_proto::data::DatagramBatch;

    use super::*;

    fn frame(seq: u8, len: usize) -> Vec<u8> {
        vec![seq; len]
    }

    #[test]
    fn frames_come_out_in_order_with_their_peer_and_the_inbox_empties() {
        let mut inbox = Inbox::default();
        let mut batch = DatagramBatch::new(1200);
        batch.push(WireId(1), &frame(1, 60)).unwrap();
        batch.push(WireId(2), &frame(2, 100)).unwrap();
        assert!(inbox.push_datagram(PeerId(0), batch.take().unwrap()));
        for seq in [3, 4] {
            let record = Bytes::from(frame(seq, 80));
            let peer = PeerId(u32::from(seq) % 2);
            assert!(inbox.push_stream_frame(peer, WireId(u64::from(seq)), record));
        }
        batch.push(WireId(5), &frame(5, 64)).unwrap();
        assert!(inbox.push_datagram(PeerId(1), batch.take().unwrap()));

        let mut got = Vec::new();
        while let Some(f) = inbox.next() {
            got.push((f.peer.0, f.wire.0, f.frame.len(), f.frame[0], f.on_stream));
        }
        assert_eq!(
            got,
            [
                (0, 1, 60, 1, false),
                (0, 2, 100, 2, false),
                (1, 5, 64, 5, false),
                (1, 3, 80, 3, true),
                (0, 4, 80, 4, true)
            ]
        );
        assert!(inbox.is_empty());
        assert_eq!(inbox.held, 0);
    }

    #[test]
    fn a_full_inbox_refuses_more_until_it_is_read() {
        let mut inbox = Inbox::default();
        let record = Bytes::from(frame(9, 60_000));
        let push =
            |inbox: &mut Inbox| inbox.push_stream_frame(PeerId(0), WireId(9), record.clone());
        let mut kept = 0;
        while push(&mut inbox) {
            kept += 1;
        }
        assert_eq!(kept, MAX_HELD_BYTES / record.len());
        let mut read = 0;
        while inbox.next().is_some() {
            read += 1;
        }
        assert_eq!(read, kept);
        assert!(inbox.next().is_none());
        assert!(push(&mut inbox));
    }
}
