//! A client and a server session on a virtual clock, for each of the five protocol versions.

use crate::common;

use std::time::Duration;

use common::*;
use modelctx_session::{
    CloseReason, Event, ProtocolVersion, RequestError, RequestOptions, SessionError,
};
use modelctx_types::{ErrorCode, ErrorObject};
use serde_json::{Value, json};

/// The same conversation in every version: handshake, a call with progress, a cancelled call, a
/// timed-out call, a server-to-client request (legacy) and the tables empty at the end.
#[test]
fn every_version_runs_a_full_conversation() {
    for version in ProtocolVersion::ALL {
        let mut pair = Pair::connected(&[*version]);
        assert_eq!(pair.client.version(), Some(*version), "{version}");
        let modern = *version == ProtocolVersion::V2026_07_28;

        // A call with progress.
        let id = pair
            .client
            .send_request_with(
                pair.now,
                "tools/call",
                Some(obj(json!({"name": "echo", "arguments": {"text": "hi"}}))),
                RequestOptions::default().with_progress(),
            )
            .unwrap();
        pair.pump();
        let requests = pair.server_requests();
        assert_eq!(requests.len(), 1, "{version}");
        let request = &requests[0];
        assert_eq!(request.method, "tools/call");
        assert_eq!(request.version, *version);
        assert_eq!(request.meta.is_some(), modern, "{version}");
        assert!(request.progress_token.is_some());
        pair.server
            .notify_progress(&request.id, 0.5, Some(1.0), Some("half"))
            .unwrap();
        assert!(matches!(
            pair.server.notify_progress(&request.id, 0.5, None, None),
            Err(SessionError::ProgressNotIncreasing { .. })
        ));
        pair.server
            .respond(
                &request.id,
                raw(json!({"content": [{"type": "text", "text": "hi"}]})),
            )
            .unwrap();
        // Nothing after completion.
        assert!(matches!(
            pair.server.notify_progress(&request.id, 0.9, None, None),
            Err(SessionError::NotInFlight(id)) if id == request.id
        ));
        pair.pump();
        assert!(
            matches!(&pair.client_events[..], [Event::Progress { progress, .. }, Event::Response { id: rid, .. }]
                if *progress == 0.5 && *rid == id),
            "{version}: {:?}",
            pair.client_events
        );
        if let Event::Response { result, .. } = &pair.client_events[1] {
            let result: Value = serde_json::from_str(result.get()).unwrap();
            assert_eq!(
                result.get("resultType").is_some(),
                modern,
                "{version}: resultType only in 2026"
            );
        }
        pair.client_events.clear();

        // A call the client cancels: the server stops, its late answer goes nowhere.
        let id = pair
            .client
            .send_request(pair.now, "tools/list", None)
            .unwrap();
        pair.pump();
        let request = pair.server_requests().remove(0);
        pair.client
            .cancel(pair.now, &id, Some("no longer needed"))
            .unwrap();
        pair.pump();
        assert!(
            pair.server_events
                .iter()
                .any(|e| matches!(e, Event::Cancelled { id: sid, .. } if *sid == request.id)),
            "{version}: {:?}",
            pair.server_events
        );
        assert!(matches!(
            pair.server.respond(&request.id, raw(json!({"tools": []}))),
            Err(SessionError::NotInFlight(_))
        ));
        // Either era: our request cancelled is a Transmit::Cancel.
        assert_eq!(pair.client_cancels, 1, "{version}: a Transmit::Cancel");
        pair.pump();
        assert!(
            pair.client_events.is_empty(),
            "{version}: {:?}",
            pair.client_events
        );
        pair.server_events.clear();

        // A call that times out: cancelled on the wire, a local typed error.
        let id = pair
            .client
            .send_request_with(
                pair.now,
                "prompts/list",
                None,
                RequestOptions::default().with_timeout(Some(Duration::from_secs(5))),
            )
            .unwrap();
        pair.pump();
        let request = pair.server_requests().remove(0);
        assert_eq!(
            pair.client.poll_timeout(),
            Some(pair.now + Duration::from_secs(5))
        );
        pair.advance(Duration::from_secs(5));
        assert!(
            matches!(&pair.client_events[..], [Event::Failed { id: fid, error: RequestError::Timeout(_), .. }] if *fid == id),
            "{version}: {:?}",
            pair.client_events
        );
        let cancel = pair.to_server.last().unwrap();
        assert_eq!(cancel["method"], "notifications/cancelled");
        assert_eq!(cancel["params"]["requestId"], json!(id));
        assert!(
            !pair.to_client.iter().any(|m| m.get("error").is_some()),
            "no wire error for a timeout"
        );
        assert!(matches!(
            pair.server_events.last(),
            Some(Event::Cancelled { .. })
        ));
        assert!(matches!(
            pair.server.respond(&request.id, raw(json!({"prompts": []}))),
            Err(SessionError::NotInFlight(id)) if id == request.id
        ));
        pair.client_events.clear();
        pair.server_events.clear();

        // Server to client (legacy only): sampling, and ping both ways.
        if !modern {
            let sid = pair
                .server
                .send_request(
                    pair.now,
                    "sampling/createMessage",
                    Some(obj(json!({"messages": [], "maxTokens": 10}))),
                    RequestOptions::default(),
                )
                .unwrap();
            pair.pump();
            let request = pair.client_requests().remove(0);
            assert_eq!(request.method, "sampling/createMessage");
            pair.client
                .respond(&request.id, raw(json!({"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"})))
                .unwrap();
            pair.pump();
            assert!(matches!(&pair.server_events[..], [Event::Response { id, .. }] if *id == sid));
            pair.server_events.clear();
            let ping = pair.client.send_request(pair.now, "ping", None).unwrap();
            let sping = pair
                .server
                .send_request(pair.now, "ping", None, RequestOptions::default())
                .unwrap();
            pair.pump();
            assert!(matches!(&pair.client_events[..], [Event::Response { id, .. }] if *id == ping));
            assert!(
                matches!(&pair.server_events[..], [Event::Response { id, .. }] if *id == sping)
            );
            assert!(
                pair.server_requests().is_empty() && pair.client_requests().is_empty(),
                "pings are answered by the sessions"
            );
        } else {
            assert!(matches!(
                pair.client.send_request(pair.now, "ping", None),
                Err(SessionError::MethodNotInVersion { .. })
            ));
            // A modern server session is never handshaken: it has no client to send to.
            assert!(matches!(
                pair.server
                    .send_request(pair.now, "ping", None, RequestOptions::default()),
                Err(SessionError::NotReady)
            ));
        }

        // Every table empty once the grace period for cancelled ids is over.
        pair.advance(Duration::from_secs(61));
        assert!(
            pair.client.table_sizes().is_empty(),
            "{version}: {:?}",
            pair.client.table_sizes()
        );
        assert!(
            pair.server.table_sizes().is_empty(),
            "{version}: {:?}",
            pair.server.table_sizes()
        );
        assert_eq!(pair.client.poll_timeout(), None);
    }
}

