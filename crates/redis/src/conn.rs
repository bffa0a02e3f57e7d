//! The connections to Redis, this instance's number and its lease: [`Fleet`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use redis::{Client, FromRedisValue, IntoConnectionInfo, PushInfo, Script};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::bus::{PubSub, RedisBus, Router, keep_subscribed};
use crate::error::{Error, FleetError};
use crate::events::RedisEventStore;
use crate::keys::{Keys, MAX_INSTANCES};
use crate::session::RedisSessionStore;
use crate::tasks::RedisTaskStore;

/// How a [`Fleet`] talks to Redis.
///
/// Every setter documents its default. The timeouts apply to each connection to Redis; on top of
/// them, every call this crate makes is cut after [`op_timeout`](Self::op_timeout), because a
/// call made while a connection is being re-established waits for it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FleetConfig {
    pub(crate) prefix: String,
    pub(crate) op_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    pub(crate) retries: usize,
    pub(crate) max_retry_delay: Duration,
    pub(crate) lease_ttl: Duration,
    pub(crate) lease_refresh: Duration,
    pub(crate) session_idle: Duration,
}

impl Default for FleetConfig {
    fn default() -> FleetConfig {
        FleetConfig {
            prefix: "mcx".into(),
            op_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            connection_timeout: Duration::from_secs(1),
            retries: 3,
            max_retry_delay: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(15),
            lease_refresh: Duration::from_secs(5),
            session_idle: Duration::from_secs(30 * 60),
        }
    }
}

impl FleetConfig {
    /// The defaults (see each setter).
    pub fn new() -> FleetConfig {
        FleetConfig::default()
    }

    /// The first part of every key and channel name; default `mcx` (keys `mcx:...`). Instances
    /// of one fleet must use the same prefix; fleets sharing one Redis must use different ones.
    /// It must not be empty or hold a brace (`{`, `}`: the keys' hash tags are this crate's).
    pub fn prefix(mut self, prefix: impl Into<String>) -> FleetConfig {
        self.prefix = prefix.into();
        self
    }

    /// How long any call to Redis may take, reconnecting included, before it fails with
    /// [`Error::Timeout`]; default 1 s. This is what bounds a call when Redis is lost.
    pub fn op_timeout(mut self, timeout: Duration) -> FleetConfig {
        self.op_timeout = timeout;
        self
    }

    /// How long a connection waits for one reply before it gives up on it; default 1 s (the
    /// `redis` crate's default is 500 ms).
    pub fn response_timeout(mut self, timeout: Duration) -> FleetConfig {
        self.response_timeout = timeout;
        self
    }

    /// How long one attempt to connect may take; default 1 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> FleetConfig {
        self.connection_timeout = timeout;
        self
    }

    /// How many times a lost connection is tried again, with a delay that doubles from 100 ms,
    /// before the calls waiting on it fail (the next call starts a new round); default 3.
    pub fn retries(mut self, retries: usize) -> FleetConfig {
        self.retries = retries;
        self
    }

    /// The longest delay between two attempts to reconnect; default 1 s.
    pub fn max_retry_delay(mut self, delay: Duration) -> FleetConfig {
        self.max_retry_delay = delay;
        self
    }

    /// How long this instance's number stays leased without a refresh (`PX` of
    /// `PREFIX:inst:N`), and how often it is refreshed; defaults 15 s and 5 s. The refresh must
    /// be shorter than the lease. An instance that dies keeps its number for at most the lease.
    pub fn lease(mut self, ttl: Duration, refresh: Duration) -> FleetConfig {
        self.lease_ttl = ttl;
        self.lease_refresh = refresh;
        self
    }

    /// How long a legacy session's state is kept without being loaded or saved, in the stores
    /// [`Fleet::session_store`] makes; default 30 minutes, the HTTP transport's default
    /// `session_idle_timeout`. Give both the same value.
    pub fn session_idle(mut self, idle: Duration) -> FleetConfig {
        self.session_idle = idle;
        self
    }

    fn check(&self) -> Result<(), FleetError> {
        if self.prefix.is_empty() || self.prefix.contains(['{', '}']) {
            return Err(FleetError::Config(format!(
                "the key prefix {:?} is empty or holds a brace",
                self.prefix
            )));
        }
        if self.lease_refresh.is_zero() || self.lease_refresh >= self.lease_ttl {
            return Err(FleetError::Config(format!(
                "the lease refresh ({:?}) must be shorter than the lease ({:?}) and not zero",
                self.lease_refresh, self.lease_ttl
            )));
        }
        for (what, d) in [
            ("op_timeout", self.op_timeout),
            ("response_timeout", self.response_timeout),
            ("connection_timeout", self.connection_timeout),
            ("session_idle", self.session_idle),
        ] {
            if d < Duration::from_millis(1) {
                return Err(FleetError::Config(format!("{what} must be at least 1 ms")));
            }
        }
        Ok(())
    }
}

