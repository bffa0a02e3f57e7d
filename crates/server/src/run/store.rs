//! What a legacy HTTP session must keep between its requests, as plain data: a
//! [`SessionState`] behind a [`SessionStore`] ([`InMemoryStore`] by default), so that a store
//! elsewhere (Redis) can keep it for a server of many processes.
//!
//! A state is what a new runner needs to go on with a session: the version `initialize`
//! negotiated, the client's `clientInfo` and capabilities, the log level it set, its resource
//! subscriptions, the principal it is bound to, and when it was opened and last used. It holds
//! nothing in flight: requests under way, questions to the client and their streams belong to
//! the request that made them.
//!
//! How the HTTP runtime uses it (`crate::http`): each POST of a legacy session loads its state
//! (a session with none is one just opened), resumes a `ServerSession` from it
//! ([`SessionState::resume`]), runs what came, and saves the state when it changed (`initialize`,
//! `notifications/initialized`, `logging/setLevel`, `resources/subscribe`, checked with
//! [`SessionState::differs_from`]), before anything is said to the client. The end of the session
//! (DELETE, the transport's idle timeout or cap for a session it opened: `Closed::Ended`) removes
//! it; an instance that only forgets a session it adopted (`Closed::Forgotten`) leaves it. The server's changes are fanned out
//! to open sessions from their loaded states.
//!
//! What it does not do: `last_used_ms` is the time of the last save, not of the last request
//! (the transport keeps the idle timeout); a request that waits goes on with the state it
//! loaded, but for the log level (a later `logging/setLevel` is passed to it in this process);
//! and a store shared by processes carries the sessions, not the requests under way: the
//! client's answer to a question must reach the process that asked, which is the
//! [`Bus`](crate::bus::Bus)'s work (`BusMessage::Forward`), not the store's.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use modelctx_session::{LogLevel, ProtocolVersion, Resume, ServerConfig, ServerSession};
use modelctx_types::JsonObject;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A future a [`SessionStore`] returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// The state of one legacy (`initialize`-based) session, as plain, serializable data.
///
/// Serialized with serde as a JSON object: the version and the log level as their protocol
/// strings (`"2025-11-25"`, `"info"`), the timestamps as milliseconds since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct SessionState {
    /// The version `initialize` negotiated; `None` before it did.
    #[serde(with = "version_str")]
    pub version: Option<ProtocolVersion>,
    /// The client's `clientInfo`, as sent.
    pub client_info: Option<Value>,
    /// The client's declared capabilities.
    pub client_capabilities: Option<JsonObject>,
    /// Whether `notifications/initialized` arrived.
    #[serde(default)]
    pub initialized: bool,
    /// The level `logging/setLevel` set; `None` (the default) logs nothing to the client.
    #[serde(with = "level_str")]
    pub log_level: Option<LogLevel>,
    /// The resources the client subscribed to (`resources/subscribe`).
    pub subscriptions: BTreeSet<String>,
    /// The principal the session is bound to, if any.
    pub principal: Option<String>,
    /// When the session was opened, in milliseconds since the Unix epoch.
    pub opened_ms: u64,
    /// When the session was last used (saved), in milliseconds since the Unix epoch.
    pub last_used_ms: u64,
}

impl SessionState {
    /// The state of a session opened at `now` by `principal`: nothing negotiated yet.
    pub fn opened(principal: Option<String>, now: SystemTime) -> SessionState {
        let now = millis(now);
        SessionState {
            version: None,
            client_info: None,
            client_capabilities: None,
            initialized: false,
            log_level: None,
            subscriptions: BTreeSet::new(),
            principal,
            opened_ms: now,
            last_used_ms: now,
        }
    }

    /// Takes what `session` negotiated (version, client, `initialized`, log level) and marks
    /// the state used at `now`; the subscriptions and the principal are the caller's to keep.
    ///
    /// The client (`clientInfo`, capabilities) is taken when the state has no version yet or
    /// another one than the session's: a session resumed from this state has the client it
    /// was given, which `initialize` fixed, and it is not copied again on every request.
    pub fn record(&mut self, session: &ServerSession, now: SystemTime) {
        if (self.version.is_none() || self.version != session.version())
            && let Some(peer) = session.peer()
        {
            self.version = Some(peer.version);
            self.client_info = peer.info;
            self.client_capabilities = peer.capabilities;
        }
        self.initialized = session.is_initialized();
        self.log_level = session.log_level();
        self.last_used_ms = millis(now).max(self.last_used_ms);
    }

