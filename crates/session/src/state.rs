//! Integrity-protected `requestState` for multi round-trip requests (protocol 2026-07-28).
//!
//! A server answering `tools/call`, `prompts/get` or `resources/read` with
//! `"resultType":"input_required"` hands the client an opaque `requestState`, which the client
//! echoes verbatim in `params.requestState` when it retries the request with
//! `params.inputResponses`. The protocol makes that string attacker-controlled: the server must
//! integrity-protect it. [`StateSealer::seal`] produces such a string and [`StateSealer::open`]
//! checks and reads it back.
//!
//! # What a state is bound to
//!
//! A sealed state carries, under an HMAC-SHA256 of a [`StateKey`]:
//!
//! - an expiry, `ttl` after sealing ([`StateSealer::with_ttl`], [`DEFAULT_TTL`] by default);
//! - the principal the request was made by (or none), the method, and a SHA-256 digest of the
//!   request params (see below), all from a [`Binding`];
//! - the keys of the input requests it was issued with (`pending`), to check the retry answers
//!   them ([`OpenedState::missing`]);
//! - an opaque payload of the caller's (for example where to resume).
//!
//! [`StateSealer::open`] rejects, in this order: a state longer than [`MAX_STATE_LEN`]
//! ([`StateError::TooLong`]), one that does not have the shape below ([`StateError::Malformed`]),
//! one sealed under a key id the sealer does not know ([`StateError::UnknownKey`]), one whose MAC
//! does not verify ([`StateError::BadSignature`], checked in constant time before the body is
//! even decoded), then one that has expired, was issued to another principal, for another
//! method, or for other params. Every rejection maps to JSON-RPC `-32602` (invalid params):
//! [`StateError::to_error_object`].
//!
//! # Params digest
//!
//! The digest is SHA-256 over a canonical JSON encoding of the request params, with the top-level
//! members `_meta`, `inputResponses` and `requestState` removed, so the first request and its
//! retries give the same digest. The canonical encoding writes object members sorted by the
//! UTF-8 bytes of their names, no whitespace, and strings and numbers as `serde_json` writes
//! them once parsed into a [`serde_json::Value`] (so `1.0` and `1.00` are the same number, but
//! `1` and `1.0` are not). Absent params digest like `{}`.
//!
//! # Token format
//!
//! ```text
//! v1.<key id>.<base64url-nopad(body)>.<base64url-nopad(mac)>
//! mac = HMAC-SHA256(secret, "v1." + key id + "." + base64url-nopad(body))
//! ```
//!
//! The body is binary, integers big-endian, `str` being a `u16` byte length then UTF-8 bytes:
//!
//! ```text
//! u64   expiry, in seconds since the Unix epoch (the state is rejected from that second on)
//! u8    0: no principal | 1: a principal, followed by its str
//! str   method
//! [32]  params digest
//! u16   number of pending keys, followed by that many str
//! ..    payload: every remaining byte
//! ```
//!
//! # What it does not do
//!
//! - The state is **signed, not encrypted**: the client can read the principal, method and
//!   payload. Do not put secrets in the payload.
//! - A state is not single-use: it opens as many times as asked until it expires. A server that
//!   must not run a step twice tracks that itself (for example with an id in the payload).
//! - Expiry uses the `now` each caller passes in (this module never reads the clock): processes
//!   sharing a key need roughly synchronized clocks.
//! - A [`StateKey`] secret must be dedicated to this use, random and at least 32 bytes; every
//!   process that must accept the states of another shares its key (same id, same secret). To
//!   rotate, seal with a new key and keep accepting the old one with
//!   [`StateSealer::with_previous`] for at least one `ttl`.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use modelctx_types::{ErrorCode, ErrorObject};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// The longest `requestState` [`StateSealer::open`] reads (and [`StateSealer::seal`] writes), in
/// bytes: 64 KiB. With the base64 expansion this leaves a payload of a little under 48 KiB.
pub const MAX_STATE_LEN: usize = 64 * 1024;

/// The most keys a [`StateSealer`] holds: the current key and up to 7 previous keys.
pub const MAX_KEYS: usize = 8;

/// The lifetime of a sealed state unless [`StateSealer::with_ttl`] sets another: 10 minutes.
pub const DEFAULT_TTL: Duration = Duration::from_secs(10 * 60);

/// The shortest secret a [`StateKey`] accepts, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// The longest key id a [`StateKey`] accepts, in bytes.
pub const MAX_KEY_ID_LEN: usize = 64;

/// The token format version, the first dot-separated part of a state.
const VERSION: &str = "v1";

/// The top-level params members left out of the params digest: they change between the first
/// request and its retries.
const UNBOUND_MEMBERS: [&str; 3] = ["_meta", "inputResponses", "requestState"];

/// The length of a SHA-256 digest.
const DIGEST_LEN: usize = 32;

/// The length of an HMAC-SHA256 tag.
const MAC_LEN: usize = 32;

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

/// A secret key with an id, shared by every process that must accept the states sealed with it.
///
/// The id travels in clear in every state, so that a sealer holding several keys (rotation)
/// knows which one to check. [`fmt::Debug`] shows the id only, never the secret.
#[derive(Clone)]
pub struct StateKey {
    id: String,
    /// The HMAC keyed with the secret, cloned for each use.
    mac: HmacSha256,
}

