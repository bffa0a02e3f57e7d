//! The endpoint-wide table: the configuration, the open legacy sessions and the shutdown
//! signal, shared by every request whatever its era or transport.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

use tokio_util::sync::CancellationToken;

use super::app::Principal;
use super::config::ServerConfig;
use super::legacy::{Session, redact, shrink};

/// The sizes of the server's tables, for tests that check they return to empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TableSizes {
    /// Open legacy sessions.
    pub sessions: usize,
    /// Their streams.
    pub streams: usize,
    /// Requests in flight on them.
    pub requests: usize,
    /// Messages waiting for a standalone stream.
    pub queued: usize,
    /// HTTP requests being processed across the endpoint (bounded by
    /// [`ServerConfig::max_requests_in_flight`]).
    pub in_flight: usize,
}

impl TableSizes {
    /// Whether every table is empty.
    pub fn is_empty(&self) -> bool {
        *self == TableSizes::default()
    }
}

/// What the server shares with every session.
pub(crate) struct Shared {
    pub(crate) config: ServerConfig,
    pub(crate) sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Fired at shutdown: every stream ends.
    pub(crate) shutdown: CancellationToken,
}

impl Shared {
    pub(crate) fn new(config: ServerConfig) -> Self {
        Shared {
            config,
            sessions: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
        }
    }

    pub(super) fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|e| e.into_inner())
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
        // Each round ends one session or succeeds; the scopes are three, and another opener
        // may take a freed place meanwhile.
        for _ in 0..4 {
            let candidates = {
                let mut sessions = self.sessions();
                match self.full_scope(&sessions, principal.as_ref(), peer) {
                    None => {
                        let session = self.insert(&mut sessions, principal.clone(), peer)?;
                        return Some(session);
                    }
                    Some(scope) => {
                        let mut in_scope: Vec<(Instant, Arc<Session>)> = sessions
                            .values()
                            .filter(|s| match scope {
                                Scope::Principal => s.principal == principal,
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
                        "session table full: ended the least recently used idle session"
                    );
                    candidate.end().await;
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
        let session = Session::new(id.clone(), principal, peer, self);
        sessions.insert(id, session.clone());
        Some(session)
    }

    /// The session `id`, if open and bound to the same principal.
    pub(crate) fn find(&self, id: &str, principal: Option<&Principal>) -> Option<Arc<Session>> {
        let session = self.sessions().get(id).cloned()?;
        (session.principal.as_ref() == principal).then(|| {
            session.touch();
            session
        })
    }

    /// Ends the sessions idle for longer than the timeout, and those still in their handshake
    /// after `handshake_timeout`. POSTs whose client went away are let go first (finding 3).
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
            if session.handshake_expired(handshake)
                || (!session.has_live_stream().await && session.idle_for() >= timeout)
            {
                session.end().await;
            }
        }
    }

    /// Ends every session (shutdown).
    pub(crate) async fn end_all(&self) {
        let all: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        for session in all {
            session.end().await;
        }
    }

    /// Sizes of the session table and of what its sessions hold, for tests. `in_flight` is the
    /// service's count and stays 0 here.
    pub(crate) async fn sizes(&self) -> TableSizes {
        let all: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        let mut sizes = TableSizes {
            sessions: all.len(),
            ..TableSizes::default()
        };
        for session in &all {
            session.add_sizes(&mut sizes).await;
        }
        sizes
    }

    /// Takes session `id` out of the table, giving memory back once the table is mostly empty.
    pub(super) fn remove(&self, id: &str) {
        let mut sessions = self.sessions();
        sessions.remove(id);
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
        let shared = Arc::new(Shared::new(ServerConfig::default()));
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

        alice.end().await;
        assert!(shared.find(&alice.id, Some(&principal("alice"))).is_none());
        assert_eq!(shared.sizes().await.sessions, 1);

        shared.end_all().await;
        assert!(shared.find(&anonymous.id, None).is_none());
        assert!(shared.sizes().await.is_empty());
    }
}