#[test]
fn requests_before_initialize_get_a_clear_error_and_the_session_stays_up() {
    let mut server = server();
    let out = {
        let mut p = Pair::new(
            Pair::legacy_client(ProtocolVersion::V2025_11_25),
            server_config(),
        );
        let a = p.raw_to_server(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}));
        let b = p.raw_to_server(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
        (a, b)
    };
    assert_eq!(
        out.0,
        vec![json!({"jsonrpc": "2.0", "id": 1, "result": {}})]
    );
    assert_eq!(out.1[0]["error"]["code"], -32600);
    assert!(
        out.1[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("initialize")
    );
    // The session is still usable.
    server.handle_bytes(std::time::Instant::now(), br#"{"jsonrpc":"2.0","id":3,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#);
    let out = drain(&mut server);
    assert_eq!(out[0]["result"]["protocolVersion"], "2025-06-18");
}

fn server_config() -> modelctx_session::ServerConfig {
    modelctx_session::ServerConfig::new("test-server", "1.0.0", full_server_caps())
}

#[test]
fn the_server_answers_the_clients_version_or_its_latest_legacy_one() {
    for (asked, answered) in [
        ("2024-11-05", "2024-11-05"),
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2025-11-25", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),
        ("2031-01-01", "2025-11-25"),
        ("garbage", "2025-11-25"),
    ] {
        let mut s = server();
        s.handle_bytes(
            std::time::Instant::now(),
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}})
            .to_string()
            .as_bytes(),
        );
        let out = drain(&mut s);
        assert_eq!(out[0]["result"]["protocolVersion"], answered, "{asked}");
        assert_eq!(out[0]["result"]["serverInfo"]["name"], "test-server");
    }
}

