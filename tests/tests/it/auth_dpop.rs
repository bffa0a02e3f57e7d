//! DPoP (RFC 9449) end to end: DPoP-bound tokens issued by a real authorization server
//! (oidc-provider, `modelctx_tests::oidc`), presented to a real modelctx server (the facade,
//! `serve_http` on 127.0.0.1, guarded by `modelctx_server::auth`) with proofs made here.
//!
//! Covered: good proofs in both eras (a legacy session's POST, GET and DELETE, modern requests,
//! the deprecated HTTP+SSE transport's own paths, a fresh proof each), for JWT and introspected
//! tokens; each way a proof can fail to match its request or its token (missing, replayed `jti`,
//! also concurrently, `htu`, `htm`, `ath`, `iat`, another key, two `DPoP` headers); a bound
//! token sent as a bearer token; what `Dpop::Required`, `Dpop::Allowed` and
//! `Dpop::Off` accept, challenge with and publish in the protected resource metadata; server
//! nonces (`Auth::dpop_nonces`) asked for, accepted and renewed, on a clock the test moves; the
//! service nested in axum (`nest_service`), where the proof names the path the client sent.
//!
//! Each refusal is checked against a request that differs from an accepted one only in what is
//! wrong, so a refusal for another reason fails the test.
//!
//! The canonical resource must name the server's port before the server starts, and the
//! authorization server must know the resource before it starts: so the listener is bound first
//! and served on (`serve_http_on`). Skipped without Node (see
//! `modelctx_tests::node`); fails instead with `MODELCTX_REQUIRE_NODE=1`.

use std::net::SocketAddr;
use std::time::Duration;

use modelctx_http::server::RunningServer;
use modelctx_server::auth::{Auth, Dpop, Issuer};
use modelctx_server::{Context, HttpConfig, NoArgs, Server, Tool};
use modelctx_tests::http::{
    RawResponse, modern_call, modern_headers, post_headers, raw_request, within,
};
use modelctx_tests::oidc::{As, DpopKey, TestClock, ath, proof_claims, unix_now};
use modelctx_types::{ProtocolVersion, consts};
use serde_json::{Value, json};

/// The scopes the server supports (all of them granted to the tokens asked for here).
const SCOPES: [&str; 2] = ["mcp", "files:write"];
/// The proof algorithms the guard accepts, as its challenges and metadata name them.
const DPOP_ALGS: [&str; 5] = ["ES256", "ES384", "RS256", "PS256", "EdDSA"];
/// The legacy version of the session tests.
const LEGACY: ProtocolVersion = ProtocolVersion::LATEST_LEGACY;

/// Who the caller is, as the handler sees it: subject, the key the token is bound to (`-`:
/// none) and the scopes.
async fn whoami(context: Context, _: NoArgs) -> String {
    let grant = context.auth().expect("an authenticated request");
    format!(
        "{} {} {}",
        grant.subject,
        grant.jkt.as_deref().unwrap_or("-"),
        grant.scopes.join(",")
    )
}

/// The authorization server and the guarded server, for the resource
/// `http://127.0.0.1:PORT/mcp`.
struct Rig {
    auth: As,
    running: RunningServer,
    resource: String,
}

/// Starts the authorization server and a facade server with tool `whoami`, guarded by
/// `configure(auth)`, where `auth` trusts the AS (JWTs, and opaque tokens by introspection) and
/// supports [`SCOPES`]. `None`: Node is missing and the test is skipped.
async fn rig(configure: impl Fn(Auth) -> Auth) -> Option<Rig> {
    rig_with(configure, HttpConfig::default()).await
}

/// [`rig`], serving with `config`.
async fn rig_with(configure: impl Fn(Auth) -> Auth, config: HttpConfig) -> Option<Rig> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let port = listener.local_addr().expect("its address").port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let auth = As::start(&[&resource]).await?;
    let (id, secret) = auth.introspection_client();
    let issuer = Issuer::new(auth.issuer()).introspection(id, secret);
    let guard = configure(
        Auth::resource(&resource)
            .issuer_with(issuer)
            .scopes_supported(SCOPES),
    )
    .build()
    .expect("a valid configuration");
    let running = Server::builder("dpop", "1")
        .auth(guard)
        .tool(Tool::new("whoami", whoami))
        .build()
        .serve_http_on(listener, config)
        .await
        .expect("serving");
    Some(Rig {
        auth,
        running,
        resource,
    })
}