impl StateKey {
    /// A key named `id` (1 to [`MAX_KEY_ID_LEN`] characters of `A-Z`, `a-z`, `0-9`, `_` and `-`)
    /// with a random `secret` of at least [`MIN_SECRET_LEN`] bytes.
    pub fn new(id: impl Into<String>, secret: impl Into<Vec<u8>>) -> Result<Self, KeyError> {
        let id = id.into();
        if !valid_key_id(&id) {
            return Err(KeyError::InvalidId);
        }
        let secret = secret.into();
        let len = secret.len();
        if len < MIN_SECRET_LEN {
            return Err(KeyError::SecretTooShort { len });
        }
        // HMAC accepts keys of any length: this error cannot happen.
        let mac =
            HmacSha256::new_from_slice(&secret).map_err(|_| KeyError::SecretTooShort { len })?;
        Ok(StateKey { id, mac })
    }

    /// The key id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl fmt::Debug for StateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StateKey")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// Whether `id` is a valid key id: 1 to 64 characters of `A-Z`, `a-z`, `0-9`, `_` and `-`.
fn valid_key_id(id: &str) -> bool {
    (1..=MAX_KEY_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An invalid [`StateKey`], or a key a [`StateSealer`] cannot take.
#[non_exhaustive]
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The key id is empty, too long, or has a character other than `A-Z`, `a-z`, `0-9`, `_`
    /// and `-`.
    #[error("a key id must be 1 to {MAX_KEY_ID_LEN} characters of A-Z, a-z, 0-9, `_` and `-`")]
    InvalidId,
    /// The secret is shorter than [`MIN_SECRET_LEN`] bytes.
    #[error("the key secret is {len} bytes long; at least {MIN_SECRET_LEN} are required")]
    SecretTooShort {
        /// The length of the secret given, in bytes.
        len: usize,
    },
    /// The sealer already has a key with this id.
    #[error("the sealer already has a key with id `{id}`")]
    DuplicateId {
        /// The key id.
        id: String,
    },
    /// The sealer already has [`MAX_KEYS`] keys.
    #[error("a sealer holds at most {MAX_KEYS} keys")]
    TooManyKeys,
}

// ---------------------------------------------------------------------------------------------
// Sealer
// ---------------------------------------------------------------------------------------------

/// Seals and opens `requestState` values.
///
/// Seals with the current key; opens states sealed with the current key or with any of the
/// previous keys still accepted (rotation). See the [module documentation](self) for what a
/// state is bound to and its format.
#[derive(Clone, Debug)]
pub struct StateSealer {
    current: StateKey,
    previous: Vec<StateKey>,
    ttl: Duration,
}

impl StateSealer {
    /// A sealer that seals and opens with `current`, with a `ttl` of [`DEFAULT_TTL`].
    pub fn new(current: StateKey) -> Self {
        StateSealer {
            current,
            previous: Vec::new(),
            ttl: DEFAULT_TTL,
        }
    }

    /// Also accepts the states sealed with `key` (a key rotated out), for opening only.
    ///
    /// A sealer holds at most [`MAX_KEYS`] keys in all ([`KeyError::TooManyKeys`]), each with its
    /// own id ([`KeyError::DuplicateId`]).
    pub fn with_previous(mut self, key: StateKey) -> Result<Self, KeyError> {
        if self.key(&key.id).is_some() {
            return Err(KeyError::DuplicateId { id: key.id });
        }
        if 1 + self.previous.len() >= MAX_KEYS {
            return Err(KeyError::TooManyKeys);
        }
        self.previous.push(key);
        Ok(self)
    }

    /// Sets how long a sealed state stays valid (whole seconds, rounded up; [`DEFAULT_TTL`] by
    /// default). Keep it short: a state can be replayed until it expires.
    #[must_use]
    pub fn with_ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The id of the key states are sealed with.
    pub fn current_key_id(&self) -> &str {
        &self.current.id
    }

    /// Seals a state for a request answered with `input_required`.
    ///
    /// `now` is the wall-clock time, passed in by the caller (this module never reads the clock);
    /// `binding` is the request the state answers (its principal, method and params); `pending`
    /// are the keys of the `inputRequests` sent with the state; `payload` is the caller's, read
    /// back by [`StateSealer::open`]: it is signed, **not encrypted**.
    ///
    /// Fails with [`SealError::TooLong`] if the state would be longer than [`MAX_STATE_LEN`]
    /// (a payload of more than a little under 48 KiB), and with [`SealError::UnsupportedParams`]
    /// if the params hold a number `serde_json` cannot represent.
    pub fn seal(
        &self,
        now: SystemTime,
        binding: &Binding<'_>,
        pending: &[&str],
        payload: &[u8],
    ) -> Result<String, SealError> {
        if payload.len() > MAX_STATE_LEN {
            return Err(SealError::TooLong);
        }
        let digest = params_digest(binding.params).ok_or(SealError::UnsupportedParams)?;
        let expiry = unix_secs(now).saturating_add(ceil_secs(self.ttl));

        let mut body = Vec::with_capacity(64 + binding.method.len() + payload.len());
        body.extend_from_slice(&expiry.to_be_bytes());
        match binding.principal {
            None => body.push(0),
            Some(principal) => {
                body.push(1);
                put_str(&mut body, principal)?;
            }
        }
        put_str(&mut body, binding.method)?;
        body.extend_from_slice(&digest);
        let count = u16::try_from(pending.len()).map_err(|_| SealError::TooLong)?;
        body.extend_from_slice(&count.to_be_bytes());
        for key in pending {
            put_str(&mut body, key)?;
        }
        body.extend_from_slice(payload);
        if body.len() > MAX_STATE_LEN {
            return Err(SealError::TooLong);
        }

        let mut state = String::with_capacity(MAX_KEY_ID_LEN + 64 + body.len() / 3 * 4);
        state.push_str(VERSION);
        state.push('.');
        state.push_str(&self.current.id);
        state.push('.');
        URL_SAFE_NO_PAD.encode_string(&body, &mut state);
        let tag = self
            .current
            .mac
            .clone()
            .chain_update(state.as_bytes())
            .finalize()
            .into_bytes();
        state.push('.');
        URL_SAFE_NO_PAD.encode_string(tag, &mut state);
        if state.len() > MAX_STATE_LEN {
            return Err(SealError::TooLong);
        }
        Ok(state)
    }

    /// Checks and reads back a `state` that a retry of the request `binding` echoed.
    ///
    /// `now` is the wall-clock time, passed in by the caller. The checks, in order, are listed
    /// in the [module documentation](self); every failure is an invalid-params error
    /// ([`StateError::to_error_object`]). Check the answers with [`OpenedState::missing`].
    pub fn open(
        &self,
        now: SystemTime,
        binding: &Binding<'_>,
        state: &str,
    ) -> Result<OpenedState, StateError> {
        if state.len() > MAX_STATE_LEN {
            return Err(StateError::TooLong);
        }
        let (signed, mac_b64) = state.rsplit_once('.').ok_or(StateError::Malformed)?;
        let mut parts = signed.split('.');
        let (Some(version), Some(key_id), Some(body_b64), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(StateError::Malformed);
        };
        if version != VERSION || !valid_key_id(key_id) {
            return Err(StateError::Malformed);
        }
        let key = self.key(key_id).ok_or_else(|| StateError::UnknownKey {
            key_id: key_id.to_owned(),
        })?;
        let tag = URL_SAFE_NO_PAD
            .decode(mac_b64)
            .map_err(|_| StateError::Malformed)?;
        if tag.len() != MAC_LEN {
            return Err(StateError::Malformed);
        }
        key.mac
            .clone()
            .chain_update(signed.as_bytes())
            .verify_slice(&tag)
            .map_err(|_| StateError::BadSignature)?;

        let body = URL_SAFE_NO_PAD
            .decode(body_b64)
            .map_err(|_| StateError::Malformed)?;
        let body = Body::decode(&body).ok_or(StateError::Malformed)?;
        if unix_secs(now) >= body.expiry {
            return Err(StateError::Expired);
        }
        if body.principal != binding.principal {
            return Err(StateError::WrongPrincipal);
        }
        if body.method != binding.method {
            return Err(StateError::WrongMethod);
        }
        if params_digest(binding.params) != Some(body.digest) {
            return Err(StateError::ParamsChanged);
        }
        Ok(OpenedState {
            payload: body.payload.to_vec(),
            pending: body.pending.into_iter().map(str::to_owned).collect(),
            key_id: key.id.clone(),
        })
    }

    /// The key with this id, current or previous.
    fn key(&self, id: &str) -> Option<&StateKey> {
        std::iter::once(&self.current)
            .chain(&self.previous)
            .find(|key| key.id == id)
    }
}

/// What a state is bound to: the request it answers.
#[derive(Debug, Clone, Copy)]
pub struct Binding<'a> {
    /// The authenticated principal making the request (for example the OAuth subject), or
    /// `None` when the transport has none. A state opens only for the same principal.
    pub principal: Option<&'a str>,
    /// The request method (`tools/call`, ...).
    pub method: &'a str,
    /// The request params, as received: the retry's may add `_meta`, `inputResponses` and
    /// `requestState` at the top level, which the digest ignores. `None` when absent.
    pub params: Option<&'a RawValue>,
}

/// A state that [`StateSealer::open`] accepted.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedState {
    /// The payload given to [`StateSealer::seal`].
    pub payload: Vec<u8>,
    /// The keys of the input requests the state was issued with.
    pub pending: Vec<String>,
    /// The id of the key the state was sealed with.
    pub key_id: String,
}

