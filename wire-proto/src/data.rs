//! Ethernet frames between nodes, tagged with their link UID.
//!
//! One record format serves both carriers: a QUIC DATAGRAM holds a header and a batch of
//! records; a QUIC data stream holds a preamble and then records back to back. The layout
//! is in FORMAT.md. Hand-written rather than serde-encoded because the frame path needs a
//! fixed per-frame overhead, zero-copy views into the received buffer and encoding into a
//! caller's buffer with no allocation, which no serde format offers for a batch of slices.

use bytes::{Bytes, BytesMut};

use crate::{DecodeError, WireId};

/// Version of the data formats in this module (datagram header and stream preamble).
pub(crate) const DATA_VERSION: u8 = 1;
/// Datagram kind: a batch of frame records.
pub(crate) const DATAGRAM_KIND_FRAMES: u8 = 0;
/// Bytes of the datagram header: version, kind, frame count (u16).
pub const DATAGRAM_HEADER_LEN: usize = 4;
/// Bytes in front of every frame: link UID (u64) and frame length (u16).
pub const RECORD_HEADER_LEN: usize = 10;
/// The shortest frame carried: an Ethernet header.
pub const MIN_FRAME_LEN: usize = 14;
/// The longest frame carried (the length field is 16 bits).
pub const MAX_FRAME_LEN: usize = u16::MAX as usize;
/// The largest MTU a link may have: its largest frame (the MTU, an Ethernet header and a
/// VLAN tag) must fit in `MAX_FRAME_LEN`.
pub const MAX_LINK_MTU: u32 = MAX_FRAME_LEN as u32 - 18;

/// One frame of one link: the parsed form of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr<'a> {
    pub wire: WireId,
    pub frame: &'a [u8],
}

impl<'a> FrameRepr<'a> {
    /// Parses the record at the start of `buf`; returns it and the bytes it took.
    /// `Truncated` means `buf` ends inside the record (on a stream: read more).
    pub fn parse(buf: &'a [u8]) -> Result<(Self, usize), DecodeError> {
        let header: &[u8; RECORD_HEADER_LEN] = buf
            .get(..RECORD_HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(DecodeError::Truncated)?;
        let wire = u64::from_be_bytes([
            header[0], header[1], header[2], header[3], header[4], header[5], header[6], header[7],
        ]);
        let len = usize::from(u16::from_be_bytes([header[8], header[9]]));
        if len < MIN_FRAME_LEN {
            return Err(DecodeError::FrameTooShort(len));
        }
        let end = RECORD_HEADER_LEN + len;
        let frame = buf
            .get(RECORD_HEADER_LEN..end)
            .ok_or(DecodeError::Truncated)?;
        Ok((
            FrameRepr {
                wire: WireId(wire),
                frame,
            },
            end,
        ))
    }

    /// Bytes this record takes when emitted.
    pub fn buffer_len(&self) -> usize {
        RECORD_HEADER_LEN + self.frame.len()
    }

    /// Writes the record at the start of `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let header = self.header()?;
        let out = buf
            .get_mut(..self.buffer_len())
            .ok_or(EncodeError::NoRoom)?;
        out[..RECORD_HEADER_LEN].copy_from_slice(&header);
        out[RECORD_HEADER_LEN..].copy_from_slice(self.frame);
        Ok(out.len())
    }

    /// Appends the record to `buf`, which grows by `buffer_len` bytes.
    pub fn append_to(&self, buf: &mut impl bytes::BufMut) -> Result<(), EncodeError> {
        let header = self.header()?;
        buf.put_slice(&header);
        buf.put_slice(self.frame);
        Ok(())
    }

    /// The record's header: the wire id, then the frame's length.
    fn header(&self) -> Result<[u8; RECORD_HEADER_LEN], EncodeError> {
        let len = self.frame.len();
        if !(MIN_FRAME_LEN..=MAX_FRAME_LEN).contains(&len) {
            return Err(EncodeError::FrameLength(len));
        }
        let mut header = [0; RECORD_HEADER_LEN];
        header[..8].copy_from_slice(&self.wire.0.to_be_bytes());
        header[8..].copy_from_slice(&(len as u16).to_be_bytes());
        Ok(header)
    }

    /// The frame as a `Bytes` sharing `whole`, the buffer this record was parsed from.
    ///
    /// Panics if `self.frame` does not lie inside `whole` (a caller bug, not bad input).
    pub fn frame_bytes(&self, whole: &Bytes) -> Bytes {
        whole.slice_ref(self.frame)
    }
}

/// Why a frame could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("frame of {0} bytes is outside {MIN_FRAME_LEN}..={MAX_FRAME_LEN}")]
    FrameLength(usize),
    #[error("no room left in the buffer")]
    NoRoom,
}