#[test]
fn a_client_refuses_a_version_it_does_not_speak() {
    // The client speaks only 2024-11-05; a server that serves only 2025-06-18 answers with that.
    let mut server = server_config();
    server.versions = vec![ProtocolVersion::V2025_06_18];
    let mut pair = Pair::new(Pair::legacy_client(ProtocolVersion::V2024_11_05), server);
    pair.client.connect(pair.now).unwrap();
    pair.pump();
    assert!(
        matches!(&pair.client_events[..], [Event::Closed(modelctx_session::CloseReason::UnsupportedVersion { offered })] if offered == "2025-06-18"),
        "{:?}",
        pair.client_events
    );
    assert!(pair.client.is_closed());
    assert!(matches!(
        pair.client.send_request(pair.now, "tools/list", None),
        Err(SessionError::Closed)
    ));
}

#[test]
fn requests_before_initialized_are_served_but_server_requests_wait() {
    let mut s = server();
    let now = std::time::Instant::now();
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"c","version":"1"}}}"#);
    drain(&mut s);
    // A request that overtook notifications/initialized is served.
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#);
    assert!(
        server_events(&mut s)
            .iter()
            .any(|e| matches!(e, Event::Request(r) if r.method == "tools/list"))
    );
    // Our roots/list waits; ping and logging do not.
    let roots = s
        .send_request(now, "roots/list", None, RequestOptions::default())
        .unwrap();
    s.send_request(now, "ping", None, RequestOptions::default())
        .unwrap();
    assert!(
        s.log(modelctx_session::LogLevel::Info, None, json!("hello"))
            .unwrap()
    );
    let out = drain(&mut s);
    assert_eq!(
        out.iter()
            .map(|m| m["method"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["ping", "notifications/message"]
    );
    assert_eq!(s.table_sizes().queued, 1);
    s.handle_bytes(
        now,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    let out = drain(&mut s);
    assert_eq!(out[0]["method"], "roots/list");
    assert_eq!(out[0]["id"], json!(roots));
    assert_eq!(s.table_sizes().queued, 0);
}

#[test]
fn a_repeated_or_early_initialized_changes_nothing() {
    // Found by the fuzz target: a second `notifications/initialized` used to close the session.
    let mut pair = Pair::connected(&[ProtocolVersion::V2025_11_25]);
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert!(pair.raw_to_server(initialized.clone()).is_empty());
    assert!(!pair.server.is_closed());
    assert!(pair.server.is_initialized());
    assert_eq!(
        pair.raw_to_server(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))[0]["result"],
        json!({})
    );
    // Before initialize, on a fresh server, it is ignored too.
    let mut s = server();
    s.handle_bytes(pair.now, initialized.to_string().as_bytes());
    assert!(!s.is_closed() && !s.is_initialized());
    s.handle_bytes(
        pair.now,
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})
            .to_string()
            .as_bytes(),
    );
    assert_eq!(drain(&mut s)[0]["result"], json!({}));
}

#[test]
fn capabilities_gate_both_directions() {
    // The server declares only tools; the client declares nothing.
    let mut server = server_config();
    server.capabilities = obj(json!({"tools": {}}));
    let mut client = Pair::legacy_client(ProtocolVersion::V2025_11_25);
    client.capabilities = obj(json!({}));
    let mut pair = Pair::new(client, server);
    pair.client.connect(pair.now).unwrap();
    pair.pump();
    // We never send what the peer did not declare...
    assert!(matches!(
        pair.client.send_request(pair.now, "prompts/list", None),
        Err(SessionError::NotDeclared { capability, .. }) if capability == "prompts"
    ));
    assert!(matches!(
        pair.server.send_request(
            pair.now,
            "sampling/createMessage",
            None,
            RequestOptions::default()
        ),
        Err(SessionError::NotDeclared { .. })
    ));
    assert!(matches!(
        pair.server
            .notify_list_changed(modelctx_session::ListKind::Tools),
        Err(SessionError::NotDeclared { .. })
    ));
    assert!(matches!(
        pair.server
            .log(modelctx_session::LogLevel::Error, None, json!("x")),
        Err(SessionError::NotDeclared { capability, .. }) if capability == "logging"
    ));
    // ...and a request for a feature we did not declare gets -32601, both ways.
    let out = pair.raw_to_server(json!({"jsonrpc": "2.0", "id": 50, "method": "resources/list"}));
    assert_eq!(out[0]["error"]["code"], -32601);
    pair.client.handle_bytes(pair.now, br#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}"#);
    let reply = pair.client.poll_transmit().unwrap();
    let reply = match reply {
        modelctx_session::Transmit::Message { message, .. } => wire(&message),
        _ => panic!(),
    };
    assert_eq!(reply["error"]["code"], -32601);
    // Methods of other versions are unknown.
    let out = pair.raw_to_server(json!({"jsonrpc": "2.0", "id": 51, "method": "server/discover"}));
    assert_eq!(out[0]["error"]["code"], -32601);
}

#[test]
fn a_request_reusing_an_id_in_flight_is_rejected() {
    let mut s = initialized_server("2025-06-18", json!({}));
    let now = std::time::Instant::now();
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#);
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#);
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0]["error"]["code"], -32600);
    assert_eq!(out[0]["id"], "a");
    // Once answered, the id may be used again (ids are not remembered forever).
    s.respond(&"a".into(), raw(json!({"tools": []}))).unwrap();
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#);
    assert_eq!(drain(&mut s).len(), 1, "the answer only");
    assert!(
        server_events(&mut s)
            .iter()
            .filter(|e| matches!(e, Event::Request(_)))
            .count()
            == 2
    );
}

