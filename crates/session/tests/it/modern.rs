//! The 2026-07-28 rules: per-request `_meta`, discover, result rules, MRTR, listen streams.

use crate::common;

use std::time::{Duration, Instant, SystemTime};

use common::*;
use modelctx_session::state::{Binding, StateKey, StateSealer};
use modelctx_session::{Event, ListKind, LogLevel, SessionError, missing_capability_error};
use modelctx_types::RequestId;
use serde_json::{Value, json};

fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn with_meta(mut params: Value, caps: Value) -> Value {
    params["_meta"] = modern_meta(caps);
    params
}

fn send(s: &mut modelctx_session::ServerSession, v: Value) -> Vec<Value> {
    s.handle_bytes(Instant::now(), v.to_string().as_bytes());
    drain(s)
}

fn take_request(s: &mut modelctx_session::ServerSession) -> modelctx_session::IncomingRequest {
    server_events(s)
        .into_iter()
        .find_map(|e| match e {
            Event::Request(r) => Some(r),
            _ => None,
        })
        .expect("a request event")
}

#[test]
fn meta_is_validated_on_every_request() {
    let mut s = server();
    // Unsupported version: -32022 with supported and requested.
    let mut meta = modern_meta(json!({}));
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let out = send(&mut s, request(1, "tools/list", json!({"_meta": meta})));
    assert_eq!(out[0]["error"]["code"], -32022);
    assert_eq!(out[0]["error"]["data"]["requested"], "2099-01-01");
    assert!(
        out[0]["error"]["data"]["supported"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    // Missing client capabilities: -32602.
    let out = send(
        &mut s,
        request(
            2,
            "tools/list",
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
        ),
    );
    assert_eq!(out[0]["error"]["code"], -32602);
    // A bad log level: -32602.
    let mut meta = modern_meta(json!({}));
    meta["io.modelcontextprotocol/logLevel"] = json!("verbose");
    assert_eq!(
        send(&mut s, request(3, "tools/list", json!({"_meta": meta})))[0]["error"]["code"],
        -32602
    );
    // Methods removed in 2026 are unknown: -32601. An `initialize` carrying a modern `_meta`
    // is one of them, not a handshake.
    for method in [
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
    ] {
        assert_eq!(
            send(&mut s, request(4, method, with_meta(json!({}), json!({}))))[0]["error"]["code"],
            -32601,
            "{method}"
        );
    }
    // A valid one reaches the layer above, with its meta, without initialize.
    let mut meta = modern_meta(json!({"sampling": {}}));
    meta["io.modelcontextprotocol/logLevel"] = json!("info");
    meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "c", "version": "2"});
    assert!(send(&mut s, request(5, "tools/list", json!({"_meta": meta}))).is_empty());
    let r = take_request(&mut s);
    let m = r.meta.unwrap();
    assert!(m.client_capabilities.contains_key("sampling"));
    assert_eq!(m.log_level, Some(LogLevel::Info));
    assert_eq!(m.client_info.unwrap()["version"], "2");
    assert!(
        s.version().is_none(),
        "a modern request does not initialize the connection"
    );
}

#[test]
fn discover_answers_with_versions_capabilities_and_cache_fields() {
    let mut s = server();
    let out = send(
        &mut s,
        request(1, "server/discover", with_meta(json!({}), json!({}))),
    );
    let result = &out[0]["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"].as_array().unwrap().len(), 5);
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(result["ttlMs"], 0);
    assert_eq!(result["cacheScope"], "public");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "test-server"
    );
    assert!(s.table_sizes().is_empty());
}

