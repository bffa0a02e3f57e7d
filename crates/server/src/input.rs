//! Input from the client (elicitation, sampling, roots) with the same handler code in both
//! eras.
//!
//! Legacy: a JSON-RPC request to the client, on the stream of the request being handled; the
//! handler awaits its answer. Modern (2026-07-28): servers send no requests, so the request
//! becomes a multi round-trip one. The first time the handler asks for input it has no answer
//! for, its run is abandoned and the request is answered `input_required` with the input
//! requests and an integrity-protected `requestState` holding the answers gathered so far. The
//! client retries with the answers; the handler runs again from the start, and this time the
//! same questions (asked in the same order) get their answers at once. Questions are keyed by
//! method and place (`elicit-1`), or by the key the handler gives them; questions asked at once
//! go in one round. An answer is checked against its question's result type before the handler
//! sees it: one that does not fit fails the request (-32602).
//!
//! The rule this puts on handler code: **before its last question, a handler may run more than
//! once**. Ask first, act after; or make what comes before a question idempotent.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use modelctx_session::IncomingRequest;
use modelctx_session::state::{Binding, StateSealer};
use modelctx_types::consts::{
    ElicitationCreate, PromptsGet, ResourcesRead, RootsList, SamplingCreateMessage, ToolsCall,
};
use modelctx_types::{ErrorCode, ErrorObject, JsonObject};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::handler::Runner;
use crate::wire::invalid_params;

