//! The pub/sub connection ([`PubSub`]: pushes routed by channel to local queues, subscriptions
//! restored after a reconnect) and [`RedisBus`], the [`Bus`] of a fleet on it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use modelctx_server::bus::{Bus, BusError, BusFuture, BusMessage};
use redis::aio::ConnectionManager;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use crate::conn::Shared;
use crate::error::Error;

/// How many messages for this instance may wait in its bus queue (the server's bus task reads
/// them); beyond, a message is dropped and counted ([`RedisBus::dropped`]).
pub const BUS_QUEUE: usize = 1024;

/// How often the pub/sub connection is checked (`PING`) and, after it was lost, subscribed
/// again to every channel a local reader listens to.
pub(crate) const RESYNC_EVERY: Duration = Duration::from_secs(1);

/// Where the messages of one channel go.
#[derive(Debug, Clone)]
pub(crate) enum Sink {
    /// Bus messages, read (JSON) as they arrive; a message that cannot be read is logged and
    /// dropped.
    Bus(mpsc::Sender<BusMessage>),
    /// The payloads as they are.
    Raw(mpsc::Sender<Vec<u8>>),
}

#[derive(Debug)]
struct Route {
    id: u64,
    sink: Sink,
}

/// The routes of the pub/sub connection's pushes: channel → the local queues listening to it.
#[derive(Debug, Default)]
pub(crate) struct Router {
    routes: Mutex<HashMap<String, Vec<Route>>>,
    next: AtomicU64,
    /// Set when the connection was lost, or a subscription could not be made: the keeper
    /// subscribes every routed channel again once Redis answers.
    lost: AtomicBool,
    /// Messages dropped: a full queue, or a bus message that could not be read.
    dropped: AtomicU64,
}

impl Router {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Route>>> {
        self.routes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a route; true when it is the channel's first (it must be subscribed).
    fn add(&self, channel: &str, sink: Sink) -> (u64, bool) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut routes = self.lock();
        let list = routes.entry(channel.to_owned()).or_default();
        list.push(Route { id, sink });
        (id, list.len() == 1)
    }

    /// Removes a route; true when the channel has no route left.
    fn remove(&self, channel: &str, id: u64) -> bool {
        let mut routes = self.lock();
        let Some(list) = routes.get_mut(channel) else {
            return false;
        };
        list.retain(|route| route.id != id);
        if list.is_empty() {
            routes.remove(channel);
            true
        } else {
            false
        }
    }

    fn is_routed(&self, channel: &str) -> bool {
        self.lock().contains_key(channel)
    }

    fn channels(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// Hands one push of the pub/sub connection to the queues of its channel. Never blocks: a
    /// full queue loses the message.
    pub(crate) fn route(&self, push: PushInfo) {
        match push.kind {
            PushKind::Disconnection => {
                self.lost.store(true, Ordering::SeqCst);
                tracing::warn!("the redis pub/sub connection was lost; reconnecting");
            }
            PushKind::Message => {
                let mut data = push.data.into_iter();
                let (Some(channel), Some(payload)) = (data.next(), data.next()) else {
                    tracing::warn!("a redis pub/sub message without a channel or a payload");
                    return;
                };
                let (Some(channel), Some(payload)) = (bytes(channel), bytes(payload)) else {
                    tracing::warn!("a redis pub/sub message that is not text");
                    return;
                };
                let Ok(channel) = String::from_utf8(channel) else {
                    return;
                };
                self.deliver(&channel, payload);
            }
            kind => tracing::trace!(?kind, "a redis push"),
        }
    }

    fn deliver(&self, channel: &str, payload: Vec<u8>) {
        let sinks: Vec<Sink> = match self.lock().get(channel) {
            Some(list) => list.iter().map(|route| route.sink.clone()).collect(),
            None => return,
        };
        let mut message = None;
        for sink in sinks {
            let full = match sink {
                Sink::Raw(tx) => tx.try_send(payload.clone()).is_err_and(is_full),
                Sink::Bus(tx) => {
                    let read = message.get_or_insert_with(|| BusMessage::decode(&payload));
                    match read {
                        Ok(m) => tx.try_send(m.clone()).is_err_and(is_full),
                        Err(error) => {
                            self.dropped.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(channel, %error, "a bus message was dropped");
                            continue;
                        }
                    }
                }
            };
            if full {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    channel,
                    "a redis pub/sub message was dropped: its queue is full"
                );
            }
        }
    }
}