/// Every modern result names the server in `_meta`: added to the handler's own `_meta`, and a
/// `serverInfo` the handler gave is kept; a legacy result gets none.
#[test]
fn modern_results_carry_server_info_in_meta() {
    let info = json!({"name": "test-server", "version": "1.0.0"});
    let mut s = server();
    send(
        &mut s,
        request(1, "tools/call", with_meta(json!({"name": "x"}), json!({}))),
    );
    let r = take_request(&mut s);
    s.respond(&r.id, raw(json!({"content": [], "_meta": {"a/b": 1}})))
        .unwrap();
    assert_eq!(
        drain(&mut s)[0]["result"],
        json!({"resultType": "complete", "content": [],
            "_meta": {"a/b": 1, "io.modelcontextprotocol/serverInfo": info}})
    );
    send(
        &mut s,
        request(2, "tools/call", with_meta(json!({"name": "x"}), json!({}))),
    );
    let r = take_request(&mut s);
    // A `_meta` that is no object is refused, as every malformed member is (not left without
    // serverInfo); the request is still there to answer.
    assert!(matches!(
        s.respond(&r.id, raw(json!({"content": [], "_meta": 5}))),
        Err(SessionError::Invalid(why)) if why.contains("`_meta` must be an object")
    ));
    let own = json!({"io.modelcontextprotocol/serverInfo": {"name": "own", "version": "2"}});
    s.respond(&r.id, raw(json!({"content": [], "_meta": own})))
        .unwrap();
    assert_eq!(drain(&mut s)[0]["result"]["_meta"], own);
    assert!(s.table_sizes().is_empty());
}

#[test]
fn results_get_result_type_and_cache_fields() {
    let mut s = server();
    send(
        &mut s,
        request(1, "tools/list", with_meta(json!({}), json!({}))),
    );
    let r = take_request(&mut s);
    s.respond(&r.id, raw(json!({"tools": []}))).unwrap();
    let out = drain(&mut s);
    assert_eq!(
        out[0]["result"],
        json!({"resultType": "complete", "ttlMs": 0, "cacheScope": "private", "tools": [],
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "test-server", "version": "1.0.0"}}})
    );
    // Values the handler gave are kept.
    send(
        &mut s,
        request(
            2,
            "resources/read",
            with_meta(json!({"uri": "a://b"}), json!({})),
        ),
    );
    let r = take_request(&mut s);
    s.respond(
        &r.id,
        raw(
            json!({"contents": [], "ttlMs": 500, "cacheScope": "public", "resultType": "complete"}),
        ),
    )
    .unwrap();
    assert_eq!(drain(&mut s)[0]["result"]["ttlMs"], 500);
    // tools/call is not cacheable.
    send(
        &mut s,
        request(3, "tools/call", with_meta(json!({"name": "x"}), json!({}))),
    );
    let r = take_request(&mut s);
    s.respond(&r.id, raw(json!({"content": []}))).unwrap();
    assert_eq!(
        drain(&mut s)[0]["result"],
        json!({"resultType": "complete", "content": [],
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "test-server", "version": "1.0.0"}}})
    );
    // -32002 must not be emitted in 2026.
    send(
        &mut s,
        request(
            4,
            "resources/read",
            with_meta(json!({"uri": "a://c"}), json!({})),
        ),
    );
    let r = take_request(&mut s);
    assert!(matches!(
        s.respond_error(
            &r.id,
            modelctx_types::ErrorObject::new(modelctx_types::ErrorCode::RESOURCE_NOT_FOUND, "no")
        ),
        Err(SessionError::Invalid(why)) if why == "protocol 2026-07-28 must not emit error code -32002"
    ));
    s.respond_error(
        &r.id,
        modelctx_types::ErrorObject::new(
            modelctx_types::ErrorCode::INVALID_PARAMS,
            "no such resource",
        ),
    )
    .unwrap();
    assert!(s.table_sizes().is_empty());
}

