//! The seam between the instances of a fleet (servers of one application behind a load
//! balancer): a [`Bus`] carries, as [`BusMessage`]s, what crosses tasks inside one process.
//!
//! * The server's changes ([`Change`]): each `add_tool`, `remove_prompt`,
//!   `notify_resource_updated` (and the like) of an instance is published to the others, whose
//!   legacy sessions and `subscriptions/listen` streams hear it as if it were made there. A
//!   change that came over the bus is never published again, and an instance ignores its own
//!   messages (a publish/subscribe bus may hand them back), so a change reaches each instance
//!   once.
//! * Messages of the client for a legacy session that belong to a request running on another
//!   instance ([`BusMessage::Forward`]): its answers to the server's questions, its
//!   `notifications/cancelled`, `notifications/initialized`, and the `logging/setLevel` it sent.
//! * The end of a legacy session ([`BusMessage::Ended`]).
//! * A client's cancel of a task, or its answers to the task's questions, that landed on an
//!   instance other than the one running the task's handler ([`BusMessage::Task`]).
//!
//! [`LocalBus`] (a server built without [`ServerBuilder::bus`](crate::ServerBuilder::bus)
//! behaves as with it) carries nothing: one process needs no bus. [`MemoryHub`] connects
//! several servers of one process (tests). A Redis bus (`modelctx-redis`) connects processes.
//!
//! What it does not do: it is at most once, like publish/subscribe (a message to an instance
//! that is gone or whose queue is full is dropped); it orders the messages of one sender only;
//! it does not make the registries of the instances equal (each instance must register the same
//! tools: a change tells clients to list again, and the listing is the instance's own).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use modelctx_types::{JsonObject, Message};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tokio::sync::mpsc;

pub use crate::registry::Change;
use crate::registry::Shared;

/// The highest instance number of a fleet: numbers are 0 to 4095 (12 bits), so that an
/// instance can fold its number into the ids it mints.
pub const MAX_INSTANCE: u16 = 4095;

/// A future a [`Bus`] returns.
pub type BusFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BusError>> + Send + 'a>>;

/// How many of this server's changes may wait to be published on its bus; beyond, a change is
/// not published (logged), as a lagging listener of one process misses changes.
const OUTGOING: usize = 64;

/// A message bus between the instances of a fleet.
///
/// A server given one ([`ServerBuilder::bus`](crate::ServerBuilder::bus)) calls
/// [`subscribe`](Bus::subscribe) once, on a task of its own started when it is built, and reads
/// every message the bus brings from that receiver; it publishes with
/// [`broadcast`](Bus::broadcast) and [`to_instance`](Bus::to_instance), stamping each message
/// with [`instance`](Bus::instance).
///
/// Implementations must be safe to call from many tasks at once and must not block: their
/// futures wait at most for a bounded time (an unreachable backend fails with
/// [`BusErrorKind::Unavailable`]). Delivery is at most once. A message broadcast may come back
/// to its sender (as on a Redis channel the sender also listens to): the server drops the
/// messages whose [`from`](BusMessage::from) is its own instance.
pub trait Bus: Send + Sync + fmt::Debug + 'static {
    /// This instance's number in the fleet, 0 to [`MAX_INSTANCE`], unique among the instances
    /// running at once.
    fn instance(&self) -> u16;

    /// Sends `message` to every other instance of the fleet.
    fn broadcast(&self, message: BusMessage) -> BusFuture<'_, ()>;

    /// Sends `message` to instance `instance` alone (nothing happens when it is not running).
    fn to_instance(&self, instance: u16, message: BusMessage) -> BusFuture<'_, ()>;

    /// Where the messages for this instance arrive (those broadcast, those sent to it): the
    /// receiving end of a bounded queue, which the implementation fills (a Redis bus from its
    /// subscription's pushes). It ends when the bus stops for good. There is one reader: a second
    /// call may fail with [`BusErrorKind::Failed`].
    fn subscribe(&self) -> BusFuture<'_, mpsc::Receiver<BusMessage>>;
}

