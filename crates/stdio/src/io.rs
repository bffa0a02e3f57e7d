//! The two halves of a line transport over any async byte stream: [`LineReader`] and
//! [`LineWriter`].

use std::future::poll_fn;
use std::io;
use std::pin::Pin;

use bytes::BytesMut;
use futures_core::Stream;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::codec::{Decoder, FramedRead};

use crate::codec::{Line, LineCodec, LineError, encode_line};

/// How much a read asks for at a time: many small messages per read under load.
const READ_CAPACITY: usize = 64 * 1024;

/// Reads lines (messages) from a byte stream.
///
/// [`next_line`](Self::next_line) is cancel-safe: a line is never lost when the future is
/// dropped (as in `tokio::select!`).
#[derive(Debug)]
pub struct LineReader<R> {
    framed: FramedRead<R, LineCodec>,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads `inner` with `codec`.
    pub fn new(inner: R, codec: LineCodec) -> Self {
        LineReader {
            framed: FramedRead::with_capacity(inner, codec, READ_CAPACITY),
        }
    }

    /// The next line: `Ok(Some(Ok(line)))`; `Ok(Some(Err(_)))` for a line that cannot be a
    /// message (the lines after it are read normally); `Ok(None)` at the end of the input (after
    /// its last line, terminated or not); `Err(_)` when reading failed, after which the reader is
    /// done.
    pub async fn next_line(&mut self) -> io::Result<Option<Result<Line, LineError>>> {
        poll_fn(|cx| Pin::new(&mut self.framed).poll_next(cx))
            .await
            .transpose()
    }

    /// The next line already in the read buffer, without any I/O: after
    /// [`next_line`](Self::next_line) returned one, a driver takes the rest of what that read
    /// brought with this, handles them all, and writes the answers with one flush.
    pub fn next_buffered(&mut self) -> Option<Result<Line, LineError>> {
        let mut buffer = std::mem::take(self.framed.read_buffer_mut());
        // The codec's only error is the reader's, and there is no reading here.
        let item = self.framed.decoder_mut().decode(&mut buffer).ok().flatten();
        *self.framed.read_buffer_mut() = buffer;
        item
    }

    /// The codec, for its settings.
    pub fn codec(&self) -> &LineCodec {
        self.framed.decoder()
    }

    /// The reader underneath.
    pub fn get_ref(&self) -> &R {
        self.framed.get_ref()
    }
}

/// Writes messages, one per line, to a byte stream.
///
/// Messages are encoded into a buffer with [`feed`](Self::feed), which does no I/O, and written
/// with [`flush`](Self::flush): a driver that feeds everything it has before flushing writes
/// many messages with one system call under load, and one message at once when idle, never out
/// of order. [`flush`](Self::flush) is cancel-safe: what was not written stays buffered, in order.
#[derive(Debug)]
pub struct LineWriter<W> {
    inner: W,
    buffer: BytesMut,
}

impl<W: AsyncWrite + Unpin> LineWriter<W> {
    /// Writes to `inner`.
    pub fn new(inner: W) -> Self {
        LineWriter {
            inner,
            buffer: BytesMut::with_capacity(READ_CAPACITY),
        }
    }

    /// Encodes `message` (compact JSON and a newline) at the end of the buffer. Fails only when
    /// the value cannot be serialized as JSON (a map with non-string keys), leaving the buffer as
    /// it was.
    pub fn feed<T: Serialize + ?Sized>(&mut self, message: &T) -> io::Result<()> {
        encode_line(message, &mut self.buffer)
    }

