//! The authorizer: [`OAuth`] as modelctx-http's [`Authorizer`], giving every request of the HTTP
//! client its token and curing the server's refusals.
//!
//! What it keeps (bounded tables): per resource (an entry, found by the request URL or by a
//! token's resource covering it) the current tokens, the scopes asked for them, the discovery
//! they came from and a generation that changes with every new token; per send a ticket (which
//! entry, which generation, what was done after its refusal); per origin the latest
//! `DPoP-Nonce` (the client's [`DpopNonces`](super::DpopNonces), shared with the token
//! requests). Every change of an entry's tokens happens in one flight at a time (an async
//! lock per entry): a refusal that finds the tokens changed since its send just sends again, and
//! one that finds a flight failed while it waited shares that failure, so concurrent 401s run
//! one flow.
//!
//! The decisions on a refusal, in order:
//! 1. 401 with a `DPoP` challenge `error="use_dpop_nonce"` and a `DPoP-Nonce`: keep the nonce,
//!    send again once per request;
//! 2. a 401 whose challenges name neither `Bearer` nor `DPoP`: not ours ([`Retry::GiveUp`]);
//! 3. 401 to a token: the protected resource metadata is read again; when it no longer names the
//!    token's issuer, the resource's tokens are forgotten and the whole flow runs with the new
//!    authorization server (which registers the client there: nothing of the old one's client
//!    is shown to it). Else once per request: refresh; a refresh refused with `invalid_grant`
//!    drops the refresh token and runs the flow once; a 401 to a fresh token is
//!    [`Error::Rejected`];
//! 4. 401 without a token: discovery and the flow (the client's grant without a user when it
//!    has one); a request that may not involve the user ([`Outgoing::interactive`] false) gets
//!    [`Error::InteractionRequired`] unless the client has such a grant;
//! 5. 403 `insufficient_scope` to a token: a new authorization for the union of the scopes
//!    asked for and the challenge's, at most [`max_step_ups`](super::OAuthBuilder::max_step_ups)
//!    times per request and never when the challenge asks for nothing new
//!    ([`Error::InsufficientScope`]).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{ACCEPT, AUTHORIZATION};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use modelctx_http::client::{
    AuthFailure, Authorizer, BoxFuture, Credentials, Outgoing, Reply, Retry,
};

use super::challenge::Challenges;
use super::error::remote_text;
use super::prm::ServerUrl;
use super::token::{TokenType, Tokens};
use super::{Discovery, DpopKey, Error, OAuth, StoreKey, Stored, TokenRecord};
use crate::fetch::FetchRequest;

/// The default of [`OAuthBuilder::max_step_ups`](super::OAuthBuilder::max_step_ups): 2.
pub const DEFAULT_MAX_STEP_UPS: u32 = 2;

