//! A real OAuth 2.1 authorization server for the resource-server tests: oidc-provider 9.13.3
//! (`tests/ts/oidc-as.mjs`, whose header comment lists what it offers and what was checked in
//! its source), driven from Rust; DPoP proof keys; forged tokens.
//!
//! Like the other Node peers, [`As::start`] gives `None` (the test is skipped, with the reason
//! printed) when Node or `tests/ts/node_modules` is missing, and fails instead when
//! `MODELCTX_REQUIRE_NODE` is set (see [`crate::node`]).
//!
//! What the AS issues (checked by `tests/tests/it/oidc_as.rs`):
//! - for a resource `R` given to [`As::start`]: RFC 9068 JWTs (`typ: at+jwt`, ES256, `kid` of
//!   the current key) with `aud` = `R`, `iss` = [`As::issuer`], `scope`, `client_id`, `sub`,
//!   `iat`, `exp`, `jti`, and `cnf.jkt` when DPoP-bound. `sub` is always present: `alice` for
//!   [`As::auth_code_pkce`], the client id `svc` for client credentials.
//! - for `R/opaque`: opaque tokens; introspection (by the `rs` client) answers `aud` = `R`,
//!   `iss`, `scope`, `client_id`, `exp`, `iat`, `token_type`, `cnf.jkt` when bound, and `sub` only
//!   for user tokens (client-credentials tokens have none).
//! - any other resource: refused (`invalid_target`).
//!
//! For the OAuth client's end-to-end tests, [`As::start_forms`] starts the AS with real login
//! and consent forms, which [`FormUser`] fills in as a user would, and [`TtlFetch`] makes its
//! access tokens short-lived.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{Jwk, ThumbprintHash};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::elliptic_curve::rand_core::{OsRng, RngCore};
use p256::elliptic_curve::sec1::ToEncodedPoint;
use p256::pkcs8::{EncodePrivateKey, EncodePublicKey};
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::process::Child;

use modelctx_client::auth::{AuthorizationHandler, AuthorizationRequest, Declined, Redirect};
use modelctx_server::auth::{
    BoxFuture, Clock, Fetch, FetchError, FetchRequest, FetchResponse, HttpFetch,
};

use crate::http::{RawResponse, raw_request, within};
use crate::node;

/// The confidential client of the client-credentials grant.
pub const SERVICE_CLIENT: (&str, &str) = ("svc", "s");
/// The public client of the authorization-code grant (PKCE required).
pub const APP_CLIENT: &str = "app";
/// Where the AS sends `app`'s authorization codes (nothing listens there: the code is read from
/// the redirect).
pub const APP_REDIRECT: &str = "http://127.0.0.1/cb";
/// The subject the AS logs in at the authorization endpoint.
pub const USER: &str = "alice";
/// The pre-registered public native client of an AS started with [`As::start_forms`]
/// (authorization code + refresh token, redirect [`CLI_REDIRECT`] on any loopback port).
pub const CLI_CLIENT: &str = "cli";
/// `cli`'s redirect URI; the AS accepts it with any port (RFC 8252 7.3).
pub const CLI_REDIRECT: &str = "http://127.0.0.1/callback";

/// The test AS, a Node process; killed when dropped.
#[derive(Debug)]
pub struct As {
    issuer: String,
    addr: SocketAddr,
    /// Holds the process (and its stdin: the script exits when it closes).
    _child: Child,
}

/// An access token response.
#[derive(Debug, Clone, Deserialize)]
pub struct Token {
    /// The token.
    pub access_token: String,
    /// `Bearer`, or `DPoP` for a bound token.
    pub token_type: String,
    /// Its lifetime in seconds.
    pub expires_in: u64,
    /// The granted scopes, when any.
    #[serde(default)]
    pub scope: Option<String>,
}

/// A token request the AS refused.
#[derive(Debug, Clone)]
pub struct Refused {
    /// The HTTP status (400 or 401).
    pub status: u16,
    /// The `error` member (e.g. `invalid_target`).
    pub error: String,
    /// The whole answer.
    pub body: Value,
    /// The `DPoP-Nonce` header, when the AS sent one.
    pub dpop_nonce: Option<String>,
}

/// The public parts of the AS's signing key ([`As::current_key`]).
#[derive(Debug, Clone)]
pub struct PublicKey {
    /// Its `kid`.
    pub kid: String,
    /// The JWK as published.
    pub jwk: Value,
    /// The point, SEC1 uncompressed (`04 || x || y`): what jsonwebtoken keeps of an EC JWK.
    pub sec1: Vec<u8>,
    /// The SubjectPublicKeyInfo, PEM.
    pub spki_pem: String,
}

/// Requests the AS has served, counted by path (its `/_test/stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Stats {
    /// `GET /jwks`.
    pub jwks: u64,
    /// `POST /token/introspection`.
    pub introspect: u64,
    /// `POST /token` (refused ones included).
    pub token: u64,
}