/// What a bus carries between instances, each stamped with the instance that sent it.
///
/// Serialized (serde, JSON) as an object with a format version `v`, the sender `from`, and one
/// of `change`, `forward`, `ended` or `task` (`{"v":1,"from":3,"task":{"id":"..","answers":{..}}}`,
/// `answers` left out for a cancel):
/// `{"v":1,"from":3,"change":{"list":"tools"}}`,
/// `{"v":1,"from":3,"forward":{"session":"ab12..","message":{"jsonrpc":"2.0",..}}}`,
/// `{"v":1,"from":3,"ended":{"session":"ab12.."}}`. A message of another format version is
/// refused with an error naming both versions, so that instances of different versions of this
/// crate in one fleet fail loudly instead of misreading each other. A message is read with
/// serde_json only (the JSON-RPC message it may carry is).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BusMessage {
    /// A change to what the server offers, made on instance `from`.
    Change {
        /// The sender.
        from: u16,
        /// What changed.
        change: Change,
    },
    /// A message of the client of legacy session `session` (`Mcp-Session-Id`), served by
    /// instance `from`, for a request running elsewhere: an answer to a server's question, a
    /// `notifications/cancelled`, `notifications/initialized`, a `logging/setLevel`.
    Forward {
        /// The sender.
        from: u16,
        /// The session's id.
        session: String,
        /// The client's message.
        message: Message,
    },
    /// Legacy session `session` ended on instance `from` (DELETE, its end by the server): the
    /// others end what they still run for it.
    Ended {
        /// The sender.
        from: u16,
        /// The session's id.
        session: String,
    },
    /// A client's word for task `task`, which came to instance `from` and is recorded in the
    /// shared task store already: its cancel (`answers` `None`: `tasks/cancel`) or its answers
    /// to the task's questions (`tasks/update`, by question key). The instance running the
    /// task's handler stops it, or hands it the answers; the others ignore it.
    Task {
        /// The sender.
        from: u16,
        /// The task's id.
        task: String,
        /// The answers, by question key; `None` for a cancel.
        answers: Option<JsonObject>,
    },
}

impl BusMessage {
    /// The format version of the serialized form this crate writes and reads.
    pub const FORMAT: u32 = 1;

    /// The instance that sent it.
    pub fn from(&self) -> u16 {
        match self {
            BusMessage::Change { from, .. }
            | BusMessage::Forward { from, .. }
            | BusMessage::Ended { from, .. }
            | BusMessage::Task { from, .. } => *from,
        }
    }

    /// The message as JSON bytes (its serialized form).
    pub fn encode(&self) -> Result<Vec<u8>, BusError> {
        serde_json::to_vec(self).map_err(BusError::failed)
    }

    /// A message read from JSON bytes; [`BusErrorKind::Failed`] when they are not one of this
    /// format version.
    pub fn decode(bytes: &[u8]) -> Result<BusMessage, BusError> {
        serde_json::from_slice(bytes).map_err(BusError::failed)
    }
}

/// The serialized form of a [`BusMessage`], format 1.
#[derive(Serialize, Deserialize)]
struct Wire<'a> {
    v: u32,
    from: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    change: Option<Change>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    forward: Option<ForwardWire<'a>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ended: Option<EndedWire<'a>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    task: Option<TaskWire<'a>>,
}

#[derive(Serialize, Deserialize)]
struct TaskWire<'a> {
    id: std::borrow::Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    answers: Option<JsonObject>,
}

#[derive(Serialize, Deserialize)]
struct ForwardWire<'a> {
    session: std::borrow::Cow<'a, str>,
    message: MessageWire<'a>,
}

/// A JSON-RPC message, borrowed to write it, owned when read.
enum MessageWire<'a> {
    Borrowed(&'a Message),
    Owned(Message),
}

impl Serialize for MessageWire<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MessageWire::Borrowed(m) => m.serialize(serializer),
            MessageWire::Owned(m) => m.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for MessageWire<'_> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Message::deserialize(deserializer).map(MessageWire::Owned)
    }
}

#[derive(Serialize, Deserialize)]
struct EndedWire<'a> {
    session: std::borrow::Cow<'a, str>,
}

/// Only the format version of a serialized message, read first: a message of another format
/// is refused for its version whatever else it holds.
#[derive(Deserialize)]
struct Version {
    v: Option<u32>,
}

