//! Discovery against in-process servers (the PRM, the authorization server and their traps),
//! one test per rule, hostile answers included.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Response;
use http_body_util::Full;
use serde_json::{Value, json};

use super::*;
use crate::fetch::tests::{Seen, serve};
use crate::fetch::{BODY_LIMIT, FetchError};

/// What a route answers.
enum Reply {
    Json(Value),
    Status(u16),
    Body(u16, Vec<u8>),
    Redirect(String),
}

/// One in-process server: its base URL (`http://127.0.0.1:PORT`) and the paths it was asked.
struct Mock {
    base: String,
    hits: Arc<Mutex<Vec<String>>>,
}

impl Mock {
    fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

/// A server answering `route(base, path)`, 404 when it gives nothing.
async fn mock(route: impl Fn(&str, &str) -> Option<Reply> + Send + Sync + 'static) -> Mock {
    let base = Arc::new(Mutex::new(String::new()));
    let hits = Arc::new(Mutex::new(Vec::new()));
    let (named, seen_paths) = (base.clone(), hits.clone());
    let addr = serve(Arc::new(move |seen: Seen| {
        seen_paths.lock().unwrap().push(seen.path.clone());
        let base = named.lock().unwrap().clone();
        let (status, location, body) = match route(&base, &seen.path) {
            Some(Reply::Json(value)) => (200, None, value.to_string().into_bytes()),
            Some(Reply::Status(status)) => (status, None, Vec::new()),
            Some(Reply::Body(status, body)) => (status, None, body),
            Some(Reply::Redirect(to)) => (302, Some(to), Vec::new()),
            None => (404, None, Vec::new()),
        };
        let mut response = Response::builder().status(status);
        if let Some(to) = location {
            response = response.header("location", to);
        }
        response.body(Full::new(Bytes::from(body))).unwrap()
    }))
    .await;
    let url = format!("http://{addr}");
    *base.lock().unwrap() = url.clone();
    Mock { base: url, hits }
}

/// An authorization server document for `issuer` with endpoints under it.
fn as_document(issuer: &str) -> Value {
    json!({
        "issuer": issuer,
        "authorization_endpoint": format!("{issuer}/authorize"),
        "token_endpoint": format!("{issuer}/token"),
        "registration_endpoint": format!("{issuer}/register"),
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["mcp:basic", "offline_access"],
    })
}

/// A protected resource metadata document.
fn prm(resource: &str, servers: &[&str]) -> Value {
    json!({"resource": resource, "authorization_servers": servers})
}

fn oauth() -> OAuth {
    OAuth::builder()
        .as_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn none() -> Challenges {
    Challenges::default()
}

fn challenge(value: &str) -> Challenges {
    Challenges::parse(value)
}

const PRM: &str = "/.well-known/oauth-protected-resource";
const RFC8414: &str = "/.well-known/oauth-authorization-server";
const OIDC: &str = "/.well-known/openid-configuration";

/// A server whose PRM (path-inserted and at the root) names an authorization server at the
/// root of the same origin, RFC 8414 metadata there.
async fn one_origin(resource_path: &'static str) -> Mock {
    mock(move |base, path| match path {
        p if p == format!("{PRM}/mcp") => {
            Some(Reply::Json(prm(&format!("{base}{resource_path}"), &[base])))
        }
        RFC8414 => Some(Reply::Json(as_document(base))),
        _ => None,
    })
    .await
}

#[tokio::test]
async fn the_challenges_resource_metadata_comes_first() {
    let server = mock(|base, path| match path {
        "/custom/metadata/location.json" => Some(Reply::Json(json!({
            "resource": format!("{base}/mcp"),
            "authorization_servers": [base],
            "scopes_supported": ["from-header"],
        }))),
        p if p == format!("{PRM}/mcp") || p == PRM => {
            Some(Reply::Json(json!({"resource": format!("{base}/mcp"),
                "authorization_servers": ["https://trap.example.com"]})))
        }
        RFC8414 => Some(Reply::Json(as_document(base))),
        _ => None,
    })
    .await;
    let header = format!(
        r#"Bearer error="invalid_token", resource_metadata="{}""#,
        server.url("/custom/metadata/location.json")
    );
    let found = oauth()
        .discover(&server.url("/mcp"), &challenge(&header))
        .await
        .unwrap();
    let protected = found.protected_resource.as_ref().unwrap();
    assert_eq!(protected.url, server.url("/custom/metadata/location.json"));
    assert_eq!(
        protected.scopes_supported.as_deref().unwrap(),
        ["from-header"]
    );
    assert_eq!(found.auth_server.issuer, server.base);
    assert_eq!(found.resource, server.url("/mcp"));
    assert_eq!(
        server.hits(),
        ["/custom/metadata/location.json", RFC8414],
        "no well-known PRM asked"
    );
}

#[tokio::test]
async fn else_the_path_inserted_well_known_uri_then_the_root() {
    // Path-inserted: the root document (a trap) is never asked.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(&format!("{base}/mcp"), &[base]))),
        PRM => Some(Reply::Json(prm(base, &["https://trap.example.com"]))),
        RFC8414 => Some(Reply::Json(as_document(base))),
        _ => None,
    })
    .await;
    // A query and a trailing slash of the server URL are not part of the well-known URI.
    let found = oauth()
        .discover(&server.url("/mcp/?tenant=a"), &none())
        .await
        .unwrap();
    assert_eq!(found.resource, server.url("/mcp"));
    assert_eq!(server.hits(), [format!("{PRM}/mcp"), RFC8414.to_owned()]);

