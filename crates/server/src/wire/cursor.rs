//! Opaque, stable list cursors: a cursor names the last item of the page it ends (by its sorted
//! key), so items added or removed elsewhere do not shift later pages.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use modelctx_types::{ErrorObject, JsonObject};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ops::Bound;

use super::invalid_params;

/// What every cursor of this server starts with (a version, should the format change).
const PREFIX: &str = "c1";
/// The longest cursor accepted.
const MAX_LEN: usize = 8192;

/// The cursor after the item with key `key`.
pub(crate) fn encode(key: &str) -> String {
    format!("{PREFIX}{}", URL_SAFE_NO_PAD.encode(key))
}

/// The key a cursor names; `None` for a cursor this server never made.
pub(crate) fn decode(cursor: &str) -> Option<String> {
    if cursor.len() > MAX_LEN {
        return None;
    }
    let bytes = URL_SAFE_NO_PAD.decode(cursor.strip_prefix(PREFIX)?).ok()?;
    String::from_utf8(bytes).ok()
}

/// One page of a list sorted by key: the items after the cursor's key (`params.cursor`), and
/// the next cursor.
pub(crate) fn page<'a, T>(
    items: &'a BTreeMap<String, T>,
    params: &JsonObject,
    size: usize,
) -> Result<(Vec<&'a T>, Option<String>), ErrorObject> {
    let after = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(cursor)) => Some(
            decode(cursor).ok_or_else(|| invalid_params(format!("invalid cursor: {cursor:?}")))?,
        ),
        Some(_) => return Err(invalid_params("the cursor must be a string")),
    };
    let range = match &after {
        Some(key) => items.range::<String, _>((Bound::Excluded(key), Bound::Unbounded)),
        None => items.range::<String, _>(..),
    };
    let mut page: Vec<(&String, &T)> = range.take(size.max(1) + 1).collect();
    let next = (page.len() > size.max(1)).then(|| {
        page.truncate(size.max(1));
        encode(page.last().map(|(k, _)| k.as_str()).unwrap_or_default())
    });
    Ok((page.into_iter().map(|(_, v)| v).collect(), next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_foreign_ones_are_refused() {
        for key in ["", "echo", "zürich/ü", "a b"] {
            assert_eq!(decode(&encode(key)).as_deref(), Some(key));
        }
        for bad in ["", "c", "x1ZWNobw", "c1!!", "c1/w"] {
            assert_eq!(decode(bad), None, "{bad}");
        }
    }
}