impl Serialize for BusMessage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use std::borrow::Cow;
        let mut wire = Wire {
            v: BusMessage::FORMAT,
            from: self.from(),
            change: None,
            forward: None,
            ended: None,
            task: None,
        };
        match self {
            BusMessage::Change { change, .. } => wire.change = Some(change.clone()),
            BusMessage::Forward {
                session, message, ..
            } => {
                wire.forward = Some(ForwardWire {
                    session: Cow::Borrowed(session),
                    message: MessageWire::Borrowed(message),
                });
            }
            BusMessage::Ended { session, .. } => {
                wire.ended = Some(EndedWire {
                    session: Cow::Borrowed(session),
                });
            }
            BusMessage::Task { task, answers, .. } => {
                wire.task = Some(TaskWire {
                    id: Cow::Borrowed(task),
                    answers: answers.clone(),
                });
            }
        }
        wire.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for BusMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // The text is read twice: its version first, then (of this version) the rest.
        let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        let version: Version = serde_json::from_str(raw.get()).map_err(D::Error::custom)?;
        match version.v {
            Some(BusMessage::FORMAT) => {}
            Some(other) => {
                return Err(D::Error::custom(format_args!(
                    "a bus message of format {other}, but this instance reads format {}: every \
                     instance of a fleet must run the same version of modelctx-server",
                    BusMessage::FORMAT
                )));
            }
            None => {
                return Err(D::Error::custom(
                    "a bus message without a format version `v`",
                ));
            }
        }
        let wire: Wire<'_> = serde_json::from_str(raw.get()).map_err(D::Error::custom)?;
        let from = wire.from;
        if from > MAX_INSTANCE {
            return Err(D::Error::custom(format_args!(
                "a bus message from instance {from}, above {MAX_INSTANCE}"
            )));
        }
        match (wire.change, wire.forward, wire.ended, wire.task) {
            (Some(change), None, None, None) => Ok(BusMessage::Change { from, change }),
            (None, Some(forward), None, None) => Ok(BusMessage::Forward {
                from,
                session: forward.session.into_owned(),
                message: match forward.message {
                    MessageWire::Owned(m) => m,
                    MessageWire::Borrowed(m) => m.clone(),
                },
            }),
            (None, None, Some(ended), None) => Ok(BusMessage::Ended {
                from,
                session: ended.session.into_owned(),
            }),
            (None, None, None, Some(task)) => Ok(BusMessage::Task {
                from,
                task: task.id.into_owned(),
                answers: task.answers,
            }),
            _ => Err(D::Error::custom(
                "a bus message must hold exactly one of `change`, `forward`, `ended` and `task`",
            )),
        }
    }
}

/// A bus failed: why ([`kind`](BusError::kind)), and its cause, kept.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", match kind {
    BusErrorKind::Unavailable => "the bus is unavailable",
    BusErrorKind::Failed => "the bus failed",
})]
#[non_exhaustive]
pub struct BusError {
    /// Whether trying again later may work.
    pub kind: BusErrorKind,
    /// What went wrong.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Why a [`Bus`] call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BusErrorKind {
    /// Its backend cannot be reached now (a lost connection, a timeout): the same call may
    /// work later.
    Unavailable,
    /// Anything else (a message that cannot be encoded or read, a misuse): trying again does
    /// not help.
    Failed,
}

impl BusError {
    /// The backend cannot be reached now, because of `source`.
    pub fn unavailable(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> BusError {
        BusError {
            kind: BusErrorKind::Unavailable,
            source: source.into(),
        }
    }

    /// The call failed for good, because of `source`.
    pub fn failed(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> BusError {
        BusError {
            kind: BusErrorKind::Failed,
            source: source.into(),
        }
    }

    /// Whether trying again later may work.
    pub fn kind(&self) -> BusErrorKind {
        self.kind
    }
}

/// The bus of a server alone (what a server without
/// [`ServerBuilder::bus`](crate::ServerBuilder::bus) does): instance 0, nothing is sent
/// anywhere, nothing arrives.
#[derive(Debug, Default, Clone, Copy)]
#[non_exhaustive]
pub struct LocalBus;

impl LocalBus {
    /// The bus of a server alone.
    pub fn new() -> LocalBus {
        LocalBus
    }
}

impl Bus for LocalBus {
    fn instance(&self) -> u16 {
        0
    }

    fn broadcast(&self, _: BusMessage) -> BusFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn to_instance(&self, _: u16, _: BusMessage) -> BusFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// A receiver that ends at once: nothing ever arrives.
    fn subscribe(&self) -> BusFuture<'_, mpsc::Receiver<BusMessage>> {
        let (_, rx) = mpsc::channel(1);
        Box::pin(std::future::ready(Ok(rx)))
    }
}

/// A bus between servers of one process, for tests of fleets without another process: each
/// [`member`](MemoryHub::member) is one instance's [`MemoryBus`].
///
/// ```
/// use std::sync::Arc;
/// use modelctx_server::Server;
/// use modelctx_server::bus::MemoryHub;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), modelctx_server::bus::BusError> {
/// let hub = MemoryHub::new();
/// let a = Server::builder("a", "1").declare_tools().bus(Arc::new(hub.member(1)?)).build();
/// let b = Server::builder("b", "1").declare_tools().bus(Arc::new(hub.member(2)?)).build();
/// // A tool added on `a` is announced to the clients of `a` and of `b`.
/// # drop((a, b));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryHub {
    inner: Arc<HubInner>,
}

