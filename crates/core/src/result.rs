//! Stored results: what a completed claim can carry for its duplicates, and the one byte layout
//! every engine keeps it in.
//!
//! A claim completed with [`ClaimStore::complete_with`](crate::ClaimStore::complete_with) keeps
//! the work's result (a status, chosen headers and a body) beside its record, written in the same
//! atomic step as the completion and gone with the record when it expires. A later delivery of
//! the event reads it in the record ([`Record::result`](crate::Record::result), through
//! [`ClaimStore::lookup`](crate::ClaimStore::lookup)).
//!
//! A result larger than the caller's limit ([`RESULT_LIMIT`] by default) is not stored: the claim
//! is completed all the same, the record keeps only the result's size
//! ([`RecordResult::Withheld`]), and the completion answers
//! [`StoreError::ResultTooLarge`](crate::StoreError::ResultTooLarge) (`StoredResult::judge`, beside
//! the error).

use std::fmt;

/// The default limit of a stored result's [`size`](StoredResult::size): 64 KiB.
pub const RESULT_LIMIT: usize = 64 * 1024;

/// What processing an event answered, kept for its duplicates: a status, the headers chosen to
/// be replayed, and the body, byte for byte.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StoredResult {
    /// The status (an HTTP status, or any code of the caller's own).
    pub status: u16,
    /// The headers to replay, in order, names as given (a name may repeat).
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// The first byte of [`StoredResult::encode`]'s layout.
const LAYOUT: u8 = 1;
/// The layout's fixed part: its version, the status and the number of headers.
const FIXED: usize = 1 + 2 + 4;
/// Each header's two lengths.
const PER_HEADER: usize = 4 + 4;

impl StoredResult {
    /// A result with `status`, no headers and an empty body.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            ..Self::default()
        }
    }

    /// Adds a header to replay.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// The bytes a store keeps for it, which its limit is held to: the body, each header's name
    /// and value, 8 bytes of lengths per header and 7 bytes more (layout, status, count). Exactly
    /// the length of [`encode`](Self::encode)'s output.
    pub fn size(&self) -> usize {
        self.headers
            .iter()
            .fold(FIXED + self.body.len(), |n, (k, v)| {
                n.saturating_add(PER_HEADER + k.len() + v.len())
            })
    }

    /// The layout every engine stores: version 1, the status (2 bytes), the number of headers
    /// (4), then each header as its name's length (4), the name, its value's length (4) and the
    /// value, then the body to the end. Numbers are big-endian. [`size`](Self::size) bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.size());
        out.push(LAYOUT);
        out.extend_from_slice(&self.status.to_be_bytes());
        out.extend_from_slice(&len32(self.headers.len()));
        for (name, value) in &self.headers {
            out.extend_from_slice(&len32(name.len()));
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(&len32(value.len()));
            out.extend_from_slice(value);
        }
        out.extend_from_slice(&self.body);
        out
    }

    /// Reads [`encode`](Self::encode)'s layout back.
    ///
    /// # Errors
    /// [`UnreadableResult`] for bytes not in that layout (another version, cut short, a header
    /// name that is not UTF-8).
    pub fn decode(bytes: &[u8]) -> Result<Self, UnreadableResult> {
        let mut rest = bytes;
        let mut take = |n: usize| -> Result<&[u8], UnreadableResult> {
            if rest.len() < n {
                return Err(UnreadableResult);
            }
            let (head, tail) = rest.split_at(n);
            rest = tail;
            Ok(head)
        };
        let u32_at = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if take(1)? != [LAYOUT] {
            return Err(UnreadableResult);
        }
        let s = take(2)?;
        let status = u16::from_be_bytes([s[0], s[1]]);
        let count = u32_at(take(4)?);
        // Each header takes at least its two lengths: a count the bytes cannot hold is refused
        // before anything is allocated for it.
        let mut headers = Vec::with_capacity(count.min(bytes.len() / PER_HEADER));
        for _ in 0..count {
            let n = u32_at(take(4)?);
            let name = String::from_utf8(take(n)?.to_vec()).map_err(|_| UnreadableResult)?;
            let n = u32_at(take(4)?);
            headers.push((name, take(n)?.to_vec()));
        }
        let body = rest.to_vec();
        Ok(Self {
            status,
            headers,
            body,
        })
    }
}

/// A length as the layout writes it. Lengths past `u32::MAX` cannot be stored: no limit lets
/// such a result through [`StoredResult::judge`], and [`StoredResult::decode`] would refuse it.
fn len32(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(u32::MAX).to_be_bytes()
}

impl fmt::Debug for StoredResult {
    /// The status, the headers' names and the body's length: bodies can be large, and private.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredResult")
            .field("status", &self.status)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// Bytes that are not a stored result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unreadable stored result")]
pub struct UnreadableResult;

/// What a record keeps of its completion's result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RecordResult {
    /// No result: the record is processing, was completed without one
    /// ([`ClaimStore::complete`](crate::ClaimStore::complete)), or was marked done on receipt
    /// (which no completion follows).
    #[default]
    None,
    /// The result its completion brought, byte for byte.
    Stored(StoredResult),
    /// Its completion brought a result of `size` bytes, over the limit it was completed under:
    /// the claim was completed, the result not stored. Duplicates hear that the event was
    /// processed, and how large its result was, but cannot be given it.
    Withheld { size: usize },
}

impl RecordResult {
    /// The stored result, if there is one.
    pub fn stored(&self) -> Option<&StoredResult> {
        match self {
            Self::Stored(r) => Some(r),
            Self::None | Self::Withheld { .. } => None,
        }
    }

    /// `None`, `stored` or `withheld`: for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Stored(_) => "stored",
            Self::Withheld { .. } => "withheld",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredResult {
        StoredResult::new(201)
            .header("content-type", "application/json")
            .header("x-bytes", vec![0, 255, 10])
            .header("set-cookie", "a=1")
            .header("set-cookie", "b=2")
            .body(br#"{"id":"pay_1"}"#.to_vec())
    }

    #[test]
    fn the_layout_round_trips_and_is_its_size() {
        for r in [
            sample(),
            StoredResult::new(204),
            StoredResult::new(0).body(vec![0; 70_000]),
        ] {
            let bytes = r.encode();
            assert_eq!(bytes.len(), r.size());
            assert_eq!(StoredResult::decode(&bytes).unwrap(), r);
        }
    }

    #[test]
    fn bytes_not_in_the_layout_are_refused() {
        let bytes = sample().encode();
        assert_eq!(StoredResult::decode(&[]), Err(UnreadableResult));
        assert_eq!(StoredResult::decode(&[2, 0, 200]), Err(UnreadableResult));
        // Cut inside the headers (the body runs to the end, so a cut there is just a shorter one).
        assert_eq!(StoredResult::decode(&bytes[..20]), Err(UnreadableResult));
        // A count of headers the bytes cannot hold.
        let mut huge = vec![LAYOUT, 0, 200];
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(StoredResult::decode(&huge), Err(UnreadableResult));
        // A header name that is not UTF-8.
        let mut bad = vec![LAYOUT, 0, 200, 0, 0, 0, 1, 0, 0, 0, 1, 0xff, 0, 0, 0, 0];
        assert_eq!(StoredResult::decode(&bad), Err(UnreadableResult));
        bad[11] = b'a';
        assert!(StoredResult::decode(&bad).is_ok());
    }
}