/// The most request URLs (and so resources) kept; the oldest is forgotten first.
const MAX_RESOURCES: usize = 64;
/// The most send tickets kept (a request's sends are at most six: older tickets are of
/// finished requests).
const MAX_TICKETS: usize = 4096;
/// The header of a DPoP proof (RFC 9449 section 4.1).
const DPOP: HeaderName = HeaderName::from_static("dpop");
/// A token is refreshed before a send when it expires within this, or within a tenth of its
/// lifetime when that is longer.
const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// A map of at most `cap` entries that forgets the oldest inserted first.
#[derive(Debug)]
struct Bounded<K, V> {
    cap: usize,
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: Hash + Eq + Clone, V> Bounded<K, V> {
    fn new(cap: usize) -> Self {
        Bounded {
            cap,
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key)
    }

    fn insert(&mut self, key: K, value: V) {
        if !self.map.contains_key(&key) {
            if self.order.len() >= self.cap
                && let Some(oldest) = self.order.pop_front()
            {
                self.map.remove(&oldest);
            }
            self.order.push_back(key.clone());
        }
        self.map.insert(key, value);
    }

    fn values(&self) -> impl Iterator<Item = &V> {
        self.map.values()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The authorizer's state, inside [`OAuth`].
pub(crate) struct Session {
    next_ticket: AtomicU64,
    tickets: Mutex<Bounded<u64, Ticket>>,
    /// Entries by request URL (`scheme://authority/path`); several URLs may share one.
    resources: Mutex<Bounded<String, Arc<Entry>>>,
}

impl Default for Session {
    fn default() -> Self {
        Session {
            next_ticket: AtomicU64::new(1),
            tickets: Mutex::new(Bounded::new(MAX_TICKETS)),
            resources: Mutex::new(Bounded::new(MAX_RESOURCES)),
        }
    }
}

/// What was done after a send was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Sent again with the server's new DPoP nonce.
    Nonce,
    /// The token was refreshed.
    Refresh,
    /// The authorization flow ran.
    Flow,
    /// The flow ran with more scopes.
    StepUp,
    /// The flow ran with the server's new authorization server.
    Migrate,
    /// Another request's flight changed the tokens meanwhile.
    Shared,
}

/// One send.
#[derive(Clone)]
struct Ticket {
    entry: Arc<Entry>,
    /// The entry's generation when the credentials were given.
    generation: u64,
    /// Whether a token went with it.
    had_token: bool,
    /// What was done after the server refused it.
    action: Option<Action>,
}

/// The tokens of one resource.
struct Entry {
    /// The URL of the request that made the entry: discovery starts from it.
    url: String,
    /// One flight (refresh, flow, step-up, migration) at a time.
    flight: tokio::sync::Mutex<()>,
    state: Mutex<EntryState>,
}

#[derive(Default)]
struct EntryState {
    current: Option<Current>,
    discovery: Option<Discovery>,
    /// Changes with every change of `current`.
    generation: u64,
    /// Flights finished.
    flights: u64,
    /// The last flight's failure, with its number.
    failure: Option<(u64, AuthFailure)>,
    /// The generation whose renewal before expiry failed: not tried again for those tokens
    /// (a grant without a user is never retried after a refusal; the server's answer decides).
    renewal_failed: Option<u64>,
}

/// A token and what it was asked with.
#[derive(Clone)]
struct Current {
    tokens: Tokens,
    /// The scopes asked for (a step-up asks for their union with more).
    requested: Vec<String>,
    obtained: SystemTime,
}

impl Current {
    /// Whether it expires within the margin: 30 s, or a tenth of its lifetime when longer.
    fn expiring(&self, now: SystemTime) -> bool {
        let Some(expires_at) = self.tokens.expires_at else {
            return false;
        };
        let lifetime = expires_at.duration_since(self.obtained).unwrap_or_default();
        let margin = EXPIRY_MARGIN.max(lifetime / 10);
        expires_at
            .duration_since(now)
            .map_or(true, |left| left <= margin)
    }
}

impl Entry {
    fn new(url: String) -> Entry {
        Entry {
            url,
            flight: tokio::sync::Mutex::new(()),
            state: Mutex::new(EntryState::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, EntryState> {
        lock(&self.state)
    }

    /// The resource its tokens are for, once it has some.
    fn resource(&self) -> Option<String> {
        self.state()
            .current
            .as_ref()
            .map(|c| c.tokens.resource.clone())
    }

    // Every change of a resource's tokens goes through `install`, `adopt`, `forget` and
    // `drop_refresh_token`; `OAuth::keep` and `OAuth::unkeep` mirror them in the `TokenStore`.

    /// Makes `tokens`, asked for `requested` through `discovery`, the current ones.
    fn install(&self, tokens: Tokens, requested: Vec<String>, discovery: Discovery) {
        let mut state = self.state();
        state.current = Some(Current {
            tokens,
            requested,
            obtained: SystemTime::now(),
        });
        state.discovery = Some(discovery);
        state.generation += 1;
    }

    /// Makes stored tokens the current ones when there are none (their discovery is made again
    /// when needed).
    fn adopt(&self, tokens: Tokens, requested: Vec<String>) {
        let mut state = self.state();
        if state.current.is_none() {
            state.current = Some(Current {
                tokens,
                requested,
                obtained: SystemTime::now(),
            });
            state.generation += 1;
        }
    }

    /// Forgets the tokens (the client's registrations at the authorization servers stay).
    fn forget(&self) {
        let mut state = self.state();
        state.current = None;
        state.generation += 1;
    }

    /// Forgets the refresh token only (the authorization server refused it).
    fn drop_refresh_token(&self) {
        if let Some(current) = self.state().current.as_mut() {
            current.tokens.refresh_token = None;
        }
    }
}

/// Scheme, authority and path of `uri`: what names a request's target.
fn url_key(uri: &Uri) -> String {
    format!(
        "{}://{}{}",
        uri.scheme_str().unwrap_or("http"),
        uri.authority().map_or("", |a| a.as_str()),
        uri.path()
    )
}

/// `first` then what of `more` it lacks.
fn union(first: &[String], more: &[String]) -> Vec<String> {
    let mut all = first.to_vec();
    for scope in more {
        if !all.contains(scope) {
            all.push(scope.clone());
        }
    }
    all
}

/// Whether `error` is the token endpoint's `invalid_grant` (a refresh token it no longer takes).
fn is_invalid_grant(error: &Error) -> bool {
    matches!(error, Error::TokenRefused { error: Some(e), .. } if e == "invalid_grant")
}

/// The store's record of `tokens`, asked for `requested`.
fn record_of(tokens: &Tokens, requested: &[String]) -> TokenRecord {
    let token_type = match tokens.token_type {
        TokenType::Bearer => "Bearer",
        TokenType::Dpop => "DPoP",
    };
    let mut record = TokenRecord::new(tokens.access_token.clone(), token_type);
    record.expires_at = tokens
        .expires_at
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_secs());
    record.refresh_token = tokens.refresh_token.clone();
    record.scopes_requested = requested.to_vec();
    record.scopes_granted = tokens.scopes.clone();
    record.dpop_key = tokens.dpop_key.as_ref().map(|key| key.pkcs8_der().to_vec());
    record
}

/// The tokens (and the scopes asked for them) of a stored record, with the DPoP key they are
/// bound to; `None` for a record the client cannot use (an unknown token type, a key that is
/// not a PKCS#8 P-256 key).
fn tokens_of(record: TokenRecord, issuer: &str, resource: &str) -> Option<(Tokens, Vec<String>)> {
    let token_type = if record.token_type.eq_ignore_ascii_case("bearer") {
        TokenType::Bearer
    } else if record.token_type.eq_ignore_ascii_case("dpop") {
        TokenType::Dpop
    } else {
        return None;
    };
    let tokens = Tokens {
        access_token: record.access_token,
        token_type,
        expires_at: record
            .expires_at
            .and_then(|s| UNIX_EPOCH.checked_add(Duration::from_secs(s))),
        refresh_token: record.refresh_token,
        scopes: record.scopes_granted,
        issuer: issuer.to_owned(),
        resource: resource.to_owned(),
        dpop_key: match &record.dpop_key {
            Some(der) => match DpopKey::from_pkcs8_der(der) {
                Ok(key) => Some(key),
                Err(error) => {
                    tracing::warn!(%issuer, %resource, %error, "stored tokens with an unusable DPoP key: not used");
                    return None;
                }
            },
            None => None,
        },
    };
    Some((tokens, record.scopes_requested))
}

/// Logs a store failure of the authorizer's (the tokens stay in memory for this process).
fn logged(result: Result<(), Error>) {
    if let Err(error) = result {
        tracing::warn!(%error, "tokens could not be stored");
    }
}

/// A parameter of a `Bearer` or `DPoP` challenge, cut and escaped.
fn challenge_text(challenges: &Challenges, name: &str) -> Option<String> {
    challenges
        .iter()
        .filter(|c| c.is_oauth())
        .find_map(|c| c.param(name))
        .map(remote_text)
}

impl Session {
    fn record(&self, ticket: u64, info: Ticket) {
        lock(&self.tickets).insert(ticket, info);
    }

    fn ticket(&self, ticket: u64) -> Option<Ticket> {
        lock(&self.tickets).get(&ticket).cloned()
    }

    fn mark(&self, ticket: u64, action: Action) {
        if let Some(info) = lock(&self.tickets).get_mut(&ticket) {
            info.action = Some(action);
        }
    }

    /// The entry of a request to `uri`: the one made for its URL, else one whose token's
    /// resource covers it (then also kept under this URL), else (with `create`) a new one.
    fn entry_for(&self, uri: &Uri, create: bool) -> Option<Arc<Entry>> {
        let key = url_key(uri);
        let mut resources = lock(&self.resources);
        if let Some(entry) = resources.get(&key) {
            return Some(entry.clone());
        }
        let covering = ServerUrl::parse(&key).ok().and_then(|server| {
            resources
                .values()
                .find(|e| e.resource().is_some_and(|r| server.is_covered_by(&r)))
                .cloned()
        });
        let entry = match covering {
            Some(entry) => entry,
            None if create => Arc::new(Entry::new(uri.to_string())),
            None => return None,
        };
        resources.insert(key, entry.clone());
        Some(entry)
    }
}

/// How a flight ended well.
enum Flown {
    /// It ran and did this.
    Ran(Action),
    /// Another flight changed the tokens first: nothing to do.
    ByAnother,
}

impl OAuth {
    /// Authorizes the client for the MCP server at `url` before any request needs it (a
    /// command-line login): one unauthenticated `GET url` with `Accept: text/event-stream`,
    /// whose 401 gives the challenge (its `resource_metadata` and `scope`); any other answer
    /// (or none) leads to the well-known protected resource metadata. Then discovery and the
    /// authorization code flow with the application's
    /// [`handler`](super::OAuthBuilder::handler); the tokens are kept for the requests of the
    /// HTTP client that follow.
    ///
    /// `Ok(None)`: the server does not ask for authorization (no 401 and no protected resource
    /// metadata).
    pub async fn authorize_now(&self, url: &str) -> Result<Option<Tokens>, Error> {
        let server = ServerUrl::parse(url)?;
        let uri: Uri = url.parse().map_err(|_| Error::InvalidUrl {
            url: url.to_owned(),
            why: "is not a URI",
        })?;
        let probe =
            FetchRequest::get(url).header(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let refused = match self.inner.fetch.send(probe).await {
            Ok(response) if response.status == StatusCode::UNAUTHORIZED => {
                Some(Challenges::from_headers(&response.headers))
            }
            _ => None,
        };
        let Some(challenges) = refused else {
            // Not refused: only protected resource metadata says authorization is wanted.
            if super::prm::discover(self.inner.fetch.as_ref(), &server, None)
                .await?
                .is_none()
            {
                return Ok(None);
            }
            return self.authorize_with(&uri, url, &Challenges::default()).await;
        };
        self.authorize_with(&uri, url, &challenges).await
    }

    /// Discovery from `challenges`, then the flow for the entry of `uri`.
    async fn authorize_with(
        &self,
        uri: &Uri,
        url: &str,
        challenges: &Challenges,
    ) -> Result<Option<Tokens>, Error> {
        let discovery = self.discover(url, challenges).await?;
        let entry = self
            .inner
            .session
            .entry_for(uri, true)
            .expect("created when missing");
        let scopes = discovery.scopes();
        let _flight = entry.flight.lock().await;
        let tokens = self.obtain(&discovery, &scopes, true).await?;
        self.keep(&entry, tokens.clone(), scopes, discovery).await?;
        Ok(Some(tokens))
    }

    /// Makes `tokens` `entry`'s current ones and saves them in the store.
    async fn keep(
        &self,
        entry: &Entry,
        tokens: Tokens,
        requested: Vec<String>,
        discovery: Discovery,
    ) -> Result<(), Error> {
        let key = StoreKey::tokens(&tokens.issuer, &tokens.resource);
        let record = Stored::Tokens(record_of(&tokens, &requested));
        entry.install(tokens, requested, discovery);
        self.inner
            .store
            .save(&key, &record)
            .await
            .map_err(|source| Error::Store { source })
    }

    /// Forgets `entry`'s tokens, in the store too.
    async fn unkeep(&self, entry: &Entry) -> Result<(), Error> {
        let key = entry
            .state()
            .current
            .as_ref()
            .map(|c| StoreKey::tokens(&c.tokens.issuer, &c.tokens.resource));
        entry.forget();
        match key {
            Some(key) => {
                (self.inner.store.remove(&key).await).map_err(|source| Error::Store { source })
            }
            None => Ok(()),
        }
    }

    /// Forgets `entry`'s refresh token, in the store too.
    async fn drop_refresh_token(&self, entry: &Entry) -> Result<(), Error> {
        entry.drop_refresh_token();
        let Some(current) = entry.state().current.clone() else {
            return Ok(());
        };
        let key = StoreKey::tokens(&current.tokens.issuer, &current.tokens.resource);
        let record = Stored::Tokens(record_of(&current.tokens, &current.requested));
        (self.inner.store.save(&key, &record).await).map_err(|source| Error::Store { source })
    }

    /// The stored tokens of `issuer` for `resource`, when they are not `known` (another process
    /// got new ones).
    async fn stored_other_than(
        &self,
        known: &Tokens,
    ) -> Result<Option<(Tokens, Vec<String>)>, Error> {
        let key = StoreKey::tokens(&known.issuer, &known.resource);
        match self.inner.store.load(&key).await {
            Ok(Some(Stored::Tokens(record))) if record.access_token != known.access_token => {
                Ok(tokens_of(record, &known.issuer, &known.resource))
            }
            Ok(_) => Ok(None),
            Err(source) => Err(Error::Store { source }),
        }
    }

    /// An entry for a request to `uri` made of stored tokens whose resource covers it (kept by
    /// an earlier run), if the store has any.
    async fn load_stored(&self, uri: &Uri) -> Result<Option<Arc<Entry>>, Error> {
        let Ok(server) = ServerUrl::parse(&url_key(uri)) else {
            return Ok(None);
        };
        let store = &self.inner.store;
        let keys = store
            .list()
            .await
            .map_err(|source| Error::Store { source })?;
        for key in keys {
            let StoreKey::Tokens { issuer, resource } = &key else {
                continue;
            };
            if !server.is_covered_by(resource) {
                continue;
            }
            let record = match store.load(&key).await {
                Ok(Some(Stored::Tokens(record))) => record,
                Ok(_) => continue,
                Err(source) => return Err(Error::Store { source }),
            };
            let Some((tokens, requested)) = tokens_of(record, issuer, resource) else {
                continue;
            };
            let entry = self
                .inner
                .session
                .entry_for(uri, true)
                .expect("created when missing");
            entry.adopt(tokens, requested);
            return Ok(Some(entry));
        }
        Ok(None)
    }

    /// Forgets the tokens in memory whose resource is `covered` (logout), and returns them.
    /// Each entry's flight is waited for first: a refresh under way ends before its tokens are
    /// taken.
    pub(crate) async fn forget_tokens(
        &self,
        covered: &(dyn Fn(&str) -> bool + Sync),
    ) -> Vec<Tokens> {
        let entries: Vec<Arc<Entry>> = {
            let resources = lock(&self.inner.session.resources);
            let mut entries: Vec<Arc<Entry>> = Vec::new();
            for entry in resources.values() {
                if !entries.iter().any(|e| Arc::ptr_eq(e, entry)) {
                    entries.push(entry.clone());
                }
            }
            entries
        };
        let mut taken = Vec::new();
        for entry in entries {
            let _flight = entry.flight.lock().await;
            let current = entry.state().current.clone();
            if let Some(current) = current
                && covered(&current.tokens.resource)
            {
                entry.forget();
                taken.push(current.tokens);
            }
        }
        taken
    }

    /// The latest `DPoP-Nonce` a server at the origin of `url` sent (RFC 9449 section 8), for
    /// the proofs of the requests that follow.
    pub fn dpop_nonce(&self, url: &str) -> Option<String> {
        self.inner.extensions.nonces.get(url)
    }

    /// Tokens for `discovery`'s resource with `scopes`: the client's grant without a user
    /// when it has one ([`OAuth::grant_token`]: client credentials, JWT bearer, enterprise),
    /// for any request; else the authorization code flow, which involves the user: a request
    /// that may not ([`Outgoing::interactive`]) gets [`Error::InteractionRequired`].
    async fn obtain(
        &self,
        discovery: &Discovery,
        scopes: &[String],
        interactive: bool,
    ) -> Result<Tokens, Error> {
        if self.inner.extensions.grant.is_some() {
            return self.grant_token(discovery, scopes).await;
        }
        if !interactive {
            return Err(Error::InteractionRequired {
                resource: discovery.resource.clone(),
            });
        }
        let Some(handler) = &self.inner.handler else {
            return Err(Error::InvalidSetting {
                setting: "handler",
                value: String::new(),
                why: "is needed to authorize with the authorization code flow",
            });
        };
        self.authorize_scopes(discovery, scopes, handler.as_ref())
            .await
    }

    /// Runs `job` as `entry`'s one flight, unless another changed its tokens since
    /// `generation` ([`Flown::ByAnother`]) or failed since `flights` (its failure is shared).
    async fn fly(
        &self,
        entry: &Entry,
        generation: u64,
        flights: u64,
        job: impl Future<Output = Result<Action, Error>>,
    ) -> Result<Flown, AuthFailure> {
        let _flight = entry.flight.lock().await;
        {
            let state = entry.state();
            if state.generation != generation {
                return Ok(Flown::ByAnother);
            }
            if let Some((at, failure)) = &state.failure
                && *at > flights
            {
                return Err(failure.clone());
            }
        }
        let result = job.await;
        let mut state = entry.state();
        state.flights += 1;
        match result {
            Ok(action) => {
                state.failure = None;
                Ok(Flown::Ran(action))
            }
            Err(error) => {
                tracing::debug!(url = %entry.url, %error, "authorization failed");
                let failure = AuthFailure::from(error);
                state.failure = Some((state.flights, failure.clone()));
                Err(failure)
            }
        }
    }

    /// Renews `entry`'s token before a send when it is about to expire (one renewal for
    /// concurrent sends): with its refresh token, else by running the client's grant without a
    /// user again. A failure is only logged and not tried again for these tokens: the token
    /// goes as it is and the server's answer decides; an `invalid_grant` to a refresh drops the
    /// refresh token.
    async fn refresh_early(&self, entry: &Entry, generation: u64) {
        let _flight = entry.flight.lock().await;
        let (current, discovery) = {
            let state = entry.state();
            if state.generation != generation {
                return;
            }
            (state.current.clone(), state.discovery.clone())
        };
        let Some(current) = current else {
            return;
        };
        let discovery = match discovery {
            Some(discovery) => discovery,
            // Tokens from the store: their authorization server is found again.
            None => match self.discover(&entry.url, &Challenges::default()).await {
                Ok(found) if found.auth_server.issuer == current.tokens.issuer => found,
                _ => return,
            },
        };
        let renewed = if current.tokens.refresh_token.is_some() {
            self.refresh(&discovery, &current.tokens).await
        } else {
            // A grant without a user: it runs again (it gave no refresh token).
            self.grant_token(&discovery, &current.requested).await
        };
        match renewed {
            Ok(tokens) => logged(self.keep(entry, tokens, current.requested, discovery).await),
            Err(error) => {
                tracing::debug!(url = %entry.url, %error, "renewal before expiry failed");
                entry.state().renewal_failed = Some(generation);
                if current.tokens.refresh_token.is_some() && is_invalid_grant(&error) {
                    logged(self.drop_refresh_token(entry).await);
                }
            }
        }
    }

    /// The headers presenting `current` on `request`: `Authorization: Bearer <token>`, or for
    /// a DPoP-bound token (`token_type` `DPoP`) `Authorization: DPoP <token>` and a fresh proof
    /// of the client's key in `DPoP` (`htm` the method, `htu` the URL without query, `ath` the
    /// token's hash, `nonce` the latest one of the server's origin).
    fn present(&self, current: &Current, request: &Outgoing<'_>) -> Result<HeaderMap, Error> {
        let tokens = &current.tokens;
        let unusable = |why: &str| Error::InvalidTokenResponse {
            endpoint: tokens.issuer.clone(),
            why: why.into(),
        };
        let mut headers = HeaderMap::new();
        let scheme = match tokens.token_type {
            TokenType::Bearer => "Bearer",
            TokenType::Dpop => {
                // The key the token is bound to, else (a record of an older store) the client's.
                let key = tokens
                    .dpop_key
                    .as_ref()
                    .or(self.inner.extensions.dpop.as_ref());
                let Some(key) = key else {
                    return Err(unusable(
                        "a DPoP-bound token, and the client has no DPoP key to prove it",
                    ));
                };
                let htu = url_key(request.uri);
                let nonce = self.inner.extensions.nonces.get(&htu);
                let proof = key.proof(
                    request.method.as_str(),
                    &htu,
                    Some(&tokens.access_token),
                    nonce.as_deref(),
                )?;
                let proof = HeaderValue::from_str(&proof)
                    .map_err(|_| unusable("a DPoP proof that cannot be a header value"))?;
                headers.insert(DPOP, proof);
                "DPoP"
            }
        };
        let value = HeaderValue::from_str(&format!("{scheme} {}", tokens.access_token))
            .map_err(|_| unusable("an access token that cannot be a header value"))?;
        headers.insert(AUTHORIZATION, value);
        Ok(headers)
    }

    /// [`Authorizer::credentials`].
    async fn give(&self, request: &Outgoing<'_>) -> Result<Credentials, AuthFailure> {
        let session = &self.inner.session;
        let ticket = session.next_ticket.fetch_add(1, Ordering::Relaxed);
        // A URL met for the first time: the store is asked once, then the entry (empty when
        // the store had nothing) answers.
        let entry = match session.entry_for(request.uri, false) {
            Some(entry) => entry,
            None => match self.load_stored(request.uri).await? {
                Some(entry) => entry,
                None => session
                    .entry_for(request.uri, true)
                    .expect("created when missing"),
            },
        };
        let (generation, expiring) = {
            let state = entry.state();
            // Renewable without the user: by its refresh token, or by the client's grant.
            let grant = self.inner.extensions.grant.is_some();
            let expiring = state.renewal_failed != Some(state.generation)
                && state.current.as_ref().is_some_and(|c| {
                    (grant || c.tokens.refresh_token.is_some()) && c.expiring(SystemTime::now())
                });
            (state.generation, expiring)
        };
        if expiring {
            self.refresh_early(&entry, generation).await;
        }
        let (generation, current) = {
            let state = entry.state();
            (state.generation, state.current.clone())
        };
        let headers = match &current {
            Some(current) => self.present(current, request)?,
            None => HeaderMap::new(),
        };
        session.record(
            ticket,
            Ticket {
                entry,
                generation,
                had_token: current.is_some(),
                action: None,
            },
        );
        Ok(Credentials::new(headers, ticket))
    }

    /// [`Authorizer::refused`]: the decisions of the [module](self).
    async fn judge(&self, request: &Outgoing<'_>, reply: &Reply<'_>) -> Result<Retry, AuthFailure> {
        let session = &self.inner.session;
        let challenges = Challenges::from_headers(reply.headers);
        let this = session.ticket(reply.ticket);
        let history: Vec<Ticket> = request
            .earlier
            .iter()
            .filter_map(|t| session.ticket(*t))
            .chain(this.clone())
            .collect();
        let done = |action: Action| history.iter().filter(|t| t.action == Some(action)).count();
        // A token came fresh in this request (anything but a nonce retry).
        let fresh = history
            .iter()
            .any(|t| t.action.is_some_and(|a| a != Action::Nonce));
        let unauthorized = reply.status == StatusCode::UNAUTHORIZED;

        // 1. A new DPoP nonce: once per request.
        let wants_nonce = challenges
            .iter()
            .any(|c| c.is("DPoP") && c.param("error") == Some("use_dpop_nonce"));
        if unauthorized
            && wants_nonce
            && let Some(nonce) = reply.headers.get("dpop-nonce")
        {
            if let Ok(nonce) = nonce.to_str() {
                self.inner
                    .extensions
                    .nonces
                    .set(&url_key(request.uri), nonce);
            }
            if done(Action::Nonce) > 0 {
                return Err(Error::Rejected {
                    issuer: String::new(),
                    status: 401,
                    error: Some("use_dpop_nonce".into()),
                    description: Some("the server keeps asking for a new DPoP nonce".into()),
                }
                .into());
            }
            session.mark(reply.ticket, Action::Nonce);
            return Ok(Retry::Send);
        }
        // 2. Not an OAuth challenge: not ours.
        if !challenges.iter().any(|c| c.is_oauth()) {
            return Ok(Retry::GiveUp);
        }
        let entry = match this.as_ref().map(|t| t.entry.clone()) {
            Some(entry) => entry,
            None => session
                .entry_for(request.uri, true)
                .expect("created when missing"),
        };
        let (generation, flights, current, stored) = {
            let state = entry.state();
            // A forgotten ticket: as if sent with the current tokens.
            let generation = this.as_ref().map_or(state.generation, |t| t.generation);
            (
                generation,
                state.flights,
                state.current.clone(),
                state.discovery.clone(),
            )
        };
        let had_token = this.as_ref().is_some_and(|t| t.had_token);
        let interactive = request.interactive;
        let url = entry.url.clone();

        let flown = if !unauthorized && had_token {
            // 5. Step-up, for scopes not asked for yet, a bounded number of times.
            let required = challenges.scopes();
            let requested = current
                .as_ref()
                .map(|c| c.requested.clone())
                .unwrap_or_default();
            let needed = super::scopes::step_up(&requested, &required)?;
            if done(Action::StepUp) >= self.inner.max_step_ups as usize {
                return Err(Error::InsufficientScope {
                    required,
                    requested,
                }
                .into());
            }
            let job = async {
                let discovery = match stored {
                    Some(discovery) => discovery,
                    None => self.discover(&url, &challenges).await?,
                };
                let tokens = self.obtain(&discovery, &needed, interactive).await?;
                logged(self.keep(&entry, tokens, needed.clone(), discovery).await);
                Ok(Action::StepUp)
            };
            self.fly(&entry, generation, flights, job).await?
        } else if had_token {
            // 3. A token refused: the resource's metadata again, then refresh or the flow.
            let job = async {
                let discovery = self.discover(&url, &challenges).await?;
                let Some(current) = current else {
                    return Err(Error::CannotRefresh {
                        why: "the tokens were forgotten",
                    });
                };
                let issuer = &current.tokens.issuer;
                let listed = match &discovery.protected_resource {
                    Some(protected) => protected.authorization_servers.contains(issuer),
                    None => &discovery.auth_server.issuer == issuer,
                };
                if !listed {
                    if done(Action::Migrate) > 0 {
                        return Err(Error::Rejected {
                            issuer: issuer.clone(),
                            status: 401,
                            error: challenges.error().map(remote_text),
                            description: Some(
                                "the server changed its authorization server again".into(),
                            ),
                        });
                    }
                    tracing::debug!(%url, from = %issuer, to = %discovery.auth_server.issuer,
                        "the server moved to another authorization server");
                    logged(self.unkeep(&entry).await);
                    let scopes = discovery.scopes();
                    let tokens = self.obtain(&discovery, &scopes, interactive).await?;
                    logged(self.keep(&entry, tokens, scopes, discovery).await);
                    return Ok(Action::Migrate);
                }
                if fresh {
                    return Err(Error::Rejected {
                        issuer: issuer.clone(),
                        status: 401,
                        error: challenges.error().map(remote_text),
                        description: challenge_text(&challenges, "error_description"),
                    });
                }
                // The tokens' own authorization server, as discovered when they were got.
                let own = match stored {
                    Some(stored) if &stored.auth_server.issuer == issuer => stored,
                    _ => discovery,
                };
                if current.tokens.refresh_token.is_some() {
                    match self.refresh(&own, &current.tokens).await {
                        Ok(tokens) => {
                            let requested = current.requested.clone();
                            logged(self.keep(&entry, tokens, requested, own).await);
                            return Ok(Action::Refresh);
                        }
                        Err(error) if is_invalid_grant(&error) => {
                            // Another process sharing the store may have rotated it.
                            if let Some((tokens, requested)) =
                                self.stored_other_than(&current.tokens).await?
                            {
                                entry.install(tokens, requested, own);
                                return Ok(Action::Refresh);
                            }
                            tracing::debug!(%url, "refresh token refused: authorizing again");
                            logged(self.drop_refresh_token(&entry).await);
                        }
                        Err(error) => return Err(error),
                    }
                }
                let scopes = union(&current.requested, &own.scopes());
                let tokens = self.obtain(&own, &scopes, interactive).await?;
                logged(self.keep(&entry, tokens, scopes, own).await);
                Ok(Action::Flow)
            };
            self.fly(&entry, generation, flights, job).await?
        } else {
            // 4. No token yet: discovery and the flow.
            if fresh {
                return Err(Error::Rejected {
                    issuer: String::new(),
                    status: reply.status.as_u16(),
                    error: challenges.error().map(remote_text),
                    description: Some("refused again after authorization".into()),
                }
                .into());
            }
            let job = async {
                let discovery = self.discover(&url, &challenges).await?;
                let scopes = discovery.scopes();
                let tokens = self.obtain(&discovery, &scopes, interactive).await?;
                logged(self.keep(&entry, tokens, scopes, discovery).await);
                Ok(Action::Flow)
            };
            self.fly(&entry, generation, flights, job).await?
        };
        let action = match flown {
            Flown::Ran(action) => action,
            Flown::ByAnother => Action::Shared,
        };
        session.mark(reply.ticket, action);
        Ok(Retry::Send)
    }
}

/// The HTTP client's authorizer: a token on every request (refreshed first when it is about
/// to expire), and the refusals cured as the [client module](super) says.
impl Authorizer for OAuth {
    fn credentials<'a>(
        &'a self,
        request: &'a Outgoing<'a>,
    ) -> BoxFuture<'a, Result<Credentials, AuthFailure>> {
        Box::pin(self.give(request))
    }

    fn refused<'a>(
        &'a self,
        request: &'a Outgoing<'a>,
        reply: &'a Reply<'a>,
    ) -> BoxFuture<'a, Result<Retry, AuthFailure>> {
        Box::pin(self.judge(request, reply))
    }

    fn observed(&self, request: &Outgoing<'_>, reply: &Reply<'_>) {
        self.inner
            .extensions
            .nonces
            .update(&url_key(request.uri), reply.headers);
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
