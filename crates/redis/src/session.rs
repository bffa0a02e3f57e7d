//! [`RedisSessionStore`]: legacy sessions' states in Redis, shared by every instance.

use std::sync::Arc;
use std::time::Duration;

use modelctx_server::{SessionState, SessionStore, StoreFuture};
use redis::Script;

use crate::conn::{Shared, millis};
use crate::error::{Error, store_error};

/// Removes a session's keys: its state, its event counter, its stream table, and every event
/// stream the table names (a field `X:STREAM`). Keys that do not exist are skipped by `UNLINK`.
/// KEYS: state, seq, meta. ARGV: the start of the session's event stream keys. Returns how many
/// keys were removed.
///
/// The stream keys are derived inside the script, as they are only known from the table; they
/// share the session's hash tag, so on Redis Cluster they are in the same slot as `KEYS`.
const REMOVE: &str = r"
local keys = {KEYS[1], KEYS[2], KEYS[3]}
local seen = {}
for _, field in ipairs(redis.call('HKEYS', KEYS[3])) do
  local stream = string.match(field, '^%a:(%d+)$')
  if stream and not seen[stream] then
    seen[stream] = true
    table.insert(keys, ARGV[1] .. stream)
  end
end
return redis.call('UNLINK', unpack(keys))
";

/// A [`SessionStore`] on Redis ([`Fleet::session_store`](crate::Fleet::session_store)): any
/// instance of a fleet can go on with a legacy session that another one opened.
///
/// A state is kept as JSON at `PREFIX:{s:SID}:state` for the idle time
/// ([`FleetConfig::session_idle`](crate::FleetConfig::session_idle), 30 minutes by default):
/// `save` is `SET .. PX idle` and `load` is `GETEX .. PX idle`, so each use starts the idle time
/// again, and a session nobody uses expires from Redis by itself. `remove` unlinks every key of
/// the session (its state and its events).
///
/// Every call fails within the fleet's [`op_timeout`](crate::FleetConfig::op_timeout) when Redis
/// is lost, and works again when it is back. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RedisSessionStore {
    shared: Arc<Shared>,
    idle: Duration,
    remove: Arc<Script>,
}

impl RedisSessionStore {
    pub(crate) fn new(shared: Arc<Shared>) -> RedisSessionStore {
        RedisSessionStore {
            idle: shared.config.session_idle,
            shared,
            remove: Arc::new(Script::new(REMOVE)),
        }
    }

    /// The same store, keeping each state for `idle` instead (at least 1 ms).
    pub fn idle(mut self, idle: Duration) -> RedisSessionStore {
        self.idle = idle.max(Duration::from_millis(1));
        self
    }

    async fn get(&self, id: &str) -> Result<Option<SessionState>, Error> {
        let keys = &self.shared.keys;
        let text: Option<String> = self
            .shared
            .query(
                "GETEX",
                redis::cmd("GETEX")
                    .arg(keys.state(id))
                    .arg("PX")
                    .arg(millis(self.idle)),
            )
            .await?;
        text.map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|source| Error::Corrupt {
                op: "GETEX",
                source,
            })
    }

    async fn set(&self, id: &str, state: &SessionState) -> Result<(), Error> {
        let json =
            serde_json::to_string(state).map_err(|source| Error::Corrupt { op: "SET", source })?;
        let _: () = self
            .shared
            .query(
                "SET",
                redis::cmd("SET")
                    .arg(self.shared.keys.state(id))
                    .arg(json)
                    .arg("PX")
                    .arg(millis(self.idle)),
            )
            .await?;
        Ok(())
    }

    async fn unlink(&self, id: &str) -> Result<(), Error> {
        let keys = &self.shared.keys;
        let mut remove = self.remove.prepare_invoke();
        remove
            .key(keys.state(id))
            .key(keys.seq(id))
            .key(keys.meta(id))
            .arg(keys.events_base(id));
        let _: i64 = self.shared.eval("remove session", &remove).await?;
        Ok(())
    }
}

impl RedisSessionStore {
    /// `PEXPIRE .. idle` of each session's state, stream table and event counter (a key that
    /// does not exist is left alone), in one pipeline.
    async fn pexpire(&self, ids: &[&str]) -> Result<(), Error> {
        if ids.is_empty() {
            return Ok(());
        }
        let keys = &self.shared.keys;
        let idle = millis(self.idle);
        let mut pipe = redis::pipe();
        for id in ids {
            for key in [keys.state(id), keys.meta(id), keys.seq(id)] {
                pipe.cmd("PEXPIRE").arg(key).arg(idle).ignore();
            }
        }
        self.shared.pipeline::<()>("PEXPIRE", &pipe).await
    }
}

impl SessionStore for RedisSessionStore {
    fn load<'a>(&'a self, id: &'a str) -> StoreFuture<'a, Option<SessionState>> {
        Box::pin(async move { self.get(id).await.map_err(store_error) })
    }

    fn save<'a>(&'a self, id: &'a str, state: &'a SessionState) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.set(id, state).await.map_err(store_error) })
    }

    fn remove<'a>(&'a self, id: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.unlink(id).await.map_err(store_error) })
    }

    /// Starts the idle time of each session again (`PEXPIRE` of its state, and of its event
    /// store's table and counter), without reading it; sessions with no state are left alone.
    fn touch<'a>(&'a self, ids: &'a [&'a str]) -> StoreFuture<'a, ()> {
        Box::pin(async move { self.pexpire(ids).await.map_err(store_error) })
    }
}
