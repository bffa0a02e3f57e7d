//! [`RedisTaskStore`]: the tasks of every instance of a fleet in Redis, so that a task created
//! through one instance is polled, fed input and cancelled through any other.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use modelctx_server::tasks::{
    TaskPage, TaskRecord, TaskStore, TaskStoreError, TaskStoreFuture, TaskUpdate, Updated,
};
use redis::Script;

use crate::conn::Shared;
use crate::error::Error;
use crate::keys::MAX_INSTANCES;

/// The scripts that use the shared functions (forget, purge, Redis's clock).
macro_rules! with_tasks_fn {
    ($file:literal) => {
        concat!(include_str!("scripts/tasks_fn.lua"), include_str!($file))
    };
}

const CREATE: &str = with_tasks_fn!("scripts/tasks_create.lua");
const LIST: &str = with_tasks_fn!("scripts/tasks_list.lua");
const REMOVE: &str = with_tasks_fn!("scripts/tasks_remove.lua");
const PURGE: &str = with_tasks_fn!("scripts/tasks_purge.lua");
const SWAP: &str = include_str!("scripts/tasks_swap.lua");

/// How many expired tasks one call forgets at most (a script stays short; the next call goes on).
const PURGE_BATCH: usize = 1000;

/// How many times [`TaskStore::update`] reads and writes again when another writer changed the
/// task in between, before it gives up; after each lost race it waits a random time below
/// [`UPDATE_BACKOFF`] times the races lost so far (capped at 50 ms), so that writers at once
/// spread out.
const UPDATE_TRIES: u32 = 100;

/// The step of the wait after a lost race (see [`UPDATE_TRIES`]).
const UPDATE_BACKOFF: Duration = Duration::from_millis(2);

/// The names of the task store's keys: every one starts with `PREFIX:{tasks}:`.
#[derive(Debug, Clone)]
struct TaskKeys {
    /// `PREFIX:{tasks}:`.
    base: String,
}

impl TaskKeys {
    fn new(prefix: &str) -> TaskKeys {
        TaskKeys {
            base: format!("{prefix}:{{tasks}}:"),
        }
    }

    /// `BASE t:ID`: task `id`'s version and record.
    fn task(&self, id: &str) -> String {
        format!("{}t:{id}", self.base)
    }

    /// `BASE own`: each task's creation time and principal.
    fn own(&self) -> String {
        format!("{}own", self.base)
    }

    /// `BASE exp`: the tasks that expire, by expiry.
    fn exp(&self) -> String {
        format!("{}exp", self.base)
    }

    /// `BASE p:P`: the tasks of `principal`, in creation order.
    fn principal(&self, principal: Option<&str>) -> String {
        format!("{}p:{}", self.base, principal_part(principal))
    }
}

/// A principal as it is written in keys: `-` for none, `=` and the principal's name for one
/// (so that no name can be taken for "none").
fn principal_part(principal: Option<&str>) -> String {
    match principal {
        None => "-".to_owned(),
        Some(name) => format!("={name}"),
    }
}

/// The entry of a task in its principal's index, `CREATED:ID` with `CREATED` on 20 digits, so
/// that the index's lexical order is the order of creation (then of ids).
fn entry(created_ms: u64, id: &str) -> String {
    format!("{created_ms:020}:{id}")
}

/// The cursor of the page after `record`: `CREATED:ID` (`CREATED` as a plain number).
fn cursor_of(record: &TaskRecord) -> String {
    format!("{}:{}", record.created_ms, record.task_id)
}

/// The index entry a cursor names, or `None` when it is not one of this store's.
fn parse_cursor(cursor: &str) -> Option<String> {
    let (created, id) = cursor.split_once(':')?;
    if id.is_empty() || created.is_empty() || !created.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(entry(created.parse().ok()?, id))
}

/// The name of instance `number`, whose lease says `holder`, in a task record
/// (`TaskRecord::instance`): `N:HOLDER` (`3:host:1234`).
fn instance_name(number: u16, holder: &str) -> String {
    format!("{number}:{holder}")
}

/// An instance a task record names: its number and what its lease says while it lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner<'a> {
    number: u16,
    holder: &'a str,
}

/// The instance of a name written by [`instance_name`]; `None` for a name this store did not
/// write.
fn parse_owner(name: &str) -> Option<Owner<'_>> {
    let (number, holder) = name.split_once(':')?;
    if number.is_empty() || holder.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: u16 = number.parse().ok()?;
    (number < MAX_INSTANCES).then_some(Owner { number, holder })
}

