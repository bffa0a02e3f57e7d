//! The bookkeeping both roles share: requests in flight in each direction, progress, timeouts,
//! cancellation, batch replies, and the output queues. Plain data, no protocol lifecycle.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use modelctx_types::{
    DecodeError, ErrorCode, ErrorObject, ErrorResponse, Incoming, JsonObject, Message,
    Notification, ProgressToken, Request, RequestId, Response, check_batch,
};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::config::{Limits, RequestOptions};
use crate::event::{
    CloseReason, Event, LogLevel, RequestError, RequestMeta, SessionError, Transmit,
};
use crate::version::{Era, ProtocolVersion};

/// A request we sent.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub(crate) method: String,
    started: Instant,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    reset_on_progress: bool,
    max_total: Option<Duration>,
    /// Since when its timeout is paused ([`Core::pause_timeout`]); its deadline is then out of
    /// the set of deadlines, and moved on by the pause when it resumes.
    paused_since: Option<Instant>,
    /// How long its timeout was paused in all: not counted as waiting.
    paused: Duration,
    token: Option<ProgressToken>,
    last_progress: Option<f64>,
    /// The era the request was sent in: its cancellation is a [`Transmit::Cancel`] of it.
    era: Era,
}

/// A request from the peer that we have not answered yet.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) method: String,
    pub(crate) token: Option<ProgressToken>,
    pub(crate) last_progress: Option<f64>,
    pub(crate) batch: Option<u64>,
    /// The modern `_meta`, for modern requests.
    pub(crate) meta: Option<RequestMeta>,
    /// An open `subscriptions/listen` stream.
    pub(crate) listen: bool,
    /// Which start of a request with this id it is (see [`IncomingRequest::generation`]).
    ///
    /// [`IncomingRequest::generation`]: crate::IncomingRequest::generation
    pub(crate) generation: u64,
}

impl InFlight {
    pub(crate) fn new(method: &str, token: Option<ProgressToken>, batch: Option<u64>) -> Self {
        InFlight {
            method: method.to_owned(),
            token,
            last_progress: None,
            batch,
            meta: None,
            listen: false,
            generation: 0,
        }
    }

    pub(crate) fn log_level(&self) -> Option<LogLevel> {
        self.meta.as_ref().and_then(|m| m.log_level)
    }
}

/// What both roles do with raw input before their own dispatch: decoding, decode errors, and
/// batches (read member by member, answered as one batch on 2025-03-26 sessions, refused with
/// one -32600 error on any other).
pub(crate) trait Role {
    fn core_mut(&mut self) -> &mut Core;
    fn closed(&self) -> bool;
    /// The version batches are judged by (the legacy version spoken), if any.
    fn batch_version(&self) -> Option<ProtocolVersion>;
    /// Handles one message, as a member of `batch` when given.
    fn dispatch(&mut self, now: Instant, message: Message, batch: Option<u64>);
    /// Whether unreadable input is answered with an error response (servers) or only reported
    /// with [`Event::Unreadable`] (clients: a server cannot act on a client's error reply, and a
    /// modern client never writes responses).
    fn answers_unreadable(&self) -> bool;

    fn read_bytes(&mut self, now: Instant, bytes: &[u8]) {
        match modelctx_types::decode(bytes) {
            Ok(incoming) => self.read_incoming(now, incoming),
            Err(error) => self.unreadable(error.to_error_response(), None),
        }
    }

    /// Answers (or reports) input that is not a JSON-RPC message, as a member of `batch` when given.
    fn unreadable(&mut self, reply: ErrorResponse, batch: Option<u64>) {
        if self.closed() {
            return;
        }
        if !self.answers_unreadable() {
            self.core_mut().event(Event::Unreadable(reply.error));
        } else if let Some(batch) = batch {
            self.core_mut()
                .reply(reply.id.clone(), Some(batch), reply.into());
        } else {
            self.core_mut().transmit(reply, None);
        }
    }

    fn read_incoming(&mut self, now: Instant, incoming: Incoming) {
        match incoming {
            Incoming::Single(message) => self.dispatch(now, message, None),
            Incoming::Batch(elements) => self.read_batch(now, elements),
            _ => {}
        }
    }

