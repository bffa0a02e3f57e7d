//! The endpoint-wide table: the configuration, the open legacy sessions and the shutdown
//! signal, shared by every request whatever its era or transport.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::time::Instant;

use tokio_util::sync::CancellationToken;

use super::app::{Closed, LegacySession, McpApp, Principal};
use super::config::ServerConfig;
use super::counters::Counters;
use super::legacy::{Session, redact, shrink};

/// The sizes of the server's tables, for tests that check they return to empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TableSizes {
    /// Open legacy sessions.
    pub sessions: usize,
    /// Those of them adopted from state kept elsewhere (`McpApp::adopt_session`).
    pub adopted: usize,
    /// Their streams.
    pub streams: usize,
    /// Requests in flight on them.
    pub requests: usize,
    /// Messages waiting for a standalone stream.
    pub queued: usize,
    /// HTTP requests being processed across the endpoint (bounded by
    /// [`ServerConfig::max_requests_in_flight`]).
    pub in_flight: usize,
    /// SSE events (priming events included) the event store refused since the service was
    /// made: each was still written to the connection reading its stream, if any, without an
    /// id (so the client cannot resume to it), and logged. A count, not a table: `is_empty`
    /// leaves it out.
    pub events_unstored: u64,
}

impl TableSizes {
    /// Whether every table is empty (`events_unstored`, a count, aside).
    pub fn is_empty(&self) -> bool {
        TableSizes {
            events_unstored: 0,
            ..*self
        } == TableSizes::default()
    }
}

/// What the server shares with every session.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    pub(crate) sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The adoptions under way, by session id: one asks the application, the others wait.
    adopting: Mutex<HashMap<String, Arc<Adoption>>>,
    /// Fired at shutdown: every stream ends.
    pub(crate) shutdown: CancellationToken,
    /// The application shares its sessions with other instances (`McpApp::shares_sessions`):
    /// the idle sweep, eviction and shutdown only forget a session.
    shares_sessions: bool,
    /// Events the event store refused (`TableSizes::events_unstored`).
    events_unstored: AtomicU64,
    /// The sessions held and the streams open, for the application's gauges.
    pub(crate) counters: Counters,
}

/// Whether a request of principal `asking` may use a session bound to `bound`: the one owner of
/// the binding rule, for the sessions opened here and the adopted ones (bound to the principal
/// the application recorded, `Adopted::principal`). Otherwise the session is unknown (404).
fn binds(bound: Option<&Principal>, asking: Option<&Principal>) -> bool {
    bound == asking
}

/// What the table has for a session id and a principal.
pub(crate) enum Lookup {
    /// The session, bound to that principal.
    Found(Arc<Session>),
    /// A session bound to another principal.
    Refused,
    /// None here.
    Absent,
}

/// Why a request cannot have the session it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Missing {
    /// Unknown here and to the application, or bound to another principal (404).
    NotFound,
    /// The application cannot say now (503, `Retry-After: 1`).
    Unavailable,
    /// Adopting it would pass the session caps and nothing can be let go (503).
    Full,
}

/// One adoption under way: done when its asker finished (or went away), with its outcome.
#[derive(Default)]
struct Adoption {
    done: CancellationToken,
    outcome: OnceLock<Result<(), Missing>>,
}

/// The right to adopt one session id; dropped, it wakes those that wait for it.
struct Claim<'a> {
    shared: &'a Shared,
    id: &'a str,
    adoption: Arc<Adoption>,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut adopting = self.shared.adopting();
        adopting.remove(self.id);
        shrink(&mut adopting);
        drop(adopting);
        self.adoption.done.cancel();
    }
}

/// An adopted session with its handler that is not in the table yet: dropped so (its adopter
/// went away), the application is told it was forgotten.
struct Unplaced(Option<Arc<Session>>);

impl Drop for Unplaced {
    fn drop(&mut self) {
        if let Some(session) = self.0.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { session.end_as(Closed::Forgotten).await });
        }
    }
}

impl Shared {
    /// The table of an endpoint whose application shares its sessions with other instances
    /// (`shares_sessions`, `McpApp::shares_sessions`) or not, counting what it holds in
    /// `counters`.
    pub(crate) fn new(config: ServerConfig, shares_sessions: bool, counters: Counters) -> Self {
        Shared {
            config,
            sessions: Mutex::new(HashMap::new()),
            adopting: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            shares_sessions,
            events_unstored: AtomicU64::new(0),
            counters,
        }
    }