impl As {
    /// Starts the AS for `resources` (absolute URIs, e.g. `http://127.0.0.1:PORT/mcp`; the first
    /// is the default when a request names none) and waits (at most 20 s) for it to listen.
    /// `None`: Node is not available and the test is skipped (see [`crate::node`]).
    ///
    /// # Panics
    ///
    /// When the script does not start listening.
    pub async fn start(resources: &[&str]) -> Option<As> {
        As::spawn(resources.to_vec()).await
    }

    /// [`start`](Self::start) with the script's `--forms`: the AS shows oidc-provider's login and
    /// consent forms (which [`FormUser`] fills in), revokes tokens (RFC 7009,
    /// `<issuer>/token/revocation`), and knows one more static client, [`CLI_CLIENT`].
    ///
    /// # Panics
    ///
    /// When the script does not start listening.
    pub async fn start_forms(resources: &[&str]) -> Option<As> {
        let mut args = vec!["--forms"];
        args.extend_from_slice(resources);
        As::spawn(args).await
    }

    async fn spawn(args: Vec<&str>) -> Option<As> {
        let node::Listening {
            at: issuer,
            mut lines,
            child,
        } = node::spawn_listening("oidc-as.mjs", &args).await?;
        let addr = issuer
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("unexpected issuer {issuer:?}"));
        // The rest of its stdout is drained, so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Some(As {
            issuer,
            addr,
            _child: child,
        })
    }

    /// The issuer identifier: `http://127.0.0.1:PORT`, no trailing slash.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// Its socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its JWKS URI.
    pub fn jwks_uri(&self) -> String {
        format!("{}/jwks", self.issuer)
    }

    /// Its token endpoint.
    pub fn token_endpoint(&self) -> String {
        format!("{}/token", self.issuer)
    }

    /// Its introspection endpoint.
    pub fn introspection_endpoint(&self) -> String {
        format!("{}/token/introspection", self.issuer)
    }

    /// The client a resource server introspects with: `("rs", "rs-secret")`.
    pub fn introspection_client(&self) -> (&'static str, &'static str) {
        ("rs", "rs-secret")
    }

    /// A client-credentials token (client `svc`) for `resource` with `scope` (space-separated;
    /// scopes the resource does not know are dropped by the AS).
    ///
    /// # Panics
    ///
    /// When the AS refuses.
    pub async fn client_credentials(&self, scope: &str, resource: &str) -> Token {
        self.try_client_credentials(scope, resource, None)
            .await
            .unwrap_or_else(|r| panic!("client_credentials refused: {r:?}"))
    }

    /// [`client_credentials`](Self::client_credentials) with a lifetime of `ttl` (whole seconds,
    /// at least 1): for tests that need a token to expire.
    pub async fn client_credentials_ttl(
        &self,
        scope: &str,
        resource: &str,
        ttl: Duration,
    ) -> Token {
        self.try_client_credentials(scope, resource, Some(ttl))
            .await
            .unwrap_or_else(|r| panic!("client_credentials refused: {r:?}"))
    }

    /// A client-credentials token request that may be refused; `ttl` asks for that lifetime. An
    /// empty `resource` sends none (the AS then uses its first resource).
    pub async fn try_client_credentials(
        &self,
        scope: &str,
        resource: &str,
        ttl: Option<Duration>,
    ) -> Result<Token, Refused> {
        let mut form = vec![("grant_type", "client_credentials"), ("scope", scope)];
        if !resource.is_empty() {
            form.push(("resource", resource));
        }
        let ttl = ttl.map(|t| t.as_secs().max(1).to_string());
        let mut headers = vec![];
        if let Some(ttl) = &ttl {
            headers.push(("X-Test-Ttl", ttl.as_str()));
        }
        self.token_request(&form, Some(SERVICE_CLIENT), &headers)
            .await
    }

    /// A DPoP-bound client-credentials token: the token request carries a proof by `key`; when
    /// the AS answers `use_dpop_nonce` (it always does first: it requires nonces), the request is
    /// repeated once with its `DPoP-Nonce`.
    ///
    /// # Panics
    ///
    /// When the AS refuses the second request, or asks for a nonce without giving one.
    pub async fn client_credentials_dpop(
        &self,
        key: &DpopKey,
        scope: &str,
        resource: &str,
    ) -> Token {
        let refused = match self
            .try_client_credentials_dpop(key, scope, resource, None)
            .await
        {
            Ok(token) => return token,
            Err(refused) if refused.error == "use_dpop_nonce" => refused,
            Err(refused) => panic!("DPoP client_credentials refused: {refused:?}"),
        };
        let nonce = refused
            .dpop_nonce
            .unwrap_or_else(|| panic!("use_dpop_nonce without a DPoP-Nonce: {:?}", refused.body));
        self.try_client_credentials_dpop(key, scope, resource, Some(&nonce))
            .await
            .unwrap_or_else(|r| panic!("DPoP client_credentials refused with a nonce: {r:?}"))
    }

    /// One DPoP client-credentials token request (a fresh proof by `key`, with `nonce` when
    /// given) that may be refused.
    pub async fn try_client_credentials_dpop(
        &self,
        key: &DpopKey,
        scope: &str,
        resource: &str,
        nonce: Option<&str>,
    ) -> Result<Token, Refused> {
        let form = [
            ("grant_type", "client_credentials"),
            ("scope", scope),
            ("resource", resource),
        ];
        let proof = key.proof("POST", &self.token_endpoint(), None, nonce);
        self.token_request(&form, Some(SERVICE_CLIENT), &[("DPoP", &proof)])
            .await
    }

    /// A token for the user [`USER`] through the authorization-code grant with PKCE (S256), as
    /// the public client `app`: the authorization request, the AS's login and consent
    /// interactions (automatic), the code from the redirect to [`APP_REDIRECT`], and the token
    /// request with the verifier; `resource` on both requests.
    ///
    /// # Panics
    ///
    /// When a step fails.
    pub async fn auth_code_pkce(&self, scope: &str, resource: &str) -> Token {
        let verifier = URL_SAFE_NO_PAD.encode(random_bytes::<32>());
        let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
        let state = URL_SAFE_NO_PAD.encode(random_bytes::<12>());
        let query = form_encode(&[
            ("client_id", APP_CLIENT),
            ("response_type", "code"),
            ("redirect_uri", APP_REDIRECT),
            ("scope", scope),
            ("resource", resource),
            ("code_challenge", &challenge),
            ("code_challenge_method", "S256"),
            ("state", &state),
        ]);
        let mut path = format!("/auth?{query}");
        let mut cookies: Vec<(String, String)> = Vec::new();
        let code = 'redirects: {
            for _ in 0..10 {
                let cookie = cookies
                    .iter()
                    .map(|(n, v)| format!("{n}={v}"))
                    .collect::<Vec<_>>()
                    .join("; ");
                let mut headers = vec![];
                if !cookie.is_empty() {
                    headers.push(("Cookie", cookie.as_str()));
                }
                let response = self.send("GET", &path, &headers, b"").await;
                for (name, value) in &response.headers {
                    if !name.eq_ignore_ascii_case("set-cookie") {
                        continue;
                    }
                    let pair = value.split(';').next().unwrap_or_default();
                    if let Some((n, v)) = pair.split_once('=') {
                        cookies.retain(|(old, _)| old != n);
                        cookies.push((n.trim().to_owned(), v.trim().to_owned()));
                    }
                }
                let status = response.status;
                let Some(location) = response.header("location").map(str::to_owned) else {
                    let body = String::from_utf8_lossy(&response.body().await).into_owned();
                    panic!("GET {path}: {status} without a redirect: {body}");
                };
                if let Some(query) = location.strip_prefix(&format!("{APP_REDIRECT}?")) {
                    let params = form_decode(query);
                    let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v);
                    assert_eq!(get("state"), Some(&state), "state of {location}");
                    match get("code") {
                        Some(code) => break 'redirects code.clone(),
                        None => panic!("the authorization failed: {location}"),
                    }
                }
                path = location
                    .strip_prefix(&self.issuer)
                    .unwrap_or(&location)
                    .to_owned();
                assert!(path.starts_with('/'), "a redirect elsewhere: {location}");
            }
            panic!("more than 10 redirects from the authorization endpoint");
        };
        let form = [
            ("grant_type", "authorization_code"),
            ("code", code.as_str()),
            ("redirect_uri", APP_REDIRECT),
            ("code_verifier", verifier.as_str()),
            ("client_id", APP_CLIENT),
            ("resource", resource),
        ];
        self.token_request(&form, None, &[])
            .await
            .unwrap_or_else(|r| panic!("the code exchange was refused: {r:?}"))
    }

    /// A refresh token request (`grant_type=refresh_token`) of the public client `client_id`
    /// for `resource`, as a client that kept an old refresh token would make it.
    pub async fn refresh(
        &self,
        client_id: &str,
        refresh_token: &str,
        resource: &str,
    ) -> Result<Token, Refused> {
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token),
            ("client_id", client_id),
            ("resource", resource),
        ];
        self.token_request(&form, None, &[]).await
    }

    /// The AS's introspection answer for `token`, asked as the `rs` client (RFC 7662).
    pub async fn introspect(&self, token: &str) -> Value {
        let body = form_encode(&[("token", token), ("token_type_hint", "access_token")]);
        let (id, secret) = self.introspection_client();
        let auth = basic(id, secret);
        let response = self
            .send(
                "POST",
                "/token/introspection",
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/x-www-form-urlencoded"),
                ],
                body.as_bytes(),
            )
            .await;
        response.json().await
    }

    /// The AS's key set (`GET /jwks`; counted in [`stats`](Self::stats)).
    pub async fn jwks(&self) -> Value {
        self.send("GET", "/jwks", &[], b"").await.json().await
    }

    /// A JWS signed by the AS's current key. `header` members override `{alg: ES256, typ: at+jwt,
    /// kid: <current>}`; `claims` members override `{iss: <issuer>, aud: <first resource>, sub:
    /// alice, client_id: svc, scope: mcp, iat: now, exp: now + 300, jti: <random>}`; a member
    /// given as `null` is left out (e.g. `{"typ": null}`).
    pub async fn sign(&self, header: Value, claims: Value) -> String {
        let body = json!({"header": header, "claims": claims}).to_string();
        let answer = self
            .send(
                "POST",
                "/_test/sign",
                &[("Content-Type", "application/json")],
                body.as_bytes(),
            )
            .await
            .json()
            .await;
        answer["token"]
            .as_str()
            .unwrap_or_else(|| panic!("/_test/sign answered {answer}"))
            .to_owned()
    }

    /// Rotates the signing key: a new key signs from now on, the older ones stay in the key set.
    /// Returns the new key's `kid`.
    pub async fn rotate(&self) -> String {
        let answer = self
            .send("POST", "/_test/rotate", &[], b"")
            .await
            .json()
            .await;
        answer["kid"]
            .as_str()
            .unwrap_or_else(|| panic!("/_test/rotate answered {answer}"))
            .to_owned()
    }

    /// The AS's current signing key, public parts: what the algorithm-confusion tests MAC with.
    pub async fn current_key(&self) -> PublicKey {
        let jwks = self.jwks().await;
        let jwk = jwks["keys"][0].clone();
        let coordinate = |name: &str| {
            let text = jwk[name]
                .as_str()
                .unwrap_or_else(|| panic!("no {name} in {jwk}"));
            URL_SAFE_NO_PAD.decode(text).expect("base64url")
        };
        let sec1 = [vec![4], coordinate("x"), coordinate("y")].concat();
        let key = p256::PublicKey::from_sec1_bytes(&sec1).expect("a P-256 point");
        let spki_pem = key
            .to_public_key_pem(p256::pkcs8::LineEnding::LF)
            .expect("a PEM encoding");
        PublicKey {
            kid: jwk["kid"].as_str().expect("a kid").to_owned(),
            jwk,
            sec1,
            spki_pem,
        }
    }

    /// Makes `resource` a resource indicator the AS issues tokens for (JWTs; `<resource>/opaque`
    /// opaque ones), after it started: for a server whose port is known only once it listens.
    pub async fn add_resource(&self, resource: &str) {
        let body = serde_json::json!({ "resource": resource }).to_string();
        let response = self
            .send("POST", "/_test/resource", &[], body.as_bytes())
            .await;
        assert_eq!(response.status, 200, "/_test/resource refused {resource}");
    }

    /// The requests served so far.
    pub async fn stats(&self) -> Stats {
        let answer = self
            .send("GET", "/_test/stats", &[], b"")
            .await
            .json()
            .await;
        serde_json::from_value(answer.clone())
            .unwrap_or_else(|e| panic!("/_test/stats answered {answer}: {e}"))
    }

    /// A form POST to the token endpoint, with client_secret_basic when `client` is given.
    async fn token_request(
        &self,
        form: &[(&str, &str)],
        client: Option<(&str, &str)>,
        extra: &[(&str, &str)],
    ) -> Result<Token, Refused> {
        let body = form_encode(form);
        let auth = client.map(|(id, secret)| basic(id, secret));
        let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
        if let Some(auth) = &auth {
            headers.push(("Authorization", auth));
        }
        headers.extend_from_slice(extra);
        let response = self.send("POST", "/token", &headers, body.as_bytes()).await;
        let status = response.status;
        let dpop_nonce = response.header("dpop-nonce").map(str::to_owned);
        let body = response.json().await;
        if status == 200 {
            return Ok(serde_json::from_value(body.clone())
                .unwrap_or_else(|e| panic!("a token response {body}: {e}")));
        }
        Err(Refused {
            status,
            error: body["error"].as_str().unwrap_or_default().to_owned(),
            body,
            dpop_nonce,
        })
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> RawResponse {
        within(
            &format!("{method} {path} at the test AS"),
            raw_request(self.addr, method, path, headers, body),
        )
        .await
    }
}