    fn read_batch(&mut self, now: Instant, elements: Vec<Result<Message, DecodeError>>) {
        if self.closed() {
            return;
        }
        if let Err(refused) = check_batch(self.batch_version(), &elements) {
            self.unreadable(ErrorResponse::new(None, refused.to_error_object()), None);
            return;
        }
        let batch = self.core_mut().open_batch();
        for element in elements {
            match element {
                Ok(message) => self.dispatch(now, message, Some(batch)),
                Err(error) => self.unreadable(error.to_error_response(), Some(batch)),
            }
        }
        self.core_mut().close_batch(batch);
    }
}

/// A batch whose reply is being collected.
#[derive(Debug, Default)]
struct Batch {
    /// Members the layer above has yet to answer.
    outstanding: usize,
    replies: Vec<Message>,
    /// Members are still being read.
    reading: bool,
}

/// The shared bookkeeping.
#[derive(Debug)]
pub(crate) struct Core {
    pub(crate) limits: Limits,
    next_id: i64,
    next_token: i64,
    outgoing: HashMap<RequestId, Outgoing>,
    deadlines: BTreeSet<(Instant, RequestId)>,
    tokens: HashMap<ProgressToken, RequestId>,
    cancelled: VecDeque<(Instant, RequestId)>,
    cancelled_ids: HashSet<RequestId>,
    pub(crate) incoming: HashMap<RequestId, InFlight>,
    incoming_tokens: HashSet<ProgressToken>,
    batches: HashMap<u64, Batch>,
    next_batch: u64,
    /// The generation the next request of the peer gets.
    next_generation: u64,
    transmits: VecDeque<Transmit>,
    events: VecDeque<Event>,
}

/// `notifications/cancelled` params.
#[derive(Deserialize)]
struct CancelledParams {
    #[serde(rename = "requestId")]
    request_id: Option<RequestId>,
    reason: Option<String>,
}

/// The request a `notifications/cancelled` names (either era); `None` for any other message, or
/// params without a readable `requestId`.
///
/// For a layer that relates a cancellation to a request without being a party to the session: a
/// relay (`mcx proxy`) keeping track of what still waits for an answer. A party to the session
/// learns of the peer's cancellations from [`Event::Cancelled`] (either era) and cancels its own
/// requests with the session's [`Transmit::Cancel`]; what a cancellation means is the session's
/// to decide.
pub fn cancelled_request(message: &Message) -> Option<RequestId> {
    let Message::Notification(notification) = message else {
        return None;
    };
    if notification.method != modelctx_types::consts::NotificationsCancelled::VALUE {
        return None;
    }
    let params = notification.params.as_deref()?;
    serde_json::from_str::<CancelledParams>(params.get())
        .ok()?
        .request_id
}

/// `notifications/progress` params.
#[derive(Deserialize)]
struct ProgressParams {
    #[serde(rename = "progressToken")]
    token: ProgressToken,
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
}

/// The sizes of every table, for tests that check they return to empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct TableSizes {
    /// Requests we sent awaiting an answer.
    pub outgoing: usize,
    /// Their deadlines.
    pub deadlines: usize,
    /// Their progress tokens.
    pub progress_tokens: usize,
    /// Cancelled requests whose late answers are ignored.
    pub cancelled: usize,
    /// Requests from the peer being handled.
    pub incoming: usize,
    /// Their progress tokens.
    pub incoming_tokens: usize,
    /// Batches whose reply is being collected.
    pub batches: usize,
    /// Open listen streams (servers only).
    pub subscriptions: usize,
    /// Requests waiting for `notifications/initialized` (servers only).
    pub queued: usize,
}

impl TableSizes {
    /// Whether every table is empty.
    pub fn is_empty(&self) -> bool {
        *self == TableSizes::default()
    }

    /// The entries that outlive their work only until a timer ends them (cancelled requests) are
    /// left out: whether everything else is empty.
    pub fn is_idle(&self) -> bool {
        TableSizes {
            cancelled: 0,
            ..*self
        }
        .is_empty()
    }
}

impl Core {
    /// The ids and progress tokens of our requests start after `after`.
    pub(crate) fn start_ids_after(&mut self, after: i64) {
        self.next_id = after;
        self.next_token = after;
    }