impl OpenedState {
    /// The keys in [`OpenedState::pending`] that `answered` lacks, in `pending` order:
    /// `answered` is the keys of the retry's `params.inputResponses` object.
    pub fn missing<'k>(&self, answered: impl IntoIterator<Item = &'k str>) -> Vec<&str> {
        let answered: HashSet<&str> = answered.into_iter().collect();
        self.pending
            .iter()
            .map(String::as_str)
            .filter(|key| !answered.contains(key))
            .collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// Why [`StateSealer::open`] rejected a `requestState`. Every case is an invalid-params error
/// (`-32602`) for the client.
#[non_exhaustive]
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    /// The state does not have the shape of a sealed state.
    #[error("requestState is malformed")]
    Malformed,
    /// The state was sealed with a key this server does not accept (any more).
    #[error("requestState was sealed with unknown key `{key_id}`")]
    UnknownKey {
        /// The key id the state names (a valid key id: safe to show).
        key_id: String,
    },
    /// The state's MAC does not verify: it was altered, or sealed with another secret.
    #[error("requestState failed its integrity check")]
    BadSignature,
    /// The state has expired.
    #[error("requestState has expired")]
    Expired,
    /// The state was issued to another principal.
    #[error("requestState was issued to another principal")]
    WrongPrincipal,
    /// The state was issued for another method.
    #[error("requestState was issued for another method")]
    WrongMethod,
    /// The state was issued for other params.
    #[error("requestState was issued for other params")]
    ParamsChanged,
    /// The state is longer than [`MAX_STATE_LEN`].
    #[error("requestState is longer than {MAX_STATE_LEN} bytes")]
    TooLong,
}

