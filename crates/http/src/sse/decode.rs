//! An incremental Server-Sent Events decoder with a size bound, following the WHATWG HTML
//! "event stream interpretation" rules.

use std::time::Duration;

/// The UTF-8 byte order mark, skipped once at the start of a stream.
const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` type; `None` when absent or empty (means "message").
    pub(crate) event: Option<String>,
    /// The data lines joined with '\n' (the final newline removed).
    pub(crate) data: String,
    /// The stream's last event id after this event (the id buffer at dispatch time), if any.
    pub(crate) id: Option<String>,
}

/// Why a stream cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SseError {
    /// A line, or the data of one event, is larger than the limit.
    #[error("an SSE event or line exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The limit given to [`SseDecoder::new`].
        limit: usize,
    },
    /// A line is not valid UTF-8.
    #[error("the SSE stream is not valid UTF-8")]
    InvalidUtf8,
}

/// Decodes an event stream from chunks split anywhere.
///
/// The unfinished line plus the data of the event being built never exceed `max_event` bytes,
/// so memory stays bounded however the input is split. After an error the decoder returns the
/// same error on every later call.
#[derive(Debug)]
pub(crate) struct SseDecoder {
    /// The limit on the pending line plus the data buffer, in bytes.
    max_event: usize,
    /// How many bytes of a leading BOM have been seen; `None` once the stream start is past.
    bom_matched: Option<usize>,
    /// The bytes of the line not yet ended. Only bytes new to a call are ever scanned.
    line: Vec<u8>,
    /// The last chunk ended with CR, so an LF starting the next one ends no line.
    after_cr: bool,
    /// The data buffer: each `data:` value followed by '\n'.
    data: String,
    /// The event type buffer.
    event_type: String,
    /// The last event id buffer.
    id_buffer: Option<String>,
    /// The last event id, set from the id buffer at each blank line.
    last_event_id: Option<String>,
    /// The reconnection time from the latest valid `retry:` field.
    retry: Option<Duration>,
    /// The error that stopped the decoder, if any.
    failed: Option<SseError>,
}

impl SseDecoder {
    /// A decoder that fails when a line plus the event data built so far exceed `max_event` bytes.
    pub(crate) fn new(max_event: usize) -> Self {
        Self {
            max_event,
            bom_matched: Some(0),
            line: Vec::new(),
            after_cr: false,
            data: String::new(),
            event_type: String::new(),
            id_buffer: None,
            last_event_id: None,
            retry: None,
            failed: None,
        }
    }

    /// Feeds bytes in any split; pushes every event completed by them to `out`.
    ///
    /// On error, events completed before the failing line have already been pushed.
    pub(crate) fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let result = self.feed_inner(chunk, out);
        if let Err(err) = &result {
            self.failed = Some(err.clone());
            self.line = Vec::new();
            self.data = String::new();
        }
        result
    }

    /// The last event id (set from `id:` fields at each blank line, per the WHATWG rules), or None.
    pub(crate) fn last_event_id(&self) -> Option<&str> {
        self.last_event_id.as_deref()
    }

    /// The reconnection time from the latest valid `retry:` field.
    pub(crate) fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// Splits `chunk` into lines, joining the first with the pending bytes and keeping the rest.
    fn feed_inner(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut chunk = self.skip_bom(chunk)?;
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        while let Some(end) = chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (head, rest) = chunk.split_at(end);
            if self.line.is_empty() {
                self.check(head.len())?;
                self.process_line(head, out)?;
            } else {
                self.check(self.line.len() + head.len())?;
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(head);
                let result = self.process_line(&line, out);
                line.clear();
                self.line = line;
                result?;
            }
            let crlf = rest[0] == b'\r' && rest.get(1) == Some(&b'\n');
            self.after_cr = rest[0] == b'\r' && rest.len() == 1;
            chunk = &rest[if crlf { 2 } else { 1 }..];
        }
        if !chunk.is_empty() {
            self.check(self.line.len() + chunk.len())?;
            self.line.extend_from_slice(chunk);
        }
        Ok(())
    }

    /// Drops a leading BOM, which may arrive split across chunks.
    fn skip_bom<'a>(&mut self, mut chunk: &'a [u8]) -> Result<&'a [u8], SseError> {
        while let (Some(matched), Some(&byte)) = (self.bom_matched, chunk.first()) {
            if byte == BOM[matched] {
                chunk = &chunk[1..];
                self.bom_matched = Some(matched + 1).filter(|&n| n < BOM.len());
            } else {
                // Not a BOM after all: the bytes matched so far start the first line.
                self.bom_matched = None;
                self.check(matched)?;
                self.line.extend_from_slice(&BOM[..matched]);
            }
        }
        Ok(chunk)
    }

    /// Fails when a pending line of `line_len` bytes plus the data buffer exceed the limit.
    fn check(&self, line_len: usize) -> Result<(), SseError> {
        if self.data.len() + line_len > self.max_event {
            return Err(SseError::TooLarge {
                limit: self.max_event,
            });
        }
        Ok(())
    }

    /// Interprets one complete line, without its line ending.
    fn process_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(out);
            return Ok(());
        }
        let line = std::str::from_utf8(line).map_err(|_| SseError::InvalidUtf8)?;
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => {
                self.event_type.clear();
                self.event_type.push_str(value);
            }
            "data" => {
                // Never grows the total: the value and '\n' are shorter than the line was.
                self.data.push_str(value);
                self.data.push('\n');
            }
            "id" if !value.contains('\0') => {
                self.id_buffer = (!value.is_empty()).then(|| value.to_owned());
            }
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                if let Ok(millis) = value.parse::<u64>() {
                    self.retry = Some(Duration::from_millis(millis));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Handles a blank line: updates the last event id and dispatches the event, if it has data.
    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        self.last_event_id.clone_from(&self.id_buffer);
        if self.data.is_empty() {
            self.event_type.clear();
            return;
        }
        self.data.pop();
        let event = (!self.event_type.is_empty()).then(|| std::mem::take(&mut self.event_type));
        out.push(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
            id: self.id_buffer.clone(),
        });
        self.event_type.clear();
    }
}

impl SseEvent {
    /// The JSON-RPC message this event carries: `None` for an event MCP ignores (a priming
    /// event without data, or an event type other than `message`).
    pub(crate) fn message(
        &self,
    ) -> Option<Result<modelctx_types::Incoming, modelctx_types::DecodeError>> {
        if self.data.is_empty() || self.event.as_deref().is_some_and(|e| e != "message") {
            return None;
        }
        Some(modelctx_types::decode_str(&self.data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a decoder produced: its result, the events, the last event id and the retry.
    type Outcome = (
        Result<(), SseError>,
        Vec<SseEvent>,
        Option<String>,
        Option<Duration>,
    );

    fn ev(event: Option<&str>, data: &str, id: Option<&str>) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
            id: id.map(str::to_owned),
        }
    }

    /// Feeds the chunks in order, stopping at the first error.
    fn decode_chunks(chunks: &[&[u8]], max: usize) -> Outcome {
        let mut decoder = SseDecoder::new(max);
        let mut out = Vec::new();
        let mut result = Ok(());
        for chunk in chunks {
            result = decoder.feed(chunk, &mut out);
            if result.is_err() {
                break;
            }
        }
        let last = decoder.last_event_id().map(str::to_owned);
        (result, out, last, decoder.retry())
    }

    fn decode(input: &[u8]) -> Vec<SseEvent> {
        let (result, events, _, _) = decode_chunks(&[input], 1 << 20);
        result.unwrap();
        events
    }

    /// Checks that every one- and two-point split and byte-by-byte feeding match feeding whole.
    fn assert_split_invariant(input: &[u8], max: usize) -> Outcome {
        let whole = decode_chunks(&[input], max);
        for i in 0..=input.len() {
            let (a, b) = input.split_at(i);
            assert_eq!(decode_chunks(&[a, b], max), whole, "split at {i}");
            for j in i..=input.len() {
                let parts = [&input[..i], &input[i..j], &input[j..]];
                assert_eq!(decode_chunks(&parts, max), whole, "split at {i} and {j}");
            }
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        assert_eq!(decode_chunks(&bytes, max), whole, "byte by byte");
        let mut with_empty: Vec<&[u8]> = Vec::new();
        for byte in &bytes {
            with_empty.extend([&b""[..], byte]);
        }
        assert_eq!(decode_chunks(&with_empty, max), whole, "with empty chunks");
        whole
    }

    const RICH: &str = concat!(
        "\u{FEFF}: comment at start\r\n",
        "retry: 12a\n",
        "id: s1-0\nretry: 500\ndata:\n\n",
        "event: message\n",
        "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",",
        "\"params\":{\"progress\":1}}\n",
        "id: s1-1\n\n",
        ": keep-alive\n\n",
        "event: custom\rdata: line one\rdata:line two\r\r",
        "id\r\ndata: after clear\r\n\r\n",
        "data: ünïcödé ✓ 🎉\nid: s1-\0x\n\n",
        "id: s1-9\nunknown: field\ndata\ndata: trailing\n\n",
        "data: never dispatched\n",
    );

    fn rich_events() -> Vec<SseEvent> {
        vec![
            ev(None, "", Some("s1-0")),
            ev(
                Some("message"),
                r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#,
                Some("s1-1"),
            ),
            ev(Some("custom"), "line one\nline two", Some("s1-1")),
            ev(None, "after clear", None),
            ev(None, "ünïcödé ✓ 🎉", None),
            ev(None, "\ntrailing", Some("s1-9")),
        ]
    }

    #[test]
    fn spec_stock_example() {
        assert_eq!(
            decode(b"data: YHOO\ndata: +2\ndata: 10\n\n"),
            [ev(None, "YHOO\n+2\n10", None)]
        );
    }

    #[test]
    fn spec_id_example() {
        let input = concat!(
            ": test stream\n\n",
            "data: first event\nid: 1\n\n",
            "data:second event\nid\n\n",
            "data:  third event\n",
        )
        .as_bytes();
        let (result, events, last, _) = decode_chunks(&[input], 1024);
        result.unwrap();
        assert_eq!(
            events,
            [
                ev(None, "first event", Some("1")),
                ev(None, "second event", None)
            ]
        );
        assert_eq!(last, None);
        // With the missing blank line, the third event keeps one of its two spaces.
        let mut ended = input.to_vec();
        ended.push(b'\n');
        assert_eq!(decode(&ended)[2], ev(None, " third event", None));
    }

    #[test]
    fn spec_empty_data_example() {
        assert_eq!(
            decode(b"data\n\ndata\ndata\n\ndata:"),
            [ev(None, "", None), ev(None, "\n", None)]
        );
    }

    #[test]
    fn spec_space_example() {
        assert_eq!(
            decode(b"data:test\n\ndata: test\n\n"),
            [ev(None, "test", None), ev(None, "test", None)]
        );
    }

    #[test]
    fn every_line_ending() {
        let expected = [ev(Some("a"), "1\n2", Some("7")), ev(None, "3", Some("7"))];
        for ending in ["\n", "\r", "\r\n"] {
            let input = [
                "event: a", "data: 1", "data: 2", "id: 7", "", "data: 3", "", "",
            ]
            .join(ending);
            assert_eq!(decode(input.as_bytes()), expected, "ending {ending:?}");
        }
        let mixed = "event: a\r\ndata: 1\rdata: 2\nid: 7\r\r\ndata: 3\n\r";
        assert_eq!(decode(mixed.as_bytes()), expected);
        // CR CR is two line ends and LF CR is two line ends.
        assert_eq!(decode(b"data: x\r\r"), [ev(None, "x", None)]);
        assert_eq!(decode(b"data: x\n\r"), [ev(None, "x", None)]);
        // CR LF LF is two line ends; CR LF CR LF too.
        assert_eq!(decode(b"data: x\r\n\n"), [ev(None, "x", None)]);
        assert_eq!(decode(b"data: x\r\n\r\n"), [ev(None, "x", None)]);
    }

    #[test]
    fn crlf_split_across_chunks() {
        let (result, events, _, _) = decode_chunks(&[b"data: a\r", b"\ndata: b\r\n\r\n"], 1024);
        result.unwrap();
        assert_eq!(events, [ev(None, "a\nb", None)]);
        // An empty chunk between CR and LF changes nothing.
        let (result, events, _, _) =
            decode_chunks(&[b"data: a\r", b"", b"\n", b"data: b\n\n"], 1024);
        result.unwrap();
        assert_eq!(events, [ev(None, "a\nb", None)]);
        // A CR ending a chunk followed by something else is still a line end.
        let (result, events, _, _) = decode_chunks(&[b"data: a\r", b"data: b\r", b"\r"], 1024);
        result.unwrap();
        assert_eq!(events, [ev(None, "a\nb", None)]);
    }

    #[test]
    fn rich_stream_whole() {
        let (result, events, last, retry) = decode_chunks(&[RICH.as_bytes()], 1024);
        result.unwrap();
        assert_eq!(events, rich_events());
        assert_eq!(last.as_deref(), Some("s1-9"));
        assert_eq!(retry, Some(Duration::from_millis(500)));
    }

    #[test]
    fn rich_stream_at_every_split() {
        let (result, events, _, _) = assert_split_invariant(RICH.as_bytes(), 1024);
        result.unwrap();
        assert_eq!(events, rich_events());
    }

    #[test]
    fn errors_at_every_split() {
        let (result, events, _, _) = assert_split_invariant(RICH.as_bytes(), 40);
        assert_eq!(result, Err(SseError::TooLarge { limit: 40 }));
        assert_eq!(events, [ev(None, "", Some("s1-0"))]);
        let (result, events, _, _) =
            assert_split_invariant(b"data: ok\n\ndata: \xC3\x28\n\ndata: later\n\n", 1024);
        assert_eq!(result, Err(SseError::InvalidUtf8));
        assert_eq!(events, [ev(None, "ok", None)]);
    }

    #[test]
    fn priming_event() {
        let (result, events, last, retry) =
            decode_chunks(&[b"id: s1-0\nretry: 500\ndata:\n\n"], 1024);
        result.unwrap();
        assert_eq!(events, [ev(None, "", Some("s1-0"))]);
        assert_eq!(last.as_deref(), Some("s1-0"));
        assert_eq!(retry, Some(Duration::from_millis(500)));
    }

    #[test]
    fn bom_is_skipped_once() {
        assert_eq!(decode(b"\xEF\xBB\xBFdata: a\n\n"), [ev(None, "a", None)]);
        let (result, events, _, _) = decode_chunks(&[b"\xEF", b"\xBB", b"\xBFdata: a\n\n"], 1024);
        result.unwrap();
        assert_eq!(events, [ev(None, "a", None)]);
        // A second BOM belongs to the field name, so the line is an unknown field.
        assert_eq!(decode(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: a\n\n"), []);
        // A partial BOM is kept as text, here invalid UTF-8.
        let (result, _, _, _) = assert_split_invariant(b"\xEF\xBBdata: a\n\n", 1024);
        assert_eq!(result, Err(SseError::InvalidUtf8));
        // A BOM-like start that is valid UTF-8 (U+FEC0) is a field name.
        assert_eq!(
            decode("\u{FEC0}\ndata: a\n\n".as_bytes()),
            [ev(None, "a", None)]
        );
    }

    #[test]
    fn comments_are_ignored() {
        assert_eq!(
            decode(b": hello\ndata: a\n:\n: data: b\n\n: bye\n\n"),
            [ev(None, "a", None)]
        );
    }

    #[test]
    fn field_parsing() {
        assert_eq!(decode(b"data:  two\n\n"), [ev(None, " two", None)]);
        assert_eq!(decode(b"data: a:b: c\n\n"), [ev(None, "a:b: c", None)]);
        assert_eq!(decode(b"data\n\n"), [ev(None, "", None)]);
        assert_eq!(decode(b"DATA: x\ndata : y\nunknown\n\n"), []);
        assert_eq!(decode(b"data:\tx \n\n"), [ev(None, "\tx ", None)]);
    }

    #[test]
    fn event_type_resets_after_each_blank_line() {
        assert_eq!(
            decode(
                b"event: update\ndata: x\n\ndata: y\n\nevent: a\n\ndata: z\n\nevent:\ndata: w\n\n"
            ),
            [
                ev(Some("update"), "x", None),
                ev(None, "y", None),
                ev(None, "z", None),
                ev(None, "w", None),
            ]
        );
        assert_eq!(
            decode(b"event: a\nevent: b\ndata: x\n\n"),
            [ev(Some("b"), "x", None)]
        );
    }

    #[test]
    fn id_with_nul_is_ignored() {
        let (result, events, last, _) =
            decode_chunks(&[b"id: 1\ndata: a\n\nid: a\0b\ndata: x\n\n"], 1024);
        result.unwrap();
        assert_eq!(events, [ev(None, "a", Some("1")), ev(None, "x", Some("1"))]);
        assert_eq!(last.as_deref(), Some("1"));
    }

    #[test]
    fn empty_id_clears() {
        let (result, events, last, _) =
            decode_chunks(&[b"id: 1\ndata: a\n\nid:\ndata: b\n\n"], 1024);
        result.unwrap();
        assert_eq!(events, [ev(None, "a", Some("1")), ev(None, "b", None)]);
        assert_eq!(last, None);
    }

    #[test]
    fn last_event_id_tracking() {
        let mut decoder = SseDecoder::new(1024);
        let mut out = Vec::new();
        assert_eq!(decoder.last_event_id(), None);
        decoder.feed(b"id: 1\ndata: a\n", &mut out).unwrap();
        // The id takes effect only at the blank line.
        assert_eq!(decoder.last_event_id(), None);
        decoder.feed(b"\n", &mut out).unwrap();
        assert_eq!(decoder.last_event_id(), Some("1"));
        // Events without an id keep the previous one.
        decoder.feed(b"data: b\n\n", &mut out).unwrap();
        assert_eq!(decoder.last_event_id(), Some("1"));
        // A blank line with no data still updates it.
        decoder.feed(b"id: 2\n\n", &mut out).unwrap();
        assert_eq!(decoder.last_event_id(), Some("2"));
        decoder.feed(b"id: 3\ndata: c\n\n", &mut out).unwrap();
        assert_eq!(decoder.last_event_id(), Some("3"));
        // An id in an unfinished event is not yet the last one.
        decoder.feed(b"id: 4\ndata: d\n", &mut out).unwrap();
        assert_eq!(decoder.last_event_id(), Some("3"));
        assert_eq!(
            out,
            [
                ev(None, "a", Some("1")),
                ev(None, "b", Some("1")),
                ev(None, "c", Some("3")),
            ]
        );
    }

    #[test]
    fn retry_values() {
        let retry = |input: &[u8]| decode_chunks(&[input], 1024).3;
        assert_eq!(retry(b"retry: 1500\n"), Some(Duration::from_millis(1500)));
        assert_eq!(retry(b"retry:0\n"), Some(Duration::ZERO));
        assert_eq!(retry(b"retry: 12a\n"), None);
        assert_eq!(
            retry(b"retry: 100\nretry: 12a\n"),
            Some(Duration::from_millis(100))
        );
        for bad in [
            &b"retry:\n"[..],
            b"retry\n",
            b"retry: -1\n",
            b"retry: +5\n",
            b"retry:  5\n",
            b"retry: 5 \n",
            b"retry: 1.5\n",
            b"retry: 99999999999999999999999\n",
            "retry: \u{0661}\n".as_bytes(),
        ] {
            assert_eq!(retry(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        // The retry field takes effect at once, without a blank line, and dispatches nothing.
        let (result, events, _, retry) = decode_chunks(&[b"retry: 7"], 1024);
        result.unwrap();
        assert_eq!((events, retry), (vec![], None));
        let (_, events, _, retry) = decode_chunks(&[b"retry: 7\r"], 1024);
        assert_eq!((events, retry), (vec![], Some(Duration::from_millis(7))));
    }

    #[test]
    fn unfinished_event_is_not_dispatched() {
        assert_eq!(decode(b"data: a\n\ndata: b\n"), [ev(None, "a", None)]);
        assert_eq!(decode(b"data: a\n\ndata: b"), [ev(None, "a", None)]);
        assert_eq!(
            decode(b"data: a\n\nevent: x\nid: 9\n"),
            [ev(None, "a", None)]
        );
    }

    #[test]
    fn data_event_at_the_limit() {
        // One line of exactly 64 bytes fits; 65 do not.
        let line = format!("data:{}", "x".repeat(59));
        assert_eq!(line.len(), 64);
        let input = format!("{line}\n\n");
        let (result, events, _, _) = assert_split_invariant(input.as_bytes(), 64);
        result.unwrap();
        assert_eq!(events, [ev(None, &"x".repeat(59), None)]);
        let input = format!("{line}x\n\n");
        let (result, events, _, _) = decode_chunks(&[input.as_bytes()], 64);
        assert_eq!(result, Err(SseError::TooLarge { limit: 64 }));
        assert_eq!(events, []);
    }

    #[test]
    fn multi_line_data_at_the_limit() {
        // "aaaaaaaaaa\n" (11 bytes of data) plus a 9-byte line is 20.
        let ok = b"data:aaaaaaaaaa\ndata:aaaa\n\n";
        let (result, events, _, _) = assert_split_invariant(ok, 20);
        result.unwrap();
        assert_eq!(events, [ev(None, "aaaaaaaaaa\naaaa", None)]);
        let too_long = b"data:aaaaaaaaaa\ndata:aaaaa\n\n";
        let (result, _, _, _) = assert_split_invariant(too_long, 20);
        assert_eq!(result, Err(SseError::TooLarge { limit: 20 }));
    }

    #[test]
    fn long_data_event_is_too_large() {
        let mut decoder = SseDecoder::new(1000);
        let mut out = Vec::new();
        let mut result = Ok(());
        for _ in 0..200 {
            result = decoder.feed(b"data: 0123456789\n", &mut out);
            assert!(decoder.data.len() + decoder.line.len() <= 1000);
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(SseError::TooLarge { limit: 1000 }));
        assert_eq!(out, []);
        // The decoder stays failed.
        assert_eq!(
            decoder.feed(b"\n", &mut out),
            Err(SseError::TooLarge { limit: 1000 })
        );
        assert_eq!(out, []);
    }

    #[test]
    fn the_limit_is_per_event() {
        let event = format!("data: {}\n\n", "y".repeat(90));
        let input = event.repeat(50);
        let (result, events, _, _) = decode_chunks(&[input.as_bytes()], 100);
        result.unwrap();
        assert_eq!(events.len(), 50);
    }

    #[test]
    fn long_line_in_small_chunks_is_too_large() {
        for prefix in [&b"data: "[..], b": comment ", b"id: ", b""] {
            let mut decoder = SseDecoder::new(1024);
            let mut out = Vec::new();
            decoder.feed(prefix, &mut out).unwrap();
            let mut fed = prefix.len();
            let result = loop {
                let result = decoder.feed(b"xxxxxxx", &mut out);
                if result.is_err() {
                    break result;
                }
                fed += 7;
                assert!(decoder.line.len() <= 1024);
                assert!(fed < 2048, "no error after {fed} bytes");
            };
            assert_eq!(result, Err(SseError::TooLarge { limit: 1024 }));
            assert!(fed <= 1024 && fed + 7 > 1024);
            assert_eq!(out, []);
        }
    }

    #[test]
    fn long_line_in_one_chunk_is_too_large() {
        let mut input = b"data: ".to_vec();
        input.resize(100_000, b'z');
        let (result, _, _, _) = decode_chunks(&[&input], 1024);
        assert_eq!(result, Err(SseError::TooLarge { limit: 1024 }));
    }

    #[test]
    fn zero_limit_allows_only_blank_lines() {
        let (result, _, _, _) = decode_chunks(&[b"\n\r\n\r"], 0);
        result.unwrap();
        let (result, _, _, _) = decode_chunks(&[b"\n:"], 0);
        assert_eq!(result, Err(SseError::TooLarge { limit: 0 }));
    }

    #[test]
    fn invalid_utf8() {
        let (result, _, _, _) = decode_chunks(&[b"data: \xFF\n\n"], 1024);
        assert_eq!(result, Err(SseError::InvalidUtf8));
        let (result, _, _, _) = decode_chunks(&[b": \xC0\n"], 1024);
        assert_eq!(result, Err(SseError::InvalidUtf8));
        // A character split across chunks is fine.
        let text = "data: é€🎉\n\n".as_bytes();
        let (result, events, _, _) = assert_split_invariant(text, 1024);
        result.unwrap();
        assert_eq!(events, [ev(None, "é€🎉", None)]);
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            SseError::TooLarge { limit: 8 }.to_string(),
            "an SSE event or line exceeds the limit of 8 bytes"
        );
        assert_eq!(
            SseError::InvalidUtf8.to_string(),
            "the SSE stream is not valid UTF-8"
        );
    }
}