/// The instance whose lease says whether `record`'s handler may still run, when there is one
/// to ask: not for a terminal task, a task naming no instance (or a name this store did not
/// write), or a task of this instance (`me`), which is alive as it asks.
fn owner_to_check<'r>(record: &'r TaskRecord, me: &str) -> Option<Owner<'r>> {
    if record.status.is_terminal() {
        return None;
    }
    let name = record.instance.as_deref()?;
    if name == me {
        return None;
    }
    parse_owner(name)
}

/// Whether `owner` is gone when its lease key holds `lease` (`None`: no key): no lease (it ran
/// out, 15 s by default, or was given back), or the lease of another process (the number was
/// taken again after the owner died).
fn is_gone(owner: Owner<'_>, lease: Option<&str>) -> bool {
    lease != Some(owner.holder)
}

#[derive(Debug)]
struct Scripts {
    create: Script,
    swap: Script,
    list: Script,
    remove: Script,
    purge: Script,
}

/// A [`TaskStore`] on Redis ([`Fleet::task_store`](crate::Fleet::task_store)): the tasks of a
/// server of many instances, so that `tasks/get`, `tasks/update`, `tasks/cancel` (and the
/// 2025-11-25 `tasks/result` and `tasks/list`) find a task whichever instance they land on.
///
/// Each task is a hash `PREFIX:{tasks}:t:ID` holding its [`TaskRecord`] as JSON and a version;
/// a task with a time to live expires from Redis `ttl` after its creation (`PEXPIREAT`), so a
/// result is freed even when no instance is left to forget it. Two indexes say who owns what:
/// `PREFIX:{tasks}:own` (each task's principal and creation time, whose length is the number of
/// tasks held) and `PREFIX:{tasks}:p:P` (a principal's tasks in creation order, for `list`);
/// `PREFIX:{tasks}:exp` orders the tasks that expire by their expiry, so that each script that
/// counts or lists forgets the expired ones first (at most 1000 at a time), by Redis's clock.
///
/// Every change is one Lua script, so it is atomic: [`create`](TaskStore::create) checks the
/// bounds ([`max_tasks`](Self::max_tasks) in all, [`max_per_principal`](Self::max_per_principal)
/// per principal; the defaults are [`MemoryTaskStore`](modelctx_server::tasks::MemoryTaskStore)'s)
/// and writes the task in one step, so that instances creating tasks at once never go beyond
/// them. [`update`](TaskStore::update) reads the record, applies the update with
/// [`TaskRecord::apply`] (the rules every store follows: terminal states final), and writes it
/// back only if its version did not change in between; else it waits a little (a random time,
/// growing) and reads again, 100 times at most.
///
/// Each task names the instance that created it, whose process runs its handler
/// (`TaskRecord::instance`, `N:host:pid`: the instance number and what its lease
/// `PREFIX:inst:N` says). When [`get`](TaskStore::get), [`update`](TaskStore::update) or
/// [`list`](TaskStore::list) reads a task not finished (`working`, `input_required`) of another
/// instance, it reads that instance's lease (one `GET`; for a page, one per instance named, in
/// one pipeline); when the lease is gone, or held by another process, the task is settled
/// `failed` with [`TaskUpdate::orphaned`] ("the instance running this task stopped"), with the
/// same compare-and-set of the version as any update, so that of the instances reading it at
/// once exactly one settles it; the call answers the settled task (an update is then not
/// applied). A task is so settled within the lease (15 s by default) of its instance's death,
/// at the first read after; nothing scans the tasks.
///
/// All the keys share the hash tag `{tasks}`: on Redis Cluster they are in one slot, as the
/// bound over all tasks must be checked in one script. A principal's tasks are seen only by that
/// principal: `get`, `update` and `list` of another principal find nothing. Every call fails
/// within the fleet's [`op_timeout`](crate::FleetConfig::op_timeout) when Redis is lost
/// ([`TaskStoreErrorKind::Unavailable`](modelctx_server::tasks::TaskStoreErrorKind)). Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct RedisTaskStore {
    shared: Arc<Shared>,
    /// This instance's name in the records ([`instance_name`]).
    me: Arc<str>,
    keys: TaskKeys,
    scripts: Arc<Scripts>,
    max_tasks: usize,
    max_per_principal: usize,
}