/// The user of an AS started with [`As::start_forms`], without a browser: an
/// [`AuthorizationHandler`] that GETs the authorization URL, follows the AS's redirects (at most
/// 20 steps, all on the AS), fills in the login form ([`USER`], any password) and the consent
/// form as they come, and returns the redirect to the client's redirect URI (not followed:
/// nothing has to listen there). Each authorization starts with no cookie (no AS session), so
/// each one is a login; [`logins`](FormUser::logins) counts them.
#[derive(Debug)]
pub struct FormUser {
    addr: SocketAddr,
    issuer: String,
    logins: AtomicUsize,
    consents: AtomicUsize,
    asked: Mutex<Vec<Vec<String>>>,
}

impl FormUser {
    /// The user of `authorization_server`.
    pub fn new(authorization_server: &As) -> Arc<FormUser> {
        Arc::new(FormUser {
            addr: authorization_server.addr,
            issuer: authorization_server.issuer.clone(),
            logins: AtomicUsize::new(0),
            consents: AtomicUsize::new(0),
            asked: Mutex::new(Vec::new()),
        })
    }

    /// The login forms posted so far.
    pub fn logins(&self) -> usize {
        self.logins.load(Ordering::SeqCst)
    }

    /// The consent forms posted so far.
    pub fn consents(&self) -> usize {
        self.consents.load(Ordering::SeqCst)
    }

