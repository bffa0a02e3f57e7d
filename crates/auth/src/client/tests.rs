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
    assert_eq!(client.inner.flow_timeout, DEFAULT_FLOW_TIMEOUT);
    assert_eq!(DEFAULT_FLOW_TIMEOUT, Duration::from_secs(600));
    assert!(client.inner.redirect_uris.is_empty() && client.inner.client_metadata_url.is_none());
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

// --- Client identity, the token endpoint and the authorization code flow (WP5, WP6) ---

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use http::{HeaderMap, Method};
use sha2::{Digest, Sha256};

use super::jwt::SigningKey;
use super::jwt::tests::{P256_PEM, verify};
use crate::fetch::form_decode;

/// One request an in-process authorization server saw.
#[derive(Clone, Debug)]
struct Asked {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: String,
}

impl Asked {
    fn form(&self) -> HashMap<String, String> {
        form_decode(&self.body).into_iter().collect()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

/// An MCP server's PRM and an authorization server on one origin: the PRM names the origin
/// as the issuer, `metadata(base)` is its RFC 8414 document, `route` answers the rest
/// (`(status, body)`; 404 when it gives nothing).
struct AsMock {
    base: String,
    seen: Arc<Mutex<Vec<Asked>>>,
}

impl AsMock {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn asked(&self, path: &str) -> Vec<Asked> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|a| a.path == path).cloned().collect()
    }

    fn all(&self) -> Vec<Asked> {
        self.seen.lock().unwrap().clone()
    }
}

type Route = dyn Fn(&str, &Asked) -> Option<(u16, String)> + Send + Sync;

async fn as_mock(
    metadata: impl Fn(&str) -> Value + Send + Sync + 'static,
    route: impl Fn(&str, &Asked) -> Option<(u16, String)> + Send + Sync + 'static,
) -> AsMock {
    let base = Arc::new(Mutex::new(String::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (named, recorded) = (base.clone(), seen.clone());
    let route: Box<Route> = Box::new(route);
    let addr = serve(Arc::new(move |request: Seen| {
        let asked = Asked {
            method: request.method,
            path: request.path,
            headers: request.headers,
            body: String::from_utf8_lossy(&request.body).into_owned(),
        };
        recorded.lock().unwrap().push(asked.clone());
        let base = named.lock().unwrap().clone();
        let (status, body) = if asked.path == format!("{PRM}/mcp") {
            (200, prm(&format!("{base}/mcp"), &[&base]).to_string())
        } else if asked.path == RFC8414 {
            (200, metadata(&base).to_string())
        } else {
            route(&base, &asked).unwrap_or((404, String::new()))
        };
        Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap()
    }))
    .await;
    let url = format!("http://{addr}");
    *base.lock().unwrap() = url.clone();
    AsMock { base: url, seen }
}

/// An RFC 8414 document with `extra` members merged in.
fn as_with(base: &str, extra: Value) -> Value {
    let mut document = as_document(base);
    for (name, value) in extra.as_object().unwrap() {
        document[name] = value.clone();
    }
    document
}

fn bearer(token: &str) -> (u16, String) {
    (
        200,
        json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600}).to_string(),
    )
}

/// Answers `/token` with `token` and `/register` with `registration`.
fn endpoints(
    token: (u16, String),
    registration: Value,
) -> impl Fn(&str, &Asked) -> Option<(u16, String)> + Send + Sync + 'static {
    move |_, asked| match asked.path.as_str() {
        "/token" => Some(token.clone()),
        "/register" => Some((201, registration.to_string())),
        _ => None,
    }
}

/// The test's user: reads the authorization URL and answers with what `answer` makes of its
/// parameters (by default: `code=the-code`, the `state`, and `iss` = the issuer).
/// What the test's user makes of an authorization request and its URL's parameters.
type Answer = dyn Fn(&AuthorizationRequest, &HashMap<String, String>) -> Result<String, Declined>
    + Send
    + Sync;

struct User {
    answer: Box<Answer>,
    seen: Mutex<Vec<AuthorizationRequest>>,
}

impl fmt::Debug for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("User")
    }
}

