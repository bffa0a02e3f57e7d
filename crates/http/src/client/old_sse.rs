//! The fallback to the 2024-11-05 HTTP+SSE transport: one GET stream for everything the server
//! sends, whose first event names the endpoint that takes the client's POSTs.

use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Method, StatusCode, Uri};
use http_body_util::BodyExt;
use hyper::body::Incoming as Body;
use modelctx_types::{Message, RequestId};

use super::exchange::{Budget, Spec, describe, send};
use super::{Inbound, Registration, TaskGuard, TransportError};
use crate::headers::escape;
use crate::sse::{SseDecoder, SseEvent};

/// How long the server gets to send the `endpoint` event.
const ENDPOINT_WAIT: Duration = Duration::from_secs(10);

/// `initialize` got `status`: open the HTTP+SSE stream, learn the endpoint, and POST
/// `initialize` there. Its answer comes on the stream.
///
/// When the GET of the stream gets 400, 404 or 405 as well, neither transport is served at this
/// URL (a wrong path, most often): `initialize` fails with its own status
/// ([`TransportError::Status`]), not with the fallback's.
pub(crate) async fn fall_back(guard: TaskGuard, status: StatusCode, initialize: Option<Message>) {
    let shared = guard.shared().clone();
    let id = match &initialize {
        Some(Message::Request(r)) => r.id.clone(),
        _ => return,
    };
    let (endpoint, body, decoder, events) = match open(&shared).await {
        Ok(found) => found,
        Err(NoStream::Status(got)) if matches!(got.as_u16(), 400 | 404 | 405) => {
            let error = TransportError::Status {
                status,
                body: String::new(),
            };
            shared.deliver(Inbound::RequestFailed { id, error }).await;
            return;
        }
        Err(NoStream::Status(got)) => {
            let why = format!("the GET got HTTP {got}");
            return fail(&shared, id, status, why).await;
        }
        Err(NoStream::Auth(error)) => {
            shared.deliver(Inbound::RequestFailed { id, error }).await;
            return;
        }
        Err(NoStream::Other(why)) => return fail(&shared, id, status, why).await,
        Err(NoStream::Late) => {
            let why = format!("no endpoint event within {ENDPOINT_WAIT:?}");
            return fail(&shared, id, status, why).await;
        }
    };
    {
        let mut state = shared.state();
        state.old_endpoint = Some(endpoint.clone());
        state.session_id = None;
    }
    if !shared.deliver(Inbound::FellBack { status }).await {
        return;
    }
    let reader = shared.spawn(
        Registration {
            requests: Vec::new(),
            legacy: false,
        },
        move |guard| read(guard, body, decoder, events),
    );
    if let Err(e) = reader {
        return fail(&shared, id, status, e.to_string()).await;
    }
    let messages = initialize.into_iter().collect();
    post(guard, endpoint, messages, false).await;
}

async fn fail(shared: &super::Shared, id: RequestId, status: StatusCode, why: String) {
    let error = TransportError::Endpoint(format!(
        "initialize got HTTP {status}, and the HTTP+SSE transport did not answer either: {why}"
    ));
    shared.deliver(Inbound::RequestFailed { id, error }).await;
}

type Opened = (Uri, Body, SseDecoder, Vec<SseEvent>);

/// Why the stream could not be opened.
enum NoStream {
    /// The GET got this status.
    Status(StatusCode),
    /// Authorization failed ([`TransportError::Auth`]).
    Auth(TransportError),
    /// No `endpoint` event in time.
    Late,
    /// Anything else.
    Other(String),
}

impl From<String> for NoStream {
    fn from(why: String) -> Self {
        NoStream::Other(why)
    }
}

/// The GET of the stream, read up to the `endpoint` event, within [`ENDPOINT_WAIT`] (the
/// authorizer's waits aside).
async fn open(shared: &super::Shared) -> Result<Opened, NoStream> {
    let mut budget = Budget::new(ENDPOINT_WAIT);
    let spec = Spec::new(shared, Method::GET, &shared.url).header(ACCEPT, "text/event-stream");
    let response = match send(shared, &spec, Some(&mut budget)).await {
        Ok(response) => response,
        Err(e @ TransportError::Auth(_)) => return Err(NoStream::Auth(e)),
        Err(TransportError::Timeout(limit)) if limit == ENDPOINT_WAIT => {
            return Err(NoStream::Late);
        }
        Err(e) => return Err(NoStream::Other(e.to_string())),
    };
    if !response.status().is_success() {
        return Err(NoStream::Status(response.status()));
    }
    let is_sse = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        });
    if !is_sse {
        return Err(NoStream::Other(
            "the GET did not answer with an event stream".into(),
        ));
    }
    let mut body = response.into_body();
    let mut decoder = SseDecoder::new(shared.config.max_event);
    let mut events = Vec::new();
    loop {
        let frame = match tokio::time::timeout_at(budget.deadline(), body.frame()).await {
            Err(_) => return Err(NoStream::Late),
            Ok(None) => {
                return Err(NoStream::Other(
                    "the stream ended before the endpoint event".into(),
                ));
            }
            Ok(Some(Err(e))) => return Err(NoStream::Other(describe(&e))),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        decoder
            .feed(&data, &mut events)
            .map_err(|e| NoStream::Other(e.to_string()))?;
        if let Some(at) = events
            .iter()
            .position(|e| e.event.as_deref() == Some("endpoint"))
        {
            let endpoint = resolve(&shared.url, &events[at].data)?;
            let rest = events.split_off(at + 1);
            return Ok((endpoint, body, decoder, rest));
        }
        if events.len() > 64 {
            return Err(NoStream::Other(
                "64 events came before the endpoint event".into(),
            ));
        }
    }
}

