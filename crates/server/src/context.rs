//! What a handler gets besides its arguments: progress, logging, cancellation, who the client
//! is, and the HTTP request.

use std::sync::{Arc, Mutex};

use modelctx_session::{LogLevel, ProtocolVersion};
use modelctx_types::consts::{ElicitationCreate, RootsList, SamplingCreateMessage};
use modelctx_types::{JsonObject, ProgressToken, RequestId, model, v2026_07_28 as wire};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::input::{Asked, InputError, NoAnswer};
use crate::run::Command;
use crate::wire::write;

/// The context of one request: handed to every handler that asks for it.
///
/// Cheap to clone. Progress and log messages sent through it go on the request's own stream.
///
/// A handler asks for it by taking it first: `async fn(Context, Args) -> R`.
///
/// ```
/// use modelctx_server::{Context, LogLevel, Tool};
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Fetch {
///     urls: Vec<String>,
/// }
///
/// async fn fetch(context: Context, args: Fetch) -> String {
///     let total = args.urls.len() as f64;
///     for (i, url) in args.urls.iter().enumerate() {
///         // Stop early when the client cancels (nothing more is sent for the request).
///         if context.is_cancelled() {
///             break;
///         }
///         let _ = context.progress(i as f64 + 1.0, Some(total), Some(url)).await;
///         context
///             .log(LogLevel::Info, Some("fetch"), serde_json::json!({"url": url}))
///             .await;
///     }
///     let client = context.client_info().map(|info| info.name).unwrap_or_default();
///     format!("fetched {} pages for {client}", args.urls.len())
/// }
///
/// let tool = Tool::new("fetch", fetch);
/// # let _ = tool;
/// ```
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) id: RequestId,
    /// Which start of a request with this id (the session's `IncomingRequest::generation`):
    /// what the handler sends is for this start only.
    pub(crate) generation: u64,
    pub(crate) method: String,
    pub(crate) version: ProtocolVersion,
    pub(crate) client_info: Option<Value>,
    pub(crate) client_capabilities: Option<JsonObject>,
    pub(crate) progress_token: Option<ProgressToken>,
    pub(crate) last_progress: Mutex<Option<f64>>,
    pub(crate) cancelled: CancellationToken,
    pub(crate) commands: crate::run::Commands,
    /// Modern requests: the round trips that bring the client's input.
    pub(crate) mrtr: Option<Arc<crate::input::Mrtr>>,
    /// Whether the request is a modern one.
    pub(crate) modern: bool,
    #[cfg(feature = "http")]
    pub(crate) http: Option<modelctx_http::server::RequestContext>,
    /// The server's state ([`ServerBuilder::state`](crate::ServerBuilder::state)).
    pub(crate) state: Arc<crate::handler::States>,
    /// The task the handler runs as, if it does (`crate::tasks`).
    pub(crate) task: std::sync::OnceLock<crate::tasks::runner::TaskLink>,
    /// Where [`Context::detach`] asks for a task, when the request may become one.
    pub(crate) detach: Mutex<Option<crate::tasks::runner::Detach>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("id", &self.inner.id)
            .field("method", &self.inner.method)
            .field("version", &self.inner.version)
            .finish_non_exhaustive()
    }
}

/// Why progress was not sent.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ProgressError {
    /// Progress must increase from one report to the next.
    #[error("progress must increase: {previous} was reported before {progress}")]
    NotIncreasing {
        /// The last value reported.
        previous: f64,
        /// The value refused.
        progress: f64,
    },
}

impl Context {
    /// The request's id.
    pub fn request_id(&self) -> &RequestId {
        &self.inner.id
    }

    /// The request's method.
    pub fn method(&self) -> &str {
        &self.inner.method
    }

    /// The protocol version the request is answered in.
    pub fn protocol_version(&self) -> ProtocolVersion {
        self.inner.version
    }