    pub(crate) fn new(limits: Limits) -> Self {
        Core {
            limits,
            next_id: 0,
            next_token: 0,
            outgoing: HashMap::new(),
            deadlines: BTreeSet::new(),
            tokens: HashMap::new(),
            cancelled: VecDeque::new(),
            cancelled_ids: HashSet::new(),
            incoming: HashMap::new(),
            incoming_tokens: HashSet::new(),
            batches: HashMap::new(),
            next_batch: 0,
            next_generation: 0,
            transmits: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    pub(crate) fn sizes(&self) -> TableSizes {
        TableSizes {
            outgoing: self.outgoing.len(),
            deadlines: self.deadlines.len(),
            progress_tokens: self.tokens.len(),
            cancelled: self.cancelled.len(),
            incoming: self.incoming.len(),
            incoming_tokens: self.incoming_tokens.len(),
            batches: self.batches.len(),
            subscriptions: 0,
            queued: 0,
        }
    }

    // -- output queues ------------------------------------------------------------------------

    pub(crate) fn transmit(&mut self, message: impl Into<Message>, related: Option<RequestId>) {
        self.transmits.push_back(Transmit::Message {
            message: message.into(),
            related,
        });
    }

    /// Refuses request `id` (or a notification: `None`) before the layer above saw it
    /// ([`Transmit::Refusal`]).
    pub(crate) fn refuse(&mut self, id: Option<RequestId>, error: ErrorObject) {
        self.transmits
            .push_back(Transmit::Refusal(ErrorResponse::new(id, error)));
    }

    pub(crate) fn event(&mut self, event: Event) {
        self.events.push_back(event);
    }

    pub(crate) fn poll_transmit(&mut self) -> Option<Transmit> {
        self.transmits.pop_front()
    }

    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let deadline = self.deadlines.first().map(|(at, _)| *at);
        let forget = self.cancelled.front().map(|(at, _)| *at);
        match (deadline, forget) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    // -- requests we send ---------------------------------------------------------------------

    /// Whether the deadline of our request `id` has passed (never while its timeout is paused).
    pub(crate) fn is_due(&self, id: &RequestId, now: Instant) -> bool {
        self.outgoing
            .get(id)
            .filter(|e| e.paused_since.is_none())
            .and_then(|e| e.deadline)
            .is_some_and(|at| at <= now)
    }

    /// Stops the clock of our request `id`'s timeout from `now` until
    /// [`resume_timeout`](Self::resume_timeout): it cannot time out meanwhile. False when it is
    /// not in flight, has no timeout, or is paused already.
    pub(crate) fn pause_timeout(&mut self, now: Instant, id: &RequestId) -> bool {
        let Some(entry) = self.outgoing.get_mut(id) else {
            return false;
        };
        let Some(at) = entry.deadline.filter(|_| entry.paused_since.is_none()) else {
            return false;
        };
        entry.paused_since = Some(now);
        self.deadlines.remove(&(at, id.clone()));
        true
    }

    /// Starts the clock of a paused timeout again: its deadline (and the bound on the total
    /// wait with progress) moves on by the time it was paused. False when it was not paused.
    pub(crate) fn resume_timeout(&mut self, now: Instant, id: &RequestId) -> bool {
        let Some(entry) = self.outgoing.get_mut(id) else {
            return false;
        };
        let (Some(since), Some(at)) = (entry.paused_since.take(), entry.deadline) else {
            return false;
        };
        let pause = now.saturating_duration_since(since);
        entry.paused += pause;
        let at = at + pause;
        entry.deadline = Some(at);
        self.deadlines.insert((at, id.clone()));
        true
    }

    /// Forgets a request we never sent, reporting it as timed out; nothing goes on the wire.
    pub(crate) fn expire_unsent(&mut self, id: &RequestId, now: Instant) {
        if let Some(entry) = self.finish_outgoing(id) {
            let waited = now.saturating_duration_since(entry.started);
            self.report_timeouts(vec![(id.clone(), entry.method, waited)]);
        }
    }

    /// Allocates an id and builds the request; `meta` entries are added to `params._meta`.
    pub(crate) fn start_request(
        &mut self,
        now: Instant,
        method: &str,
        params: Option<JsonObject>,
        meta: Option<JsonObject>,
        options: RequestOptions,
        era: Era,
    ) -> Result<Request, SessionError> {
        if self.outgoing.len() >= self.limits.max_outgoing {
            return Err(SessionError::TooManyInFlight {
                limit: self.limits.max_outgoing,
            });
        }
        let token = options.progress.then(|| {
            self.next_token += 1;
            ProgressToken::Number(self.next_token)
        });
        let mut params = params;
        if token.is_some() || meta.is_some() {
            let params = params.get_or_insert_with(JsonObject::new);
            let slot = params
                .entry("_meta")
                .or_insert_with(|| Value::Object(JsonObject::new()));
            let Value::Object(slot) = slot else {
                return Err(SessionError::Invalid(
                    "params._meta must be an object".into(),
                ));
            };
            if let Some(token) = &token {
                slot.insert(
                    "progressToken".into(),
                    serde_json::to_value(token).unwrap_or_default(),
                );
            }
            for (k, v) in meta.into_iter().flatten() {
                slot.insert(k, v);
            }
        }
        self.next_id += 1;
        let id = RequestId::Number(self.next_id);
        let request = Request::new(id.clone(), method, &params)
            .map_err(|e| SessionError::Invalid(e.to_string()))?;
        let deadline = options.timeout.map(|t| now + t);
        if let Some(at) = deadline {
            self.deadlines.insert((at, id.clone()));
        }
        if let Some(token) = &token {
            self.tokens.insert(token.clone(), id.clone());
        }
        self.outgoing.insert(
            id,
            Outgoing {
                method: method.to_owned(),
                started: now,
                deadline,
                timeout: options.timeout,
                reset_on_progress: options.reset_timeout_on_progress,
                max_total: options.max_total_timeout,
                paused_since: None,
                paused: Duration::ZERO,
                token,
                last_progress: None,
                era,
            },
        );
        Ok(request)
    }

    /// Sends a request built by [`Core::start_request`].
    pub(crate) fn send_request(&mut self, request: Request) {
        self.transmit(request, None);
    }

    fn finish_outgoing(&mut self, id: &RequestId) -> Option<Outgoing> {
        let entry = self.outgoing.remove(id)?;
        if let Some(at) = entry.deadline {
            self.deadlines.remove(&(at, id.clone()));
        }
        if let Some(token) = &entry.token {
            self.tokens.remove(token);
        }
        Some(entry)
    }

    /// Takes an answer to a request we sent. Returns the method and the answer for the role to
    /// look at; `None` when the answer is for a cancelled or unknown request (ignored).
    pub(crate) fn take_answer(&mut self, id: &RequestId) -> Option<String> {
        if let Some(entry) = self.finish_outgoing(id) {
            return Some(entry.method);
        }
        // A late answer to a request we cancelled, or to none we know: ignored.
        None
    }

    /// Cancels a request we sent: forgets it, remembers its id for a while so its late answer is
    /// ignored, and sends the cancellation.
    pub(crate) fn cancel_outgoing(
        &mut self,
        now: Instant,
        id: &RequestId,
        reason: Option<&str>,
    ) -> Option<Outgoing> {
        let entry = self.finish_outgoing(id)?;
        self.remember_cancelled(now, id.clone());
        let mut params = serde_json::json!({ "requestId": id });
        if let Some(reason) = reason {
            params["reason"] = Value::from(reason);
        }
        let notification = Notification::new("notifications/cancelled", &params)
            .expect("cancel params are an object");
        self.transmits.push_back(Transmit::Cancel {
            request_id: id.clone(),
            notification,
            era: entry.era,
        });
        Some(entry)
    }

    fn remember_cancelled(&mut self, now: Instant, id: RequestId) {
        if self.limits.max_cancelled == 0 {
            return;
        }
        while self.cancelled.len() >= self.limits.max_cancelled {
            if let Some((_, old)) = self.cancelled.pop_front() {
                self.cancelled_ids.remove(&old);
            }
        }
        if self.cancelled_ids.insert(id.clone()) {
            self.cancelled
                .push_back((now + self.limits.cancelled_grace, id));
        }
    }

    /// Handles `notifications/progress` for a request we sent.
    pub(crate) fn handle_progress(&mut self, now: Instant, params: Option<&RawValue>) {
        let Some(Ok(p)) = params.map(|p| serde_json::from_str::<ProgressParams>(p.get())) else {
            return;
        };
        let Some(id) = self.tokens.get(&p.token).cloned() else {
            return; // unknown token or a finished request: nothing after completion
        };
        let Some(entry) = self.outgoing.get_mut(&id) else {
            return;
        };
        if entry.last_progress.is_some_and(|last| p.progress <= last) || !p.progress.is_finite() {
            return; // progress must increase
        }
        entry.last_progress = Some(p.progress);
        if entry.reset_on_progress
            && let (Some(timeout), Some(old)) = (entry.timeout, entry.deadline)
        {
            if let Some(since) = entry.paused_since {
                // Paused: the restarted timeout starts to run when the pause ends.
                entry.paused += now.saturating_duration_since(since);
                entry.paused_since = Some(now);
            }
            let mut at = now + timeout;
            if let Some(max) = entry.max_total {
                at = at.min(entry.started + max + entry.paused);
            }
            entry.deadline = Some(at);
            if entry.paused_since.is_none() {
                self.deadlines.remove(&(old, id.clone()));
                self.deadlines.insert((at, id.clone()));
            }
        }
        self.events.push_back(Event::Progress {
            id,
            progress: p.progress,
            total: p.total,
            message: p.message,
        });
    }

    /// Cancels requests whose deadline passed (returning their ids, methods and how long they
    /// waited; the roles report them) and forgets old cancellations.
    pub(crate) fn handle_timeout(&mut self, now: Instant) -> Vec<(RequestId, String, Duration)> {
        let mut expired = Vec::new();
        while let Some((at, id)) = self.deadlines.first().cloned() {
            if at > now {
                break;
            }
            let started = self.outgoing.get(&id).map(|e| e.started);
            match self.cancel_outgoing(now, &id, Some("timed out")) {
                Some(entry) => {
                    // The time its timeout was paused was not waiting.
                    let waited = now
                        .saturating_duration_since(started.unwrap_or(now))
                        .saturating_sub(entry.paused);
                    expired.push((id, entry.method, waited));
                }
                None => {
                    self.deadlines.remove(&(at, id));
                }
            }
        }
        while let Some((at, _)) = self.cancelled.front() {
            if *at > now {
                break;
            }
            if let Some((_, id)) = self.cancelled.pop_front() {
                self.cancelled_ids.remove(&id);
            }
        }
        expired
    }

    /// Reports timed-out requests as [`Event::Failed`].
    pub(crate) fn report_timeouts(&mut self, expired: Vec<(RequestId, String, Duration)>) {
        for (id, method, waited) in expired {
            self.events.push_back(Event::Failed {
                id,
                method,
                error: RequestError::Timeout(waited),
            });
        }
    }

    /// Fails every request we sent with [`RequestError::Closed`] and forgets everything.
    pub(crate) fn close(&mut self, reason: &CloseReason) {
        let mut ids: Vec<RequestId> = self.outgoing.keys().cloned().collect();
        ids.sort();
        for id in ids {
            if let Some(entry) = self.finish_outgoing(&id) {
                self.events.push_back(Event::Failed {
                    id,
                    method: entry.method,
                    error: RequestError::Closed(reason.clone()),
                });
            }
        }
        self.cancelled.clear();
        self.cancelled_ids.clear();
        self.incoming.clear();
        self.incoming_tokens.clear();
        self.batches.clear();
    }

    // -- requests the peer sends ---------------------------------------------------------------

    /// Checks that a request from the peer may be taken on: its id is not in use, the table is
    /// not full, its progress token is not in use.
    pub(crate) fn check_incoming(
        &self,
        id: &RequestId,
        token: Option<&ProgressToken>,
    ) -> Result<(), ErrorObject> {
        if self.incoming.contains_key(id) {
            return Err(ErrorObject::new(
                ErrorCode::INVALID_REQUEST,
                format!("request id {id} is already used by a request in flight"),
            ));
        }
        if self.incoming.len() >= self.limits.max_incoming {
            return Err(ErrorObject::new(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "too many requests in flight (limit {}); retry later",
                    self.limits.max_incoming
                ),
            ));
        }
        if let Some(token) = token
            && self.incoming_tokens.contains(token)
        {
            return Err(ErrorObject::new(
                ErrorCode::INVALID_PARAMS,
                format!("progress token {token} is already used by a request in flight"),
            ));
        }
        Ok(())
    }

    /// Takes on a request checked with [`Core::check_incoming`]; returns its generation, a
    /// number no other request of this session gets, so that the answer of an earlier request
    /// that had the same id (cancelled, its handler still running) is told apart.
    pub(crate) fn add_incoming(&mut self, id: RequestId, mut entry: InFlight) -> u64 {
        if let Some(token) = &entry.token {
            self.incoming_tokens.insert(token.clone());
        }
        let generation = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1);
        entry.generation = generation;
        self.incoming.insert(id, entry);
        generation
    }