#[test]
fn initialize_is_never_cancelled() {
    let mut pair = Pair::new(
        Pair::legacy_client(ProtocolVersion::V2025_11_25),
        server_config(),
    );
    pair.client.connect(pair.now).unwrap();
    let init_id = match pair.client.poll_transmit().unwrap() {
        modelctx_session::Transmit::Message { message, .. } => message.id().cloned().unwrap(),
        _ => panic!(),
    };
    assert!(matches!(
        pair.client.cancel(pair.now, &init_id, None),
        Err(SessionError::Invalid(why)) if why == "initialize is never cancelled"
    ));
}

#[test]
fn duplicate_progress_tokens_and_late_answers() {
    let mut s = initialized_server("2025-11-25", json!({}));
    let now = std::time::Instant::now();
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"progressToken":"t"}}}"#);
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"progressToken":"t"}}}"#);
    let out = drain(&mut s);
    assert_eq!(out[0]["id"], 2);
    assert_eq!(out[0]["error"]["code"], -32602);
    // A response to nothing we sent is ignored.
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":99,"result":{}}"#);
    assert!(drain(&mut s).is_empty());
    assert!(
        server_events(&mut s)
            .iter()
            .all(|e| !matches!(e, Event::Response { .. }))
    );
}

#[test]
fn progress_resets_the_timeout_up_to_a_maximum() {
    let mut pair = Pair::connected(&[ProtocolVersion::V2025_06_18]);
    let options = RequestOptions::default()
        .with_timeout(Some(Duration::from_secs(10)))
        .with_progress_reset(Duration::from_secs(25));
    let id = pair
        .client
        .send_request_with(
            pair.now,
            "tools/call",
            Some(obj(json!({"name": "slow"}))),
            options,
        )
        .unwrap();
    pair.pump();
    let request = pair.server_requests().remove(0);
    for step in 1..=3 {
        pair.advance(Duration::from_secs(8));
        pair.server
            .notify_progress(&request.id, f64::from(step), None, None)
            .unwrap();
        pair.pump();
    }
    // 24 s in: progress kept it alive past 10 s, but the total is capped at 25 s.
    assert!(
        !pair
            .client_events
            .iter()
            .any(|e| matches!(e, Event::Failed { .. }))
    );
    assert_eq!(
        pair.client.poll_timeout(),
        Some(pair.now + Duration::from_secs(1))
    );
    pair.advance(Duration::from_secs(1));
    assert!(pair.client_events.iter().any(
        |e| matches!(e, Event::Failed { id: f, error: RequestError::Timeout(_), .. } if *f == id)
    ));
}