    /// The client's `Implementation` (`clientInfo`), when it gave a readable one
    /// (self-reported: for display and logs, not for decisions).
    pub fn client_info(&self) -> Option<model::Implementation> {
        let info = self.client_info_json()?;
        // The newest version's type reads every version's: its additions are optional.
        serde_json::from_value::<wire::Implementation>(info.clone())
            .ok()
            .map(Into::into)
    }

    /// The client's `clientInfo` as it sent it, as JSON: the escape hatch for members no
    /// version defines.
    pub fn client_info_json(&self) -> Option<&Value> {
        self.inner.client_info.as_ref()
    }

    /// A clone of the server's state of type `S` ([`ServerBuilder::state`]), as the
    /// [`State`](crate::State) argument gives it.
    ///
    /// # Errors
    ///
    /// [`MissingState`](crate::MissingState) when the server was not given state of type `S`.
    ///
    /// [`ServerBuilder::state`]: crate::ServerBuilder::state
    pub fn state<S: Clone + 'static>(&self) -> Result<S, crate::MissingState> {
        self.inner.state.get::<S>()
    }

    /// The client's capabilities: the session's (legacy) or the request's (modern).
    pub fn client_capabilities(&self) -> Option<&JsonObject> {
        self.inner.client_capabilities.as_ref()
    }

    /// The HTTP request the message came in (headers, URI, extensions such as an
    /// authentication layer's principal), when served over HTTP.
    #[cfg(feature = "http")]
    pub fn http(&self) -> Option<&modelctx_http::server::RequestContext> {
        self.inner.http.as_ref()
    }

    /// Who the caller is, as the HTTP transport's guard found it
    /// ([`ServerBuilder::auth`](crate::ServerBuilder::auth)): subject, client id, scopes and
    /// the token's claims (never the token). It is that of the HTTP request that carried this
    /// message: on a legacy session, of the POST of this request, not of the one that opened
    /// the session. `None` over stdio and in memory, and over HTTP without a guard (unless a
    /// layer in front put an `Arc<Grant>` in the request's extensions).
    ///
    /// ```
    /// use modelctx_server::{Context, NoArgs};
    ///
    /// async fn whoami(context: Context, _: NoArgs) -> String {
    ///     match context.auth() {
    ///         Some(grant) => format!("{} (client {:?})", grant.subject, grant.client_id),
    ///         None => "nobody".to_owned(),
    ///     }
    /// }
    /// # let _ = modelctx_server::Tool::new("whoami", whoami);
    /// ```
    #[cfg(feature = "http")]
    pub fn auth(&self) -> Option<&modelctx_http::server::Grant> {
        self.inner.http.as_ref()?.grant()
    }

    /// Fires when the request is cancelled: by `notifications/cancelled` (legacy, stdio), by the
    /// client closing the response stream (modern HTTP), or when the connection ends; for a
    /// handler running as a task, by `tasks/cancel` and at the task's expiry. A handler that
    /// stops early on it may return anything: nothing more is sent for the request (a task is
    /// settled `cancelled`).
    pub fn cancelled(&self) -> &CancellationToken {
        &self.inner.cancelled
    }

    /// Whether the request was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.is_cancelled()
    }

    /// Whether the client asked for progress (its request carries a progress token).
    pub fn wants_progress(&self) -> bool {
        self.inner.progress_token.is_some()
    }

    /// The id of the task the handler runs as, when it runs as one ([`Tool::task_support`]).
    ///
    /// [`Tool::task_support`]: crate::Tool::task_support
    pub fn task_id(&self) -> Option<&str> {
        self.inner.task.get().map(|t| t.task_id())
    }

    /// Sets the `statusMessage` of the task the handler runs as (what `tasks/get` tells the
    /// client while it waits); whether it was set (not when the handler runs as no task, or
    /// the task is settled or gone).
    pub async fn set_status_message(&self, message: &str) -> bool {
        match self.inner.task.get() {
            Some(task) => task.set_status_message(message.to_owned()).await,
            None => false,
        }
    }

    /// Answers the request now with a task (`CreateTaskResult`), and goes on as that task: what
    /// the handler does from here (its questions, its progress, its result) goes through the
    /// task, as for a tool that runs as a task from the start. For a tool declared with
    /// [`Tool::task_on_detach`], called by a client that supports tasks: the handler first
    /// runs as a plain call (its questions answered by round trips, which run it again from
    /// the start) and becomes a task when it calls this, after its last question. `Ok` at once
    /// when the handler runs as a task already.
    ///
    /// # Errors
    ///
    /// [`DetachError::NotAllowed`] when the request cannot become a task (another tool, or a
    /// client without the tasks extension: the handler goes on as a plain call), and
    /// [`DetachError::Refused`] when the task could not be made (too many tasks).
    ///
    /// [`Tool::task_on_detach`]: crate::Tool::task_on_detach
    /// [`DetachError::NotAllowed`]: crate::tasks::DetachError::NotAllowed
    /// [`DetachError::Refused`]: crate::tasks::DetachError::Refused
    pub async fn detach(&self) -> Result<(), crate::tasks::DetachError> {
        if self.inner.task.get().is_some() {
            return Ok(());
        }
        let slot = self
            .inner
            .detach
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(slot) = slot else {
            return Err(crate::tasks::DetachError::NotAllowed);
        };
        let (reply, made) = tokio::sync::oneshot::channel();
        if slot.send(reply).is_err() {
            return Err(crate::tasks::DetachError::NotAllowed);
        }
        match made.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(error)) => Err(crate::tasks::DetachError::Refused(error)),
            Err(_) => Err(crate::tasks::DetachError::NotAllowed),
        }
    }

    /// Reports progress (`notifications/progress`), when the client asked for it; otherwise
    /// nothing is sent. Values must increase. A handler running as a task reports it as the
    /// task's `statusMessage` (`message`, else `progress/total`) instead.
    ///
    /// ```
    /// # async fn f(context: modelctx_server::Context) {
    /// if context.wants_progress() {
    ///     for step in 1..=4 {
    ///         // Err(ProgressError) only for a value that does not increase.
    ///         let _ = context.progress(f64::from(step), Some(4.0), None).await;
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) -> Result<(), ProgressError> {
        let task = self.inner.task.get();
        if self.inner.progress_token.is_none() && task.is_none() {
            return Ok(());
        }
        {
            let mut last = self
                .inner
                .last_progress
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Some(previous) = *last
                && progress <= previous
            {
                return Err(ProgressError::NotIncreasing { previous, progress });
            }
            *last = Some(progress);
        }
        crate::observe::progress(progress, total, message);
        if let Some(task) = task {
            // A task's progress is its status message.
            let message = match (message, total) {
                (Some(message), _) => message.to_owned(),
                (None, Some(total)) => format!("{progress}/{total}"),
                (None, None) => progress.to_string(),
            };
            task.set_status_message(message).await;
            return Ok(());
        }
        let _ = self
            .inner
            .commands
            .send(Command::Progress {
                id: self.inner.id.clone(),
                generation: self.inner.generation,
                progress,
                total,
                message: message.map(str::to_owned),
            })
            .await;
        Ok(())
    }

    /// Sends a log message about this request (`notifications/message`), when the client asked
    /// for messages of this level: legacy clients with `logging/setLevel` (none before they set
    /// one), modern clients with the request's `_meta` log level (none without one).
    pub async fn log(&self, level: LogLevel, logger: Option<&str>, data: Value) {
        if self.inner.task.get().is_some_and(|t| t.running.modern) {
            return; // the tasks extension has no stream for them
        }
        let _ = self
            .inner
            .commands
            .send(Command::Log {
                id: self.inner.id.clone(),
                generation: self.inner.generation,
                level,
                logger: logger.map(str::to_owned),
                data,
            })
            .await;
    }

    /// Closes the HTTP connection carrying this request's event stream, without ending the
    /// request: the client reconnects after the stream's `retry` delay and resumes with
    /// `Last-Event-ID`, getting what the handler sends from now on, its result included. A long
    /// call need not hold a connection open (SSE polling, 2025-11-25 sessions over Streamable
    /// HTTP). Returns whether a connection was closed: never over stdio, for modern requests
    /// (their streams do not resume) or before 2025-11-25.
    pub async fn close_sse_stream(&self) -> bool {
        let (reply, closed) = tokio::sync::oneshot::channel();
        let command = Command::CloseStream {
            id: self.inner.id.clone(),
            generation: self.inner.generation,
            reply,
        };
        if self.inner.commands.send(command).await.is_err() {
            return false;
        }
        closed.await.unwrap_or(false)
    }

    /// Asks the user for information through the client (elicitation, form mode): `message`
    /// says what and why, `requested_schema` is a flat object schema of primitive fields (JSON
    /// Schema, kept as JSON as the model keeps `ElicitRequestParams`). The answer is the model's
    /// `ElicitResult` (`action`: accept, decline or cancel; `content`); an answer that is not
    /// one is [`InputError::NoAnswer`] ([`NoAnswer::Unreadable`]).
    ///
    /// Legacy clients get a request; modern ones an `input_required` round trip, which runs the
    /// handler again from the start (see the crate docs on handlers that ask for input).
    ///
    /// A client that did not declare the capability this needs gets no question:
    /// [`InputError::NotSupported`]. A tool or prompt that returns that error (`?` in a handler
    /// returning `Result<_, InputError>`) answers a modern request with the
    /// `MissingRequiredClientCapability` error (-32021, HTTP 400) the protocol has for it.
    ///
    /// ```
    /// use modelctx_server::{Context, InputError};
    /// use modelctx_server::model::ElicitResultAction;
    ///
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Book {
    ///     room: String,
    /// }
    ///
    /// async fn book(context: Context, args: Book) -> Result<String, InputError> {
    ///     let schema = serde_json::json!({
    ///         "type": "object",
    ///         "properties": {"nights": {"type": "integer", "minimum": 1}},
    ///         "required": ["nights"],
    ///     });
    ///     // Ask first: in the modern era this handler runs again from here with the answer.
    ///     let answer = context.elicit("How many nights?", schema).await?;
    ///     if answer.action != ElicitResultAction::Accept {
    ///         return Ok("not booked".into());
    ///     }
    ///     // Act after.
    ///     let nights = answer.content.unwrap_or_default()["nights"].clone();
    ///     Ok(format!("booked {} for {nights} nights", args.room))
    /// }
    /// # let _ = modelctx_server::Tool::new("book", book);
    /// ```
    pub async fn elicit(
        &self,
        message: &str,
        requested_schema: Value,
    ) -> Result<model::ElicitResult, InputError> {
        self.keyed_ask(None).elicit(message, requested_schema).await
    }

    /// [`Context::elicit`] with the client's answer as it came, as JSON: the escape hatch for
    /// members no version defines (the model keeps them in `extra` too).
    pub async fn elicit_json(
        &self,
        message: &str,
        requested_schema: Value,
    ) -> Result<Value, InputError> {
        self.keyed_ask(None)
            .elicit_json(message, requested_schema)
            .await
    }

    /// Asks the user to visit `url` (elicitation, URL mode; 2025-11-25 and later). The answer
    /// is the model's `ElicitResult` (no `content` in this mode).
    pub async fn elicit_url(
        &self,
        message: &str,
        url: &str,
        elicitation_id: &str,
    ) -> Result<model::ElicitResult, InputError> {
        self.keyed_ask(None)
            .elicit_url(message, url, elicitation_id)
            .await
    }

    /// [`Context::elicit_url`] with the client's answer as it came, as JSON.
    pub async fn elicit_url_json(
        &self,
        message: &str,
        url: &str,
        elicitation_id: &str,
    ) -> Result<Value, InputError> {
        self.keyed_ask(None)
            .elicit_url_json(message, url, elicitation_id)
            .await
    }

    /// Asks the client's model for a completion (`sampling/createMessage`). The request is the
    /// model's `CreateMessageRequestParams` ([`sampling_request`] makes the common one), written
    /// for the client's protocol version: fields the version does not define are dropped, and a
    /// value it cannot express is [`InputError::Unwritable`]. The capability check sees every
    /// field (tools need `sampling.tools`). The answer is the model's `CreateMessageResult`; an
    /// answer that is not one is [`InputError::NoAnswer`] ([`NoAnswer::Unreadable`]).
    ///
    /// ```
    /// # async fn f(context: modelctx_server::Context) -> Result<(), modelctx_server::InputError> {
    /// use modelctx_server::model::{CreateMessageRequestParams, CreateMessageResultContent};
    /// use modelctx_server::sampling_request;
    ///
    /// let params = CreateMessageRequestParams {
    ///     system_prompt: Some("You are a poet.".into()),
    ///     ..sampling_request("A haiku, please", 60)
    /// };
    /// let answer = context.sample(params).await?;
    /// if let CreateMessageResultContent::TextContent(text) = &answer.content {
    ///     println!("{} wrote {}", answer.model, text.text);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn sample(
        &self,
        params: model::CreateMessageRequestParams,
    ) -> Result<model::CreateMessageResult, InputError> {
        self.keyed_ask(None).sample(params).await
    }

    /// [`Context::sample`] with the request and the answer as JSON, sent as given: the escape
    /// hatch for members no version defines.
    pub async fn sample_json(&self, params: JsonObject) -> Result<Value, InputError> {
        self.keyed_ask(None).sample_json(params).await
    }

    /// The client's roots (`roots/list`): the answer is the model's `ListRootsResult` (an
    /// answer that is not one is [`InputError::NoAnswer`]).
    ///
    /// ```
    /// # async fn f(context: modelctx_server::Context) -> Result<(), modelctx_server::InputError> {
    /// let roots = context.list_roots().await?;
    /// for root in &roots.roots {
    ///     println!("{}", root.uri);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list_roots(&self) -> Result<model::ListRootsResult, InputError> {
        self.keyed_ask(None).list_roots().await
    }

    /// Holds this request's questions together: in the modern era, a question asked while an
    /// [`InputHold`] of the request is alive does not end the run at once; the round trip
    /// (`input_required` with every question asked meanwhile) goes when the last hold is
    /// dropped. For a front that asks its client in other servers' stead, whose questions of
    /// one round arrive from several tasks (`modelctx_client::input_round` says how many).
    ///
    /// Does nothing in the legacy era (each question is a request of its own) and for a request
    /// running as a task. Drop the hold soon: the request's run waits while it lives.
    pub fn hold_input(&self) -> InputHold {
        let mrtr = self
            .inner
            .mrtr
            .clone()
            .filter(|_| self.inner.modern && self.inner.task.get().is_none());
        if let Some(mrtr) = &mrtr {
            mrtr.hold();
        }
        InputHold { mrtr }
    }

    /// The next question, named `key`: in a modern round trip, the key of its entry in
    /// `inputRequests`, under which the client answers in `inputResponses` (without one, a
    /// question is named after its method and place, `elicit-1`, `sample-2`, ...). Keys name
    /// questions across rounds, so a handler asks the same question under the same key every
    /// run; in a modern request, a second question under a key already asked fails with
    /// [`InputError::DuplicateKey`]. Legacy clients, which get requests, never see keys.
    ///
    /// ```no_run
    /// # async fn f(context: modelctx_server::Context) -> Result<(), modelctx_server::InputError> {
    /// let schema = serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}});
    /// let answer = context.keyed("user_name").elicit("What is your name?", schema).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Questions asked at once (futures joined, not awaited one after the other) go to a modern
    /// client in one round.
    pub fn keyed(&self, key: impl Into<String>) -> Question<'_> {
        self.keyed_ask(Some(key.into()))
    }

    fn keyed_ask(&self, key: Option<String>) -> Question<'_> {
        Question { context: self, key }
    }

    /// Asks `method` with `params`; the capability check sees `checked` (every field the
    /// handler set, before the version's types dropped some), or `params` without one.
    pub(crate) async fn ask(
        &self,
        method: &str,
        params: JsonObject,
        checked: Option<&JsonObject>,
        key: Option<String>,
    ) -> Result<Value, InputError> {
        // The question's span, nested under the request's (`crate::observe`).
        let span = crate::observe::question_span(method);
        let answer = self
            .ask_in(method, params, checked, key, &span)
            .instrument(span.clone())
            .await;
        if let Err(error) = &answer {
            crate::observe::question_failed(&span, error);
        }
        answer
    }

    async fn ask_in(
        &self,
        method: &str,
        mut params: JsonObject,
        checked: Option<&JsonObject>,
        key: Option<String>,
        span: &tracing::Span,
    ) -> Result<Value, InputError> {
        let allowed = match &self.inner.client_capabilities {
            Some(caps) => modelctx_session::client_can_answer(
                self.inner.version,
                method,
                Some(checked.unwrap_or(&params)),
                caps,
            ),
            None => Err(crate::input::capability_of(method).to_owned()),
        };
        if let Err(capability) = allowed {
            return Err(InputError::NotSupported(capability));
        }
        if let Some(task) = self.inner.task.get().filter(|t| t.running.modern) {
            return task.ask(method, params, key).await;
        }
        if self.inner.modern {
            let Some(mrtr) = &self.inner.mrtr else {
                return Err(InputError::NotAllowed);
            };
            return match mrtr.ask(method, params, key) {
                Asked::Answer(answer) => Ok(answer),
                Asked::Refused(error) => Err(error),
                // The run is abandoned for the round trip; this never resolves.
                Asked::Abandoned => std::future::pending().await,
            };
        }
        // A request of its own on the wire: it carries the question's trace context.
        crate::observe::inject(&mut params, span);
        let (reply, answer) = tokio::sync::oneshot::channel();
        let asked = self
            .inner
            .commands
            .send(Command::Ask {
                id: self.inner.id.clone(),
                generation: self.inner.generation,
                method: method.to_owned(),
                params,
                reply,
            })
            .await;
        if asked.is_err() {
            return Err(InputError::NoAnswer(NoAnswer::ConnectionEnded));
        }
        answer
            .await
            .unwrap_or(Err(InputError::NoAnswer(NoAnswer::ConnectionEnded)))
    }
}

