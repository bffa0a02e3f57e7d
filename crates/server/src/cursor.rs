//! Opaque, stable list cursors: a cursor names the last item of the page it ends (by its sorted
//! key), so items added or removed elsewhere do not shift later pages.

/// The cursor after the item with key `key`.
pub(crate) fn encode(key: &str) -> String {
    let mut out = String::with_capacity(key.len() * 2 + 2);
    out.push_str("c1");
    for byte in key.bytes() {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    out
}

/// The key a cursor names; `None` for a cursor this server never made.
pub(crate) fn decode(cursor: &str) -> Option<String> {
    let hex = cursor.strip_prefix("c1")?.as_bytes();
    if hex.len() % 2 != 0 || hex.len() > 8192 {
        return None;
    }
    let bytes: Option<Vec<u8>> = hex
        .chunks(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect();
    String::from_utf8(bytes?).ok()
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        for key in ["", "echo", "zürich/ü", "a b"] {
            assert_eq!(decode(&encode(key)).as_deref(), Some(key));
        }
        for bad in ["", "c", "c1f", "c1zz", "x1aa", "c1ff"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
