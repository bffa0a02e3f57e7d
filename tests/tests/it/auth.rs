//! The OAuth 2.1 resource server end to end: a modelctx server (the facade, `serve_http` on
//! 127.0.0.1) guarded by `modelctx_server::auth` and a real authorization server (oidc-provider,
//! `modelctx_tests::oidc`). Every rule of issue 20's "Token validation" and "Authorization
//! inside": valid JWTs in both eras, expired and not-yet-valid ones, `typ`, another audience
//! (and an issuer's own audience), another issuer, `alg: none`, HMAC with the public key, a
//! storm of unknown `kid`s, key rotation, scopes per tool, prompt and resource, opaque tokens by
//! introspection (cached), sessions bound to their subject, several issuers, a static-token
//! verifier, the challenge and the metadata.
//!
//! Skipped without Node (see `modelctx_tests::node`); `cargo xtask ci` runs them with
//! `MODELCTX_REQUIRE_NODE=1`, so they fail there instead.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use modelctx_http::server::RunningServer;
use modelctx_server::auth::{Auth, Issuer, StaticToken};
use modelctx_server::{
    Context, HttpConfig, NoArgs, Prompt, ReadRequest, Resource, ResourceContents, Server, Tool,
};
use modelctx_tests::http::{
    RawResponse, header_values, modern_meta, post_headers, raw_request, within,
};
use modelctx_tests::oidc::{
    As, TestClock, USER, decode_unverified, forge_hs256_with_kid, forge_none, forge_with_kid,
    random_kid, unix_now,
};
use modelctx_types::consts;
use serde_json::{Value, json};

/// The scopes the server advertises (the AS's resource scopes).
pub(crate) const SCOPES: [&str; 3] = ["mcp", "files:write", "demo:admin"];
/// The scoped resource and the scopes it needs.
pub(crate) const NOTES: &str = "file:///notes";
/// The legacy version the session tests open.
pub(crate) const LEGACY: &str = "2025-06-18";
/// What the DPoP challenge offers with the default configuration.
pub(crate) const DPOP_ALGS: &str = "ES256 ES384 RS256 PS256 EdDSA";

/// A protected server and its authorization server.
pub(crate) struct Protected {
    /// The authorization server.
    pub(crate) auth: As,
    pub(crate) server: RunningServer,
    pub(crate) addr: SocketAddr,
    /// `http://127.0.0.1:PORT/mcp`.
    pub(crate) resource: String,
    /// How many scoped handlers ran.
    pub(crate) ran: Arc<AtomicUsize>,
}

/// A server with tool `rm` (needs `files:write`), prompt `secret` (`demo:admin`), resource
/// [`NOTES`] (`demo:admin files:write`), and `whoami` (answers, as JSON text, what the handler
/// sees of its caller: issuer, subject, client id, scopes, claims, and whether the request it
/// sees has an `Authorization` or `DPoP` header).
pub(crate) fn server(ran: &Arc<AtomicUsize>) -> modelctx_server::ServerBuilder {
    let counted = |ran: &Arc<AtomicUsize>| {
        let ran = ran.clone();
        move |_: NoArgs| {
            ran.fetch_add(1, Ordering::SeqCst);
            std::future::ready("removed")
        }
    };
    let prompt_ran = ran.clone();
    let read_ran = ran.clone();
    Server::builder("protected", "1")
        .tool(Tool::new("rm", counted(ran)).scopes(["files:write"]))
        .tool(Tool::new("whoami", whoami))
        .prompt(
            Prompt::with_arguments("secret", Vec::new(), move |_: Value| {
                prompt_ran.fetch_add(1, Ordering::SeqCst);
                std::future::ready("the secret".to_owned())
            })
            .scopes(["demo:admin"]),
        )
        .resource(
            Resource::new(NOTES, "notes", move |_: Context, request: ReadRequest| {
                read_ran.fetch_add(1, Ordering::SeqCst);
                std::future::ready(ResourceContents::text(request.uri, "the notes"))
            })
            .scopes(["demo:admin", "files:write"]),
        )
}

async fn whoami(context: Context, _: NoArgs) -> String {
    let headers = context.http().map(|http| http.headers().clone());
    let seen = |name: &str| headers.as_ref().is_some_and(|h| h.contains_key(name));
    let answer = match context.auth() {
        Some(grant) => json!({
            "iss": grant.issuer,
            "sub": grant.subject,
            "client_id": grant.client_id,
            "scopes": grant.scopes,
            "claims": grant.claims,
            "debug": format!("{grant:?}"),
            "authorization": seen("authorization"),
            "dpop": seen("dpop"),
        }),
        None => json!(null),
    };
    answer.to_string()
}

