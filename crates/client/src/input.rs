//! Input the server asks of the client: sampling, elicitation and roots. One set of handlers
//! serves both eras: a legacy server's JSON-RPC requests and a modern server's `inputRequests`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use modelctx_session::ProtocolVersion;
use modelctx_types::consts::{ElicitationCreate, RootsList, SamplingCreateMessage};
use modelctx_types::model;
use modelctx_types::{ErrorCode, ErrorObject, JsonObject};
use serde_json::Value;

use crate::wire;

/// A boxed future, as the handlers return.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Why a handler gave no answer: the user refused, or it failed. A legacy server gets it as a
/// JSON-RPC error; in the modern era the call that needed the input fails with
/// [`Error::Input`](crate::Error::Input).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

impl InputError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        InputError(message.into())
    }
}

tokio::task_local! {
    /// The modern input request the handler in this task answers: its key and its round.
    static INPUT: (String, InputRound);
}

/// The key the server named the input request being answered under, in its `inputRequests`
/// (the modern era, 2026-07-28): `Some` when called from a sampling, elicitation or roots
/// handler (or code it awaits in the same task) answering such a request; `None` for a legacy
/// server's JSON-RPC request (which has no key) and outside a handler.
///
/// A front that asks its own client in the server's stead (a gateway) asks under this key, so
/// that the question keeps the name the server gave it.
pub fn input_key() -> Option<String> {
    INPUT.try_with(|(key, _)| key.clone()).ok()
}

/// The round the input request being answered belongs to (the modern era): the questions the
/// server asked in one `input_required` answer, which the client answers at once, each in a
/// task of its own. `None` where [`input_key`] is `None`.
///
/// A front that asks its own client in the server's stead uses it to ask a round's questions
/// together (see `modelctx_server::Context::hold_input`): it knows how many are coming.
pub fn input_round() -> Option<InputRound> {
    INPUT.try_with(|(_, round)| round.clone()).ok()
}

/// The questions of one `input_required` answer ([`input_round`]).
#[derive(Debug, Clone)]
pub struct InputRound {
    inner: Arc<RoundInner>,
}

#[derive(Debug)]
struct RoundInner {
    id: u64,
    keys: Vec<String>,
}

impl InputRound {
    /// A new round of the questions named `keys`, with an id no other round of this process has.
    pub(crate) fn new(keys: Vec<String>) -> InputRound {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        InputRound {
            inner: Arc::new(RoundInner { id, keys }),
        }
    }

    /// Its id: unique among the rounds of this process.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The keys of its questions (`inputRequests` keys), sorted.
    pub fn keys(&self) -> &[String] {
        &self.inner.keys
    }

    /// How many questions it has.
    pub fn len(&self) -> usize {
        self.inner.keys.len()
    }

    /// Whether it has none (never the case of a round a handler answers).
    pub fn is_empty(&self) -> bool {
        self.inner.keys.is_empty()
    }
}

/// Runs `answer` with `key` as the [`input_key`] of its task and `round` as its [`input_round`].
pub(crate) async fn with_input<T>(
    key: String,
    round: InputRound,
    answer: impl Future<Output = T>,
) -> T {
    INPUT.scope((key, round), answer).await
}

/// What an elicitation asks for.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Elicitation {
    /// Form mode: values for the fields of `schema` (a flat object schema of primitives).
    Form {
        /// What to ask the user.
        message: String,
        /// The requested schema.
        schema: JsonObject,
    },
    /// URL mode (2025-11-25 and later): send the user to `url`, out of band.
    Url {
        /// Why.
        message: String,
        /// Where to send the user.
        url: String,
        /// The server's id for this elicitation (2025-11-25).
        elicitation_id: Option<String>,
    },
}

/// What the user did with an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElicitAction {
    /// Submitted (form mode: with content).
    Accept,
    /// Said no.
    Decline,
    /// Dismissed it without choosing.
    Cancel,
}

/// The answer to an [`Elicitation`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Elicited {
    /// What the user did.
    pub action: ElicitAction,
    /// The submitted values (form mode, `Accept` only).
    pub content: Option<JsonObject>,
}

impl Elicited {
    /// Accepted with these values.
    pub fn accept(content: JsonObject) -> Self {
        Elicited {
            action: ElicitAction::Accept,
            content: Some(content),
        }
    }

    /// Accepted without content (URL mode).
    pub fn accepted() -> Self {
        Elicited {
            action: ElicitAction::Accept,
            content: None,
        }
    }

    /// Declined.
    pub fn decline() -> Self {
        Elicited {
            action: ElicitAction::Decline,
            content: None,
        }
    }

    /// Cancelled.
    pub fn cancel() -> Self {
        Elicited {
            action: ElicitAction::Cancel,
            content: None,
        }
    }
}

pub(crate) type SamplingFn = Arc<
    dyn Fn(
            model::CreateMessageRequestParams,
        ) -> BoxFuture<Result<model::CreateMessageResult, InputError>>
        + Send
        + Sync,
>;
pub(crate) type ElicitFn =
    Arc<dyn Fn(Elicitation) -> BoxFuture<Result<Elicited, InputError>> + Send + Sync>;