    // Only at the root: asked second, and its `resource`, the bare origin, is used verbatim.
    let server = mock(|base, path| match path {
        PRM => Some(Reply::Json(prm(base, &[base]))),
        RFC8414 => Some(Reply::Json(as_document(base))),
        _ => None,
    })
    .await;
    let found = oauth()
        .discover(&server.url("/mcp"), &none())
        .await
        .unwrap();
    assert_eq!(found.resource, server.base, "no `/` appended");
    assert_eq!(
        server.hits(),
        [format!("{PRM}/mcp"), PRM.to_owned(), RFC8414.to_owned()]
    );

    // A challenge URL that answers 404 falls back to the well-known URIs.
    let header = format!(r#"Bearer resource_metadata="{}""#, server.url("/gone.json"));
    let found = oauth()
        .discover(&server.url("/mcp"), &challenge(&header))
        .await
        .unwrap();
    assert_eq!(found.resource, server.base);
}

#[tokio::test]
async fn the_resource_is_kept_verbatim() {
    for published in ["/mcp/", "", "/"] {
        let server = one_origin(published).await;
        let found = oauth()
            .discover(&server.url("/mcp"), &none())
            .await
            .unwrap();
        assert_eq!(found.resource, server.url(published), "{published:?}");
    }
}

#[test]
fn a_resource_must_be_the_server_or_a_parent_on_the_same_origin() {
    let server = ServerUrl::parse("https://MCP.example.com:443/api/mcp?t=1#frag").unwrap();
    for covered in [
        "https://mcp.example.com/api/mcp",
        "https://mcp.example.com/api/mcp/",
        "HTTPS://mcp.EXAMPLE.com/api",
        "https://mcp.example.com:443/api/",
        "https://mcp.example.com/",
        "https://mcp.example.com",
        "https://mcp.example.com/api/mcp?t=1",
    ] {
        assert!(server.is_covered_by(covered), "{covered}");
    }
    for not in [
        "https://evil.example.com/api/mcp",
        "http://mcp.example.com/api/mcp",
        "https://mcp.example.com:8443/api/mcp",
        "https://mcp.example.com/ap",
        "https://mcp.example.com/api/mc",
        "https://mcp.example.com/api/mcp/more",
        "https://mcp.example.com/API/mcp",
        "https://mcp.example.com/api/mcp?t=2",
        "https://mcp.example.com/api?t=1",
        "https://user@mcp.example.com/api/mcp",
        "mcp.example.com/api/mcp",
        "urn:mcp",
        "",
    ] {
        assert!(!server.is_covered_by(not), "{not}");
    }
    assert_eq!(server.as_str(), "https://MCP.example.com:443/api/mcp?t=1");
    assert!(matches!(
        ServerUrl::parse("ftp://h/mcp"),
        Err(Error::InvalidUrl { .. })
    ));
}

#[tokio::test]
async fn a_resource_of_another_origin_stops_before_any_authorization_server_request() {
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => {
            Some(Reply::Json(prm("https://evil.example.com/mcp", &[base])))
        }
        RFC8414 => Some(Reply::Json(as_document(base))),
        _ => None,
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    match result {
        Err(Error::ResourceMismatch { published, url }) => {
            assert_eq!(published, "https://evil.example.com/mcp");
            assert_eq!(url, server.url("/mcp"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.hits(), [format!("{PRM}/mcp")]);
    // Also when the document came from a challenge URL on another origin.
    let elsewhere = mock(|_, path| {
        (path == "/prm.json")
            .then(|| Reply::Json(prm("https://evil.example.com/mcp", &["https://as"])))
    })
    .await;
    let header = format!(
        r#"Bearer resource_metadata="{}""#,
        elsewhere.url("/prm.json")
    );
    let result = oauth()
        .discover(&server.url("/mcp"), &challenge(&header))
        .await;
    assert!(
        matches!(result, Err(Error::ResourceMismatch { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn authorization_server_metadata_in_rfc_8414_then_oidc_order() {
    // Only the OpenID Connect appended form: the three URLs in order, the root trap never.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(
            &format!("{base}/mcp"),
            &[&format!("{base}/tenant1")],
        ))),
        "/tenant1/.well-known/openid-configuration" => {
            Some(Reply::Json(as_document(&format!("{base}/tenant1"))))
        }
        RFC8414 => Some(Reply::Json(as_document(base))),
        _ => None,
    })
    .await;
    let found = oauth()
        .discover(&server.url("/mcp"), &none())
        .await
        .unwrap();
    assert_eq!(found.auth_server.issuer, server.url("/tenant1"));
    assert_eq!(
        found.auth_server.metadata_url.as_deref(),
        Some(
            server
                .url("/tenant1/.well-known/openid-configuration")
                .as_str()
        )
    );
    assert_eq!(
        server.hits()[1..],
        [
            format!("{RFC8414}/tenant1"),
            format!("{OIDC}/tenant1"),
            "/tenant1/.well-known/openid-configuration".to_owned(),
        ]
    );

    // RFC 8414 path-inserted wins when it is there; OpenID Connect at the root is second.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(&format!("{base}/mcp"), &[base]))),
        OIDC => Some(Reply::Json(as_document(base))),
        _ => None,
    })
    .await;
    let found = oauth()
        .discover(&server.url("/mcp"), &none())
        .await
        .unwrap();
    assert_eq!(
        found.auth_server.metadata_url.as_deref(),
        Some(server.url(OIDC).as_str())
    );
    assert_eq!(server.hits()[1..], [RFC8414, OIDC]);
}

#[tokio::test]
async fn metadata_naming_another_issuer_is_never_used() {
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(&format!("{base}/mcp"), &[base]))),
        RFC8414 => Some(Reply::Json(as_document("https://attacker.example.com"))),
        _ => None,
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    match result {
        Err(Error::IssuerMismatch {
            expected,
            found,
            url,
        }) => {
            assert_eq!(expected, server.base);
            assert_eq!(found, "https://attacker.example.com");
            assert_eq!(url, server.url(RFC8414));
        }
        other => panic!("{other:?}"),
    }
    // Every URL was tried, none of the mismatching document's endpoints was.
    assert_eq!(
        server.hits(),
        [format!("{PRM}/mcp"), RFC8414.to_owned(), OIDC.to_owned()]
    );