#[test]
fn list_results_take_the_configured_cache_hint() {
    let mut config =
        modelctx_session::ServerConfig::new("test-server", "1.0.0", full_server_caps());
    config.list_cache = Some(modelctx_session::CacheHint::public(5000));
    let mut s = modelctx_session::ServerSession::new(config);
    let mut answer = |id: i64, method: &str, params: Value, result: Value| {
        send(&mut s, request(id, method, with_meta(params, json!({}))));
        let r = take_request(&mut s);
        s.respond(&r.id, raw(result)).unwrap();
        drain(&mut s).remove(0)["result"].take()
    };
    for (id, method) in [
        (1, "tools/list"),
        (2, "prompts/list"),
        (3, "resources/list"),
        (4, "resources/templates/list"),
    ] {
        let result = answer(id, method, json!({}), json!({"items": []}));
        assert_eq!(result["ttlMs"], 5000, "{method}");
        assert_eq!(result["cacheScope"], "public", "{method}");
    }
    // A hint the result carries is kept.
    let result = answer(5, "tools/list", json!({}), json!({"tools": [], "ttlMs": 7}));
    assert_eq!(
        (&result["ttlMs"], &result["cacheScope"]),
        (&json!(7), &json!("public"))
    );
    // Other cacheable results are not list results: no hint unless their own.
    let result = answer(
        6,
        "resources/read",
        json!({"uri": "a://b"}),
        json!({"contents": []}),
    );
    assert_eq!(
        (&result["ttlMs"], &result["cacheScope"]),
        (&json!(0), &json!("private"))
    );
    // tools/call is not cacheable.
    let result = answer(
        7,
        "tools/call",
        json!({"name": "x"}),
        json!({"content": []}),
    );
    assert!(result.get("ttlMs").is_none());
    assert!(s.table_sizes().is_empty());
}

#[test]
fn input_required_is_checked() {
    let mut s = server();
    // Only on tools/call, prompts/get and resources/read.
    send(
        &mut s,
        request(
            1,
            "tools/list",
            with_meta(json!({}), json!({"elicitation": {}})),
        ),
    );
    let r = take_request(&mut s);
    assert!(matches!(
        s.respond(
            &r.id,
            raw(json!({"resultType": "input_required", "requestState": "x"}))
        ),
        Err(SessionError::InputRequiredNotAllowed(_))
    ));
    s.respond(&r.id, raw(json!({"tools": []}))).unwrap();
    // At least one of inputRequests and requestState.
    send(
        &mut s,
        request(
            2,
            "tools/call",
            with_meta(json!({"name": "t"}), json!({"elicitation": {}})),
        ),
    );
    let r = take_request(&mut s);
    assert!(matches!(
        s.respond(&r.id, raw(json!({"resultType": "input_required"}))),
        Err(SessionError::Invalid(why)) if why.contains("needs `inputRequests` or `requestState`")
    ));
    // Only input the client declared: a URL elicitation needs elicitation.url.
    let url = json!({"resultType": "input_required", "inputRequests": {"login": {
        "method": "elicitation/create",
        "params": {"mode": "url", "message": "log in", "url": "https://x", "elicitationId": "e"}}}});
    match s.respond(&r.id, raw(url.clone())) {
        Err(SessionError::MissingClientCapability { required }) => {
            assert_eq!(required, json!({"elicitation": {"url": {}}}));
            // The handler answers with -32021 instead.
            s.respond_error(
                &r.id,
                missing_capability_error(required.as_object().unwrap()),
            )
            .unwrap();
            let out = drain(&mut s);
            assert_eq!(out.last().unwrap()["error"]["code"], -32021);
            assert_eq!(
                out.last().unwrap()["error"]["data"]["requiredCapabilities"],
                json!({"elicitation": {"url": {}}})
            );
        }
        other => panic!("{other:?}"),
    }
    // A form elicitation to a client with `elicitation: {}` is fine.
    send(
        &mut s,
        request(
            3,
            "tools/call",
            with_meta(json!({"name": "t"}), json!({"elicitation": {}})),
        ),
    );
    let r = take_request(&mut s);
    let form = json!({"resultType": "input_required", "inputRequests": {"name": {
        "method": "elicitation/create",
        "params": {"message": "name?", "requestedSchema": {"type": "object", "properties": {}}}}}});
    s.respond(&r.id, raw(form)).unwrap();
    assert_eq!(drain(&mut s)[0]["result"]["resultType"], "input_required");
    assert!(s.table_sizes().is_empty());
}