impl StateError {
    /// The JSON-RPC error code: [`ErrorCode::INVALID_PARAMS`] (`-32602`) for every case.
    pub const fn code(&self) -> ErrorCode {
        ErrorCode::INVALID_PARAMS
    }

    /// The error object to answer the request with: [`StateError::code`] and this error's
    /// message.
    pub fn to_error_object(&self) -> ErrorObject {
        ErrorObject::new(self.code(), self.to_string())
    }
}

/// Why [`StateSealer::seal`] could not seal a state. These are the server's own errors, not the
/// client's.
#[non_exhaustive]
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum SealError {
    /// The state would be longer than [`MAX_STATE_LEN`]: the payload (or the pending keys) is
    /// too large.
    #[error("the sealed requestState would be longer than {MAX_STATE_LEN} bytes")]
    TooLong,
    /// The params hold a number `serde_json` cannot represent (such as `1e400`), so they have
    /// no canonical digest.
    #[error("the request params hold a number out of range and cannot be digested")]
    UnsupportedParams,
}

// ---------------------------------------------------------------------------------------------
// Body encoding
// ---------------------------------------------------------------------------------------------

/// Appends `s` as a `u16` big-endian byte length and its bytes.
fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), SealError> {
    let len = u16::try_from(s.len()).map_err(|_| SealError::TooLong)?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// A decoded state body, borrowing from its bytes.
struct Body<'a> {
    expiry: u64,
    principal: Option<&'a str>,
    method: &'a str,
    digest: [u8; DIGEST_LEN],
    pending: Vec<&'a str>,
    payload: &'a [u8],
}

impl<'a> Body<'a> {
    /// Decodes a body; `None` if it does not have the layout of the module documentation.
    fn decode(bytes: &'a [u8]) -> Option<Self> {
        let mut reader = Reader(bytes);
        let expiry = u64::from_be_bytes(reader.array()?);
        let principal = match reader.array::<1>()? {
            [0] => None,
            [1] => Some(reader.str()?),
            _ => return None,
        };
        let method = reader.str()?;
        let digest = reader.array()?;
        let count = u16::from_be_bytes(reader.array()?);
        let pending = (0..count)
            .map(|_| reader.str())
            .collect::<Option<Vec<_>>>()?;
        Some(Body {
            expiry,
            principal,
            method,
            digest,
            pending,
            payload: reader.0,
        })
    }
}

/// Reads a body front to back; every read is `None` past the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn str(&mut self) -> Option<&'a str> {
        let len = u16::from_be_bytes(self.array()?);
        std::str::from_utf8(self.take(len.into())?).ok()
    }
}

// ---------------------------------------------------------------------------------------------
// Time and params digest
// ---------------------------------------------------------------------------------------------

/// Whole seconds since the Unix epoch (0 before it).
fn unix_secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// `duration` in whole seconds, rounded up.
fn ceil_secs(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
}

/// The SHA-256 of the canonical encoding of `params` without its [`UNBOUND_MEMBERS`]; `None` if
/// they do not parse into a [`Value`] (a number out of range).
fn params_digest(params: Option<&RawValue>) -> Option<[u8; DIGEST_LEN]> {
    let mut hasher = HashWriter(Sha256::new());
    match params {
        None => hasher.0.update(b"{}"),
        Some(params) => {
            let mut value: Value = serde_json::from_str(params.get()).ok()?;
            if let Value::Object(members) = &mut value {
                for name in UNBOUND_MEMBERS {
                    members.remove(name);
                }
            }
            write_canonical(&mut hasher, &value).ok()?;
        }
    }
    Some(hasher.0.finalize().into())
}

/// Writes `value` as JSON without whitespace, object members sorted by name (whatever the order
/// of the map: `serde_json`'s `preserve_order` feature may be on).
fn write_canonical<W: io::Write>(out: &mut W, value: &Value) -> io::Result<()> {
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {
            serde_json::to_writer(&mut *out, value)?;
        }
        Value::Array(items) => {
            out.write_all(b"[")?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                write_canonical(out, item)?;
            }
            out.write_all(b"]")?;
        }
        Value::Object(members) => {
            let mut members: Vec<(&String, &Value)> = members.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.write_all(b"{")?;
            for (i, (name, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                serde_json::to_writer(&mut *out, name)?;
                out.write_all(b":")?;
                write_canonical(out, member)?;
            }
            out.write_all(b"}")?;
        }
    }
    Ok(())
}