    /// Forgets a request from the peer; it will not be answered by the session.
    pub(crate) fn remove_incoming(&mut self, id: &RequestId) -> Option<InFlight> {
        let entry = self.incoming.remove(id)?;
        if let Some(token) = &entry.token {
            self.incoming_tokens.remove(token);
        }
        if let Some(batch) = entry.batch {
            self.batch_member_done(batch, None);
        }
        Some(entry)
    }

    /// Sends the session's own answer to a request of the peer (an error, a ping's result): into
    /// the batch reply when the request came in a batch.
    pub(crate) fn reply(&mut self, id: Option<RequestId>, batch: Option<u64>, message: Message) {
        match batch {
            Some(batch) => {
                if let Some(b) = self.batches.get_mut(&batch) {
                    b.replies.push(message);
                }
                self.flush_batch(batch);
            }
            None => self.transmit(message, id),
        }
    }

    /// The session's own error answer.
    pub(crate) fn reply_error(
        &mut self,
        id: Option<RequestId>,
        batch: Option<u64>,
        error: ErrorObject,
    ) {
        self.reply(id.clone(), batch, ErrorResponse::new(id, error).into());
    }

    /// The session's own result answer.
    pub(crate) fn reply_result(&mut self, id: RequestId, batch: Option<u64>, result: &Value) {
        let response = Response::new(id.clone(), result).expect("a JSON value serializes");
        self.reply(Some(id), batch, response.into());
    }

