//! The contract of [`TaskStore`] as checks that any implementation runs in its tests (feature
//! `testing`).
//!
//! Each function drives a store through one part of the contract and panics, like `assert!`, at
//! the first breach, with a message naming it. Each names its tasks and principals from the
//! prefix it is given, and removes every task it made before it returns. Store errors are
//! breaches too (but the refusals a check asks for): the store under test must be reachable.
//!
//! [`all`](crate::tasks::conformance::all) runs every check. A store passes when, in its tests, it gets through:
//!
//! ```no_run
//! use std::time::{Duration, SystemTime};
//!
//! use modelctx_server::tasks::MemoryTaskStore;
//! use modelctx_server::tasks::conformance::{self, Limits};
//!
//! # async fn check() {
//! // Small bounds, so that the checks can fill them.
//! let store = MemoryTaskStore::bounded(12, 4);
//! // Tasks of the expiry check live 300 ms.
//! let limits = Limits::new(12, 4, Duration::from_millis(300));
//! // A store on real time is aged by sleeping (the in-memory store's own tests move a test
//! // clock instead, which takes no time).
//! conformance::all(&store, "conformance", limits, SystemTime::now, tokio::time::sleep).await;
//! # }
//! ```
//!
//! This module is behind a feature, not `#[doc(hidden)]`: it panics by design, so it has no
//! place in a server's build, and as a documented part of the crate it says what an
//! implementation must do in a form that can be run.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, SystemTime};

use modelctx_types::{ErrorCode, ErrorObject, JsonObject};
use serde_json::json;

use super::{TaskRecord, TaskStatus, TaskStore, TaskStoreError, TaskStoreErrorKind, TaskUpdate};

/// What the checks need to know of the store under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Limits {
    /// The most tasks the store holds, of every principal together (for
    /// [`MemoryTaskStore`](super::MemoryTaskStore): `max_tasks`); more than twice
    /// `max_per_principal`.
    pub max_tasks: usize,
    /// The most tasks it holds of one principal (for
    /// [`MemoryTaskStore`](super::MemoryTaskStore): `max_per_principal`); at least 3.
    pub max_per_principal: usize,
    /// The time to live of the tasks of [`expire_after_their_ttl`]: short for a store on real
    /// time (each run waits about twice this).
    pub ttl: Duration,
}

impl Limits {
    /// A store holding at most `max_tasks` tasks, `max_per_principal` of one principal; the
    /// expiry check's tasks live `ttl`.
    pub fn new(max_tasks: usize, max_per_principal: usize, ttl: Duration) -> Limits {
        Limits {
            max_tasks,
            max_per_principal,
            ttl,
        }
    }
}

/// The most [`Limits::max_tasks`] the checks take: [`the_bound_is_enforced_atomically`] creates
/// that many tasks.
pub const MAX_BOUND: usize = 10_000;

/// Runs every check of this module, one after the other, and checks that the store holds as many
/// tasks after them as before ([`TaskStore::count`]). Nothing else may use the store meanwhile (the
/// bound checks count every task it holds). `now` is the store's clock (the creation time of the
/// checks' tasks); `advance` must move it on by at least the duration it is given.
pub async fn all<N, F, Fut>(store: &dyn TaskStore, prefix: &str, limits: Limits, now: N, advance: F)
where
    N: Fn() -> SystemTime,
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = ()>,
{
    assert!(
        limits.max_per_principal >= 3 && limits.max_tasks > 2 * limits.max_per_principal,
        "conformance: the checks need max_per_principal >= 3 and max_tasks above twice it"
    );
    assert!(
        limits.max_tasks <= MAX_BOUND,
        "conformance: the checks fill the bound: at most {MAX_BOUND} tasks"
    );
    let before = len(store).await;
    create_get_remove(store, &format!("{prefix}-create"), &now).await;
    principals_are_isolated(store, &format!("{prefix}-isolated"), &now).await;
    terminal_states_are_final(store, &format!("{prefix}-terminal"), &now).await;
    input_requests_follow_answers(store, &format!("{prefix}-input"), &now).await;
    tasks_of_this_instance_stay_as_they_are(store, &format!("{prefix}-instance"), &now).await;
    list_pages_in_creation_order(store, &format!("{prefix}-list"), limits, &now).await;
    the_bound_is_enforced_atomically(store, &format!("{prefix}-bound"), limits, &now).await;
    expire_after_their_ttl(store, &format!("{prefix}-expiry"), limits, &now, advance).await;
    assert_eq!(
        len(store).await,
        before,
        "conformance: the store does not hold as many tasks as before the checks"
    );
}

