//! Resources, templates and subscriptions in every protocol version, in memory.

use crate::common;

use common::*;
use modelctx_server::{
    CacheHint, Context, ReadRequest, Resource, ResourceContents, ResourceError, ResourceTemplate,
    Server, Settings, Subscribe,
};
use modelctx_session::{Era, Event, ProtocolVersion};
use serde_json::json;

async fn readme(_: Context, request: ReadRequest) -> ResourceContents {
    ResourceContents::text(request.uri, "# Hello").mime_type("text/markdown")
}

async fn logo(_: Context, request: ReadRequest) -> ResourceContents {
    ResourceContents::blob(request.uri, b"\x89PNG").mime_type("image/png")
}

async fn issue(_: Context, request: ReadRequest) -> Result<ResourceContents, ResourceError> {
    let number = request.var("number").unwrap_or_default();
    if number == "404" {
        return Err(ResourceError::NotFound(request.uri));
    }
    let repo = request.var("repo").unwrap_or_default();
    Ok(ResourceContents::text(
        request.uri,
        format!("{repo} issue {number}"),
    ))
}

fn server() -> Server {
    Server::builder("resources", "1")
        .resource(Resource::new("file:///readme.md", "readme", readme).description("The readme"))
        .resource(Resource::new("file:///logo.png", "logo", logo).cache(CacheHint::private(60_000)))
        .resource_template(
            ResourceTemplate::new("repo://{owner}/{repo}/issues/{number}", "issues", issue)
                .unwrap()
                .complete("owner", |partial: String, _| async move {
                    ["modelctx", "modelcontextprotocol"]
                        .iter()
                        .filter(|o| o.starts_with(&partial))
                        .map(|o| (*o).to_owned())
                        .collect()
                }),
        )
        .build()
}

#[tokio::test]
async fn resources_and_templates_are_listed_and_read_in_every_version() {
    let server = server();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let modern = client.version().era() == Era::Modern;
        let listed = client.request("resources/list", json!({})).await.unwrap();
        let uris: Vec<&str> = listed["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["uri"].as_str().unwrap())
            .collect();
        assert_eq!(uris, ["file:///logo.png", "file:///readme.md"]);
        let templates = client
            .request("resources/templates/list", json!({}))
            .await
            .unwrap();
        assert_eq!(
            templates["resourceTemplates"][0]["uriTemplate"],
            "repo://{owner}/{repo}/issues/{number}"
        );

        let read = client
            .request("resources/read", json!({"uri": "file:///readme.md"}))
            .await
            .unwrap();
        assert_eq!(read["contents"][0]["text"], "# Hello", "{name}");
        let read = client
            .request("resources/read", json!({"uri": "file:///logo.png"}))
            .await
            .unwrap();
        assert_eq!(read["contents"][0]["blob"], "iVBORw==");
        assert_eq!(read.get("ttlMs").is_some(), modern);
        if modern {
            assert_eq!(
                (read["ttlMs"].as_u64(), read["cacheScope"].as_str()),
                (Some(60_000), Some("private"))
            );
        }

        let read = client
            .request(
                "resources/read",
                json!({"uri": "repo://modelctx/server/issues/7"}),
            )
            .await
            .unwrap();
        assert_eq!(read["contents"][0]["text"], "server issue 7");

        // Not found: -32002 before 2026-07-28, -32602 after; from the registry and the handler.
        let expected = if modern { -32602 } else { -32002 };
        for uri in [
            "file:///missing",
            "repo://a/b/issues/404",
            "repo://a/b/c/issues/1",
        ] {
            let answer = client.request("resources/read", json!({"uri": uri})).await;
            assert_eq!(code(&answer), expected, "{name} {uri}");
        }

        if client.version() >= ProtocolVersion::V2025_03_26 {
            let completed = client
                .request(
                    "completion/complete",
                    json!({
                    "ref": {"type": "ref/resource", "uri": "repo://{owner}/{repo}/issues/{number}"},
                    "argument": {"name": "owner", "value": "modelc"}}),
                )
                .await
                .unwrap();
            assert_eq!(
                completed["completion"]["values"],
                json!(["modelctx", "modelcontextprotocol"])
            );
            let unknown = client
                .request(
                    "completion/complete",
                    json!({
                    "ref": {"type": "ref/resource", "uri": "repo://{owner}/{repo}/issues/{number}"},
                    "argument": {"name": "nope", "value": ""}}),
                )
                .await;
            assert_eq!(
                code(&unknown),
                -32602,
                "a variable the template does not have"
            );
        }
    }
}