    /// Appends a line that is already JSON text (without its newline; line breaks in it are
    /// rejected, since the reader would split the message there).
    pub fn feed_raw(&mut self, json: &[u8]) -> io::Result<()> {
        if json.contains(&b'\n') || json.contains(&b'\r') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a line must not contain a line break",
            ));
        }
        self.buffer.extend_from_slice(json);
        self.buffer.extend_from_slice(b"\n");
        Ok(())
    }

    /// How many bytes are encoded but not yet written.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// Writes everything buffered, then flushes the stream. A closed peer shows as an error of
    /// kind [`BrokenPipe`](io::ErrorKind::BrokenPipe) (see [`is_closed`]).
    pub async fn flush(&mut self) -> io::Result<()> {
        while !self.buffer.is_empty() {
            if self.inner.write_buf(&mut self.buffer).await? == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        self.inner.flush().await?;
        // Give back memory a burst took, once it is written.
        if self.buffer.capacity() > 4 * READ_CAPACITY {
            self.buffer = BytesMut::with_capacity(READ_CAPACITY);
        }
        Ok(())
    }

    /// [`feed`](Self::feed) then [`flush`](Self::flush).
    pub async fn send<T: Serialize + ?Sized>(&mut self, message: &T) -> io::Result<()> {
        self.feed(message)?;
        self.flush().await
    }

    /// Flushes, then shuts the stream down (the reader on the other side sees the end of input).
    pub async fn shutdown(&mut self) -> io::Result<()> {
        self.flush().await?;
        self.inner.shutdown().await
    }

    /// The writer underneath.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// The writer underneath; anything still buffered is dropped.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

/// Whether a write error means the other side is gone (closed pipe or connection): a reason to
/// shut down quietly, not a fault.
pub fn is_closed(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::NotConnected
            | io::ErrorKind::WriteZero
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn lines_cross_a_pipe_in_order_with_bad_lines_reported_in_place() {
        let (a, b) = tokio::io::duplex(64);
        let mut writer = LineWriter::new(a);
        let mut reader = LineReader::new(b, LineCodec::with_max_line_length(100));
        let send = tokio::spawn(async move {
            for i in 0..500 {
                writer.feed(&json!({"i": i})).unwrap();
                if i % 7 == 0 {
                    writer.flush().await.unwrap();
                }
            }
            writer.feed_raw(&[b'x'; 300]).unwrap();
            writer.feed_raw(b"\"end\"").unwrap();
            writer.shutdown().await.unwrap();
        });
        for i in 0..500 {
            let line = reader.next_line().await.unwrap().unwrap().unwrap();
            assert_eq!(line.as_str(), format!("{{\"i\":{i}}}"));
        }
        assert_eq!(
            reader.next_line().await.unwrap().unwrap(),
            Err(LineError::TooLong { limit: 100 })
        );
        assert_eq!(
            reader.next_line().await.unwrap().unwrap().unwrap().as_str(),
            "\"end\""
        );
        assert!(reader.next_line().await.unwrap().is_none());
        send.await.unwrap();
    }

    #[tokio::test]
    async fn buffered_lines_are_taken_without_io() {
        let (mut a, b) = tokio::io::duplex(1 << 16);
        a.write_all(b"1\n2\n\n3\nxxxxxxxx\n4").await.unwrap();
        let mut reader = LineReader::new(b, LineCodec::with_max_line_length(4));
        assert!(reader.next_buffered().is_none(), "nothing read yet");
        let first = reader.next_line().await.unwrap().unwrap().unwrap();
        assert_eq!(first.as_str(), "1");
        let rest: Vec<_> = std::iter::from_fn(|| reader.next_buffered()).collect();
        assert_eq!(rest.len(), 3, "{rest:?}");
        assert_eq!(rest[2], Err(LineError::TooLong { limit: 4 }));
        // "4" has no newline yet: it comes at the end of input, through next_line.
        drop(a);
        let last = reader.next_line().await.unwrap().unwrap().unwrap();
        assert_eq!(last.as_str(), "4");
        assert!(reader.next_line().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn fed_messages_go_out_in_one_write() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut writer = LineWriter::new(a);
        for i in 0..100 {
            writer.feed(&json!(i)).unwrap();
        }
        assert_eq!(writer.buffered(), 290);
        writer.flush().await.unwrap();
        assert_eq!(writer.buffered(), 0);
        let mut got = vec![0; 290];
        b.read_exact(&mut got).await.unwrap();
        let text = String::from_utf8(got).unwrap();
        assert_eq!(text.lines().count(), 100);
        assert_eq!(text.lines().last(), Some("99"));
    }

    #[tokio::test]
    async fn a_raw_line_with_a_line_break_is_refused() {
        let (a, _b) = tokio::io::duplex(64);
        let mut writer = LineWriter::new(a);
        assert!(writer.feed_raw(b"{\"a\":\n1}").is_err());
        assert_eq!(writer.buffered(), 0);
    }

    #[tokio::test]
    async fn a_closed_reader_is_a_closed_error() {
        let (a, b) = tokio::io::duplex(64);
        drop(b);
        let mut writer = LineWriter::new(a);
        let error = writer.send(&json!({"x": 1})).await.unwrap_err();
        assert!(is_closed(&error), "{error:?}");
    }
}