/// What the handles of one [`Fleet`] share: the command connection, the names, the timeouts.
#[derive(Debug)]
pub(crate) struct Shared {
    commands: ConnectionManager,
    pub(crate) keys: Keys,
    pub(crate) config: FleetConfig,
}

impl Shared {
    /// Runs `cmd` on the command connection, cut after the operation timeout.
    ///
    /// A call refused because the connection could not be made (Redis down at the last
    /// attempt to reconnect) is made once more, within the same timeout: the refusal starts a
    /// new attempt, and after a Redis restart the first call must not fail for the outage that
    /// ended. Nothing was sent, so nothing runs twice.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        op: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T, Error> {
        let call = async {
            let mut conn = self.commands.clone();
            match cmd.query_async(&mut conn).await {
                Err(error) if error.is_connection_refusal() => {
                    let mut conn = self.commands.clone();
                    cmd.query_async(&mut conn).await
                }
                done => done,
            }
        };
        self.bounded(op, call).await
    }

    /// Runs `script` on the command connection (`EVALSHA`, and `EVAL` when Redis does not have
    /// it, as after a restart), cut after the operation timeout; a refused connection as in
    /// [`query`](Self::query).
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        op: &'static str,
        script: &redis::ScriptInvocation<'_>,
    ) -> Result<T, Error> {
        let call = async {
            let mut conn = self.commands.clone();
            match script.invoke_async(&mut conn).await {
                Err(error) if error.is_connection_refusal() => {
                    let mut conn = self.commands.clone();
                    script.invoke_async(&mut conn).await
                }
                done => done,
            }
        };
        self.bounded(op, call).await
    }

    /// Runs `pipe` on the command connection, cut after the operation timeout.
    pub(crate) async fn pipeline<T: FromRedisValue>(
        &self,
        op: &'static str,
        pipe: &redis::Pipeline,
    ) -> Result<T, Error> {
        let mut conn = self.commands.clone();
        self.bounded(op, pipe.query_async(&mut conn)).await
    }

    pub(crate) async fn bounded<T>(
        &self,
        op: &'static str,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.config.op_timeout, call).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(source)) => Err(Error::redis(op, source)),
            Err(_) => Err(Error::Timeout {
                op,
                after: self.config.op_timeout,
            }),
        }
    }
}

/// One instance's place in a fleet: its connections to Redis, its instance number, and the lease
/// that holds the number.
///
/// [`Fleet::connect`] opens two connections (each one multiplexed TCP connection that
/// reconnects by itself, with TCP_NODELAY on): one for commands and scripts, and one for
/// pub/sub, in RESP3 with its subscriptions restored after a reconnect. It then takes a free
/// instance number `N` in `0..4096`: `INCR PREFIX:instances` gives a candidate `v`, and
/// `SET PREFIX:inst:(v % 4096) host:pid NX PX lease` takes it unless a live instance holds it
/// (then the next `v` is tried). A task refreshes the lease every
/// [`lease`](FleetConfig::lease) refresh interval, and takes it again when Redis lost it (a
/// restart without persistence); [`Fleet::shutdown`] deletes it. A fleet dropped without
/// `shutdown` stops refreshing, and its number is free again once the lease runs out.
///
/// A lost Redis makes calls fail within [`op_timeout`](FleetConfig::op_timeout); when it comes
/// back, calls work again, with no restart.
#[derive(Debug)]
pub struct Fleet {
    shared: Arc<Shared>,
    /// The pub/sub connection and its routes. Its keeper task ends once the fleet, its buses
    /// and its event stores are all gone.
    pubsub: Arc<PubSub>,
    bus: RedisBus,
    instance: u16,
    lease_key: String,
    holder: String,
    lease: Option<Lease>,
}

