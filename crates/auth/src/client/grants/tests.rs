//! The extension grants and DPoP on token requests, against in-process servers: each grant's
//! exact wire form (the checks of the conformance scenarios 28-33), proofs checked as the
//! server half checks them, the nonce retry, the policies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http::{HeaderMap, Response};
use http_body_util::Full;
use jsonwebtoken::jwk::{Jwk, ThumbprintHash};
use jsonwebtoken::{DecodingKey, Validation};
use serde_json::{Value, json};

use super::super::jwt::tests::{P256_PEM, verify};
use super::super::*;
use crate::fetch::form_decode;
use crate::fetch::tests::{Seen, serve};

/// One request the mock saw.
#[derive(Debug, Clone)]
struct Hit {
    path: String,
    headers: HeaderMap,
    form: HashMap<String, String>,
    /// The form's names, in order (repeats kept).
    names: Vec<String>,
}

/// What a route answers: status, headers, JSON body.
type Answer = (u16, Vec<(&'static str, String)>, Value);

/// An in-process server (`http://127.0.0.1:PORT`) answering `route(base, hit)`; 404 when it
/// gives nothing. It records every request.
struct Mock {
    base: String,
    hits: Arc<Mutex<Vec<Hit>>>,
}

impl Mock {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn hits(&self, path: &str) -> Vec<Hit> {
        let hits = self.hits.lock().unwrap();
        hits.iter().filter(|h| h.path == path).cloned().collect()
    }
}

async fn mock(route: impl Fn(&str, &Hit) -> Option<Answer> + Send + Sync + 'static) -> Mock {
    let base = Arc::new(Mutex::new(String::new()));
    let hits = Arc::new(Mutex::new(Vec::new()));
    let (named, recorded) = (base.clone(), hits.clone());
    let addr = serve(Arc::new(move |seen: Seen| {
        let pairs = form_decode(std::str::from_utf8(&seen.body).unwrap_or_default());
        let hit = Hit {
            path: seen.path.clone(),
            headers: seen.headers.clone(),
            names: pairs.iter().map(|(k, _)| k.clone()).collect(),
            form: pairs.into_iter().collect(),
        };
        recorded.lock().unwrap().push(hit.clone());
        let base = named.lock().unwrap().clone();
        let (status, headers, body) = route(&base, &hit).unwrap_or((404, vec![], json!({})));
        let mut response = Response::builder()
            .status(status)
            .header("content-type", "application/json");
        for (name, value) in headers {
            response = response.header(name, value);
        }
        response
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap()
    }))
    .await;
    let url = format!("http://{addr}");
    *base.lock().unwrap() = url.clone();
    Mock { base: url, hits }
}

const PRM: &str = "/.well-known/oauth-protected-resource/mcp";
const RFC8414: &str = "/.well-known/oauth-authorization-server";

/// An authorization server document in the suite's mock style, with `extra` members.
fn as_document(base: &str, extra: Value) -> Value {
    let mut document = json!({
        "issuer": base,
        "token_endpoint": format!("{base}/token"),
        "response_types_supported": ["code"],
    });
    for (name, value) in extra.as_object().unwrap() {
        document[name] = value.clone();
    }
    document
}

fn ok(body: Value) -> Option<Answer> {
    Some((200, vec![], body))
}

/// A server that is both the resource (PRM at `/mcp`, `scopes`) and its authorization server
/// (metadata with `extra`), whose token endpoint answers `token(hit)`.
async fn server(
    extra: Value,
    scopes: Option<Vec<&'static str>>,
    token: impl Fn(&Hit) -> Answer + Send + Sync + 'static,
) -> Mock {
    mock(move |base, hit| match hit.path.as_str() {
        PRM => {
            let mut prm =
                json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]});
            if let Some(scopes) = &scopes {
                prm["scopes_supported"] = json!(scopes);
            }
            ok(prm)
        }
        RFC8414 => ok(as_document(base, extra.clone())),
        "/token" => Some(token(hit)),
        _ => None,
    })
    .await
}

fn bearer(token: &str) -> Answer {
    (
        200,
        vec![],
        json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600}),
    )
}