    // Byte for byte: a trailing slash or another case is another issuer; the next URL's
    // document of the right issuer is used.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(&format!("{base}/mcp"), &[base]))),
        RFC8414 => Some(Reply::Json(as_document(&format!("{base}/")))),
        OIDC => Some(Reply::Json(as_document(base))),
        _ => None,
    })
    .await;
    let found = oauth()
        .discover(&server.url("/mcp"), &none())
        .await
        .unwrap();
    assert_eq!(
        found.auth_server.metadata_url.as_deref(),
        Some(server.url(OIDC).as_str())
    );
}

#[tokio::test]
async fn endpoints_and_issuers_must_be_https_or_loopback_http() {
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(&format!("{base}/mcp"), &[base]))),
        RFC8414 => {
            let mut doc = as_document(base);
            doc["token_endpoint"] = json!("http://as.example.com/token");
            Some(Reply::Json(doc))
        }
        _ => None,
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    match result {
        Err(Error::InsecureEndpoint { url, .. }) => assert_eq!(url, "http://as.example.com/token"),
        other => panic!("{other:?}"),
    }
    // An authorization server on plain http to another host is not even asked.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(
            &format!("{base}/mcp"),
            &["http://as.example.com"],
        ))),
        _ => None,
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    assert!(
        matches!(result, Err(Error::InsecureEndpoint { .. })),
        "{result:?}"
    );
    assert_eq!(server.hits(), [format!("{PRM}/mcp")]);
    // Nor is a challenge's metadata URL on plain http to another host.
    let result = oauth()
        .discover(
            &server.url("/mcp"),
            &challenge(r#"Bearer resource_metadata="http://rs.example.com/prm""#),
        )
        .await;
    assert!(
        matches!(result, Err(Error::InsecureEndpoint { .. })),
        "{result:?}"
    );
}