impl RedisTaskStore {
    /// The store of instance `instance`, whose lease says `holder`.
    pub(crate) fn new(shared: Arc<Shared>, instance: u16, holder: &str) -> RedisTaskStore {
        RedisTaskStore {
            keys: TaskKeys::new(&shared.config.prefix),
            me: instance_name(instance, holder).into(),
            shared,
            scripts: Arc::new(Scripts {
                create: Script::new(CREATE),
                swap: Script::new(SWAP),
                list: Script::new(LIST),
                remove: Script::new(REMOVE),
                purge: Script::new(PURGE),
            }),
            max_tasks: modelctx_server::tasks::MemoryTaskStore::DEFAULT_MAX_TASKS,
            max_per_principal: modelctx_server::tasks::MemoryTaskStore::DEFAULT_MAX_PER_PRINCIPAL,
        }
    }

    /// The same store, holding at most `n` tasks of every principal together (at least 1;
    /// default 10 000). Every instance of a fleet should give the same bound: each `create`
    /// checks its own.
    pub fn max_tasks(mut self, n: usize) -> RedisTaskStore {
        self.max_tasks = n.max(1);
        self
    }

    /// The same store, holding at most `n` tasks of one principal (at least 1; default 1000).
    pub fn max_per_principal(mut self, n: usize) -> RedisTaskStore {
        self.max_per_principal = n.max(1);
        self
    }

    async fn create_task(&self, record: &TaskRecord) -> Result<(), TaskStoreError> {
        let json = serde_json::to_string(record).map_err(|source| {
            task_error(Error::Corrupt {
                op: "create task",
                source,
            })
        })?;
        let principal = record.principal.as_deref();
        let mut call = self.scripts.create.prepare_invoke();
        call.key(self.keys.task(&record.task_id))
            .key(self.keys.own())
            .key(self.keys.exp())
            .key(self.keys.principal(principal))
            .arg(&record.task_id)
            .arg(json)
            .arg(format!("{:020}", record.created_ms))
            .arg(principal_part(principal))
            .arg(
                record
                    .expires_ms()
                    .map(|at| at.to_string())
                    .unwrap_or_default(),
            )
            .arg(self.max_tasks)
            .arg(self.max_per_principal)
            .arg(&self.keys.base)
            .arg(PURGE_BATCH);
        let (outcome, count): (i64, u64) = self
            .shared
            .eval("create task", &call)
            .await
            .map_err(task_error)?;
        match outcome {
            0 => Ok(()),
            -1 => Err(TaskStoreError::failed(format!(
                "a task {} exists already",
                record.task_id
            ))),
            1 => Err(TaskStoreError::full(format!(
                "it holds {count} tasks, its bound"
            ))),
            _ => Err(TaskStoreError::full(format!(
                "the caller holds {count} tasks, the bound per principal"
            ))),
        }
    }

    /// The record of task `id` and its version, whoever owns it.
    async fn read(&self, id: &str) -> Result<Option<(String, TaskRecord)>, TaskStoreError> {
        let (version, json): (Option<String>, Option<String>) = self
            .shared
            .query(
                "HMGET",
                redis::cmd("HMGET")
                    .arg(self.keys.task(id))
                    .arg("v")
                    .arg("r"),
            )
            .await
            .map_err(task_error)?;
        let (Some(version), Some(json)) = (version, json) else {
            return Ok(None);
        };
        Ok(Some((version, decode("read task", &json)?)))
    }

    async fn get_task(
        &self,
        id: &str,
        principal: Option<&str>,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        let Some((version, record)) = self.read(id).await? else {
            return Ok(None);
        };
        if !record.belongs_to(principal) {
            return Ok(None);
        }
        self.checked(id, version, record).await
    }

    /// Task `id`, read at `version` as `record`, once its instance is checked: settled `failed`
    /// when that instance is gone ([`owner_to_check`], [`is_gone`]); `None` when the task
    /// disappeared meanwhile.
    async fn checked(
        &self,
        id: &str,
        mut version: String,
        mut record: TaskRecord,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        for lost in 0..UPDATE_TRIES {
            if lost > 0 {
                tokio::time::sleep(backoff(lost)).await;
                let Some((v, r)) = self.read(id).await? else {
                    return Ok(None);
                };
                (version, record) = (v, r);
            }
            let Some(owner) = owner_to_check(&record, &self.me) else {
                return Ok(Some(record));
            };
            if !self.gone(owner).await? {
                return Ok(Some(record));
            }
            if let Some(settled) = self.settle(id, &version, &record).await? {
                return Ok(Some(settled));
            }
        }
        Err(TaskStoreError::failed(format!(
            "task {id} changed under {UPDATE_TRIES} reads in a row"
        )))
    }