/// The endpoint, resolved against the stream's URL; it must be of the same origin (a server
/// cannot send the client's messages elsewhere).
fn resolve(base: &Uri, endpoint: &str) -> Result<Uri, String> {
    let endpoint = endpoint.trim();
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or_default();
    let text = if endpoint.starts_with("//") {
        format!("{scheme}:{endpoint}")
    } else if endpoint.starts_with('/') {
        format!("{scheme}://{authority}{endpoint}")
    } else if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        let path = base.path();
        let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
        format!("{scheme}://{authority}{dir}{endpoint}")
    };
    let uri: Uri = text
        .parse()
        .map_err(|_| format!("the endpoint {:?} is not a URL", escape(endpoint)))?;
    let same = uri
        .scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case(scheme))
        && uri
            .authority()
            .is_some_and(|a| a.as_str().eq_ignore_ascii_case(authority));
    if !same {
        return Err(format!(
            "the endpoint {:?} is not of the server's origin",
            escape(endpoint)
        ));
    }
    Ok(uri)
}

/// Reads the stream for good: every `message` event is handed up.
async fn read(
    guard: TaskGuard,
    mut body: Body,
    mut decoder: SseDecoder,
    mut events: Vec<SseEvent>,
) {
    let shared = guard.shared().clone();
    let end = loop {
        for event in events.drain(..) {
            let inbound = match event.message() {
                None => continue,
                Some(Ok(incoming)) => Inbound::Message(incoming),
                Some(Err(error)) => Inbound::Unreadable(error),
            };
            if !shared.deliver(inbound).await {
                return;
            }
        }
        let data = match body.frame().await {
            None => break TransportError::StreamEnded { reissued: 0 },
            Some(Err(e)) => break TransportError::Connection(describe(&e)),
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
        };
        if let Err(e) = decoder.feed(&data, &mut events) {
            break e.into();
        }
    };
    shared.deliver(Inbound::Closed(end)).await;
}

/// A POST to the endpoint; the answers come on the stream.
pub(crate) async fn post(guard: TaskGuard, endpoint: Uri, messages: Vec<Message>, batch: bool) {
    let shared = guard.shared().clone();
    let body = if batch {
        serde_json::to_vec(&messages)
    } else {
        serde_json::to_vec(&messages[0])
    };
    let error = match body {
        Err(e) => TransportError::Malformed(e.to_string()),
        Ok(body) => {
            // Answers come on the event stream: a POST awaits its status only.
            let spec = Spec::new(&shared, Method::POST, &endpoint)
                .header(CONTENT_TYPE, "application/json")
                .body(Bytes::from(body));
            let mut budget = Budget::new(shared.config.one_way_timeout);
            match send(&shared, &spec, Some(&mut budget)).await {
                Ok(response) if response.status().is_success() => return,
                Ok(response) => TransportError::Status {
                    status: response.status(),
                    body: String::new(),
                },
                Err(e) => e,
            }
        }
    };
    for message in messages {
        let inbound = match message {
            Message::Request(r) => Inbound::RequestFailed {
                id: r.id,
                error: error.clone(),
            },
            Message::Notification(n) => Inbound::Undelivered {
                what: n.method,
                answer: None,
                error: error.clone(),
            },
            Message::Response(r) => Inbound::Undelivered {
                what: format!("the response to {}", r.id),
                answer: Some(r.id),
                error: error.clone(),
            },
            Message::Error(e) => Inbound::Undelivered {
                what: "an error response".into(),
                answer: e.id,
                error: error.clone(),
            },
            _ => Inbound::Undelivered {
                what: "a message".into(),
                answer: None,
                error: error.clone(),
            },
        };
        if !shared.deliver(inbound).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_resolve_against_the_stream_url_and_stay_on_its_origin() {
        let base: Uri = "http://127.0.0.1:8080/mcp/sse".parse().unwrap();
        let ok = |e: &str| resolve(&base, e).unwrap().to_string();
        assert_eq!(
            ok("/messages?sessionId=1"),
            "http://127.0.0.1:8080/messages?sessionId=1"
        );
        assert_eq!(ok("messages?s=2"), "http://127.0.0.1:8080/mcp/messages?s=2");
        assert_eq!(ok("http://127.0.0.1:8080/m"), "http://127.0.0.1:8080/m");
        assert!(resolve(&base, "http://evil.example/m").is_err());
        assert!(resolve(&base, "//evil.example/m").is_err());
        assert!(resolve(&base, "https://127.0.0.1:8080/m").is_err());
        assert!(resolve(&base, "/bad path").is_err());
    }
}