/// The layer above pauses a call's timeout while it answers the server's request: the pause
/// does not count, not even against the total that progress may extend the timeout to.
#[test]
fn a_paused_timeout_does_not_run_and_resumes_where_it_stopped() {
    let mut pair = Pair::connected(&[ProtocolVersion::V2025_06_18]);
    let options = RequestOptions::default()
        .with_timeout(Some(Duration::from_secs(10)))
        .with_progress_reset(Duration::from_secs(25));
    let id = pair
        .client
        .send_request_with(
            pair.now,
            "tools/call",
            Some(obj(json!({"name": "slow"}))),
            options,
        )
        .unwrap();
    pair.pump();
    let request = pair.server_requests().remove(0);
    pair.advance(Duration::from_secs(4));
    assert!(pair.client.pause_timeout(pair.now, &id));
    assert!(!pair.client.pause_timeout(pair.now, &id), "paused already");
    assert_eq!(pair.client.poll_timeout(), None, "no deadline while paused");
    pair.advance(Duration::from_secs(60));
    // Progress while paused restarts the timeout, to run once the pause ends.
    pair.server
        .notify_progress(&request.id, 1.0, None, None)
        .unwrap();
    pair.pump();
    pair.advance(Duration::from_secs(60));
    assert!(
        !pair
            .client_events
            .iter()
            .any(|e| matches!(e, Event::Failed { .. })),
        "{:?}",
        pair.client_events
    );
    assert!(pair.client.resume_timeout(pair.now, &id));
    assert!(
        !pair.client.resume_timeout(pair.now, &id),
        "running already"
    );
    // Restarted by the progress: 10 s from the end of the pause.
    assert_eq!(
        pair.client.poll_timeout(),
        Some(pair.now + Duration::from_secs(10))
    );
    pair.advance(Duration::from_secs(8));
    pair.server
        .notify_progress(&request.id, 2.0, None, None)
        .unwrap();
    pair.pump();
    // 4 + 8 s counted: the total of 25 s leaves 13, more than the 10 s of the timeout.
    assert_eq!(
        pair.client.poll_timeout(),
        Some(pair.now + Duration::from_secs(10))
    );
    pair.advance(Duration::from_secs(9));
    pair.server
        .notify_progress(&request.id, 3.0, None, None)
        .unwrap();
    pair.pump();
    // 4 + 8 + 9 s counted: capped at the 4 s left of the 25.
    assert_eq!(
        pair.client.poll_timeout(),
        Some(pair.now + Duration::from_secs(4))
    );
    pair.advance(Duration::from_secs(4));
    let waited = pair.client_events.iter().find_map(|e| match e {
        Event::Failed {
            id: f,
            error: RequestError::Timeout(waited),
            ..
        } if *f == id => Some(*waited),
        _ => None,
    });
    assert_eq!(
        waited,
        Some(Duration::from_secs(25)),
        "the pause not counted"
    );
}

#[test]
fn a_timeout_that_is_not_running_cannot_be_paused() {
    let mut pair = Pair::connected(&[ProtocolVersion::V2025_06_18]);
    let untimed = pair
        .client
        .send_request_with(
            pair.now,
            "tools/list",
            None,
            RequestOptions::default().with_timeout(None),
        )
        .unwrap();
    assert!(!pair.client.pause_timeout(pair.now, &untimed));
    assert!(!pair.client.resume_timeout(pair.now, &untimed));
    let gone = modelctx_types::RequestId::from(999);
    assert!(!pair.client.pause_timeout(pair.now, &gone));
    assert!(!pair.client.resume_timeout(pair.now, &gone));
}

#[test]
fn logging_level_filters_legacy_log_messages() {
    let mut s = initialized_server("2025-03-26", json!({}));
    let now = std::time::Instant::now();
    s.handle_bytes(
        now,
        br#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"warning"}}"#,
    );
    assert_eq!(drain(&mut s)[0]["result"], json!({}));
    assert_eq!(s.log_level(), Some(modelctx_session::LogLevel::Warning));
    assert!(
        !s.log(modelctx_session::LogLevel::Info, None, json!("quiet"))
            .unwrap()
    );
    assert!(
        s.log(modelctx_session::LogLevel::Error, Some("db"), json!("loud"))
            .unwrap()
    );
    let out = drain(&mut s);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0]["params"],
        json!({"level": "error", "logger": "db", "data": "loud"})
    );
    s.handle_bytes(
        now,
        br#"{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"loud"}}"#,
    );
    assert_eq!(drain(&mut s)[0]["error"]["code"], -32602);
}