#[tokio::test]
async fn pkce_s256_is_required() {
    for methods in [None, Some(json!(["plain"])), Some(json!([]))] {
        let methods = Arc::new(methods);
        let listed = methods.clone();
        let server = mock(move |base, path| match path {
            p if p == format!("{PRM}/mcp") => {
                Some(Reply::Json(prm(&format!("{base}/mcp"), &[base])))
            }
            RFC8414 => {
                let mut doc = as_document(base);
                let doc_map = doc.as_object_mut().unwrap();
                doc_map.remove("code_challenge_methods_supported");
                if let Some(methods) = &*listed {
                    doc_map.insert("code_challenge_methods_supported".into(), methods.clone());
                }
                Some(Reply::Json(doc))
            }
            _ => None,
        })
        .await;
        let result = oauth().discover(&server.url("/mcp"), &none()).await;
        match result {
            Err(Error::PkceUnsupported { issuer }) => assert_eq!(issuer, server.base),
            other => panic!("{methods:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_first_usable_authorization_server_in_order() {
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(
            &format!("{base}/mcp"),
            &[&format!("{base}/broken"), &format!("{base}/good")],
        ))),
        p if p == format!("{RFC8414}/good") => {
            Some(Reply::Json(as_document(&format!("{base}/good"))))
        }
        _ => None,
    })
    .await;
    let found = oauth()
        .discover(&server.url("/mcp"), &none())
        .await
        .unwrap();
    assert_eq!(found.auth_server.issuer, server.url("/good"));

    // None usable: the first one's error.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(
            &format!("{base}/mcp"),
            &[&format!("{base}/a"), &format!("{base}/b")],
        ))),
        _ => None,
    })
    .await;
    match oauth().discover(&server.url("/mcp"), &none()).await {
        Err(Error::NoMetadata { issuer, tried }) => {
            assert_eq!(issuer, server.url("/a"));
            assert_eq!(tried.len(), 3);
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn without_protected_resource_metadata_the_2025_03_26_rules() {
    // The origin's own metadata (issuer = the origin), endpoints under /oauth.
    let server = mock(|base, path| match path {
        RFC8414 => {
            let mut doc = as_document(base);
            doc["authorization_endpoint"] = json!(format!("{base}/oauth/authorize"));
            doc["token_endpoint"] = json!(format!("{base}/oauth/token"));
            Some(Reply::Json(doc))
        }
        _ => None,
    })
    .await;
    let found = oauth()
        .discover(&server.url("/mcp"), &none())
        .await
        .unwrap();
    assert!(found.protected_resource.is_none());
    assert_eq!(found.resource, server.url("/mcp"));
    assert_eq!(found.auth_server.issuer, server.base);
    assert_eq!(
        found.auth_server.token_endpoint.as_deref(),
        Some(server.url("/oauth/token").as_str())
    );
    assert_eq!(
        server.hits(),
        [format!("{PRM}/mcp"), PRM.to_owned(), RFC8414.to_owned()]
    );

    // No metadata either: the default endpoints, PKCE S256 assumed, no `iss` expected.
    let server = mock(|_, _| None).await;
    let found = oauth()
        .discover(&server.url("/mcp#x"), &none())
        .await
        .unwrap();
    let defaults = &found.auth_server;
    assert_eq!(defaults.metadata_url, None);
    assert_eq!(
        defaults.authorization_endpoint.as_deref(),
        Some(server.url("/authorize").as_str())
    );
    assert_eq!(
        defaults.token_endpoint.as_deref(),
        Some(server.url("/token").as_str())
    );
    assert_eq!(
        defaults.registration_endpoint.as_deref(),
        Some(server.url("/register").as_str())
    );
    assert!(defaults.supports_pkce_s256());
    assert!(!defaults.iss_parameter_supported);
    assert_eq!(found.resource, server.url("/mcp"), "without the fragment");
    let found = oauth().discover(&server.url("/"), &none()).await.unwrap();
    assert_eq!(found.resource, server.base, "no `/` of an empty path");

    // A broken server is not a server without metadata: no defaults after a 500.
    let server = mock(|_, path| (path == RFC8414).then_some(Reply::Status(500))).await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    assert!(matches!(result, Err(Error::Metadata { .. })), "{result:?}");
}

#[tokio::test]
async fn a_protected_resource_metadata_error_is_not_a_fallback() {
    let server = mock(|_, path| (path == format!("{PRM}/mcp")).then_some(Reply::Status(500))).await;
    match oauth().discover(&server.url("/mcp"), &none()).await {
        Err(Error::Metadata { url, why }) => {
            assert_eq!(url, server.url(&format!("{PRM}/mcp")));
            assert!(why.contains("500"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(server.hits(), [format!("{PRM}/mcp")]);
}

#[tokio::test]
async fn bad_documents_are_metadata_errors() {
    let cases: Vec<(&str, Reply)> = vec![
        ("not JSON", Reply::Body(200, b"<html>".to_vec())),
        ("not an object", Reply::Json(json!(["a"]))),
        (
            "no resource",
            Reply::Json(json!({"authorization_servers": ["https://as"]})),
        ),
        ("no servers", Reply::Json(json!({"resource": "RESOURCE"}))),
        (
            "empty servers",
            Reply::Json(json!({"resource": "RESOURCE", "authorization_servers": []})),
        ),
        (
            "wrong type",
            Reply::Json(json!({"resource": "RESOURCE", "authorization_servers": "https://as"})),
        ),
    ];
    for (name, reply) in cases {
        let reply = Arc::new(Mutex::new(Some(reply)));
        let server = mock(move |base, path| {
            if path != format!("{PRM}/mcp") {
                return None;
            }
            match reply.lock().unwrap().take()? {
                Reply::Json(doc) => Some(Reply::Json(
                    serde_json::from_str(
                        &doc.to_string().replace("RESOURCE", &format!("{base}/mcp")),
                    )
                    .unwrap(),
                )),
                other => Some(other),
            }
        })
        .await;
        let result = oauth().discover(&server.url("/mcp"), &none()).await;
        assert!(
            matches!(result, Err(Error::Metadata { .. })),
            "{name}: {result:?}"
        );
    }

    // An authorization server document that is not JSON is skipped for the next URL; with
    // nothing usable after it, it is the error.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(&format!("{base}/mcp"), &[base]))),
        RFC8414 => Some(Reply::Body(200, b"{\"issuer\":".to_vec())),
        _ => None,
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    assert!(matches!(result, Err(Error::Metadata { .. })), "{result:?}");
    // A member of the wrong type in the issuer's own document is its error.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(&format!("{base}/mcp"), &[base]))),
        RFC8414 => {
            let mut doc = as_document(base);
            doc["scopes_supported"] = json!("mcp:basic");
            Some(Reply::Json(doc))
        }
        OIDC => Some(Reply::Json(as_document(base))),
        _ => None,
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    assert!(matches!(result, Err(Error::Metadata { .. })), "{result:?}");
}

#[tokio::test]
async fn oversized_bodies_are_refused() {
    let big = vec![b' '; BODY_LIMIT + 1];
    let prm_big = big.clone();
    let server = mock(move |_, path| {
        (path == format!("{PRM}/mcp")).then(|| Reply::Body(200, prm_big.clone()))
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    assert!(
        matches!(
            result,
            Err(Error::Unreachable {
                source: FetchError::TooLarge { .. },
                ..
            })
        ),
        "{result:?}"
    );
    let server = mock(move |base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(&format!("{base}/mcp"), &[base]))),
        RFC8414 => Some(Reply::Body(200, big.clone())),
        _ => None,
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    assert!(
        matches!(
            result,
            Err(Error::Unreachable {
                source: FetchError::TooLarge { .. },
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(server.hits().len(), 2, "no URL after a failed fetch");
}

#[tokio::test]
async fn redirects_are_not_followed() {
    // The protected resource metadata redirects: an error, the target never asked.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Redirect(format!("{base}/elsewhere"))),
        _ => Some(Reply::Json(json!({}))),
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    match result {
        Err(Error::Metadata { why, .. }) => assert!(why.contains("302"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.hits(), [format!("{PRM}/mcp")]);

    // Every metadata URL redirecting to itself: one request each, then the error.
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(prm(&format!("{base}/mcp"), &[base]))),
        p => Some(Reply::Redirect(format!("{base}{p}"))),
    })
    .await;
    let result = oauth().discover(&server.url("/mcp"), &none()).await;
    assert!(matches!(result, Err(Error::Metadata { .. })), "{result:?}");
    assert_eq!(
        server.hits(),
        [format!("{PRM}/mcp"), RFC8414.to_owned(), OIDC.to_owned()]
    );
}

#[tokio::test]
async fn a_server_that_never_answers_is_bounded_by_as_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            open.push(stream);
        }
    });
    let started = Instant::now();
    let result = OAuth::builder()
        .as_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
        .discover(&format!("http://{addr}/mcp"), &none())
        .await;
    assert!(
        matches!(result, Err(Error::Unreachable { .. })),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn authorization_server_metadata_is_kept_per_issuer() {
    let server = one_origin("/mcp").await;
    let client = oauth();
    client.discover(&server.url("/mcp"), &none()).await.unwrap();
    client
        .clone()
        .discover(&server.url("/mcp"), &none())
        .await
        .unwrap();
    // The protected resource metadata twice, the authorization server's once.
    assert_eq!(
        server.hits(),
        [
            format!("{PRM}/mcp"),
            RFC8414.to_owned(),
            format!("{PRM}/mcp")
        ]
    );
}

#[tokio::test]
async fn scopes_from_the_challenge_then_the_resource_then_none() {
    let server = mock(|base, path| match path {
        p if p == format!("{PRM}/mcp") => Some(Reply::Json(json!({
            "resource": format!("{base}/mcp"),
            "authorization_servers": [base],
            "scopes_supported": ["mcp:basic", "mcp:read", "mcp:write"],
        }))),
        RFC8414 => {
            let mut doc = as_document(base);
            doc["scopes_supported"] = json!(["mcp:basic", "mcp:read"]);
            Some(Reply::Json(doc))
        }
        _ => None,
    })
    .await;
    let url = server.url("/mcp");
    let found = oauth()
        .discover(
            &url,
            &challenge(r#"Bearer error="invalid_token", scope="mcp:basic""#),
        )
        .await
        .unwrap();
    assert_eq!(found.scopes(), ["mcp:basic"]);
    let found = oauth().discover(&url, &none()).await.unwrap();
    assert_eq!(found.scopes(), ["mcp:basic", "mcp:read", "mcp:write"]);

    // Neither: no scope, and no lone `offline_access` though the server offers it.
    let server = one_origin("/mcp").await;
    let found = oauth()
        .discover(&server.url("/mcp"), &none())
        .await
        .unwrap();
    assert!(found.scopes().is_empty());
    // The authorization server offers `offline_access`: added to the chosen ones, unless off.
    let found = oauth()
        .discover(
            &server.url("/mcp"),
            &challenge(r#"Bearer scope="mcp:basic""#),
        )
        .await
        .unwrap();
    assert_eq!(found.scopes(), ["mcp:basic", "offline_access"]);
    let found = OAuth::builder()
        .offline_access(false)
        .build()
        .unwrap()
        .discover(
            &server.url("/mcp"),
            &challenge(r#"Bearer scope="mcp:basic""#),
        )
        .await
        .unwrap();
    assert_eq!(found.scopes(), ["mcp:basic"]);

    // A step-up asks for the union, and gives up when nothing new is required.
    let forbidden = challenge(r#"Bearer error="insufficient_scope", scope="mcp:write""#);
    let requested = vec!["mcp:basic".to_owned()];
    assert_eq!(
        found.step_up(&requested, &forbidden).unwrap(),
        ["mcp:basic", "mcp:write"]
    );
    let union = found.step_up(&requested, &forbidden).unwrap();
    assert!(matches!(
        found.step_up(&union, &forbidden),
        Err(Error::InsufficientScope { .. })
    ));
}

#[test]
fn discovery_can_run_on_any_task() {
    fn send<T: Send + 'static>(_: T) {}
    let client = OAuth::builder().build().unwrap();
    send(async move {
        client
            .discover("https://h/mcp", &Challenges::default())
            .await
    });
}

#[test]
fn the_builder_documents_its_defaults() {
    let client = OAuth::builder().build().unwrap();
    assert!(client.inner.offline_access);
    let debug = format!("{client:?}");
    assert!(
        debug.contains("HttpFetch") && debug.contains("timeout: 5s"),
        "{debug}"
    );
    let client = OAuth::builder()
        .as_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    assert!(format!("{client:?}").contains("timeout: 300ms"));
}

#[tokio::test]
async fn a_servers_text_in_an_error_is_bounded_and_escaped() {
    let hostile = format!("https://evil.example.com/\u{1b}[2J\n{}", "x".repeat(5000));
    let published = hostile.clone();
    let server = mock(move |base, path| {
        (path == format!("{PRM}/mcp")).then(|| Reply::Json(prm(&published, &[base])))
    })
    .await;
    match oauth().discover(&server.url("/mcp"), &none()).await {
        Err(Error::ResourceMismatch { published, .. }) => {
            assert!(published.starts_with("https://evil.example.com/\\u{1b}[2J\\n"));
            assert!(published.chars().count() <= 201 + 8, "{}", published.len());
            assert!(!published.chars().any(char::is_control));
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn a_challenge_may_point_to_metadata_on_another_origin() {
    let server = one_origin("/mcp").await;
    let resource = server.url("/mcp");
    let issuer = server.base.clone();
    let metadata_host = mock(move |_, path| {
        (path == "/prm/mcp.json").then(|| Reply::Json(prm(&resource, &[&issuer])))
    })
    .await;
    let header = format!(
        r#"Bearer resource_metadata="{}""#,
        metadata_host.url("/prm/mcp.json")
    );
    let found = oauth()
        .discover(&server.url("/mcp"), &challenge(&header))
        .await
        .unwrap();
    assert_eq!(found.resource, server.url("/mcp"));
    assert_eq!(
        found.protected_resource.unwrap().url,
        metadata_host.url("/prm/mcp.json")
    );
    assert_eq!(server.hits(), [RFC8414], "no well-known PRM asked");
}