/// Why input from the client is not available.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// The client did not declare the capability this needs (a dotted path such as
    /// `elicitation.url`, or the method's capability when the protocol version lacks it).
    #[error("the client does not support {0}")]
    NotSupported(String),
    /// In the modern era only tools, prompts and resource reads can ask the client for input.
    #[error(
        "only tool calls, prompts and resource reads can ask the client for input in protocol 2026-07-28"
    )]
    NotAllowed,
    /// The client answered the request with an error: the error it sent.
    #[error("the client refused: {}", .0.message)]
    Refused(ErrorObject),
    /// The request could not be sent or got no usable answer.
    #[error("no answer from the client: {0}")]
    NoAnswer(#[source] NoAnswer),
    /// Two questions of one request were given the same key ([`Context::keyed`]).
    ///
    /// [`Context::keyed`]: crate::Context::keyed
    #[error("two questions of one request have the key {0:?}")]
    DuplicateKey(String),
    /// The question cannot be written in the client's protocol version (a sampling message
    /// with content the version lacks, say); nothing was sent.
    #[error("the question cannot be written: {0}")]
    Unwritable(#[source] modelctx_types::model::ConvertError),
}

/// Why a question to the client got no usable answer.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum NoAnswer {
    /// The connection ended first.
    #[error("the connection ended")]
    ConnectionEnded,
    /// The request the question was asked for ended first.
    #[error("the request has ended")]
    RequestEnded,
    /// The session could not send the question.
    #[error(transparent)]
    NotSent(#[from] modelctx_session::SessionError),
    /// The question timed out, was cancelled by the client, or its connection closed.
    #[error(transparent)]
    Failed(#[from] modelctx_session::RequestError),
    /// The client's answer is not JSON, or not the result its question asks for (an
    /// `ElicitResult`, a `CreateMessageResult`, a `ListRootsResult`).
    #[error("unreadable answer: {0}")]
    Unreadable(Arc<serde_json::Error>),
}

/// The `requiredCapabilities` of a -32021 error for a capability path such as `sampling` or
/// `elicitation.url` (`{"elicitation": {"url": {}}}`).
pub(crate) fn required_capabilities(path: &str) -> JsonObject {
    let mut value = JsonObject::new();
    for step in path.rsplit('.') {
        let mut outer = JsonObject::new();
        outer.insert(step.to_owned(), Value::Object(value));
        value = outer;
    }
    value
}

/// The -32021 error of a modern request whose handler needs a capability the client did not
/// declare.
pub(crate) fn missing_capability(path: &str) -> ErrorObject {
    let mut error = modelctx_session::missing_capability_error(&required_capabilities(path));
    error.message = InputError::NotSupported(path.to_owned()).to_string();
    error
}

/// The multi round-trip state of one modern request.
#[derive(Debug, Default)]
pub(crate) struct Mrtr {
    /// Answers known: from the sealed state and the retry's `inputResponses`.
    answers: JsonObject,
    /// Questions asked so far in this run, to name each.
    asked: AtomicUsize,
    /// The keys of the questions asked in this run.
    keys: Mutex<HashSet<String>>,
    /// Questions without an answer, by key.
    pending: Mutex<JsonObject>,
    /// An answer that is not one to its question: the request fails with it.
    invalid: Mutex<Option<ErrorObject>>,
    /// Fired when a question has no answer, or an invalid one (once no hold is left).
    needed: Notify,
    /// The holds alive ([`crate::Context::hold_input`]), and whether a question came meanwhile.
    holds: Mutex<Holds>,
}

/// [`Mrtr::holds`].
#[derive(Debug, Default)]
struct Holds {
    alive: usize,
    deferred: bool,
}

/// What a question of a modern request gets.
pub(crate) enum Asked {
    /// The client's answer.
    Answer(Value),
    /// None yet (or an invalid one): the run ends with `input_required` (or an error).
    Abandoned,
    /// The handler asked wrongly.
    Refused(InputError),
}

impl Mrtr {
    /// The answer to the next question (named `key`, or by its method and place), or
    /// [`Asked::Abandoned`] after recording it as pending (or its answer as invalid).
    pub(crate) fn ask(&self, method: &str, params: JsonObject, key: Option<String>) -> Asked {
        let n = self.asked.fetch_add(1, Ordering::SeqCst) + 1;
        let key = key.unwrap_or_else(|| format!("{}-{n}", short(method)));
        if !self
            .keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone())
        {
            return Asked::Refused(InputError::DuplicateKey(key));
        }
        if let Some(answer) = self.answers.get(&key) {
            return match check_answer(method, &key, answer) {
                Ok(()) => Asked::Answer(answer.clone()),
                Err(error) => {
                    let mut invalid = self.invalid.lock().unwrap_or_else(|e| e.into_inner());
                    invalid.get_or_insert(error);
                    drop(invalid);
                    self.signal();
                    Asked::Abandoned
                }
            };
        }
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, json!({"method": method, "params": params}));
        self.signal();
        Asked::Abandoned
    }

    /// Ends the run for its round trip, or, while a hold is alive, once the last one goes.
    fn signal(&self) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        if holds.alive > 0 {
            holds.deferred = true;
        } else {
            self.needed.notify_one();
        }
    }

    /// Takes a hold: questions asked until it is released wait for one another.
    pub(crate) fn hold(&self) {
        self.holds.lock().unwrap_or_else(|e| e.into_inner()).alive += 1;
    }

    /// Releases a hold taken by [`Mrtr::hold`]; the last one sends what came meanwhile.
    pub(crate) fn release(&self) {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds.alive = holds.alive.saturating_sub(1);
        if holds.alive == 0 && std::mem::take(&mut holds.deferred) {
            self.needed.notify_one();
        }
    }
}

/// Whether `answer` is an answer to a question of `method`: the client's result for it (an
/// `ElicitResult`, a `CreateMessageResult`, a `ListRootsResult`), or the -32602 error the
/// request fails with.
pub(crate) fn check_answer(method: &str, key: &str, answer: &Value) -> Result<(), ErrorObject> {
    use modelctx_types::v2026_07_28 as wire;
    fn fits<T: serde::de::DeserializeOwned>(answer: &Value) -> Result<(), String> {
        T::deserialize(answer).map(drop).map_err(|e| e.to_string())
    }
    let (expected, fitted) = match method {
        ElicitationCreate::VALUE => ("an ElicitResult", fits::<wire::ElicitResult>(answer)),
        SamplingCreateMessage::VALUE => (
            "a CreateMessageResult",
            fits::<wire::CreateMessageResult>(answer),
        ),
        RootsList::VALUE => ("a ListRootsResult", fits::<wire::ListRootsResult>(answer)),
        _ => return Ok(()),
    };
    fitted.map_err(|why| {
        invalid_params(format!(
            "inputResponses[{key:?}] answers {method} and must be {expected}: {why}"
        ))
    })
}