/// Feeds what is written into a SHA-256.
struct HashWriter(Sha256);

impl io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET_A: &[u8] = b"secret-a-0123456789abcdef0123456789";
    const SECRET_B: &[u8] = b"secret-b-0123456789abcdef0123456789";

    fn t0() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn key(id: &str, secret: &[u8]) -> StateKey {
        StateKey::new(id, secret).unwrap()
    }

    fn sealer_a() -> StateSealer {
        StateSealer::new(key("a", SECRET_A))
    }

    fn raw(json: &str) -> Box<RawValue> {
        RawValue::from_string(json.to_owned()).unwrap()
    }

    const PARAMS: &str = r#"{"name":"deploy","arguments":{"env":"prod","replicas":3}}"#;

    fn binding<'a>(params: &'a RawValue) -> Binding<'a> {
        Binding {
            principal: Some("alice"),
            method: "tools/call",
            params: Some(params),
        }
    }

    /// A state sealed by `sealer_a` at `t0` for `PARAMS`.
    fn sealed() -> String {
        let params = raw(PARAMS);
        sealer_a()
            .seal(t0(), &binding(&params), &["confirm", "region"], b"step-2")
            .unwrap()
    }

    fn open_a(now: SystemTime, state: &str) -> Result<OpenedState, StateError> {
        let params = raw(PARAMS);
        sealer_a().open(now, &binding(&params), state)
    }

    /// Replaces the dot-separated part `index` of `state`.
    fn with_part(state: &str, index: usize, part: &str) -> String {
        let mut parts: Vec<&str> = state.split('.').collect();
        parts[index] = part;
        parts.join(".")
    }

    /// Changes the first character of `part` to another base64url character.
    fn flip_first(part: &str) -> String {
        let replacement = if part.starts_with('A') { "B" } else { "A" };
        format!("{replacement}{}", &part[1..])
    }

    /// A state with a valid MAC under `key` around arbitrary body bytes.
    fn sign_raw(key: &StateKey, body: &[u8]) -> String {
        let signed = format!("v1.{}.{}", key.id, URL_SAFE_NO_PAD.encode(body));
        let tag = key.mac.clone().chain_update(signed.as_bytes()).finalize();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(tag.into_bytes()))
    }

    #[test]
    fn round_trip_preserves_payload_pending_and_key_id() {
        let opened = open_a(t0(), &sealed()).unwrap();
        assert_eq!(opened.payload, b"step-2");
        assert_eq!(opened.pending, ["confirm", "region"]);
        assert_eq!(opened.key_id, "a");
    }

    #[test]
    fn round_trip_without_principal_params_pending_or_payload() {
        let sealer = sealer_a();
        let bind = Binding {
            principal: None,
            method: "prompts/get",
            params: None,
        };
        let state = sealer.seal(t0(), &bind, &[], b"").unwrap();
        let opened = sealer.open(t0(), &bind, &state).unwrap();
        assert!(opened.payload.is_empty());
        assert!(opened.pending.is_empty());
    }

    #[test]
    fn token_has_the_documented_format() {
        let state = sealed();
        let parts: Vec<&str> = state.split('.').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!(parts[0], "v1");
        assert_eq!(parts[1], "a");
        // 32 bytes of HMAC-SHA256 are 43 base64url characters without padding.
        assert_eq!(parts[3].len(), 43);
        for part in &parts[2..] {
            assert!(
                part.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
        }
        let body = URL_SAFE_NO_PAD.decode(parts[2]).unwrap();
        let body = Body::decode(&body).unwrap();
        assert_eq!(body.expiry, 1_800_000_000 + 600);
        assert_eq!(body.principal, Some("alice"));
        assert_eq!(body.method, "tools/call");
        assert_eq!(body.pending, ["confirm", "region"]);
        assert_eq!(body.payload, b"step-2");
    }

    #[test]
    fn tampered_body_is_rejected() {
        let state = sealed();
        let body = state.split('.').nth(2).unwrap();
        let tampered = with_part(&state, 2, &flip_first(body));
        assert_eq!(open_a(t0(), &tampered), Err(StateError::BadSignature));

        // A well-formed body with another expiry, under the original MAC.
        let mut bytes = URL_SAFE_NO_PAD.decode(body).unwrap();
        bytes[..8].copy_from_slice(&u64::MAX.to_be_bytes());
        let forged = with_part(&state, 2, &URL_SAFE_NO_PAD.encode(&bytes));
        assert_eq!(open_a(t0(), &forged), Err(StateError::BadSignature));
    }

    #[test]
    fn tampered_mac_is_rejected() {
        let state = sealed();
        let mac = state.split('.').nth(3).unwrap();
        let tampered = with_part(&state, 3, &flip_first(mac));
        assert_eq!(open_a(t0(), &tampered), Err(StateError::BadSignature));
        // A MAC of the wrong length does not have the shape of a state.
        let short = with_part(&state, 3, &mac[..40]);
        assert_eq!(open_a(t0(), &short), Err(StateError::Malformed));
    }

    #[test]
    fn tampered_key_id_is_rejected() {
        let state = sealed();
        // Another key the sealer knows: the key id is under the MAC.
        let sealer = sealer_a().with_previous(key("b", SECRET_B)).unwrap();
        let params = raw(PARAMS);
        let renamed = with_part(&state, 1, "b");
        assert_eq!(
            sealer.open(t0(), &binding(&params), &renamed),
            Err(StateError::BadSignature)
        );
        // A key the sealer does not know.
        let unknown = with_part(&state, 1, "zz");
        assert_eq!(
            sealer.open(t0(), &binding(&params), &unknown),
            Err(StateError::UnknownKey {
                key_id: "zz".to_owned()
            })
        );
    }

    #[test]
    fn expiry_follows_the_ttl() {
        let state = sealed();
        let just_before = t0() + DEFAULT_TTL - Duration::from_secs(1);
        assert!(open_a(just_before, &state).is_ok());
        let after = t0() + DEFAULT_TTL + Duration::from_secs(1);
        assert_eq!(open_a(after, &state), Err(StateError::Expired));

        let params = raw(PARAMS);
        let sealer = sealer_a().with_ttl(Duration::from_secs(30));
        let state = sealer.seal(t0(), &binding(&params), &[], b"").unwrap();
        let at = |secs| t0() + Duration::from_secs(secs);
        assert!(sealer.open(at(29), &binding(&params), &state).is_ok());
        assert_eq!(
            sealer.open(at(31), &binding(&params), &state),
            Err(StateError::Expired)
        );
    }

    #[test]
    fn wrong_principal_is_rejected() {
        let state = sealed();
        let params = raw(PARAMS);
        for principal in [Some("bob"), None, Some("alice ")] {
            let bind = Binding {
                principal,
                ..binding(&params)
            };
            assert_eq!(
                sealer_a().open(t0(), &bind, &state),
                Err(StateError::WrongPrincipal)
            );
        }
    }

    #[test]
    fn wrong_method_is_rejected() {
        let state = sealed();
        let params = raw(PARAMS);
        let bind = Binding {
            method: "prompts/get",
            ..binding(&params)
        };
        assert_eq!(
            sealer_a().open(t0(), &bind, &state),
            Err(StateError::WrongMethod)
        );
    }

    #[test]
    fn changed_params_are_rejected() {
        let state = sealed();
        let sealer = sealer_a();
        for params in [
            r#"{"name":"deploy","arguments":{"env":"staging","replicas":3}}"#,
            r#"{"name":"deploy","arguments":{"env":"prod","replicas":30}}"#,
            r#"{"name":"deploy","arguments":{"env":"prod","replicas":3.0}}"#,
            r#"{"name":"deploy","arguments":{"env":"prod"}}"#,
            r#"{"name":"deploy","arguments":{"env":"prod","replicas":3},"task":{}}"#,
            // Only the top-level members are ignored.
            r#"{"name":"deploy","arguments":{"env":"prod","replicas":3,"_meta":{}}}"#,
            r#"{}"#,
        ] {
            let params = raw(params);
            assert_eq!(
                sealer.open(t0(), &binding(&params), &state),
                Err(StateError::ParamsChanged),
                "{params}"
            );
        }
        let bind = Binding {
            principal: Some("alice"),
            method: "tools/call",
            params: None,
        };
        assert_eq!(
            sealer.open(t0(), &bind, &state),
            Err(StateError::ParamsChanged)
        );
    }

    #[test]
    fn retry_members_key_order_and_whitespace_keep_the_digest() {
        let state = sealed();
        let retry = format!(
            r#"{{ "requestState": "{state}", "arguments": {{ "replicas": 3, "env": "prod" }},
                "_meta": {{"progressToken": 7}},
                "inputResponses": {{"confirm": {{"action": "accept"}}}}, "name": "deploy" }}"#
        );
        let params = raw(&retry);
        let opened = sealer_a().open(t0(), &binding(&params), &state).unwrap();
        assert_eq!(opened.payload, b"step-2");

        // Absent params digest like `{}`, and like a retry that only adds the retry members.
        let sealer = sealer_a();
        let bind = Binding {
            principal: None,
            method: "prompts/get",
            params: None,
        };
        let state = sealer.seal(t0(), &bind, &["x"], b"").unwrap();
        let retry = raw(&format!(
            r#"{{"inputResponses":{{"x":1}},"requestState":"{state}"}}"#
        ));
        let bind = Binding {
            params: Some(&retry),
            ..bind
        };
        assert!(sealer.open(t0(), &bind, &state).is_ok());
    }

    #[test]
    fn canonical_encoding_sorts_members_without_whitespace() {
        let value: Value = serde_json::from_str(
            r#"{ "b": 1, "a": [true, null, "x\"y\u00e9"], "c": {"z": 1.5, "y": -2} }"#,
        )
        .unwrap();
        let mut out = Vec::new();
        write_canonical(&mut out, &value).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"a\":[true,null,\"x\\\"y\u{e9}\"],\"b\":1,\"c\":{\"y\":-2,\"z\":1.5}}"
        );
        assert_eq!(params_digest(None), params_digest(Some(&raw("{ }"))));
        assert_eq!(
            params_digest(Some(&raw(r#"{"a":1,"_meta":{"k":2}}"#))),
            params_digest(Some(&raw(r#"{"a":1}"#)))
        );
        assert_ne!(
            params_digest(Some(&raw(r#"{"a":1}"#))),
            params_digest(Some(&raw(r#"{"a":"1"}"#)))
        );
    }

    #[test]
    fn checks_run_in_the_documented_order() {
        let state = sealed();
        let other = raw(r#"{"name":"other"}"#);
        let all_wrong = Binding {
            principal: Some("bob"),
            method: "prompts/get",
            params: Some(&other),
        };
        let late = t0() + DEFAULT_TTL;
        assert_eq!(
            sealer_a().open(late, &all_wrong, &state),
            Err(StateError::Expired)
        );
        assert_eq!(
            sealer_a().open(t0(), &all_wrong, &state),
            Err(StateError::WrongPrincipal)
        );
        let bind = Binding {
            principal: Some("alice"),
            ..all_wrong
        };
        assert_eq!(
            sealer_a().open(t0(), &bind, &state),
            Err(StateError::WrongMethod)
        );
    }

    #[test]
    fn unknown_key_then_accepted_after_rotation() {
        let state = sealed();
        let params = raw(PARAMS);
        let only_b = StateSealer::new(key("b", SECRET_B));
        assert_eq!(
            only_b.open(t0(), &binding(&params), &state),
            Err(StateError::UnknownKey {
                key_id: "a".to_owned()
            })
        );
        let rotated = only_b.with_previous(key("a", SECRET_A)).unwrap();
        let opened = rotated.open(t0(), &binding(&params), &state).unwrap();
        assert_eq!(opened.key_id, "a");
        assert_eq!(opened.payload, b"step-2");
        // New states are sealed with the current key.
        let fresh = rotated.seal(t0(), &binding(&params), &[], b"").unwrap();
        assert!(fresh.starts_with("v1.b."));
        assert_eq!(rotated.current_key_id(), "b");
        assert_eq!(
            rotated
                .open(t0(), &binding(&params), &fresh)
                .unwrap()
                .key_id,
            "b"
        );
    }

    #[test]
    fn same_key_id_with_another_secret_is_rejected() {
        let state = sealed();
        let params = raw(PARAMS);
        let foreign = StateSealer::new(key("a", SECRET_B));
        assert_eq!(
            foreign.open(t0(), &binding(&params), &state),
            Err(StateError::BadSignature)
        );
    }

    #[test]
    fn over_long_states_are_rejected() {
        let long = "v".repeat(MAX_STATE_LEN + 1);
        assert_eq!(open_a(t0(), &long), Err(StateError::TooLong));
        // A real state with a padded body is rejected before anything else is looked at.
        let state = sealed();
        let padded = format!("{state}{}", "A".repeat(MAX_STATE_LEN));
        assert_eq!(open_a(t0(), &padded), Err(StateError::TooLong));
    }

    #[test]
    fn oversize_payloads_and_params_are_not_sealed() {
        let params = raw(PARAMS);
        let sealer = sealer_a();
        let bind = binding(&params);
        let payload = vec![7; MAX_STATE_LEN + 1];
        assert_eq!(
            sealer.seal(t0(), &bind, &[], &payload),
            Err(SealError::TooLong)
        );
        // Fits the body, not the base64 of it.
        let payload = vec![7; MAX_STATE_LEN - 1000];
        assert_eq!(
            sealer.seal(t0(), &bind, &[], &payload),
            Err(SealError::TooLong)
        );
        // A payload of 47 KiB fits and opens back.
        let payload = vec![7; 47 * 1024];
        let state = sealer.seal(t0(), &bind, &["k"], &payload).unwrap();
        assert!(state.len() <= MAX_STATE_LEN);
        assert_eq!(sealer.open(t0(), &bind, &state).unwrap().payload, payload);

        let long_key = "k".repeat(usize::from(u16::MAX) + 1);
        assert_eq!(
            sealer.seal(t0(), &bind, &[&long_key], b""),
            Err(SealError::TooLong)
        );
        let out_of_range = raw(r#"{"x":1e400}"#);
        assert_eq!(
            sealer.seal(t0(), &binding(&out_of_range), &[], b""),
            Err(SealError::UnsupportedParams)
        );
    }

    #[test]
    fn garbage_is_malformed_and_never_panics() {
        let mac = sealed().split('.').nth(3).unwrap().to_owned();
        for garbage in [
            "",
            ".",
            "...",
            "....",
            "v1",
            "v1.a",
            "v1.a.b",
            "v1.a.b.",
            "v2.a.AAAA.AAAA",
            "V1.a.AAAA.AAAA",
            "v1..AAAA.AAAA",
            "v1.a.b.c.d",
            "v1.a b.AAAA.AAAA",
            "v1.\u{e9}.AAAA.AAAA",
            "v1.a.AAAA.!!!!",
            "v1.a.AAAA.AAAA=",
            "v1.a.AAAA.A",
            "v1.a.AAAA.AAAA",
            "\u{1F600}.\u{1F600}.\u{1F600}.\u{1F600}",
            &format!("v1.{}.AAAA.AAAA", "k".repeat(65)),
        ] {
            assert_eq!(
                open_a(t0(), garbage),
                Err(StateError::Malformed),
                "{garbage:?}"
            );
        }
        // The MAC is checked before the body is decoded.
        assert_eq!(
            open_a(t0(), &format!("v1.a.!!!!.{mac}")),
            Err(StateError::BadSignature)
        );
    }

    #[test]
    fn authentic_but_malformed_bodies_are_malformed() {
        let state = sealed();
        let body = URL_SAFE_NO_PAD
            .decode(state.split('.').nth(2).unwrap())
            .unwrap();
        let key_a = key("a", SECRET_A);
        // Every truncation that cuts the fixed part of the body (the payload is the rest).
        let header = body.len() - b"step-2".len();
        for len in 0..header {
            assert_eq!(
                open_a(t0(), &sign_raw(&key_a, &body[..len])),
                Err(StateError::Malformed),
                "{len}"
            );
        }
        // A bad principal tag.
        let mut bad_tag = body.clone();
        bad_tag[8] = 2;
        assert_eq!(
            open_a(t0(), &sign_raw(&key_a, &bad_tag)),
            Err(StateError::Malformed)
        );
        // A method that is not UTF-8.
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&u64::MAX.to_be_bytes());
        bytes.extend_from_slice(&[0, 0, 2, 0xff, 0xfe]);
        assert_eq!(
            open_a(t0(), &sign_raw(&key_a, &bytes)),
            Err(StateError::Malformed)
        );
        // Arbitrary bytes never panic.
        for seed in 0u8..=255 {
            let bytes: Vec<u8> = (0..u16::from(seed) * 3)
                .map(|i| (i as u8).wrapping_mul(seed).wrapping_add(seed))
                .collect();
            let _ = open_a(t0(), &sign_raw(&key_a, &bytes));
        }
    }

    #[test]
    fn missing_lists_unanswered_keys_in_order() {
        let opened = open_a(t0(), &sealed()).unwrap();
        assert_eq!(opened.missing(["region", "extra"]), ["confirm"]);
        assert_eq!(opened.missing([]), ["confirm", "region"]);
        assert!(opened.missing(["confirm", "region"]).is_empty());
        let answered: Value = serde_json::from_str(r#"{"confirm":{},"region":{}}"#).unwrap();
        let answered = answered.as_object().unwrap();
        assert!(
            opened
                .missing(answered.keys().map(String::as_str))
                .is_empty()
        );
    }

    #[test]
    fn key_debug_does_not_show_the_secret() {
        let secret = b"super-secret-material-0123456789-xyz";
        let key = key("main", secret);
        let sealer = StateSealer::new(key.clone());
        let byte_list = format!("{:?}", &secret[..4]);
        let byte_list = byte_list.trim_matches(['[', ']']);
        for debug in [
            format!("{key:?}"),
            format!("{key:#?}"),
            format!("{sealer:?}"),
        ] {
            assert!(debug.contains("main"), "{debug}");
            assert!(!debug.contains("super-secret"), "{debug}");
            assert!(!debug.contains(byte_list), "{debug}");
        }
    }

    #[test]
    fn key_validation() {
        assert_eq!(key("k", SECRET_A).id(), "k");
        assert!(StateKey::new("A-z_09".repeat(10) + "abcd", SECRET_A).is_ok());
        for id in ["", "a.b", "a b", "ключ", "a/b", "a=b"] {
            assert_eq!(
                StateKey::new(id, SECRET_A).unwrap_err(),
                KeyError::InvalidId,
                "{id}"
            );
        }
        assert_eq!(
            StateKey::new("k".repeat(65), SECRET_A).unwrap_err(),
            KeyError::InvalidId
        );
        assert_eq!(
            StateKey::new("k", vec![0; 31]).unwrap_err(),
            KeyError::SecretTooShort { len: 31 }
        );
        assert!(StateKey::new("k", vec![0; 32]).is_ok());
    }

    #[test]
    fn sealer_key_limits() {
        assert_eq!(
            sealer_a().with_previous(key("a", SECRET_B)).unwrap_err(),
            KeyError::DuplicateId { id: "a".to_owned() }
        );
        let mut sealer = sealer_a();
        for i in 1..MAX_KEYS {
            sealer = sealer
                .with_previous(key(&format!("k{i}"), SECRET_B))
                .unwrap();
        }
        assert_eq!(
            sealer.with_previous(key("last", SECRET_B)).unwrap_err(),
            KeyError::TooManyKeys
        );
    }

    #[test]
    fn every_error_is_invalid_params() {
        for error in [
            StateError::Malformed,
            StateError::UnknownKey {
                key_id: "k".to_owned(),
            },
            StateError::BadSignature,
            StateError::Expired,
            StateError::WrongPrincipal,
            StateError::WrongMethod,
            StateError::ParamsChanged,
            StateError::TooLong,
        ] {
            assert_eq!(error.code(), ErrorCode(-32602));
            let object = error.to_error_object();
            assert_eq!(object.code, ErrorCode::INVALID_PARAMS);
            assert_eq!(object.message, error.to_string());
            assert!(object.message.starts_with("requestState "));
            assert!(object.data.is_none());
        }
    }
}