/// The whole multi round-trip: input_required with a sealed state, a retry with a new id, the
/// state opened and checked; a retry missing a response gets input_required again; a tampered
/// or foreign state gets -32602.
#[test]
fn multi_round_trip_with_a_sealed_request_state() {
    let sealer = StateSealer::new(StateKey::new("k1", vec![7u8; 32]).unwrap());
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut s = server();
    let caps = json!({"elicitation": {}});
    let params = json!({"name": "deploy", "arguments": {"env": "prod"}});
    send(
        &mut s,
        request(1, "tools/call", with_meta(params.clone(), caps.clone())),
    );
    let r = take_request(&mut s);
    let binding = Binding {
        principal: Some("alice"),
        method: "tools/call",
        params: r.params.as_deref(),
    };
    let state = sealer
        .seal(wall, &binding, &["confirm", "reason"], b"step-1")
        .unwrap();
    s.respond(&r.id, raw(json!({"resultType": "input_required", "requestState": state, "inputRequests": {
        "confirm": {"method": "elicitation/create", "params": {"message": "sure?", "requestedSchema": {"type": "object", "properties": {}}}},
        "reason": {"method": "elicitation/create", "params": {"message": "why?", "requestedSchema": {"type": "object", "properties": {}}}},
    }}))).unwrap();
    let out = drain(&mut s);
    let echoed = out[0]["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();

    // The retry: new id, inputResponses (one missing), the state echoed verbatim.
    let mut retry = with_meta(params.clone(), caps.clone());
    retry["inputResponses"] = json!({"confirm": {"action": "accept", "content": {}}});
    retry["requestState"] = json!(echoed);
    send(&mut s, request(2, "tools/call", retry.clone()));
    let r2 = take_request(&mut s);
    assert_ne!(r2.id, r.id);
    let binding = Binding {
        principal: Some("alice"),
        method: "tools/call",
        params: r2.params.as_deref(),
    };
    let opened = sealer
        .open(wall + Duration::from_secs(5), &binding, &echoed)
        .unwrap();
    assert_eq!(opened.payload, b"step-1");
    assert_eq!(opened.missing(["confirm"]), ["reason"]);
    // Missing responses: input_required again.
    let again = sealer.seal(wall, &binding, &["reason"], b"step-2").unwrap();
    s.respond(
        &r2.id,
        raw(json!({"resultType": "input_required", "requestState": again})),
    )
    .unwrap();
    assert_eq!(drain(&mut s)[0]["result"]["resultType"], "input_required");

    // Tampered, expired, another principal, other params: -32602 from the handler.
    let mut tampered = echoed.clone();
    tampered.replace_range(tampered.len() - 2.., "AA");
    let other_args = json!({"name": "deploy", "arguments": {"env": "dev"}});
    let raw_other = raw(other_args);
    let cases = [
        sealer.open(wall, &binding, &tampered),
        sealer.open(wall + Duration::from_secs(3600), &binding, &echoed),
        sealer.open(
            wall,
            &Binding {
                principal: Some("mallory"),
                ..binding
            },
            &echoed,
        ),
        sealer.open(
            wall,
            &Binding {
                params: Some(&raw_other),
                ..binding
            },
            &echoed,
        ),
    ];
    for case in cases {
        let error = case.unwrap_err();
        assert_eq!(
            error.to_error_object().code,
            modelctx_types::ErrorCode::INVALID_PARAMS
        );
    }
    send(&mut s, request(3, "tools/call", retry));
    let r3 = take_request(&mut s);
    let error = sealer.open(wall, &binding, &tampered).unwrap_err();
    s.respond_error(&r3.id, error.to_error_object()).unwrap();
    assert_eq!(drain(&mut s)[0]["error"]["code"], -32602);
    assert!(s.table_sizes().is_empty());
}

#[test]
fn listen_streams_are_acknowledged_tagged_filtered_and_ended() {
    let mut config = modelctx_session::ServerConfig::new(
        "s",
        "1",
        obj(json!({
        "tools": {"listChanged": true}, "prompts": {}, "resources": {"subscribe": true}})),
    );
    config.limits.max_subscriptions = 2;
    let mut s = modelctx_session::ServerSession::new(config);
    let filter = json!({"toolsListChanged": true, "promptsListChanged": true, "resourceSubscriptions": ["file:///a"], "bogus": true});
    let out = send(
        &mut s,
        request(
            7,
            "subscriptions/listen",
            with_meta(json!({"notifications": filter}), json!({})),
        ),
    );
    // The acknowledgement first, with the honoured subset (prompts has no listChanged).
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        out[0]["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["file:///a"]})
    );
    assert_eq!(
        out[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
    // Notifications are tagged and filtered.
    assert_eq!(s.notify_list_changed(ListKind::Tools).unwrap(), 1);
    assert!(
        matches!(
            s.notify_list_changed(ListKind::Prompts),
            Err(SessionError::NotDeclared { capability, .. }) if capability == "prompts.listChanged"
        ),
        "prompts.listChanged not declared"
    );
    assert_eq!(s.notify_resource_updated("file:///a", false).unwrap(), 1);
    assert_eq!(s.notify_resource_updated("file:///b", false).unwrap(), 0);
    let out = drain(&mut s);
    assert_eq!(out[0]["method"], "notifications/tools/list_changed");
    assert_eq!(
        out[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        7
    );
    assert_eq!(out[1]["params"]["uri"], "file:///a");
    // A second stream; a third is refused (bound).
    send(
        &mut s,
        request(
            8,
            "subscriptions/listen",
            with_meta(
                json!({"notifications": {"toolsListChanged": true}}),
                json!({}),
            ),
        ),
    );
    let out = send(
        &mut s,
        request(
            9,
            "subscriptions/listen",
            with_meta(json!({"notifications": {}}), json!({})),
        ),
    );
    assert_eq!(out[0]["error"]["code"], -32603);
    assert_eq!(s.notify_list_changed(ListKind::Tools).unwrap(), 2);
    drain(&mut s);
    // Ended by the client's cancellation (stdio) and by the server's final result.
    s.handle_bytes(
        Instant::now(),
        br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}"#,
    );
    assert_eq!(s.notify_list_changed(ListKind::Tools).unwrap(), 1);
    drain(&mut s);
    s.end_subscription(&RequestId::Number(8)).unwrap();
    let out = drain(&mut s);
    assert_eq!(out[0]["id"], 8);
    assert_eq!(
        out[0]["result"],
        json!({"resultType": "complete", "_meta": {"io.modelcontextprotocol/subscriptionId": 8}})
    );
    assert!(s.table_sizes().is_empty(), "{:?}", s.table_sizes());
}

#[test]
fn a_closed_stream_cancels_the_request() {
    let mut s = server();
    send(
        &mut s,
        request(1, "tools/call", with_meta(json!({"name": "x"}), json!({}))),
    );
    let r = take_request(&mut s);
    assert!(s.stream_closed(&r.id));
    assert!(matches!(
        server_events(&mut s)[..],
        [Event::Cancelled { .. }]
    ));
    assert!(matches!(
        s.respond(&r.id, raw(json!({"content": []}))),
        Err(SessionError::NotInFlight(id)) if id == r.id
    ));
    assert!(drain(&mut s).is_empty());
    assert!(s.table_sizes().is_empty());
}

/// Either era, the same event: a legacy request whose POST was abandoned (the transport's
/// `stream_closed`) and one the client cancelled with `notifications/cancelled` both come out
/// as `Event::Cancelled`, and neither is answered.
#[test]
fn a_legacy_request_is_cancelled_by_its_closed_stream_or_its_notification() {
    let mut s = initialized_server("2025-06-18", json!({}));
    let now = Instant::now();
    for id in [1, 2] {
        let call =
            json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "x"}});
        s.handle_bytes(now, call.to_string().as_bytes());
    }
    let requests: Vec<_> = server_events(&mut s)
        .into_iter()
        .filter_map(|e| match e {
            Event::Request(r) => Some(r.id),
            _ => None,
        })
        .collect();
    assert_eq!(requests.len(), 2);
    assert!(s.stream_closed(&requests[0]));
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 2}});
    s.handle_bytes(now, cancel.to_string().as_bytes());
    let cancelled: Vec<_> = server_events(&mut s)
        .into_iter()
        .map(|e| match e {
            Event::Cancelled { id, .. } => id,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(cancelled, requests);
    for id in &requests {
        assert!(matches!(
            s.respond(id, raw(json!({"content": []}))),
            Err(SessionError::NotInFlight(_))
        ));
    }
    assert!(drain(&mut s).is_empty());
    assert!(s.table_sizes().is_idle());
}

#[test]
fn log_messages_follow_the_request_level() {
    let mut s = server();
    send(
        &mut s,
        request(1, "tools/call", with_meta(json!({"name": "x"}), json!({}))),
    );
    let quiet = take_request(&mut s);
    let mut meta = modern_meta(json!({}));
    meta["io.modelcontextprotocol/logLevel"] = json!("warning");
    send(
        &mut s,
        request(2, "tools/call", json!({"name": "x", "_meta": meta})),
    );
    let loud = take_request(&mut s);
    assert!(
        !s.log_for(&quiet.id, LogLevel::Emergency, None, json!("x"))
            .unwrap(),
        "no level, no messages"
    );
    assert!(
        !s.log_for(&loud.id, LogLevel::Info, None, json!("x"))
            .unwrap()
    );
    assert!(
        s.log_for(&loud.id, LogLevel::Error, None, json!("x"))
            .unwrap()
    );
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["params"]["level"], "error");
    // Finding 4: tagged with the request it is about, for a proxy that shares this server.
    assert_eq!(
        out[0]["params"]["_meta"][modelctx_session::RELATED_REQUEST_ID],
        json!(2)
    );
    assert_eq!(out[0]["params"]["data"], "x");
}