    /// Answers a request in flight with a result or error; `Err` when it is not in flight, or
    /// when `generation` is given and the request in flight under `id` is another start of that
    /// id (the answer is stale: the request it was for was cancelled, and the id reused).
    pub(crate) fn finish_incoming(
        &mut self,
        id: &RequestId,
        generation: Option<u64>,
        message: impl FnOnce(&InFlight) -> Result<Message, SessionError>,
    ) -> Result<InFlight, SessionError> {
        let entry = self
            .incoming
            .get(id)
            .filter(|e| generation.is_none_or(|g| e.generation == g))
            .ok_or_else(|| SessionError::NotInFlight(id.clone()))?;
        let message = message(entry)?;
        let entry = self.incoming.remove(id).expect("present");
        if let Some(token) = &entry.token {
            self.incoming_tokens.remove(token);
        }
        match entry.batch {
            Some(batch) => self.batch_member_done(batch, Some(message)),
            None => self.transmit(message, Some(id.clone())),
        }
        Ok(entry)
    }

    /// Records progress we send on a request of the peer; `Ok(Some(token))` when it may be sent.
    pub(crate) fn progress_for(
        &mut self,
        id: &RequestId,
        progress: f64,
    ) -> Result<ProgressToken, SessionError> {
        let entry = self
            .incoming
            .get_mut(id)
            .ok_or_else(|| SessionError::NotInFlight(id.clone()))?;
        let token = entry
            .token
            .clone()
            .ok_or_else(|| SessionError::NoProgressToken(id.clone()))?;
        if let Some(last) = entry.last_progress
            && progress <= last
        {
            return Err(SessionError::ProgressNotIncreasing {
                last,
                next: progress,
            });
        }
        if !progress.is_finite() {
            return Err(SessionError::Invalid(
                "progress must be a finite number".into(),
            ));
        }
        entry.last_progress = Some(progress);
        Ok(token)
    }

