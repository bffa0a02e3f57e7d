//! What the server holds while it runs: the registry of what it offers (which may change), and
//! the state every connection shares (settings, compiled schemas, load counters, the change
//! broadcast).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use modelctx_session::{ListKind, ServerConfig};
use modelctx_types::ErrorObject;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::complete::Completer;
use crate::handler::States;
use crate::prompt::Prompt;
use crate::resource::{Resource, ResourceTemplate, Subscribe, SubscribeHook};
use crate::settings::Settings;
use crate::tool::Registered;

/// A change to what a server offers, which its live connections announce: a list changed
/// (`notifications/*/list_changed`), or a resource did (`notifications/resources/updated`, to
/// its subscribers).
///
/// Carried between the instances of a fleet by a [`Bus`](crate::bus::Bus), serialized (serde)
/// as `{"list":"tools"}` (`"prompts"`, `"resources"`) or `{"updated":"file:///a"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// The list of this kind changed.
    List(ListKind),
    /// The resource at this URI changed.
    Updated(Arc<str>),
}

/// The serialized form of a [`Change`].
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum ChangeWire<'a> {
    List(&'a str),
    Updated(std::borrow::Cow<'a, str>),
}

impl Serialize for Change {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let wire = match self {
            Change::List(ListKind::Tools) => ChangeWire::List("tools"),
            Change::List(ListKind::Prompts) => ChangeWire::List("prompts"),
            Change::List(ListKind::Resources) => ChangeWire::List("resources"),
            Change::List(other) => {
                return Err(serde::ser::Error::custom(format_args!(
                    "a list of kind {other:?} has no serialized form"
                )));
            }
            Change::Updated(uri) => ChangeWire::Updated(std::borrow::Cow::Borrowed(uri)),
        };
        wire.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Change {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "lowercase")]
        enum Owned {
            List(String),
            Updated(String),
        }
        match Owned::deserialize(deserializer)? {
            Owned::List(kind) => match kind.as_str() {
                "tools" => Ok(Change::List(ListKind::Tools)),
                "prompts" => Ok(Change::List(ListKind::Prompts)),
                "resources" => Ok(Change::List(ListKind::Resources)),
                other => Err(serde::de::Error::custom(format_args!(
                    "an unknown list {other:?}"
                ))),
            },
            Owned::Updated(uri) => Ok(Change::Updated(Arc::from(uri))),
        }
    }
}

/// What the server offers.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    pub(crate) tools: BTreeMap<String, Arc<Registered>>,
    pub(crate) prompts: BTreeMap<String, Prompt>,
    pub(crate) resources: BTreeMap<String, Resource>,
    pub(crate) templates: BTreeMap<String, ResourceTemplate>,
    /// The skills served (`ServerBuilder::skills_dir`, `ServerBuilder::skill`).
    pub(crate) skills: crate::skills::Catalog,
}

impl Registry {
    /// The completer of variable `variable` of the template `uri_template`.
    pub(crate) fn template_completer(
        &self,
        uri_template: &str,
        variable: &str,
    ) -> Result<Option<Completer>, ErrorObject> {
        crate::resource::template_completer(&self.templates, uri_template, variable)
    }
}

#[derive(Debug)]
pub(crate) struct Shared {
    /// Shared by every session of the server (a session takes no copy of it).
    pub(crate) config: Arc<ServerConfig>,
    /// Compiled tool schemas.
    #[cfg(feature = "validation")]
    pub(crate) schemas: modelctx_types::schema::SchemaCache,
    /// Connections and handlers under way.
    pub(crate) load: LoadCounters,
    /// Counts requests against the limits.
    pub(crate) limiter: Arc<crate::limits::Limiter>,
    /// Places for modern HTTP requests being handled (`Settings::max_modern_requests`).
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) modern_requests: Arc<tokio::sync::Semaphore>,
    /// Decides which resources a connection may hear of changes to.
    pub(crate) subscribe_hook: Option<SubscribeHook>,
    /// Seals the `requestState` of modern round trips.
    pub(crate) sealer: Arc<modelctx_session::state::StateSealer>,
    pub(crate) settings: Settings,
    pub(crate) registry: RwLock<Registry>,
    /// The server's changes, made here or (with a bus) on another instance: what its legacy
    /// fan-out and listen streams hear.
    pub(crate) changes: broadcast::Sender<Change>,
    /// The bus to the other instances of a fleet ([`ServerBuilder::bus`](crate::ServerBuilder::bus)).
    pub(crate) bus: Option<crate::bus::BusLink>,
    /// The state handlers take ([`State`](crate::State)).
    pub(crate) state: Arc<States>,
    /// The tasks: their store, and those running here (`crate::tasks`).
    pub(crate) tasks: Arc<crate::tasks::runner::Tasks>,
    /// Legacy HTTP sessions: their store, and their requests still running.
    #[cfg(feature = "http")]
    pub(crate) legacy: crate::http::Legacy,
    /// [`ServerBuilder::auth`](crate::ServerBuilder::auth)'s guard: the endpoint's when its
    /// `ServerConfig` names none, and the server's own scope check's for a grant that came
    /// without the guard that admitted it.
    #[cfg(feature = "http")]
    pub(crate) guard: Option<Arc<dyn modelctx_http::server::Guard>>,
    /// [`ServerBuilder::layer`](crate::ServerBuilder::layer)'s chain; `None`: no layer.
    pub(crate) layers: Option<crate::middleware::Chain>,
    /// The operation metrics' instruments (`crate::observe`).
    #[cfg(feature = "otel")]
    pub(crate) metrics: crate::observe::Metrics,
}

/// Counters of what is under way.
#[derive(Debug, Default)]
pub(crate) struct LoadCounters {
    pub(crate) connections: std::sync::atomic::AtomicUsize,
    pub(crate) handlers: std::sync::atomic::AtomicUsize,
}

/// One unit of load, counted while it lives.
pub(crate) struct Counted<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Counted<'a> {
    pub(crate) fn new(counter: &'a std::sync::atomic::AtomicUsize) -> Self {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Counted(counter)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Shared {
    pub(crate) fn registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(|e| e.into_inner())
    }
}

/// Refuses a URI longer than [`Settings::max_uri_len`](crate::Settings::max_uri_len) with
/// -32602 (`what` names where it came from).
pub(crate) fn check_uri_len(shared: &Shared, what: &str, uri: &str) -> Result<(), ErrorObject> {
    crate::resource::check_uri_len(shared.settings.max_uri_len, what, uri)
}

/// Whether the caller of `origin` may hear of changes to `uri` (a legacy
/// `resources/subscribe`, a listen stream's filter): the
/// [`ServerBuilder::on_subscribe`](crate::ServerBuilder::on_subscribe) hook's say (yes without
/// one), and, for a caller that came over HTTP with a `Grant`, the scopes reading `uri` needs.
pub(crate) fn may_subscribe(shared: &Shared, uri: &str, origin: &crate::run::Origin) -> bool {
    let principal = origin.principal();
    let hook = shared
        .subscribe_hook
        .as_ref()
        .is_none_or(|hook| (hook.0)(&Subscribe { uri, principal }));
    #[cfg(feature = "http")]
    let scopes = || crate::scopes::may_read(shared, uri, origin);
    #[cfg(not(feature = "http"))]
    let scopes = || true;
    hook && scopes()
}
