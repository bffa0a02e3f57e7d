//! The newline-delimited framing of MCP over stdio: one JSON-RPC message per line.
//!
//! [`LineCodec`] is a tokio-util [`Decoder`] and [`Encoder`] with no I/O of its own. Decoding
//! never ends the stream on bad input: an over-long line or a line that is not UTF-8 comes out
//! as an item `Err(`[`LineError`]`)` and the lines after it decode normally (a decoder *error*
//! would make `FramedRead` stop for good). The `io::Error` of the `Decoder` is therefore only ever
//! an error of the reader underneath.

use std::fmt;
use std::io;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use modelctx_types::{ErrorCode, ErrorObject, ErrorResponse};
use serde::Serialize;
use tokio_util::codec::{Decoder, Encoder};

/// The default maximum length of one line (4 MiB), not counting its line terminator.
pub const DEFAULT_MAX_LINE_LENGTH: usize = 4 * 1024 * 1024;

/// One line read: a complete message's text, without its line terminator (`\n` or `\r\n`), never
/// blank, always valid UTF-8. It is not yet known to be JSON.
#[derive(Clone, PartialEq, Eq)]
pub struct Line(Bytes);

impl Line {
    /// The line's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The line's text.
    pub fn as_str(&self) -> &str {
        // The decoder only builds a `Line` from bytes it has checked; checked again here rather
        // than trusted, since the check is cheap next to parsing the JSON.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The line's bytes, without a copy.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }
}

impl fmt::Debug for Line {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Line").field(&self.as_str()).finish()
    }
}

/// A line that cannot be a message. The lines after it are read normally.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LineError {
    /// The line is longer than the limit. It is reported as soon as the limit is passed, and the
    /// rest of it, up to the next newline, is discarded without being buffered.
    #[error("message too long: a line exceeded the limit of {limit} bytes and was discarded")]
    TooLong {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The line is not valid UTF-8 (so not JSON either).
    #[error("message is not valid UTF-8 (invalid byte at offset {valid_up_to})")]
    InvalidUtf8 {
        /// The length of the valid prefix.
        valid_up_to: usize,
    },
}

impl LineError {
    /// The error response a server writes back: -32700 (parse error) for a line that is not
    /// UTF-8, -32600 (invalid request) for an over-long one; with a null id, since no id can be
    /// read from either.
    pub fn to_error_response(&self) -> ErrorResponse {
        let code = match self {
            LineError::TooLong { .. } => ErrorCode::INVALID_REQUEST,
            LineError::InvalidUtf8 { .. } => ErrorCode::PARSE_ERROR,
        };
        ErrorResponse::new(None, ErrorObject::new(code, self.to_string()))
    }
}

/// The newline-delimited JSON codec of MCP's stdio transport.
///
/// Decoding: lines end at `\n`; a `\r` before it is dropped; lines of only whitespace are
/// skipped; a final line without a newline at the end of the input is still a line. A line
/// longer than [`max_line_length`](Self::max_line_length) bytes yields [`LineError::TooLong`] as
/// soon as the limit is passed, and the rest of it is discarded as it arrives, so the buffer
/// never holds more than the limit plus one read.
///
/// Encoding: any `Serialize` value (a message, a batch) is written as compact JSON followed by
/// one `\n`. Compact JSON has no line breaks, except where a pre-serialized
/// [`RawValue`](serde_json::value::RawValue) carries some: those can only be insignificant
/// whitespace (JSON strings cannot hold a raw line break), and they are removed.
#[derive(Debug, Clone)]
pub struct LineCodec {
    max_line_length: usize,
    /// Discarding the rest of an over-long line.
    discarding: bool,
    /// How far the buffer has been searched for a newline already.
    searched: usize,
}

impl Default for LineCodec {
    fn default() -> Self {
        LineCodec::new()
    }
}

impl LineCodec {
    /// A codec with the default maximum line length ([`DEFAULT_MAX_LINE_LENGTH`]).
    pub fn new() -> Self {
        LineCodec::with_max_line_length(DEFAULT_MAX_LINE_LENGTH)
    }

    /// A codec whose lines may be at most `max` bytes long (not counting the terminator).
    pub fn with_max_line_length(max: usize) -> Self {
        LineCodec {
            max_line_length: max,
            discarding: false,
            searched: 0,
        }
    }

    /// The maximum length of a line, in bytes.
    pub fn max_line_length(&self) -> usize {
        self.max_line_length
    }

    /// Takes `len` bytes (terminator included) off the front of `src` as a line, if it is not
    /// blank.
    fn take_line(&mut self, src: &mut BytesMut, len: usize) -> Option<Result<Line, LineError>> {
        self.searched = 0;
        let mut line = src.split_to(len);
        if line.last() == Some(&b'\n') {
            line.truncate(line.len() - 1);
        }
        if line.last() == Some(&b'\r') {
            line.truncate(line.len() - 1);
        }
        if line.len() > self.max_line_length {
            return Some(Err(LineError::TooLong {
                limit: self.max_line_length,
            }));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        Some(match std::str::from_utf8(&line) {
            Ok(_) => Ok(Line(line.freeze())),
            Err(e) => Err(LineError::InvalidUtf8 {
                valid_up_to: e.valid_up_to(),
            }),
        })
    }
}

impl Decoder for LineCodec {
    type Item = Result<Line, LineError>;
    type Error = io::Error;