/// A task created is read back as it was written, by its principal; its id cannot be created
/// twice (a refusal that is not [`Full`](TaskStoreErrorKind::Full)); removed, it is gone and
/// the store holds one task fewer; removing it again is harmless.
pub async fn create_get_remove<N: Fn() -> SystemTime>(
    store: &dyn TaskStore,
    prefix: &str,
    now: &N,
) {
    let before = len(store).await;
    let owner = format!("{prefix}-owner");
    let id = format!("{prefix}-task");
    let mut record = TaskRecord::new(
        id.clone(),
        Some(owner.clone()),
        "tools/call",
        "2026-07-28",
        now(),
    )
    .ttl_ms(Some(3_600_000))
    .poll_interval_ms(Some(250));
    record.status_message = Some("started".into());
    create(store, &record).await;
    assert_eq!(
        len(store).await,
        before + 1,
        "conformance: len after a create"
    );
    assert_eq!(
        get(store, &id, Some(&owner)).await.as_ref(),
        Some(&record),
        "conformance: a task read back"
    );
    let again = store.create(&record).await;
    assert!(
        matches!(&again, Err(e) if e.kind() != TaskStoreErrorKind::Full),
        "conformance: a second create of {id} must be refused, and not as full: {again:?}"
    );
    assert_eq!(
        get(store, &id, Some(&owner)).await.as_ref(),
        Some(&record),
        "conformance: a refused create changed the task"
    );
    remove(store, &id).await;
    assert_eq!(
        get(store, &id, Some(&owner)).await,
        None,
        "conformance: a removed task"
    );
    assert_eq!(len(store).await, before, "conformance: len after remove");
    remove(store, &id).await;
    assert_eq!(
        update(store, &id, Some(&owner), &TaskUpdate::cancel()).await,
        None,
        "conformance: an update of a removed task"
    );
    // An id never created.
    assert_eq!(
        get(store, &format!("{prefix}-never"), Some(&owner)).await,
        None,
        "conformance: an unknown id"
    );
}

/// A task is seen only by the principal that created it (`None`, no principal, being one): for
/// every other, [`get`](TaskStore::get) and [`update`](TaskStore::update) find nothing (as for
/// an unknown id) and change nothing, and [`list`](TaskStore::list) does not show it.
pub async fn principals_are_isolated<N: Fn() -> SystemTime>(
    store: &dyn TaskStore,
    prefix: &str,
    now: &N,
) {
    let alice = format!("{prefix}-alice");
    let bob = format!("{prefix}-bob");
    let principals = [Some(alice.as_str()), Some(bob.as_str()), None];
    let mut ids = Vec::new();
    for (i, principal) in principals.iter().enumerate() {
        let id = format!("{prefix}-{i}");
        create(store, &record(&id, *principal, now())).await;
        ids.push(id);
    }
    for (i, id) in ids.iter().enumerate() {
        let own = principals[i];
        for (j, other) in principals.iter().enumerate() {
            if i == j {
                continue;
            }
            assert_eq!(
                get(store, id, *other).await,
                None,
                "conformance: {id} of {own:?} seen by {other:?}"
            );
            assert_eq!(
                update(store, id, *other, &TaskUpdate::cancel().message("hijacked")).await,
                None,
                "conformance: {id} of {own:?} updated by {other:?}"
            );
        }
        let kept = get(store, id, own)
            .await
            .unwrap_or_else(|| panic!("conformance: {id} not seen by its principal {own:?}"));
        assert_eq!(
            (kept.status, kept.status_message),
            (TaskStatus::Working, None),
            "conformance: {id} changed by another principal's update"
        );
    }
    // A principal that is a prefix of another is another.
    assert_eq!(
        get(store, &ids[0], Some(&alice[..alice.len() - 1])).await,
        None,
        "conformance: {} seen by a principal whose name is a prefix of its own",
        ids[0]
    );
    for (i, principal) in principals.iter().enumerate() {
        let page = list_all(store, *principal, 10).await;
        let listed: Vec<&str> = page
            .iter()
            .map(|r| r.task_id.as_str())
            .filter(|id| id.starts_with(prefix))
            .collect();
        assert_eq!(
            listed,
            [ids[i].as_str()],
            "conformance: the tasks listed for {principal:?}"
        );
    }
    for id in &ids {
        remove(store, id).await;
    }
}