    /// Whether the application shares its sessions with other instances.
    pub(crate) fn shares_sessions(&self) -> bool {
        self.shares_sessions
    }

    /// Counts one event the event store refused.
    pub(crate) fn event_unstored(&self) {
        self.events_unstored.fetch_add(1, AtomicOrdering::Relaxed);
    }

    pub(super) fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn adopting(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Adoption>>> {
        self.adopting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lets go of `session` on this endpoint's account (idle, eviction, shutdown): an adopted
    /// session, and any session when the application shares its sessions, is only forgotten
    /// (its shared state stays for the other instances); otherwise it ends.
    async fn let_go(&self, session: &Session) {
        let reason = if session.adopted || self.shares_sessions {
            Closed::Forgotten
        } else {
            Closed::Ended
        };
        session.end_as(reason).await;
    }

    /// Opens a session bound to `principal` (and counted against `peer`), or `None` when the
    /// table is full and no session can be ended to make room.
    ///
    /// Finding 2: when the table (or the principal's or the peer's share of it) is full, the
    /// least recently used idle session of that scope is ended, as the idle sweep ends one;
    /// only when none is idle is the caller refused.
    pub(crate) async fn open(
        self: &Arc<Self>,
        principal: Option<Principal>,
        peer: Option<IpAddr>,
    ) -> Option<Arc<Session>> {
        self.admit(principal.as_ref(), peer, |sessions| {
            self.insert(sessions, principal.clone(), peer)
        })
        .await
    }

    /// Makes room for a session of `principal` from `peer` within the caps, then has `place`
    /// put it in the table (under the table's lock); `None` when no room can be made (or
    /// `place` put none).
    async fn admit(
        &self,
        principal: Option<&Principal>,
        peer: Option<IpAddr>,
        mut place: impl FnMut(&mut HashMap<String, Arc<Session>>) -> Option<Arc<Session>>,
    ) -> Option<Arc<Session>> {
        // Each round ends one session or succeeds; the scopes are three, and another opener
        // may take a freed place meanwhile.
        for _ in 0..4 {
            let candidates = {
                let mut sessions = self.sessions();
                match self.full_scope(&sessions, principal, peer) {
                    None => {
                        let placed = place(&mut sessions);
                        if placed.is_some() {
                            self.counters.session_opened();
                        }
                        return placed;
                    }
                    Some(scope) => {
                        let mut in_scope: Vec<(Instant, Arc<Session>)> = sessions
                            .values()
                            .filter(|s| match scope {
                                Scope::Principal => s.principal.as_ref() == principal,
                                Scope::Peer => s.peer.is_some() && s.peer == peer,
                                Scope::All => true,
                            })
                            .map(|s| (s.last_seen(), s.clone()))
                            .collect();
                        in_scope.sort_by_key(|(seen, _)| *seen);
                        in_scope
                    }
                }
            };
            let mut evicted = false;
            for (_, candidate) in candidates {
                candidate.reap_abandoned().await;
                if candidate.evictable(self.config.handshake_timeout) {
                    tracing::debug!(
                        session = %redact(&candidate.id),
                        adopted = candidate.adopted,
                        "session table full: let go of the least recently used idle session"
                    );
                    self.let_go(&candidate).await;
                    evicted = true;
                    break;
                }
            }
            if !evicted {
                return None;
            }
        }
        None
    }

    /// The scope whose cap is reached for a new session of `principal` from `peer`, if any.
    fn full_scope(
        &self,
        sessions: &HashMap<String, Arc<Session>>,
        principal: Option<&Principal>,
        peer: Option<IpAddr>,
    ) -> Option<Scope> {
        let config = &self.config;
        if let (Some(cap), Some(principal)) = (config.max_sessions_per_principal, principal)
            && sessions
                .values()
                .filter(|s| s.principal.as_ref() == Some(principal))
                .count()
                >= cap
        {
            return Some(Scope::Principal);
        }
        if let (Some(cap), Some(peer)) = (config.max_sessions_per_peer, peer)
            && sessions.values().filter(|s| s.peer == Some(peer)).count() >= cap
        {
            return Some(Scope::Peer);
        }
        (sessions.len() >= config.max_sessions).then_some(Scope::All)
    }

    fn insert(
        self: &Arc<Self>,
        sessions: &mut HashMap<String, Arc<Session>>,
        principal: Option<Principal>,
        peer: Option<IpAddr>,
    ) -> Option<Arc<Session>> {
        let id = loop {
            let id = new_session_id()?;
            if !sessions.contains_key(&id) {
                break id;
            }
        };
        let session = Session::new(id.clone(), principal, peer, self, None);
        sessions.insert(id, session.clone());
        Some(session)
    }

    /// The session `id`, if open and bound to the same principal.
    #[cfg(any(test, feature = "legacy-sse"))]
    pub(crate) fn find(&self, id: &str, principal: Option<&Principal>) -> Option<Arc<Session>> {
        match self.lookup(id, principal) {
            Lookup::Found(session) => Some(session),
            Lookup::Refused | Lookup::Absent => None,
        }
    }

    /// What the table holds for session `id` and a request of `principal` (a session found is
    /// marked as seen).
    pub(crate) fn lookup(&self, id: &str, principal: Option<&Principal>) -> Lookup {
        let Some(session) = self.sessions().get(id).cloned() else {
            return Lookup::Absent;
        };
        if !binds(session.principal.as_ref(), principal) {
            return Lookup::Refused;
        }
        session.touch();
        Lookup::Found(session)
    }

    /// The session `id` for a request of `principal` from `peer`: the one in the table, or,
    /// when there is none, the one `app` adopts ([`McpApp::adopt_session`]), put in the table
    /// with its handler. One adoption per id at a time: concurrent requests for it wait for the
    /// first one's outcome and share it.
    pub(crate) async fn find_or_adopt(
        self: &Arc<Self>,
        app: &Arc<dyn McpApp>,
        id: &str,
        principal: Option<&Principal>,
        peer: Option<IpAddr>,
    ) -> Result<Arc<Session>, Missing> {
        loop {
            match self.lookup(id, principal) {
                Lookup::Found(session) => return Ok(session),
                Lookup::Refused => return Err(Missing::NotFound),
                Lookup::Absent => {}
            }
            // An id this transport never gives out is nobody's: the application is not asked.
            if !is_session_id(id) {
                return Err(Missing::NotFound);
            }
            let claim = {
                let mut adopting = self.adopting();
                match adopting.entry(id.to_owned()) {
                    Entry::Occupied(under_way) => Err(under_way.get().clone()),
                    Entry::Vacant(vacant) => {
                        let adoption = vacant.insert(Arc::default()).clone();
                        Ok(Claim {
                            shared: self,
                            id,
                            adoption,
                        })
                    }
                }
            };
            let claim = match claim {
                Ok(claim) => claim,
                Err(under_way) => {
                    under_way.done.cancelled().await;
                    match under_way.outcome.get() {
                        // Adopted (found next round), or its asker went away: again.
                        Some(Ok(())) | None => continue,
                        Some(Err(missing)) => return Err(*missing),
                    }
                }
            };
            // Another adoption may have ended between the lookup and the claim.
            if self.sessions().contains_key(id) {
                continue;
            }
            let adopted = self.adopt(app, id, principal, peer).await;
            let _ = claim
                .adoption
                .outcome
                .set(adopted.as_ref().map(|_| ()).map_err(|m| *m));
            return adopted;
        }
    }

    /// Asks `app` for session `id` and, when it adopts it, puts it in the table within the caps
    /// (eviction included), with its handler already set: no request finds it without one.
    async fn adopt(
        self: &Arc<Self>,
        app: &Arc<dyn McpApp>,
        id: &str,
        principal: Option<&Principal>,
        peer: Option<IpAddr>,
    ) -> Result<Arc<Session>, Missing> {
        let adopted = match app.adopt_session(id, principal).await {
            Ok(Some(adopted)) => adopted,
            Ok(None) => return Err(Missing::NotFound),
            Err(unavailable) => {
                tracing::warn!(
                    session = %redact(id),
                    error = %unavailable,
                    "a session could not be adopted: 503"
                );
                return Err(Missing::Unavailable);
            }
        };
        if !binds(adopted.principal.as_ref(), principal) {
            return Err(Missing::NotFound);
        }
        let session = Session::new(
            id.to_owned(),
            adopted.principal,
            peer,
            self,
            Some(adopted.version),
        );
        let handler = app.open_session(LegacySession {
            inner: session.clone(),
        });
        let _ = session.handler.set(handler);
        let mut unplaced = Unplaced(Some(session.clone()));
        let placed =
            self.admit(session.principal.as_ref(), peer, |sessions| match sessions
                .entry(id.to_owned())
            {
                Entry::Vacant(vacant) => Some(vacant.insert(session.clone()).clone()),
                Entry::Occupied(_) => None,
            })
            .await;
        unplaced.0 = None;
        match placed {
            Some(session) => {
                tracing::debug!(session = %redact(id), "adopted a session");
                Ok(session)
            }
            None => {
                session.end_as(Closed::Forgotten).await;
                Err(Missing::Full)
            }
        }
    }

    /// Lets go of the sessions idle for longer than the timeout (`let_go`: forgotten when
    /// adopted or shared, else ended), and ends those still in their handshake after
    /// `handshake_timeout`. POSTs whose client went away are let go first (finding 3).
    pub(crate) async fn sweep(&self) {
        let timeout = self.config.session_idle_timeout;
        let handshake = self.config.handshake_timeout;
        let candidates: Vec<Arc<Session>> = self
            .sessions()
            .values()
            .filter(|s| s.idle_for() >= timeout || s.handshake_expired(handshake))
            .cloned()
            .collect();
        for session in candidates {
            session.reap_abandoned().await;
            if session.handshake_expired(handshake) {
                session.end().await;
            } else if !session.has_live_stream().await && session.idle_for() >= timeout {
                self.let_go(&session).await;
            }
        }
    }

    /// Lets go of every session (shutdown): those opened here end, adopted ones are forgotten.
    pub(crate) async fn end_all(&self) {
        let all: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        for session in all {
            self.let_go(&session).await;
        }
    }

    /// Sizes of the session table and of what its sessions hold, for tests. `in_flight` is the
    /// service's count and stays 0 here.
    pub(crate) async fn sizes(&self) -> TableSizes {
        let all: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        let mut sizes = TableSizes {
            sessions: all.len(),
            adopted: all.iter().filter(|s| s.adopted).count(),
            events_unstored: self.events_unstored.load(AtomicOrdering::Relaxed),
            ..TableSizes::default()
        };
        for session in &all {
            session.add_sizes(&mut sizes).await;
        }
        sizes
    }

    /// Takes `session` out of the table (not another one under its id), giving memory back once
    /// the table is mostly empty.
    pub(super) fn remove(&self, session: &Session) {
        let mut sessions = self.sessions();
        if sessions
            .get(&session.id)
            .is_some_and(|held| std::ptr::eq(&**held, session))
        {
            sessions.remove(&session.id);
            self.counters.session_closed();
        }
        shrink(&mut sessions);
    }
}

/// Which cap a new session reaches.
#[derive(Clone, Copy)]
enum Scope {
    Principal,
    Peer,
    All,
}

/// 128 bits from the operating system's CSPRNG, as 32 lowercase hex digits.
fn new_session_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `id` has the shape of the ids [`new_session_id`] gives out.
fn is_session_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(name: &str) -> Principal {
        Principal(name.to_owned())
    }

    /// The table counts its sessions, finds one only for the principal it is bound to, forgets
    /// a session once it ends, and is empty after shutdown.
    #[tokio::test]
    async fn the_table_opens_finds_and_forgets_sessions() {
        let counters = Counters::new();
        let shared = Arc::new(Shared::new(
            ServerConfig::default(),
            false,
            counters.clone(),
        ));
        let alice = shared.open(Some(principal("alice")), None).await.unwrap();
        let anonymous = shared.open(None, None).await.unwrap();
        assert_ne!(alice.id, anonymous.id);
        assert_eq!(
            shared.sizes().await,
            TableSizes {
                sessions: 2,
                ..TableSizes::default()
            }
        );
        assert!(shared.find(&alice.id, Some(&principal("alice"))).is_some());
        assert!(
            shared.find(&alice.id, None).is_none(),
            "bound to its principal"
        );
        assert!(shared.find(&alice.id, Some(&principal("bob"))).is_none());
        assert!(shared.find(&anonymous.id, None).is_some());
        assert_eq!(counters.sessions(), 2);

        alice.end().await;
        assert!(shared.find(&alice.id, Some(&principal("alice"))).is_none());
        assert_eq!(shared.sizes().await.sessions, 1);
        assert_eq!(counters.sessions(), 1);

        shared.end_all().await;
        assert!(shared.find(&anonymous.id, None).is_none());
        assert!(shared.sizes().await.is_empty());
        assert_eq!(counters.sessions(), 0);
    }
}