    /// The scopes of each authorization request the user was shown, in order.
    pub fn asked(&self) -> Vec<Vec<String>> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// One request to the AS with the cookies of `jar`, whose `Set-Cookie`s it takes; bounded.
    async fn send(
        &self,
        jar: &mut Vec<(String, String)>,
        method: &str,
        path: &str,
        form: Option<&str>,
    ) -> Result<RawResponse, Declined> {
        let cookie = jar
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let mut headers = vec![];
        if !cookie.is_empty() {
            headers.push(("Cookie", cookie.as_str()));
        }
        if form.is_some() {
            headers.push(("Content-Type", "application/x-www-form-urlencoded"));
        }
        let body = form.unwrap_or_default().as_bytes();
        let response = tokio::time::timeout(
            Duration::from_secs(10),
            raw_request(self.addr, method, path, &headers, body),
        )
        .await
        .map_err(|_| Declined::new(format!("{method} {path}: no answer within 10 s")))?;
        for (name, value) in &response.headers {
            if !name.eq_ignore_ascii_case("set-cookie") {
                continue;
            }
            let pair = value.split(';').next().unwrap_or_default();
            if let Some((n, v)) = pair.split_once('=') {
                jar.retain(|(old, _)| old != n.trim());
                jar.push((n.trim().to_owned(), v.trim().to_owned()));
            }
        }
        Ok(response)
    }