pub(crate) type RootsFn =
    Arc<dyn Fn() -> BoxFuture<Result<Vec<model::Root>, InputError>> + Send + Sync>;

/// The application's handlers.
#[derive(Clone, Default)]
pub(crate) struct Handlers {
    pub(crate) sampling: Option<SamplingFn>,
    pub(crate) elicitation: Option<ElicitFn>,
    pub(crate) url_elicitation: bool,
    pub(crate) apply_defaults: bool,
    pub(crate) roots: Option<RootsFn>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field("sampling", &self.sampling.is_some())
            .field("elicitation", &self.elicitation.is_some())
            .field("url_elicitation", &self.url_elicitation)
            .field("apply_defaults", &self.apply_defaults)
            .field("roots", &self.roots.is_some())
            .finish()
    }
}

/// One question of the server's, decoded.
pub(crate) enum Ask {
    Sample(Box<model::CreateMessageRequestParams>),
    Elicit(Value),
    Roots,
}

impl Ask {
    pub(crate) fn method(&self) -> &'static str {
        match self {
            Ask::Sample(_) => SamplingCreateMessage::VALUE,
            Ask::Elicit(_) => ElicitationCreate::VALUE,
            Ask::Roots => RootsList::VALUE,
        }
    }

    pub(crate) fn from_request(request: model::ServerRequest) -> Option<Ask> {
        match request {
            model::ServerRequest::CreateMessage(p) => Some(Ask::Sample(Box::new(p))),
            model::ServerRequest::Elicit(p) => Some(Ask::Elicit(p)),
            model::ServerRequest::ListRoots(_) => Some(Ask::Roots),
            _ => None,
        }
    }

    pub(crate) fn from_input(request: model::InputRequest) -> Option<Ask> {
        match request {
            model::InputRequest::CreateMessage(p) => Some(Ask::Sample(Box::new(p))),
            model::InputRequest::Elicit(p) => Some(Ask::Elicit(p)),
            model::InputRequest::ListRoots(_) => Some(Ask::Roots),
            _ => None,
        }
    }
}

impl Handlers {
    /// The capabilities these handlers let the client declare.
    pub(crate) fn capabilities(&self) -> JsonObject {
        let mut caps = JsonObject::new();
        if self.sampling.is_some() {
            caps.insert("sampling".into(), Value::Object(JsonObject::new()));
        }
        if self.elicitation.is_some() {
            let mut modes = JsonObject::new();
            modes.insert("form".into(), Value::Object(JsonObject::new()));
            if self.url_elicitation {
                modes.insert("url".into(), Value::Object(JsonObject::new()));
            }
            caps.insert("elicitation".into(), Value::Object(modes));
        }
        if self.roots.is_some() {
            caps.insert("roots".into(), serde_json::json!({"listChanged": true}));
        }
        caps
    }

    /// Answers `ask` in `version`: the JSON result, or why not.
    pub(crate) async fn answer(&self, version: ProtocolVersion, ask: Ask) -> Result<Value, String> {
        match ask {
            Ask::Sample(params) => {
                let handler = self.sampling.clone().ok_or("no sampling handler")?;
                let result = handler(*params).await.map_err(|e| e.0)?;
                wire::create_message_result(version, result)
            }
            Ask::Roots => {
                let handler = self.roots.clone().ok_or("no roots handler")?;
                let roots = handler().await.map_err(|e| e.0)?;
                let result = model::ListRootsResult {
                    roots,
                    meta: None,
                    extra: JsonObject::new(),
                };
                wire::list_roots_result(version, result)
            }
            Ask::Elicit(params) => {
                let handler = self.elicitation.clone().ok_or("no elicitation handler")?;
                let elicitation = parse_elicitation(&params)?;
                if matches!(elicitation, Elicitation::Url { .. }) && !self.url_elicitation {
                    return Err("URL elicitation is not enabled".into());
                }
                let schema = match &elicitation {
                    Elicitation::Form { schema, .. } => Some(schema.clone()),
                    Elicitation::Url { .. } => None,
                };
                let mut elicited = handler(elicitation).await.map_err(|e| e.0)?;
                if let (true, Some(schema), Some(content)) =
                    (self.apply_defaults, &schema, elicited.content.as_mut())
                    && elicited.action == ElicitAction::Accept
                {
                    apply_defaults(schema, content);
                }
                let result = model::ElicitResult {
                    action: match elicited.action {
                        ElicitAction::Accept => model::ElicitResultAction::Accept,
                        ElicitAction::Decline => model::ElicitResultAction::Decline,
                        ElicitAction::Cancel => model::ElicitResultAction::Cancel,
                    },
                    content: elicited.content.map(Value::Object),
                    meta: None,
                    extra: JsonObject::new(),
                };
                wire::elicit_result(version, result)
            }
        }
    }