/// Starts the AS (knowing the server's resource and `extra` ones) and a server guarded by
/// `configure(Auth::resource(resource).issuer(<the AS>).scopes_supported(SCOPES), &as)`.
/// `None`: Node is missing, the test is skipped.
pub(crate) async fn protected_with(
    extra: &[&str],
    configure: impl Fn(Auth, &As) -> Auth,
) -> Option<Protected> {
    protected_issuer(extra, |issuer| issuer, configure).await
}

/// [`protected_with`] with nothing else configured but a [`TestClock`] (the guard's clock),
/// returned with it.
pub(crate) async fn protected_with_clock() -> Option<(Protected, TestClock)> {
    let clock = TestClock::new();
    let given = clock.clone();
    let p = protected_with(&[], move |auth, _| auth.clock(given.clone())).await?;
    Some((p, clock))
}

/// [`protected_with`], the AS's [`Issuer`] (with introspection) finished by `issuer`.
pub(crate) async fn protected_issuer(
    extra: &[&str],
    issuer: impl Fn(Issuer) -> Issuer,
    configure: impl Fn(Auth, &As) -> Auth,
) -> Option<Protected> {
    // The resource names the server's port, which must be known before the AS starts and the
    // guard is built: the listener is bound first, and served on (`serve_http_on`).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let addr = listener.local_addr().unwrap();
    let resource = format!("http://{addr}/mcp");
    let resources: Vec<&str> = std::iter::once(resource.as_str())
        .chain(extra.iter().copied())
        .collect();
    let auth = As::start(&resources).await?;
    let (id, secret) = auth.introspection_client();
    let base = Auth::resource(&resource)
        .issuer_with(issuer(Issuer::new(auth.issuer()).introspection(id, secret)))
        .scopes_supported(SCOPES);
    let guard = configure(base, &auth)
        .build()
        .expect("a valid configuration");
    let ran = Arc::new(AtomicUsize::new(0));
    let server = server(&ran)
        .auth(guard)
        .build()
        .serve_http_on(listener, HttpConfig::default())
        .await
        .expect("serving");
    Some(Protected {
        auth,
        server,
        addr,
        resource,
        ran,
    })
}

/// [`protected_with`] with the default configuration.
pub(crate) async fn protected() -> Option<Protected> {
    protected_with(&[], |auth, _| auth).await
}

/// A response read whole: status, headers, the JSON-RPC reply (from JSON or SSE), raw body.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) async fn read(response: RawResponse) -> Answer {
        let status = response.status;
        let headers = response.headers.clone();
        let body = within("the response body", response.body()).await;
        Answer {
            status,
            headers,
            body,
        }
    }

    /// Every value of header `name`.
    pub(crate) fn all(&self, name: &str) -> Vec<&str> {
        header_values(&self.headers, name)
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.all(name).first().copied()
    }

    /// The JSON-RPC reply: the body as JSON, or the SSE event that has an `id`.
    pub(crate) fn reply(&self) -> Value {
        let text = String::from_utf8_lossy(&self.body);
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            return value;
        }
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .find(|m| m.get("id").is_some())
            .unwrap_or_else(|| panic!("no reply in {text}"))
    }

    /// The text of a tool result.
    pub(crate) fn text(&self) -> String {
        let reply = self.reply();
        reply["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text in {reply}"))
            .to_owned()
    }

    /// `whoami`'s answer.
    pub(crate) fn caller(&self) -> Value {
        serde_json::from_str(&self.text()).expect("whoami's JSON")
    }
}

impl Protected {
    /// A client-credentials access token for this server's resource, with `scope`.
    pub(crate) async fn token(&self, scope: &str) -> String {
        self.auth
            .client_credentials(scope, &self.resource)
            .await
            .access_token
    }

    /// The URL of the metadata, as the challenges name it.
    pub(crate) fn metadata_url(&self) -> String {
        format!(
            "http://{}/.well-known/oauth-protected-resource/mcp",
            self.addr
        )
    }