    /// Sends `notifications/progress` on the peer's request `id`, which must have asked for it;
    /// progress must increase, and nothing is sent once the request is answered.
    pub(crate) fn send_progress(
        &mut self,
        id: &RequestId,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), SessionError> {
        let token = self.progress_for(id, progress)?;
        let mut params = serde_json::json!({ "progressToken": token, "progress": progress });
        if let Some(total) = total {
            params["total"] = Value::from(total);
        }
        if let Some(message) = message {
            params["message"] = Value::from(message);
        }
        let n = Notification::new("notifications/progress", &params).expect("an object");
        self.transmit(n, Some(id.clone()));
        Ok(())
    }

    /// Handles `notifications/cancelled` from the peer: the request stops; no answer follows.
    /// Returns the cancelled request's entry.
    pub(crate) fn peer_cancelled(
        &mut self,
        params: Option<&RawValue>,
    ) -> Option<(RequestId, InFlight)> {
        let p: CancelledParams = serde_json::from_str(params?.get()).ok()?;
        let id = p.request_id?;
        if self
            .incoming
            .get(&id)
            .is_some_and(|e| e.method == "initialize")
        {
            return None; // initialize is never cancelled
        }
        let entry = self.remove_incoming(&id)?;
        self.events.push_back(Event::Cancelled {
            id: id.clone(),
            reason: p.reason,
        });
        Some((id, entry))
    }