#[test]
fn one_connection_serves_both_eras() {
    let mut s = initialized_server("2025-06-18", json!({}));
    send(&mut s, request(1, "tools/list", json!({})));
    send(
        &mut s,
        request(2, "tools/list", with_meta(json!({}), json!({}))),
    );
    let events = server_events(&mut s);
    let eras: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::Request(r) => Some((r.version.as_str(), r.era())),
            _ => None,
        })
        .collect();
    assert_eq!(
        eras,
        [
            ("2025-06-18", modelctx_session::Era::Legacy),
            ("2026-07-28", modelctx_session::Era::Modern)
        ]
    );
}

/// A session made with `for_request` (one Streamable HTTP request on its own).
fn request_session() -> modelctx_session::ServerSession {
    modelctx_session::ServerSession::for_request(modelctx_session::ServerConfig::new(
        "test-server",
        "1.0.0",
        full_server_caps(),
    ))
}

/// What a request session wrote: each refusal as its error response, and whether it was one.
fn refusals(s: &mut modelctx_session::ServerSession) -> Vec<(bool, Value)> {
    std::iter::from_fn(|| s.poll_transmit())
        .map(|t| match t {
            modelctx_session::Transmit::Refusal(error) => (true, wire(&error.into())),
            modelctx_session::Transmit::Message { message, .. } => (false, wire(&message)),
            other => panic!("unexpected {other:?}"),
        })
        .collect()
}