pub(crate) fn short(method: &str) -> &'static str {
    match method {
        ElicitationCreate::VALUE => "elicit",
        SamplingCreateMessage::VALUE => "sample",
        RootsList::VALUE => "roots",
        _ => "input",
    }
}

/// The client capability a question needs.
pub(crate) fn capability_of(method: &str) -> &'static str {
    match method {
        ElicitationCreate::VALUE => "elicitation",
        SamplingCreateMessage::VALUE => "sampling",
        RootsList::VALUE => "roots",
        _ => "input",
    }
}

/// Whether `method` may end `input_required`.
pub(crate) fn allows_input(method: &str) -> bool {
    matches!(
        method,
        ToolsCall::VALUE | PromptsGet::VALUE | ResourcesRead::VALUE
    )
}

/// The round-trip state of a modern request that may ask for input: the answers its retry
/// brings (checked against the sealed state), or a -32602 error.
///
/// The answers are the sealed ones of earlier rounds (which the client cannot change) and the
/// retry's `inputResponses`. With a `requestState`, a retry may only answer the questions the
/// last round asked (the keys the state was sealed with): answers under other keys, or under the
/// key of an answer the state already holds, are ignored (the spec's "servers SHOULD ignore
/// unrecognized information"; a question still unanswered is asked again). Without one (the spec
/// makes it optional), the answers are taken by the keys the handler asks.
pub(crate) fn prepare(
    sealer: &StateSealer,
    request: &IncomingRequest,
    principal: Option<&str>,
) -> Result<Arc<Mrtr>, ErrorObject> {
    prepare_params(
        sealer,
        &request.method,
        request.params.as_deref(),
        principal,
    )
}

/// [`prepare`] for a request of `method` with `params`.
fn prepare_params(
    sealer: &StateSealer,
    method: &str,
    params: Option<&RawValue>,
    principal: Option<&str>,
) -> Result<Arc<Mrtr>, ErrorObject> {
    // Only the two members MRTR reads, borrowed from the params' text (a tool call's arguments
    // are not parsed here).
    let probe: InputProbe<'_> = params
        .and_then(|p| serde_json::from_str(p.get()).ok())
        .unwrap_or_default();
    let responses: Option<JsonObject> = match probe.input_responses {
        None => None,
        Some(raw) => match serde_json::from_str(raw.get()) {
            Ok(responses) => Some(responses),
            Err(_) => return Err(invalid_params("inputResponses must be an object")),
        },
    };
    let mut answers = JsonObject::new();
    let mut asked: Vec<String> = Vec::new();
    if let Some(state) = probe.request_state {
        let Ok(state) = serde_json::from_str::<std::borrow::Cow<'_, str>>(state.get()) else {
            return Err(invalid_params("requestState must be a string"));
        };
        let state = &*state;
        let binding = Binding {
            principal,
            method,
            params,
        };
        let opened = sealer
            .open(SystemTime::now(), &binding, state)
            .map_err(|e| e.to_error_object())?;
        if !opened.payload.is_empty() {
            answers = serde_json::from_slice(&opened.payload)
                .map_err(|_| invalid_params("requestState carries no answers"))?;
        }
        // A retry that lacks some answers is not an error: the handler runs again and asks the
        // unanswered questions anew in another `input_required` round, as the spec's MRTR error
        // handling says a server SHOULD.
        asked = opened.pending;
    }
    if let Some(responses) = &responses {
        let sealed = probe.request_state.is_some();
        for (key, value) in responses {
            if !sealed {
                // A retry without state (the spec makes `requestState` optional, and the
                // conformance suite answers a first call this way): the answers are taken by
                // key, as the handler asks; keys it never asks are never looked at.
                answers.insert(key.clone(), value.clone());
            } else if answers.contains_key(key) {
                // A sealed answer is never replaced (the spec has servers ignore what they do
                // not recognise, so this is no error).
                tracing::debug!("inputResponses[{key:?}] ignored: answered in an earlier round");
            } else if !asked.iter().any(|k| k == key) {
                tracing::debug!("inputResponses[{key:?}] ignored: the last round did not ask it");
            } else {
                answers.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(Arc::new(Mrtr {
        answers,
        ..Mrtr::default()
    }))
}

/// The members of a request's params that MRTR reads; each present one is kept as its text,
/// `null` included (which is then refused as not an object or not a string).
#[derive(Default, serde::Deserialize)]
struct InputProbe<'a> {
    #[serde(
        rename = "inputResponses",
        borrow,
        default,
        deserialize_with = "present"
    )]
    input_responses: Option<&'a RawValue>,
    #[serde(rename = "requestState", borrow, default, deserialize_with = "present")]
    request_state: Option<&'a RawValue>,
}