/// Once a task is `completed`, `failed` or `cancelled`, no update changes it (not its status,
/// result, error, message or questions): [`Updated::applied`](super::Updated) is false and the
/// record given back is the one stored. Settling clears the questions; an error wins over a
/// result given with it.
pub async fn terminal_states_are_final<N: Fn() -> SystemTime>(
    store: &dyn TaskStore,
    prefix: &str,
    now: &N,
) {
    let mut result = JsonObject::new();
    result.insert("content".into(), json!([{"type": "text", "text": "done"}]));
    let error = ErrorObject::new(ErrorCode::INTERNAL_ERROR, "it broke");
    let mut both = TaskUpdate::fail(&error);
    both.result = Some(result.clone());
    let settles = [
        (TaskUpdate::complete(result.clone()), TaskStatus::Completed),
        (TaskUpdate::fail(&error), TaskStatus::Failed),
        (TaskUpdate::cancel(), TaskStatus::Cancelled),
        (both, TaskStatus::Failed),
    ];
    let principal = Some(prefix);
    for (i, (settle, status)) in settles.into_iter().enumerate() {
        let id = format!("{prefix}-{i}");
        create(store, &record(&id, principal, now())).await;
        let asked = TaskUpdate::new().ask("q", json!({"method": "elicitation/create"}));
        update(store, &id, principal, &asked).await;
        let settled = update(store, &id, principal, &settle)
            .await
            .unwrap_or_else(|| panic!("conformance: {id} not found to settle"));
        assert!(
            settled.applied,
            "conformance: settling {id} was not applied"
        );
        assert_eq!(settled.record.status, status, "conformance: {id} settled");
        assert!(
            settled.record.input_requests.is_empty(),
            "conformance: settling {id} left its questions"
        );
        let stored = get(store, &id, principal)
            .await
            .unwrap_or_else(|| panic!("conformance: {id} gone once settled"));
        assert_eq!(
            stored, settled.record,
            "conformance: {id} as stored after settling"
        );
        for later in [
            TaskUpdate::cancel(),
            TaskUpdate::complete(JsonObject::new()),
            TaskUpdate::fail(&ErrorObject::new(ErrorCode::INTERNAL_ERROR, "again")),
            TaskUpdate::new().message("changed"),
            TaskUpdate::new().ask("k", json!({"method": "elicitation/create"})),
        ] {
            let after = update(store, &id, principal, &later)
                .await
                .unwrap_or_else(|| panic!("conformance: {id} gone once settled"));
            assert!(
                !after.applied,
                "conformance: an update of {id}, {status}, was applied: {later:?}"
            );
            assert_eq!(
                after.record, stored,
                "conformance: the record given back for a refused update of {id}"
            );
            assert_eq!(
                get(store, &id, principal).await.as_ref(),
                Some(&stored),
                "conformance: {id}, {status}, changed by {later:?}"
            );
        }
        remove(store, &id).await;
    }
}

/// A task with open questions is `input_required` until every one is answered, then `working`;
/// an answer to a question it does not wait on is ignored (and not reported answered); a message
/// replaces the last; `lastUpdatedAt` never goes back.
pub async fn input_requests_follow_answers<N: Fn() -> SystemTime>(
    store: &dyn TaskStore,
    prefix: &str,
    now: &N,
) {
    let id = format!("{prefix}-task");
    let principal = Some(prefix);
    let created = record(&id, principal, now());
    create(store, &created).await;
    let asked = TaskUpdate::new()
        .ask(
            "a",
            json!({"method": "elicitation/create", "params": {"message": "a?"}}),
        )
        .ask(
            "b",
            json!({"method": "elicitation/create", "params": {"message": "b?"}}),
        )
        .message("waiting");
    let r = updated(store, &id, principal, &asked).await;
    assert_eq!(
        r.record.status,
        TaskStatus::InputRequired,
        "conformance: asked"
    );
    assert_eq!(
        r.record.input_requests.len(),
        2,
        "conformance: two questions"
    );
    assert_eq!(r.record.status_message.as_deref(), Some("waiting"));
    assert!(r.record.last_updated_ms >= created.last_updated_ms);
    let r = updated(
        store,
        &id,
        principal,
        &TaskUpdate::new().answer(["a", "zzz"]),
    )
    .await;
    assert_eq!(r.answered, ["a"], "conformance: the keys answered");
    assert_eq!(
        r.record.status,
        TaskStatus::InputRequired,
        "conformance: one question still open"
    );
    assert_eq!(
        r.record.input_requests.keys().collect::<Vec<_>>(),
        ["b"],
        "conformance: the questions left"
    );
    let stored = get(store, &id, principal).await;
    assert_eq!(
        stored.as_ref(),
        Some(&r.record),
        "conformance: the record as stored"
    );
    let r = updated(
        store,
        &id,
        principal,
        &TaskUpdate::new().answer(["b", "a"]).message("going on"),
    )
    .await;
    assert_eq!(r.answered, ["b"], "conformance: an answered key again");
    assert_eq!(
        r.record.status,
        TaskStatus::Working,
        "conformance: all answered"
    );
    assert_eq!(r.record.status_message.as_deref(), Some("going on"));
    remove(store, &id).await;
}

