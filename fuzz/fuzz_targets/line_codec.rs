//! Feeds arbitrary bytes, in arbitrary pieces, through the stdio `LineCodec` and checks its
//! items against a plain reference: split at `\n`, drop one `\r` before it, too long if the line
//! is longer than the limit, skip blank lines, invalid UTF-8 reported with its valid prefix.
//! Also: the buffer never holds more than the limit plus one piece, and nothing panics.
//!
//! Input: byte 0 is the limit (1 to 64), byte 1 the piece size (1 to 256); the rest is the stream.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use modelctx_stdio::{LineCodec, LineError};
use tokio_util::codec::Decoder;

#[derive(Debug, PartialEq)]
enum Item {
    Line(Vec<u8>),
    TooLong,
    Utf8(usize),
}

fn reference(input: &[u8], max: usize) -> Vec<Item> {
    let mut items = Vec::new();
    let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    // `split` gives an empty last piece after a final newline: there is no line there.
    if lines.last().is_some_and(|l| l.is_empty()) {
        lines.pop();
    }
    for mut line in lines {
        if let Some(stripped) = line.strip_suffix(b"\r") {
            line = stripped;
        }
        if line.len() > max {
            items.push(Item::TooLong);
        } else if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        } else {
            match std::str::from_utf8(line) {
                Ok(_) => items.push(Item::Line(line.to_vec())),
                Err(e) => items.push(Item::Utf8(e.valid_up_to())),
            }
        }
    }
    items
}

fuzz_target!(|data: &[u8]| {
    let [limit, piece, stream @ ..] = data else {
        return;
    };
    let max = usize::from(*limit % 64) + 1;
    let piece = usize::from(*piece) + 1;
    let mut codec = LineCodec::with_max_line_length(max);
    let mut buf = BytesMut::new();
    let mut items = Vec::new();
    let mut push = |item: Result<modelctx_stdio::Line, LineError>| {
        items.push(match item {
            Ok(line) => Item::Line(line.as_bytes().to_vec()),
            Err(LineError::TooLong { .. }) => Item::TooLong,
            Err(LineError::InvalidUtf8 { valid_up_to }) => Item::Utf8(valid_up_to),
            Err(other) => panic!("unexpected error {other:?}"),
        })
    };
    for chunk in stream.chunks(piece) {
        buf.extend_from_slice(chunk);
        while let Some(item) = codec.decode(&mut buf).expect("decoding has no I/O errors") {
            push(item);
        }
        assert!(buf.len() <= max + 2 + piece, "buffer grew to {}", buf.len());
    }
    while let Some(item) = codec.decode_eof(&mut buf).expect("decoding has no I/O errors") {
        push(item);
    }
    assert!(buf.is_empty());
    assert_eq!(items, reference(stream, max));
});