fn updated(events: &[Event], uri: &str) -> bool {
    events.iter().any(|e| {
        matches!(e, Event::Notification(n) if n.method == "notifications/resources/updated"
            && n.params.as_ref().is_some_and(|p| p.get().contains(uri)))
    })
}

#[tokio::test]
async fn subscribers_hear_of_changes_in_both_eras() {
    let server = server();
    let mut legacy = Client::connect(&server, eras().remove(4).1).await;
    legacy
        .request("resources/subscribe", json!({"uri": "file:///readme.md"}))
        .await
        .unwrap();
    server.notify_resource_updated("file:///logo.png"); // not subscribed
    server.notify_resource_updated("file:///readme.md");
    legacy
        .until("updated", |e| updated(e, "file:///readme.md"))
        .await;
    assert!(!updated(&legacy.events, "file:///logo.png"));
    legacy
        .request("resources/unsubscribe", json!({"uri": "file:///readme.md"}))
        .await
        .unwrap();
    // Unsubscribed: a change is no longer announced (a round trip after it shows nothing came).
    legacy.events.clear();
    server.notify_resource_updated("file:///readme.md");
    legacy.request("ping", json!({})).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    legacy.request("ping", json!({})).await.unwrap();
    assert!(!updated(&legacy.events, "file:///readme.md"));

    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    modern
        .start(
            "subscriptions/listen",
            json!({"notifications": {"resourceSubscriptions": ["file:///logo.png"]}}),
        )
        .await;
    modern
        .until("acknowledged", |events| {
            events.iter().any(|e| matches!(e, Event::Notification(n) if n.method == "notifications/subscriptions/acknowledged"))
        })
        .await;
    server.notify_resource_updated("file:///logo.png");
    modern
        .until("updated on the listen stream", |e| {
            updated(e, "file:///logo.png")
        })
        .await;

    // Resources added at run time are announced.
    server
        .add_resource(Resource::new("file:///new", "new", readme))
        .unwrap();
    legacy
        .until("list_changed", |events| {
            events.iter().any(|e| matches!(e, Event::Notification(n) if n.method == "notifications/resources/list_changed"))
        })
        .await;
}