/// A task naming the store's own instance ([`TaskStore::instance`], as the runner writes it)
/// is read back with it, and is never settled for a dead instance: `working` and
/// `input_required` tasks stay so through [`get`](TaskStore::get), [`list`](TaskStore::list) and
/// [`update`](TaskStore::update) (this process, running the check, is alive).
pub async fn tasks_of_this_instance_stay_as_they_are<N: Fn() -> SystemTime>(
    store: &dyn TaskStore,
    prefix: &str,
    now: &N,
) {
    let principal = Some(prefix);
    let working = record(&format!("{prefix}-working"), principal, now()).instance(store.instance());
    let mut waiting =
        record(&format!("{prefix}-waiting"), principal, now()).instance(store.instance());
    waiting.status = TaskStatus::InputRequired;
    waiting.input_requests.insert(
        "q".into(),
        json!({"method": "elicitation/create", "params": {"message": "q?"}}),
    );
    for task in [&working, &waiting] {
        create(store, task).await;
        assert_eq!(
            get(store, &task.task_id, principal).await.as_ref(),
            Some(task),
            "conformance: a task of this instance read back"
        );
    }
    let mut listed: Vec<_> = list_all(store, principal, 10)
        .await
        .into_iter()
        .map(|r| (r.task_id, r.status, r.instance))
        .collect();
    // Created in the same millisecond, they are listed by id.
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        listed,
        [
            (
                waiting.task_id.clone(),
                TaskStatus::InputRequired,
                store.instance()
            ),
            (
                working.task_id.clone(),
                TaskStatus::Working,
                store.instance()
            ),
        ],
        "conformance: the tasks of this instance listed as they are"
    );
    let r = updated(
        store,
        &waiting.task_id,
        principal,
        &TaskUpdate::new().message("still asking"),
    )
    .await;
    assert!(
        r.applied && r.record.status == TaskStatus::InputRequired,
        "conformance: an update of a task of this instance: {r:?}"
    );
    assert_eq!(r.record.instance, store.instance());
    for task in [&working, &waiting] {
        remove(store, &task.task_id).await;
    }
}

/// [`TaskStore::list`] gives a principal's tasks, oldest first, each once, in pages of at most
/// `limit` (at least one, even for 0) with a cursor to the next page and none after the last;
/// another principal's tasks created in between are not in it; a cursor the store did not make
/// is refused.
pub async fn list_pages_in_creation_order<N: Fn() -> SystemTime>(
    store: &dyn TaskStore,
    prefix: &str,
    limits: Limits,
    now: &N,
) {
    // Five tasks, or as many as a principal may hold.
    let n = limits.max_per_principal.min(5);
    let me = format!("{prefix}-me");
    let other = format!("{prefix}-other");
    let start = now();
    let mut mine = Vec::new();
    let mut ids = Vec::new();
    for i in 0..n {
        // Later creation times for later tasks, ids that do not sort in creation order.
        let at = start + Duration::from_millis(u64::try_from(i).unwrap_or(0));
        let id = format!("{prefix}-{}", 9 - i);
        create(store, &record(&id, Some(&me), at)).await;
        let theirs = format!("{prefix}-o{i}");
        create(store, &record(&theirs, Some(&other), at)).await;
        mine.push(id.clone());
        ids.push(id);
        ids.push(theirs);
    }
    for limit in [2, 1, n, n + 2] {
        let listed = list_all(store, Some(&me), limit).await;
        let listed: Vec<String> = listed.into_iter().map(|r| r.task_id).collect();
        assert_eq!(
            listed, mine,
            "conformance: the tasks listed in pages of {limit}"
        );
    }
    let first = list(store, Some(&me), None, 0).await;
    assert_eq!(
        first.tasks.len(),
        1,
        "conformance: a page of limit 0 has one task"
    );
    let two = list(store, Some(&me), None, 2).await;
    let next = two
        .next_cursor
        .as_deref()
        .expect("conformance: a first page of 2 of more tasks has a next cursor");
    let rest = list(store, Some(&other), Some(next), 10).await;
    assert!(
        rest.tasks
            .iter()
            .all(|r| r.principal.as_deref() == Some(&other)),
        "conformance: another principal's list from my cursor shows my tasks"
    );
    for bad in ["not a cursor", "", "::"] {
        let refused = store.list(Some(&me), Some(bad), 2).await;
        assert!(
            matches!(&refused, Err(e) if e.kind() == TaskStoreErrorKind::Failed),
            "conformance: the cursor {bad:?} must be refused: {refused:?}"
        );
    }
    for id in &ids {
        remove(store, id).await;
    }
    assert!(
        list(store, Some(&me), None, 10).await.tasks.is_empty(),
        "conformance: the list of removed tasks"
    );
}