/// A member that is there, whatever its value.
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue as serde::Deserialize>::deserialize(deserializer).map(Some)
}

/// Runs `runner`, or answers `input_required` when it asks a question that has no answer yet.
pub(crate) fn wrap(
    runner: Runner,
    mrtr: Arc<Mrtr>,
    sealer: Arc<StateSealer>,
    request: &IncomingRequest,
    principal: Option<String>,
) -> Runner {
    let method = request.method.clone();
    let params = request.params.clone();
    Box::new(move |context| {
        Box::pin(async move {
            let needed = mrtr.needed.notified();
            tokio::pin!(needed);
            needed.as_mut().enable();
            tokio::select! {
                answer = runner(context) => answer,
                () = needed => {
                    if let Some(error) = mrtr.invalid.lock().unwrap_or_else(|e| e.into_inner()).take() {
                        return Err(error);
                    }
                    let pending = std::mem::take(&mut *mrtr.pending.lock().unwrap_or_else(|e| e.into_inner()));
                    let keys: Vec<&str> = pending.keys().map(String::as_str).collect();
                    let binding = Binding { principal: principal.as_deref(), method: &method, params: params.as_deref() };
                    let payload = serde_json::to_vec(&mrtr.answers).unwrap_or_default();
                    let state = sealer
                        .seal(SystemTime::now(), &binding, &keys, &payload)
                        .map_err(|e| ErrorObject::new(ErrorCode::INTERNAL_ERROR, format!("cannot seal requestState: {e}")))?;
                    crate::wire::raw(&json!({
                        "resultType": "input_required",
                        "inputRequests": pending,
                        "requestState": state,
                    }))
                }
            }
        })
    })
}

#[cfg(test)]
mod prepare_tests {
    use super::*;
    use modelctx_session::state::StateKey;

    fn prepare(params: &str) -> Result<Arc<Mrtr>, ErrorObject> {
        let key = StateKey::new("k1", vec![7u8; 32]).unwrap();
        let sealer = StateSealer::new(key);
        let params = RawValue::from_string(params.to_owned()).unwrap();
        prepare_params(&sealer, "tools/call", Some(&params), None)
    }

    #[test]
    fn only_the_members_mrtr_reads_are_read_and_checked() {
        // A first call: nothing to read, the arguments are left alone.
        let mrtr = prepare(r#"{"name":"t","arguments":{"a":[1,2,{"b":null}]}}"#).unwrap();
        assert!(mrtr.answers.is_empty());
        // Answers without a state are taken by key.
        let mrtr = prepare(r#"{"name":"t","inputResponses":{"q":{"action":"accept"}}}"#).unwrap();
        assert_eq!(mrtr.answers["q"], json!({"action": "accept"}));
        // Present but of the wrong type, `null` included: -32602.
        for bad in [
            r#"{"inputResponses":null}"#,
            r#"{"inputResponses":[1]}"#,
            r#"{"requestState":null}"#,
            r#"{"requestState":5}"#,
        ] {
            let error = prepare(bad).err().unwrap();
            assert_eq!(error.code, ErrorCode::INVALID_PARAMS, "{bad}");
        }
        // A state this server did not seal is refused.
        assert!(prepare(r#"{"requestState":"not-sealed"}"#).is_err());
    }
}