#[derive(Debug)]
struct HubInner {
    /// Each member's queue, by instance number.
    members: Mutex<HashMap<u16, mpsc::Sender<BusMessage>>>,
    /// How many messages each member's queue holds.
    capacity: usize,
    /// Messages sent, counted once per receiving member.
    delivered: AtomicU64,
    /// Messages dropped: a full queue.
    dropped: AtomicU64,
}

impl Default for MemoryHub {
    fn default() -> Self {
        MemoryHub::new()
    }
}

impl MemoryHub {
    /// A hub whose members' queues hold 256 messages each.
    pub fn new() -> MemoryHub {
        MemoryHub::with_capacity(256)
    }

    /// A hub whose members' queues hold `capacity` messages each (at least 1); a message for a
    /// member whose queue is full is dropped and counted ([`dropped`](MemoryHub::dropped)).
    pub fn with_capacity(capacity: usize) -> MemoryHub {
        MemoryHub {
            inner: Arc::new(HubInner {
                members: Mutex::new(HashMap::new()),
                capacity: capacity.max(1),
                delivered: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
            }),
        }
    }

    /// The bus of instance `instance`. Its queue exists from now on (messages sent to it wait
    /// for the server that subscribes); it leaves the hub when dropped. Fails
    /// ([`BusErrorKind::Failed`]) for a number above [`MAX_INSTANCE`] or one a member of the hub
    /// already has.
    pub fn member(&self, instance: u16) -> Result<MemoryBus, BusError> {
        if instance > MAX_INSTANCE {
            return Err(BusError::failed(format!(
                "instance {instance} is above {MAX_INSTANCE}"
            )));
        }
        let mut members = self.inner.lock();
        if members.contains_key(&instance) {
            return Err(BusError::failed(format!(
                "the hub already has an instance {instance}"
            )));
        }
        let (tx, rx) = mpsc::channel(self.inner.capacity);
        members.insert(instance, tx.clone());
        Ok(MemoryBus {
            hub: Arc::downgrade(&self.inner),
            instance,
            own: tx,
            rx: Mutex::new(Some(rx)),
        })
    }

    /// How many messages reached a member's queue (a broadcast counts once per member).
    pub fn delivered(&self) -> u64 {
        self.inner.delivered.load(Ordering::SeqCst)
    }

    /// How many messages were dropped because a member's queue was full.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::SeqCst)
    }
}

impl HubInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u16, mpsc::Sender<BusMessage>>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn deliver(&self, to: &mpsc::Sender<BusMessage>, message: BusMessage) {
        match to.try_send(message) {
            Ok(()) => {
                self.delivered.fetch_add(1, Ordering::SeqCst);
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::SeqCst);
                tracing::warn!("a bus message was dropped: its receiver's queue is full");
            }
            // Its server is gone; the member leaves the hub when dropped.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

/// One instance's bus on a [`MemoryHub`].
#[derive(Debug)]
pub struct MemoryBus {
    hub: Weak<HubInner>,
    instance: u16,
    /// Its own queue's sender: it leaves the hub only if the hub still holds this one.
    own: mpsc::Sender<BusMessage>,
    rx: Mutex<Option<mpsc::Receiver<BusMessage>>>,
}

impl Drop for MemoryBus {
    fn drop(&mut self) {
        if let Some(hub) = self.hub.upgrade() {
            let mut members = hub.lock();
            if members
                .get(&self.instance)
                .is_some_and(|tx| tx.same_channel(&self.own))
            {
                members.remove(&self.instance);
            }
        }
    }
}

impl Bus for MemoryBus {
    fn instance(&self) -> u16 {
        self.instance
    }