fn is_full<T>(error: mpsc::error::TrySendError<T>) -> bool {
    matches!(error, mpsc::error::TrySendError::Full(_))
}

fn bytes(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.into_bytes()),
        _ => None,
    }
}

/// The pub/sub connection of a fleet: RESP3, its pushes handed to the [`Router`].
///
/// A subscription is made when a channel gets its first local reader and removed when it
/// loses its last one. The `redis` crate subscribes again after it reconnects; on top of that,
/// a keeper task pings the connection every [`RESYNC_EVERY`] (which makes the connection
/// manager reconnect when Redis was gone longer than its retries) and, once Redis answers
/// after a loss, subscribes every routed channel again, so that the messages flow again
/// whatever happened in between.
#[derive(Debug)]
pub(crate) struct PubSub {
    conn: ConnectionManager,
    router: Arc<Router>,
    shared: Arc<Shared>,
    /// One (un)subscription at a time, so that an unsubscribe for a channel's last reader
    /// never lands after the subscribe of its next one.
    ops: tokio::sync::Mutex<()>,
}

impl PubSub {
    pub(crate) fn new(conn: ConnectionManager, router: Arc<Router>, shared: Arc<Shared>) -> Self {
        PubSub {
            conn,
            router,
            shared,
            ops: tokio::sync::Mutex::new(()),
        }
    }

    /// Routes `channel`'s messages to `sink` until the returned [`Listener`] is dropped, and
    /// subscribes to the channel when it is its first reader. When the subscription fails, the
    /// route stays: with Redis unavailable, the keeper subscribes once Redis is back.
    pub(crate) async fn listen(
        self: &Arc<Self>,
        channel: String,
        sink: Sink,
    ) -> (Listener, Result<(), Error>) {
        let (id, first) = self.router.add(&channel, sink);
        let listener = Listener {
            pubsub: Arc::downgrade(self),
            channel,
            id,
        };
        let subscribed = if first {
            self.subscribe(std::slice::from_ref(&listener.channel))
                .await
        } else {
            Ok(())
        };
        (listener, subscribed)
    }

    /// `SUBSCRIBE` the channels of `channels` that still have a reader.
    async fn subscribe(&self, channels: &[String]) -> Result<(), Error> {
        let _one = self.ops.lock().await;
        let routed: Vec<&String> = channels
            .iter()
            .filter(|c| self.router.is_routed(c))
            .collect();
        if routed.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        let result = self
            .shared
            .bounded("SUBSCRIBE", conn.subscribe(routed))
            .await;
        if let Err(error) = &result {
            self.router.lost.store(true, Ordering::SeqCst);
            tracing::warn!(%error, "a redis subscription was not made; it is tried again");
        }
        result
    }

    /// `UNSUBSCRIBE` the channel unless a reader came for it in the meantime.
    async fn unsubscribe(&self, channel: &str) {
        let _one = self.ops.lock().await;
        if self.router.is_routed(channel) {
            return;
        }
        let mut conn = self.conn.clone();
        if let Err(error) = self
            .shared
            .bounded("UNSUBSCRIBE", conn.unsubscribe(channel))
            .await
        {
            // A lost connection forgets its subscriptions anyway; and a message for a channel
            // no one reads is dropped.
            tracing::debug!(%error, channel, "a redis subscription was not removed");
        }
    }