    /// The path of `url` on the AS, or why it is elsewhere.
    fn on_the_as(&self, url: &str) -> Result<String, Declined> {
        let path = url.strip_prefix(&self.issuer).unwrap_or(url);
        if path.starts_with('/') {
            Ok(path.to_owned())
        } else {
            Err(Declined::new(format!("a redirect off the AS: {url}")))
        }
    }

    async fn play(&self, request: &AuthorizationRequest) -> Result<Redirect, Declined> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(request.scopes.clone());
        let location = self.sign_in_to(&request.url, &request.redirect_uri).await?;
        Ok(Redirect::new(&location))
    }

    /// Signs in at the authorization URL `url` (as [`FormUser`] does) and returns the URL the
    /// AS redirects to: the client's `redirect_uri` (taken from `url`) with the code and state.
    pub async fn sign_in(&self, url: &str) -> Result<String, Declined> {
        let redirect_uri = url
            .split_once('?')
            .map_or("", |(_, query)| query)
            .split('&')
            .find_map(|pair| pair.strip_prefix("redirect_uri="))
            .map(percent_decode)
            .ok_or_else(|| Declined::new(format!("no redirect_uri in {url}")))?;
        self.sign_in_to(url, &redirect_uri).await
    }

    /// [`sign_in`](FormUser::sign_in), then a GET of the redirect on the client's loopback
    /// listener, as a browser would (`http://127.0.0.1:PORT/...` only): its status.
    pub async fn browse(&self, url: &str) -> Result<u16, Declined> {
        let location = self.sign_in(url).await?;
        let rest = location
            .strip_prefix("http://")
            .ok_or_else(|| Declined::new(format!("not a loopback redirect: {location}")))?;
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let addr: SocketAddr = authority
            .parse()
            .map_err(|_| Declined::new(format!("not a loopback redirect: {location}")))?;
        let path = if path.is_empty() { "/" } else { path };
        let response = tokio::time::timeout(
            Duration::from_secs(10),
            raw_request(addr, "GET", path, &[], b""),
        )
        .await
        .map_err(|_| Declined::new(format!("GET {location}: no answer within 10 s")))?;
        Ok(response.status)
    }

    /// The sign-in at `url`, up to the AS's redirect to `redirect_uri` (returned).
    async fn sign_in_to(&self, url: &str, redirect_uri: &str) -> Result<String, Declined> {
        let mut jar = Vec::new();
        let mut next = ("GET", self.on_the_as(url)?, None::<String>);
        for _ in 0..20 {
            let (method, path, form) = &next;
            let response = self.send(&mut jar, method, path, form.as_deref()).await?;
            let status = response.status;
            if let Some(location) = response.header("location").map(str::to_owned) {
                if location.starts_with(redirect_uri) {
                    return Ok(location);
                }
                next = ("GET", self.on_the_as(&location)?, None);
                continue;
            }
            let page = String::from_utf8_lossy(&response.body().await).into_owned();
            if status != 200 {
                return Err(Declined::new(format!(
                    "{method} {path}: {status} without a redirect: {page}"
                )));
            }
            // devInteractions' pages: one form, with a hidden `prompt` saying which.
            let between = |from: &str| {
                page.split_once(from)
                    .and_then(|(_, rest)| rest.split_once('"'))
                    .map(|(value, _)| value.to_owned())
            };
            let (Some(action), Some(prompt)) =
                (between("action=\""), between("name=\"prompt\" value=\""))
            else {
                return Err(Declined::new(format!(
                    "{path}: a page without a form: {page}"
                )));
            };
            let form = match prompt.as_str() {
                "login" => {
                    self.logins.fetch_add(1, Ordering::SeqCst);
                    form_encode(&[("prompt", "login"), ("login", USER), ("password", "x")])
                }
                "consent" => {
                    self.consents.fetch_add(1, Ordering::SeqCst);
                    form_encode(&[("prompt", "consent")])
                }
                other => return Err(Declined::new(format!("an unknown prompt {other:?}"))),
            };
            next = ("POST", self.on_the_as(&action)?, Some(form));
        }
        Err(Declined::new("more than 20 steps at the AS"))
    }
}