    /// Sends `headers` (plus `Authorization: Bearer <token>` when given) and `body` to `path`.
    pub(crate) async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        send(self.addr, method, path, token, headers, body).await
    }

    /// A 2026-07-28 request of `method` (on `name`, a tool or prompt name or a URI).
    pub(crate) async fn modern(
        &self,
        token: Option<&str>,
        method: &str,
        name: Option<&str>,
        params: Value,
    ) -> Answer {
        let mut params = params;
        params["_meta"] = modern_meta();
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let mut headers = post_headers(None, Some("2026-07-28"));
        headers.push(("Mcp-Method", method));
        if let Some(name) = name {
            headers.push(("Mcp-Name", name));
        }
        self.send("POST", "/mcp", token, &headers, body.to_string().as_bytes())
            .await
    }

    /// A 2026-07-28 call of tool `name`.
    pub(crate) async fn call(&self, token: Option<&str>, name: &str) -> Answer {
        let params = json!({"name": name, "arguments": {}});
        self.modern(token, consts::ToolsCall::VALUE, Some(name), params)
            .await
    }

    /// Opens a legacy session with `token`; its id.
    pub(crate) async fn open(&self, token: &str) -> String {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": consts::Initialize::VALUE,
            "params": {"protocolVersion": LEGACY, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}});
        let headers = post_headers(None, None);
        let opened = self
            .send(
                "POST",
                "/mcp",
                Some(token),
                &headers,
                init.to_string().as_bytes(),
            )
            .await;
        assert_eq!(opened.status, 200, "{opened:?}");
        let session = opened
            .header("mcp-session-id")
            .expect("a session")
            .to_owned();
        let initialized =
            json!({"jsonrpc": "2.0", "method": consts::NotificationsInitialized::VALUE});
        let done = self.legacy_raw(Some(token), &session, &initialized).await;
        assert_eq!(done.status, 202, "{done:?}");
        session
    }

    /// A legacy message on `session`.
    pub(crate) async fn legacy_raw(
        &self,
        token: Option<&str>,
        session: &str,
        message: &Value,
    ) -> Answer {
        let headers = post_headers(Some(session), Some(LEGACY));
        self.send(
            "POST",
            "/mcp",
            token,
            &headers,
            message.to_string().as_bytes(),
        )
        .await
    }

    /// A legacy call of tool `name` on `session`.
    pub(crate) async fn legacy_call(
        &self,
        token: Option<&str>,
        session: &str,
        name: &str,
    ) -> Answer {
        let call = json!({"jsonrpc": "2.0", "id": 9, "method": consts::ToolsCall::VALUE,
            "params": {"name": name, "arguments": {}}});
        self.legacy_raw(token, session, &call).await
    }

    pub(crate) async fn stop(self) {
        self.server.shutdown(Duration::from_secs(1)).await;
    }
}

/// Sends `headers` (plus `Authorization: Bearer <token>` when given) and `body` to `path` at
/// `addr`.
pub(crate) async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut headers = headers.to_vec();
    if let Some(bearer) = &bearer {
        headers.push(("Authorization", bearer));
    }
    let response = within(
        "the protected server answers",
        raw_request(addr, method, path, &headers, body),
    )
    .await;
    Answer::read(response).await
}

