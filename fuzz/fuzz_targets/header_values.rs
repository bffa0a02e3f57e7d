//! Attacker-controlled text the HTTP layer parses: `Mcp-*` header values (`=?base64?...?=`) and
//! `Last-Event-ID`. Nothing panics; what decodes re-encodes to a value that decodes the same;
//! an event id that parses prints back to the same text.

#![no_main]

use libfuzzer_sys::fuzz_target;
use modelctx_http::event_store::EventId;
use modelctx_http::headers::{decode_value, encode_value};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(decoded) = decode_value(text) {
        let encoded = encode_value(&decoded);
        assert_eq!(decode_value(&encoded).ok().as_deref(), Some(decoded.as_str()));
    }
    let encoded = encode_value(text);
    assert_eq!(decode_value(&encoded).ok().as_deref(), Some(text), "{encoded:?}");
    if let Ok(id) = text.parse::<EventId>() {
        assert_eq!(id.to_string(), text);
    }
});