impl Rig {
    fn addr(&self) -> SocketAddr {
        self.running.local_addr()
    }

    fn metadata_url(&self) -> String {
        format!(
            "http://{}/.well-known/oauth-protected-resource/mcp",
            self.addr()
        )
    }

    /// A client-credentials token bound to `key`, with [`SCOPES`], for the resource (a JWT) or
    /// with `opaque` for `<resource>/opaque` (introspected).
    async fn bound_token(&self, key: &DpopKey, opaque: bool) -> String {
        let resource = if opaque {
            format!("{}/opaque", self.resource)
        } else {
            self.resource.clone()
        };
        let token = self
            .auth
            .client_credentials_dpop(key, &SCOPES.join(" "), &resource)
            .await;
        assert_eq!(token.token_type, "DPoP");
        token.access_token
    }

    /// A plain (not bound) client-credentials JWT with [`SCOPES`].
    async fn bearer_token(&self) -> String {
        let token = self
            .auth
            .client_credentials(&SCOPES.join(" "), &self.resource)
            .await;
        assert_eq!(token.token_type, "Bearer");
        token.access_token
    }

    /// A good proof by `key` for `method` on the endpoint, with `token`'s hash and `nonce`.
    fn proof(&self, key: &DpopKey, method: &str, token: &str, nonce: Option<&str>) -> String {
        key.proof(method, &self.resource, Some(token), nonce)
    }

    /// A legacy session at [`LEGACY`] with the bound `token`, every request with a fresh proof by
    /// `key` (with `nonce`): initialize, initialized, a `whoami` call (answered `expected`), the
    /// standalone stream (GET) and the session's end (DELETE). Returns each answer's
    /// `DPoP-Nonce`.
    async fn legacy_session(
        &self,
        key: &DpopKey,
        token: &str,
        nonce: Option<&str>,
        expected: &str,
    ) -> Vec<Option<String>> {
        let version = LEGACY.as_str();
        let mut nonces = Vec::new();
        let nonce_of = |response: &RawResponse| response.header("dpop-nonce").map(str::to_owned);
        let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": consts::Initialize::VALUE,
            "params": {"protocolVersion": version, "capabilities": {},
                "clientInfo": {"name": "raw", "version": "1"}}});
        let mut headers = owned(post_headers(None, None));
        headers.extend(dpop(token, &[&self.proof(key, "POST", token, nonce)]));
        let response = self.send("POST", &headers, &initialize).await;
        nonces.push(nonce_of(&response));
        let session = response
            .header("mcp-session-id")
            .expect("a session")
            .to_owned();
        let init = answer(response, "initialize").await;
        assert_eq!(init["result"]["protocolVersion"], version, "{init}");

        let on_session = |method: &str, mut headers: Vec<(&'static str, String)>| {
            headers.push(("Mcp-Session-Id", session.clone()));
            headers.push(("MCP-Protocol-Version", version.to_owned()));
            headers.extend(dpop(token, &[&self.proof(key, method, token, nonce)]));
            headers
        };
        let post = || owned(post_headers(None, None));
        let initialized =
            json!({"jsonrpc": "2.0", "method": consts::NotificationsInitialized::VALUE});
        let response = self
            .send("POST", &on_session("POST", post()), &initialized)
            .await;
        assert_eq!(response.status, 202, "initialized");
        nonces.push(nonce_of(&response));
        let call = json!({"jsonrpc": "2.0", "id": 1, "method": consts::ToolsCall::VALUE,
            "params": {"name": "whoami", "arguments": {}}});
        let response = self.send("POST", &on_session("POST", post()), &call).await;
        nonces.push(nonce_of(&response));
        assert_eq!(whoami_text(response, "a legacy call").await, expected);
        let stream = vec![("Accept", "text/event-stream".to_owned())];
        let response = self
            .send("GET", &on_session("GET", stream), &Value::Null)
            .await;
        assert_eq!(response.status, 200, "the standalone stream");
        nonces.push(nonce_of(&response));
        drop(response);
        let response = self
            .send("DELETE", &on_session("DELETE", Vec::new()), &Value::Null)
            .await;
        assert_eq!(response.status, 200, "the session's end");
        nonces.push(nonce_of(&response));
        nonces
    }

    /// Sends `method /mcp` with `headers` and `body` (none when null).
    async fn send(&self, method: &str, headers: &[(&str, String)], body: &Value) -> RawResponse {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        within(
            &format!("{method} /mcp"),
            raw_request(self.addr(), method, "/mcp", &headers, &body),
        )
        .await
    }

    /// A modern `tools/call whoami` with `credentials` (header pairs).
    async fn whoami(&self, credentials: Vec<(&str, String)>) -> RawResponse {
        let mut headers = owned(modern_headers(consts::ToolsCall::VALUE, Some("whoami")));
        headers.extend(credentials);
        self.send("POST", &headers, &modern_call(1, "whoami", json!({})))
            .await
    }

    /// `Bearer` challenge parameters after the error code, as the guard renders them.
    fn params(&self) -> String {
        format!(
            "resource_metadata=\"{}\", scope=\"{}\"",
            self.metadata_url(),
            SCOPES.join(" ")
        )
    }

    /// The `Bearer` challenge, with `error` when given.
    fn bearer_challenge(&self, error: Option<&str>) -> String {
        let error = error.map_or(String::new(), |e| format!("error=\"{e}\", "));
        format!("Bearer {error}{}", self.params())
    }

    /// The `DPoP` challenge, with `error` when given.
    fn dpop_challenge(&self, error: Option<&str>) -> String {
        let error = error.map_or(String::new(), |e| format!("error=\"{e}\", "));
        format!(
            "DPoP {error}algs=\"{}\", {}",
            DPOP_ALGS.join(" "),
            self.params()
        )
    }

    /// The protected resource metadata, the same at its path-inserted and its root well-known
    /// URL.
    async fn metadata(&self) -> Value {
        let mut documents = Vec::new();
        for path in [
            "/.well-known/oauth-protected-resource/mcp",
            "/.well-known/oauth-protected-resource",
        ] {
            let response = within(path, raw_request(self.addr(), "GET", path, &[], b"")).await;
            assert_eq!(response.status, 200, "{path}");
            documents.push(response.json().await);
        }
        assert_eq!(documents[0], documents[1]);
        documents.swap_remove(0)
    }
}