impl User {
    fn answering(
        answer: impl Fn(&AuthorizationRequest, &HashMap<String, String>) -> Result<String, Declined>
        + Send
        + Sync
        + 'static,
    ) -> User {
        User {
            answer: Box::new(answer),
            seen: Mutex::default(),
        }
    }

    fn honest() -> User {
        User::answering(|request, params| {
            Ok(format!(
                "{}?code=the-code&state={}&iss={}",
                request.redirect_uri, params["state"], request.issuer
            ))
        })
    }

    fn params(&self) -> HashMap<String, String> {
        let seen = self.seen.lock().unwrap();
        let url = &seen.last().expect("the user was asked").url;
        form_decode(url.split_once('?').unwrap().1)
            .into_iter()
            .collect()
    }
}

impl AuthorizationHandler for User {
    fn authorize<'a>(
        &'a self,
        request: &'a AuthorizationRequest,
    ) -> crate::BoxFuture<'a, Result<Redirect, Declined>> {
        self.seen.lock().unwrap().push(request.clone());
        let params = form_decode(request.url.split_once('?').unwrap().1)
            .into_iter()
            .collect();
        let answer = (self.answer)(request, &params);
        Box::pin(async move { answer.map(|r| Redirect::new(&r)) })
    }
}

const REDIRECT: &str = "http://127.0.0.1:8123/callback";

fn client_builder() -> OAuthBuilder {
    OAuth::builder()
        .as_timeout(Duration::from_secs(2))
        .redirect_uri(REDIRECT)
}

/// Discovers `server` and runs the flow with `user`.
async fn flow(oauth: &OAuth, server: &AsMock, user: &User) -> Result<Tokens, Error> {
    let discovery = oauth.discover(&server.url("/mcp"), &none()).await?;
    oauth.authorize(&discovery, user).await
}

/// The checks every code exchange passes: grant, code, redirect URI, the verifier of the
/// challenge the user saw, the resource.
fn assert_code_exchange(token: &Asked, user: &User, resource: &str) {
    let form = token.form();
    assert_eq!(token.method, Method::POST);
    assert_eq!(form["grant_type"], "authorization_code");
    assert_eq!(form["code"], "the-code");
    assert_eq!(form["redirect_uri"], REDIRECT);
    assert_eq!(form["resource"], resource);
    let params = user.params();
    assert_eq!(
        URL_SAFE_NO_PAD.encode(Sha256::digest(form["code_verifier"].as_bytes())),
        params["code_challenge"]
    );
    assert_eq!(params["code_challenge_method"], "S256");
    assert_eq!(params["resource"], resource);
}