#[derive(Debug)]
struct Lease {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    held: Arc<AtomicBool>,
}

/// Refreshes a lease that is this holder's, takes it again when it is gone, leaves it when
/// another holder has it. Returns 1 (refreshed), 2 (taken again) or 0 (held by another).
const REFRESH_LEASE: &str = r"
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
";

/// Deletes a lease that is this holder's.
const RELEASE_LEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

impl Fleet {
    /// Connects to the Redis at `url` (`redis://[user:password@]host:port[/db]`, `unix://...`)
    /// and takes an instance number (see the type's docs).
    ///
    /// # Errors
    ///
    /// [`FleetError::Config`] for a bad configuration, [`FleetError::Url`] for a URL the
    /// `redis` crate does not take, [`FleetError::Connect`] when Redis cannot be reached,
    /// [`FleetError::TooOld`] for a Redis older than 6.2, [`FleetError::NoInstanceNumber`] when
    /// all 4096 numbers are leased.
    pub async fn connect(url: &str, config: FleetConfig) -> Result<Fleet, FleetError> {
        config.check()?;
        let info = url.into_connection_info().map_err(FleetError::Url)?;
        let tcp = TcpSettings::default().set_nodelay(true);
        let info = info.set_tcp_settings(tcp);
        let bus_info = info.clone().set_redis_settings(
            info.redis_settings()
                .clone()
                .set_protocol(redis::ProtocolVersion::RESP3),
        );
        let router = Arc::new(Router::default());
        let managers = ConnectionManagerConfig::new()
            .set_response_timeout(Some(config.response_timeout))
            .set_connection_timeout(Some(config.connection_timeout))
            .set_number_of_retries(config.retries)
            .set_max_delay(config.max_retry_delay);
        let bus_managers = managers
            .clone()
            .set_push_sender({
                let router = router.clone();
                move |push: PushInfo| {
                    router.route(push);
                    Ok::<(), std::convert::Infallible>(())
                }
            })
            .set_automatic_resubscription();

        // The connect itself retries: it is bounded by every attempt and delay it may make.
        let attempts = u32::try_from(config.retries)
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        let budget = config.connection_timeout.saturating_mul(attempts)
            + config.max_retry_delay.saturating_mul(attempts - 1)
            + config.op_timeout;
        let open = |info: redis::ConnectionInfo, managers: ConnectionManagerConfig| async move {
            let client = Client::open(info).map_err(FleetError::Url)?;
            match tokio::time::timeout(budget, ConnectionManager::new_with_config(client, managers))
                .await
            {
                Ok(Ok(manager)) => Ok(manager),
                Ok(Err(source)) => Err(FleetError::Connect(Error::redis("connect", source))),
                Err(_) => Err(FleetError::Connect(Error::Timeout {
                    op: "connect",
                    after: budget,
                })),
            }
        };
        let commands = open(info, managers).await?;
        let bus = open(bus_info, bus_managers).await?;
        let shared = Arc::new(Shared {
            commands,
            keys: Keys::new(&config.prefix),
            config,
        });

        let server: String = shared
            .query("INFO", redis::cmd("INFO").arg("server"))
            .await
            .map_err(FleetError::Connect)?;
        let version = redis_version(&server).unwrap_or_default();
        if !at_least_6_2(&version) {
            return Err(FleetError::TooOld { version });
        }

        let holder = format!("{}:{}", host_name(), std::process::id());
        let instance = take_number(&shared, &holder).await?;
        let lease_key = shared.keys.instance(instance);
        let held = Arc::new(AtomicBool::new(true));
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(keep_lease(
            shared.clone(),
            lease_key.clone(),
            holder.clone(),
            held.clone(),
            stopped,
        ));
        let pubsub = Arc::new(PubSub::new(bus, router, shared.clone()));
        tokio::spawn(keep_subscribed(Arc::downgrade(&pubsub)));
        let bus = RedisBus::new(shared.clone(), pubsub.clone(), instance);
        tracing::info!(instance, holder, "joined the fleet on redis");
        Ok(Fleet {
            shared,
            pubsub,
            bus,
            instance,
            lease_key,
            holder,
            lease: Some(Lease { stop, task, held }),
        })
    }