    /// A session that goes on from this state: one that expects `initialize` when none was
    /// answered yet, else one resumed past it (`ServerSession::resume`), whose own requests
    /// get ids after `ids_after`.
    pub fn resume(&self, config: Arc<ServerConfig>, ids_after: i64) -> ServerSession {
        let Some(version) = self.version else {
            return ServerSession::new(config);
        };
        let mut resume = Resume::new(
            version,
            self.client_capabilities.clone().unwrap_or_default(),
            self.client_info.clone().unwrap_or(Value::Null),
        );
        resume.initialized = self.initialized;
        resume.log_level = self.log_level;
        resume.ids_after = ids_after;
        // A state holds legacy versions only (`record` takes them from `initialize`).
        ServerSession::resume(config.clone(), resume).unwrap_or_else(|| ServerSession::new(config))
    }

    /// Whether `other` differs from this state in more than when it was last used.
    pub fn differs_from(&self, other: &SessionState) -> bool {
        // Field by field, without a copy of either (every legacy POST asks).
        let SessionState {
            version,
            client_info,
            client_capabilities,
            initialized,
            log_level,
            subscriptions,
            principal,
            opened_ms,
            last_used_ms: _,
        } = self;
        *version != other.version
            || *initialized != other.initialized
            || *log_level != other.log_level
            || *opened_ms != other.opened_ms
            || *principal != other.principal
            || *subscriptions != other.subscriptions
            || *client_info != other.client_info
            || *client_capabilities != other.client_capabilities
    }

    /// How long the session has been unused at `now`.
    pub fn idle_for(&self, now: SystemTime) -> Duration {
        Duration::from_millis(millis(now).saturating_sub(self.last_used_ms))
    }
}

fn millis(at: SystemTime) -> u64 {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// A store failed: why ([`kind`](StoreError::kind)), and its cause, kept.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", match kind {
    StoreErrorKind::Unavailable => "the session store is unavailable",
    StoreErrorKind::Failed => "the session store failed",
})]
#[non_exhaustive]
pub struct StoreError {
    /// Whether trying again later may work.
    pub kind: StoreErrorKind,
    /// What went wrong in the store.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Why a [`SessionStore`] call failed: what the client is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store cannot be reached now (a lost connection, a timeout): the same call may work
    /// later. Over HTTP the request is answered 503 with `Retry-After`.
    Unavailable,
    /// Anything else (a state that cannot be read or written, a refusal of the backend):
    /// trying again does not help. The request fails with an internal error, logged.
    Failed,
}

impl StoreError {
    /// A store error caused by `source`, of kind [`StoreErrorKind::Failed`] (as
    /// [`failed`](StoreError::failed)).
    pub fn new(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError::failed(source)
    }

    /// The store cannot be reached now, because of `source`.
    pub fn unavailable(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError {
            kind: StoreErrorKind::Unavailable,
            source: source.into(),
        }
    }

    /// The call failed for good, because of `source`.
    pub fn failed(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> StoreError {
        StoreError {
            kind: StoreErrorKind::Failed,
            source: source.into(),
        }
    }

    /// Whether trying again later may work.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }
}

/// Where the states of legacy sessions live, by session id (`Mcp-Session-Id`).
///
/// A request on a legacy session loads its state, runs, and saves it when it changed; the end
/// of a session (DELETE, idle timeout; not an instance forgetting a session it adopted) removes
/// it. Implementations must be safe to call from
/// many tasks at once; [`InMemoryStore`] is the default.
///
/// A store shared by the instances of a fleet (Redis) must also:
/// * expire a state unused for the session idle timeout: `save` sets the expiry, and `load`
///   and [`touch`](SessionStore::touch) push it back (the instance holding a session's open
///   GET stream touches it every third of the timeout, so a session that only listens lives);
/// * make `remove` final for every instance: a later `load` anywhere gives `None`;
/// * bound each call in time, and say why it failed: [`StoreError::unavailable`] when the
///   backend cannot be reached (a timeout, a lost connection: the client gets 503 and tries
///   again), [`StoreError::failed`] for the rest.
pub trait SessionStore: Send + Sync + std::fmt::Debug + 'static {
    /// The state of session `id`; `None` when there is none (never opened, or removed).
    fn load<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionState>>;

    /// Keeps `state` as session `id`'s, replacing what was there.
    fn save<'a>(&'a self, id: &'a str, state: &'a SessionState) -> StoreFuture<'a, ()>;

    /// Forgets session `id` (nothing happens when there is none).
    fn remove<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()>;

    /// Marks sessions `ids` as used now, pushing back their expiry, without loading them
    /// (sessions that have no state are left alone). The default does nothing: right for a
    /// store that expires nothing by itself, as [`InMemoryStore`] (the transport's idle timeout
    /// ends its sessions). A store that expires states must implement it.
    fn touch<'a>(&'a self, ids: &'a [&'a str]) -> StoreFuture<'a, ()> {
        let _ = ids;
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The default [`SessionStore`]: a map in this process's memory. Its futures never wait.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct InMemoryStore {
    states: Mutex<HashMap<String, SessionState>>,
}