/// [`TaskStore::create`] refuses, with [`TaskStoreErrorKind::Full`], a principal's task beyond
/// `max_per_principal`, and any task beyond `max_tasks` in all (counting what the store held
/// before), while other principals still may create up to it; a removed task makes room again.
/// The creates beyond a bound are made at once, all in flight together: exactly as many as the
/// bound allows succeed (a store that counts, then writes, in two steps lets more in).
pub async fn the_bound_is_enforced_atomically<N: Fn() -> SystemTime>(
    store: &dyn TaskStore,
    prefix: &str,
    limits: Limits,
    now: &N,
) {
    let held = len(store).await;
    assert!(
        held + limits.max_per_principal < limits.max_tasks,
        "conformance: the store holds {held} tasks: too many to check its bound"
    );
    // One principal, one more than its bound, all at once.
    let flooder = format!("{prefix}-flooder");
    let records: Vec<TaskRecord> = (0..=limits.max_per_principal)
        .map(|i| record(&format!("{prefix}-f{i}"), Some(&flooder), now()))
        .collect();
    let outcomes = join_all(records.iter().map(|r| store.create(r)).collect()).await;
    let mut made: Vec<String> = Vec::new();
    let mut full = 0;
    for (r, outcome) in records.iter().zip(outcomes) {
        match outcome {
            Ok(()) => made.push(r.task_id.clone()),
            Err(e) if e.kind() == TaskStoreErrorKind::Full => full += 1,
            Err(e) => panic!("conformance: create {}: {e}", r.task_id),
        }
    }
    assert_eq!(
        (made.len(), full),
        (limits.max_per_principal, 1),
        "conformance: {} creates at once for one principal, bound {}",
        records.len(),
        limits.max_per_principal
    );
    let refused = store
        .create(&record(&format!("{prefix}-late"), Some(&flooder), now()))
        .await;
    expect_full(&refused, "a principal's task beyond its bound");

    // Others fill the store to its bound in all, then one more each at once.
    let room = limits.max_tasks - held - made.len();
    let per = limits.max_per_principal;
    let records: Vec<TaskRecord> = (0..room + 2)
        .map(|i| {
            let principal = format!("{prefix}-p{}", i / per);
            record(&format!("{prefix}-t{i}"), Some(&principal), now())
        })
        .collect();
    let outcomes = join_all(records.iter().map(|r| store.create(r)).collect()).await;
    let mut full = 0;
    for (r, outcome) in records.iter().zip(outcomes) {
        match outcome {
            Ok(()) => made.push(r.task_id.clone()),
            Err(e) if e.kind() == TaskStoreErrorKind::Full => full += 1,
            Err(e) => panic!("conformance: create {}: {e}", r.task_id),
        }
    }
    assert_eq!(
        (made.len() + held, full),
        (limits.max_tasks, 2),
        "conformance: creates at once beyond the bound in all ({})",
        limits.max_tasks
    );
    assert_eq!(
        len(store).await,
        limits.max_tasks,
        "conformance: len of a full store"
    );
    let newcomer = format!("{prefix}-newcomer");
    let refused = store
        .create(&record(&format!("{prefix}-new"), Some(&newcomer), now()))
        .await;
    expect_full(&refused, "a new principal's task in a full store");

    // A removed task makes room.
    let freed = made.pop().expect("tasks were made");
    remove(store, &freed).await;
    let id = format!("{prefix}-new");
    create(store, &record(&id, Some(&newcomer), now())).await;
    made.push(id);
    for id in &made {
        remove(store, id).await;
    }
    assert_eq!(
        len(store).await,
        held,
        "conformance: len after the bound check"
    );
}