fn refused(error: &str) -> Answer {
    (
        400,
        vec![],
        json!({"error": error, "error_description": "no"}),
    )
}

async fn discover(oauth: &OAuth, server: &Mock) -> Result<Discovery, Error> {
    oauth
        .discover(&server.url("/mcp"), &Challenges::default())
        .await
}

fn basic_of(hit: &Hit) -> Option<(String, String)> {
    let value = hit.headers.get("authorization")?.to_str().ok()?;
    let decoded = STANDARD.decode(value.strip_prefix("Basic ")?).ok()?;
    let (id, secret) = std::str::from_utf8(&decoded).ok()?.split_once(':')?;
    Some((id.to_owned(), secret.to_owned()))
}

/// Scenario 29 (`auth/client-credentials-basic`).
#[tokio::test]
async fn client_credentials_with_client_secret_basic() {
    let server = server(
        json!({"grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"]}),
        Some(vec!["mcp:basic"]),
        |_| bearer("cc-token-1"),
    )
    .await;
    let oauth = OAuth::client_credentials(
        Registered::unbound("conformance-test-client").secret("conformance-test-secret"),
    )
    .build()
    .unwrap();
    assert_eq!(oauth.grant_kind(), GrantKind::ClientCredentials);
    let discovery = discover(&oauth, &server).await.unwrap();
    // No authorization endpoint, no PKCE: not needed without a user.
    let tokens = oauth
        .grant_token(&discovery, &discovery.scopes())
        .await
        .unwrap();
    assert_eq!(tokens.access_token, "cc-token-1");
    assert_eq!(tokens.token_type, TokenType::Bearer);
    assert_eq!(tokens.scopes, ["mcp:basic"]);
    let hits = server.hits("/token");
    assert_eq!(hits.len(), 1);
    let hit = &hits[0];
    assert_eq!(
        basic_of(hit),
        Some((
            "conformance-test-client".into(),
            "conformance-test-secret".into()
        ))
    );
    assert_eq!(hit.names, ["grant_type", "scope", "resource"]);
    assert_eq!(hit.form["grant_type"], "client_credentials");
    assert_eq!(hit.form["scope"], "mcp:basic");
    assert_eq!(hit.form["resource"], server.url("/mcp"));
    assert!(hit.headers.get("dpop").is_none());
    // No offline_access for a grant without a user, no registration, no authorization.
    assert!(server.hits("/register").is_empty());
}

/// Scenario 28 (`auth/client-credentials-jwt`).
#[tokio::test]
async fn client_credentials_with_private_key_jwt() {
    let server = server(
        json!({"grant_types_supported": ["client_credentials"],
            "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            "token_endpoint_auth_signing_alg_values_supported": ["ES256"]}),
        None,
        |_| bearer("cc-token-2"),
    )
    .await;
    let key = SigningKey::from_pkcs8_pem(P256_PEM).unwrap();
    let oauth = OAuth::client_credentials(
        Registered::unbound("conformance-test-client").private_key(key.clone()),
    )
    .build()
    .unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    oauth
        .client_credentials_token(&discovery, &[])
        .await
        .unwrap();
    let hit = &server.hits("/token")[0];
    assert!(hit.headers.get("authorization").is_none());
    assert_eq!(
        hit.names,
        [
            "grant_type",
            "resource",
            "client_id",
            "client_assertion_type",
            "client_assertion"
        ]
    );
    assert_eq!(
        hit.form["client_assertion_type"],
        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    );
    let (header, claims) = verify(&hit.form["client_assertion"], &key, &server.base);
    assert_eq!(header["alg"], "ES256");
    assert_eq!(claims["iss"], "conformance-test-client");
    assert_eq!(claims["sub"], "conformance-test-client");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(claims["iat"].as_u64().unwrap().abs_diff(now) <= 30);
}

#[tokio::test]
async fn a_grant_the_server_does_not_list_is_refused_before_any_token_request() {
    let server = server(
        json!({"grant_types_supported": ["authorization_code"]}),
        None,
        |_| bearer("never"),
    )
    .await;
    let oauth = OAuth::client_credentials(Registered::unbound("c").secret("s"))
        .build()
        .unwrap();
    match discover(&oauth, &server).await {
        Err(Error::GrantUnsupported { grant, .. }) => assert_eq!(grant, "client_credentials"),
        other => panic!("{other:?}"),
    }
    assert!(server.hits("/token").is_empty());
}

#[tokio::test]
async fn grants_without_a_user_never_register_a_client() {
    let server = mock(|base, hit| match hit.path.as_str() {
        PRM => ok(json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]})),
        RFC8414 => ok(as_document(
            base,
            json!({"registration_endpoint": format!("{base}/register")}),
        )),
        "/register" => ok(json!({"client_id": "dynamic"})),
        "/token" => Some(bearer("t")),
        _ => None,
    })
    .await;
    // Registered for another authorization server only.
    let oauth =
        OAuth::client_credentials(Registered::new("https://other.example.com", "c").secret("s"))
            .build()
            .unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    assert!(matches!(
        oauth.grant_token(&discovery, &[]).await,
        Err(Error::NoClientIdentity { .. })
    ));
    assert!(server.hits("/register").is_empty());
    assert!(server.hits("/token").is_empty());
}