    /// Whether `owner` is gone: its lease, read now.
    async fn gone(&self, owner: Owner<'_>) -> Result<bool, TaskStoreError> {
        let lease: Option<String> = self
            .shared
            .query(
                "GET",
                redis::cmd("GET").arg(self.shared.keys.instance(owner.number)),
            )
            .await
            .map_err(task_error)?;
        Ok(is_gone(owner, lease.as_deref()))
    }

    /// Settles task `id`, read at `version` as `record`, `failed` for its gone instance
    /// ([`TaskUpdate::orphaned`]), if it is still that version: the settled task, or `None` when
    /// it changed meanwhile (another instance settled it, or its own last update landed).
    async fn settle(
        &self,
        id: &str,
        version: &str,
        record: &TaskRecord,
    ) -> Result<Option<TaskRecord>, TaskStoreError> {
        let outcome = Updated::of(record.clone(), &TaskUpdate::orphaned(), now_ms());
        let json = serde_json::to_string(&outcome.record).map_err(|source| {
            task_error(Error::Corrupt {
                op: "settle task",
                source,
            })
        })?;
        let mut call = self.scripts.swap.prepare_invoke();
        call.key(self.keys.task(id)).arg(version).arg(json);
        let swapped: i64 = self
            .shared
            .eval("settle task", &call)
            .await
            .map_err(task_error)?;
        if swapped != 1 {
            return Ok(None);
        }
        tracing::warn!(
            task = %id,
            instance = record.instance.as_deref().unwrap_or_default(),
            "the instance running a task is gone: the task is settled failed"
        );
        Ok(Some(outcome.record))
    }

    async fn update_task(
        &self,
        id: &str,
        principal: Option<&str>,
        update: &TaskUpdate,
    ) -> Result<Option<Updated>, TaskStoreError> {
        for lost in 0..UPDATE_TRIES {
            if lost > 0 {
                tokio::time::sleep(backoff(lost)).await;
            }
            let Some((version, record)) = self.read(id).await? else {
                return Ok(None);
            };
            if !record.belongs_to(principal) {
                return Ok(None);
            }
            if let Some(owner) = owner_to_check(&record, &self.me)
                && self.gone(owner).await?
            {
                // Its handler is gone: the task fails, and the update (now of a terminal task)
                // is not applied.
                match self.settle(id, &version, &record).await? {
                    Some(settled) => return Ok(Some(Updated::of(settled, update, now_ms()))),
                    None => continue,
                }
            }
            let outcome = Updated::of(record, update, now_ms());
            if !outcome.applied {
                return Ok(Some(outcome));
            }
            let json = serde_json::to_string(&outcome.record).map_err(|source| {
                task_error(Error::Corrupt {
                    op: "update task",
                    source,
                })
            })?;
            let mut call = self.scripts.swap.prepare_invoke();
            call.key(self.keys.task(id)).arg(version).arg(json);
            let swapped: i64 = self
                .shared
                .eval("update task", &call)
                .await
                .map_err(task_error)?;
            if swapped == 1 {
                return Ok(Some(outcome));
            }
        }
        Err(TaskStoreError::failed(format!(
            "task {id} changed under {UPDATE_TRIES} updates in a row"
        )))
    }