    /// One round of the keeper: `PING`, and after a loss, every routed channel subscribed
    /// again. Returns whether Redis answered.
    pub(crate) async fn resync(&self) -> bool {
        let mut conn = self.conn.clone();
        let ping = self
            .shared
            .bounded("PING", redis::cmd("PING").query_async::<Value>(&mut conn))
            .await;
        if let Err(error) = ping {
            if !self.router.lost.swap(true, Ordering::SeqCst) {
                tracing::warn!(%error, "the redis pub/sub connection does not answer");
            }
            return false;
        }
        if self.router.lost.swap(false, Ordering::SeqCst) {
            let channels = self.router.channels();
            if self.subscribe(&channels).await.is_ok() {
                tracing::info!(
                    channels = channels.len(),
                    "the redis pub/sub connection is back; subscribed again"
                );
            }
        }
        true
    }

    /// Messages dropped so far: full queues, unreadable bus messages.
    pub(crate) fn dropped(&self) -> u64 {
        self.router.dropped.load(Ordering::Relaxed)
    }
}

/// Checks the pub/sub connection every [`RESYNC_EVERY`] until the fleet is gone.
pub(crate) async fn keep_subscribed(pubsub: Weak<PubSub>) {
    let mut every = tokio::time::interval(RESYNC_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        every.tick().await;
        let Some(pubsub) = pubsub.upgrade() else {
            return;
        };
        pubsub.resync().await;
    }
}

/// A local reader of one channel: its messages go to its sink until it is dropped (then the
/// channel is unsubscribed if no other reader is left).
#[derive(Debug)]
pub(crate) struct Listener {
    pubsub: Weak<PubSub>,
    channel: String,
    id: u64,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let Some(pubsub) = self.pubsub.upgrade() else {
            return;
        };
        if pubsub.router.remove(&self.channel, self.id)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let channel = std::mem::take(&mut self.channel);
            runtime.spawn(async move { pubsub.unsubscribe(&channel).await });
        }
    }
}

/// A [`Bus`] on Redis pub/sub ([`Fleet::bus`](crate::Fleet::bus)): the instances of a fleet
/// exchange [`BusMessage`]s (serde JSON) on `PREFIX:bus` (broadcasts) and `PREFIX:inbox:N`
/// (messages for instance `N`).
///
/// Messages are published on the fleet's command connection and read on its pub/sub
/// connection (RESP3 pushes), which reconnects by itself and subscribes again after a Redis
/// restart: messages flow again within a few seconds of Redis being back. Delivery is at most
/// once: what is published while an instance is not subscribed (Redis restarting, the
/// instance reconnecting) is lost, and a message for an instance whose queue
/// ([`BUS_QUEUE`] messages) is full is dropped and counted. A broadcast also comes back to
/// its sender (the server drops its own messages).
///
/// Every publish fails within the fleet's [`op_timeout`](crate::FleetConfig::op_timeout)
/// when Redis is lost, as [`BusErrorKind::Unavailable`](modelctx_server::bus::BusErrorKind).
/// Cheap to clone; all clones are one reader.
#[derive(Debug, Clone)]
pub struct RedisBus {
    inner: Arc<BusInner>,
}

#[derive(Debug)]
struct BusInner {
    shared: Arc<Shared>,
    pubsub: Arc<PubSub>,
    instance: u16,
    /// The listeners of the reader ([`Bus::subscribe`]), kept as long as the bus.
    reader: Mutex<Option<Vec<Listener>>>,
}

impl RedisBus {
    pub(crate) fn new(shared: Arc<Shared>, pubsub: Arc<PubSub>, instance: u16) -> RedisBus {
        RedisBus {
            inner: Arc::new(BusInner {
                shared,
                pubsub,
                instance,
                reader: Mutex::new(None),
            }),
        }
    }

    /// How many messages this instance's pub/sub connection dropped: a full queue (of this bus
    /// or of an event follower), or a bus message that could not be read (another format).
    pub fn dropped(&self) -> u64 {
        self.inner.pubsub.dropped()
    }