/// Asserts a 401 whose challenges carry `error="invalid_token"` and no body.
#[track_caller]
pub(crate) fn assert_invalid_token(answer: &Answer, what: &str) {
    assert_eq!(answer.status, 401, "{what}: {answer:?}");
    let challenges = answer.all("www-authenticate");
    assert!(
        !challenges.is_empty()
            && challenges
                .iter()
                .all(|c| c.contains(r#"error="invalid_token""#)),
        "{what}: {challenges:?}"
    );
    assert!(answer.body.is_empty(), "{what}: a body");
}

/// The claims of a token the server accepts, for the AS's `/_test/sign` and the forgeries.
fn good_claims(auth: &As, resource: &str) -> Value {
    let now = unix_now();
    json!({"iss": auth.issuer(), "aud": resource, "sub": USER, "client_id": "svc",
        "scope": "mcp", "iat": now, "exp": now + 300, "jti": random_kid()})
}

#[tokio::test]
async fn a_valid_jwt_is_accepted_in_both_eras_and_the_handler_sees_the_caller() {
    let Some(p) = protected().await else { return };
    // Modern: a client-credentials token (subject: the client).
    let token = p.token("mcp files:write").await;
    let answer = p.call(Some(&token), "whoami").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let caller = answer.caller();
    assert_eq!(caller["iss"], p.auth.issuer());
    assert_eq!(caller["sub"], "svc");
    assert_eq!(caller["client_id"], "svc");
    assert_eq!(caller["scopes"], json!(["mcp", "files:write"]));
    assert_eq!(caller["claims"]["aud"], p.resource.as_str());
    // And it may call the tool whose scope it has.
    let answer = p.call(Some(&token), "rm").await;
    assert_eq!(answer.text(), "removed");

    // Legacy: a user's token (authorization code + PKCE) opens and uses a session.
    let user = p.auth.auth_code_pkce("mcp", &p.resource).await.access_token;
    let session = p.open(&user).await;
    let answer = p.legacy_call(Some(&user), &session, "whoami").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let caller = answer.caller();
    assert_eq!(caller["sub"], USER);
    assert_eq!(caller["client_id"], "app");
    assert_eq!(caller["scopes"], json!(["mcp"]));
    p.stop().await;
}

#[tokio::test]
async fn handlers_never_see_the_authorization_header_or_the_token() {
    let Some(p) = protected().await else { return };
    let token = p.token("mcp").await;
    let answer = p.call(Some(&token), "whoami").await;
    let caller = answer.caller();
    assert_eq!(caller["authorization"], false, "{caller}");
    assert_eq!(caller["dpop"], false, "{caller}");
    // Nothing the handler can read holds the token (or its signature).
    let signature = token.rsplit('.').next().unwrap();
    let seen = caller.to_string();
    assert!(!seen.contains(&token), "{seen}");
    assert!(!seen.contains(signature), "{seen}");
    p.stop().await;
}

#[tokio::test]
async fn an_expired_token_is_refused_once_past_the_leeway() {
    let Some((p, clock)) = protected_with_clock().await else {
        return;
    };
    let short = p
        .auth
        .client_credentials_ttl("mcp", &p.resource, Duration::from_secs(2))
        .await
        .access_token;
    let long = p.token("mcp").await;
    let time = |token: &str, claim: &str| {
        let seconds = decode_unverified(token).1[claim].as_u64().expect(claim);
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    };
    // The clock at the short token's issue: its 2 s of life and the 30 s leeway keep it
    // accepted 20 s later, refused 40 s later.
    clock.set(time(&short, "iat"));
    assert_eq!(p.call(Some(&short), "whoami").await.status, 200);
    clock.advance(Duration::from_secs(20));
    assert_eq!(p.call(Some(&short), "whoami").await.status, 200);
    clock.advance(Duration::from_secs(20));
    assert_invalid_token(&p.call(Some(&short), "whoami").await, "expired");
    assert_eq!(p.call(Some(&long), "whoami").await.status, 200);
    // The hour-long one in its turn: accepted up to the leeway past its `exp`, not at it.
    clock.set(time(&long, "exp") + Duration::from_secs(29));
    assert_eq!(p.call(Some(&long), "whoami").await.status, 200);
    clock.advance(Duration::from_secs(1));
    assert_invalid_token(
        &p.call(Some(&long), "whoami").await,
        "expired after an hour",
    );
    p.stop().await;
}

#[tokio::test]
async fn a_token_not_yet_valid_is_refused() {
    let Some(p) = protected().await else { return };
    let later = unix_now() + 3600;
    let early = p.auth.sign(json!({}), json!({"nbf": later})).await;
    assert_invalid_token(&p.call(Some(&early), "whoami").await, "nbf in an hour");
    // Within the leeway (30 s): accepted.
    let soon = p
        .auth
        .sign(json!({}), json!({"nbf": unix_now() + 10}))
        .await;
    assert_eq!(p.call(Some(&soon), "whoami").await.status, 200);
    // Issued in the future beyond the leeway: refused too.
    let issued_later = p.auth.sign(json!({}), json!({"iat": later})).await;
    assert_invalid_token(
        &p.call(Some(&issued_later), "whoami").await,
        "iat in an hour",
    );
    p.stop().await;
}

#[tokio::test]
async fn a_token_for_another_resource_is_refused() {
    let other = "http://127.0.0.1:9/other";
    let Some(p) = protected_with(&[other], |auth, _| auth).await else {
        return;
    };
    let token = p.auth.client_credentials("mcp", other).await.access_token;
    assert_eq!(decode_unverified(&token).1["aud"], other);
    assert_invalid_token(&p.call(Some(&token), "whoami").await, "another audience");
    // The audience compared exactly: a longer path, another port, a list without us.
    for aud in [
        json!(format!("{}/x", p.resource)),
        json!(p.resource.replace("/mcp", "/mcp2")),
        json!([other]),
        json!([]),
        json!(null),
    ] {
        let token = p.auth.sign(json!({}), json!({"aud": aud})).await;
        assert_invalid_token(&p.call(Some(&token), "whoami").await, &format!("aud {aud}"));
    }
    // A list that names us is accepted.
    let token = p
        .auth
        .sign(json!({}), json!({"aud": [other, p.resource]}))
        .await;
    assert_eq!(p.call(Some(&token), "whoami").await.status, 200);
    p.stop().await;
}

#[tokio::test]
async fn the_token_type_must_be_at_jwt_unless_jwt_is_accepted() {
    let Some(p) = protected().await else { return };
    for typ in [
        json!("JWT"),
        json!(null),
        json!("dpop+jwt"),
        json!("application/at+jwt"),
    ] {
        let token = p.auth.sign(json!({"typ": typ}), json!({})).await;
        let answer = p.call(Some(&token), "whoami").await;
        if typ == "application/at+jwt" {
            // RFC 9068 4: the media type's full form is the same type.
            assert_eq!(answer.status, 200, "typ {typ}: {answer:?}");
        } else {
            assert_invalid_token(&answer, &format!("typ {typ}"));
        }
    }
    p.stop().await;
    // Keycloak- and Entra-shaped issuers: `JWT` accepted when asked for; no typ still refused.
    let Some(p) = protected_issuer(&[], Issuer::accept_typ_jwt, |auth, _| auth).await else {
        return;
    };
    let jwt = p.auth.sign(json!({"typ": "JWT"}), json!({})).await;
    assert_eq!(p.call(Some(&jwt), "whoami").await.status, 200);
    let at = p.auth.sign(json!({}), json!({})).await;
    assert_eq!(p.call(Some(&at), "whoami").await.status, 200);
    let none = p.auth.sign(json!({"typ": null}), json!({})).await;
    assert_invalid_token(&p.call(Some(&none), "whoami").await, "no typ");
    p.stop().await;
}

#[tokio::test]
async fn an_issuer_with_its_own_audience_accepts_that_audience_only() {
    let api = "api://mcp-files";
    let Some(p) = protected_issuer(&[], |issuer| issuer.audience(api), |auth, _| auth).await else {
        return;
    };
    let theirs = p.auth.sign(json!({}), json!({"aud": api})).await;
    assert_eq!(p.call(Some(&theirs), "whoami").await.status, 200);
    // Once an audience is given, the resource is accepted only if given too.
    let resource = p.auth.sign(json!({}), json!({})).await;
    assert_invalid_token(&p.call(Some(&resource), "whoami").await, "the resource");
    p.stop().await;
}

#[tokio::test]
async fn a_token_of_an_issuer_not_configured_is_refused() {
    let Some(p) = protected().await else { return };
    let Some(stranger) = As::start(&[&p.resource]).await else {
        return;
    };
    let token = stranger
        .client_credentials("mcp", &p.resource)
        .await
        .access_token;
    assert_invalid_token(&p.call(Some(&token), "whoami").await, "a stranger's token");
    // Signed by the trusted AS's key but claiming to be from the stranger, or from nobody.
    for iss in [
        json!(stranger.issuer()),
        json!(format!("{}/", p.auth.issuer())),
        json!(null),
    ] {
        let token = p.auth.sign(json!({}), json!({"iss": iss})).await;
        assert_invalid_token(&p.call(Some(&token), "whoami").await, &format!("iss {iss}"));
    }
    // The stranger was never asked for anything.
    assert_eq!(stranger.stats().await.jwks, 0);
    p.stop().await;
}

#[tokio::test]
async fn unsigned_and_hmac_with_the_public_key_tokens_are_refused() {
    let Some(p) = protected().await else { return };
    // The keys are known (a valid token first), so nothing but the algorithm decides.
    let good = p.auth.sign(json!({}), json!({})).await;
    assert_eq!(p.call(Some(&good), "whoami").await.status, 200);
    // The forgeries carry the scope of `rm`, which would run (and count) if one got in.
    let mut claims = good_claims(&p.auth, &p.resource);
    claims["scope"] = json!("mcp files:write");
    assert_invalid_token(&p.call(Some(&forge_none(&claims)), "rm").await, "alg none");
    let key = p.auth.current_key().await;
    let jwk = key.jwk.to_string();
    for (what, secret) in [
        ("the SEC1 point", key.sec1.as_slice()),
        ("the SPKI PEM", key.spki_pem.as_bytes()),
        ("the JWK", jwk.as_bytes()),
    ] {
        for kid in [Some(key.kid.as_str()), None] {
            let forged = forge_hs256_with_kid(secret, kid, &claims);
            assert_invalid_token(
                &p.call(Some(&forged), "rm").await,
                &format!("HS256 with {what}, kid {kid:?}"),
            );
        }
    }
    assert_eq!(p.ran.load(Ordering::SeqCst), 0, "no forgery ran rm");
    p.stop().await;
}

#[tokio::test]
async fn a_storm_of_unknown_kids_costs_the_authorization_server_at_most_one_key_fetch() {
    let Some(p) = protected().await else { return };
    let good = p.auth.sign(json!({}), json!({})).await;
    assert_eq!(p.call(Some(&good), "whoami").await.status, 200);
    let before = p.auth.stats().await;
    assert_eq!(before.jwks, 1, "the keys fetched once");
    let claims = good_claims(&p.auth, &p.resource);
    let p = Arc::new(p);
    let mut storm = tokio::task::JoinSet::new();
    for worker in 0..20 {
        let p = p.clone();
        let claims = claims.clone();
        storm.spawn(async move {
            for i in 0..50 {
                let forged = forge_with_kid(&random_kid(), &claims);
                let answer = p.call(Some(&forged), "whoami").await;
                assert_invalid_token(&answer, &format!("storm token {worker}/{i}"));
            }
        });
    }
    // Each request is bounded (`within`), so the storm is too.
    while let Some(done) = storm.join_next().await {
        done.expect("a storm worker");
    }
    let after = p.auth.stats().await;
    assert!(
        after.jwks - before.jwks <= 1,
        "1000 unknown kids cost {} key fetches",
        after.jwks - before.jwks
    );
    // The known key still works.
    assert_eq!(p.call(Some(&good), "whoami").await.status, 200);
    let Ok(p) = Arc::try_unwrap(p) else {
        panic!("the storm's workers have ended")
    };
    p.stop().await;
}

#[tokio::test]
async fn after_a_key_rotation_old_and_new_tokens_are_valid_with_one_refetch() {
    let Some(p) = protected().await else { return };
    let old = p.token("mcp").await;
    assert_eq!(p.call(Some(&old), "whoami").await.status, 200);
    assert_eq!(p.auth.stats().await.jwks, 1);
    assert_eq!(p.auth.rotate().await, "k2");
    let new = p.token("mcp").await;
    assert_eq!(decode_unverified(&new).0["kid"], "k2");
    // Right after the fetch, an unknown kid does not cause another one (at most one per 30 s):
    // the new key is not known yet.
    assert_invalid_token(&p.call(Some(&new), "whoami").await, "k2 within 30 s");
    assert_eq!(p.auth.stats().await.jwks, 1);
    // 30 s later (the cache's clock is the runtime's), the new kid causes one fetch.
    tokio::time::pause();
    tokio::time::advance(Duration::from_secs(31)).await;
    tokio::time::resume();
    assert_eq!(p.call(Some(&new), "whoami").await.status, 200);
    assert_eq!(p.call(Some(&old), "whoami").await.status, 200);
    assert_eq!(p.call(Some(&new), "whoami").await.status, 200);
    assert_eq!(p.auth.stats().await.jwks, 2, "one refetch");
    p.stop().await;
}

/// Asserts a 403 `insufficient_scope` naming `scope`, with an empty body.
fn assert_insufficient(p: &Protected, answer: &Answer, scope: &str, what: &str) {
    assert_eq!(answer.status, 403, "{what}: {answer:?}");
    let metadata = p.metadata_url();
    assert_eq!(
        answer.all("www-authenticate"),
        [
            format!(
                r#"Bearer error="insufficient_scope", scope="{scope}", resource_metadata="{metadata}""#
            ),
            format!(
                r#"DPoP error="insufficient_scope", scope="{scope}", resource_metadata="{metadata}", algs="{DPOP_ALGS}""#
            ),
        ],
        "{what}"
    );
    assert!(answer.body.is_empty(), "{what}: a body");
}

#[tokio::test]
async fn a_missing_scope_is_403_naming_it_per_tool_prompt_and_resource() {
    let Some(p) = protected().await else { return };
    let plain = p.token("mcp").await;
    let get = |name: &str| json!({"name": name, "arguments": {}});
    let prompt = consts::PromptsGet::VALUE;
    let read = consts::ResourcesRead::VALUE;
    let rm = p.call(Some(&plain), "rm").await;
    assert_insufficient(&p, &rm, "files:write", "the tool");
    let secret = p
        .modern(Some(&plain), prompt, Some("secret"), get("secret"))
        .await;
    assert_insufficient(&p, &secret, "demo:admin", "the prompt");
    let notes = p
        .modern(Some(&plain), read, Some(NOTES), json!({"uri": NOTES}))
        .await;
    assert_insufficient(&p, &notes, "demo:admin files:write", "the resource");
    // One of the two is not enough.
    let writer = p.token("mcp files:write").await;
    let notes = p
        .modern(Some(&writer), read, Some(NOTES), json!({"uri": NOTES}))
        .await;
    assert_insufficient(&p, &notes, "demo:admin files:write", "half the scopes");
    // In a legacy session alike.
    let session = p.open(&plain).await;
    let rm = p.legacy_call(Some(&plain), &session, "rm").await;
    assert_insufficient(&p, &rm, "files:write", "the tool, legacy");
    assert_eq!(p.ran.load(Ordering::SeqCst), 0, "no handler ran");

    // Granted: 200, and the handlers run.
    let all = p.token("mcp files:write demo:admin").await;
    assert_eq!(p.call(Some(&all), "rm").await.text(), "removed");
    let secret = p
        .modern(Some(&all), prompt, Some("secret"), get("secret"))
        .await;
    assert_eq!(secret.status, 200);
    assert_eq!(
        secret.reply()["result"]["messages"][0]["content"]["text"],
        "the secret"
    );
    let notes = p
        .modern(Some(&all), read, Some(NOTES), json!({"uri": NOTES}))
        .await;
    assert_eq!(notes.reply()["result"]["contents"][0]["text"], "the notes");
    let session = p.open(&all).await;
    assert_eq!(
        p.legacy_call(Some(&all), &session, "rm").await.text(),
        "removed"
    );
    assert_eq!(p.ran.load(Ordering::SeqCst), 4);
    p.stop().await;
}

#[tokio::test]
async fn opaque_tokens_are_introspected_once_then_served_from_the_cache() {
    let Some(p) = protected().await else { return };
    let opaque_resource = format!("{}/opaque", p.resource);
    let token = p
        .auth
        .client_credentials("mcp files:write", &opaque_resource)
        .await
        .access_token;
    assert_eq!(token.split('.').count(), 1, "opaque: {token}");
    let before = p.auth.stats().await.introspect;
    let answer = p.call(Some(&token), "whoami").await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let caller = answer.caller();
    // oidc-provider gives a client-credentials token no `sub` in introspection: the client is
    // the subject.
    assert_eq!(caller["sub"], "svc");
    assert_eq!(caller["iss"], p.auth.issuer());
    assert_eq!(caller["scopes"], json!(["mcp", "files:write"]));
    assert_eq!(p.auth.stats().await.introspect, before + 1);
    assert_eq!(p.call(Some(&token), "rm").await.text(), "removed");
    assert_eq!(p.call(Some(&token), "whoami").await.status, 200);
    assert_eq!(
        p.auth.stats().await.introspect,
        before + 1,
        "the second and third uses come from the cache"
    );
    // A user's opaque token has the user as subject; an unknown one is refused.
    let user = p
        .auth
        .auth_code_pkce("mcp", &opaque_resource)
        .await
        .access_token;
    assert_eq!(p.call(Some(&user), "whoami").await.caller()["sub"], USER);
    assert_invalid_token(&p.call(Some("no-such-token"), "whoami").await, "unknown");
    p.stop().await;
}

#[tokio::test]
async fn an_introspected_token_is_not_served_from_the_cache_past_its_expiry() {
    let Some((p, clock)) = protected_with_clock().await else {
        return;
    };
    let opaque_resource = format!("{}/opaque", p.resource);
    // A token of the default lifetime: both calls below are well inside it in real time; the
    // test's clock, not the wall clock, takes it past its `exp`.
    let issued = p.auth.client_credentials("mcp", &opaque_resource).await;
    let token = issued.access_token;
    let before = p.auth.stats().await.introspect;
    assert_eq!(p.call(Some(&token), "whoami").await.status, 200);
    assert_eq!(p.call(Some(&token), "whoami").await.status, 200);
    assert_eq!(p.auth.stats().await.introspect, before + 1, "cached");
    // Past its `exp` (and any leeway): the cached answer no longer lets it in.
    clock.advance(Duration::from_secs(issued.expires_in + 120));
    assert_invalid_token(&p.call(Some(&token), "whoami").await, "expired, cached");
    p.stop().await;
}

#[tokio::test]
async fn a_legacy_session_is_404_to_another_subject() {
    let Some(p) = protected().await else { return };
    let alice = p.auth.auth_code_pkce("mcp", &p.resource).await.access_token;
    let service = p.token("mcp").await;
    let session = p.open(&alice).await;
    let theirs = p.legacy_call(Some(&service), &session, "whoami").await;
    assert_eq!(theirs.status, 404, "{theirs:?}");
    // Alice with another token of hers (a new login) still reaches it.
    let again = p.auth.auth_code_pkce("mcp", &p.resource).await.access_token;
    assert_ne!(again, alice);
    let ours = p.legacy_call(Some(&again), &session, "whoami").await;
    assert_eq!(ours.caller()["sub"], USER);
    p.stop().await;
}

#[tokio::test]
async fn several_issuers_are_accepted_each_for_its_own_tokens() {
    let reserved_second = As::start(&["http://127.0.0.1:9/unused"]).await;
    let Some(second) = reserved_second else {
        return;
    };
    let second_issuer = second.issuer().to_owned();
    let Some(p) = protected_with(&[], |auth, _| auth.issuer(second_issuer.clone())).await else {
        return;
    };
    // The second AS must issue for our resource: sign its own token for it.
    let first = p.token("mcp").await;
    let theirs = second
        .sign(json!({}), json!({"aud": p.resource, "sub": "carol"}))
        .await;
    let caller = p.call(Some(&first), "whoami").await.caller();
    assert_eq!(caller["iss"], p.auth.issuer());
    let caller = p.call(Some(&theirs), "whoami").await.caller();
    assert_eq!(caller["iss"], second.issuer());
    assert_eq!(caller["sub"], "carol");
    // A token claiming one issuer but signed by the other's key is refused.
    let crossed = second
        .sign(
            json!({}),
            json!({"aud": p.resource, "iss": p.auth.issuer()}),
        )
        .await;
    assert_invalid_token(&p.call(Some(&crossed), "whoami").await, "crossed issuers");
    p.stop().await;
}

#[tokio::test]
async fn a_static_token_verifier_is_asked_besides_the_issuers() {
    let secret = "a-static-secret-0123456789";
    let Some(p) = protected_with(&[], |auth, _| {
        auth.verifier(
            StaticToken::new(secret)
                .subject("ops")
                .scopes(["files:write"]),
        )
    })
    .await
    else {
        return;
    };
    let caller = p.call(Some(secret), "whoami").await.caller();
    assert_eq!(caller["sub"], "ops");
    assert_eq!(caller["iss"], StaticToken::ISSUER);
    assert_eq!(p.call(Some(secret), "rm").await.text(), "removed");
    assert_invalid_token(
        &p.call(Some("a-static-secret-0123456788"), "whoami").await,
        "another secret",
    );
    // The issuer's tokens still work.
    let token = p.token("mcp").await;
    assert_eq!(p.call(Some(&token), "whoami").await.caller()["sub"], "svc");
    p.stop().await;
}

#[tokio::test]
async fn the_401_challenge_names_the_metadata_and_scopes_served_at_both_well_known_paths() {
    let Some(p) = protected().await else { return };
    let metadata = p.metadata_url();
    let scope = SCOPES.join(" ");
    let none = p.call(None, "whoami").await;
    assert_eq!(none.status, 401);
    assert_eq!(
        none.all("www-authenticate"),
        [
            format!(r#"Bearer resource_metadata="{metadata}", scope="{scope}""#),
            format!(r#"DPoP algs="{DPOP_ALGS}", resource_metadata="{metadata}", scope="{scope}""#),
        ]
    );
    assert!(none.body.is_empty());
    let bad = p.call(Some("not-a-token"), "whoami").await;
    assert_eq!(
        bad.all("www-authenticate"),
        [
            format!(
                r#"Bearer error="invalid_token", resource_metadata="{metadata}", scope="{scope}""#
            ),
            format!(
                r#"DPoP error="invalid_token", algs="{DPOP_ALGS}", resource_metadata="{metadata}", scope="{scope}""#
            ),
        ]
    );
    let expected = json!({
        "resource": p.resource,
        "authorization_servers": [p.auth.issuer()],
        "scopes_supported": SCOPES,
        "bearer_methods_supported": ["header"],
        "dpop_signing_alg_values_supported": DPOP_ALGS.split(' ').collect::<Vec<_>>(),
        "dpop_bound_access_tokens_required": false,
    });
    let path = metadata
        .strip_prefix(&format!("http://{}", p.addr))
        .unwrap();
    for path in [path, "/.well-known/oauth-protected-resource"] {
        let served = p.send("GET", path, None, &[], b"").await;
        assert_eq!(served.status, 200, "{path}");
        assert!(
            served
                .header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{path}: {served:?}"
        );
        let document: Value = serde_json::from_slice(&served.body).unwrap();
        assert_eq!(document, expected, "{path}");
    }
    p.stop().await;
}
