//! A legacy session resumed from what it negotiated (`ServerSession::resume`): what a server
//! that keeps its sessions as stored data builds for each request.

use std::time::Instant;

use modelctx_session::{
    Event, LogLevel, ProtocolVersion, RequestOptions, Resume, ServerConfig, ServerSession, Transmit,
};
use modelctx_types::{JsonObject, Message, Notification, Request, RequestId};
use serde_json::{Value, json};

fn config() -> ServerConfig {
    let mut capabilities = JsonObject::new();
    capabilities.insert("tools".into(), json!({}));
    capabilities.insert("logging".into(), json!({}));
    ServerConfig::new("s", "1", capabilities)
}

fn request(id: i64, method: &str, params: Value) -> Message {
    let params: JsonObject = serde_json::from_value(params).unwrap();
    Request::new(RequestId::Number(id), method, &params)
        .unwrap()
        .into()
}

fn negotiated(initialized: bool) -> Resume {
    let mut capabilities = JsonObject::new();
    capabilities.insert("roots".into(), json!({}));
    let mut resume = Resume::new(
        ProtocolVersion::V2025_06_18,
        capabilities,
        json!({"name": "c", "version": "2"}),
    );
    resume.initialized = initialized;
    resume.log_level = Some(LogLevel::Warning);
    resume
}

fn transmits(session: &mut ServerSession) -> Vec<Message> {
    let mut out = Vec::new();
    while let Some(t) = session.poll_transmit() {
        if let Transmit::Message { message, .. } = t {
            out.push(message);
        }
    }
    out
}

/// A resumed session is past `initialize`: it hands the client's requests over at once, with
/// the negotiated client and log level, where a new session refuses them.
#[test]
fn a_resumed_session_serves_requests_without_initialize() {
    let now = Instant::now();
    let mut fresh = ServerSession::new(config());
    fresh.handle_message(now, request(1, "tools/list", json!({})));
    assert!(fresh.poll_event().is_none());
    assert!(matches!(&transmits(&mut fresh)[..], [Message::Error(_)]));

    let mut session = ServerSession::resume(config(), negotiated(true)).unwrap();
    assert!(session.is_initialized());
    assert_eq!(session.version(), Some(ProtocolVersion::V2025_06_18));
    assert_eq!(session.log_level(), Some(LogLevel::Warning));
    session.set_log_level(Some(LogLevel::Debug));
    assert_eq!(session.log_level(), Some(LogLevel::Debug));
    let peer = session.peer().unwrap();
    assert_eq!(peer.info, Some(json!({"name": "c", "version": "2"})));
    assert!(peer.capabilities.unwrap().contains_key("roots"));
    session.handle_message(now, request(1, "tools/list", json!({})));
    assert!(matches!(session.poll_event(), Some(Event::Request(r)) if r.method == "tools/list"));
    assert!(transmits(&mut session).is_empty());
}

/// `initialize` is behind a resumed session: a second one is refused.
#[test]
fn a_resumed_session_refuses_initialize() {
    let now = Instant::now();
    let mut session = ServerSession::resume(config(), negotiated(true)).unwrap();
    let init = json!({"protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "c", "version": "2"}});
    session.handle_message(now, request(1, "initialize", init));
    assert!(session.poll_event().is_none());
    assert!(matches!(&transmits(&mut session)[..], [Message::Error(_)]));
    assert_eq!(session.version(), Some(ProtocolVersion::V2025_06_18));
}

/// Not yet initialized: our requests (other than ping) wait for `notifications/initialized`,
/// and their ids start after `ids_after`.
#[test]
fn a_resumed_session_waits_for_initialized_and_numbers_after_its_range() {
    let now = Instant::now();
    let mut resume = negotiated(false);
    resume.ids_after = 1 << 20;
    let mut session = ServerSession::resume(config(), resume).unwrap();
    assert!(!session.is_initialized());
    let id = session
        .send_request(now, "roots/list", None, RequestOptions::default())
        .unwrap();
    assert_eq!(id, RequestId::Number((1 << 20) + 1));
    assert!(transmits(&mut session).is_empty());
    let initialized = Notification::new("notifications/initialized", &JsonObject::new()).unwrap();
    session.handle_message(now, initialized.into());
    assert!(session.is_initialized());
    match &transmits(&mut session)[..] {
        [Message::Request(r)] => assert_eq!(r.id, id),
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_a_legacy_version_is_resumed() {
    let mut resume = negotiated(true);
    resume.version = ProtocolVersion::V2026_07_28;
    assert!(ServerSession::resume(config(), resume).is_none());
}