/// Scenario 33 (`auth/wif-jwt-bearer`): the assertion as given, `client_id` for auth `none`.
#[tokio::test]
async fn jwt_bearer_sends_the_assertion() {
    let server = server(
        json!({"grant_types_supported": ["urn:ietf:params:oauth:grant-type:jwt-bearer"],
            "token_endpoint_auth_methods_supported": ["none"]}),
        Some(vec!["mcp:basic"]),
        |_| bearer("test-token-wif"),
    )
    .await;
    let oauth = OAuth::jwt_bearer(
        "conformance-wif-workload",
        <dyn AssertionSource>::fixed("a.workload.jwt"),
    )
    .build()
    .unwrap();
    assert_eq!(oauth.grant_kind(), GrantKind::JwtBearer);
    let discovery = discover(&oauth, &server).await.unwrap();
    let tokens = oauth
        .jwt_bearer_token(&discovery, &discovery.scopes())
        .await
        .unwrap();
    assert_eq!(tokens.access_token, "test-token-wif");
    let hit = &server.hits("/token")[0];
    assert_eq!(
        hit.names,
        ["grant_type", "assertion", "scope", "resource", "client_id"]
    );
    assert_eq!(
        hit.form["grant_type"],
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    assert_eq!(hit.form["assertion"], "a.workload.jwt");
    assert_eq!(hit.form["client_id"], "conformance-wif-workload");
    assert!(hit.headers.get("authorization").is_none());
}

/// Scenario 33's warnings: after a refusal, no retry and no other grant.
#[tokio::test]
async fn a_refused_jwt_bearer_grant_is_not_retried() {
    for error in ["invalid_grant", "invalid_scope", "unauthorized_client"] {
        let server = server(
            json!({"grant_types_supported": ["urn:ietf:params:oauth:grant-type:jwt-bearer"],
                "token_endpoint_auth_methods_supported": ["none"]}),
            None,
            move |_| refused(error),
        )
        .await;
        let oauth = OAuth::jwt_bearer("w", <dyn AssertionSource>::fixed("expired.jwt"))
            .build()
            .unwrap();
        let discovery = discover(&oauth, &server).await.unwrap();
        match oauth.grant_token(&discovery, &[]).await {
            Err(Error::TokenRefused {
                status: 400,
                error: Some(e),
                ..
            }) => assert_eq!(e, error),
            other => panic!("{error}: {other:?}"),
        }
        assert_eq!(server.hits("/token").len(), 1, "{error}");
    }
}

#[tokio::test]
async fn an_assertion_file_is_read_again_for_every_request() {
    let dir = std::env::temp_dir().join(format!("modelctx-wif-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("token");
    std::fs::write(&path, "first.jwt\n").unwrap();
    let server = server(
        json!({"token_endpoint_auth_methods_supported": ["none"]}),
        None,
        |_| bearer("t"),
    )
    .await;
    let oauth = OAuth::jwt_bearer("w", <dyn AssertionSource>::file(&path))
        .build()
        .unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    oauth.grant_token(&discovery, &[]).await.unwrap();
    std::fs::write(&path, "  second.jwt  ").unwrap();
    oauth.grant_token(&discovery, &[]).await.unwrap();
    let sent: Vec<String> = server
        .hits("/token")
        .iter()
        .map(|h| h.form["assertion"].clone())
        .collect();
    assert_eq!(sent, ["first.jwt", "second.jwt"]);
    // A file that is gone or empty: a typed error, no token request.
    std::fs::write(&path, " \n").unwrap();
    assert!(matches!(
        oauth.grant_token(&discovery, &[]).await,
        Err(Error::Assertion {
            what: "assertion",
            ..
        })
    ));
    std::fs::remove_file(&path).unwrap();
    let e = oauth.grant_token(&discovery, &[]).await.unwrap_err();
    assert!(
        matches!(&e, Error::Assertion { .. }) && e.to_string().contains("token"),
        "{e}"
    );
    assert_eq!(server.hits("/token").len(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The identity provider of scenario 30: OpenID metadata, a token exchange answering an ID-JAG
/// (or `answer`).
async fn idp(answer: impl Fn(&Hit) -> Answer + Send + Sync + 'static) -> Mock {
    mock(move |_, hit| match hit.path.as_str() {
        "/token" => Some(answer(hit)),
        _ => None,
    })
    .await
}

fn id_jag_answer(grant: &str) -> Answer {
    (
        200,
        vec![],
        json!({"access_token": grant,
            "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag",
            "token_type": "N_A"}),
    )
}

fn enterprise(idp: &Mock) -> OAuth {
    OAuth::enterprise(IdJag::new(
        idp.url("/token"),
        Registered::unbound("conformance-test-idp-client"),
        <dyn SubjectToken>::id_token("the.id.token"),
    ))
    .client(Registered::unbound("conformance-test-xaa-client").secret("conformance test/secret"))
    .build()
    .unwrap()
}

/// Scenario 30 (`auth/enterprise-managed-authorization`).
#[tokio::test]
async fn enterprise_exchanges_the_id_token_then_presents_the_id_jag() {
    let idp = idp(|_| id_jag_answer("the.id.jag")).await;
    let server = server(
        json!({"grant_types_supported": ["urn:ietf:params:oauth:grant-type:jwt-bearer"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic"]}),
        Some(vec!["mcp:basic"]),
        |_| bearer("test-token-ema"),
    )
    .await;
    let oauth = enterprise(&idp);
    assert_eq!(oauth.grant_kind(), GrantKind::Enterprise);
    let discovery = discover(&oauth, &server).await.unwrap();
    let tokens = oauth
        .enterprise_token(&discovery, &discovery.scopes())
        .await
        .unwrap();
    assert_eq!(tokens.access_token, "test-token-ema");

    let exchange = &idp.hits("/token")[0];
    assert_eq!(
        exchange.form["grant_type"],
        "urn:ietf:params:oauth:grant-type:token-exchange"
    );
    assert_eq!(
        exchange.form["requested_token_type"],
        "urn:ietf:params:oauth:token-type:id-jag"
    );
    assert_eq!(exchange.form["audience"], server.base);
    assert_eq!(exchange.form["resource"], server.url("/mcp"));
    assert_eq!(exchange.form["scope"], "mcp:basic");
    assert_eq!(exchange.form["subject_token"], "the.id.token");
    assert_eq!(
        exchange.form["subject_token_type"],
        "urn:ietf:params:oauth:token-type:id_token"
    );
    assert_eq!(exchange.form["client_id"], "conformance-test-idp-client");
    assert!(exchange.headers.get("authorization").is_none());

    let grant = &server.hits("/token")[0];
    assert_eq!(
        grant.names,
        ["grant_type", "assertion", "scope", "resource"]
    );
    assert_eq!(
        grant.form["grant_type"],
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    );
    assert_eq!(grant.form["assertion"], "the.id.jag");
    assert_eq!(grant.form["resource"], server.url("/mcp"));
    // RFC 6749 section 2.3.1: each part form-encoded before Basic; the suite URL-decodes them.
    let (id, secret) = basic_of(grant).unwrap();
    assert_eq!(id, "conformance-test-xaa-client");
    assert_eq!(secret, "conformance+test%2Fsecret");
}

#[tokio::test]
async fn enterprise_stops_at_a_bad_identity_provider_answer() {
    let server_extra = json!({"token_endpoint_auth_methods_supported": ["client_secret_basic"]});
    for (answer, expect) in [
        (refused("invalid_grant"), "TokenRefused"),
        (
            (
                200,
                vec![],
                json!({"access_token": "x", "issued_token_type":
                "urn:ietf:params:oauth:token-type:access_token", "token_type": "Bearer"}),
            ),
            "InvalidTokenResponse",
        ),
        (
            (
                200,
                vec![],
                json!({"issued_token_type": "urn:ietf:params:oauth:token-type:id-jag"}),
            ),
            "InvalidTokenResponse",
        ),
    ] {
        let idp = idp(move |_| answer.clone()).await;
        let server = server(server_extra.clone(), None, |_| bearer("never")).await;
        let oauth = enterprise(&idp);
        let discovery = discover(&oauth, &server).await.unwrap();
        let e = oauth.grant_token(&discovery, &[]).await.unwrap_err();
        match &e {
            Error::TokenRefused { endpoint, .. } | Error::InvalidTokenResponse { endpoint, .. } => {
                assert_eq!(endpoint, &idp.url("/token"))
            }
            other => panic!("{other:?}"),
        }
        assert!(format!("{e:?}").starts_with(expect), "{e:?}");
        assert_eq!(idp.hits("/token").len(), 1);
        assert!(server.hits("/token").is_empty());
    }
}

#[test]
fn an_identity_provider_endpoint_must_be_https_or_loopback() {
    let result = OAuth::enterprise(IdJag::new(
        "http://idp.example.com/token",
        Registered::unbound("idp"),
        <dyn SubjectToken>::id_token("t"),
    ))
    .build();
    assert!(matches!(
        result,
        Err(Error::InvalidSetting {
            setting: "idp_token_endpoint",
            ..
        })
    ));
}

/// The DPoP proof of a token request, checked as the suite's mock checks it (scenario 31): `typ`
/// `dpop+jwt`, ES256, a public `jwk` that verifies the signature, `htm` POST, `htu` the token
/// endpoint, `iat` within 300 s, a `jti`. Returns the claims and the key's thumbprint.
fn check_token_proof(hit: &Hit, endpoint: &str) -> (Value, String) {
    let proof = hit.headers["dpop"].to_str().unwrap();
    let header = jsonwebtoken::decode_header(proof).unwrap();
    assert_eq!(header.typ.as_deref(), Some("dpop+jwt"));
    assert_eq!(header.alg, jsonwebtoken::Algorithm::ES256);
    let raw: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(proof.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert!(raw["jwk"].get("d").is_none(), "{raw}");
    let jwk: Jwk = header.jwk.unwrap();
    let mut validation = Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_aud = false;
    let claims =
        jsonwebtoken::decode::<Value>(proof, &DecodingKey::from_jwk(&jwk).unwrap(), &validation)
            .unwrap()
            .claims;
    assert_eq!(claims["htm"], "POST");
    assert_eq!(claims["htu"], endpoint);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(claims["iat"].as_u64().unwrap().abs_diff(now) <= 300);
    assert!(claims["jti"].as_str().unwrap().len() >= 22);
    assert!(claims.get("ath").is_none());
    (claims, jwk.thumbprint(ThumbprintHash::SHA256).unwrap())
}

fn dpop_token(token: &str) -> Answer {
    (
        200,
        vec![],
        json!({"access_token": token, "token_type": "DPoP", "expires_in": 3600}),
    )
}

/// Scenario 31 (`auth/dpop`): a proof on the code exchange of the authorization code flow.
#[tokio::test]
async fn the_code_exchange_carries_a_proof() {
    #[derive(Debug)]
    struct User;
    impl AuthorizationHandler for User {
        fn authorize<'a>(
            &'a self,
            request: &'a AuthorizationRequest,
        ) -> crate::BoxFuture<'a, Result<Redirect, Declined>> {
            let query = request.url.split_once('?').unwrap().1;
            let state = form_decode(query)
                .into_iter()
                .find(|(k, _)| k == "state")
                .unwrap()
                .1;
            let redirect = format!("{}?code=c&state={state}", request.redirect_uri);
            Box::pin(async move { Ok(Redirect::new(&redirect)) })
        }
    }
    let server = server(
        json!({"authorization_endpoint": "http://127.0.0.1:1/authorize",
            "code_challenge_methods_supported": ["S256"],
            "dpop_signing_alg_values_supported": ["ES256"]}),
        None,
        |_| dpop_token("bound"),
    )
    .await;
    let key = DpopKey::generate().unwrap();
    let oauth = OAuth::builder()
        .client(Registered::unbound("app"))
        .redirect_uri("http://127.0.0.1:9/cb")
        .dpop(key.clone())
        .build()
        .unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    let tokens = oauth.authorize(&discovery, &User).await.unwrap();
    assert_eq!(tokens.token_type, TokenType::Dpop);
    let hit = &server.hits("/token")[0];
    assert_eq!(hit.form["grant_type"], "authorization_code");
    let (_, jkt) = check_token_proof(hit, &server.url("/token"));
    assert_eq!(jkt, key.thumbprint());
}

/// Scenario 32 (`auth/dpop-nonce`): 400 `use_dpop_nonce` → one retry with the nonce.
#[tokio::test]
async fn the_token_endpoint_nonce_is_honoured_with_exactly_one_retry() {
    let server = server(
        json!({"dpop_signing_alg_values_supported": ["ES256"],
            "token_endpoint_auth_methods_supported": ["private_key_jwt"]}),
        None,
        |hit| {
            let proof = hit.headers["dpop"].to_str().unwrap();
            let claims = super::super::dpop::tests::decode_part(proof, 1);
            if claims["nonce"] == "conformance-as-dpop-nonce" {
                let mut answer = dpop_token("bound");
                answer.1.push(("dpop-nonce", "next-nonce".into()));
                answer
            } else {
                (
                    400,
                    vec![("dpop-nonce", "conformance-as-dpop-nonce".into())],
                    json!({"error": "use_dpop_nonce", "error_description": "nonce"}),
                )
            }
        },
    )
    .await;
    let signing = SigningKey::from_pkcs8_pem(P256_PEM).unwrap();
    let oauth = OAuth::client_credentials(Registered::unbound("svc").private_key(signing))
        .dpop(DpopKey::generate().unwrap())
        .build()
        .unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    let tokens = oauth.grant_token(&discovery, &[]).await.unwrap();
    assert_eq!(tokens.token_type, TokenType::Dpop);
    let hits = server.hits("/token");
    assert_eq!(hits.len(), 2);
    let endpoint = server.url("/token");
    let (first, _) = check_token_proof(&hits[0], &endpoint);
    let (second, _) = check_token_proof(&hits[1], &endpoint);
    assert!(first.get("nonce").is_none());
    assert_eq!(second["nonce"], "conformance-as-dpop-nonce");
    assert_ne!(first["jti"], second["jti"]);
    // The client assertion is fresh too (its jti is single-use at the server).
    assert_ne!(
        hits[0].form["client_assertion"],
        hits[1].form["client_assertion"]
    );
    // The 200's nonce is kept for the next request to that origin.
    assert_eq!(
        oauth.dpop_nonces().get(&endpoint).as_deref(),
        Some("next-nonce")
    );
    oauth.grant_token(&discovery, &[]).await.unwrap();
    let third = &server.hits("/token")[2];
    assert_eq!(check_token_proof(third, &endpoint).0["nonce"], "next-nonce");
}

#[tokio::test]
async fn a_server_that_keeps_asking_for_a_nonce_gets_one_retry() {
    let count = Arc::new(Mutex::new(0));
    let counter = count.clone();
    let server = server(json!({}), None, move |_| {
        let mut n = counter.lock().unwrap();
        *n += 1;
        (
            400,
            vec![("dpop-nonce", format!("nonce-{n}"))],
            json!({"error": "use_dpop_nonce"}),
        )
    })
    .await;
    let oauth = OAuth::client_credentials(Registered::unbound("svc").secret("s"))
        .dpop(DpopKey::generate().unwrap())
        .build()
        .unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    match oauth.grant_token(&discovery, &[]).await {
        Err(Error::TokenRefused {
            status: 400,
            error: Some(error),
            ..
        }) => assert_eq!(error, "use_dpop_nonce"),
        other => panic!("{other:?}"),
    }
    assert_eq!(server.hits("/token").len(), 2);
    // Without a DPoP-Nonce header there is nothing to retry with: no retry.
    let server = server_without_nonce().await;
    let oauth = OAuth::client_credentials(Registered::unbound("svc").secret("s"))
        .dpop(DpopKey::generate().unwrap())
        .build()
        .unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    assert!(oauth.grant_token(&discovery, &[]).await.is_err());
    assert_eq!(server.hits("/token").len(), 1);
}

async fn server_without_nonce() -> Mock {
    server(json!({}), None, |_| {
        (400, vec![], json!({"error": "use_dpop_nonce"}))
    })
    .await
}

#[tokio::test]
async fn without_a_dpop_key_a_use_dpop_nonce_is_not_retried() {
    let server = server(json!({}), None, |_| {
        (
            400,
            vec![("dpop-nonce", "n".into())],
            json!({"error": "use_dpop_nonce"}),
        )
    })
    .await;
    let oauth = OAuth::client_credentials(Registered::unbound("svc").secret("s"))
        .build()
        .unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    assert!(oauth.grant_token(&discovery, &[]).await.is_err());
    let hits = server.hits("/token");
    assert_eq!(hits.len(), 1);
    assert!(hits[0].headers.get("dpop").is_none());
}

#[tokio::test]
async fn a_server_without_es256_proofs_is_refused_unless_preferred() {
    let server = server(
        json!({"dpop_signing_alg_values_supported": ["RS256", "PS256"]}),
        None,
        |_| bearer("plain"),
    )
    .await;
    let build = |policy: Option<DpopPolicy>| {
        let mut builder = OAuth::client_credentials(Registered::unbound("svc").secret("s"))
            .dpop(DpopKey::generate().unwrap());
        if let Some(policy) = policy {
            builder = builder.dpop_policy(policy);
        }
        builder.build().unwrap()
    };
    let strict = build(None);
    let discovery = discover(&strict, &server).await.unwrap();
    match strict.grant_token(&discovery, &[]).await {
        Err(Error::DpopUnsupported { algs, .. }) => assert_eq!(algs, ["RS256", "PS256"]),
        other => panic!("{other:?}"),
    }
    assert!(server.hits("/token").is_empty());
    let lenient = build(Some(DpopPolicy::Prefer));
    let tokens = lenient.grant_token(&discovery, &[]).await.unwrap();
    assert_eq!(tokens.token_type, TokenType::Bearer);
    let hits = server.hits("/token");
    assert_eq!(hits.len(), 1);
    assert!(hits[0].headers.get("dpop").is_none());
    // A server that does not publish the list gets proofs.
    let silent = self::server(json!({}), None, |_| dpop_token("bound")).await;
    let strict = build(None);
    let discovery = discover(&strict, &silent).await.unwrap();
    strict.grant_token(&discovery, &[]).await.unwrap();
    check_token_proof(&silent.hits("/token")[0], &silent.url("/token"));
}

#[tokio::test]
async fn a_refresh_carries_a_proof() {
    let server = server(json!({}), None, |_| dpop_token("again")).await;
    let oauth = OAuth::client_credentials(Registered::unbound("svc").secret("s"))
        .dpop(DpopKey::generate().unwrap())
        .build()
        .unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    let tokens = Tokens {
        access_token: "old".into(),
        token_type: TokenType::Dpop,
        expires_at: None,
        refresh_token: Some("refresh".into()),
        scopes: Vec::new(),
        issuer: server.base.clone(),
        resource: server.url("/mcp"),
        dpop_key: None,
    };
    oauth.refresh(&discovery, &tokens).await.unwrap();
    let hit = &server.hits("/token")[0];
    assert_eq!(hit.form["grant_type"], "refresh_token");
    check_token_proof(hit, &server.url("/token"));
}

#[tokio::test]
async fn resource_proofs_carry_the_token_hash_and_the_origins_nonce() {
    let key = DpopKey::generate().unwrap();
    let oauth = OAuth::builder().dpop(key.clone()).build().unwrap();
    assert_eq!(oauth.dpop_key().unwrap().thumbprint(), key.thumbprint());
    let url = "https://mcp.example.com/mcp?session=1";
    oauth
        .dpop_nonces()
        .set("https://mcp.example.com/", "rs-nonce");
    let proof = oauth.dpop_proof("POST", url, "tok").unwrap().unwrap();
    let claims = super::super::dpop::tests::decode_part(&proof, 1);
    assert_eq!(claims["htu"], "https://mcp.example.com/mcp");
    assert_eq!(claims["nonce"], "rs-nonce");
    assert_eq!(
        claims["ath"],
        URL_SAFE_NO_PAD.encode(<sha2::Sha256 as sha2::Digest>::digest(b"tok"))
    );
    // Without a key, no proof.
    let plain = OAuth::builder().build().unwrap();
    assert!(plain.dpop_proof("POST", url, "tok").unwrap().is_none());
}

#[test]
fn debug_shows_no_key_secret_or_assertion() {
    let key = DpopKey::generate().unwrap();
    let pem = key.to_pkcs8_pem();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let oauth = OAuth::jwt_bearer("w", <dyn AssertionSource>::fixed("secret.assertion.jwt"))
        .dpop(key)
        .build()
        .unwrap();
    let shown = format!("{oauth:?}");
    assert!(shown.contains("JwtBearer"), "{shown}");
    assert!(!shown.contains("secret.assertion.jwt"), "{shown}");
    assert!(!shown.contains(&body[..24]), "{shown}");
    let id_jag = IdJag::new(
        "https://idp.example.com/token",
        Registered::unbound("idp").secret("idp-secret"),
        <dyn SubjectToken>::id_token("the.id.token"),
    );
    let shown = format!("{id_jag:?}");
    assert!(
        !shown.contains("idp-secret") && !shown.contains("the.id.token"),
        "{shown}"
    );
}

#[tokio::test]
async fn the_grants_of_another_kind_say_so() {
    let oauth = OAuth::builder().build().unwrap();
    assert_eq!(oauth.grant_kind(), GrantKind::AuthorizationCode);
    let discovery = Discovery {
        resource: "https://mcp.example.com/mcp".into(),
        protected_resource: None,
        auth_server: Arc::new(AuthServer::legacy_defaults("https://mcp.example.com")),
        challenge_scopes: Vec::new(),
        offline_access: false,
    };
    for result in [
        oauth.grant_token(&discovery, &[]).await,
        oauth.jwt_bearer_token(&discovery, &[]).await,
        oauth.enterprise_token(&discovery, &[]).await,
    ] {
        assert!(matches!(result, Err(Error::InvalidSetting { .. })));
    }
}

/// An application's own source is asked for the authorization server's issuer each time.
#[tokio::test]
async fn a_custom_assertion_source_is_asked_with_the_issuer() {
    #[derive(Debug, Default)]
    struct Recording(Mutex<Vec<String>>);
    impl AssertionSource for Recording {
        fn assertion<'a>(
            &'a self,
            audience: &'a str,
        ) -> crate::BoxFuture<'a, Result<String, SourceError>> {
            let mut asked = self.0.lock().unwrap();
            asked.push(audience.to_owned());
            let jwt = format!("jwt-{}", asked.len());
            Box::pin(async move { Ok(jwt) })
        }
    }
    let server = server(json!({}), None, |_| bearer("t")).await;
    let source = Arc::new(Recording::default());
    let oauth = OAuth::jwt_bearer("w", source.clone()).build().unwrap();
    let discovery = discover(&oauth, &server).await.unwrap();
    oauth.grant_token(&discovery, &[]).await.unwrap();
    oauth.grant_token(&discovery, &[]).await.unwrap();
    assert_eq!(
        *source.0.lock().unwrap(),
        [server.base.clone(), server.base.clone()]
    );
    let sent: Vec<String> = server
        .hits("/token")
        .iter()
        .map(|h| h.form["assertion"].clone())
        .collect();
    assert_eq!(sent, ["jwt-1", "jwt-2"]);
}