#[test]
fn bad_input_gets_a_clear_error_and_the_session_lives_on() {
    let mut s = initialized_server("2025-11-25", json!({}));
    let now = std::time::Instant::now();
    s.handle_bytes(now, b"{not json");
    s.handle_bytes(now, br#"{"jsonrpc":"1.0","id":4,"method":"x"}"#);
    s.handle_bytes(now, br#"[{"jsonrpc":"2.0","id":5,"method":"ping"}]"#);
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":6,"method":"no/such"}"#);
    let out = drain(&mut s);
    let codes: Vec<i64> = out
        .iter()
        .map(|m| m["error"]["code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [-32700, -32600, -32600, -32601]);
    assert_eq!(out[1]["id"], 4);
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#);
    assert_eq!(drain(&mut s)[0]["result"], json!({}));
    // An error code that is never sent.
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#);
    assert!(matches!(
        s.respond_error(&8.into(), ErrorObject::new(ErrorCode::REQUEST_TIMEOUT, "x")),
        Err(SessionError::Invalid(why)) if why.contains("is never sent")
    ));
}

#[test]
fn a_client_reports_bad_input_without_answering_and_lives_on() {
    for version in [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28] {
        let mut pair = Pair::connected(&[version]);
        for bad in [
            &b"{not json"[..],
            br#"{"jsonrpc":"1.0","id":4,"method":"x"}"#,
            b"[]",
            br#"[{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}]"#,
        ] {
            pair.client.handle_bytes(pair.now, bad);
        }
        assert!(
            pair.client.poll_transmit().is_none(),
            "{version}: nothing is written"
        );
        let codes: Vec<i64> = std::iter::from_fn(|| pair.client.poll_event())
            .map(|e| match e {
                Event::Unreadable(error) => error.code.0,
                other => panic!("{version}: {other:?}"),
            })
            .collect();
        assert_eq!(codes, [-32700, -32600, -32600, -32600], "{version}");
        // The session goes on.
        pair.client
            .send_request(pair.now, "tools/list", None)
            .unwrap();
        pair.pump();
        assert_eq!(pair.server_requests().len(), 1, "{version}");
    }
}

#[test]
fn bounds_refuse_new_work_instead_of_growing() {
    let mut config = server_config();
    config.limits.max_incoming = 2;
    let mut pair = Pair::new(Pair::legacy_client(ProtocolVersion::V2025_11_25), config);
    pair.client.connect(pair.now).unwrap();
    pair.pump();
    for id in 10..13 {
        pair.raw_to_server(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
            .into_iter()
            .for_each(|m| {
                assert_eq!(m["id"], 12);
                assert_eq!(m["error"]["code"], -32603);
            });
    }
    assert_eq!(pair.server.table_sizes().incoming, 2);

    let mut client = Pair::legacy_client(ProtocolVersion::V2025_11_25);
    client.limits.max_outgoing = 3;
    let mut pair = Pair::new(client, server_config());
    pair.client.connect(pair.now).unwrap();
    pair.pump();
    for _ in 0..3 {
        pair.client
            .send_request(pair.now, "tools/list", None)
            .unwrap();
    }
    assert_eq!(
        pair.client.send_request(pair.now, "tools/list", None),
        Err(SessionError::TooManyInFlight { limit: 3 })
    );
    pair.client.close();
    pair.pump();
    assert_eq!(
        pair.client_events
            .iter()
            .filter(|e| matches!(
                e,
                Event::Failed {
                    error: RequestError::Closed(CloseReason::Local),
                    ..
                }
            ))
            .count(),
        3
    );
    assert!(pair.client.table_sizes().is_empty());
}

#[test]
fn a_transport_that_ends_fails_every_pending_request_at_once() {
    let mut pair = Pair::connected(&[ProtocolVersion::V2025_11_25]);
    let ids: Vec<_> = (0..3)
        .map(|_| {
            pair.client
                .send_request(pair.now, "tools/list", None)
                .unwrap()
        })
        .collect();
    let server_id = pair
        .server
        .send_request(pair.now, "roots/list", None, RequestOptions::default())
        .unwrap();
    pair.pump();
    pair.client_events.clear();
    pair.server_events.clear();
    pair.client
        .transport_closed("the server process exited with status 1");
    pair.server.transport_closed("stdin closed");
    pair.pump();
    let failed: Vec<_> = pair
        .client_events
        .iter()
        .filter_map(|e| match e {
            Event::Failed { id, error, .. } => Some((id.clone(), error.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 3);
    for ((id, error), sent) in failed.iter().zip(&ids) {
        assert_eq!(id, sent);
        assert!(error.contains("exited with status 1"), "{error}");
    }
    assert!(matches!(
        pair.client_events.last(),
        Some(Event::Closed(CloseReason::Transport(why))) if why.contains("status 1")
    ));
    assert!(matches!(
        &pair.server_events[..],
        [
            Event::Failed { id, error: RequestError::Closed(CloseReason::Transport(_)), .. },
            Event::Closed(CloseReason::Transport(_)),
        ] if *id == server_id
    ));
    assert!(pair.client.table_sizes().is_empty());
    assert!(pair.server.table_sizes().is_empty());
    assert!(pair.client.poll_transmit().is_none());
    assert!(pair.server.poll_transmit().is_none());
}

#[test]
fn the_server_cancels_its_own_request_and_the_client_stops() {
    let mut pair = Pair::connected(&[ProtocolVersion::V2025_11_25]);
    let id = pair
        .server
        .send_request(pair.now, "roots/list", None, RequestOptions::default())
        .unwrap();
    pair.pump();
    let request = pair.client_requests().remove(0);
    pair.server
        .cancel(pair.now, &id, Some("changed my mind"))
        .unwrap();
    pair.pump();
    assert!(matches!(
        &pair.client_events[..],
        [Event::Cancelled { id, reason: Some(r) }] if *id == request.id && r == "changed my mind"
    ));
    assert!(matches!(
        pair.client.respond(&request.id, raw(json!({"roots": []}))),
        Err(SessionError::NotInFlight(id)) if id == request.id
    ));
    assert!(pair.client.table_sizes().is_idle());
    assert!(pair.server.table_sizes().is_idle());
}

#[test]
fn a_modern_client_refuses_server_requests() {
    let mut pair = Pair::connected(&[ProtocolVersion::V2026_07_28]);
    pair.client.handle_bytes(
        pair.now,
        br#"{"jsonrpc":"2.0","id":1,"method":"roots/list"}"#,
    );
    match pair.client.poll_transmit() {
        Some(modelctx_session::Transmit::Message { message, .. }) => {
            assert_eq!(wire(&message)["error"]["code"], -32601);
        }
        other => panic!("{other:?}"),
    }
    assert!(pair.client.poll_event().is_none());
}

#[test]
fn a_queued_server_request_that_times_out_never_reaches_the_wire() {
    let mut s = server();
    let now = std::time::Instant::now();
    s.handle_bytes(now, br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"roots":{}},"clientInfo":{"name":"c","version":"1"}}}"#);
    drain(&mut s);
    server_events(&mut s);
    let options = RequestOptions::default().with_timeout(Some(Duration::from_secs(1)));
    let id = s.send_request(now, "roots/list", None, options).unwrap();
    s.handle_timeout(now + Duration::from_secs(1));
    assert!(
        drain(&mut s).is_empty(),
        "no cancellation for a request never sent"
    );
    assert!(
        matches!(&server_events(&mut s)[..], [Event::Failed { id: f, error: RequestError::Timeout(_), .. }] if *f == id)
    );
    s.handle_bytes(
        now,
        br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert!(drain(&mut s).is_empty(), "nor is it sent later");
    assert!(s.table_sizes().is_empty());
}

/// Finding 12: a request cancelled while its handler runs, and a new request with the same id:
/// the old handler's late answer (through `respond_to` with its generation) is refused and
/// sent nowhere; the new request gets its own answer, and can still be cancelled.
#[test]
fn finding_12_a_stale_answer_never_answers_a_reused_id() {
    let mut s = initialized_server("2025-06-18", json!({}));
    let now = std::time::Instant::now();
    let call = |text: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": text}}})
    };
    let take = |s: &mut modelctx_session::ServerSession| {
        server_events(s)
            .into_iter()
            .find_map(|e| match e {
                Event::Request(r) => Some(r),
                _ => None,
            })
            .expect("a request")
    };
    s.handle_bytes(now, call("slow").to_string().as_bytes());
    let old = take(&mut s);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 1}});
    s.handle_bytes(now, cancel.to_string().as_bytes());
    assert!(
        server_events(&mut s)
            .iter()
            .any(|e| matches!(e, Event::Cancelled { .. }))
    );
    // The id is free again: a new request takes it, with another generation.
    s.handle_bytes(now, call("B").to_string().as_bytes());
    let new = take(&mut s);
    assert_eq!(new.id, old.id);
    assert_ne!(new.generation, old.generation);
    // The cancelled handler finishes late: its answer is refused, nothing is written.
    assert!(matches!(
        s.respond_to(
            &old.id,
            old.generation,
            raw(json!({"content": [], "old": true}))
        ),
        Err(SessionError::NotInFlight(_))
    ));
    assert!(matches!(
        s.respond_error_to(
            &old.id,
            old.generation,
            ErrorObject::new(ErrorCode::INTERNAL_ERROR, "old")
        ),
        Err(SessionError::NotInFlight(_))
    ));
    assert!(drain(&mut s).is_empty(), "the stale answer went nowhere");
    assert_eq!(
        s.table_sizes().incoming,
        1,
        "the new request is still in flight"
    );
    // The new request can still be cancelled, and then answered by nobody.
    s.handle_bytes(now, cancel.to_string().as_bytes());
    assert!(
        server_events(&mut s)
            .iter()
            .any(|e| matches!(e, Event::Cancelled { .. }))
    );
    assert_eq!(s.table_sizes().incoming, 0);
    // A third start of id 1 is answered with its own generation.
    s.handle_bytes(now, call("C").to_string().as_bytes());
    let third = take(&mut s);
    assert!(matches!(
        s.respond_to(&old.id, new.generation, raw(json!({"content": []}))),
        Err(SessionError::NotInFlight(id)) if id == old.id
    ));
    s.respond_to(
        &third.id,
        third.generation,
        raw(json!({"content": [], "third": true})),
    )
    .unwrap();
    let out = drain(&mut s);
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0]["id"], 1);
    assert_eq!(out[0]["result"]["third"], true);
    assert_eq!(s.table_sizes().incoming, 0);
}

/// A listen stream's `resourceSubscriptions` URIs are capped in length (finding 15).
#[test]
fn finding_15_listen_uris_are_length_capped() {
    let mut s = server();
    let now = std::time::Instant::now();
    let listen = |id: i64, uri: String| {
        json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": {
            "_meta": modern_meta(json!({})),
            "notifications": {"resourceSubscriptions": [uri]}}})
    };
    s.handle_bytes(
        now,
        listen(1, "x".repeat(8 * 1024 + 1)).to_string().as_bytes(),
    );
    let out = drain(&mut s);
    assert_eq!(out[0]["error"]["code"], -32602, "{out:?}");
    assert!(
        out[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 8192"),
        "{out:?}"
    );
    assert_eq!(s.table_sizes().incoming, 0);
    s.handle_bytes(now, listen(2, "x".repeat(8 * 1024)).to_string().as_bytes());
    let out = drain(&mut s);
    assert!(out.iter().all(|m| m.get("error").is_none()), "{out:?}");
    assert_eq!(s.table_sizes().incoming, 1);
}