/// A checked view of a received datagram: `new_checked` validates the header and every
/// record, so iterating afterwards cannot fail.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Datagram<T> {
    pub fn new_checked(buf: T) -> Result<Self, DecodeError> {
        let bytes = buf.as_ref();
        let header = bytes
            .get(..DATAGRAM_HEADER_LEN)
            .ok_or(DecodeError::Truncated)?;
        if header[0] != DATA_VERSION {
            return Err(DecodeError::UnsupportedVersion(header[0].into()));
        }
        if header[1] != DATAGRAM_KIND_FRAMES {
            return Err(DecodeError::UnknownKind(header[1]));
        }
        let count = usize::from(u16::from_be_bytes([header[2], header[3]]));
        if count == 0 {
            return Err(DecodeError::Empty);
        }
        // Only the lengths are read here; `Frames` reads the rest once the shape is known.
        let mut offset = DATAGRAM_HEADER_LEN;
        for _ in 0..count {
            let header = bytes
                .get(offset..offset + RECORD_HEADER_LEN)
                .ok_or(DecodeError::Truncated)?;
            let len = usize::from(u16::from_be_bytes([header[8], header[9]]));
            if len < MIN_FRAME_LEN {
                return Err(DecodeError::FrameTooShort(len));
            }
            offset += RECORD_HEADER_LEN + len;
        }
        match bytes.len().checked_sub(offset) {
            None => return Err(DecodeError::Truncated),
            Some(0) => {}
            Some(extra) => return Err(DecodeError::TrailingBytes(extra)),
        }
        Ok(Datagram { buf })
    }

    pub fn frame_count(&self) -> usize {
        let b = self.buf.as_ref();
        usize::from(u16::from_be_bytes([b[2], b[3]]))
    }

    pub fn frames(&self) -> Frames<'_> {
        Frames {
            rest: &self.buf.as_ref()[DATAGRAM_HEADER_LEN..],
        }
    }

    pub fn into_inner(self) -> T {
        self.buf
    }
}

/// The records of a checked datagram, in order.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for Frames<'a> {
    type Item = FrameRepr<'a>;

    fn next(&mut self) -> Option<FrameRepr<'a>> {
        // The datagram was validated in `new_checked`; should a record still not fit,
        // ending the iteration is the safe answer.
        let (header, tail) = self.rest.split_at_checked(RECORD_HEADER_LEN)?;
        let mut uid = [0u8; 8];
        uid.copy_from_slice(&header[..8]);
        let len = usize::from(u16::from_be_bytes([header[8], header[9]]));
        let (frame, rest) = tail.split_at_checked(len)?;
        self.rest = rest;
        Some(FrameRepr {
            wire: WireId(u64::from_be_bytes(uid)),
            frame,
        })
    }
}

/// Stream kinds, the second preamble byte of every QUIC stream xwire opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum StreamKind {
    /// Length-prefixed control messages (see `control`).
    Control = 0,
    /// Frame records back to back.
    Data = 1,
}

/// Bytes of the preamble that opens every stream: version, kind.
pub const STREAM_PREAMBLE_LEN: usize = 2;

/// The two bytes that open a stream of `kind`.
pub fn stream_preamble(kind: StreamKind) -> [u8; STREAM_PREAMBLE_LEN] {
    [DATA_VERSION, kind as u8]
}

/// Reads a stream's preamble. `Truncated` means fewer than two bytes arrived yet.
pub fn parse_stream_preamble(buf: &[u8]) -> Result<StreamKind, DecodeError> {
    let [version, kind] = buf
        .get(..STREAM_PREAMBLE_LEN)
        .and_then(|p| <[u8; 2]>::try_from(p).ok())
        .ok_or(DecodeError::Truncated)?;
    if version != DATA_VERSION {
        return Err(DecodeError::UnsupportedVersion(version.into()));
    }
    match kind {
        0 => Ok(StreamKind::Control),
        1 => Ok(StreamKind::Data),
        other => Err(DecodeError::UnknownKind(other)),
    }
}