    fn decode(&mut self, src: &mut BytesMut) -> io::Result<Option<Self::Item>> {
        loop {
            if self.discarding {
                match memchr_newline(src) {
                    Some(at) => {
                        src.advance(at + 1);
                        self.discarding = false;
                        self.searched = 0;
                    }
                    None => {
                        src.clear();
                        return Ok(None);
                    }
                }
            }
            // A line of `max` bytes may still be followed by `\r\n`: search that far, no farther.
            let window = src.len().min(self.max_line_length.saturating_add(2));
            match memchr_newline(&src[self.searched.min(window)..window]) {
                Some(at) => {
                    let len = self.searched.min(window) + at + 1;
                    match self.take_line(src, len) {
                        Some(item) => return Ok(Some(item)),
                        None => continue,
                    }
                }
                None if window == self.max_line_length.saturating_add(2) => {
                    // Over the limit with no end in sight: report it now, drop what is buffered
                    // and discard up to the next newline.
                    src.advance(window);
                    self.discarding = true;
                    self.searched = 0;
                    return Ok(Some(Err(LineError::TooLong {
                        limit: self.max_line_length,
                    })));
                }
                None => {
                    self.searched = window;
                    return Ok(None);
                }
            }
        }
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> io::Result<Option<Self::Item>> {
        loop {
            if let Some(item) = self.decode(src)? {
                return Ok(Some(item));
            }
            if src.is_empty() {
                return Ok(None);
            }
            // A final line without a newline.
            let len = src.len();
            if let Some(item) = self.take_line(src, len) {
                return Ok(Some(item));
            }
        }
    }
}

impl<T: Serialize + ?Sized> Encoder<&T> for LineCodec {
    type Error = io::Error;