fn owned<'a>(headers: Vec<(&'a str, &str)>) -> Vec<(&'a str, String)> {
    headers
        .into_iter()
        .map(|(n, v)| (n, v.to_owned()))
        .collect()
}

/// `Authorization: DPoP <token>` and one `DPoP` header per proof.
fn dpop(token: &str, proofs: &[&str]) -> Vec<(&'static str, String)> {
    let mut headers = vec![("Authorization", format!("DPoP {token}"))];
    headers.extend(proofs.iter().map(|p| ("DPoP", (*p).to_owned())));
    headers
}

/// `Authorization: Bearer <token>`.
fn bearer(token: &str) -> Vec<(&'static str, String)> {
    vec![("Authorization", format!("Bearer {token}"))]
}

/// Asserts `response` is a 401 with exactly `expected` challenges and an empty body.
async fn assert_refused(response: RawResponse, expected: &[String], what: &str) {
    assert_eq!(response.status, 401, "{what}");
    assert_eq!(response.all("www-authenticate"), expected, "{what}");
    assert!(response.body().await.is_empty(), "{what}");
}

/// The JSON-RPC answer of a 200, whether sent as JSON or on an SSE stream.
async fn answer(mut response: RawResponse, what: &str) -> Value {
    assert_eq!(response.status, 200, "{what}: {:?}", response.headers);
    let sse = response
        .header("content-type")
        .is_some_and(|t| t.starts_with("text/event-stream"));
    if !sse {
        return response.json().await;
    }
    loop {
        let (_, message) = within(what, response.next_message())
            .await
            .unwrap_or_else(|| panic!("{what}: the stream ended without an answer"));
        if message.get("id").is_some() {
            return message;
        }
    }
}

/// The text of `whoami`'s answer.
async fn whoami_text(response: RawResponse, what: &str) -> String {
    let message = answer(response, what).await;
    message["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: {message}"))
        .to_owned()
}

