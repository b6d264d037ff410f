//! The length prefix shared by control messages and local API messages: a u32, big-endian,
//! counting the bytes of the body that follows.

use crate::DecodeError;

/// Bytes of the length prefix.
pub(crate) const LEN_PREFIX: usize = 4;

/// Splits the next record off a receive buffer: `Ok(None)` until the whole record has
/// arrived, then its body and the bytes to consume. A length above `max_body` is refused
/// before anything is buffered for it.
pub fn split_record(buf: &[u8], max_body: usize) -> Result<Option<(&[u8], usize)>, DecodeError> {
    let Some(prefix) = buf.get(..LEN_PREFIX) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
    if len > max_body {
        return Err(DecodeError::TooLong { len, max: max_body });
    }
    Ok(buf
        .get(LEN_PREFIX..LEN_PREFIX + len)
        .map(|body| (body, LEN_PREFIX + len)))
}

/// Appends a record to `out`: reserves the prefix, lets `write_body` append the body,
/// then fills in the prefix.
pub fn append_record<E>(
    out: &mut Vec<u8>,
    write_body: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    let start = out.len();
    out.extend_from_slice(&[0; LEN_PREFIX]);
    write_body(out)?;
    let body_len = (out.len() - start - LEN_PREFIX) as u32;
    out[start..start + LEN_PREFIX].copy_from_slice(&body_len.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_split_only_when_whole() {
        let mut out = Vec::new();
        append_record::<()>(&mut out, |b| {
            b.extend_from_slice(b"hello");
            Ok(())
        })
        .unwrap();
        append_record::<()>(&mut out, |_| Ok(())).unwrap();
        for cut in 0..LEN_PREFIX + 5 {
            assert_eq!(split_record(&out[..cut], 64), Ok(None));
        }
        let (body, used) = split_record(&out, 64).unwrap().unwrap();
        assert_eq!((body, used), (&b"hello"[..], 9));
        assert_eq!(split_record(&out[used..], 64), Ok(Some((&b""[..], 4))));
    }

    #[test]
    fn oversized_length_is_refused_before_buffering() {
        let buf = u32::MAX.to_be_bytes();
        assert_eq!(
            split_record(&buf, 1024),
            Err(DecodeError::TooLong {
                len: u32::MAX as usize,
                max: 1024
            })
        );
    }
}