    /// This instance's number, in `0..4096`: unique among the live instances of the fleet.
    pub fn instance(&self) -> u16 {
        self.instance
    }

    /// What this instance's lease says: `host:pid`.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Whether the lease was held at its last refresh: `false` when Redis could not be reached
    /// or another process took the number (logged as an error) since.
    pub fn lease_held(&self) -> bool {
        self.lease
            .as_ref()
            .is_some_and(|lease| lease.held.load(Ordering::Relaxed))
    }

    /// A [`SessionStore`](modelctx_server::SessionStore) on this fleet's Redis, keeping each
    /// state for [`FleetConfig::session_idle`].
    pub fn session_store(&self) -> RedisSessionStore {
        RedisSessionStore::new(self.shared.clone())
    }

    /// An [`EventStore`](modelctx_http::event_store::EventStore) on this fleet's Redis, its
    /// streams numbered from this instance's `N << 32`, keeping each session's stream table for
    /// [`FleetConfig::session_idle`] (see [`RedisEventStore`] for its bounds).
    pub fn event_store(&self) -> RedisEventStore {
        RedisEventStore::new(self.shared.clone(), self.pubsub.clone(), self.instance)
    }

    /// A [`TaskStore`](modelctx_server::tasks::TaskStore) on this fleet's Redis, shared by
    /// every instance (see [`RedisTaskStore`] for its keys and bounds), for
    /// [`ServerBuilder::task_store`](modelctx_server::ServerBuilder::task_store).
    pub fn task_store(&self) -> RedisTaskStore {
        RedisTaskStore::new(self.shared.clone(), self.instance, &self.holder)
    }

    /// The [`Bus`](modelctx_server::bus::Bus) of this instance on this fleet's Redis
    /// (`PREFIX:bus` and `PREFIX:inbox:N`), for
    /// [`ServerBuilder::bus`](modelctx_server::ServerBuilder::bus). Every call gives the same
    /// bus (one reader of this instance's messages).
    pub fn bus(&self) -> RedisBus {
        self.bus.clone()
    }

    /// Leaves the fleet: stops refreshing the lease and deletes it (when it is still this
    /// instance's), so the number is free at once. The stores made from this fleet keep
    /// working.
    ///
    /// # Errors
    ///
    /// When Redis cannot be reached: the lease then runs out by itself.
    pub async fn shutdown(mut self) -> Result<(), Error> {
        if let Some(lease) = self.lease.take() {
            let _ = lease.stop.send(());
            let _ = lease.task.await;
        }
        let script = Script::new(RELEASE_LEASE);
        let mut release = script.prepare_invoke();
        release.key(&self.lease_key).arg(&self.holder);
        let _: i64 = self.shared.eval("release lease", &release).await?;
        tracing::info!(instance = self.instance, "left the fleet");
        Ok(())
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(lease) = self.lease.take() {
            lease.task.abort();
        }
    }
}

/// Takes the first free instance number from `INCR PREFIX:instances`.
async fn take_number(shared: &Shared, holder: &str) -> Result<u16, FleetError> {
    let ttl = millis(shared.config.lease_ttl);
    for _ in 0..MAX_INSTANCES {
        let v: u64 = shared
            .query("INCR", redis::cmd("INCR").arg(shared.keys.instances()))
            .await
            .map_err(FleetError::Connect)?;
        let n = instance_number(v);
        let taken: Option<String> = shared
            .query(
                "SET NX",
                redis::cmd("SET")
                    .arg(shared.keys.instance(n))
                    .arg(holder)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl),
            )
            .await
            .map_err(FleetError::Connect)?;
        if taken.is_some() {
            return Ok(n);
        }
    }
    Err(FleetError::NoInstanceNumber)
}

/// The instance number of counter value `v`.
fn instance_number(v: u64) -> u16 {
    // Below 4096: the cast cannot truncate.
    (v % u64::from(MAX_INSTANCES)) as u16
}

