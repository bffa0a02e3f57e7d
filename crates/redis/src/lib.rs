//! Redis for a fleet of MCP server instances: any number of `modelctx-server` processes behind a
//! plain (round-robin, not sticky) load balancer, sharing what a legacy session needs.
//!
//! What it does:
//!
//! - [`Fleet::connect`] opens this instance's connections to Redis (one for commands, one for
//!   pub/sub in RESP3; both reconnect by themselves) and gives it an instance number in
//!   `0..4096`, unique among the live instances and held by a lease that a task refreshes
//!   ([`Fleet`] says how). [`Fleet::shutdown`] gives the number back.
//! - [`RedisSessionStore`] ([`Fleet::session_store`]) is a
//!   [`SessionStore`](modelctx_server::SessionStore): a legacy session's state lives in Redis,
//!   so a request for it may land on any instance; its removal (DELETE, the end of the
//!   session) removes it for all of them; a state unused for the idle time expires.
//! - [`RedisEventStore`] ([`Fleet::event_store`]) is an
//!   [`EventStore`](modelctx_http::event_store::EventStore) on Redis Streams: every SSE event of
//!   a legacy session is stored, bounded (`MAXLEN`, an age), so a client that resumes with
//!   `Last-Event-ID` on any instance gets exactly the events it missed, and then, for a stream
//!   another instance still writes, the rest live (pub/sub, with a poll every second as a safety
//!   net). When the instance writing a stream dies (its lease runs out), a follower completes
//!   the stream with an error for each request still pending on it.
//! - [`RedisBus`] ([`Fleet::bus`]) is a [`Bus`](modelctx_server::bus::Bus) on pub/sub: the
//!   instances exchange changes, forwarded client messages and session ends (broadcast on
//!   `PREFIX:bus`, or to one instance on `PREFIX:inbox:N`); the subscriptions are made again
//!   after a Redis restart.
//! - [`RedisTaskStore`] ([`Fleet::task_store`]) is a
//!   [`TaskStore`](modelctx_server::tasks::TaskStore): the tasks of every instance (a tool call
//!   run as a task), so a task created through one instance is polled, fed input and cancelled
//!   through any other; each task expires from Redis `ttl` after its creation, and the store's
//!   bounds (in all, per principal) are checked atomically, in one script with the write. Each
//!   task names the instance running its handler: once that instance's lease is gone, the first
//!   instance that reads the task settles it `failed` ("the instance running this task
//!   stopped"), exactly once (a compare-and-set of its version).
//! - Every call is cut after [`FleetConfig::op_timeout`] (1 s by default): a lost Redis makes
//!   calls fail quickly with an error whose [`Error::is_unavailable`] is true (a store error or
//!   bus error of kind `Unavailable`), never hang; when Redis is back, calls work again without
//!   a restart.
//!
//! What it does not do: pub/sub is at most once (a bus message published while an instance is
//! not subscribed is lost; stored events are not, as followers read the stream again). A stream
//! keeps its events until `MAXLEN` trims them or until its age after its last append (the
//! in-memory store ages each event). It does not speak Redis Cluster (the keys are already
//! hash-tagged for it) or TLS (`rediss://`). It needs Redis 6.2 or newer (`GETEX`, RESP3,
//! exclusive `XRANGE` starts), checked at connect. Sessions survive a Redis restart only when
//! Redis persists its data (AOF); after a restart with no data every legacy session is unknown,
//! and clients initialize again.
//!
//! # Keys
//!
//! `PREFIX` is [`FleetConfig::prefix`], `mcx` by default. A session's keys carry the hash tag
//! `{s:SID}`, so on Redis Cluster they are in one slot (and each script's keys share it).
//!
//! | key / channel | type | written by | expires |
//! |---|---|---|---|
//! | `PREFIX:instances` | counter | `INCR` at connect | never |
//! | `PREFIX:inst:N` | string `host:pid` | `SET NX PX` at connect, refreshed every 5 s, `DEL` at shutdown | the lease, 15 s |
//! | `PREFIX:{s:SID}:state` | string, the `SessionState` as JSON | `save` (`SET PX`); `load` is `GETEX PX`; `touch` is `PEXPIRE` | the session idle time, 30 min |
//! | `PREFIX:{s:SID}:seq` | counter, the session's event numbers | the append script (`INCR`) | idle |
//! | `PREFIX:{s:SID}:meta` | hash, per stream `S`: `o:S` owner instance, `p:S` pending request ids (JSON), `f:S` finished, `l:S` last and `t:S` last trimmed sequence number, `b:S` bytes; `sa` the standalone stream | the open, append, finish, `fail_orphan` scripts; `set_standalone` | idle |
//! | `PREFIX:{s:SID}:ev:S` | stream, the events of SSE stream `S` (entry `SEQ-0`, field `d`) | the append script (`XADD MAXLEN = 1024`) | 5 min after its last append |
//! | `PREFIX:{s:SID}:ch` | channel: `S PREV SEQ\n<data>` per event, `fin S` | the append and finish scripts | — |
//! | `PREFIX:{tasks}:t:ID` | hash: `v` version, `r` the `TaskRecord` as JSON (its `instance`: `N:host:pid`) | the task store's create script, then `update` and the settling of a gone instance's task (compare the version and set, in a script) | `PEXPIREAT` its creation + its ttl (none without a ttl) |
//! | `PREFIX:{tasks}:own` | hash, per task `ID`: `CREATED\|P` (creation time on 20 digits, principal) | the create, remove and purge scripts | — (emptied as tasks go) |
//! | `PREFIX:{tasks}:exp` | sorted set of the task ids that expire, by expiry | the create, remove and purge scripts | — |
//! | `PREFIX:{tasks}:p:P` | sorted set (lexical) of `CREATED:ID`, principal `P`'s tasks (`-` for none, `=NAME`) | the create, remove and purge scripts | — |
//! | `PREFIX:bus` | channel, `BusMessage` JSON for every instance | [`RedisBus`] | — |
//! | `PREFIX:inbox:N` | channel, `BusMessage` JSON for instance `N` | [`RedisBus`] | — |
//!
//! Stream ids are `N << 32 | n` (instance `N`). The session store's `remove` unlinks the state,
//! `seq`, `meta` and every `ev:S` that `meta` names; the event store's `remove_session` the same
//! but the state. The task store's keys all carry the hash tag `{tasks}` (one Cluster slot: its
//! bound over all tasks is checked in one script); a task's expired record is gone from Redis by
//! itself, and its index entries are forgotten by the next script that counts or lists tasks.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use modelctx_redis::{Fleet, FleetConfig};
//!
//! let fleet = Fleet::connect("redis://127.0.0.1:6379/", FleetConfig::new()).await?;
//! let store = fleet.session_store();
//! let events = fleet.event_store();
//! let bus = fleet.bus();
//! // ... give `store` and `bus` to the server (`ServerBuilder::session_store`,
//! // `ServerBuilder::bus`) and `events` to its HTTP configuration, serve ...
//! # drop((store, events, bus));
//! fleet.shutdown().await?;
//! # Ok(())
//! # }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]

mod bus;
mod conn;
mod error;
mod events;
mod keys;
mod session;
mod tasks;

pub use bus::{BUS_QUEUE, RedisBus};
pub use conn::{Fleet, FleetConfig};
pub use error::{Error, FleetError};
pub use events::{FOLLOW_POLL, RedisEventStore};
pub use keys::MAX_INSTANCES;
pub use session::RedisSessionStore;
pub use tasks::RedisTaskStore;

/// The `redis` crate this one is built on (1.x), for its error type.
pub use redis;
