//! Resources, templates and subscriptions in every protocol version, in memory.

mod common;

use common::*;
use modelctx_server::{
    CacheHint, Context, ReadRequest, Resource, ResourceContents, ResourceError, ResourceTemplate,
    Server,
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
        .resource(
            Resource::new("file:///logo.png", "logo", logo).cache(CacheHint {
                ttl_ms: 60_000,
                scope: "shared",
            }),
        )
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
                (Some(60_000), Some("shared"))
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