/// A task is gone `ttl` after its creation, whatever happened to it meanwhile (an update does
/// not push it back): [`get`](TaskStore::get), [`update`](TaskStore::update) and
/// [`list`](TaskStore::list) find nothing, and once
/// [`purge_expired`](TaskStore::purge_expired) ran, [`count`](TaskStore::count) no longer counts
/// it; a task with no ttl stays. Expired tasks make room: a principal at its bound with expired
/// tasks may create again, with no purge asked for.
pub async fn expire_after_their_ttl<N, F, Fut>(
    store: &dyn TaskStore,
    prefix: &str,
    limits: Limits,
    now: &N,
    advance: F,
) where
    N: Fn() -> SystemTime,
    F: Fn(Duration) -> Fut,
    Fut: Future<Output = ()>,
{
    let before = len(store).await;
    let principal = Some(prefix);
    let ttl = u64::try_from(limits.ttl.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let brief = format!("{prefix}-brief");
    let forever = format!("{prefix}-forever");
    create(store, &record(&brief, principal, now()).ttl_ms(Some(ttl))).await;
    create(store, &record(&forever, principal, now())).await;
    // The bound of another principal filled with tasks that expire.
    let full = format!("{prefix}-full");
    let mut filled = Vec::new();
    for i in 0..limits.max_per_principal {
        let id = format!("{prefix}-x{i}");
        create(store, &record(&id, Some(&full), now()).ttl_ms(Some(ttl))).await;
        filled.push(id);
    }
    advance(limits.ttl / 2).await;
    let r = updated(
        store,
        &brief,
        principal,
        &TaskUpdate::new().message("still here"),
    )
    .await;
    assert_eq!(r.record.status_message.as_deref(), Some("still here"));
    advance(limits.ttl / 2 + limits.ttl / 4).await;
    assert_eq!(
        get(store, &brief, principal).await,
        None,
        "conformance: a task {}ms after its creation, ttl {ttl}ms",
        ttl + ttl / 4
    );
    assert_eq!(
        update(store, &brief, principal, &TaskUpdate::cancel()).await,
        None,
        "conformance: an update of an expired task"
    );
    let listed = list_all(store, principal, 10).await;
    let listed: Vec<&str> = listed.iter().map(|r| r.task_id.as_str()).collect();
    assert_eq!(
        listed,
        [forever.as_str()],
        "conformance: the tasks listed once one expired"
    );
    assert!(
        get(store, &forever, principal).await.is_some(),
        "conformance: a task with no ttl expired"
    );
    // The principal whose bound was filled creates again.
    let again = format!("{prefix}-again");
    create(store, &record(&again, Some(&full), now())).await;
    let purged = store
        .purge_expired()
        .await
        .unwrap_or_else(|e| panic!("conformance: purge_expired: {e}"));
    assert!(
        purged <= limits.max_per_principal + 1,
        "conformance: purge_expired forgot {purged} tasks, more than expired"
    );
    assert_eq!(
        len(store).await,
        before + 2,
        "conformance: len once the expired tasks are purged"
    );
    remove(store, &forever).await;
    remove(store, &again).await;
    for id in &filled {
        remove(store, id).await;
    }
    remove(store, &brief).await;
    assert_eq!(
        len(store).await,
        before,
        "conformance: len after the expiry check"
    );
}

/// Polls every future to its end, side by side (the checks' creates at once).
async fn join_all<'a, T>(futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>) -> Vec<T> {
    let mut futures: Vec<Option<Pin<Box<dyn Future<Output = T> + Send + 'a>>>> =
        futures.into_iter().map(Some).collect();
    let mut out: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, done) in futures.iter_mut().zip(out.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *done = Some(value);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

fn record(id: &str, principal: Option<&str>, at: SystemTime) -> TaskRecord {
    TaskRecord::new(
        id,
        principal.map(str::to_owned),
        "tools/call",
        "2026-07-28",
        at,
    )
}

fn expect_full(outcome: &Result<(), TaskStoreError>, what: &str) {
    match outcome {
        Err(e) if e.kind() == TaskStoreErrorKind::Full => {
            assert!(
                !e.to_string().is_empty(),
                "conformance: {what}: a refusal that says nothing"
            );
        }
        other => panic!("conformance: {what} must be refused as full: {other:?}"),
    }
}

async fn create(store: &dyn TaskStore, record: &TaskRecord) {
    store
        .create(record)
        .await
        .unwrap_or_else(|e| panic!("conformance: create {}: {e}", record.task_id));
}

async fn get(store: &dyn TaskStore, id: &str, principal: Option<&str>) -> Option<TaskRecord> {
    store
        .get(id, principal)
        .await
        .unwrap_or_else(|e| panic!("conformance: get {id}: {e}"))
}

async fn update(
    store: &dyn TaskStore,
    id: &str,
    principal: Option<&str>,
    update: &TaskUpdate,
) -> Option<super::Updated> {
    store
        .update(id, principal, update)
        .await
        .unwrap_or_else(|e| panic!("conformance: update {id}: {e}"))
}

/// An update that must find its task.
async fn updated(
    store: &dyn TaskStore,
    id: &str,
    principal: Option<&str>,
    change: &TaskUpdate,
) -> super::Updated {
    update(store, id, principal, change)
        .await
        .unwrap_or_else(|| panic!("conformance: {id} not found to update"))
}

async fn list(
    store: &dyn TaskStore,
    principal: Option<&str>,
    cursor: Option<&str>,
    limit: usize,
) -> super::TaskPage {
    let page = store
        .list(principal, cursor, limit)
        .await
        .unwrap_or_else(|e| panic!("conformance: list for {principal:?}: {e}"));
    assert!(
        page.tasks.len() <= limit.max(1),
        "conformance: a page of {} tasks for a limit of {limit}",
        page.tasks.len()
    );
    page
}

/// Every task of `principal`, page after page of `limit`; a task listed twice, or more pages
/// than tasks, is a breach.
async fn list_all(store: &dyn TaskStore, principal: Option<&str>, limit: usize) -> Vec<TaskRecord> {
    let mut all: Vec<TaskRecord> = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..=MAX_BOUND {
        let page = list(store, principal, cursor.as_deref(), limit).await;
        for record in page.tasks {
            assert!(
                !all.iter().any(|r| r.task_id == record.task_id),
                "conformance: {} listed twice for {principal:?}",
                record.task_id
            );
            assert!(
                record.belongs_to(principal),
                "conformance: {} of {:?} listed for {principal:?}",
                record.task_id,
                record.principal
            );
            all.push(record);
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return all,
        }
    }
    panic!("conformance: the list for {principal:?} does not end")
}

async fn remove(store: &dyn TaskStore, id: &str) {
    store
        .remove(id)
        .await
        .unwrap_or_else(|e| panic!("conformance: remove {id}: {e}"));
}

async fn len(store: &dyn TaskStore) -> usize {
    store
        .count()
        .await
        .unwrap_or_else(|e| panic!("conformance: len: {e}"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::UNIX_EPOCH;

    use super::super::{MemoryTaskStore, TaskPage, TaskStoreFuture, Updated};
    use super::*;

    fn manual() -> (Arc<AtomicU64>, super::super::Clock) {
        let now = Arc::new(AtomicU64::new(1_700_000_000_000));
        let read = now.clone();
        let clock: super::super::Clock =
            Arc::new(move || UNIX_EPOCH + Duration::from_millis(read.load(Ordering::SeqCst)));
        (now, clock)
    }

    /// The in-memory store meets the contract, with small bounds and with the defaults, on a
    /// test clock; it is empty after.
    #[tokio::test]
    async fn the_memory_store_meets_the_conformance_checks() {
        for (max_tasks, per) in [
            (12, 4),
            (
                MemoryTaskStore::DEFAULT_MAX_TASKS,
                MemoryTaskStore::DEFAULT_MAX_PER_PRINCIPAL,
            ),
        ] {
            let (millis, clock) = manual();
            let store = MemoryTaskStore::bounded(max_tasks, per).with_clock(clock.clone());
            let limits = Limits::new(max_tasks, per, Duration::from_secs(60));
            let advance = |by: Duration| {
                millis.fetch_add(u64::try_from(by.as_millis()).unwrap(), Ordering::SeqCst);
                std::future::ready(())
            };
            all(&store, "memory", limits, || clock(), advance).await;
            assert!(store.is_empty(), "{store:?}");
        }
    }

    /// The checks catch a breach: a store that shows tasks to every principal, one that lets a
    /// settled task change, one that forgets nothing at its ttl, one that counts and then writes
    /// (its bound broken by creates at once), and one whose list repeats a task.
    #[tokio::test]
    async fn the_checks_catch_breaches() {
        for breach in [
            Breach::AnyPrincipal,
            Breach::TerminalChanges,
            Breach::NeverExpires,
            Breach::RacyBound,
            Breach::ListRepeats,
        ] {
            let (millis, clock) = manual();
            let bounds = match breach {
                Breach::RacyBound => (1000, 1000),
                _ => (12, 4),
            };
            let inner = MemoryTaskStore::bounded(bounds.0, bounds.1).with_clock(clock.clone());
            let store = Broken::new(inner, breach);
            let run = async move {
                let limits = Limits::new(12, 4, Duration::from_secs(60));
                let advance = |by: Duration| {
                    millis.fetch_add(u64::try_from(by.as_millis()).unwrap(), Ordering::SeqCst);
                    std::future::ready(())
                };
                all(&store, "broken", limits, || clock(), advance).await;
            };
            let message = tokio::spawn(run).await.map_err(|e| {
                let panic = e.into_panic();
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default()
            });
            let message = message.expect_err("a breach passed the checks");
            assert!(
                message.contains(breach.caught_by()),
                "{breach:?}: {message}"
            );
        }
    }

    #[derive(Debug, Clone, Copy)]
    enum Breach {
        AnyPrincipal,
        TerminalChanges,
        NeverExpires,
        RacyBound,
        ListRepeats,
    }

    impl Breach {
        /// What the check that catches it says.
        fn caught_by(self) -> &'static str {
            match self {
                Breach::AnyPrincipal => {
                    "conformance: broken-isolated-0 of Some(\"broken-isolated-alice\") seen by"
                }
                Breach::TerminalChanges => {
                    "conformance: an update of broken-terminal-0, completed, was applied"
                }
                Breach::NeverExpires => {
                    "conformance: a task 75000ms after its creation, ttl 60000ms"
                }
                Breach::RacyBound => "conformance: 5 creates at once for one principal, bound 4",
                Breach::ListRepeats => "listed twice for Some(\"broken-list-me\")",
            }
        }
    }

    /// A store that breaks one rule of the contract.
    #[derive(Debug)]
    struct Broken {
        inner: MemoryTaskStore,
        breach: Breach,
        /// Each task's principal, as created.
        owners: std::sync::Mutex<std::collections::HashMap<String, Option<String>>>,
        /// Each task as created, until removed.
        kept: std::sync::Mutex<std::collections::HashMap<String, TaskRecord>>,
    }

    impl Broken {
        fn new(inner: MemoryTaskStore, breach: Breach) -> Broken {
            Broken {
                inner,
                breach,
                owners: std::sync::Mutex::default(),
                kept: std::sync::Mutex::default(),
            }
        }
    }

    impl TaskStore for Broken {
        fn create<'a>(&'a self, record: &'a TaskRecord) -> TaskStoreFuture<'a, ()> {
            self.owners
                .lock()
                .unwrap()
                .insert(record.task_id.clone(), record.principal.clone());
            if let Breach::RacyBound = self.breach {
                // Counts first, lets the others count too, then writes (the inner store's
                // bounds are too large to refuse anything).
                return Box::pin(async move {
                    let held = self.inner.len();
                    let mine = self
                        .inner
                        .list(record.principal.as_deref(), None, 1000)
                        .await?
                        .tasks
                        .len();
                    tokio::task::yield_now().await;
                    if held >= 12 || mine >= 4 {
                        return Err(TaskStoreError::full("full"));
                    }
                    self.inner.create(record).await
                });
            }
            self.kept
                .lock()
                .unwrap()
                .insert(record.task_id.clone(), record.clone());
            self.inner.create(record)
        }

        fn get<'a>(
            &'a self,
            task_id: &'a str,
            principal: Option<&'a str>,
        ) -> TaskStoreFuture<'a, Option<TaskRecord>> {
            if let Breach::AnyPrincipal = self.breach {
                let owner = self.owners.lock().unwrap().get(task_id).cloned().flatten();
                return Box::pin(async move { self.inner.get(task_id, owner.as_deref()).await });
            }
            if let Breach::NeverExpires = self.breach {
                // Gives the task as created once the inner store let it expire.
                return Box::pin(async move {
                    let found = self.inner.get(task_id, principal).await?;
                    Ok(found.or_else(|| {
                        self.kept
                            .lock()
                            .unwrap()
                            .get(task_id)
                            .filter(|r| r.belongs_to(principal))
                            .cloned()
                    }))
                });
            }
            self.inner.get(task_id, principal)
        }

        fn update<'a>(
            &'a self,
            task_id: &'a str,
            principal: Option<&'a str>,
            update: &'a TaskUpdate,
        ) -> TaskStoreFuture<'a, Option<Updated>> {
            Box::pin(async move {
                if let Breach::TerminalChanges = self.breach
                    && let Some(mut record) = self.inner.get(task_id, principal).await?
                    && record.status.is_terminal()
                {
                    if let Some(message) = &update.status_message {
                        record.status_message = Some(message.clone());
                    }
                    self.inner.remove(task_id).await?;
                    self.inner.create(&record).await?;
                    return Ok(Some(Updated {
                        record,
                        applied: true,
                        answered: Vec::new(),
                    }));
                }
                self.inner.update(task_id, principal, update).await
            })
        }

        fn list<'a>(
            &'a self,
            principal: Option<&'a str>,
            cursor: Option<&'a str>,
            limit: usize,
        ) -> TaskStoreFuture<'a, TaskPage> {
            Box::pin(async move {
                let mut page = self.inner.list(principal, cursor, limit).await?;
                if let Breach::ListRepeats = self.breach
                    && page.next_cursor.is_some()
                    && let Some(first) = page.tasks.first().cloned()
                {
                    page.tasks.pop();
                    page.tasks.push(first);
                }
                Ok(page)
            })
        }

        fn remove<'a>(&'a self, task_id: &'a str) -> TaskStoreFuture<'a, ()> {
            self.kept.lock().unwrap().remove(task_id);
            self.inner.remove(task_id)
        }

        fn purge_expired(&self) -> TaskStoreFuture<'_, usize> {
            self.inner.purge_expired()
        }

        fn count(&self) -> TaskStoreFuture<'_, usize> {
            self.inner.count()
        }
    }
}