impl AuthorizationHandler for FormUser {
    fn authorize<'a>(
        &'a self,
        request: &'a AuthorizationRequest,
    ) -> BoxFuture<'a, Result<Redirect, Declined>> {
        Box::pin(self.play(request))
    }
}

/// A [`Fetch`] (the OAuth client's way to its authorization servers) that asks the test AS for
/// access tokens of a short lifetime: every POST to a URL ending in `/token` gets the header
/// `X-Test-Ttl: <seconds>` (see `tests/ts/oidc-as.mjs`); everything else goes to `inner` as it is.
/// It counts the token requests it sends.
#[derive(Debug)]
pub struct TtlFetch {
    inner: HttpFetch,
    ttl: String,
    token_requests: AtomicUsize,
}

impl TtlFetch {
    /// Tokens that live `ttl` (whole seconds, at least 1), through [`HttpFetch::new`].
    pub fn new(ttl: Duration) -> Arc<TtlFetch> {
        Arc::new(TtlFetch {
            inner: HttpFetch::new(),
            ttl: ttl.as_secs().max(1).to_string(),
            token_requests: AtomicUsize::new(0),
        })
    }

    /// The token requests sent so far (refused ones included).
    pub fn token_requests(&self) -> usize {
        self.token_requests.load(Ordering::SeqCst)
    }
}

impl Fetch for TtlFetch {
    fn get<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        self.inner.get(url)
    }

    fn post_form<'a>(
        &'a self,
        url: &'a str,
        form: &'a [(&'a str, &'a str)],
        basic: Option<(&'a str, &'a str)>,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        let mut request = FetchRequest::post_form(url, form);
        request.basic = basic;
        self.send(request)
    }

    fn send<'a>(
        &'a self,
        mut request: FetchRequest<'a>,
    ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
        if request.method.as_str() == "POST" && request.url.ends_with("/token") {
            self.token_requests.fetch_add(1, Ordering::SeqCst);
            let ttl = self.ttl.parse().expect("digits are a header value");
            request.headers.insert("x-test-ttl", ttl);
        }
        self.inner.send(request)
    }
}

/// An ES256 key of a DPoP client (RFC 9449), generated at random.
#[derive(Clone)]
pub struct DpopKey {
    encoding: EncodingKey,
    jwk: Jwk,
    jkt: String,
}

impl std::fmt::Debug for DpopKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpopKey").field("jkt", &self.jkt).finish()
    }
}

impl Default for DpopKey {
    fn default() -> Self {
        Self::new()
    }
}

impl DpopKey {
    /// A new P-256 key.
    pub fn new() -> DpopKey {
        let secret = p256::SecretKey::random(&mut OsRng);
        let der = secret.to_pkcs8_der().expect("a PKCS#8 encoding");
        let encoding = EncodingKey::from_ec_der(der.as_bytes());
        let point = secret.public_key().to_encoded_point(false);
        let jwk: Jwk = serde_json::from_value(json!({
            "kty": "EC",
            "crv": "P-256",
            "x": URL_SAFE_NO_PAD.encode(point.x().expect("uncompressed")),
            "y": URL_SAFE_NO_PAD.encode(point.y().expect("uncompressed")),
        }))
        .expect("a public EC JWK");
        let jkt = jwk
            .thumbprint(ThumbprintHash::SHA256)
            .expect("a thumbprint");
        DpopKey { encoding, jwk, jkt }
    }

    /// The RFC 7638 SHA-256 thumbprint of the public key, base64url: what a bound token's
    /// `cnf.jkt` carries.
    pub fn jkt(&self) -> &str {
        &self.jkt
    }

    /// The public key as a JWK.
    pub fn public_jwk(&self) -> &Jwk {
        &self.jwk
    }

    /// A DPoP proof for a request `htm htu`: `typ: dpop+jwt`, ES256, the public key as `jwk`;
    /// claims `jti` (random), `htm`, `htu`, `iat` (now), `ath` (base64url SHA-256 of
    /// `access_token`, when given) and `nonce` (when given).
    pub fn proof(
        &self,
        htm: &str,
        htu: &str,
        access_token: Option<&str>,
        nonce: Option<&str>,
    ) -> String {
        self.sign_proof(&proof_claims(htm, htu, access_token, nonce))
    }