/// A hold on a request's questions ([`Context::hold_input`]); released when dropped.
#[derive(Debug)]
#[must_use = "the hold is released when dropped"]
pub struct InputHold {
    mrtr: Option<Arc<crate::input::Mrtr>>,
}

impl Drop for InputHold {
    fn drop(&mut self) {
        if let Some(mrtr) = &self.mrtr {
            mrtr.release();
        }
    }
}

/// A question with a key of its own ([`Context::keyed`]).
#[derive(Debug)]
#[must_use = "a question is asked by one of its methods"]
pub struct Question<'a> {
    context: &'a Context,
    key: Option<String>,
}

impl Question<'_> {
    /// [`Context::elicit`] under this key.
    pub async fn elicit(
        self,
        message: &str,
        requested_schema: Value,
    ) -> Result<model::ElicitResult, InputError> {
        let answer = self.elicit_json(message, requested_schema).await?;
        read::<wire::ElicitResult, _>(answer)
    }

    /// [`Context::elicit_json`] under this key.
    pub async fn elicit_json(
        self,
        message: &str,
        requested_schema: Value,
    ) -> Result<Value, InputError> {
        let mut params = JsonObject::new();
        params.insert("message".into(), Value::from(message));
        params.insert("requestedSchema".into(), requested_schema);
        if self.context.inner.version >= ProtocolVersion::V2025_11_25 {
            params.insert("mode".into(), Value::from("form"));
        }
        self.context
            .ask(ElicitationCreate::VALUE, params, None, self.key)
            .await
    }

    /// [`Context::elicit_url`] under this key.
    pub async fn elicit_url(
        self,
        message: &str,
        url: &str,
        elicitation_id: &str,
    ) -> Result<model::ElicitResult, InputError> {
        let answer = self.elicit_url_json(message, url, elicitation_id).await?;
        read::<wire::ElicitResult, _>(answer)
    }

    /// [`Context::elicit_url_json`] under this key.
    pub async fn elicit_url_json(
        self,
        message: &str,
        url: &str,
        elicitation_id: &str,
    ) -> Result<Value, InputError> {
        let mut params = JsonObject::new();
        params.insert("mode".into(), Value::from("url"));
        params.insert("message".into(), Value::from(message));
        params.insert("url".into(), Value::from(url));
        params.insert("elicitationId".into(), Value::from(elicitation_id));
        self.context
            .ask(ElicitationCreate::VALUE, params, None, self.key)
            .await
    }

    /// [`Context::sample`] under this key.
    pub async fn sample(
        self,
        params: model::CreateMessageRequestParams,
    ) -> Result<model::CreateMessageResult, InputError> {
        let version = self.context.inner.version;
        // The newest version's types keep every field: what the capability check looks at.
        let every = write::sampling_request(params.clone(), ProtocolVersion::V2026_07_28)
            .map_err(InputError::Unwritable)?;
        let sent = write::sampling_request(params, version).map_err(InputError::Unwritable)?;
        let answer = self
            .context
            .ask(SamplingCreateMessage::VALUE, sent, Some(&every), self.key)
            .await?;
        read::<wire::CreateMessageResult, _>(answer)
    }

    /// [`Context::sample_json`] under this key.
    pub async fn sample_json(self, params: JsonObject) -> Result<Value, InputError> {
        self.context
            .ask(SamplingCreateMessage::VALUE, params, None, self.key)
            .await
    }

    /// [`Context::list_roots`] under this key.
    pub async fn list_roots(self) -> Result<model::ListRootsResult, InputError> {
        let answer = self
            .context
            .ask(RootsList::VALUE, JsonObject::new(), None, self.key)
            .await?;
        read::<wire::ListRootsResult, _>(answer)
    }
}