    async fn publish(&self, channel: String, message: &BusMessage) -> Result<i64, BusError> {
        let bytes = message.encode()?;
        self.inner
            .shared
            .query::<i64>("PUBLISH", redis::cmd("PUBLISH").arg(channel).arg(bytes))
            .await
            .map_err(bus_error)
    }

    async fn start_reading(&self) -> Result<mpsc::Receiver<BusMessage>, BusError> {
        {
            let mut reader = self.inner.reader.lock().unwrap_or_else(|e| e.into_inner());
            if reader.is_some() {
                return Err(BusError::failed("this bus's messages are read already"));
            }
            *reader = Some(Vec::new());
        }
        let keys = &self.inner.shared.keys;
        let (tx, rx) = mpsc::channel(BUS_QUEUE);
        let mut listeners = Vec::with_capacity(2);
        let mut failed = None;
        for channel in [keys.bus(), keys.inbox(self.inner.instance)] {
            let (listener, subscribed) = self
                .inner
                .pubsub
                .listen(channel, Sink::Bus(tx.clone()))
                .await;
            listeners.push(listener);
            match subscribed {
                Ok(()) => {}
                // Subscribed by the keeper once Redis is back.
                Err(error) if error.is_unavailable() => {}
                Err(error) => failed = Some(error),
            }
        }
        let mut reader = self.inner.reader.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(error) = failed {
            *reader = None;
            drop(reader);
            drop(listeners);
            return Err(bus_error(error));
        }
        *reader = Some(listeners);
        Ok(rx)
    }
}

/// A Redis failure as the bus reports it.
fn bus_error(error: Error) -> BusError {
    if error.is_unavailable() {
        BusError::unavailable(error)
    } else {
        BusError::failed(error)
    }
}

impl Bus for RedisBus {
    fn instance(&self) -> u16 {
        self.inner.instance
    }

    /// `PUBLISH PREFIX:bus`.
    fn broadcast(&self, message: BusMessage) -> BusFuture<'_, ()> {
        Box::pin(async move {
            let channel = self.inner.shared.keys.bus();
            self.publish(channel, &message).await.map(drop)
        })
    }

    /// `PUBLISH PREFIX:inbox:N`; nothing happens (logged) when no instance `N` listens.
    fn to_instance(&self, instance: u16, message: BusMessage) -> BusFuture<'_, ()> {
        Box::pin(async move {
            let channel = self.inner.shared.keys.inbox(instance);
            if self.publish(channel, &message).await? == 0 {
                tracing::debug!(instance, "a bus message for an instance not listening");
            }
            Ok(())
        })
    }

    /// Subscribes to `PREFIX:bus` and `PREFIX:inbox:N` (N: this instance). When Redis cannot be
    /// reached now, the receiver is still given, and the subscriptions are made once Redis is
    /// back. A second call fails ([`BusErrorKind::Failed`](modelctx_server::bus::BusErrorKind)).
    fn subscribe(&self) -> BusFuture<'_, mpsc::Receiver<BusMessage>> {
        Box::pin(self.start_reading())
    }
}

#[cfg(test)]
mod tests {
    use modelctx_server::bus::BusErrorKind;
    use modelctx_server::{Change, ListKind};

    use super::*;

    fn push(kind: PushKind, data: Vec<Value>) -> PushInfo {
        PushInfo { kind, data }
    }

    fn message(channel: &str, payload: &[u8]) -> PushInfo {
        push(
            PushKind::Message,
            vec![
                Value::BulkString(channel.as_bytes().to_vec()),
                Value::BulkString(payload.to_vec()),
            ],
        )
    }

    fn change(from: u16) -> Vec<u8> {
        BusMessage::Change {
            from,
            change: Change::List(ListKind::Tools),
        }
        .encode()
        .unwrap()
    }