/// Reads the next record from a data stream's receive buffer: `Ok(None)` until a whole
/// record has arrived, then the record and the bytes to consume.
pub fn next_stream_frame(buf: &[u8]) -> Result<Option<(FrameRepr<'_>, usize)>, DecodeError> {
    match FrameRepr::parse(buf) {
        Ok(parsed) => Ok(Some(parsed)),
        Err(DecodeError::Truncated) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    #[test]
    fn owned_batches_fill_to_the_limit_and_decode() {
        let mut batch = DatagramBatch::new(1200);
        assert_eq!(batch.take(), None, "an empty batch is never a datagram");
        let mut sent = Vec::new();
        let mut datagrams = Vec::new();
        for i in 0..40u64 {
            let f = frame(60 + (i as usize * 37) % 400, i as u8);
            if batch.push(WireId(i), &f).is_err() {
                datagrams.push(batch.take().unwrap());
                batch.push(WireId(i), &f).unwrap();
            }
            sent.push((i, f));
        }
        datagrams.extend(batch.take());
        assert!(datagrams.len() > 1);
        let mut got = Vec::new();
        for d in &datagrams {
            assert!(d.len() <= 1200, "{}", d.len());
            let view = Datagram::new_checked(d.clone()).unwrap();
            got.extend(view.frames().map(|f| (f.wire.0, f.frame.to_vec())));
        }
        assert_eq!(got, sent);
        assert!(!batch.ever_fits(1200));
        assert_eq!(
            batch.push(WireId(1), &frame(1200, 0)),
            Err(EncodeError::NoRoom)
        );
        assert_eq!(batch.frame_count(), 0);
    }

    /// One datagram of at most `max` bytes holding `frames`.
    fn datagram(frames: &[(u64, Vec<u8>)], max: usize) -> Bytes {
        let mut batch = DatagramBatch::new(max);
        for (uid, f) in frames {
            batch.push(WireId(*uid), f).unwrap();
        }
        batch.take().unwrap()
    }

    #[test]
    fn batch_round_trip_keeps_order_and_bytes() {
        let frames: Vec<Vec<u8>> = (0..5).map(|i| frame(60 + i * 100, i as u8)).collect();
        let tagged: Vec<(u64, Vec<u8>)> = frames
            .iter()
            .enumerate()
            .map(|(i, f)| (i as u64 * 1000, f.clone()))
            .collect();
        let bytes = datagram(&tagged, 1400);
        let d = Datagram::new_checked(&bytes[..]).unwrap();
        assert_eq!(d.frame_count(), 5);
        let got: Vec<_> = d.frames().collect();
        for (i, r) in got.iter().enumerate() {
            assert_eq!(r.wire.0, i as u64 * 1000);
            assert_eq!(r.frame, frames[i].as_slice());
        }
    }

    #[test]
    fn push_refuses_what_does_not_fit_and_keeps_the_batch() {
        let mut b = DatagramBatch::new(200);
        b.push(WireId(1), &frame(100, 1)).unwrap();
        assert!(!b.fits(100));
        assert_eq!(b.push(WireId(2), &frame(100, 2)), Err(EncodeError::NoRoom));
        let d = b.take().unwrap();
        assert_eq!(d.len(), DATAGRAM_HEADER_LEN + RECORD_HEADER_LEN + 100);
        assert_eq!(Datagram::new_checked(&d[..]).unwrap().frame_count(), 1);
    }

    #[test]
    fn bad_datagrams_are_typed_errors() {
        let good = datagram(&[(9, frame(64, 0))], 200).to_vec();
        let len = good.len();

        let mut newer = good.clone();
        newer[0] = DATA_VERSION + 1;
        assert_eq!(
            Datagram::new_checked(&newer[..]).unwrap_err(),
            DecodeError::UnsupportedVersion(u32::from(DATA_VERSION) + 1)
        );
        let mut kind = good.clone();
        kind[1] = 7;
        assert_eq!(
            Datagram::new_checked(&kind[..]).unwrap_err(),
            DecodeError::UnknownKind(7)
        );
        assert_eq!(
            Datagram::new_checked(&good[..len - 1]).unwrap_err(),
            DecodeError::Truncated
        );
        let mut extra = good.clone();
        extra.push(0);
        assert_eq!(
            Datagram::new_checked(&extra[..]).unwrap_err(),
            DecodeError::TrailingBytes(1)
        );
        let mut more = good.clone();
        more[3] = 2;
        assert_eq!(
            Datagram::new_checked(&more[..]).unwrap_err(),
            DecodeError::Truncated
        );
        let mut zero = good;
        zero[3] = 0;
        assert_eq!(
            Datagram::new_checked(&zero[..]).unwrap_err(),
            DecodeError::Empty
        );
    }

    #[test]
    fn frame_lengths_outside_the_range_are_refused() {
        let mut b = DatagramBatch::new(100_000);
        assert_eq!(
            b.push(WireId(1), &[0; 13]),
            Err(EncodeError::FrameLength(13))
        );
        assert_eq!(
            b.push(WireId(1), &vec![0; MAX_FRAME_LEN + 1]),
            Err(EncodeError::FrameLength(MAX_FRAME_LEN + 1))
        );
        let mut rec = [0u8; RECORD_HEADER_LEN + 13];
        rec[9] = 13;
        assert_eq!(
            FrameRepr::parse(&rec).unwrap_err(),
            DecodeError::FrameTooShort(13)
        );
    }

    #[test]
    fn stream_records_arrive_piecewise() {
        let f = frame(9000, 3);
        let mut wire = stream_preamble(StreamKind::Data).to_vec();
        let mut rec = vec![0u8; RECORD_HEADER_LEN + f.len()];
        FrameRepr {
            wire: WireId(42),
            frame: &f,
        }
        .emit(&mut rec)
        .unwrap();
        wire.extend_from_slice(&rec);
        assert_eq!(
            parse_stream_preamble(&wire[..1]),
            Err(DecodeError::Truncated)
        );
        assert_eq!(parse_stream_preamble(&wire), Ok(StreamKind::Data));
        let body = &wire[STREAM_PREAMBLE_LEN..];
        for cut in [0, 5, RECORD_HEADER_LEN, body.len() - 1] {
            assert_eq!(next_stream_frame(&body[..cut]), Ok(None));
        }
        let (r, used) = next_stream_frame(body).unwrap().unwrap();
        assert_eq!((r.wire.0, r.frame, used), (42, f.as_slice(), body.len()));
    }

    #[test]
    fn frame_bytes_shares_the_received_buffer() {
        let whole = datagram(&[(5, frame(64, 9))], 200);
        let d = Datagram::new_checked(whole.clone()).unwrap();
        let r = d.frames().next().unwrap();
        let shared = r.frame_bytes(&whole);
        assert_eq!(shared.as_ptr(), r.frame.as_ptr());
        assert_eq!(&shared[..], &frame(64, 9)[..]);
    }
}

/// A datagram being filled frame by frame over time, owning its buffer: what a sender
/// keeps per peer between passes, handing out whole datagrams as `Bytes` (which QUIC
/// takes without copying).
#[derive(Debug)]
pub struct DatagramBatch {
    buf: BytesMut,
    max_len: usize,
    count: u16,
}

impl DatagramBatch {
    /// A batch for datagrams of at most `max_len` bytes.
    pub fn new(max_len: usize) -> DatagramBatch {
        let mut batch = DatagramBatch {
            buf: BytesMut::new(),
            max_len,
            count: 0,
        };
        batch.start();
        batch
    }

    fn start(&mut self) {
        self.buf.reserve(self.max_len);
        self.buf
            .extend_from_slice(&[DATA_VERSION, DATAGRAM_KIND_FRAMES, 0, 0]);
        self.count = 0;
    }

    /// Whether a frame of `frame_len` bytes fits in the batch as it is now.
    pub fn fits(&self, frame_len: usize) -> bool {
        self.count < u16::MAX && self.buf.len() + RECORD_HEADER_LEN + frame_len <= self.max_len
    }

    /// Whether a frame of `frame_len` bytes fits in an empty batch.
    pub fn ever_fits(&self, frame_len: usize) -> bool {
        frame_len <= DatagramBatch::max_frame_for(self.max_len)
    }

    /// The largest frame an empty datagram of `max_datagram` bytes carries.
    pub(crate) fn max_frame_for(max_datagram: usize) -> usize {
        max_datagram
            .saturating_sub(DATAGRAM_HEADER_LEN + RECORD_HEADER_LEN)
            .min(MAX_FRAME_LEN)
    }

    /// Appends one frame. `NoRoom` leaves the batch as it was: take it, then push again.
    pub fn push(&mut self, wire: WireId, frame: &[u8]) -> Result<(), EncodeError> {
        if !self.fits(frame.len()) {
            return Err(EncodeError::NoRoom);
        }
        // Appended, not zero-filled and then overwritten: at 1514-byte frames the batch's
        // copy was the largest single cost of a wire's sender.
        FrameRepr { wire, frame }.append_to(&mut self.buf)?;
        self.count += 1;
        Ok(())
    }

    pub fn frame_count(&self) -> usize {
        usize::from(self.count)
    }

    /// The datagram built so far (`None` when empty), leaving an empty batch behind.
    pub fn take(&mut self) -> Option<Bytes> {
        if self.count == 0 {
            return None;
        }
        self.buf[2..4].copy_from_slice(&self.count.to_be_bytes());
        let datagram = self.buf.split().freeze();
        self.start();
        Some(datagram)
    }

    /// The largest datagram this batch builds.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Changes the largest datagram (the path changed). Frames already in stay, so take
    /// the batch first if it may have outgrown the new size.
    pub fn set_max_len(&mut self, max_len: usize) {
        self.max_len = max_len;
    }
}