    async fn list_tasks(
        &self,
        principal: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, TaskStoreError> {
        let start = match cursor {
            None => "-".to_owned(),
            Some(cursor) => {
                let after = parse_cursor(cursor).ok_or_else(|| {
                    TaskStoreError::failed(format!("{cursor:?} is not a cursor of this store"))
                })?;
                format!("({after}")
            }
        };
        let limit = limit.max(1);
        let mut call = self.scripts.list.prepare_invoke();
        call.key(self.keys.own())
            .key(self.keys.exp())
            .key(self.keys.principal(principal))
            .arg(&self.keys.base)
            .arg(start)
            .arg(limit.saturating_add(1))
            .arg(PURGE_BATCH);
        let flat: Vec<String> = self
            .shared
            .eval("list tasks", &call)
            .await
            .map_err(task_error)?;
        let mut tasks = Vec::with_capacity(flat.len() / 2);
        for pair in flat.chunks(2) {
            let [_, json] = pair else {
                return Err(task_error(corrupt(
                    "list tasks",
                    "an entry without a record",
                )));
            };
            let record = decode("list tasks", json)?;
            // The index is the principal's: a record of another is a corrupt store.
            if !record.belongs_to(principal) {
                return Err(task_error(corrupt(
                    "list tasks",
                    "a record in another principal's index",
                )));
            }
            tasks.push(record);
        }
        let next = if tasks.len() > limit {
            tasks.truncate(limit);
            tasks.last().map(cursor_of)
        } else {
            None
        };
        let tasks = self.settle_page(tasks).await?;
        Ok(TaskPage::new(tasks, next))
    }

    /// A page of tasks, those of gone instances settled: the leases of the other instances the
    /// page names are read in one pipeline, and each task found orphaned is read again and
    /// settled ([`checked`](Self::checked)).
    async fn settle_page(&self, tasks: Vec<TaskRecord>) -> Result<Vec<TaskRecord>, TaskStoreError> {
        let mut numbers: Vec<u16> = tasks
            .iter()
            .filter_map(|record| owner_to_check(record, &self.me))
            .map(|owner| owner.number)
            .collect();
        if numbers.is_empty() {
            return Ok(tasks);
        }
        numbers.sort_unstable();
        numbers.dedup();
        let mut pipe = redis::pipe();
        for number in &numbers {
            pipe.cmd("GET").arg(self.shared.keys.instance(*number));
        }
        let leases: Vec<Option<String>> = self
            .shared
            .pipeline("GET leases", &pipe)
            .await
            .map_err(task_error)?;
        let lease_of = |number: u16| {
            numbers
                .binary_search(&number)
                .ok()
                .and_then(|i| leases.get(i))
                .and_then(Option::as_deref)
        };
        let mut page = Vec::with_capacity(tasks.len());
        for record in tasks {
            let orphaned = owner_to_check(&record, &self.me)
                .is_some_and(|owner| is_gone(owner, lease_of(owner.number)));
            if !orphaned {
                page.push(record);
                continue;
            }
            let id = record.task_id.clone();
            // Removed or expired meanwhile: left out of the page.
            if let Some((version, again)) = self.read(&id).await?
                && let Some(settled) = self.checked(&id, version, again).await?
            {
                page.push(settled);
            }
        }
        Ok(page)
    }

    async fn remove_task(&self, id: &str) -> Result<(), TaskStoreError> {
        let mut call = self.scripts.remove.prepare_invoke();
        call.key(self.keys.task(id))
            .key(self.keys.own())
            .key(self.keys.exp())
            .arg(&self.keys.base)
            .arg(id);
        let _: i64 = self
            .shared
            .eval("remove task", &call)
            .await
            .map_err(task_error)?;
        Ok(())
    }

    /// Forgets a batch of expired tasks; how many, and how many tasks are held after.
    async fn purge_batch(&self) -> Result<(usize, usize), TaskStoreError> {
        let mut call = self.scripts.purge.prepare_invoke();
        call.key(self.keys.own())
            .key(self.keys.exp())
            .arg(&self.keys.base)
            .arg(PURGE_BATCH);
        self.shared
            .eval("purge tasks", &call)
            .await
            .map_err(task_error)
    }

    async fn purge_all(&self) -> Result<(usize, usize), TaskStoreError> {
        let mut forgotten = 0;
        loop {
            let (n, held) = self.purge_batch().await?;
            forgotten += n;
            if n < PURGE_BATCH {
                return Ok((forgotten, held));
            }
        }
    }
}

impl TaskStore for RedisTaskStore {
    fn create<'a>(&'a self, record: &'a TaskRecord) -> TaskStoreFuture<'a, ()> {
        Box::pin(self.create_task(record))
    }