    // -- batches ---------------------------------------------------------------------------------

    /// Starts collecting the reply to a batch being read.
    pub(crate) fn open_batch(&mut self) -> u64 {
        self.next_batch += 1;
        self.batches.insert(
            self.next_batch,
            Batch {
                reading: true,
                ..Batch::default()
            },
        );
        self.next_batch
    }

    /// Ends reading a batch: its reply goes out once every member is answered.
    pub(crate) fn close_batch(&mut self, batch: u64) {
        if let Some(b) = self.batches.get_mut(&batch) {
            b.reading = false;
        }
        self.flush_batch(batch);
    }

    /// Counts a batch member the layer above will answer.
    pub(crate) fn batch_expect(&mut self, batch: u64) {
        if let Some(b) = self.batches.get_mut(&batch) {
            b.outstanding += 1;
        }
    }

    /// A member the layer above was to answer is done: answered with `reply`, or cancelled.
    fn batch_member_done(&mut self, batch: u64, reply: Option<Message>) {
        if let Some(b) = self.batches.get_mut(&batch) {
            b.outstanding = b.outstanding.saturating_sub(1);
            b.replies.extend(reply);
        }
        self.flush_batch(batch);
    }

    fn flush_batch(&mut self, batch: u64) {
        if self
            .batches
            .get(&batch)
            .is_some_and(|b| !b.reading && b.outstanding == 0)
        {
            let b = self.batches.remove(&batch).expect("present");
            if !b.replies.is_empty() {
                self.transmits.push_back(Transmit::Batch(b.replies));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use modelctx_types::{Message, Notification, Request, RequestId};
    use serde_json::{Value, json};

    use super::cancelled_request;

    /// The request a cancellation names (number and string ids); anything else, or one naming
    /// no request, is not a cancellation.
    #[test]
    fn a_cancellation_names_its_request() {
        let message = |method: &str, params: Value| -> Message {
            Notification::new(method, &params).unwrap().into()
        };
        let cancelled = "notifications/cancelled";
        let named = message(cancelled, json!({"requestId": 7, "reason": "x"}));
        assert_eq!(cancelled_request(&named), Some(RequestId::Number(7)));
        let named = message(cancelled, json!({"requestId": "a"}));
        assert_eq!(cancelled_request(&named), Some(RequestId::from("a")));
        assert_eq!(cancelled_request(&message(cancelled, json!({}))), None);
        let progress = json!({"requestId": 7, "progressToken": 1, "progress": 1});
        let progress = message("notifications/progress", progress);
        assert_eq!(cancelled_request(&progress), None);
        let request = Request::new(RequestId::Number(7), cancelled, &json!({"requestId": 7}));
        assert_eq!(cancelled_request(&request.unwrap().into()), None);
    }
}
