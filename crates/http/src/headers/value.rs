//! The header form of `Mcp-Name` and `Mcp-Param-{Name}` values: plain or `=?base64?…?=`, and
//! text from a peer made safe to show.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

const SENTINEL_PREFIX: &str = "=?base64?";
const SENTINEL_SUFFIX: &str = "?=";
/// Escaped text in error messages is cut after this many characters.
const MAX_SHOWN_CHARS: usize = 120;

/// The header form of `value` for `Mcp-Name` and `Mcp-Param-{Name}`.
///
/// The value goes as is when it is plain header-safe: only printable ASCII (`0x20..=0x7E`), no
/// leading or trailing space, and not itself of the sentinel shape (starting with `=?base64?` and
/// ending with `?=`). Anything else (non-ASCII, a control character including tab, CR and LF,
/// leading or trailing whitespace, or a literal that looks like the sentinel) goes as
/// `=?base64?{base64}?=`, using the standard alphabet with `=` padding over the UTF-8 bytes. The
/// empty string goes as an empty value.
///
/// ```
/// use modelctx_http::headers::encode_value;
/// assert_eq!(encode_value("us-west1"), "us-west1");
/// assert_eq!(encode_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
/// assert_eq!(encode_value("=?base64?literal?="), "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
/// ```
pub fn encode_value(value: &str) -> String {
    if is_plain_safe(value) && !looks_like_sentinel(value) {
        value.to_owned()
    } else {
        format!("{SENTINEL_PREFIX}{}{SENTINEL_SUFFIX}", BASE64.encode(value))
    }
}

/// The text a `Mcp-Name` or `Mcp-Param-{Name}` header value carries.
///
/// A value of the form `=?base64?…?=` (markers exactly so, lowercase) is decoded: the payload must
/// be canonical standard base64 (padding included) of UTF-8 text. Any other value is the text
/// itself; `=?BASE64?…?=` or a value missing one of the markers is such a literal. Either way every
/// byte must be one HTTP allows in a field value: printable ASCII, space or tab.
///
/// The value is taken as received: trim optional whitespace around it first, as an HTTP parser
/// does ([`check_request`](super::check_request) does).
pub fn decode_value(value: &str) -> Result<String, ValueDecodeError> {
    decode_bytes(value.as_bytes()).map(Cow::into_owned)
}

/// Why a header value could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueDecodeError {
    /// A byte HTTP does not allow in a field value: field values hold printable ASCII
    /// (`0x21..=0x7E`), space and horizontal tab only, so CR, LF, other control characters and
    /// raw non-ASCII bytes are rejected. Text outside that set travels base64-encoded.
    #[error(
        "byte 0x{byte:02x} at position {position} is not allowed in a header value (only printable \
         ASCII, space and tab; other text must be sent as =?base64?...?=)"
    )]
    InvalidByte {
        /// Offset of the byte in the value.
        position: usize,
        /// The byte.
        byte: u8,
    },
    /// The value has the `=?base64?…?=` form but its payload is not canonical standard base64
    /// with padding.
    #[error("the =?base64?...?= payload is not valid padded standard base64: {detail}")]
    InvalidBase64 {
        /// What is wrong with the payload.
        detail: String,
    },
    /// The base64 payload decodes to bytes that are not UTF-8.
    #[error("the =?base64?...?= payload does not decode to UTF-8 text")]
    NotUtf8,
}

pub(super) fn is_plain_safe(value: &str) -> bool {
    value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && !value.starts_with(' ')
        && !value.ends_with(' ')
}

fn looks_like_sentinel(value: &str) -> bool {
    value.starts_with(SENTINEL_PREFIX) && value.ends_with(SENTINEL_SUFFIX)
}

/// Whether RFC 9110 allows `byte` in a field value (`field-vchar`, SP, HTAB), leaving out
/// `obs-text`.
fn is_field_byte(byte: u8) -> bool {
    byte == b'\t' || (0x20..=0x7e).contains(&byte)
}