/// The `_meta` rules of a modern request on its own are the session's: what `_meta` must carry
/// (-32602), the versions served (-32022, naming the modern ones only), and every such answer is
/// a refusal, which an HTTP transport turns into an HTTP error status.
#[test]
fn a_request_on_its_own_is_refused_by_the_session_rules() {
    let now = Instant::now();
    let cases = [
        (json!({}), -32602, "no _meta"),
        (
            json!({"_meta": {"io.modelcontextprotocol/clientCapabilities": {}}}),
            -32602,
            "no version",
        ),
        (
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
            -32602,
            "no capabilities",
        ),
        (
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01",
                "io.modelcontextprotocol/clientCapabilities": {}}}),
            -32022,
            "unknown version",
        ),
        (
            json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2025-11-25",
                "io.modelcontextprotocol/clientCapabilities": {}}}),
            -32022,
            "a legacy version",
        ),
        (json!([1]), -32602, "params not an object"),
    ];
    for (params, code, what) in cases {
        let mut s = request_session();
        s.handle_bytes(now, request(7, "tools/list", params).to_string().as_bytes());
        let out = refusals(&mut s);
        assert_eq!(out.len(), 1, "{what}: {out:?}");
        assert!(out[0].0, "{what}: not a refusal");
        assert_eq!(out[0].1["id"], 7, "{what}");
        assert_eq!(out[0].1["error"]["code"], code, "{what}: {out:?}");
        if code == -32022 {
            assert_eq!(
                out[0].1["error"]["data"]["supported"],
                json!(["2026-07-28"]),
                "{what}"
            );
        }
        assert!(server_events(&mut s).is_empty(), "{what}");
    }
    // `initialize` is no handshake here: it opens no session, and is refused with -32022
    // naming the modern versions served and the one asked for.
    let mut s = request_session();
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}});
    s.handle_bytes(now, init.to_string().as_bytes());
    let out = refusals(&mut s);
    assert!(out[0].0);
    assert_eq!(out[0].1["error"]["code"], -32022, "{out:?}");
    assert_eq!(
        out[0].1["error"]["data"],
        json!({"supported": ["2026-07-28"], "requested": "2025-11-25"})
    );
    assert!(s.version().is_none());
    assert!(server_events(&mut s).is_empty());
    // A method that does not exist in the version: a refusal (-32601).
    let mut s = request_session();
    let unknown = request(2, "no/such", json!({"_meta": modern_meta(json!({}))}));
    s.handle_bytes(now, unknown.to_string().as_bytes());
    let out = refusals(&mut s);
    assert!(out[0].0);
    assert_eq!(out[0].1["error"]["code"], -32601);
    // A valid request reaches the layer above, and its answer is no refusal.
    let mut s = request_session();
    let list = request(3, "tools/list", json!({"_meta": modern_meta(json!({}))}));
    s.handle_bytes(now, list.to_string().as_bytes());
    let request = take_request(&mut s);
    s.respond(&request.id, raw(json!({"tools": []}))).unwrap();
    let out = refusals(&mut s);
    assert_eq!(out.len(), 1);
    assert!(!out[0].0, "{out:?}");
    assert_eq!(out[0].1["id"], 3);
}