#[tokio::test]
async fn bound_tokens_with_a_fresh_proof_per_request_work_in_both_eras() {
    let Some(rig) = rig(|auth| auth).await else {
        return;
    };
    let key = DpopKey::new();
    let token = rig.bound_token(&key, false).await;
    let expected = format!("svc {} mcp,files:write", key.jkt());

    // A legacy session: every request (POST, GET, DELETE) with its own proof.
    let nonces = rig.legacy_session(&key, &token, None, &expected).await;
    assert_eq!(
        nonces,
        [None, None, None, None, None],
        "no nonces configured"
    );

    // 2026-07-28 requests, each with its own proof; `htu` is compared after normalisation (the
    // scheme's case does not matter) and without its query.
    let upper = rig.resource.replacen("http://", "HTTP://", 1) + "?ignored=1";
    for htu in [rig.resource.as_str(), upper.as_str()] {
        let proof = key.proof("POST", htu, Some(&token), None);
        let response = rig.whoami(dpop(&token, &[&proof])).await;
        assert_eq!(whoami_text(response, htu).await, expected);
    }

    // An opaque bound token, introspected: its binding (`cnf.jkt` in the introspection answer)
    // is checked the same way.
    let opaque = rig.bound_token(&key, true).await;
    assert_eq!(opaque.split('.').count(), 1, "opaque: {opaque}");
    let proof = rig.proof(&key, "POST", &opaque, None);
    let response = rig.whoami(dpop(&opaque, &[&proof])).await;
    assert_eq!(whoami_text(response, "an opaque token").await, expected);
    let other = DpopKey::new();
    let proof = rig.proof(&other, "POST", &opaque, None);
    let response = rig.whoami(dpop(&opaque, &[&proof])).await;
    let refused = [
        rig.bearer_challenge(None),
        rig.dpop_challenge(Some("invalid_dpop_proof")),
    ];
    assert_refused(response, &refused, "an opaque token, another key's proof").await;
}