impl InMemoryStore {
    /// An empty store.
    pub fn new() -> InMemoryStore {
        InMemoryStore::default()
    }

    /// How many sessions it keeps.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it keeps no session.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, SessionState>> {
        self.states.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SessionStore for InMemoryStore {
    fn load<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionState>> {
        let state = self.lock().get(id).cloned();
        Box::pin(std::future::ready(Ok(state)))
    }

    fn save<'a>(&'a self, id: &'a str, state: &'a SessionState) -> StoreFuture<'a, ()> {
        self.lock().insert(id.to_owned(), state.clone());
        Box::pin(std::future::ready(Ok(())))
    }

    fn remove<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        self.lock().remove(id);
        Box::pin(std::future::ready(Ok(())))
    }
}

/// `Option<ProtocolVersion>` as its protocol string.
mod version_str {
    use modelctx_session::ProtocolVersion;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(
        version: &Option<ProtocolVersion>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match version {
            Some(v) => serializer.serialize_some(v.as_str()),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<ProtocolVersion>, D::Error> {
        match Option::<String>::deserialize(deserializer)? {
            Some(s) => ProtocolVersion::parse(&s)
                .map(Some)
                .ok_or_else(|| D::Error::custom(format!("unknown protocol version {s:?}"))),
            None => Ok(None),
        }
    }
}

/// `Option<LogLevel>` as its protocol string.
mod level_str {
    use modelctx_session::LogLevel;
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(
        level: &Option<LogLevel>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match level {
            Some(l) => serializer.serialize_some(l.as_str()),
            None => serializer.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<LogLevel>, D::Error> {
        match Option::<String>::deserialize(deserializer)? {
            Some(s) => LogLevel::parse(&s)
                .map(Some)
                .ok_or_else(|| D::Error::custom(format!("unknown log level {s:?}"))),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use modelctx_types::{Message, Request, RequestId};
    use serde_json::json;

    use super::*;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    fn request(id: i64, method: &str, params: Value) -> Message {
        let params: JsonObject = serde_json::from_value(params).unwrap();
        Request::new(RequestId::Number(id), method, &params)
            .unwrap()
            .into()
    }

    /// What `initialize` and `logging/setLevel` negotiated is recorded, and survives a trip
    /// through JSON (what a store elsewhere keeps).
    #[test]
    fn a_sessions_state_is_recorded_and_round_trips_as_json() {
        let mut capabilities = JsonObject::new();
        capabilities.insert("logging".into(), json!({}));
        let mut session = ServerSession::new(ServerConfig::new("s", "1", capabilities));
        let now = Instant::now();
        session.handle_message(
            now,
            request(
                1,
                "initialize",
                json!({"protocolVersion": "2025-06-18", "capabilities": {"roots": {}},
                    "clientInfo": {"name": "c", "version": "2"}}),
            ),
        );
        session.handle_message(
            now,
            modelctx_types::Notification::new("notifications/initialized", &JsonObject::new())
                .unwrap()
                .into(),
        );
        session.handle_message(
            now,
            request(2, "logging/setLevel", json!({"level": "warning"})),
        );
        while session.poll_event().is_some() {}

        let mut state = SessionState::opened(Some("alice".into()), at(1_000));
        state.subscriptions.insert("file:///a".into());
        state.record(&session, at(5_000));
        assert_eq!(state.version, Some(ProtocolVersion::V2025_06_18));
        assert_eq!(
            state.client_info,
            Some(json!({"name": "c", "version": "2"}))
        );
        assert_eq!(
            state
                .client_capabilities
                .as_ref()
                .and_then(|c| c.get("roots")),
            Some(&json!({}))
        );
        assert_eq!(state.log_level, Some(LogLevel::Warning));
        assert!(state.initialized);
        assert_eq!((state.opened_ms, state.last_used_ms), (1_000, 5_000));
        assert_eq!(state.idle_for(at(7_500)), Duration::from_millis(2_500));

        let text = serde_json::to_value(&state).unwrap();
        assert_eq!(text["version"], "2025-06-18");
        assert_eq!(text["logLevel"], "warning");
        assert_eq!(text["subscriptions"], json!(["file:///a"]));
        let back: SessionState = serde_json::from_value(text).unwrap();
        assert_eq!(back, state);
    }

    /// A state resumes the session it describes: a fresh one expects `initialize`, a
    /// negotiated one is past it with its client and level; only more than the time of use
    /// makes a state differ.
    #[test]
    fn a_state_resumes_its_session_and_differs_only_in_what_was_negotiated() {
        let config = std::sync::Arc::new(ServerConfig::new("s", "1", JsonObject::new()));
        let fresh = SessionState::opened(None, at(0));
        let session = fresh.resume(config.clone(), 0);
        assert_eq!(session.version(), None);
        assert!(!session.is_initialized());

        let mut state = fresh.clone();
        state.version = Some(ProtocolVersion::V2025_03_26);
        state.client_info = Some(json!({"name": "c", "version": "1"}));
        state.initialized = true;
        state.log_level = Some(LogLevel::Error);
        let session = state.resume(config, 0);
        assert_eq!(session.version(), Some(ProtocolVersion::V2025_03_26));
        assert!(session.is_initialized());
        assert_eq!(session.log_level(), Some(LogLevel::Error));
        assert_eq!(session.peer().unwrap().info, state.client_info);

        let mut later = fresh.clone();
        later.last_used_ms = 99;
        assert!(!later.differs_from(&fresh));
        assert!(state.differs_from(&fresh));
        // Every other field makes a difference, each on its own.
        let changes: [fn(&mut SessionState); 8] = [
            |s| s.version = Some(ProtocolVersion::V2025_11_25),
            |s| s.client_info = Some(json!({})),
            |s| s.client_capabilities = Some(JsonObject::new()),
            |s| s.initialized = true,
            |s| s.log_level = Some(LogLevel::Debug),
            |s| {
                s.subscriptions.insert("a://b".into());
            },
            |s| s.principal = Some("p".into()),
            |s| s.opened_ms = 7,
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut changed = fresh.clone();
            change(&mut changed);
            assert!(changed.differs_from(&fresh), "field {i}");
            assert!(fresh.differs_from(&changed), "field {i}");
        }

        // Recording the session resumed from a state changes only the time of use.
        let mut recorded = state.clone();
        recorded.record(&session, at(9_000));
        assert!(!recorded.differs_from(&state));
        assert_eq!(recorded.last_used_ms, 9_000);
    }

    #[test]
    fn an_unknown_version_or_level_is_not_read() {
        let mut text = serde_json::to_value(SessionState::opened(None, at(0))).unwrap();
        text["version"] = json!("1999-01-01");
        assert!(serde_json::from_value::<SessionState>(text.clone()).is_err());
        text["version"] = Value::Null;
        text["logLevel"] = json!("loud");
        assert!(serde_json::from_value::<SessionState>(text).is_err());
    }

    #[test]
    fn store_errors_say_whether_to_try_again() {
        let down = StoreError::unavailable("timed out");
        assert_eq!(down.kind(), StoreErrorKind::Unavailable);
        assert_eq!(
            down.to_string(),
            "the session store is unavailable: timed out"
        );
        let bad = StoreError::failed("bad JSON");
        assert_eq!(bad.kind(), StoreErrorKind::Failed);
        assert_eq!(bad.to_string(), "the session store failed: bad JSON");
        assert_eq!(StoreError::new("x").kind(), StoreErrorKind::Failed);
        assert!(std::error::Error::source(&bad).is_some());
    }

    /// A store that does not override `touch` gets the default, which changes nothing.
    #[tokio::test(flavor = "current_thread")]
    async fn touch_defaults_to_nothing() {
        let store = InMemoryStore::new();
        let state = SessionState::opened(None, at(10));
        store.save("a", &state).await.unwrap();
        store.touch(&["a", "missing"]).await.unwrap();
        assert_eq!(store.load("a").await.unwrap(), Some(state));
        assert_eq!(store.len(), 1);
        let store: std::sync::Arc<dyn SessionStore> = std::sync::Arc::new(store);
        store.touch(&[]).await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_in_memory_store_keeps_replaces_and_forgets() {
        let store = InMemoryStore::new();
        assert_eq!(store.load("a").await.unwrap(), None);
        let mut state = SessionState::opened(None, at(10));
        store.save("a", &state).await.unwrap();
        store.save("b", &state).await.unwrap();
        state.log_level = Some(LogLevel::Debug);
        store.save("a", &state).await.unwrap();
        assert_eq!(store.load("a").await.unwrap(), Some(state.clone()));
        assert_eq!(store.len(), 2);
        store.remove("a").await.unwrap();
        store.remove("a").await.unwrap();
        assert_eq!(store.load("a").await.unwrap(), None);
        assert_eq!(store.len(), 1);
        // Usable as a trait object, as a server keeps it.
        let store: std::sync::Arc<dyn SessionStore> = std::sync::Arc::new(store);
        assert!(store.load("b").await.unwrap().is_some());
    }
}