/// A modern notification on its own must name a served version too; its refusal names no id.
#[test]
fn a_notification_on_its_own_is_refused_without_an_id() {
    let now = Instant::now();
    let mut s = request_session();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed",
        "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}});
    s.handle_bytes(now, note.to_string().as_bytes());
    let out = refusals(&mut s);
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].0);
    assert_eq!(out[0].1["id"], Value::Null);
    assert_eq!(out[0].1["error"]["code"], -32022);
    let mut s = request_session();
    let note = json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed",
        "params": {"_meta": modern_meta(json!({}))}});
    s.handle_bytes(now, note.to_string().as_bytes());
    assert!(refusals(&mut s).is_empty());
}

/// A session made with `new` keeps the connection rules: a request without a modern `_meta` is
/// legacy traffic (-32600 before `initialize`), written as a plain message.
#[test]
fn a_connection_session_writes_no_refusals() {
    let mut s = server();
    s.handle_bytes(
        Instant::now(),
        request(1, "tools/list", json!({})).to_string().as_bytes(),
    );
    let out = refusals(&mut s);
    assert!(!out[0].0);
    assert_eq!(out[0].1["error"]["code"], -32600);
}

/// An extension declared on one request (the tasks extension's way) is added to the configured
/// capabilities of that request only; the configured members stay as they are.
#[test]
fn capabilities_declared_on_one_request_are_added_to_it_only() {
    let mut pair = Pair::connected(&[modelctx_session::ProtocolVersion::V2026_07_28]);
    let tasks = "io.modelcontextprotocol/tasks";
    let params = obj(json!({
        "name": "t",
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {
            "extensions": {tasks: {}},
            "sampling": {"tools": {}},
            "roots": {"listChanged": false},
        }},
    }));
    pair.client
        .send_request(pair.now, "tools/call", Some(params))
        .unwrap();
    pair.client
        .send_request(pair.now, "tools/call", Some(obj(json!({"name": "t"}))))
        .unwrap();
    pair.pump();
    let calls: Vec<&Value> = pair
        .to_server
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .collect();
    let caps = |i: usize| {
        calls[i]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"].clone()
    };
    assert_eq!(caps(0)["extensions"], json!({tasks: {}}));
    assert_eq!(
        caps(0)["sampling"],
        json!({"tools": {}}),
        "objects are merged"
    );
    assert_eq!(
        caps(0)["roots"],
        json!({"listChanged": true}),
        "the configured member is kept"
    );
    assert!(caps(1).get("extensions").is_none(), "{}", caps(1));
}