#[tokio::test]
async fn each_token_endpoint_auth_method_on_the_wire() {
    // `none`: a public pre-registered client; `client_id` in the body, nothing else.
    let server = as_mock(
        |base| {
            as_with(
                base,
                json!({"token_endpoint_auth_methods_supported": ["none"]}),
            )
        },
        endpoints(bearer("tok-none"), json!({})),
    )
    .await;
    let oauth = client_builder()
        .client(Registered::new(&server.base, "public-app"))
        .build()
        .unwrap();
    let user = User::honest();
    let tokens = flow(&oauth, &server, &user).await.unwrap();
    assert_eq!(tokens.access_token, "tok-none");
    let token = &server.asked("/token")[0];
    assert_code_exchange(token, &user, &server.url("/mcp"));
    assert_eq!(token.form()["client_id"], "public-app");
    assert!(!token.form().contains_key("client_secret"));
    assert!(token.headers.get("authorization").is_none());

    // `client_secret_basic`: id and secret form-encoded, then base64 (RFC 6749 2.3.1); no
    // credentials in the body.
    let server = as_mock(
        |base| {
            as_with(
                base,
                json!({"token_endpoint_auth_methods_supported": ["client_secret_basic"]}),
            )
        },
        endpoints(bearer("tok-basic"), json!({})),
    )
    .await;
    let oauth = client_builder()
        .client(Registered::new(&server.base, "app:1 é").secret("s3cr+t/ &="))
        .build()
        .unwrap();
    let user = User::honest();
    flow(&oauth, &server, &user).await.unwrap();
    let token = &server.asked("/token")[0];
    assert_code_exchange(token, &user, &server.url("/mcp"));
    let expected = format!(
        "Basic {}",
        STANDARD.encode("app%3A1+%C3%A9:s3cr%2Bt%2F+%26%3D")
    );
    assert_eq!(token.headers["authorization"], expected.as_str());
    assert!(!token.form().contains_key("client_secret"));
    assert!(!token.form().contains_key("client_id"));

    // `client_secret_post`: chosen when the server lists only it.
    let server = as_mock(
        |base| {
            as_with(
                base,
                json!({"token_endpoint_auth_methods_supported": ["client_secret_post"]}),
            )
        },
        endpoints(bearer("tok-post"), json!({})),
    )
    .await;
    let oauth = client_builder()
        .client(Registered::new(&server.base, "app").secret("s3cret"))
        .build()
        .unwrap();
    let user = User::honest();
    flow(&oauth, &server, &user).await.unwrap();
    let token = &server.asked("/token")[0];
    assert_code_exchange(token, &user, &server.url("/mcp"));
    assert_eq!(token.form()["client_id"], "app");
    assert_eq!(token.form()["client_secret"], "s3cret");
    assert!(token.headers.get("authorization").is_none());

    // `private_key_jwt`: an assertion for the issuer, checked by decoding it.
    let server = as_mock(
        |base| {
            as_with(
                base,
                json!({"token_endpoint_auth_methods_supported": ["private_key_jwt"]}),
            )
        },
        endpoints(bearer("tok-jwt"), json!({})),
    )
    .await;
    let key = SigningKey::from_pkcs8_pem(P256_PEM).unwrap();
    let oauth = client_builder()
        .client(Registered::new(&server.base, "jwt-app").private_key(key.clone()))
        .build()
        .unwrap();
    let user = User::honest();
    flow(&oauth, &server, &user).await.unwrap();
    let token = &server.asked("/token")[0];
    assert_code_exchange(token, &user, &server.url("/mcp"));
    let form = token.form();
    assert_eq!(
        form["client_assertion_type"],
        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    );
    assert!(!form.contains_key("client_secret"));
    assert!(token.headers.get("authorization").is_none());
    let (header, claims) = verify(&form["client_assertion"], &key, &server.base);
    assert_eq!(header["alg"], "ES256");
    assert_eq!(claims["iss"], "jwt-app");
    assert_eq!(claims["sub"], "jwt-app");
    assert_eq!(claims["aud"], server.base.as_str());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(claims["iat"].as_u64().unwrap().abs_diff(now) <= 5);

    // A pre-registered secret at a server listing only `private_key_jwt`: a typed error, no
    // request to its endpoints.
    let oauth = client_builder()
        .client(Registered::new(&server.base, "app").secret("s"))
        .build()
        .unwrap();
    let result = flow(&oauth, &server, &User::honest()).await;
    assert!(
        matches!(
            &result,
            Err(Error::NoAuthMethod {
                method: "client_secret_basic",
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(server.asked("/token").len(), 1);
}

#[tokio::test]
async fn dynamic_registration_body_and_method_choice() {
    // No list: `none` asked; loopback redirect URIs: `native`; no `scope`.
    let server = as_mock(
        |base| {
            let mut document = as_document(base);
            document
                .as_object_mut()
                .unwrap()
                .remove("token_endpoint_auth_methods_supported");
            document
        },
        endpoints(bearer("tok"), json!({"client_id": "dyn-1"})),
    )
    .await;
    let oauth = client_builder()
        .redirect_uri("http://[::1]:9/cb")
        .client_name("Test app")
        .build()
        .unwrap();
    let user = User::honest();
    flow(&oauth, &server, &user).await.unwrap();
    let register = &server.asked("/register")[0];
    assert_eq!(register.method, Method::POST);
    assert_eq!(
        register.headers["content-type"].to_str().unwrap(),
        "application/json"
    );
    assert_eq!(
        register.json(),
        json!({
            "redirect_uris": [REDIRECT, "http://[::1]:9/cb"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "native",
            "client_name": "Test app",
        })
    );
    assert_eq!(user.params()["client_id"], "dyn-1");
    assert_eq!(server.asked("/token")[0].form()["client_id"], "dyn-1");
    // Registered once per issuer.
    flow(&oauth, &server, &User::honest()).await.unwrap();
    assert_eq!(server.asked("/register").len(), 1);
    assert_eq!(server.asked("/token").len(), 2);

    // Secret methods: basic before post; an https redirect URI is `web`; the answer's method
    // and secret are obeyed.
    for (listed, asked) in [
        (
            json!(["client_secret_post", "client_secret_basic"]),
            "client_secret_basic",
        ),
        (
            json!(["private_key_jwt", "client_secret_post"]),
            "client_secret_post",
        ),
        (json!(["client_secret_basic", "none"]), "none"),
    ] {
        let server = as_mock(
            move |base| {
                as_with(
                    base,
                    json!({"token_endpoint_auth_methods_supported": listed}),
                )
            },
            endpoints(
                bearer("tok"),
                json!({"client_id": "dyn-2", "client_secret": "dyn-secret",
                       "token_endpoint_auth_method": "client_secret_post"}),
            ),
        )
        .await;
        let oauth = OAuth::builder()
            .redirect_uri("https://app.example.com/cb")
            .build()
            .unwrap();
        flow(&oauth, &server, &User::honest()).await.unwrap();
        let body = server.asked("/register")[0].json();
        assert_eq!(body["token_endpoint_auth_method"], asked);
        assert_eq!(body["application_type"], "web");
        assert!(body.get("scope").is_none() && body.get("client_name").is_none());
        let form = server.asked("/token")[0].form();
        assert_eq!(
            form["client_secret"], "dyn-secret",
            "obeys the registration"
        );
    }

    // No method in the answer: the one asked for is kept (basic, with the secret).
    let server = as_mock(
        |base| {
            as_with(
                base,
                json!({"token_endpoint_auth_methods_supported": ["client_secret_basic"]}),
            )
        },
        endpoints(
            bearer("tok"),
            json!({"client_id": "dyn-3", "client_secret": "x"}),
        ),
    )
    .await;
    let oauth = client_builder().build().unwrap();
    flow(&oauth, &server, &User::honest()).await.unwrap();
    let token = &server.asked("/token")[0];
    assert_eq!(
        token.headers["authorization"],
        format!("Basic {}", STANDARD.encode("dyn-3:x")).as_str()
    );
}

#[tokio::test]
async fn unusable_registrations_are_typed_errors() {
    for (status, answer, expect) in [
        (
            400,
            json!({"error": "invalid_redirect_uri", "error_description": "no\u{1b}[2J"}),
            "refused",
        ),
        (201, json!({"client_secret": "x"}), "no client_id"),
        (
            201,
            json!({"client_id": "a", "token_endpoint_auth_method": "client_secret_basic"}),
            "without a client_secret",
        ),
        (
            201,
            json!({"client_id": "a", "token_endpoint_auth_method": "tls_client_auth"}),
            "tls_client_auth",
        ),
    ] {
        let server = as_mock(as_document, move |_, asked| {
            (asked.path == "/register").then(|| (status, answer.to_string()))
        })
        .await;
        let oauth = client_builder().build().unwrap();
        let result = flow(&oauth, &server, &User::honest()).await;
        match &result {
            Err(Error::RegistrationRefused {
                status: 400,
                error,
                description,
                ..
            }) => {
                assert_eq!(expect, "refused");
                assert_eq!(error.as_deref(), Some("invalid_redirect_uri"));
                assert_eq!(description.as_deref(), Some("no\\u{1b}[2J"));
            }
            Err(Error::InvalidRegistration { why, .. }) => assert!(why.contains(expect), "{why}"),
            other => panic!("{expect}: {other:?}"),
        }
        assert!(server.asked("/token").is_empty());
    }

    // No registration endpoint, no CIMD, no pre-registered client.
    let server = as_mock(
        |base| {
            let mut document = as_document(base);
            document
                .as_object_mut()
                .unwrap()
                .remove("registration_endpoint");
            document
        },
        endpoints(bearer("tok"), json!({})),
    )
    .await;
    let result = flow(&client_builder().build().unwrap(), &server, &User::honest()).await;
    assert!(
        matches!(&result, Err(Error::NoClientIdentity { issuer, .. }) if *issuer == server.base),
        "{result:?}"
    );
}

#[tokio::test]
async fn cimd_only_when_advertised_and_pre_registered_first() {
    const CIMD: &str = "https://app.example.com/oauth/client.json";
    for advertised in [true, false] {
        let server = as_mock(
            move |base| {
                as_with(
                    base,
                    json!({"client_id_metadata_document_supported": advertised}),
                )
            },
            endpoints(bearer("tok"), json!({"client_id": "dyn"})),
        )
        .await;
        let oauth = client_builder().client_metadata_url(CIMD).build().unwrap();
        let user = User::honest();
        flow(&oauth, &server, &user).await.unwrap();
        let form = server.asked("/token")[0].form();
        if advertised {
            assert_eq!(user.params()["client_id"], CIMD);
            assert_eq!(form["client_id"], CIMD);
            assert!(server.asked("/register").is_empty());
        } else {
            assert_eq!(user.params()["client_id"], "dyn");
            assert_eq!(server.asked("/register").len(), 1);
        }
    }

    // A pre-registered client for this issuer comes before both.
    let server = as_mock(
        |base| as_with(base, json!({"client_id_metadata_document_supported": true})),
        endpoints(bearer("tok"), json!({"client_id": "dyn"})),
    )
    .await;
    let oauth = client_builder()
        .client(Registered::new("https://other.example.com", "not-this-one"))
        .client(Registered::new(&server.base, "pre"))
        .client_metadata_url(CIMD)
        .build()
        .unwrap();
    let user = User::honest();
    flow(&oauth, &server, &user).await.unwrap();
    assert_eq!(user.params()["client_id"], "pre");
    assert!(server.asked("/register").is_empty());
}

#[tokio::test]
async fn an_unbound_client_binds_to_the_first_issuer_and_no_other() {
    let first = as_mock(as_document, endpoints(bearer("tok-1"), json!({}))).await;
    let without_registration = |base: &str| {
        let mut document = as_document(base);
        document
            .as_object_mut()
            .unwrap()
            .remove("registration_endpoint");
        document
    };
    let second = as_mock(without_registration, endpoints(bearer("tok-2"), json!({}))).await;
    let third = as_mock(
        as_document,
        endpoints(bearer("tok-3"), json!({"client_id": "dyn-3"})),
    )
    .await;
    let oauth = client_builder()
        .client(Registered::unbound("svc").secret("svc-secret"))
        .build()
        .unwrap();
    flow(&oauth, &first, &User::honest()).await.unwrap();
    assert!(
        first.asked("/token")[0]
            .headers
            .contains_key("authorization")
    );
    assert!(first.asked("/register").is_empty());
    // Another issuer: not shown the client; nothing else to use there.
    let result = flow(&oauth, &second, &User::honest()).await;
    match &result {
        Err(Error::NoClientIdentity { issuer, hint }) => {
            assert_eq!(*issuer, second.base);
            assert!(
                hint.contains(&format!("svc is for {}", first.base)),
                "{hint}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A third that registers clients: registration, never the bound client's credentials.
    let user = User::honest();
    flow(&oauth, &third, &user).await.unwrap();
    assert_eq!(user.params()["client_id"], "dyn-3");
    for asked in second.all().into_iter().chain(third.all()) {
        assert!(!asked.body.contains("svc"), "{asked:?}");
        assert!(!asked.headers.contains_key("authorization"), "{asked:?}");
    }
    // The first still gets it.
    flow(&oauth, &first, &User::honest()).await.unwrap();
    assert_eq!(first.asked("/token").len(), 2);
}

#[tokio::test]
async fn the_redirects_checks_stop_before_the_token_request() {
    let server = as_mock(
        |base| {
            as_with(
                base,
                json!({"authorization_response_iss_parameter_supported": true}),
            )
        },
        endpoints(bearer("tok"), json!({"client_id": "dyn"})),
    )
    .await;
    let oauth = client_builder().build().unwrap();
    type Expected = fn(&Error) -> bool;
    let cases: Vec<(User, Expected)> = vec![
        (
            User::answering(|r, _| {
                Ok(format!(
                    "{}?code=c&state=forged&iss={}",
                    r.redirect_uri, r.issuer
                ))
            }),
            |e| matches!(e, Error::StateMismatch),
        ),
        (
            User::answering(|r, p| Ok(format!("{}?code=c&state={}", r.redirect_uri, p["state"]))),
            |e| matches!(e, Error::IssMissing { .. }),
        ),
        (
            User::answering(|r, p| {
                Ok(format!(
                    "{}?code=c&state={}&iss=https://evil.example.com",
                    r.redirect_uri, p["state"]
                ))
            }),
            |e| matches!(e, Error::IssMismatch { .. }),
        ),
        (
            User::answering(|r, p| {
                Ok(format!(
                    "{}?code=c&state={}&iss={}%2F",
                    r.redirect_uri, p["state"], r.issuer
                ))
            }),
            |e| matches!(e, Error::IssMismatch { .. }),
        ),
        (
            User::answering(|r, p| {
                Ok(format!(
                    "{}?error=access_denied&state={}&iss={}",
                    r.redirect_uri, p["state"], r.issuer
                ))
            }),
            |e| matches!(e, Error::AuthorizationDenied { error, .. } if error == "access_denied"),
        ),
        (
            User::answering(|_, _| Err(Declined::new("the window was closed"))),
            |e| matches!(e, Error::Declined { reason } if reason == "the window was closed"),
        ),
    ];
    for (user, expected) in cases {
        let result = flow(&oauth, &server, &user).await;
        assert!(result.as_ref().is_err_and(expected), "{result:?}");
    }
    assert!(server.asked("/token").is_empty());
    // And the honest user gets through, percent-encoded `iss` included.
    let user = User::answering(|r, p| {
        let mut iss = String::new();
        crate::fetch::encode_component(&r.issuer, &mut iss);
        Ok(format!(
            "{}?code=the-code&state={}&iss={iss}",
            r.redirect_uri, p["state"]
        ))
    });
    flow(&oauth, &server, &user).await.unwrap();
    assert_eq!(server.asked("/token").len(), 1);
}

#[tokio::test]
async fn the_flow_is_bounded_by_its_timeout() {
    #[derive(Debug)]
    struct Away;
    impl AuthorizationHandler for Away {
        fn authorize<'a>(
            &'a self,
            _: &'a AuthorizationRequest,
        ) -> crate::BoxFuture<'a, Result<Redirect, Declined>> {
            Box::pin(std::future::pending())
        }
    }
    let server = as_mock(
        as_document,
        endpoints(bearer("tok"), json!({"client_id": "dyn"})),
    )
    .await;
    let oauth = client_builder()
        .flow_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let discovery = oauth.discover(&server.url("/mcp"), &none()).await.unwrap();
    let started = Instant::now();
    let result = oauth.authorize(&discovery, &Away).await;
    assert!(
        matches!(
            result,
            Err(Error::Timeout {
                phase: "authorization"
            })
        ),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn token_response_edge_cases() {
    let huge = "a".repeat(16 * 1024 + 1);
    for (answer, expect) in [
        (
            (200, json!({"token_type": "Bearer"}).to_string()),
            "no access_token",
        ),
        (
            (
                200,
                json!({"access_token": "", "token_type": "Bearer"}).to_string(),
            ),
            "empty",
        ),
        (
            (
                200,
                json!({"access_token": "t", "token_type": "mac"}).to_string(),
            ),
            "mac",
        ),
        (
            (200, json!({"access_token": "t"}).to_string()),
            "no token_type",
        ),
        (
            (
                200,
                json!({"access_token": huge, "token_type": "Bearer"}).to_string(),
            ),
            "16384",
        ),
        (
            (
                200,
                json!({"access_token": "a\nb", "token_type": "Bearer"}).to_string(),
            ),
            "printable",
        ),
        (
            (
                200,
                json!({"access_token": "t", "token_type": "Bearer", "expires_in": -1}).to_string(),
            ),
            "expires_in",
        ),
        ((200, "<html>hello</html>".to_owned()), "not a JSON object"),
    ] {
        let server = as_mock(as_document, endpoints(answer, json!({"client_id": "dyn"}))).await;
        let result = flow(&client_builder().build().unwrap(), &server, &User::honest()).await;
        match &result {
            Err(Error::InvalidTokenResponse { why, endpoint }) => {
                assert!(why.contains(expect), "{why}");
                assert_eq!(*endpoint, server.url("/token"));
            }
            other => panic!("{expect}: {other:?}"),
        }
    }

    // A refusal: its error and description, cut and escaped.
    let description = format!("bad\ncode\u{1b}[31m{}", "x".repeat(500));
    let server = as_mock(
        as_document,
        endpoints(
            (
                400,
                json!({"error": "invalid_grant", "error_description": description}).to_string(),
            ),
            json!({"client_id": "dyn"}),
        ),
    )
    .await;
    let result = flow(&client_builder().build().unwrap(), &server, &User::honest()).await;
    match &result {
        Err(
            e @ Error::TokenRefused {
                status: 400,
                error,
                description,
                ..
            },
        ) => {
            assert_eq!(error.as_deref(), Some("invalid_grant"));
            let description = description.as_deref().unwrap();
            assert!(
                description.starts_with("bad\\ncode\\u{1b}[31m"),
                "{description}"
            );
            assert!(description.chars().count() <= 220);
            assert!(!e.to_string().chars().any(char::is_control));
        }
        other => panic!("{other:?}"),
    }

    // Accepted: any case of the type, DPoP, expiry, scope, refresh token.
    let server = as_mock(
        as_document,
        endpoints(
            (
                200,
                json!({"access_token": "t", "token_type": "dPoP", "expires_in": "60",
                       "scope": "a  b", "refresh_token": "r"})
                .to_string(),
            ),
            json!({"client_id": "dyn"}),
        ),
    )
    .await;
    let before = std::time::SystemTime::now();
    let tokens = flow(&client_builder().build().unwrap(), &server, &User::honest())
        .await
        .unwrap();
    assert_eq!(tokens.token_type, TokenType::Dpop);
    assert_eq!(tokens.scopes, ["a", "b"]);
    assert_eq!(tokens.refresh_token.as_deref(), Some("r"));
    assert_eq!(tokens.issuer, server.base);
    assert_eq!(tokens.resource, server.url("/mcp"));
    let expires = tokens.expires_at.unwrap().duration_since(before).unwrap();
    assert!(expires >= Duration::from_secs(59) && expires <= Duration::from_secs(62));
}

#[tokio::test]
async fn refresh_sends_the_grant_with_resource_and_keeps_what_the_answer_omits() {
    let server = as_mock(as_document, move |_, asked| match asked.path.as_str() {
        "/register" => Some((
            201,
            json!({"client_id": "dyn", "client_secret": "s",
                "token_endpoint_auth_method": "client_secret_post"})
            .to_string(),
        )),
        "/token" if asked.form()["grant_type"] == "authorization_code" => Some((
            200,
            json!({"access_token": "a1", "token_type": "Bearer", "refresh_token": "r1",
                       "scope": "mcp:basic"})
            .to_string(),
        )),
        "/token" => Some(bearer("a2")),
        _ => None,
    })
    .await;
    let oauth = client_builder().build().unwrap();
    let discovery = oauth.discover(&server.url("/mcp"), &none()).await.unwrap();
    let tokens = oauth.authorize(&discovery, &User::honest()).await.unwrap();
    let fresh = oauth.refresh(&discovery, &tokens).await.unwrap();
    assert_eq!(fresh.access_token, "a2");
    assert_eq!(fresh.refresh_token.as_deref(), Some("r1"), "kept");
    assert_eq!(fresh.scopes, ["mcp:basic"], "kept");
    let form = server.asked("/token")[1].form();
    assert_eq!(form["grant_type"], "refresh_token");
    assert_eq!(form["refresh_token"], "r1");
    assert_eq!(form["resource"], server.url("/mcp"));
    assert_eq!(form["client_secret"], "s");
    assert!(!form.contains_key("scope"));
    assert_eq!(server.asked("/register").len(), 1);

    // Not without a refresh token, nor at another server.
    let mut other = fresh.clone();
    other.issuer = "https://other.example.com".into();
    assert!(matches!(
        oauth.refresh(&discovery, &other).await,
        Err(Error::CannotRefresh { .. })
    ));
    other = fresh;
    other.refresh_token = None;
    assert!(matches!(
        oauth.refresh(&discovery, &other).await,
        Err(Error::CannotRefresh { .. })
    ));
    assert_eq!(server.asked("/token").len(), 2);
}

#[test]
fn redirect_uris_and_the_metadata_url_are_checked_at_build() {
    for good in [
        "http://127.0.0.1:8123/callback",
        "http://localhost/cb",
        "http://[::1]:9/cb",
        "https://app.example.com/oauth/cb?x=1",
    ] {
        assert!(
            OAuth::builder().redirect_uri(good).build().is_ok(),
            "{good}"
        );
    }
    for bad in [
        "http://app.example.com/cb",
        "http://127.0.0.1.example.com/cb",
        "https://app.example.com/cb#x",
        "https://user@app.example.com/cb",
        "com.example.app:/cb",
        "/cb",
        "",
    ] {
        assert!(
            matches!(
                OAuth::builder().redirect_uri(bad).build(),
                Err(Error::InvalidSetting {
                    setting: "redirect_uri",
                    ..
                })
            ),
            "{bad}"
        );
    }
    for bad in [
        "http://app.example.com/client.json",
        "https://app.example.com",
        "https://app.example.com/",
        "https://app.example.com/c.json#f",
    ] {
        assert!(
            matches!(
                OAuth::builder().client_metadata_url(bad).build(),
                Err(Error::InvalidSetting {
                    setting: "client_metadata_url",
                    ..
                })
            ),
            "{bad}"
        );
    }
    assert!(matches!(
        OAuth::builder()
            .client(Registered::unbound("a").method(TokenAuthMethod::ClientSecretPost))
            .build(),
        Err(Error::InvalidSetting {
            setting: "client",
            ..
        })
    ));
}

#[tokio::test]
async fn no_secret_in_debug_output() {
    let key = SigningKey::from_pkcs8_pem(P256_PEM).unwrap();
    let oauth = client_builder()
        .client(Registered::new("https://as", "id").secret("pre-secret"))
        .client(Registered::unbound("jwt").private_key(key))
        .build()
        .unwrap();
    let server = as_mock(
        as_document,
        endpoints(
            (
                200,
                json!({"access_token": "access-secret", "token_type": "Bearer",
                       "refresh_token": "refresh-secret"})
                .to_string(),
            ),
            json!({}),
        ),
    )
    .await;
    let tokens = flow(&oauth, &server, &User::honest()).await.unwrap();
    let identity = oauth
        .identify(&AuthServer::legacy_defaults("https://as"))
        .await
        .unwrap();
    let pending = super::flow::Pending {
        state: "state-secret".into(),
        pkce: super::pkce::Pkce::from_verifier("verifier-secret".into()),
        issuer: "https://as".into(),
        iss_required: true,
    };
    let shown = format!(
        "{oauth:?} {tokens:?} {identity:?} {:?} {pending:?}",
        Redirect::new("code=code-secret&state=s"),
    );
    for secret in [
        "pre-secret",
        "access-secret",
        "refresh-secret",
        "code-secret",
        "verifier-secret",
        "state-secret",
        "MIGHAgEA",
    ] {
        assert!(!shown.contains(secret), "{secret} in {shown}");
    }
    assert!(shown.contains("jwt") && shown.contains("ES256"), "{shown}");
}