    fn get<'a>(
        &'a self,
        task_id: &'a str,
        principal: Option<&'a str>,
    ) -> TaskStoreFuture<'a, Option<TaskRecord>> {
        Box::pin(self.get_task(task_id, principal))
    }

    fn update<'a>(
        &'a self,
        task_id: &'a str,
        principal: Option<&'a str>,
        update: &'a TaskUpdate,
    ) -> TaskStoreFuture<'a, Option<Updated>> {
        Box::pin(self.update_task(task_id, principal, update))
    }

    fn list<'a>(
        &'a self,
        principal: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> TaskStoreFuture<'a, TaskPage> {
        Box::pin(self.list_tasks(principal, cursor, limit))
    }

    fn remove<'a>(&'a self, task_id: &'a str) -> TaskStoreFuture<'a, ()> {
        Box::pin(self.remove_task(task_id))
    }

    /// Forgets the index entries of the tasks expired by Redis's clock (their records are gone
    /// already: Redis expired them).
    fn purge_expired(&self) -> TaskStoreFuture<'_, usize> {
        Box::pin(async move { self.purge_all().await.map(|(n, _)| n) })
    }

    /// The tasks held, after forgetting the expired ones.
    fn count(&self) -> TaskStoreFuture<'_, usize> {
        Box::pin(async move { self.purge_all().await.map(|(_, held)| held) })
    }

    /// `N:host:pid`: this instance's number and what its lease says.
    fn instance(&self) -> Option<String> {
        Some(self.me.to_string())
    }
}

/// A random wait below `UPDATE_BACKOFF * lost`, at most 50 ms.
fn backoff(lost: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let most = UPDATE_BACKOFF
        .saturating_mul(lost)
        .min(Duration::from_millis(50));
    let most_us = u64::try_from(most.as_micros()).unwrap_or(50_000).max(1);
    // A random number from the standard library: each `RandomState` has random keys.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Duration::from_micros(random % most_us)
}

/// This machine's clock, in milliseconds since the epoch (`lastUpdatedAt`).
fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn decode(op: &'static str, json: &str) -> Result<TaskRecord, TaskStoreError> {
    serde_json::from_str(json).map_err(|source| task_error(Error::Corrupt { op, source }))
}

fn corrupt(op: &'static str, what: &str) -> Error {
    Error::Corrupt {
        op,
        source: <serde_json::Error as serde::de::Error>::custom(what),
    }
}