    /// To every other member, each message encoded and read back as it would be between
    /// processes.
    fn broadcast(&self, message: BusMessage) -> BusFuture<'_, ()> {
        let result = (|| {
            let hub = self
                .hub
                .upgrade()
                .ok_or_else(|| BusError::failed("the hub is gone"))?;
            let bytes = message.encode()?;
            let others: Vec<mpsc::Sender<BusMessage>> = hub
                .lock()
                .iter()
                .filter(|(n, _)| **n != self.instance)
                .map(|(_, tx)| tx.clone())
                .collect();
            for tx in others {
                hub.deliver(&tx, BusMessage::decode(&bytes)?);
            }
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn to_instance(&self, instance: u16, message: BusMessage) -> BusFuture<'_, ()> {
        let result = (|| {
            let hub = self
                .hub
                .upgrade()
                .ok_or_else(|| BusError::failed("the hub is gone"))?;
            let bytes = message.encode()?;
            let to = hub.lock().get(&instance).cloned();
            match to {
                Some(tx) => hub.deliver(&tx, BusMessage::decode(&bytes)?),
                None => tracing::debug!(instance, "a bus message for an instance not running"),
            }
            Ok(())
        })();
        Box::pin(std::future::ready(result))
    }

    fn subscribe(&self) -> BusFuture<'_, mpsc::Receiver<BusMessage>> {
        let rx = self.rx.lock().unwrap_or_else(|e| e.into_inner()).take();
        let result = rx.ok_or_else(|| BusError::failed("this member's messages are read already"));
        Box::pin(std::future::ready(result))
    }
}

/// Where the messages for legacy sessions that came over the bus go
/// ([`BusMessage::Forward`], [`BusMessage::Ended`]): the HTTP runtime sets it.
pub(crate) type SessionHook = Box<dyn Fn(&Arc<Shared>, BusMessage) + Send + Sync>;

/// A server's side of its bus.
pub(crate) struct BusLink {
    bus: Arc<dyn Bus>,
    /// This server's changes, for the bus task to publish.
    outgoing: mpsc::Sender<Change>,
    /// Where `Forward` and `Ended` go; until set, they are dropped (logged).
    sessions: OnceLock<SessionHook>,
}

impl fmt::Debug for BusLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BusLink")
            .field("bus", &self.bus)
            .finish_non_exhaustive()
    }
}

impl BusLink {
    /// The link of a server to `bus`, and the receiver of its changes to publish, which
    /// [`run`] takes.
    pub(crate) fn new(bus: Arc<dyn Bus>) -> (BusLink, mpsc::Receiver<Change>) {
        let (outgoing, rx) = mpsc::channel(OUTGOING);
        let link = BusLink {
            bus,
            outgoing,
            sessions: OnceLock::new(),
        };
        (link, rx)
    }

    /// The bus.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn bus(&self) -> &Arc<dyn Bus> {
        &self.bus
    }

    /// Queues a change made here to be published (never one that came over the bus).
    pub(crate) fn publish(&self, change: Change) {
        if self.outgoing.try_send(change).is_err() {
            tracing::warn!("a change was not published on the bus: too many wait to be");
        }
    }

    /// Sets where the messages for legacy sessions go; false when it was set already.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn on_sessions(&self, hook: SessionHook) -> bool {
        self.sessions.set(hook).is_ok()
    }
}

