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
//! - Every call is cut after [`FleetConfig::op_timeout`] (1 s by default): a lost Redis makes
//!   calls fail quickly with an error whose [`Error::is_unavailable`] is true, never hang; when
//!   Redis is back, calls work again without a restart.
//!
//! What it does not do (yet): the event store on Redis Streams (SSE resumption on another
//! instance) and the message bus between instances (answers to server requests, cancellations,
//! change notifications) come next; until then the pub/sub connection is opened and kept, but
//! nothing is subscribed. It does not speak Redis Cluster (the keys are already hash-tagged for
//! it) or TLS (`rediss://`). It needs Redis 6.2 or newer (`GETEX`, RESP3, exclusive `XRANGE`
//! starts), checked at connect. Sessions survive a Redis restart only when Redis persists its
//! data (AOF); after a restart with no data every legacy session is unknown, and clients
//! initialize again.
//!
//! # Keys
//!
//! `PREFIX` is [`FleetConfig::prefix`], `mcx` by default. A session's keys carry the hash tag
//! `{s:SID}`, so on Redis Cluster they are in one slot.
//!
//! | key | type | written by | expires |
//! |---|---|---|---|
//! | `PREFIX:instances` | counter | `INCR` at connect | never |
//! | `PREFIX:inst:N` | string `host:pid` | `SET NX PX` at connect, refreshed every 5 s, `DEL` at shutdown | the lease, 15 s |
//! | `PREFIX:{s:SID}:state` | string, the `SessionState` as JSON | `save` (`SET PX`); `load` is `GETEX PX` | the session idle time, 30 min |
//! | `PREFIX:{s:SID}:seq` | counter | the event store (next) | idle |
//! | `PREFIX:{s:SID}:meta` | hash, the session's streams (`o:S`, `p:S`, `f:S`, ...) | the event store (next) | idle |
//! | `PREFIX:{s:SID}:ev:S` | stream, the events of SSE stream `S` | the event store (next) | bounded |
//!
//! `remove` unlinks the state, `seq`, `meta` and every `ev:S` that `meta` names.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use modelctx_redis::{Fleet, FleetConfig};
//!
//! let fleet = Fleet::connect("redis://127.0.0.1:6379/", FleetConfig::new()).await?;
//! let store = fleet.session_store();
//! // ... give `store` to the server (`ServerBuilder::session_store`), serve ...
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

pub use bus::{BUS_QUEUE, RedisBus};
pub use conn::{Fleet, FleetConfig};
pub use error::{Error, FleetError};
pub use events::{FOLLOW_POLL, RedisEventStore};
pub use keys::MAX_INSTANCES;
pub use session::RedisSessionStore;

/// The `redis` crate this one is built on (1.x), for its error type.
pub use redis;