/// Finding 12, the client's side: the server cancels its request 7 while the client's handler
/// runs and sends a new request 7; the old handler's late answer (through `respond_to` with its
/// generation) is refused and sent nowhere, and the new request gets its own answer.
#[test]
fn finding_12_a_client_s_stale_answer_never_answers_a_reused_id() {
    let mut pair = Pair::connected(&[ProtocolVersion::V2025_11_25]);
    let now = pair.now;
    let roots = json!({"jsonrpc": "2.0", "id": 7, "method": "roots/list"});
    let take = |client: &mut modelctx_session::ClientSession| {
        std::iter::from_fn(|| client.poll_event())
            .find_map(|e| match e {
                Event::Request(r) => Some(r),
                _ => None,
            })
            .expect("a request")
    };
    pair.client.handle_bytes(now, roots.to_string().as_bytes());
    let old = take(&mut pair.client);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 7}});
    pair.client.handle_bytes(now, cancel.to_string().as_bytes());
    assert!(
        std::iter::from_fn(|| pair.client.poll_event())
            .any(|e| matches!(e, Event::Cancelled { .. }))
    );
    pair.client.handle_bytes(now, roots.to_string().as_bytes());
    let new = take(&mut pair.client);
    assert_eq!(new.id, old.id);
    assert_ne!(new.generation, old.generation);
    while pair.client.poll_transmit().is_some() {}
    // The cancelled handler's late answer is refused: nothing is written.
    assert!(matches!(
        pair.client.respond_to(
            &old.id,
            old.generation,
            raw(json!({"roots": [], "old": true}))
        ),
        Err(SessionError::NotInFlight(_))
    ));
    assert!(matches!(
        pair.client.respond_error_to(
            &old.id,
            old.generation,
            ErrorObject::new(ErrorCode::INTERNAL_ERROR, "old")
        ),
        Err(SessionError::NotInFlight(_))
    ));
    assert!(
        pair.client.poll_transmit().is_none(),
        "the stale answer went nowhere"
    );
    assert_eq!(pair.client.table_sizes().incoming, 1);
    // The new request is answered with its own generation, once.
    pair.client
        .respond_to(
            &new.id,
            new.generation,
            raw(json!({"roots": [], "new": true})),
        )
        .unwrap();
    let sent: Vec<modelctx_session::Transmit> =
        std::iter::from_fn(|| pair.client.poll_transmit()).collect();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert!(format!("{sent:?}").contains("new"), "{sent:?}");
    assert_eq!(pair.client.table_sizes().incoming, 0);
}