/// The bus task of a server: publishes its changes (`outgoing`) and hands what arrives to the
/// server: a remote change into its `changes` broadcast (where its legacy fan-out and listen
/// streams hear it; never published again), messages for legacy sessions to the hook. Ends
/// with the server (its sender of `outgoing` dropped).
pub(crate) async fn run(
    shared: Weak<Shared>,
    bus: Arc<dyn Bus>,
    mut outgoing: mpsc::Receiver<Change>,
) {
    let me = bus.instance();
    let mut incoming = match bus.subscribe().await {
        Ok(rx) => Some(rx),
        Err(error) => {
            tracing::error!(%error, "the bus gave no messages: changes of other instances are not heard");
            None
        }
    };
    loop {
        let arrived = async {
            match incoming.as_mut() {
                Some(rx) => rx.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            change = outgoing.recv() => {
                let Some(change) = change else { return };
                if let Err(error) = bus.broadcast(BusMessage::Change { from: me, change }).await {
                    tracing::warn!(%error, "a change was not published on the bus");
                }
            }
            message = arrived => {
                let Some(message) = message else {
                    tracing::warn!("the bus stopped: changes of other instances are not heard");
                    incoming = None;
                    continue;
                };
                let Some(shared) = shared.upgrade() else { return };
                deliver(&shared, me, message);
            }
        }
    }
}

/// Hands a message that came over the bus to the server.
fn deliver(shared: &Arc<Shared>, me: u16, message: BusMessage) {
    if message.from() == me {
        // Our own, handed back by a publish/subscribe bus: heard here already.
        return;
    }
    match message {
        BusMessage::Change { change, .. } => {
            // To this instance's sessions and listen streams only: not published again.
            let _ = shared.changes.send(change);
        }
        // To the task's handler, when it runs here.
        BusMessage::Task { task, answers, .. } => shared.tasks.heard(&task, answers),
        other => match shared.bus.as_ref().and_then(|link| link.sessions.get()) {
            Some(hook) => hook(shared, other),
            None => {
                tracing::debug!("a bus message for a legacy session was dropped: no one reads them")
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use modelctx_session::ListKind;
    use modelctx_types::consts::{NotificationsCancelled, NotificationsInitialized};
    use modelctx_types::{JsonObject, Notification, RequestId, Response};
    use serde_json::{Value, json};

    use super::*;
    use crate::{NoArgs, Server, Tool};

    async fn noop(_: NoArgs) -> &'static str {
        ""
    }

    fn fleet_server(hub: &MemoryHub, instance: u16) -> Server {
        Server::builder("fleet", "1")
            .declare_tools()
            .declare_resources()
            .bus(Arc::new(hub.member(instance).unwrap()))
            .build()
    }

    async fn next(changes: &mut tokio::sync::broadcast::Receiver<Change>) -> Change {
        tokio::time::timeout(Duration::from_secs(5), changes.recv())
            .await
            .expect("a change in time")
            .expect("the change itself")
    }

    /// Waits until the bus is quiet: every message sent so far was handled.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    /// A task's cancel and answers round trip, `answers` left out for a cancel; a message with
    /// two payloads is refused.
    #[test]
    fn task_messages_round_trip() {
        let cancel = BusMessage::Task {
            from: 2,
            task: "t1".into(),
            answers: None,
        };
        let text: Value = serde_json::from_slice(&cancel.encode().unwrap()).unwrap();
        assert_eq!(text, json!({"v": 1, "from": 2, "task": {"id": "t1"}}));
        assert!(matches!(
            BusMessage::decode(text.to_string().as_bytes()).unwrap(),
            BusMessage::Task { from: 2, task, answers: None } if task == "t1"
        ));
        let mut answers = JsonObject::new();
        answers.insert(
            "name".into(),
            json!({"action": "accept", "content": {"name": "Ada"}}),
        );
        let answer = BusMessage::Task {
            from: 9,
            task: "t2".into(),
            answers: Some(answers.clone()),
        };
        let text: Value = serde_json::from_slice(&answer.encode().unwrap()).unwrap();
        assert_eq!(
            text,
            json!({"v": 1, "from": 9, "task": {"id": "t2", "answers": answers}})
        );
        match BusMessage::decode(text.to_string().as_bytes()).unwrap() {
            BusMessage::Task {
                from: 9,
                task,
                answers: Some(got),
            } => assert_eq!((task.as_str(), got), ("t2", answers)),
            other => panic!("{other:?}"),
        }
        let both = json!({"v": 1, "from": 9, "task": {"id": "t"}, "ended": {"session": "s"}});
        assert!(BusMessage::decode(both.to_string().as_bytes()).is_err());
    }

    #[test]
    fn messages_round_trip_with_their_format_version() {
        let change = BusMessage::Change {
            from: 3,
            change: Change::List(ListKind::Tools),
        };
        let text: Value = serde_json::from_slice(&change.encode().unwrap()).unwrap();
        assert_eq!(
            text,
            json!({"v": 1, "from": 3, "change": {"list": "tools"}})
        );
        let back = BusMessage::decode(text.to_string().as_bytes()).unwrap();
        assert!(matches!(
            back,
            BusMessage::Change {
                from: 3,
                change: Change::List(ListKind::Tools)
            }
        ));

        let updated = BusMessage::Change {
            from: 0,
            change: Change::Updated(Arc::from("file:///a")),
        };
        let text: Value = serde_json::to_value(&updated).unwrap();
        assert_eq!(text["change"], json!({"updated": "file:///a"}));
        let back: BusMessage = serde_json::from_str(&text.to_string()).unwrap();
        assert!(matches!(
            back,
            BusMessage::Change { change: Change::Updated(uri), .. } if &*uri == "file:///a"
        ));

        let answer: Message = Response::new(RequestId::Number(7), &json!({"roots": []}))
            .unwrap()
            .into();
        let forward = BusMessage::Forward {
            from: 4095,
            session: "s1".into(),
            message: answer,
        };
        let text: Value = serde_json::from_slice(&forward.encode().unwrap()).unwrap();
        assert_eq!(
            text,
            json!({"v": 1, "from": 4095, "forward": {"session": "s1",
                "message": {"jsonrpc": "2.0", "id": 7, "result": {"roots": []}}}})
        );
        match BusMessage::decode(text.to_string().as_bytes()).unwrap() {
            BusMessage::Forward {
                from: 4095,
                session,
                message: Message::Response(r),
            } => {
                assert_eq!(session, "s1");
                assert_eq!(r.id, RequestId::Number(7));
            }
            other => panic!("{other:?}"),
        }

        let cancel: Message = Notification::new(
            NotificationsCancelled::VALUE,
            json!({"requestId": 2}).as_object().unwrap(),
        )
        .unwrap()
        .into();
        let forward = BusMessage::Forward {
            from: 1,
            session: "s2".into(),
            message: cancel,
        };
        let back = BusMessage::decode(&forward.encode().unwrap()).unwrap();
        assert!(matches!(
            back,
            BusMessage::Forward { message: Message::Notification(n), .. }
                if n.method == NotificationsCancelled::VALUE
        ));

        let ended = BusMessage::Ended {
            from: 2,
            session: "s3".into(),
        };
        let text: Value = serde_json::from_slice(&ended.encode().unwrap()).unwrap();
        assert_eq!(text, json!({"v": 1, "from": 2, "ended": {"session": "s3"}}));
        let back = BusMessage::decode(text.to_string().as_bytes()).unwrap();
        assert!(matches!(back, BusMessage::Ended { from: 2, session } if session == "s3"));
    }

    #[test]
    fn a_message_of_another_format_or_shape_is_refused() {
        // Another version is refused for its version, whatever its body.
        for text in [
            json!({"v": 2, "from": 3, "change": {"list": "tools"}}),
            json!({"v": 2, "from": "three", "gossip": {}}),
        ] {
            let error = BusMessage::decode(text.to_string().as_bytes()).unwrap_err();
            assert_eq!(error.kind(), BusErrorKind::Failed);
            let said = error.to_string();
            assert!(
                said.contains("format 2") && said.contains("format 1"),
                "{said}"
            );
        }
        let refused = [
            json!({"from": 3, "change": {"list": "tools"}}),
            json!({"v": 1, "from": 3}),
            json!({"v": 1, "from": 3, "change": {"list": "tools"}, "ended": {"session": "s"}}),
            json!({"v": 1, "from": 3, "change": {"list": "widgets"}}),
            json!({"v": 1, "from": 3, "change": {"moved": "x"}}),
            json!({"v": 1, "from": 4096, "ended": {"session": "s"}}),
            json!({"v": 1, "from": 3, "forward": {"session": "s", "message": {"jsonrpc": "1.0"}}}),
        ];
        for text in refused {
            assert!(
                BusMessage::decode(text.to_string().as_bytes()).is_err(),
                "{text}"
            );
        }
    }

    #[test]
    fn errors_say_whether_to_try_again() {
        let down = BusError::unavailable("connection refused");
        assert_eq!(down.kind(), BusErrorKind::Unavailable);
        assert_eq!(
            down.to_string(),
            "the bus is unavailable: connection refused"
        );
        let bad = BusError::failed("nope");
        assert_eq!(bad.kind(), BusErrorKind::Failed);
        assert_eq!(bad.to_string(), "the bus failed: nope");
        assert!(std::error::Error::source(&bad).is_some());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn hub_members_are_unique_bounded_and_leave_when_dropped() {
        let hub = MemoryHub::with_capacity(2);
        let one = hub.member(1).unwrap();
        assert_eq!(hub.member(1).unwrap_err().kind(), BusErrorKind::Failed);
        assert!(hub.member(MAX_INSTANCE + 1).is_err());
        let two = hub.member(2).unwrap();
        let mut rx = two.subscribe().await.unwrap();
        assert!(two.subscribe().await.is_err(), "one reader");
        let ended = |from| BusMessage::Ended {
            from,
            session: "s".into(),
        };
        // Not to itself; two fit, the third is dropped.
        for _ in 0..3 {
            one.broadcast(ended(1)).await.unwrap();
        }
        assert_eq!((hub.delivered(), hub.dropped()), (2, 1));
        assert!(matches!(
            rx.try_recv(),
            Ok(BusMessage::Ended { from: 1, .. })
        ));
        two.to_instance(1, ended(2)).await.unwrap();
        two.to_instance(9, ended(2)).await.unwrap();
        assert_eq!(hub.delivered(), 3);
        drop(one);
        // Its number is free again; to a gone member, nothing happens.
        let again = hub.member(1).unwrap();
        drop(two);
        again.to_instance(2, ended(1)).await.unwrap();
        assert_eq!(hub.delivered(), 3);
        // The local bus: instance 0, and nothing ever arrives.
        let local = LocalBus::new();
        assert_eq!(local.instance(), 0);
        local.broadcast(ended(0)).await.unwrap();
        assert!(local.subscribe().await.unwrap().recv().await.is_none());
    }

    /// A change made on one server reaches the others' change broadcasts once each (what their
    /// legacy fan-out and listen streams read), and is not sent back or published again.
    #[tokio::test(flavor = "current_thread")]
    async fn a_change_reaches_every_server_once() {
        let hub = MemoryHub::new();
        let (a, b, c) = (
            fleet_server(&hub, 1),
            fleet_server(&hub, 2),
            fleet_server(&hub, 3),
        );
        let mut heard: Vec<_> = [&a, &b, &c]
            .iter()
            .map(|s| s.shared.changes.subscribe())
            .collect();
        a.add_tool(Tool::new("t", noop)).unwrap();
        for changes in &mut heard {
            assert_eq!(next(changes).await, Change::List(ListKind::Tools));
        }
        b.notify_resource_updated("file:///x");
        for changes in &mut heard {
            assert_eq!(next(changes).await, Change::Updated(Arc::from("file:///x")));
        }
        settle().await;
        // Two changes, each to two other instances: nothing more went over the bus.
        assert_eq!(hub.delivered(), 4);
        for changes in &mut heard {
            assert!(matches!(
                changes.try_recv(),
                Err(tokio::sync::broadcast::error::TryRecvError::Empty)
            ));
        }
        // A server without a bus publishes nothing.
        let alone = Server::builder("alone", "1").declare_tools().build();
        alone.add_tool(Tool::new("t", noop)).unwrap();
        settle().await;
        assert_eq!(hub.delivered(), 4);
    }

    /// A message handed back by the bus to the instance that sent it is dropped.
    #[tokio::test(flavor = "current_thread")]
    async fn an_instances_own_message_handed_back_is_dropped() {
        let hub = MemoryHub::new();
        let server = fleet_server(&hub, 1);
        let mut changes = server.shared.changes.subscribe();
        let sender = hub.member(2).unwrap();
        // As a Redis channel would hand back the instance's own publish.
        sender
            .to_instance(
                1,
                BusMessage::Change {
                    from: 1,
                    change: Change::List(ListKind::Prompts),
                },
            )
            .await
            .unwrap();
        sender
            .to_instance(
                1,
                BusMessage::Change {
                    from: 2,
                    change: Change::List(ListKind::Tools),
                },
            )
            .await
            .unwrap();
        assert_eq!(next(&mut changes).await, Change::List(ListKind::Tools));
        settle().await;
        assert!(changes.try_recv().is_err());
    }

    /// Messages for legacy sessions go to the hook the HTTP runtime sets, not to the changes.
    #[tokio::test(flavor = "current_thread")]
    async fn session_messages_reach_the_hook() {
        let hub = MemoryHub::new();
        let server = fleet_server(&hub, 1);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let link = server.shared.bus.as_ref().unwrap();
        assert_eq!(link.bus().instance(), 1);
        assert!(link.on_sessions(Box::new(move |_, message| {
            let _ = tx.send(message);
        })));
        assert!(!link.on_sessions(Box::new(|_, _| {})), "set once");
        let mut changes = server.shared.changes.subscribe();
        let sender = hub.member(2).unwrap();
        let initialized: Message =
            Notification::new(NotificationsInitialized::VALUE, &JsonObject::new())
                .unwrap()
                .into();
        sender
            .to_instance(
                1,
                BusMessage::Forward {
                    from: 2,
                    session: "s".into(),
                    message: initialized,
                },
            )
            .await
            .unwrap();
        sender
            .broadcast(BusMessage::Ended {
                from: 2,
                session: "s".into(),
            })
            .await
            .unwrap();
        let first = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap();
        assert!(
            matches!(first, Some(BusMessage::Forward { from: 2, ref session, .. }) if session == "s")
        );
        let second = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .unwrap();
        assert!(matches!(second, Some(BusMessage::Ended { from: 2, .. })));
        assert!(changes.try_recv().is_err());
    }

    /// The bus task ends with its server, and the member leaves the hub.
    #[tokio::test(flavor = "current_thread")]
    async fn the_bus_task_ends_with_its_server() {
        let hub = MemoryHub::new();
        let server = fleet_server(&hub, 1);
        settle().await;
        drop(server);
        settle().await;
        hub.member(1).expect("the number is free again");
    }
}