    /// A proof header (`typ: dpop+jwt`, ES256, the public `jwk`) over exactly `claims`: for
    /// proofs that are wrong on purpose (old `iat`, a reused `jti`, ...).
    pub fn sign_proof(&self, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.typ = Some("dpop+jwt".into());
        header.jwk = Some(self.jwk.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).expect("an ES256 signature")
    }
}

/// The claims of a good proof ([`DpopKey::proof`]) for a request `htm htu`: `jti` (random),
/// `htm`, `htu`, `iat` (now), `ath` (when `access_token` is given) and `nonce` (when given). A
/// test changes one and signs them with [`DpopKey::sign_proof`] for a proof that is wrong in
/// exactly that way.
pub fn proof_claims(
    htm: &str,
    htu: &str,
    access_token: Option<&str>,
    nonce: Option<&str>,
) -> Value {
    let mut claims = json!({
        "jti": URL_SAFE_NO_PAD.encode(random_bytes::<16>()),
        "htm": htm,
        "htu": htu,
        "iat": unix_now(),
    });
    if let Some(token) = access_token {
        claims["ath"] = ath(token).into();
    }
    if let Some(nonce) = nonce {
        claims["nonce"] = nonce.into();
    }
    claims
}

/// `ath` for `access_token`: base64url SHA-256 (RFC 9449 4.2).
pub fn ath(access_token: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(access_token.as_bytes()))
}

/// An unsigned token: header `{"alg": "none", "typ": "at+jwt"}`, `claims`, an empty signature.
pub fn forge_none(claims: &Value) -> String {
    let header = json!({"alg": "none", "typ": "at+jwt"});
    format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

/// A token MACed with HS256 under `secret` (e.g. the bytes of the AS's public key, the
/// algorithm-confusion attack): header `{"alg": "HS256", "typ": "at+jwt"}`.
pub fn forge_hs256_with(secret: &[u8], claims: &Value) -> String {
    forge_hs256_with_kid(secret, None, claims)
}

/// [`forge_hs256_with`], with a `kid` in the header (e.g. the AS's current one).
pub fn forge_hs256_with_kid(secret: &[u8], kid: Option<&str>, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::HS256);
    header.typ = Some("at+jwt".into());
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret)).expect("an HS256 MAC")
}

/// A token whose header names `kid` (with `alg: ES256`, `typ: at+jwt`) and whose signature is
/// 64 random bytes: no key signed it, so only its `kid` can matter (the unknown-`kid` storm).
/// Cheap: nothing is signed.
pub fn forge_with_kid(kid: &str, claims: &Value) -> String {
    let header = json!({"alg": "ES256", "typ": "at+jwt", "kid": kid});
    format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string()),
        URL_SAFE_NO_PAD.encode(random_bytes::<64>())
    )
}

/// A random `kid`: 16 bytes, base64url.
pub fn random_kid() -> String {
    URL_SAFE_NO_PAD.encode(random_bytes::<16>())
}

/// The header and claims of a compact JWS, decoded without any check of the signature.
///
/// # Panics
///
/// When `token` is not three segments of base64url JSON (the third may be empty).
pub fn decode_unverified(token: &str) -> (Value, Value) {
    let parts: Vec<&str> = token.split('.').collect();
    assert_eq!(parts.len(), 3, "not a compact JWS: {token}");
    let part = |s: &str| -> Value {
        let bytes = URL_SAFE_NO_PAD
            .decode(s)
            .unwrap_or_else(|e| panic!("not base64url ({e}): {s}"));
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
    };
    (part(parts[0]), part(parts[1]))
}

/// A clock the test moves, for the guard's token checks (`Auth::clock`): frozen, so that what a
/// test sees never depends on how long the machine takes between two of its steps. It starts
/// when it is first read (or at the time [`TestClock::set`] gives) and moves only by
/// [`TestClock::advance`] and [`TestClock::set`]. Clones share the time.
#[derive(Debug, Clone, Default)]
pub struct TestClock {
    now: Arc<Mutex<Option<SystemTime>>>,
    mid_minute: bool,
}

impl TestClock {
    /// A clock that starts, when first read, at the real time then.
    pub fn new() -> TestClock {
        TestClock::default()
    }

    /// A clock that starts, when first read, in the middle of that minute (the 60 s slot of
    /// DPoP nonces): the slot changes only when the test moves the clock.
    pub fn mid_minute() -> TestClock {
        TestClock {
            mid_minute: true,
            ..TestClock::default()
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        let current = *now.get_or_insert_with(|| self.start());
        *now = Some(current + by);
    }

    /// Sets the clock to `at` (e.g. a token's `iat`, read with [`decode_unverified`]).
    pub fn set(&self, at: SystemTime) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = Some(at);
    }