    fn encode(&mut self, item: &T, dst: &mut BytesMut) -> io::Result<()> {
        encode_line(item, dst)
    }
}

/// Appends `item` to `dst` as one line: compact JSON and `\n`, with no other line break.
pub(crate) fn encode_line<T: Serialize + ?Sized>(item: &T, dst: &mut BytesMut) -> io::Result<()> {
    let start = dst.len();
    if let Err(e) = serde_json::to_writer(dst.writer(), item) {
        dst.truncate(start);
        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
    }
    let written = &dst[start..];
    if written.contains(&b'\n') || written.contains(&b'\r') {
        // Only insignificant whitespace from a `RawValue` can hold a raw line break.
        let mut keep = start;
        for i in start..dst.len() {
            let b = dst[i];
            if b != b'\n' && b != b'\r' {
                dst[keep] = b;
                keep += 1;
            }
        }
        dst.truncate(keep);
    }
    dst.put_u8(b'\n');
    Ok(())
}

fn memchr_newline(haystack: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', haystack)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use serde_json::value::RawValue;

    /// Feeds `input` to a fresh codec in pieces of `chunk` bytes, then signals the end of input;
    /// returns every item as text (errors as `!` and their kind).
    fn decode_all(codec: &mut LineCodec, input: &[u8], chunk: usize) -> Vec<String> {
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let mut push = |item: Result<Line, LineError>| {
            out.push(match item {
                Ok(line) => line.as_str().to_owned(),
                Err(LineError::TooLong { limit }) => format!("!too long {limit}"),
                Err(LineError::InvalidUtf8 { valid_up_to }) => format!("!utf8 {valid_up_to}"),
            })
        };
        for piece in input.chunks(chunk.max(1)) {
            buf.extend_from_slice(piece);
            while let Some(item) = codec.decode(&mut buf).unwrap() {
                push(item);
            }
            // The buffer never holds more than the limit plus one read.
            assert!(
                buf.len() <= codec.max_line_length() + 2 + chunk,
                "{}",
                buf.len()
            );
        }
        while let Some(item) = codec.decode_eof(&mut buf).unwrap() {
            push(item);
        }
        assert!(buf.is_empty());
        out
    }

    /// Decodes `input` whole and byte by byte, and checks both give `expected`.
    fn check(max: usize, input: &[u8], expected: &[&str]) {
        for chunk in [input.len().max(1), 1, 2, 3, 7] {
            let got = decode_all(&mut LineCodec::with_max_line_length(max), input, chunk);
            assert_eq!(got, expected, "chunks of {chunk}: {input:?}");
        }
    }

    #[test]
    fn lines_end_at_newlines_with_or_without_carriage_returns() {
        check(
            100,
            b"{\"a\":1}\n{\"b\":2}\r\n",
            &[r#"{"a":1}"#, r#"{"b":2}"#],
        );
        check(100, b"one\ntwo\r\nthree\n", &["one", "two", "three"]);
        // A carriage return elsewhere stays (it is JSON whitespace, or an error for the parser).
        check(100, b"a\rb\n", &["a\rb"]);
    }

    #[test]
    fn blank_lines_are_skipped() {
        check(100, b"\n\r\n  \t\nx\n\n", &["x"]);
        check(100, b"\n\n\n", &[]);
        check(100, b"", &[]);
    }

    #[test]
    fn a_final_line_without_newline_is_a_line() {
        check(100, b"x\ny", &["x", "y"]);
        check(100, b"x\ny\r", &["x", "y"]);
        check(100, b"x\n   ", &["x"]);
    }

    #[test]
    fn the_limit_counts_content_not_terminators() {
        check(
            3,
            b"abc\nabc\r\nabcd\nxy\n",
            &["abc", "abc", "!too long 3", "xy"],
        );
    }

    #[test]
    fn an_over_long_line_is_reported_once_discarded_and_reading_goes_on() {
        let mut input = vec![b'x'; 10_000];
        input.extend_from_slice(b"\n{\"ok\":true}\n");
        input.extend(std::iter::repeat_n(b'y', 500));
        input.extend_from_slice(b"\r\nlast");
        check(
            64,
            &input,
            &["!too long 64", r#"{"ok":true}"#, "!too long 64", "last"],
        );
        // Over-long at the end of input, without a newline.
        check(4, b"ok\n0123456789", &["ok", "!too long 4"]);
        check(4, b"ok\n01234", &["ok", "!too long 4"]);
    }

    #[test]
    fn the_buffer_stays_bounded_while_discarding() {
        let mut codec = LineCodec::with_max_line_length(16);
        let mut buf = BytesMut::new();
        let mut errors = 0;
        for _ in 0..1000 {
            buf.extend_from_slice(&[b'z'; 1000]);
            while let Some(item) = codec.decode(&mut buf).unwrap() {
                assert!(item.is_err());
                errors += 1;
            }
            assert!(buf.len() <= 18);
        }
        assert_eq!(errors, 1);
        buf.extend_from_slice(b"\nafter\n");
        assert_eq!(
            codec.decode(&mut buf).unwrap().unwrap().unwrap().as_str(),
            "after"
        );
    }

    #[test]
    fn invalid_utf8_is_its_own_error_and_reading_goes_on() {
        check(
            100,
            b"ok\n\xff\xfe\nab\xc3\n\"\xc3\xa9\"\n",
            &["ok", "!utf8 0", "!utf8 2", "\"\u{e9}\""],
        );
    }

    #[test]
    fn multibyte_characters_split_across_reads_are_whole() {
        let text = "{\"t\":\"h\u{e9}llo \u{1f600}\"}\n";
        check(100, text.as_bytes(), &[text.trim_end()]);
    }

    #[test]
    fn encoding_is_compact_one_line_per_message() {
        let mut codec = LineCodec::new();
        let mut dst = BytesMut::new();
        codec
            .encode(&json!({"a": "line\nbreak", "b": [1, 2]}), &mut dst)
            .unwrap();
        codec.encode(&json!([1]), &mut dst).unwrap();
        assert_eq!(
            &dst[..],
            b"{\"a\":\"line\\nbreak\",\"b\":[1,2]}\n[1]\n".as_slice()
        );
    }

    #[test]
    fn line_breaks_inside_raw_values_are_removed() {
        #[derive(Serialize)]
        struct Reply {
            result: Box<RawValue>,
        }
        let raw =
            RawValue::from_string("{\r\n  \"a\": \"x\\ny\",\n  \"b\": [\n1\n]\n}".into()).unwrap();
        let mut dst = BytesMut::from(&b"before\n"[..]);
        LineCodec::new()
            .encode(&Reply { result: raw }, &mut dst)
            .unwrap();
        let text = std::str::from_utf8(&dst).unwrap();
        assert_eq!(
            text,
            "before\n{\"result\":{  \"a\": \"x\\ny\",  \"b\": [1]}}\n"
        );
        let line = text.lines().nth(1).unwrap();
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(value["result"]["a"], "x\ny");
    }

    #[test]
    fn a_value_that_cannot_serialize_leaves_the_buffer_as_it_was() {
        let mut map = std::collections::BTreeMap::new();
        map.insert(vec![1u8], 1);
        let mut dst = BytesMut::from(&b"kept\n"[..]);
        assert!(LineCodec::new().encode(&map, &mut dst).is_err());
        assert_eq!(&dst[..], b"kept\n");
    }

    #[test]
    fn errors_map_to_json_rpc_error_responses() {
        let too_long = LineError::TooLong { limit: 4 }.to_error_response();
        assert_eq!(too_long.error.code, ErrorCode::INVALID_REQUEST);
        assert!(too_long.id.is_none());
        assert!(too_long.error.message.contains("limit of 4 bytes"));
        let utf8 = LineError::InvalidUtf8 { valid_up_to: 3 }.to_error_response();
        assert_eq!(utf8.error.code, ErrorCode::PARSE_ERROR);
    }
}