    /// Each channel's messages reach its own queues, all of them, read as bus messages or kept
    /// as they are; other pushes are not delivered; a lost connection is remembered.
    #[test]
    fn pushes_are_routed_by_channel() {
        let router = Router::default();
        let (bus_tx, mut bus_rx) = mpsc::channel(4);
        let (raw_tx, mut raw_rx) = mpsc::channel(4);
        let (other_tx, mut other_rx) = mpsc::channel(4);
        assert!(router.add("mcx:bus", Sink::Bus(bus_tx.clone())).1);
        assert!(router.add("mcx:inbox:3", Sink::Bus(bus_tx)).1);
        let (a, first) = router.add("mcx:{s:x}:ch", Sink::Raw(raw_tx));
        assert!(first);
        let (b, first) = router.add("mcx:{s:x}:ch", Sink::Raw(other_tx));
        assert!(!first, "a second reader of the channel");

        router.route(message("mcx:bus", &change(1)));
        router.route(message("mcx:inbox:3", &change(2)));
        router.route(message("mcx:inbox:4", &change(9)));
        router.route(message("mcx:{s:x}:ch", b"5 event"));
        router.route(push(
            PushKind::Subscribe,
            vec![Value::BulkString(b"mcx:bus".to_vec()), Value::Int(1)],
        ));
        assert!(matches!(
            bus_rx.try_recv(),
            Ok(BusMessage::Change { from: 1, .. })
        ));
        assert!(matches!(
            bus_rx.try_recv(),
            Ok(BusMessage::Change { from: 2, .. })
        ));
        assert!(bus_rx.try_recv().is_err(), "not the inbox of another");
        assert_eq!(raw_rx.try_recv().unwrap(), b"5 event");
        assert_eq!(other_rx.try_recv().unwrap(), b"5 event");

        assert!(!router.lost.load(Ordering::SeqCst));
        router.route(push(PushKind::Disconnection, vec![]));
        assert!(router.lost.load(Ordering::SeqCst));

        assert!(!router.remove("mcx:{s:x}:ch", a), "one reader left");
        assert!(router.remove("mcx:{s:x}:ch", b), "the last one");
        assert!(!router.is_routed("mcx:{s:x}:ch"));
        router.route(message("mcx:{s:x}:ch", b"6 later"));
        assert!(other_rx.try_recv().is_err());
        let mut channels = router.channels();
        channels.sort();
        assert_eq!(channels, ["mcx:bus", "mcx:inbox:3"]);
    }

    /// A full queue and an unreadable bus message are dropped and counted, never waited for.
    #[test]
    fn full_queues_and_bad_messages_are_dropped_and_counted() {
        let router = Router::default();
        let (tx, mut rx) = mpsc::channel(1);
        router.add("mcx:bus", Sink::Bus(tx));
        router.route(message("mcx:bus", &change(1)));
        router.route(message("mcx:bus", &change(2)));
        assert_eq!(router.dropped.load(Ordering::Relaxed), 1);
        router.route(message("mcx:bus", br#"{"v":2,"from":1,"gossip":{}}"#));
        router.route(message("mcx:bus", b"not json"));
        assert_eq!(router.dropped.load(Ordering::Relaxed), 3);
        assert!(matches!(
            rx.try_recv(),
            Ok(BusMessage::Change { from: 1, .. })
        ));
        assert!(rx.try_recv().is_err());
        // A message that is not a pair of strings is ignored.
        router.route(push(PushKind::Message, vec![Value::Int(1)]));
        router.route(push(PushKind::Message, vec![Value::Int(1), Value::Int(2)]));
        assert_eq!(router.dropped.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn redis_errors_keep_their_kind_on_the_bus() {
        let down = bus_error(Error::Timeout {
            op: "PUBLISH",
            after: Duration::from_secs(1),
        });
        assert_eq!(down.kind(), BusErrorKind::Unavailable);
        let cause = std::error::Error::source(&down)
            .and_then(|e| e.downcast_ref::<Error>())
            .expect("the crate's error, kept");
        assert!(matches!(cause, Error::Timeout { op: "PUBLISH", .. }));
        let refused = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR wrong number of arguments",
        ));
        assert_eq!(
            bus_error(Error::redis("PUBLISH", refused)).kind(),
            BusErrorKind::Failed
        );
    }
}