#[tokio::test]
async fn proofs_that_do_not_match_the_request_or_the_token_are_refused() {
    let Some(rig) = rig(|auth| auth).await else {
        return;
    };
    let key = DpopKey::new();
    let token = rig.bound_token(&key, false).await;
    let other_token = rig.bound_token(&key, false).await;
    let refused = [
        rig.bearer_challenge(None),
        rig.dpop_challenge(Some("invalid_dpop_proof")),
    ];
    let resource = rig.resource.as_str();
    let good = || proof_claims("POST", resource, Some(&token), None);
    let changed = |name: &str, value: Value| {
        let mut claims = good();
        claims[name] = value;
        key.sign_proof(&claims)
    };
    let without = |name: &str| {
        let mut claims = good();
        claims.as_object_mut().unwrap().remove(name);
        key.sign_proof(&claims)
    };
    let https = resource.replacen("http://", "https://", 1);
    let other_port = format!("http://127.0.0.1:{}/mcp", rig.addr().port() ^ 1);
    let cases: Vec<(&str, String)> = vec![
        (
            "another path",
            changed("htu", json!(format!("{resource}/other"))),
        ),
        ("another scheme", changed("htu", json!(https))),
        ("another port", changed("htu", json!(other_port))),
        ("no htu", without("htu")),
        ("htm GET for a POST", changed("htm", json!("GET"))),
        ("htm in lower case", changed("htm", json!("post"))),
        ("no htm", without("htm")),
        (
            "ath of another token",
            changed("ath", json!(ath(&other_token))),
        ),
        ("no ath", without("ath")),
        (
            "iat 10 minutes old",
            changed("iat", json!(unix_now() - 600)),
        ),
        (
            "iat 5 minutes ahead",
            changed("iat", json!(unix_now() + 300)),
        ),
        (
            "another key",
            DpopKey::new().proof("POST", resource, Some(&token), None),
        ),
    ];
    for (what, proof) in cases {
        let response = rig.whoami(dpop(&token, &[&proof])).await;
        assert_refused(response, &refused, what).await;
    }
    let response = rig.whoami(dpop(&token, &[])).await;
    assert_refused(response, &refused, "no proof").await;

    // The same request with a good proof is accepted: the refusals were the proofs' doing.
    let response = rig.whoami(dpop(&token, &[&key.sign_proof(&good())])).await;
    assert_eq!(
        whoami_text(response, "a good proof").await,
        format!("svc {} mcp,files:write", key.jkt())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proof_is_used_once() {
    let Some(rig) = rig(|auth| auth).await else {
        return;
    };
    let key = DpopKey::new();
    let token = rig.bound_token(&key, false).await;
    let refused = [
        rig.bearer_challenge(None),
        rig.dpop_challenge(Some("invalid_dpop_proof")),
    ];
    let claims = proof_claims("POST", &rig.resource, Some(&token), None);
    let proof = key.sign_proof(&claims);
    let response = rig.whoami(dpop(&token, &[&proof])).await;
    assert_eq!(response.status, 200, "the first use");
    let response = rig.whoami(dpop(&token, &[&proof])).await;
    assert_refused(response, &refused, "the same proof again").await;
    // Another proof (another signature, a later iat) with the same jti is a replay too.
    let mut again = claims.clone();
    again["iat"] = json!(claims["iat"].as_u64().unwrap() + 1);
    let replayed = key.sign_proof(&again);
    assert_ne!(replayed, proof);
    let response = rig.whoami(dpop(&token, &[&replayed])).await;
    assert_refused(response, &refused, "a new proof with a used jti").await;
    // A new jti is fine.
    let response = rig
        .whoami(dpop(
            &token,
            &[&key.sign_proof(&proof_claims("POST", &rig.resource, Some(&token), None))],
        ))
        .await;
    assert_eq!(response.status, 200, "a fresh jti");

    // The same proof in concurrent requests: exactly one is accepted.
    let proof = rig.proof(&key, "POST", &token, None);
    let mut headers = owned(modern_headers(consts::ToolsCall::VALUE, Some("whoami")));
    headers.extend(dpop(&token, &[&proof]));
    let body = modern_call(1, "whoami", json!({})).to_string();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (headers, body, addr) = (headers.clone(), body.clone(), rig.addr());
            tokio::spawn(async move {
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                raw_request(addr, "POST", "/mcp", &headers, body.as_bytes())
                    .await
                    .status
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(within("a concurrent use", task).await.unwrap());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 401, 401, 401, 401, 401, 401, 401]);
}

#[tokio::test]
async fn two_dpop_headers_are_refused() {
    let Some(rig) = rig(|auth| auth).await else {
        return;
    };
    let key = DpopKey::new();
    let token = rig.bound_token(&key, false).await;
    let refused = [
        rig.bearer_challenge(None),
        rig.dpop_challenge(Some("invalid_dpop_proof")),
    ];
    let first = rig.proof(&key, "POST", &token, None);
    let second = rig.proof(&key, "POST", &token, None);
    let response = rig.whoami(dpop(&token, &[&first, &second])).await;
    assert_refused(response, &refused, "two good proofs").await;
    let response = rig.whoami(dpop(&token, &[&first, &first])).await;
    assert_refused(response, &refused, "one proof twice").await;
    // Neither was used up by the refused requests.
    for proof in [&first, &second] {
        let response = rig.whoami(dpop(&token, &[proof])).await;
        assert_eq!(response.status, 200, "a proof alone");
    }
}

#[tokio::test]
async fn a_bound_token_is_not_a_bearer_token() {
    let Some(rig) = rig(|auth| auth).await else {
        return;
    };
    let key = DpopKey::new();
    let token = rig.bound_token(&key, false).await;
    let refused = [
        rig.bearer_challenge(Some("invalid_token")),
        rig.dpop_challenge(Some("invalid_token")),
    ];
    let response = rig.whoami(bearer(&token)).await;
    assert_refused(response, &refused, "as a bearer token").await;
    // Even with a good proof next to it.
    let mut headers = bearer(&token);
    headers.push(("DPoP", rig.proof(&key, "POST", &token, None)));
    let response = rig.whoami(headers).await;
    assert_refused(response, &refused, "as a bearer token, with a proof").await;
    // And a plain token is not a DPoP token.
    let plain = rig.bearer_token().await;
    let proof = rig.proof(&key, "POST", &plain, None);
    let response = rig.whoami(dpop(&plain, &[&proof])).await;
    assert_refused(response, &refused, "a bearer token under DPoP").await;
}

#[tokio::test]
async fn dpop_allowed_by_default_accepts_bearer_tokens_and_offers_both_schemes() {
    let Some(rig) = rig(|auth| auth).await else {
        return;
    };
    let plain = rig.bearer_token().await;
    let response = rig.whoami(bearer(&plain)).await;
    assert_eq!(response.header("dpop-nonce"), None);
    assert_eq!(
        whoami_text(response, "a bearer token").await,
        "svc - mcp,files:write"
    );
    let response = rig.whoami(Vec::new()).await;
    let both = [rig.bearer_challenge(None), rig.dpop_challenge(None)];
    assert_refused(response, &both, "no credentials").await;

    let metadata = rig.metadata().await;
    assert_eq!(
        metadata["dpop_signing_alg_values_supported"],
        json!(DPOP_ALGS),
        "{metadata}"
    );
    assert_eq!(metadata["dpop_bound_access_tokens_required"], false);
    assert_eq!(metadata["resource"], rig.resource.as_str());
}

#[tokio::test]
async fn dpop_required_refuses_bearer_tokens_and_challenges_with_dpop_only() {
    let Some(rig) = rig(|auth| auth.dpop(Dpop::Required)).await else {
        return;
    };
    let response = rig.whoami(Vec::new()).await;
    assert_refused(response, &[rig.dpop_challenge(None)], "no credentials").await;
    let plain = rig.bearer_token().await;
    let response = rig.whoami(bearer(&plain)).await;
    let invalid = [rig.dpop_challenge(Some("invalid_token"))];
    assert_refused(response, &invalid, "a bearer token").await;

    let key = DpopKey::new();
    let token = rig.bound_token(&key, false).await;
    let proof = rig.proof(&key, "POST", &token, None);
    let response = rig.whoami(dpop(&token, &[&proof])).await;
    assert_eq!(
        whoami_text(response, "a bound token").await,
        format!("svc {} mcp,files:write", key.jkt())
    );
    let response = rig.whoami(dpop(&token, &[])).await;
    let no_proof = [rig.dpop_challenge(Some("invalid_dpop_proof"))];
    assert_refused(response, &no_proof, "a bound token without its proof").await;

    let metadata = rig.metadata().await;
    assert_eq!(
        metadata["dpop_signing_alg_values_supported"],
        json!(DPOP_ALGS),
        "{metadata}"
    );
    assert_eq!(metadata["dpop_bound_access_tokens_required"], true);
}

#[tokio::test]
async fn dpop_off_takes_bearer_tokens_only_and_publishes_no_dpop() {
    let Some(rig) = rig(|auth| auth.dpop(Dpop::Off)).await else {
        return;
    };
    let response = rig.whoami(Vec::new()).await;
    assert_refused(response, &[rig.bearer_challenge(None)], "no credentials").await;
    let key = DpopKey::new();
    let token = rig.bound_token(&key, false).await;
    // The DPoP scheme is not one this server takes: as if no credentials came.
    let proof = rig.proof(&key, "POST", &token, None);
    let response = rig.whoami(dpop(&token, &[&proof])).await;
    assert_refused(response, &[rig.bearer_challenge(None)], "the DPoP scheme").await;
    // A bound token is still not a bearer token.
    let response = rig.whoami(bearer(&token)).await;
    let invalid = [rig.bearer_challenge(Some("invalid_token"))];
    assert_refused(response, &invalid, "a bound token as a bearer token").await;
    let plain = rig.bearer_token().await;
    let response = rig.whoami(bearer(&plain)).await;
    assert_eq!(response.status, 200);

    let metadata = rig.metadata().await;
    assert!(
        metadata.get("dpop_signing_alg_values_supported").is_none(),
        "{metadata}"
    );
    assert!(metadata.get("dpop_bound_access_tokens_required").is_none());
}

#[tokio::test]
async fn server_nonces_are_asked_for_accepted_and_renewed() {
    let clock = TestClock::mid_minute();
    // The clock is frozen while the AS issues tokens and the test makes proofs in real time:
    // the most leeway, so that their `iat` is never "in the future" for it.
    let Some(rig) = rig(|auth| {
        auth.dpop_nonces([7; 32])
            .clock(clock.clone())
            .leeway(Duration::from_secs(120))
    })
    .await
    else {
        return;
    };
    let key = DpopKey::new();
    let token = rig.bound_token(&key, false).await;
    let expected = format!("svc {} mcp,files:write", key.jkt());
    let use_nonce = [
        rig.bearer_challenge(None),
        rig.dpop_challenge(Some("use_dpop_nonce")),
    ];

    // No nonce: refused, with one to use.
    let response = rig
        .whoami(dpop(&token, &[&rig.proof(&key, "POST", &token, None)]))
        .await;
    let first = response
        .header("dpop-nonce")
        .expect("a DPoP-Nonce with use_dpop_nonce")
        .to_owned();
    assert_refused(response, &use_nonce, "a proof without a nonce").await;
    // A nonce the server did not make: the same.
    let forged = rig.proof(&key, "POST", &token, Some("bm90LWEtbm9uY2U"));
    let response = rig.whoami(dpop(&token, &[&forged])).await;
    assert_eq!(response.header("dpop-nonce"), Some(first.as_str()));
    assert_refused(response, &use_nonce, "a forged nonce").await;
    // Other proof errors carry a nonce too, so the client's next proof can have it.
    let response = rig.whoami(dpop(&token, &[])).await;
    assert_eq!(response.header("dpop-nonce"), Some(first.as_str()));

    // The retry with the nonce succeeds, and the answer carries the current nonce.
    let proof = rig.proof(&key, "POST", &token, Some(&first));
    let response = rig.whoami(dpop(&token, &[&proof])).await;
    assert_eq!(response.header("dpop-nonce"), Some(first.as_str()));
    assert_eq!(whoami_text(response, "with the nonce").await, expected);

    // A minute later, answers carry a new nonce; the previous one is still accepted.
    clock.advance(Duration::from_secs(60));
    let proof = rig.proof(&key, "POST", &token, Some(&first));
    let response = rig.whoami(dpop(&token, &[&proof])).await;
    let second = response
        .header("dpop-nonce")
        .expect("a fresh nonce")
        .to_owned();
    assert_ne!(second, first);
    assert_eq!(whoami_text(response, "the previous nonce").await, expected);

    // Two minutes after it was made, the first nonce is stale: refused, with the current one.
    clock.advance(Duration::from_secs(60));
    let proof = rig.proof(&key, "POST", &token, Some(&first));
    let response = rig.whoami(dpop(&token, &[&proof])).await;
    let third = response
        .header("dpop-nonce")
        .expect("a nonce with use_dpop_nonce")
        .to_owned();
    assert_ne!(third, second);
    assert_refused(response, &use_nonce, "a stale nonce").await;
    for nonce in [&second, &third] {
        let proof = rig.proof(&key, "POST", &token, Some(nonce));
        let response = rig.whoami(dpop(&token, &[&proof])).await;
        assert_eq!(response.header("dpop-nonce"), Some(third.as_str()));
        assert_eq!(whoami_text(response, "a current nonce").await, expected);
    }

    // Every answer to a bound token's request carries it: a legacy session's too (JSON, 202,
    // the SSE stream, the session's end).
    let nonces = rig
        .legacy_session(&key, &token, Some(&third), &expected)
        .await;
    assert_eq!(nonces, vec![Some(third.clone()); 5]);

    // Plain bearer tokens need no nonce and get none.
    let plain = rig.bearer_token().await;
    let response = rig.whoami(bearer(&plain)).await;
    assert_eq!(response.header("dpop-nonce"), None);
    assert_eq!(response.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deprecated_sse_transport_binds_proofs_to_its_own_paths() {
    let mut config = HttpConfig::default();
    config.old_sse = Some(Default::default());
    let Some(rig) = rig_with(|auth| auth, config).await else {
        return;
    };
    let key = DpopKey::new();
    let token = rig.bound_token(&key, false).await;
    let origin = rig.resource.trim_end_matches("/mcp");
    let (sse, messages) = (format!("{origin}/sse"), format!("{origin}/messages"));
    let refused = [
        rig.bearer_challenge(None),
        rig.dpop_challenge(Some("invalid_dpop_proof")),
    ];
    let send =
        |method: &'static str, path: String, headers: Vec<(&'static str, String)>, body: Value| {
            let addr = rig.addr();
            async move {
                let headers: Vec<(&str, &str)> =
                    headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                let body = if body.is_null() {
                    Vec::new()
                } else {
                    body.to_string().into_bytes()
                };
                within(&path, raw_request(addr, method, &path, &headers, &body)).await
            }
        };
    let accept = || vec![("Accept", "text/event-stream".to_owned())];

    // The stream: a proof for the MCP endpoint is not one for /sse.
    let mut headers = accept();
    headers.extend(dpop(
        &token,
        &[&key.proof("GET", &rig.resource, Some(&token), None)],
    ));
    let response = send("GET", "/sse".into(), headers, Value::Null).await;
    assert_refused(response, &refused, "GET /sse with the endpoint's htu").await;
    let mut headers = accept();
    headers.extend(dpop(&token, &[&key.proof("GET", &sse, Some(&token), None)]));
    let mut stream = send("GET", "/sse".into(), headers, Value::Null).await;
    assert_eq!(stream.status, 200);
    let endpoint = within("the endpoint event", stream.next_event())
        .await
        .expect("an endpoint event");
    assert!(
        endpoint.data.starts_with("/messages?sessionId="),
        "{endpoint:?}"
    );

    // The messages: `htu` is /messages, without the query.
    let post = |htu: &str| {
        let mut headers = vec![("Content-Type", "application/json".to_owned())];
        headers.extend(dpop(&token, &[&key.proof("POST", htu, Some(&token), None)]));
        headers
    };
    let version = ProtocolVersion::V2024_11_05.as_str();
    let initialize = json!({"jsonrpc": "2.0", "id": 0, "method": consts::Initialize::VALUE,
        "params": {"protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}});
    let response = send(
        "POST",
        endpoint.data.clone(),
        post(&rig.resource),
        initialize.clone(),
    )
    .await;
    assert_refused(response, &refused, "POST /messages with the endpoint's htu").await;
    let response = send("POST", endpoint.data.clone(), post(&messages), initialize).await;
    assert_eq!(response.status, 202, "initialize");
    let (_, result) = within("the initialize result", stream.next_message())
        .await
        .expect("a result on the stream");
    assert_eq!(result["result"]["protocolVersion"], version, "{result}");
    let initialized = json!({"jsonrpc": "2.0", "method": consts::NotificationsInitialized::VALUE});
    let response = send("POST", endpoint.data.clone(), post(&messages), initialized).await;
    assert_eq!(response.status, 202, "initialized");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": consts::ToolsCall::VALUE,
        "params": {"name": "whoami", "arguments": {}}});
    let response = send("POST", endpoint.data.clone(), post(&messages), call).await;
    assert_eq!(response.status, 202, "the call");
    let (_, result) = within("the call's result", stream.next_message())
        .await
        .expect("a result on the stream");
    assert_eq!(
        result["result"]["content"][0]["text"],
        format!("svc {} mcp,files:write", key.jkt()),
        "{result}"
    );
}

/// Mounted in axum with `nest_service`, the service sees its path with the prefix stripped
/// (`/` for `/mcp`); a proof names the URI the client sent, which the guard must be given.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proof_for_a_service_nested_in_axum_names_the_full_path() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a listener");
    let addr = listener.local_addr().expect("its address");
    let resource = format!("http://{addr}/mcp");
    let Some(auth) = As::start(&[&resource]).await else {
        return;
    };
    let guard = Auth::resource(&resource)
        .issuer(auth.issuer())
        .build()
        .expect("a valid configuration");
    let server = Server::builder("dpop", "1")
        .auth(guard)
        .tool(Tool::new("whoami", whoami))
        .build();
    let mcp = server
        .http_service(HttpConfig::default())
        .expect("the service");
    let app = axum::Router::new()
        .nest_service("/mcp", mcp.clone())
        .route_service("/direct", mcp);
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    let key = DpopKey::new();
    let token = auth
        .client_credentials_dpop(&key, "mcp", &resource)
        .await
        .access_token;
    let body = modern_call(1, "whoami", json!({})).to_string();
    let call = |path: &'static str, htu: String| {
        let proof = key.proof("POST", &htu, Some(&token), None);
        let mut headers = owned(modern_headers(consts::ToolsCall::VALUE, Some("whoami")));
        headers.extend(dpop(&token, &[&proof]));
        let body = body.clone();
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
            within(
                path,
                raw_request(addr, "POST", path, &headers, body.as_bytes()),
            )
            .await
        }
    };
    let expected = format!("svc {} mcp", key.jkt());
    for path in ["/mcp", "/direct"] {
        let response = call(path, format!("http://{addr}{path}")).await;
        assert_eq!(whoami_text(response, path).await, expected);
    }
    // The stripped path is not the request's.
    let response = call("/mcp", format!("http://{addr}/")).await;
    assert_eq!(response.status, 401, "a proof for /");
}