/// Checks that every byte is allowed in a field value and returns the bytes as text.
pub(super) fn field_text(raw: &[u8]) -> Result<&str, ValueDecodeError> {
    if let Some(position) = raw.iter().position(|&b| !is_field_byte(b)) {
        return Err(ValueDecodeError::InvalidByte {
            position,
            byte: raw[position],
        });
    }
    // Every byte is ASCII, hence this is UTF-8.
    std::str::from_utf8(raw).map_err(|e| ValueDecodeError::InvalidByte {
        position: e.valid_up_to(),
        byte: raw[e.valid_up_to()],
    })
}

pub(super) fn decode_bytes(raw: &[u8]) -> Result<Cow<'_, str>, ValueDecodeError> {
    let text = field_text(raw)?;
    if !looks_like_sentinel(text) {
        return Ok(Cow::Borrowed(text));
    }
    // `=?base64?=` starts and ends with the markers, overlapping: no payload fits between them.
    if text.len() < SENTINEL_PREFIX.len() + SENTINEL_SUFFIX.len() {
        return Err(ValueDecodeError::InvalidBase64 {
            detail: "the markers overlap, leaving no payload".to_owned(),
        });
    }
    let payload = &text[SENTINEL_PREFIX.len()..text.len() - SENTINEL_SUFFIX.len()];
    let bytes = BASE64
        .decode(payload)
        .map_err(|e| ValueDecodeError::InvalidBase64 {
            detail: e.to_string(),
        })?;
    String::from_utf8(bytes)
        .map(Cow::Owned)
        .map_err(|_| ValueDecodeError::NotUtf8)
}

/// Trims the optional whitespace (SP, HTAB) an HTTP parser strips around a field value.
pub(super) fn trim_ows(raw: &[u8]) -> &[u8] {
    let start = raw
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(raw.len());
    let end = raw
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    &raw[start..end]
}