/// Refreshes the lease every refresh interval until `stopped`.
async fn keep_lease(
    shared: Arc<Shared>,
    key: String,
    holder: String,
    held: Arc<AtomicBool>,
    mut stopped: oneshot::Receiver<()>,
) {
    let script = Script::new(REFRESH_LEASE);
    let ttl = millis(shared.config.lease_ttl);
    let mut every = tokio::time::interval(shared.config.lease_refresh);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    every.tick().await;
    loop {
        tokio::select! {
            _ = &mut stopped => return,
            _ = every.tick() => {}
        }
        let mut refresh = script.prepare_invoke();
        refresh.key(&key).arg(&holder).arg(ttl);
        match shared.eval::<i64>("refresh lease", &refresh).await {
            Ok(1) => held.store(true, Ordering::Relaxed),
            Ok(2) => {
                held.store(true, Ordering::Relaxed);
                tracing::warn!(
                    key,
                    "the instance lease was gone (redis lost it); taken again"
                );
            }
            Ok(_) => {
                held.store(false, Ordering::Relaxed);
                tracing::error!(
                    key,
                    "another process holds this instance's number: two instances share it"
                );
            }
            Err(error) => {
                held.store(false, Ordering::Relaxed);
                tracing::warn!(key, %error, "the instance lease could not be refreshed");
            }
        }
    }
}

/// Milliseconds, for `PX`.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `redis_version` of an `INFO server` reply.
fn redis_version(info: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(|v| v.trim().to_owned())
}

/// Whether `version` (`7.0.15`) is 6.2 or newer.
fn at_least_6_2(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (6, 2),
        _ => false,
    }
}

/// This machine's name: `/proc/sys/kernel/hostname`, else `$HOSTNAME`, else `localhost`.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_numbers_wrap_at_4096() {
        assert_eq!(instance_number(1), 1);
        assert_eq!(instance_number(4095), 4095);
        assert_eq!(instance_number(4096), 0);
        assert_eq!(instance_number(4097 + 4096 * 9), 1);
        assert_eq!(instance_number(u64::MAX), 4095);
    }

    #[test]
    fn versions_before_6_2_are_refused() {
        let info = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n";
        assert_eq!(redis_version(info).as_deref(), Some("7.0.15"));
        assert!(at_least_6_2("7.0.15"));
        assert!(at_least_6_2("6.2.0"));
        assert!(at_least_6_2("10.0.1"));
        assert!(!at_least_6_2("6.0.20"));
        assert!(!at_least_6_2("5.0.7"));
        assert!(!at_least_6_2(""));
        assert_eq!(redis_version("# Server\r\n"), None);
    }

    #[test]
    fn a_bad_configuration_is_refused_before_connecting() {
        assert!(FleetConfig::new().check().is_ok());
        for bad in [
            FleetConfig::new().prefix(""),
            FleetConfig::new().prefix("a{b"),
            FleetConfig::new().prefix("}"),
            FleetConfig::new().lease(Duration::from_secs(5), Duration::from_secs(5)),
            FleetConfig::new().lease(Duration::from_secs(5), Duration::ZERO),
            FleetConfig::new().op_timeout(Duration::ZERO),
        ] {
            assert!(matches!(bad.check(), Err(FleetError::Config(_))), "{bad:?}");
        }
    }

    /// A URL that is not Redis's is refused with the `redis` crate's reason, and no connection
    /// is tried.
    #[tokio::test]
    async fn a_bad_url_is_refused() {
        let error = Fleet::connect("http://example.com/", FleetConfig::new())
            .await
            .unwrap_err();
        assert!(matches!(error, FleetError::Url(_)), "{error:?}");
    }

    /// Nothing listening: the connect fails, within its budget, with the cause kept.
    #[tokio::test]
    async fn an_unreachable_redis_fails_the_connect_quickly() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        let config = FleetConfig::new()
            .retries(1)
            .connection_timeout(Duration::from_millis(200))
            .max_retry_delay(Duration::from_millis(100))
            .op_timeout(Duration::from_millis(300));
        let started = std::time::Instant::now();
        let error = Fleet::connect(&format!("redis://127.0.0.1:{port}/"), config)
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        match error {
            FleetError::Connect(e) => assert!(e.is_unavailable(), "{e:?}"),
            other => panic!("{other:?}"),
        }
    }
}
