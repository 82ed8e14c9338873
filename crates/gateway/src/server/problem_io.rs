//! The connection's byte stream, with hyper's own error answers made into idemgate's.
//!
//! When a request cannot even be parsed (a malformed request line or header, headers larger than
//! hyper's buffer, a URI too long), hyper answers by itself with a bare status line, before any
//! route runs. Every answer of idemgate carries `Idemgate-Outcome` and, when it is an error, a
//! problem+json body; so this wrapper recognises a response head that lacks `Idemgate-Outcome`
//! (every route's answer has one, the guard layer sees to it) and writes a complete problem
//! answer in its place. Vectored writes are turned off so that hyper hands each response head
//! over whole, at the start of a write.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::outcome::Outcome;

pub(crate) struct ProblemIo<S> {
    inner: S,
    /// A replacement answer not yet fully written, and how much of it was.
    pending: Option<(Vec<u8>, usize)>,
}

impl<S> ProblemIo<S> {
    pub(crate) fn new(inner: S) -> Self {
        Self {
            inner,
            pending: None,
        }
    }
}

impl<S: AsyncWrite + Unpin> ProblemIo<S> {
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, done)) = &mut self.pending {
            if *done == bytes.len() {
                self.pending = None;
                break;
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*done..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *done += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ProblemIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ProblemIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.poll_pending(cx))?;
        if let Some(replacement) = replacement(buf) {
            self.pending = Some((replacement, 0));
            // The replacement goes out now or on the next write, flush or shutdown.
            let _ = self.poll_pending(cx)?;
            return Poll::Ready(Ok(buf.len()));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        false
    }
}

/// The problem answer to write instead of `buf`, when `buf` is a response head of hyper's own.
fn replacement(buf: &[u8]) -> Option<Vec<u8>> {
    let rest = buf.strip_prefix(b"HTTP/1.1 ")?;
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    if head.contains("\r\nidemgate-outcome:") {
        return None;
    }
    let status = std::str::from_utf8(rest.get(..3)?).ok()?;
    let (reason, kind, detail) = match status {
        "400" => (
            "Bad Request",
            Outcome::MalformedRequest,
            "the request is not valid HTTP/1.1 (request line or a header)",
        ),
        "414" => (
            "URI Too Long",
            Outcome::UriTooLong,
            "the request line is longer than the gateway reads",
        ),
        "431" => (
            "Request Header Fields Too Large",
            Outcome::HeadersTooLarge,
            "the request's headers are larger than the gateway reads",
        ),
        _ => (
            "Error",
            Outcome::MalformedRequest,
            "the request could not be read",
        ),
    };
    let body = format!(
        r#"{{"type":"urn:idemgate:problem:{kind}","title":"{reason}","status":{status},"detail":"{detail}"}}"#
    );
    Some(
        format!(
            "HTTP/1.1 {status} {reason}\r\ncontent-type: application/problem+json\r\nidemgate-outcome: {kind}\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::replacement;

    #[test]
    fn only_heads_without_an_outcome_are_replaced() {
        let bare =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: x\r\n\r\n";
        let text = String::from_utf8(replacement(bare).unwrap()).unwrap();
        assert!(text.starts_with("HTTP/1.1 431 "));
        assert!(text.contains("idemgate-outcome: headers_too_large\r\n"));
        let body = text.split_once("\r\n\r\n").unwrap().1;
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(body).unwrap()["status"],
            431
        );
        let ours = b"HTTP/1.1 400 Bad Request\r\nidemgate-outcome: invalid_json\r\n\r\n{}";
        assert!(replacement(ours).is_none());
        assert!(replacement(b"{\"a\":1}").is_none());
        assert!(replacement(b"HTTP/1.1 200 OK\r\nidemgate-outcome: healthy\r\n").is_none());
    }
}
