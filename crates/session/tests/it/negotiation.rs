//! Version negotiation (client versions x server versions) and the client's era probe.

use crate::common;

use std::time::Duration;

use common::*;
use modelctx_session::{
    ClientConfig, ClientSession, CloseReason, EraChoice, EraDecision, Event, ProtocolVersion,
    ServerConfig, Transmit,
};
use modelctx_types::Message;
use serde_json::{Value, json};

use ProtocolVersion as V;

/// What the rules say the outcome is.
fn expected(client: &[V], server: &[V]) -> Result<V, &'static str> {
    let modern = client
        .iter()
        .filter(|v| v.era() == modelctx_session::Era::Modern && server.contains(v))
        .max();
    if let Some(v) = modern {
        return Ok(*v);
    }
    let Some(offer) = client
        .iter()
        .filter(|v| v.era() == modelctx_session::Era::Legacy)
        .max()
    else {
        return Err("no legacy version to fall back to");
    };
    let answer = if server.contains(offer) {
        *offer
    } else {
        match server
            .iter()
            .filter(|v| v.era() == modelctx_session::Era::Legacy)
            .max()
        {
            Some(v) => *v,
            None => return Err("server refuses initialize"),
        }
    };
    if client.contains(&answer) {
        Ok(answer)
    } else {
        Err("client refuses the answer")
    }
}

#[test]
fn negotiation_matrix() {
    let mut sets: Vec<Vec<V>> = V::ALL.iter().map(|v| vec![*v]).collect();
    sets.push(V::ALL.to_vec());
    sets.push(
        V::ALL
            .iter()
            .copied()
            .filter(|v| v.era() == modelctx_session::Era::Legacy)
            .collect(),
    );
    sets.push(vec![V::V2024_11_05, V::V2025_03_26]);
    sets.push(vec![V::V2025_06_18, V::V2026_07_28]);
    let mut checked = 0;
    for client_set in &sets {
        for server_set in &sets {
            let mut client = ClientConfig::new("c", "1", full_client_caps());
            client.versions = client_set.clone();
            let mut server = ServerConfig::new("s", "1", full_server_caps());
            server.versions = server_set.clone();
            let mut pair = Pair::new(client, server);
            pair.client.connect(pair.now).unwrap();
            pair.pump();
            let outcome = match pair.client_events.first() {
                Some(Event::Ready(peer)) => Ok(peer.version),
                Some(Event::Closed(reason)) => Err(reason.to_string()),
                other => panic!("{client_set:?} x {server_set:?}: {other:?}"),
            };
            match (expected(client_set, server_set), outcome) {
                (Ok(want), Ok(got)) => {
                    assert_eq!(want, got, "{client_set:?} x {server_set:?}");
                    // The server agrees (legacy: it negotiated the same version).
                    if want.era() == modelctx_session::Era::Legacy {
                        assert_eq!(pair.server.version(), Some(want));
                    }
                }
                (Err(_), Err(_)) => {}
                (want, got) => {
                    panic!("{client_set:?} x {server_set:?}: expected {want:?}, got {got:?}")
                }
            }
            checked += 1;
        }
    }
    assert_eq!(checked, sets.len() * sets.len());
}

/// A scripted server: answers each request with a function of its method.
fn scripted(
    config: ClientConfig,
    answer: impl Fn(&str, &Value) -> Option<Value>,
) -> (ClientSession, Vec<Value>, Vec<Event>) {
    let mut client = ClientSession::new(config);
    let now = std::time::Instant::now();
    client.connect(now).unwrap();
    let mut sent = Vec::new();
    let mut events = Vec::new();
    for _ in 0..10 {
        let mut quiet = true;
        while let Some(t) = client.poll_transmit() {
            quiet = false;
            let Transmit::Message { message, .. } = t else {
                continue;
            };
            let value = wire(&message);
            if let Message::Request(r) = &message
                && let Some(reply) = answer(&r.method, &value)
            {
                let mut reply = reply;
                reply["jsonrpc"] = json!("2.0");
                reply["id"] = value["id"].clone();
                sent.push(value);
                client.handle_bytes(now, reply.to_string().as_bytes());
            } else {
                sent.push(value);
            }
        }
        events.extend(std::iter::from_fn(|| client.poll_event()));
        if quiet {
            break;
        }
    }
    (client, sent, events)
}