    fn start(&self) -> SystemTime {
        if self.mid_minute {
            UNIX_EPOCH + Duration::from_secs(unix_now() / 60 * 60 + 30)
        } else {
            SystemTime::now()
        }
    }
}

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        *self
            .now
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert_with(|| self.start())
    }
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0; N];
    OsRng.fill_bytes(&mut bytes);
    bytes
}

fn basic(id: &str, secret: &str) -> String {
    // RFC 6749 2.3.1: each part form-encoded, then base64.
    let pair = format!("{}:{}", form_component(id), form_component(secret));
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// `application/x-www-form-urlencoded`.
/// The form-decoded `text` (`+` a space, `%XX` a byte; an invalid escape kept as it is).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok());
        match (bytes[i], escaped) {
            (_, Some(byte)) => {
                out.push(byte);
                i += 3;
                continue;
            }
            (b'+', None) => out.push(b' '),
            (byte, None) => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn form_encode(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", form_component(k), form_component(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn form_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn form_decode(query: &str) -> Vec<(String, String)> {
    let component = |s: &str| {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    };
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (component(k), component(v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use jsonwebtoken::{DecodingKey, Validation, decode};

    use super::*;

    #[test]
    fn a_dpop_proof_is_signed_by_its_embedded_key_and_carries_the_request() {
        let key = DpopKey::new();
        let proof = key.proof("POST", "https://rs.example/mcp", Some("tok"), Some("n1"));
        let (header, claims) = decode_unverified(&proof);
        assert_eq!(header["typ"], "dpop+jwt");
        assert_eq!(header["alg"], "ES256");
        assert!(
            header["jwk"].get("d").is_none(),
            "the private key leaked: {header}"
        );
        let jwk: Jwk = serde_json::from_value(header["jwk"].clone()).unwrap();
        assert_eq!(jwk.thumbprint(ThumbprintHash::SHA256).unwrap(), key.jkt());

        let mut validation = Validation::new(Algorithm::ES256);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        let verified = decode::<Value>(&proof, &DecodingKey::from_jwk(&jwk).unwrap(), &validation)
            .expect("a valid signature");
        assert_eq!(verified.claims, claims);
        assert_eq!(claims["htm"], "POST");
        assert_eq!(claims["htu"], "https://rs.example/mcp");
        assert_eq!(claims["ath"], ath("tok"));
        assert_eq!(claims["nonce"], "n1");
        assert!(claims["iat"].as_u64().unwrap().abs_diff(unix_now()) <= 5);

        let other = key.proof("POST", "https://rs.example/mcp", None, None);
        let (_, other) = decode_unverified(&other);
        assert_ne!(other["jti"], claims["jti"], "a fresh jti per proof");
        assert!(other.get("ath").is_none() && other.get("nonce").is_none());
        assert_ne!(DpopKey::new().jkt(), key.jkt());
    }

    #[test]
    fn ath_is_the_base64url_sha256_of_the_token() {
        // RFC 9449 section 7.1's example.
        assert_eq!(
            ath("Kz~8mXK1EalYznwH-LC-1fBAo.4Ljp~zsPE_NeO.gxU"),
            "fUHyO2r2Z3DZ53EsNrWBb0xWXoaNy59IiKCAqksmQEo"
        );
    }

    #[test]
    fn forged_tokens_have_the_headers_they_claim() {
        let claims = json!({"sub": "mallory", "aud": "x"});
        let none = forge_none(&claims);
        assert!(none.ends_with('.'), "an empty signature: {none}");
        let (header, body) = decode_unverified(&none);
        assert_eq!(header, json!({"alg": "none", "typ": "at+jwt"}));
        assert_eq!(body, claims);

        let hs = forge_hs256_with_kid(b"public key bytes", Some("k1"), &claims);
        let (header, _) = decode_unverified(&hs);
        assert_eq!(header["alg"], "HS256");
        assert_eq!(header["kid"], "k1");
        let mut validation = Validation::new(Algorithm::HS256);
        validation.required_spec_claims.clear();
        validation.validate_exp = false;
        validation.validate_aud = false;
        let verified = decode::<Value>(
            &hs,
            &DecodingKey::from_secret(b"public key bytes"),
            &validation,
        )
        .expect("a MAC under that secret");
        assert_eq!(verified.claims, claims);
        let wrong = decode::<Value>(&hs, &DecodingKey::from_secret(b"other"), &validation);
        assert!(wrong.is_err());
    }

    #[test]
    fn forms_are_encoded_and_decoded() {
        let encoded = form_encode(&[
            ("resource", "http://127.0.0.1:8/mcp"),
            ("scope", "mcp files:write"),
        ]);
        assert_eq!(
            encoded,
            "resource=http%3A%2F%2F127.0.0.1%3A8%2Fmcp&scope=mcp+files%3Awrite"
        );
        assert_eq!(
            form_decode(&encoded),
            vec![
                ("resource".to_owned(), "http://127.0.0.1:8/mcp".to_owned()),
                ("scope".to_owned(), "mcp files:write".to_owned()),
            ]
        );
        assert_eq!(basic("svc", "s"), "Basic c3ZjOnM=");
    }
}