/// The client's answer as the model's type: read with the newest version's wire type `W`,
/// which reads every version's answer (its additions are optional); an answer that is not one
/// is [`NoAnswer::Unreadable`].
fn read<W, M>(answer: Value) -> Result<M, InputError>
where
    W: serde::de::DeserializeOwned + Into<M>,
{
    serde_json::from_value::<W>(answer)
        .map(Into::into)
        .map_err(|e| InputError::NoAnswer(NoAnswer::Unreadable(Arc::new(e))))
}

/// A `sampling/createMessage` request of one user message of text, for at most `max_tokens`
/// tokens; every other field unset (the client's defaults). Set others with struct update
/// syntax: `CreateMessageRequestParams { system_prompt: Some(..), ..sampling_request(..) }`.
pub fn sampling_request(
    text: impl Into<String>,
    max_tokens: i64,
) -> model::CreateMessageRequestParams {
    model::CreateMessageRequestParams {
        include_context: None,
        max_tokens,
        messages: vec![model::SamplingMessage {
            meta: None,
            content: model::CreateMessageResultContent::TextContent(model::TextContent {
                meta: None,
                annotations: None,
                text: text.into(),
            }),
            role: model::Role::User,
        }],
        metadata: None,
        model_preferences: None,
        stop_sequences: None,
        system_prompt: None,
        temperature: None,
        tool_choice: None,
        tools: None,
        meta: None,
        task: None,
    }
}