/// Text from a peer, made safe to show: control characters (CR and LF among them) become escapes
/// such as `\n` or `\u{1b}`, and long text is cut with `…`.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_SHOWN_CHARS + 8));
    for (i, c) in text.chars().enumerate() {
        if i == MAX_SHOWN_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    // --- encode_value / decode_value ------------------------------------------------------

    #[test]
    fn encode_matches_the_spec_examples() {
        assert_eq!(encode_value("us-west1"), "us-west1");
        assert_eq!(
            encode_value("Hello, 世界"),
            "=?base64?SGVsbG8sIOS4lueVjA==?="
        );
        assert_eq!(encode_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(encode_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(
            encode_value("=?base64?literal?="),
            "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="
        );
    }

    #[test]
    fn encode_keeps_plain_values_plain() {
        for plain in [
            "",
            "us west 1",
            "file:///projects/myapp/config.json",
            "a!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~z",
            "=?base64?",
            "=?base64?abc",
            "abc?=",
            "=?BASE64?SGk=?=",
        ] {
            assert_eq!(encode_value(plain), plain, "{plain:?}");
        }
    }

    #[test]
    fn encode_wraps_unsafe_values() {
        for unsafe_value in [
            " leading",
            "trailing ",
            "\tindented",
            "in\tside",
            "cr\rlf\n",
            "line1\r\nline2",
            "nul\0",
            "del\u{7f}",
            "é",
            "😀",
            "=?base64?=",
            "=?base64??=",
            "=?base64?SGk=?=",
        ] {
            let encoded = encode_value(unsafe_value);
            assert!(
                encoded.starts_with("=?base64?") && encoded.ends_with("?="),
                "{unsafe_value:?}"
            );
            assert!(HeaderValue::from_str(&encoded).is_ok());
            assert_eq!(decode_value(&encoded).unwrap(), unsafe_value);
        }
    }

    #[test]
    fn round_trips() {
        for value in [
            "",
            "plain",
            "Hello, 世界",
            "  both  ",
            " ",
            "\u{0}\u{1}\u{1f}\u{7f}\u{80}\u{9f}",
            "tab\there",
            "a\r\nb",
            "=?base64?literal?=",
            "=?base64??=",
            "emoji 🦀 crab",
            "ünïcödé",
        ] {
            let encoded = encode_value(value);
            assert!(
                encoded.bytes().all(|b| (0x20..=0x7e).contains(&b)),
                "{encoded}"
            );
            assert_eq!(decode_value(&encoded).unwrap(), value, "{value:?}");
        }
    }

    #[test]
    fn decode_takes_literals_as_they_are() {
        assert_eq!(decode_value("us-west1").unwrap(), "us-west1");
        assert_eq!(decode_value("in\tside").unwrap(), "in\tside");
        // Missing suffix, missing prefix, uppercase markers: literals.
        assert_eq!(
            decode_value("=?base64?SGVsbG8=").unwrap(),
            "=?base64?SGVsbG8="
        );
        assert_eq!(decode_value("SGVsbG8=?=").unwrap(), "SGVsbG8=?=");
        assert_eq!(
            decode_value("=?BASE64?SGVsbG8=?=").unwrap(),
            "=?BASE64?SGVsbG8=?="
        );
        assert_eq!(decode_value("").unwrap(), "");
    }

    #[test]
    fn decode_reads_the_base64_form() {
        assert_eq!(decode_value("=?base64?SGVsbG8=?=").unwrap(), "Hello");
        assert_eq!(decode_value("=?base64??=").unwrap(), "");
        assert_eq!(
            decode_value("=?base64?SGVsbG8sIOS4lueVjA==?=").unwrap(),
            "Hello, 世界"
        );
    }

    #[test]
    fn decode_rejects_bad_base64() {
        for bad in [
            "=?base64?SGVsbG8?=",     // padding missing
            "=?base64?SGVs!!!bG8=?=", // not in the alphabet
            "=?base64?SGVsbG8==?=",   // too much padding
            "=?base64?_-8=?=",        // URL-safe alphabet
            "=?base64?SGVsbG9=?=",    // non-zero trailing bits
            "=?base64?SGVs bG8=?=",   // inner space
            "=?base64?=",             // markers overlap
        ] {
            assert!(
                matches!(
                    decode_value(bad),
                    Err(ValueDecodeError::InvalidBase64 { .. })
                ),
                "{bad}: {:?}",
                decode_value(bad)
            );
        }
    }

    #[test]
    fn decode_rejects_non_utf8_payloads() {
        assert_eq!(
            decode_value("=?base64?/w==?="),
            Err(ValueDecodeError::NotUtf8)
        );
        assert_eq!(
            decode_value("=?base64?wyg=?="),
            Err(ValueDecodeError::NotUtf8)
        );
    }

    #[test]
    fn decode_rejects_bytes_http_does_not_allow() {
        assert_eq!(
            decode_value("a\rb"),
            Err(ValueDecodeError::InvalidByte {
                position: 1,
                byte: b'\r'
            })
        );
        assert_eq!(
            decode_value("ab\n"),
            Err(ValueDecodeError::InvalidByte {
                position: 2,
                byte: b'\n'
            })
        );
        assert_eq!(
            decode_value("\0"),
            Err(ValueDecodeError::InvalidByte {
                position: 0,
                byte: 0
            })
        );
        assert_eq!(
            decode_value("x\u{7f}"),
            Err(ValueDecodeError::InvalidByte {
                position: 1,
                byte: 0x7f
            })
        );
        assert_eq!(
            decode_value("é"),
            Err(ValueDecodeError::InvalidByte {
                position: 0,
                byte: 0xc3
            })
        );
        // Also inside the base64 form.
        assert!(matches!(
            decode_value("=?base64?SGVs\nbG8=?="),
            Err(ValueDecodeError::InvalidByte { position: 13, .. })
        ));
    }

    #[test]
    fn escape_hides_control_characters_and_cuts() {
        assert_eq!(escape("a\r\nb\tc\u{1b}"), "a\\r\\nb\\tc\\u{1b}");
        assert_eq!(escape("\u{2028}"), "\\u{2028}");
        assert_eq!(escape("世界"), "世界");
        let long = "x".repeat(500);
        let shown = escape(&long);
        assert_eq!(shown.chars().count(), MAX_SHOWN_CHARS + 1);
        assert!(shown.ends_with('…'));
    }

    #[test]
    fn trim_ows_strips_spaces_and_tabs_only() {
        assert_eq!(trim_ows(b"  a b \t"), b"a b");
        assert_eq!(trim_ows(b" \t "), b"");
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b"x"), b"x");
    }
}