/// A Redis failure as the task store reports it: unavailable (the caller may try again) or
/// failed, with its cause kept.
pub(crate) fn task_error(error: Error) -> TaskStoreError {
    if error.is_unavailable() {
        TaskStoreError::unavailable(error)
    } else {
        TaskStoreError::failed(error)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use modelctx_server::tasks::{TaskStatus, TaskStoreErrorKind};

    use super::*;

    /// The hash tag of `key` as Redis Cluster computes it.
    fn hash_tag(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn the_layout_is_the_documented_one_and_every_key_shares_one_hash_tag() {
        let keys = TaskKeys::new("mcx");
        assert_eq!(keys.task("abc"), "mcx:{tasks}:t:abc");
        assert_eq!(keys.own(), "mcx:{tasks}:own");
        assert_eq!(keys.exp(), "mcx:{tasks}:exp");
        assert_eq!(keys.principal(None), "mcx:{tasks}:p:-");
        assert_eq!(keys.principal(Some("alice")), "mcx:{tasks}:p:=alice");
        // A principal named `-` is not "no principal".
        assert_ne!(keys.principal(Some("-")), keys.principal(None));
        for key in [
            keys.task("x"),
            keys.task("}{"),
            keys.own(),
            keys.exp(),
            keys.principal(None),
            keys.principal(Some("{evil}")),
        ] {
            assert_eq!(hash_tag(&key), "tasks", "{key}");
        }
        assert_eq!(TaskKeys::new("app:mcp").own(), "app:mcp:{tasks}:own");
    }

    /// Entries sort as (creation, id), and a cursor names the entry it was made from; anything
    /// else is not a cursor.
    #[test]
    fn entries_sort_by_creation_and_cursors_round_trip() {
        let mut entries = vec![
            entry(10, "b"),
            entry(9, "z"),
            entry(10, "a"),
            entry(100, "a"),
        ];
        entries.sort();
        assert_eq!(
            entries,
            [
                entry(9, "z"),
                entry(10, "a"),
                entry(10, "b"),
                entry(100, "a")
            ]
        );
        assert_eq!(entry(1_700_000_000_000, "t"), "00000001700000000000:t");
        let record = TaskRecord::new(
            "id:with:colons",
            None,
            "tools/call",
            "2026-07-28",
            SystemTime::UNIX_EPOCH + Duration::from_millis(42),
        );
        let cursor = cursor_of(&record);
        assert_eq!(cursor, "42:id:with:colons");
        assert_eq!(parse_cursor(&cursor), Some(entry(42, "id:with:colons")));
        for bad in [
            "",
            "nope",
            ":x",
            "12:",
            "-1:x",
            "1e3:x",
            "99999999999999999999999:x",
        ] {
            assert_eq!(parse_cursor(bad), None, "{bad:?}");
        }
    }

    fn task(status: TaskStatus, instance: Option<&str>) -> TaskRecord {
        let mut record = TaskRecord::new(
            "t",
            None,
            "tools/call",
            "2026-07-28",
            SystemTime::UNIX_EPOCH + Duration::from_millis(1),
        )
        .instance(instance.map(str::to_owned));
        record.status = status;
        record
    }

    /// Names round-trip; a name this store did not write (no number, a number beyond the
    /// instances, no holder) names no instance to check.
    #[test]
    fn an_instance_is_named_by_its_number_and_lease_holder() {
        let name = instance_name(3, "host:1234");
        assert_eq!(name, "3:host:1234");
        assert_eq!(
            parse_owner(&name),
            Some(Owner {
                number: 3,
                holder: "host:1234"
            })
        );
        assert_eq!(
            parse_owner("4095:h:1").map(|o| o.number),
            Some(MAX_INSTANCES - 1)
        );
        for bad in [
            "",
            "3",
            "3:",
            ":h:1",
            "4096:h:1",
            "-1:h:1",
            "x:h:1",
            "99999:h:1",
        ] {
            assert_eq!(parse_owner(bad), None, "{bad:?}");
        }
    }

    /// Which tasks are checked at all: only unfinished tasks of another instance this store
    /// named; never this instance's own, a terminal task, or one naming no instance (a task
    /// written before records named it, or by a store of one process).
    #[test]
    fn only_unfinished_tasks_of_other_instances_are_checked() {
        let me = instance_name(1, "here:10");
        let other = instance_name(2, "there:20");
        for status in [TaskStatus::Working, TaskStatus::InputRequired] {
            assert_eq!(
                owner_to_check(&task(status, Some(&other)), &me),
                Some(Owner {
                    number: 2,
                    holder: "there:20"
                }),
                "{status}"
            );
            assert_eq!(owner_to_check(&task(status, Some(&me)), &me), None);
            assert_eq!(owner_to_check(&task(status, None), &me), None);
            assert_eq!(owner_to_check(&task(status, Some("garbage")), &me), None);
        }
        for status in [
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ] {
            assert_eq!(owner_to_check(&task(status, Some(&other)), &me), None);
        }
    }

    /// The lease states: held by the owner (alive), missing (ran out or given back: gone),
    /// held by another process that took the number again (gone).
    #[test]
    fn an_owner_is_gone_when_its_lease_is_not_its_own() {
        let owner = Owner {
            number: 7,
            holder: "host:1234",
        };
        assert!(!is_gone(owner, Some("host:1234")));
        assert!(is_gone(owner, None));
        assert!(is_gone(owner, Some("host:9999")));
        assert!(is_gone(owner, Some("other:1234")));
        assert!(is_gone(owner, Some("")));
    }

    #[test]
    fn the_wait_after_a_lost_race_grows_and_is_capped() {
        for lost in 1..200 {
            let wait = backoff(lost);
            assert!(wait < UPDATE_BACKOFF * lost, "{lost}: {wait:?}");
            assert!(wait < Duration::from_millis(50), "{lost}: {wait:?}");
        }
    }

    #[test]
    fn redis_errors_keep_their_kind_and_cause() {
        let down = task_error(Error::Timeout {
            op: "create task",
            after: Duration::from_secs(1),
        });
        assert_eq!(down.kind(), TaskStoreErrorKind::Unavailable);
        let cause = down
            .source()
            .and_then(|e| e.downcast_ref::<Error>())
            .expect("the crate's error, kept");
        assert!(matches!(
            cause,
            Error::Timeout {
                op: "create task",
                ..
            }
        ));
        let refused = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR Error running script",
        ));
        assert_eq!(
            task_error(Error::redis("create task", refused)).kind(),
            TaskStoreErrorKind::Failed
        );
        assert_eq!(
            task_error(corrupt("list tasks", "bad")).kind(),
            TaskStoreErrorKind::Failed
        );
    }
}