/// The error message of a failed request.
fn message_of(answer: &Result<serde_json::Value, modelctx_session::RequestError>) -> String {
    match answer {
        Err(modelctx_session::RequestError::Remote(e)) => e.message.clone(),
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

#[tokio::test]
async fn finding_15_resource_uris_are_length_capped_in_every_method() {
    let server = server();
    let long = format!("file:///{}", "a".repeat(8 * 1024));
    let at_cap = format!("file:///{}", "a".repeat(8 * 1024 - "file:///".len()));
    for (name, config) in [eras().remove(0), eras().remove(4)] {
        let mut client = Client::connect(&server, config).await;
        let modern = client.version().era() == Era::Modern;
        let read = client
            .request("resources/read", json!({ "uri": long }))
            .await;
        assert_eq!(code(&read), -32602, "{name}");
        assert!(
            message_of(&read).contains("at most 8192"),
            "{name}: {read:?}"
        );
        let complete = client
            .request(
                "completion/complete",
                json!({"ref": {"type": "ref/resource", "uri": long},
                    "argument": {"name": "owner", "value": "m"}}),
            )
            .await;
        assert_eq!(code(&complete), -32602, "{name}");
        assert!(message_of(&complete).contains("at most 8192"), "{name}");
        // At the cap, a URI is looked at (and is not a resource here).
        let read = client
            .request("resources/read", json!({ "uri": at_cap }))
            .await;
        assert!(!message_of(&read).contains("at most"), "{name}: {read:?}");
        if modern {
            let listen = client
                .request(
                    "subscriptions/listen",
                    json!({"notifications": {"resourceSubscriptions": [long]}}),
                )
                .await;
            assert_eq!(code(&listen), -32602, "{name}");
        } else {
            for method in ["resources/subscribe", "resources/unsubscribe"] {
                let answer = client.request(method, json!({ "uri": long })).await;
                assert_eq!(code(&answer), -32602, "{name} {method}");
                assert!(message_of(&answer).contains("at most 8192"), "{name}");
            }
            client
                .request("resources/subscribe", json!({ "uri": at_cap }))
                .await
                .unwrap();
        }
    }
    // The cap is a setting.
    let mut settings = Settings::default();
    settings.max_uri_len = 16;
    let small = Server::builder("small", "1")
        .settings(settings)
        .resource(Resource::new("file:///readme.md", "readme", readme))
        .build();
    let mut client = Client::connect(&small, eras().remove(4).1).await;
    let read = client
        .request("resources/read", json!({"uri": "file:///readme.md"}))
        .await;
    assert!(message_of(&read).contains("at most 16"), "{read:?}");
}

#[tokio::test]
async fn finding_15_on_subscribe_decides_which_resources_a_connection_hears_of() {
    let server = Server::builder("resources", "1")
        .resource(Resource::new("file:///readme.md", "readme", readme))
        .resource(Resource::new("file:///logo.png", "logo", logo))
        .on_subscribe(|s: &Subscribe<'_>| s.uri != "file:///logo.png" && s.principal.is_none())
        .build();
    let mut legacy = Client::connect(&server, eras().remove(4).1).await;
    let refused = legacy
        .request("resources/subscribe", json!({"uri": "file:///logo.png"}))
        .await;
    assert_eq!(code(&refused), -32602);
    legacy
        .request("resources/subscribe", json!({"uri": "file:///readme.md"}))
        .await
        .unwrap();
    let mut modern = Client::connect(&server, eras().remove(0).1).await;
    modern
        .start(
            "subscriptions/listen",
            json!({"notifications": {"resourceSubscriptions":
                ["file:///logo.png", "file:///readme.md"]}}),
        )
        .await;
    modern
        .until("acknowledged", |events| {
            events.iter().any(|e| matches!(e, Event::Notification(n) if n.method == "notifications/subscriptions/acknowledged"))
        })
        .await;
    // Changes are announced in order: the refused one first, then the allowed one.
    server.notify_resource_updated("file:///logo.png");
    server.notify_resource_updated("file:///readme.md");
    modern
        .until("readme updated", |e| updated(e, "file:///readme.md"))
        .await;
    legacy
        .until("readme updated", |e| updated(e, "file:///readme.md"))
        .await;
    assert!(!updated(&modern.events, "file:///logo.png"));
    assert!(!updated(&legacy.events, "file:///logo.png"));
}

/// Finding 25: a `resources/read` flood trips the limits (-32000), which count every request a
/// handler answers (tool calls and reads share the count), unless `Limits::methods` says
/// otherwise.
#[tokio::test]
async fn finding_25_a_resources_read_flood_trips_the_limits() {
    use std::sync::Arc;
    use tokio::sync::Semaphore;
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    let slow = move |_: Context, request: ReadRequest| {
        let held = held.clone();
        async move {
            let _ = held.acquire().await.map(|p| p.forget());
            ResourceContents::text(request.uri, "slow")
        }
    };
    let build = |methods: Option<&'static [&'static str]>| {
        let mut settings = Settings::default();
        settings.limits.concurrent = Some(1);
        if let Some(methods) = methods {
            settings.limits.methods = methods;
        }
        Server::builder("limits", "1")
            .settings(settings)
            .resource(Resource::new("file:///slow", "slow", slow.clone()))
            .resource(Resource::new("file:///readme.md", "readme", readme))
            .build()
    };
    let server = build(None);
    for (name, config) in [eras().remove(0), eras().remove(4)] {
        let mut client = Client::connect(&server, config).await;
        // Requests are taken in order: the first read holds the only place.
        let first = client
            .start("resources/read", json!({"uri": "file:///slow"}))
            .await;
        let flood = client
            .request("resources/read", json!({"uri": "file:///readme.md"}))
            .await;
        assert_eq!(code(&flood), -32000, "{name}: {flood:?}");
        match &flood {
            Err(modelctx_session::RequestError::Remote(e)) => {
                let data: serde_json::Value = e.data_as().unwrap().unwrap();
                assert_eq!(data["reason"], "rate_limited", "{name}");
            }
            other => panic!("{other:?}"),
        }
        // Lists are answered by the server itself and are not counted.
        client.request("resources/list", json!({})).await.unwrap();
        gate.add_permits(1);
        let result = client.answer(&first).await.unwrap();
        assert_eq!(result["contents"][0]["text"], "slow", "{name}");
        // The place is given back when the read ends.
        let read = client
            .request("resources/read", json!({"uri": "file:///readme.md"}))
            .await
            .unwrap();
        assert_eq!(read["contents"][0]["text"], "# Hello", "{name}");
    }
    // Limits that name only tool calls leave reads alone.
    let server = build(Some(&["tools/call"]));
    let mut client = Client::connect(&server, eras().remove(4).1).await;
    let first = client
        .start("resources/read", json!({"uri": "file:///slow"}))
        .await;
    client
        .request("resources/read", json!({"uri": "file:///readme.md"}))
        .await
        .unwrap();
    gate.add_permits(1);
    client.answer(&first).await.unwrap();
}

/// A read failing with `ResourceError::Protocol` is answered with that error as it is: code,
/// message and `data`; but a -32021 reaches a legacy client as -32603 with its message.
#[tokio::test]
async fn a_protocol_error_of_a_read_is_the_reads_error() {
    async fn needs(_: Context, _: ReadRequest) -> Result<ResourceContents, ResourceError> {
        Err(ResourceError::Protocol(missing_extension()))
    }
    async fn broken(_: Context, _: ReadRequest) -> Result<ResourceContents, ResourceError> {
        Err(ResourceError::Protocol(modelctx_server::ErrorObject::new(
            modelctx_server::ErrorCode(-32050),
            "the backend broke",
        )))
    }
    let server = Server::builder("resources", "1")
        .resource(Resource::new("mem://needs", "needs", needs))
        .resource(Resource::new("mem://broken", "broken", broken))
        .build();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let modern = client.version().era() == Era::Modern;
        let needs = client
            .request("resources/read", json!({"uri": "mem://needs"}))
            .await;
        match needs {
            Err(modelctx_session::RequestError::Remote(e)) if modern => {
                assert_eq!(e.code.0, -32021, "{name}");
                assert_eq!(e.message, "the backend wants its extension", "{name}");
                let data: serde_json::Value = e.data_as().unwrap().unwrap();
                assert_eq!(
                    data,
                    json!({"requiredCapabilities": {"extensions": {"io.example/ext": {}}}}),
                    "{name}"
                );
            }
            Err(modelctx_session::RequestError::Remote(e)) => {
                assert_eq!(e.code.0, -32603, "{name}");
                assert_eq!(e.message, "the backend wants its extension", "{name}");
            }
            other => panic!("{name}: expected a JSON-RPC error, got {other:?}"),
        }
        let broken = client
            .request("resources/read", json!({"uri": "mem://broken"}))
            .await;
        assert_eq!(code(&broken), -32050, "{name}");
        assert_eq!(message_of(&broken), "the backend broke", "{name}");
    }
    assert_eq!(
        ResourceError::Protocol(missing_extension()),
        ResourceError::Protocol(missing_extension())
    );
    assert_ne!(
        ResourceError::Protocol(missing_extension()),
        ResourceError::Failed("the backend wants its extension".into())
    );
}