/// With `only_request_capabilities`, a request declares exactly the capabilities in its own
/// `_meta` (none when it has none), not the configured ones.
#[test]
fn a_request_may_declare_only_its_own_capabilities() {
    let mut pair = Pair::connected(&[modelctx_session::ProtocolVersion::V2026_07_28]);
    let only = modelctx_session::RequestOptions::default().with_only_request_capabilities();
    let params = obj(json!({
        "name": "t",
        "_meta": {"io.modelcontextprotocol/clientCapabilities": {"sampling": {}}},
    }));
    for params in [params, obj(json!({"name": "t"}))] {
        pair.client
            .send_request_with(pair.now, "tools/call", Some(params), only)
            .unwrap();
    }
    pair.pump();
    let caps: Vec<Value> = pair
        .to_server
        .iter()
        .filter(|m| m["method"] == "tools/call")
        .map(|m| m["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"].clone())
        .collect();
    assert_eq!(caps, [json!({"sampling": {}}), json!({})]);
}

/// The tasks extension's listen filter (`taskIds`): only with the extension declared on the
/// request (-32021 otherwise), acknowledged, and `notifications/tasks` reach the streams that
/// name the task, tagged with their subscription id; a server without the extension ignores it.
#[test]
fn listen_streams_name_tasks_with_the_extension_declared() {
    let ext = json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let config = modelctx_session::ServerConfig::new("s", "1", obj(ext.clone()));
    let mut s = modelctx_session::ServerSession::new(config);
    let filter = json!({"notifications": {"taskIds": ["t1", "t2"]}});
    let out = send(
        &mut s,
        request(
            1,
            "subscriptions/listen",
            with_meta(filter.clone(), json!({})),
        ),
    );
    assert_eq!(out[0]["error"]["code"], -32021, "{out:?}");
    assert_eq!(
        out[0]["error"]["data"]["requiredCapabilities"], ext,
        "{out:?}"
    );
    let out = send(
        &mut s,
        request(
            2,
            "subscriptions/listen",
            with_meta(json!({"notifications": {"taskIds": "t1"}}), ext.clone()),
        ),
    );
    assert_eq!(out[0]["error"]["code"], -32602, "{out:?}");
    let out = send(
        &mut s,
        request(3, "subscriptions/listen", with_meta(filter, ext.clone())),
    );
    assert_eq!(
        out[0]["params"]["notifications"],
        json!({"taskIds": ["t1", "t2"]})
    );
    let ids: Vec<&str> = s.listened_task_ids().collect();
    assert_eq!(ids, ["t1", "t2"]);
    let task = obj(json!({"taskId": "t1", "status": "working"}));
    assert_eq!(s.notify_task(task), 1);
    assert_eq!(s.notify_task(obj(json!({"taskId": "t3"}))), 0);
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0]["method"], "notifications/tasks");
    assert_eq!(out[0]["params"]["status"], "working");
    assert_eq!(
        out[0]["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        3
    );

    // Without the extension, the key is unknown: not acknowledged, nothing heard.
    let config = modelctx_session::ServerConfig::new("s", "1", obj(json!({"tools": {}})));
    let mut s = modelctx_session::ServerSession::new(config);
    let out = send(
        &mut s,
        request(
            4,
            "subscriptions/listen",
            with_meta(json!({"notifications": {"taskIds": ["t1"]}}), ext),
        ),
    );
    assert_eq!(out[0]["params"]["notifications"], json!({}), "{out:?}");
    assert_eq!(s.listened_task_ids().count(), 0);
}