fn legacy_init(params: &Value) -> Value {
    json!({"result": {"protocolVersion": params["params"]["protocolVersion"], "capabilities": {"tools": {}}, "serverInfo": {"name": "old", "version": "1"}}})
}

fn methods(sent: &[Value]) -> Vec<&str> {
    sent.iter().filter_map(|m| m["method"].as_str()).collect()
}

#[test]
fn a_server_answering_everything_with_an_empty_object_is_legacy() {
    let config = ClientConfig::new("c", "1", full_client_caps());
    let (client, sent, events) = scripted(config, |method, v| match method {
        "initialize" => Some(legacy_init(v)),
        _ => Some(json!({"result": {}})),
    });
    assert_eq!(
        methods(&sent),
        ["server/discover", "initialize", "notifications/initialized"]
    );
    assert!(matches!(&events[..], [Event::Ready(p)] if p.version == V::V2025_11_25));
    assert_eq!(client.era_decision(), Some(EraDecision::Legacy));
    // The probe carried the modern meta.
    assert_eq!(
        sent[0]["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"],
        "2026-07-28"
    );
    assert!(sent[0]["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"].is_object());
}

#[test]
fn probe_fallbacks_and_modern_answers() {
    let legacy_errors = [-32601, -32602, -32600, -32603, -32000];
    for code in legacy_errors {
        let (client, sent, _) = scripted(
            ClientConfig::new("c", "1", full_client_caps()),
            |method, v| match method {
                "initialize" => Some(legacy_init(v)),
                _ => Some(json!({"error": {"code": code, "message": "no"}})),
            },
        );
        assert_eq!(methods(&sent)[1], "initialize", "{code}");
        assert_eq!(client.era_decision(), Some(EraDecision::Legacy), "{code}");
    }
    // A malformed result, and a valid one sharing no version.
    for result in [
        json!({"supportedVersions": "2026-07-28"}),
        json!({"supportedVersions": ["2030-01-01"], "capabilities": {}}),
    ] {
        let (client, _, _) = scripted(
            ClientConfig::new("c", "1", full_client_caps()),
            |method, v| match method {
                "initialize" => Some(legacy_init(v)),
                _ => Some(json!({"result": result.clone()})),
            },
        );
        assert_eq!(client.era_decision(), Some(EraDecision::Legacy), "{result}");
    }
    // A valid result: modern, with the server's capabilities.
    let (client, sent, events) = scripted(
        ClientConfig::new("c", "1", full_client_caps()),
        |method, _| match method {
            "server/discover" => Some(
                json!({"result": {"supportedVersions": ["2025-11-25", "2026-07-28"], "capabilities": {"tools": {}},
            "ttlMs": 0, "cacheScope": "public", "resultType": "complete", "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "new", "version": "1"}}}}),
            ),
            _ => None,
        },
    );
    assert_eq!(methods(&sent), ["server/discover"]);
    assert_eq!(
        client.era_decision(),
        Some(EraDecision::Modern(V::V2026_07_28))
    );
    match &events[..] {
        [Event::Ready(p)] => {
            assert_eq!(p.info.as_ref().unwrap()["name"], "new");
            assert!(p.capabilities.as_ref().unwrap().contains_key("tools"));
        }
        other => panic!("{other:?}"),
    }
    // -32020 and -32021 mean modern.
    for code in [-32020, -32021] {
        let (client, _, _) = scripted(ClientConfig::new("c", "1", full_client_caps()), |_, _| {
            Some(json!({"error": {"code": code, "message": "modern"}}))
        });
        assert_eq!(
            client.era_decision(),
            Some(EraDecision::Modern(V::V2026_07_28)),
            "{code}"
        );
    }
    // -32022 naming no modern version of ours: legacy; naming one: probed again with it.
    let (client, sent, _) = scripted(
        ClientConfig::new("c", "1", full_client_caps()),
        |method, v| match method {
            "initialize" => Some(legacy_init(v)),
            _ => Some(
                json!({"error": {"code": -32022, "message": "no", "data": {"supported": ["2025-11-25"], "requested": "2026-07-28"}}}),
            ),
        },
    );
    assert_eq!(
        methods(&sent),
        ["server/discover", "initialize", "notifications/initialized"]
    );
    assert_eq!(client.era_decision(), Some(EraDecision::Legacy));
}

#[test]
fn a_probe_that_times_out_or_fails_on_the_transport_falls_back() {
    let config = ClientConfig::new("c", "1", full_client_caps());
    let timeout = config.handshake_timeout;
    let mut client = ClientSession::new(config.clone());
    let now = std::time::Instant::now();
    client.connect(now).unwrap();
    client.poll_transmit().unwrap();
    assert_eq!(client.poll_timeout(), Some(now + timeout));
    client.handle_timeout(now + timeout);
    let sent: Vec<Transmit> = std::iter::from_fn(|| client.poll_transmit()).collect();
    // The probe is cancelled (the modern way: the transport closes its stream), then initialize.
    assert!(matches!(sent[0], Transmit::Cancel { .. }));
    assert!(
        matches!(&sent[1], Transmit::Message { message, .. } if message.method() == Some("initialize"))
    );
    assert!(
        std::iter::from_fn(|| client.poll_event()).next().is_none(),
        "no failure surfaces for the probe"
    );

    let mut client = ClientSession::new(config.clone());
    client.connect(now).unwrap();
    client.poll_transmit().unwrap();
    client.probe_failed(now).unwrap();
    assert!(
        matches!(client.poll_transmit(), Some(Transmit::Message { message, .. }) if message.method() == Some("initialize"))
    );

    // Pinned to the modern era: no fallback, a clear error.
    let mut pinned = config;
    pinned.era = EraChoice::Modern;
    let mut client = ClientSession::new(pinned);
    client.connect(now).unwrap();
    client.poll_transmit().unwrap();
    client.probe_failed(now).unwrap();
    assert!(matches!(
        client.poll_event(),
        Some(Event::Closed(CloseReason::ProbeFailed(_)))
    ));
    let _ = Duration::ZERO;
}

#[test]
fn an_initialize_that_fails_closes_the_client_with_a_clear_error() {
    let mut config = ClientConfig::new("c", "1", full_client_caps());
    config.era = EraChoice::Legacy;
    let (client, _, events) = scripted(config.clone(), |_, _| {
        Some(json!({"error": {"code": -32603, "message": "boom"}}))
    });
    assert!(client.is_closed());
    assert!(
        matches!(&events[..], [Event::Closed(CloseReason::InitializeFailed(e))] if e.message == "boom")
    );
    let (_, _, events) = scripted(config, |_, _| {
        Some(json!({"result": {"protocolVersion": 5}}))
    });
    assert!(matches!(
        &events[..],
        [Event::Closed(CloseReason::InvalidInitializeResult(_))]
    ));
}

#[test]
fn a_transport_failure_falls_back_on_the_probe_closes_on_initialize_and_fails_other_requests() {
    let now = std::time::Instant::now();
    let config = ClientConfig::new("c", "1", full_client_caps());
    let sent = |client: &mut ClientSession| match client.poll_transmit() {
        Some(Transmit::Message { message, .. }) => message,
        other => panic!("expected a message, got {other:?}"),
    };

    // The probe: the HTTP 404 of a legacy server means initialize follows.
    let mut client = ClientSession::new(config.clone());
    client.connect(now).unwrap();
    let probe = sent(&mut client);
    client.request_failed(now, probe.id().unwrap(), "HTTP 404");
    let init = sent(&mut client);
    assert_eq!(init.method(), Some("initialize"));
    assert!(client.poll_event().is_none(), "the probe fails quietly");

    // initialize: the session closes with what the transport saw.
    client.request_failed(now, init.id().unwrap(), "HTTP 500");
    assert!(matches!(
        client.poll_event(),
        Some(Event::Closed(CloseReason::Transport(why))) if why.contains("HTTP 500")
    ));
    assert_eq!(client.table_sizes().outgoing, 0);

    // Any other request fails alone and the session lives on; a late report is ignored.
    let mut pair = Pair::connected(&[V::V2025_11_25]);
    let client = &mut pair.client;
    let id = client.send_request(now, "tools/list", None).unwrap();
    client.request_failed(now, &id, "the stream broke");
    assert!(matches!(
        client.poll_event(),
        Some(Event::Failed { id: failed, error: modelctx_session::RequestError::Transport(why), .. })
            if failed == id && why == "the stream broke"
    ));
    client.request_failed(now, &id, "again");
    assert!(client.poll_event().is_none());
    assert!(!client.is_closed());
    assert_eq!(client.table_sizes().outgoing, 0);
}