    /// Answers a legacy server's request: a result, or the JSON-RPC error to send.
    pub(crate) async fn answer_request(
        &self,
        version: ProtocolVersion,
        method: &str,
        params: Option<&serde_json::value::RawValue>,
    ) -> Result<Value, ErrorObject> {
        let request = wire::server_request(version, method, params)
            .map_err(|e| ErrorObject::new(ErrorCode::INVALID_PARAMS, e))?;
        let Some(ask) = Ask::from_request(request) else {
            return Err(ErrorObject::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("`{method}` is not handled by this client"),
            ));
        };
        self.answer(version, ask)
            .await
            .map_err(|e| ErrorObject::new(ErrorCode::INTERNAL_ERROR, e))
    }
}

/// Reads `elicitation/create` params (form or URL mode).
fn parse_elicitation(params: &Value) -> Result<Elicitation, String> {
    let message = params["message"]
        .as_str()
        .ok_or("an elicitation without a message")?
        .to_owned();
    if params["mode"].as_str() == Some("url") {
        let url = params["url"]
            .as_str()
            .ok_or("a URL elicitation without a url")?
            .to_owned();
        return Ok(Elicitation::Url {
            message,
            url,
            elicitation_id: params["elicitationId"].as_str().map(str::to_owned),
        });
    }
    let schema = params["requestedSchema"]
        .as_object()
        .cloned()
        .ok_or("a form elicitation without a requestedSchema")?;
    Ok(Elicitation::Form { message, schema })
}

/// Fills the fields the user left empty with the schema's defaults.
pub(crate) fn apply_defaults(schema: &JsonObject, content: &mut JsonObject) {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return;
    };
    for (name, property) in properties {
        let empty = match content.get(name) {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            _ => false,
        };
        if let (true, Some(default)) = (empty, property.get("default")) {
            content.insert(name.clone(), default.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[tokio::test]
    async fn the_input_key_is_seen_by_what_the_answer_awaits_and_nowhere_else() {
        assert_eq!(input_key(), None);
        let seen = with_input(
            "user_name".into(),
            InputRound::new(vec!["user_name".into()]),
            async {
                tokio::task::yield_now().await;
                input_key()
            },
        )
        .await;
        assert_eq!(seen.as_deref(), Some("user_name"));
        assert_eq!(input_key(), None);
        assert!(input_round().is_none());
        // The round is the same for every question of it, and new for the next.
        let round = InputRound::new(vec!["a".into(), "b".into()]);
        let (a, b) = tokio::join!(
            with_input("a".into(), round.clone(), async { input_round().unwrap() }),
            with_input("b".into(), round.clone(), async { input_round().unwrap() }),
        );
        assert_eq!((a.id(), b.id(), a.len()), (round.id(), round.id(), 2));
        assert_eq!(a.keys(), ["a", "b"]);
        assert_ne!(InputRound::new(Vec::new()).id(), round.id());
        // Another task does not inherit it.
        let other = with_input("k".into(), InputRound::new(vec!["k".into()]), async {
            tokio::spawn(async { input_key() }).await.unwrap()
        })
        .await;
        assert_eq!(other, None);
    }

    #[test]
    fn defaults_fill_only_empty_fields() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "Ada"},
            "age": {"type": "integer", "default": 36},
            "city": {"type": "string", "default": "London"},
            "pet": {"type": "string"},
        }});
        let mut content = json!({"name": "", "city": "Paris", "age": null})
            .as_object()
            .cloned()
            .unwrap();
        apply_defaults(schema.as_object().unwrap(), &mut content);
        assert_eq!(
            Value::Object(content),
            json!({"name": "Ada", "age": 36, "city": "Paris"})
        );
    }

    #[test]
    fn elicitations_of_both_modes_are_read() {
        let form =
            parse_elicitation(&json!({"message": "m", "requestedSchema": {"type": "object"}}));
        assert!(matches!(form, Ok(Elicitation::Form { .. })));
        let url = parse_elicitation(
            &json!({"mode": "url", "message": "m", "url": "https://x", "elicitationId": "e"}),
        );
        assert_eq!(
            url,
            Ok(Elicitation::Url {
                message: "m".into(),
                url: "https://x".into(),
                elicitation_id: Some("e".into())
            })
        );
        assert!(parse_elicitation(&json!({"message": "m"})).is_err());
    }

    #[tokio::test]
    async fn answers_are_written_for_the_version() {
        let handlers = Handlers {
            roots: Some(Arc::new(|| {
                Box::pin(async {
                    Ok(vec![model::Root {
                        meta: None,
                        name: Some("src".into()),
                        uri: "file:///src".into(),
                    }])
                })
            })),
            ..Handlers::default()
        };
        let answer = handlers
            .answer(ProtocolVersion::V2024_11_05, Ask::Roots)
            .await
            .unwrap();
        assert_eq!(
            answer,
            json!({"roots": [{"name": "src", "uri": "file:///src"}]})
        );
        let refused = handlers
            .answer(
                ProtocolVersion::V2025_11_25,
                Ask::Sample(Box::new(sample_params())),
            )
            .await;
        assert_eq!(refused, Err("no sampling handler".into()));
    }

    fn sample_params() -> model::CreateMessageRequestParams {
        let v: modelctx_types::v2025_11_25::CreateMessageRequestParams =
            serde_json::from_value(json!({"messages": [], "maxTokens": 10})).unwrap();
        v.into()
    }
}
