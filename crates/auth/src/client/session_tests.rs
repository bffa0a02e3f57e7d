//! The authorizer against in-process servers (an authorization server or two and a resource
//! server, hyper) through modelctx-http's real client transport, or by calling the trait.

use std::collections::{HashMap, HashSet};
use std::error::Error as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Response, StatusCode, Uri};
use http_body_util::Full;
use modelctx_http::client::{
    AuthFailureKind, Authorizer, ClientConfig, HttpTransport, Inbound, Outgoing, Reply, Retry,
    TransportError,
};
use modelctx_types::{Incoming, Message, ProtocolVersion, Request, RequestId, meta_keys};
use serde_json::{Value, json};

use super::*;
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};

use crate::client::dpop::tests::decode_part;
use crate::client::handler::{AuthorizationHandler, AuthorizationRequest, Declined, Redirect};
use crate::client::{
    DpopKey, FileStore, MemoryStore, REVOCATION_TIMEOUT, Registered, Revocation, SigningKey,
    TokenAuthMethod, TokenStore,
};
use crate::fetch::tests::{Seen, serve};
use crate::fetch::{BoxFuture, encode_component, form_decode};

const PRM_PATH: &str = "/.well-known/oauth-protected-resource/mcp";

/// What every mock server shares: the tokens issued and what each party saw.
#[derive(Debug, Default)]
struct World {
    /// The authorization server the resource's metadata names now.
    current_as: String,
    /// Every access token issued: its issuer and scopes.
    issued: HashMap<String, (String, Vec<String>)>,
    /// Refresh tokens: their scopes; revoked ones are refused.
    refresh: HashMap<String, Vec<String>>,
    revoked: HashSet<String>,
    /// Access tokens the resource server refuses although issued; or all of them.
    refused: HashSet<String>,
    refuse_all: bool,
    /// The scope `tools/call` needs (403 `insufficient_scope` without it).
    need: Option<String>,
    /// `tools/call` is refused with a new scope every time.
    escalate: u32,
    /// `tools/call` is refused for this scope whatever the token.
    deny: Option<String>,
    /// The `scope` of the 401 challenge.
    challenge_scope: String,
    /// The `scope` of the last authorization request.
    pending_scope: Vec<String>,
    counter: u32,
    /// (authorization server, path, form) of every request to an authorization server.
    as_log: Vec<(String, String, Form)>,
    /// (JSON-RPC method or HTTP method, Authorization, status) of every request to /mcp.
    rs_log: Vec<(String, Option<String>, u16)>,
    /// More members of the authorization servers' metadata.
    as_extra: Value,
    /// The client credentials grant is refused (`invalid_client`).
    refuse_grant: bool,
    /// DPoP: tokens are bound (`token_type` `DPoP`) when the token request has a proof, and
    /// `/mcp` takes only `DPoP` tokens with a proof of the right method, URL and token.
    dpop: bool,
    /// The nonce the token endpoint (`.0`) and `/mcp` (`.1`) want in proofs.
    nonces: (Option<String>, Option<String>),
    /// The claims of every DPoP proof: at the token endpoint, at `/mcp`.
    as_proofs: Vec<Value>,
    rs_proofs: Vec<Value>,
    /// The `cnf.jkt` of DPoP-bound access and refresh tokens: the thumbprint of the key whose
    /// proof came with the token request. Every use must be proven with that key.
    jkt: HashMap<String, String>,
    /// Every revocation request (RFC 7009): its form and `Authorization` header.
    revocations: Vec<(Form, Option<String>)>,
    /// The status `/revoke` answers (200 when `None`: the token is then revoked and refused).
    revocation_status: Option<u16>,
}

type Shared = Arc<Mutex<World>>;

/// A form's fields in order.
type Form = Vec<(String, String)>;

fn world() -> Shared {
    Arc::new(Mutex::new(World {
        challenge_scope: "mcp:basic".into(),
        ..World::default()
    }))
}

/// The RFC 7638 thumbprint of the key in a DPoP proof's header.
fn thumbprint_of(proof: &str) -> String {
    let jwk: jsonwebtoken::jwk::Jwk =
        serde_json::from_value(decode_part(proof, 0)["jwk"].clone()).unwrap();
    jwk.thumbprint(jsonwebtoken::jwk::ThumbprintHash::SHA256)
        .unwrap()
}

fn form_of(seen: &Seen) -> Vec<(String, String)> {
    form_decode(std::str::from_utf8(&seen.body).unwrap_or_default())
}

fn field<'a>(form: &'a [(String, String)], name: &str) -> Option<&'a str> {
    form.iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn json_response(status: u16, value: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(value.to_string())))
        .unwrap()
}

/// Serves `route(base, seen)`; returns the base URL.
async fn server(
    route: impl Fn(&str, &Seen) -> Response<Full<Bytes>> + Send + Sync + 'static,
) -> String {
    let base = Arc::new(Mutex::new(String::new()));
    let named = base.clone();
    let addr = serve(Arc::new(move |seen: Seen| {
        let base = named.lock().unwrap().clone();
        route(&base, &seen)
    }))
    .await;
    let url = format!("http://{addr}");
    *base.lock().unwrap() = url.clone();
    url
}

/// An authorization server called `name`: RFC 8414 metadata, dynamic registration
/// (`<name>-client`), a token endpoint issuing `<name>-tok-N` (with `expires_in` when given)
/// and `<name>-rt-N` refresh tokens.
async fn authorization_server(
    name: &'static str,
    world: &Shared,
    expires_in: Option<u64>,
) -> String {
    let world = world.clone();
    server(move |base, seen| {
        let form = form_of(seen);
        let mut w = world.lock().unwrap();
        w.as_log
            .push((name.to_owned(), seen.path.clone(), form.clone()));
        match (seen.method.as_str(), seen.path.as_str()) {
            ("GET", "/.well-known/oauth-authorization-server") => {
                let mut metadata = json!({
                    "issuer": base,
                    "authorization_endpoint": format!("{base}/authorize"),
                    "token_endpoint": format!("{base}/token"),
                    "registration_endpoint": format!("{base}/register"),
                    "response_types_supported": ["code"],
                    "code_challenge_methods_supported": ["S256"],
                    "token_endpoint_auth_methods_supported": ["none"],
                    "authorization_response_iss_parameter_supported": true,
                });
                if let Value::Object(extra) = &w.as_extra {
                    for (k, v) in extra {
                        metadata[k] = v.clone();
                    }
                }
                json_response(200, &metadata)
            }
            ("POST", "/revoke") => {
                let authorization = seen
                    .headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                w.revocations.push((form.clone(), authorization));
                if let Some(status) = w.revocation_status {
                    return json_response(
                        status,
                        &json!({"error": "temporarily_unavailable", "error_description": "down"}),
                    );
                }
                let token = field(&form, "token").unwrap_or_default().to_owned();
                w.revoked.insert(token.clone());
                w.refused.insert(token);
                json_response(200, &json!({}))
            }
            ("POST", "/register") => json_response(
                201,
                &json!({"client_id": format!("{name}-client"), "token_endpoint_auth_method": "none"}),
            ),
            ("POST", "/token") => {
                let mut bound = false;
                let mut proof_jkt = None;
                if w.dpop {
                    let Some(proof) = seen.headers.get("dpop").and_then(|v| v.to_str().ok())
                    else {
                        return json_response(400, &json!({"error": "invalid_dpop_proof"}));
                    };
                    let claims = decode_part(proof, 1);
                    w.as_proofs.push(claims.clone());
                    if claims["htm"] != "POST"
                        || claims["htu"] != format!("{base}/token")
                        || claims.get("ath").is_some()
                    {
                        return json_response(400, &json!({"error": "invalid_dpop_proof"}));
                    }
                    if let Some(nonce) = &w.nonces.0
                        && claims["nonce"] != nonce.as_str()
                    {
                        let mut response = json_response(400, &json!({"error": "use_dpop_nonce"}));
                        response
                            .headers_mut()
                            .insert("dpop-nonce", HeaderValue::from_str(nonce).unwrap());
                        return response;
                    }
                    bound = true;
                    proof_jkt = Some(thumbprint_of(proof));
                }
                let mut with_refresh = true;
                let scopes = match field(&form, "grant_type") {
                    Some("client_credentials") if w.refuse_grant => {
                        return json_response(401, &json!({"error": "invalid_client"}));
                    }
                    Some("client_credentials") => {
                        with_refresh = false;
                        field(&form, "scope")
                            .map(|s| s.split(' ').map(str::to_owned).collect())
                            .unwrap_or_default()
                    }
                    Some("authorization_code") => w.pending_scope.clone(),
                    Some("refresh_token") => {
                        let rt = field(&form, "refresh_token").unwrap_or_default();
                        // A bound refresh token needs a proof of its key (RFC 9449 section 5).
                        let key_ok = w.jkt.get(rt).is_none_or(|jkt| Some(jkt) == proof_jkt.as_ref());
                        match w.refresh.get(rt) {
                            Some(scopes) if !w.revoked.contains(rt) && key_ok => scopes.clone(),
                            _ => return json_response(400, &json!({"error": "invalid_grant"})),
                        }
                    }
                    _ => return json_response(400, &json!({"error": "unsupported_grant_type"})),
                };
                w.counter += 1;
                let n = w.counter;
                let token = format!("{name}-tok-{n}");
                let rt = format!("{name}-rt-{n}");
                w.issued.insert(token.clone(), (base.to_owned(), scopes.clone()));
                if let Some(jkt) = &proof_jkt {
                    w.jkt.insert(token.clone(), jkt.clone());
                    if with_refresh {
                        w.jkt.insert(rt.clone(), jkt.clone());
                    }
                }
                let token_type = if bound { "DPoP" } else { "Bearer" };
                let mut body = json!({"access_token": token, "token_type": token_type});
                if with_refresh {
                    w.refresh.insert(rt.clone(), scopes);
                    body["refresh_token"] = json!(rt);
                }
                if let Some(expires_in) = expires_in {
                    body["expires_in"] = json!(expires_in);
                }
                json_response(200, &body)
            }
            _ => json_response(404, &json!({})),
        }
    })
    .await
}

/// The resource server: its metadata names `World::current_as`; `/mcp` answers a JSON-RPC
/// result to a token of that server it does not refuse, 401 (`scope` = the challenge scope)
/// otherwise, and 403 `insufficient_scope` to a `tools/call` without the needed scope.
async fn resource_server(world: &Shared) -> String {
    let world = world.clone();
    server(move |base, seen| {
        let mut w = world.lock().unwrap();
        if seen.path == PRM_PATH {
            return json_response(
                200,
                &json!({"resource": format!("{base}/mcp"), "authorization_servers": [w.current_as]}),
            );
        }
        if seen.path != "/mcp" {
            return json_response(404, &json!({}));
        }
        let body: Value = serde_json::from_slice(&seen.body).unwrap_or(Value::Null);
        let method = body["method"]
            .as_str()
            .map_or_else(|| seen.method.to_string(), str::to_owned);
        let authorization = seen
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let scheme = if w.dpop { "DPoP " } else { "Bearer " };
        let token = authorization.as_deref().and_then(|a| a.strip_prefix(scheme));
        if w.dpop
            && let Some(token) = token
        {
            // The proof: of this request, for this token, with the nonce wanted.
            let claims = seen
                .headers
                .get("dpop")
                .and_then(|v| v.to_str().ok())
                .map_or(Value::Null, |proof| decode_part(proof, 1));
            w.rs_proofs.push(claims.clone());
            let ath = URL_SAFE_NO_PAD.encode(Sha256::digest(token));
            let proof_jkt = seen
                .headers
                .get("dpop")
                .and_then(|v| v.to_str().ok())
                .map(thumbprint_of);
            let valid = claims["htm"] == seen.method.as_str()
                && claims["htu"] == format!("{base}/mcp")
                && claims["ath"] == ath.as_str()
                && w.jkt.get(token).is_none_or(|jkt| Some(jkt) == proof_jkt.as_ref());
            let stale = w
                .nonces
                .1
                .as_ref()
                .filter(|nonce| claims["nonce"] != nonce.as_str());
            if !valid || stale.is_some() {
                let mut challenge = String::from(r#"DPoP error="invalid_token""#);
                let mut response = Response::builder().status(401);
                if let (true, Some(nonce)) = (valid, stale) {
                    challenge = r#"DPoP error="use_dpop_nonce""#.into();
                    response = response.header("dpop-nonce", nonce.as_str());
                }
                w.rs_log.push((method, authorization, 401));
                return response
                    .header("www-authenticate", challenge)
                    .body(Full::new(Bytes::new()))
                    .unwrap();
            }
        }
        let granted = token
            .and_then(|t| w.issued.get(t).map(|g| (t, g.clone())))
            .filter(|(t, (issuer, _))| {
                *issuer == w.current_as && !w.refuse_all && !w.refused.contains(*t)
            })
            .map(|(_, (_, scopes))| scopes);
        let (status, response) = match granted {
            None => {
                let challenge = format!(
                    r#"{}error="invalid_token", resource_metadata="{base}{PRM_PATH}", scope="{}""#,
                    scheme, w.challenge_scope
                );
                let response = Response::builder()
                    .status(401)
                    .header("www-authenticate", challenge)
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                (401, response)
            }
            Some(scopes) if method == "tools/call" => {
                let missing = if w.escalate > 0 {
                    w.escalate += 1;
                    Some(format!("mcp:x{}", w.escalate - 1))
                } else if let Some(deny) = &w.deny {
                    Some(deny.clone())
                } else {
                    w.need.clone().filter(|need| !scopes.contains(need))
                };
                match missing {
                    Some(scope) => {
                        let challenge =
                            format!(r#"Bearer error="insufficient_scope", scope="{scope}""#);
                        let response = Response::builder()
                            .status(403)
                            .header("www-authenticate", challenge)
                            .body(Full::new(Bytes::new()))
                            .unwrap();
                        (403, response)
                    }
                    None => (200, result_for(&body)),
                }
            }
            Some(_) => (200, result_for(&body)),
        };
        w.rs_log.push((method, authorization, status));
        response
    })
    .await
}

fn result_for(body: &Value) -> Response<Full<Bytes>> {
    json_response(
        200,
        &json!({"jsonrpc": "2.0", "id": body["id"], "result": {"ok": true}}),
    )
}

/// The user: approves every authorization at once (after `delay`), as the authorization server
/// would redirect; records each request.
#[derive(Debug)]
struct User {
    world: Shared,
    delay: Duration,
    seen: Mutex<Vec<AuthorizationRequest>>,
}

impl User {
    fn new(world: &Shared) -> Arc<User> {
        User::slow(world, Duration::ZERO)
    }

    fn slow(world: &Shared, delay: Duration) -> Arc<User> {
        Arc::new(User {
            world: world.clone(),
            delay,
            seen: Mutex::default(),
        })
    }

    fn seen(&self) -> Vec<AuthorizationRequest> {
        self.seen.lock().unwrap().clone()
    }

    /// The `scope` and `client_id` of each authorization URL.
    fn asked(&self) -> Vec<(String, String)> {
        self.seen()
            .iter()
            .map(|r| {
                let query = form_decode(r.url.split_once('?').unwrap().1);
                (
                    field(&query, "scope").unwrap_or_default().to_owned(),
                    field(&query, "client_id").unwrap_or_default().to_owned(),
                )
            })
            .collect()
    }
}

impl AuthorizationHandler for User {
    fn authorize<'a>(
        &'a self,
        request: &'a AuthorizationRequest,
    ) -> BoxFuture<'a, Result<Redirect, Declined>> {
        Box::pin(async move {
            self.seen.lock().unwrap().push(request.clone());
            self.world.lock().unwrap().pending_scope = request.scopes.clone();
            tokio::time::sleep(self.delay).await;
            let query = form_decode(request.url.split_once('?').unwrap().1);
            let mut redirect = format!("{}?code=the-code&state=", request.redirect_uri);
            encode_component(field(&query, "state").unwrap(), &mut redirect);
            redirect.push_str("&iss=");
            encode_component(&request.issuer, &mut redirect);
            Ok(Redirect::new(&redirect))
        })
    }
}

fn client(user: &Arc<User>) -> OAuth {
    OAuth::authorization_code(user.clone())
        .redirect_uri("http://127.0.0.1:9/callback")
        .as_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn transport(url: &str, oauth: &OAuth) -> HttpTransport {
    HttpTransport::new(url, ClientConfig::default().auth(Arc::new(oauth.clone()))).unwrap()
}

fn request(id: i64, method: &str) -> Message {
    let params = json!({"_meta": {
        meta_keys::PROTOCOL_VERSION: ProtocolVersion::V2026_07_28.as_str(),
    }});
    Message::Request(Request::new(id, method, &params).unwrap())
}

/// The result or the failure of request `id`.
async fn outcome(transport: &mut HttpTransport, id: i64) -> Result<Value, TransportError> {
    let id = RequestId::from(id);
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), transport.recv())
            .await
            .expect("an answer in time")
            .expect("the transport is open");
        match next {
            Inbound::Message(Incoming::Single(Message::Response(r))) if r.id == id => {
                return Ok(serde_json::from_str(r.result.get()).unwrap());
            }
            Inbound::RequestFailed { id: failed, error } if failed == id => return Err(error),
            _ => {}
        }
    }
}

/// The grant types of the token requests `name` got.
fn grants(world: &Shared, name: &str) -> Vec<String> {
    world
        .lock()
        .unwrap()
        .as_log
        .iter()
        .filter(|(n, path, _)| n == name && path == "/token")
        .map(|(_, _, form)| field(form, "grant_type").unwrap_or_default().to_owned())
        .collect()
}

fn registrations(world: &Shared, name: &str) -> usize {
    world
        .lock()
        .unwrap()
        .as_log
        .iter()
        .filter(|(n, path, _)| n == name && path == "/register")
        .count()
}

fn rs_log(world: &Shared) -> Vec<(String, Option<String>, u16)> {
    world.lock().unwrap().rs_log.clone()
}

fn the_error(failure: &TransportError) -> &Error {
    let TransportError::Auth(failure) = failure else {
        panic!("not an authorization failure: {failure:?}");
    };
    failure
        .source()
        .and_then(|s| s.downcast_ref::<Error>())
        .expect("the OAuth error is the source")
}

/// Two resources of one world: an authorization server `as1` and the resource server.
async fn setup(expires_in: Option<u64>) -> (Shared, String, String) {
    let world = world();
    let as1 = authorization_server("as1", &world, expires_in).await;
    world.lock().unwrap().current_as = as1.clone();
    let rs = resource_server(&world).await;
    (world, as1, format!("{rs}/mcp"))
}

#[tokio::test]
async fn a_first_401_runs_the_flow_and_the_request_is_sent_again() {
    let (world, as1, url) = setup(None).await;
    let user = User::new(&world);
    let oauth = client(&user);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    assert_eq!(
        rs_log(&world),
        [
            ("tools/list".into(), None, 401),
            ("tools/list".into(), Some("Bearer as1-tok-1".into()), 200)
        ]
    );
    assert_eq!(user.asked(), [("mcp:basic".into(), "as1-client".into())]);
    assert_eq!(user.seen()[0].issuer, as1);
    assert_eq!(user.seen()[0].resource, url);
    assert_eq!(registrations(&world, "as1"), 1);
    assert_eq!(grants(&world, "as1"), ["authorization_code"]);

    // The next request goes with the token at once.
    transport.send(request(2, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 2).await, Ok(json!({"ok": true})));
    assert_eq!(rs_log(&world).len(), 3);
    assert_eq!(rs_log(&world)[2].2, 200);
    assert_eq!(user.seen().len(), 1);
    assert_eq!(grants(&world, "as1").len(), 1);
}

#[tokio::test]
async fn concurrent_401s_run_one_flow() {
    let (world, _, url) = setup(None).await;
    let user = User::slow(&world, Duration::from_millis(300));
    let oauth = client(&user);
    let mut transport = transport(&url, &oauth);
    for id in 1..=4 {
        transport.send(request(id, "tools/list")).unwrap();
    }
    for id in 1..=4 {
        assert_eq!(outcome(&mut transport, id).await, Ok(json!({"ok": true})));
    }
    assert_eq!(user.seen().len(), 1, "one authorization for four 401s");
    assert_eq!(registrations(&world, "as1"), 1);
    assert_eq!(grants(&world, "as1"), ["authorization_code"]);
    let log = rs_log(&world);
    assert_eq!(log.iter().filter(|l| l.2 == 401).count(), 4);
    assert!(
        log.iter()
            .filter(|l| l.2 == 200)
            .all(|l| l.1.as_deref() == Some("Bearer as1-tok-1")),
        "{log:?}"
    );
}

#[tokio::test]
async fn a_401_answered_after_another_request_s_flow_runs_none() {
    let (world, _, url) = setup(None).await;
    let user = User::new(&world);
    let oauth = client(&user);
    let uri: Uri = url.parse().unwrap();
    let post = Method::POST;
    let first = Outgoing::new(&post, &uri, true, &[]);
    let late = oauth.credentials(&first).await.unwrap().ticket;
    let early = oauth.credentials(&first).await.unwrap().ticket;
    let mut headers = HeaderMap::new();
    headers.insert(
        "www-authenticate",
        HeaderValue::from_static(r#"Bearer error="invalid_token", scope="mcp:basic""#),
    );
    for ticket in [early, late] {
        let reply = Reply::new(ticket, StatusCode::UNAUTHORIZED, &headers);
        assert_eq!(oauth.refused(&first, &reply).await, Ok(Retry::Send));
    }
    assert_eq!(
        user.seen().len(),
        1,
        "the late 401 takes the early one's token"
    );
    let earlier = [late];
    let again = Outgoing::new(&post, &uri, true, &earlier);
    let credentials = oauth.credentials(&again).await.unwrap();
    assert_eq!(credentials.headers["authorization"], "Bearer as1-tok-1");
}

#[tokio::test]
async fn a_token_near_expiry_is_refreshed_before_the_send_once() {
    // Tokens live 10 s: always within the 30 s margin.
    let (world, _, url) = setup(Some(10)).await;
    let user = User::new(&world);
    let oauth = client(&user);
    let tokens = oauth
        .authorize_now(&url)
        .await
        .unwrap()
        .expect("authorized");
    assert_eq!(tokens.access_token, "as1-tok-1");
    // The probe: one GET without credentials.
    assert_eq!(rs_log(&world), [("GET".into(), None, 401)]);

    let uri: Uri = url.parse().unwrap();
    let post = Method::POST;
    let (a, b) = tokio::join!(
        async {
            let outgoing = Outgoing::new(&post, &uri, true, &[]);
            oauth.credentials(&outgoing).await
        },
        async {
            let outgoing = Outgoing::new(&post, &uri, true, &[]);
            oauth.credentials(&outgoing).await
        }
    );
    for credentials in [a.unwrap(), b.unwrap()] {
        assert_eq!(credentials.headers["authorization"], "Bearer as1-tok-2");
    }
    assert_eq!(
        grants(&world, "as1"),
        ["authorization_code", "refresh_token"]
    );
    let w = world.lock().unwrap();
    let refresh = &w.as_log.iter().rfind(|(_, p, _)| p == "/token").unwrap().2;
    assert_eq!(field(refresh, "refresh_token"), Some("as1-rt-1"));
    assert_eq!(field(refresh, "resource"), Some(url.as_str()));
    drop(w);
    assert_eq!(user.seen().len(), 1, "no second authorization");
}

#[tokio::test]
async fn a_refused_token_rereads_the_metadata_and_a_new_authorization_server_gets_a_new_client() {
    let world = world();
    let as1 = authorization_server("as1", &world, None).await;
    let as2 = authorization_server("as2", &world, None).await;
    world.lock().unwrap().current_as = as1.clone();
    let url = format!("{}/mcp", resource_server(&world).await);
    let user = User::new(&world);
    let oauth = client(&user);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));

    // The server moves to as2: as1's tokens are refused with a 401.
    world.lock().unwrap().current_as = as2.clone();
    transport.send(request(2, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 2).await, Ok(json!({"ok": true})));
    let log = rs_log(&world);
    assert_eq!(
        log[2..],
        [
            ("tools/list".into(), Some("Bearer as1-tok-1".into()), 401),
            ("tools/list".into(), Some("Bearer as2-tok-2".into()), 200)
        ]
    );
    // Registered at as2; as1's client id never shown to it; as1 asked for no refresh.
    assert_eq!(registrations(&world, "as2"), 1);
    assert_eq!(grants(&world, "as1"), ["authorization_code"]);
    assert_eq!(grants(&world, "as2"), ["authorization_code"]);
    let w = world.lock().unwrap();
    for (name, path, form) in &w.as_log {
        if name == "as2" {
            assert!(
                !form.iter().any(|(_, v)| v.contains("as1-")),
                "{path}: {form:?}"
            );
        }
    }
    drop(w);
    let seen = user.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].issuer, as2);
    assert!(!seen[1].url.contains("as1-client"), "{}", seen[1].url);
    assert_eq!(user.asked()[1].1, "as2-client");
}

#[tokio::test]
async fn a_fresh_token_refused_again_is_rejected_after_one_flow() {
    let (world, _, url) = setup(None).await;
    world.lock().unwrap().refuse_all = true;
    let user = User::new(&world);
    let oauth = client(&user);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    let failure = outcome(&mut transport, 1).await.unwrap_err();
    assert!(
        matches!(the_error(&failure), Error::Rejected { status: 401, error: Some(e), .. } if e == "invalid_token"),
        "{failure:?}"
    );
    let TransportError::Auth(auth) = &failure else {
        unreachable!()
    };
    assert_eq!(auth.kind(), AuthFailureKind::Rejected);
    assert_eq!(user.seen().len(), 1);
    // The fresh token is not refreshed: one flow, then the verdict.
    assert_eq!(grants(&world, "as1"), ["authorization_code"]);
    assert_eq!(rs_log(&world).len(), 2);
}

#[tokio::test]
async fn a_refused_token_is_refreshed_once() {
    let (world, _, url) = setup(None).await;
    let user = User::new(&world);
    let oauth = client(&user);
    oauth.authorize_now(&url).await.unwrap().unwrap();
    world.lock().unwrap().refuse_all = true;
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    let failure = outcome(&mut transport, 1).await.unwrap_err();
    assert!(
        matches!(the_error(&failure), Error::Rejected { .. }),
        "{failure:?}"
    );
    assert_eq!(
        grants(&world, "as1"),
        ["authorization_code", "refresh_token"]
    );
    assert_eq!(user.seen().len(), 1);
    let sent: Vec<Option<String>> = rs_log(&world).into_iter().skip(1).map(|l| l.1).collect();
    assert_eq!(
        sent,
        [
            Some("Bearer as1-tok-1".to_owned()),
            Some("Bearer as1-tok-2".to_owned())
        ]
    );
}

#[tokio::test]
async fn a_refresh_token_refused_with_invalid_grant_runs_the_flow_once() {
    let (world, _, url) = setup(None).await;
    let user = User::new(&world);
    let oauth = client(&user);
    oauth.authorize_now(&url).await.unwrap().unwrap();
    {
        let mut w = world.lock().unwrap();
        w.revoked.insert("as1-rt-1".into());
        w.refused.insert("as1-tok-1".into());
    }
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    assert_eq!(
        grants(&world, "as1"),
        ["authorization_code", "refresh_token", "authorization_code"]
    );
    assert_eq!(user.seen().len(), 2);
    assert_eq!(
        rs_log(&world).last().unwrap().1.as_deref(),
        Some("Bearer as1-tok-2")
    );
}

#[tokio::test]
async fn step_up_asks_for_the_union() {
    let (world, _, url) = setup(None).await;
    world.lock().unwrap().need = Some("mcp:write".into());
    let user = User::new(&world);
    let oauth = client(&user);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/call")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    let scopes: Vec<String> = user.asked().into_iter().map(|a| a.0).collect();
    assert_eq!(scopes, ["mcp:basic", "mcp:basic mcp:write"]);
    let statuses: Vec<u16> = rs_log(&world).iter().map(|l| l.2).collect();
    assert_eq!(statuses, [401, 403, 200]);
}

#[tokio::test]
async fn step_ups_are_bounded_per_request() {
    let (world, _, url) = setup(None).await;
    world.lock().unwrap().escalate = 1;
    let user = User::new(&world);
    let oauth = client(&user);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/call")).unwrap();
    let failure = outcome(&mut transport, 1).await.unwrap_err();
    assert!(
        matches!(the_error(&failure), Error::InsufficientScope { required, .. } if required == &["mcp:x3"]),
        "{failure:?}"
    );
    let TransportError::Auth(auth) = &failure else {
        unreachable!()
    };
    assert_eq!(auth.kind(), AuthFailureKind::Forbidden);
    // The first authorization, then two step-ups (the default bound).
    let scopes: Vec<String> = user.asked().into_iter().map(|a| a.0).collect();
    assert_eq!(
        scopes,
        ["mcp:basic", "mcp:basic mcp:x1", "mcp:basic mcp:x1 mcp:x2"]
    );

    // The bound is a setting: none at all.
    let user = User::new(&world);
    let oauth = OAuth::authorization_code(user.clone())
        .redirect_uri("http://127.0.0.1:9/callback")
        .max_step_ups(0)
        .build()
        .unwrap();
    let mut unbounded = self::transport(&url, &oauth);
    unbounded.send(request(2, "tools/call")).unwrap();
    let failure = outcome(&mut unbounded, 2).await.unwrap_err();
    assert!(
        matches!(the_error(&failure), Error::InsufficientScope { .. }),
        "{failure:?}"
    );
    assert_eq!(user.seen().len(), 1, "the first authorization only");
}

#[tokio::test]
async fn no_step_up_for_scopes_already_asked_for() {
    // Conformance `auth/scope-retry-limit`: the 401 names mcp:admin, then every token gets a
    // 403 `insufficient_scope` for mcp:admin.
    let (world, _, url) = setup(None).await;
    {
        let mut w = world.lock().unwrap();
        w.challenge_scope = "mcp:admin".into();
        w.deny = Some("mcp:admin".into());
    }
    let user = User::new(&world);
    let oauth = client(&user);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/call")).unwrap();
    let failure = outcome(&mut transport, 1).await.unwrap_err();
    assert!(
        matches!(the_error(&failure), Error::InsufficientScope { required, requested }
            if required == &["mcp:admin"] && requested == &["mcp:admin"]),
        "{failure:?}"
    );
    assert_eq!(user.seen().len(), 1, "one authorization request in all");
    assert_eq!(rs_log(&world).len(), 2);
}

#[tokio::test]
async fn a_request_that_may_not_involve_the_user_never_starts_a_flow() {
    let (world, _, url) = setup(None).await;
    let user = User::new(&world);
    let oauth = client(&user);
    let uri: Uri = url.parse().unwrap();
    let delete = Method::DELETE;
    let outgoing = Outgoing::new(&delete, &uri, false, &[]);
    let credentials = oauth.credentials(&outgoing).await.unwrap();
    assert!(credentials.headers.is_empty());
    let mut headers = HeaderMap::new();
    headers.insert(
        "www-authenticate",
        HeaderValue::from_static(r#"Bearer error="invalid_token", scope="mcp:basic""#),
    );
    let reply = Reply::new(credentials.ticket, StatusCode::UNAUTHORIZED, &headers);
    let failure = oauth.refused(&outgoing, &reply).await.unwrap_err();
    assert_eq!(failure.kind(), AuthFailureKind::Rejected);
    assert!(matches!(
        failure.source().and_then(|s| s.downcast_ref::<Error>()),
        Some(Error::InteractionRequired { .. })
    ));
    assert!(user.seen().is_empty());
    assert!(grants(&world, "as1").is_empty());

    // With a token and a refresh token, a refused token is refreshed: no user involved.
    oauth.authorize_now(&url).await.unwrap().unwrap();
    world.lock().unwrap().refused.insert("as1-tok-1".into());
    let credentials = oauth.credentials(&outgoing).await.unwrap();
    assert_eq!(credentials.headers["authorization"], "Bearer as1-tok-1");
    let reply = Reply::new(credentials.ticket, StatusCode::UNAUTHORIZED, &headers);
    assert_eq!(oauth.refused(&outgoing, &reply).await, Ok(Retry::Send));
    let earlier = [credentials.ticket];
    let again = Outgoing::new(&delete, &uri, false, &earlier);
    let credentials = oauth.credentials(&again).await.unwrap();
    assert_eq!(credentials.headers["authorization"], "Bearer as1-tok-2");
    assert_eq!(user.seen().len(), 1, "only authorize_now's");
}

#[tokio::test]
async fn a_401_naming_neither_bearer_nor_dpop_is_given_up() {
    let user = User::new(&world());
    let oauth = client(&user);
    let uri: Uri = "http://127.0.0.1:9/mcp".parse().unwrap();
    let post = Method::POST;
    let outgoing = Outgoing::new(&post, &uri, true, &[]);
    for value in [Some(r#"Basic realm="mcp""#), Some("Negotiate"), None] {
        let credentials = oauth.credentials(&outgoing).await.unwrap();
        let mut headers = HeaderMap::new();
        if let Some(value) = value {
            headers.insert("www-authenticate", HeaderValue::from_static(value));
        }
        let reply = Reply::new(credentials.ticket, StatusCode::UNAUTHORIZED, &headers);
        assert_eq!(
            oauth.refused(&outgoing, &reply).await,
            Ok(Retry::GiveUp),
            "{value:?}"
        );
    }
    assert!(user.seen().is_empty());
}

#[tokio::test]
async fn a_dpop_nonce_is_kept_per_origin_and_retried_once() {
    let user = User::new(&world());
    let oauth = client(&user);
    let url = "http://127.0.0.1:9/mcp";
    let uri: Uri = url.parse().unwrap();
    let post = Method::POST;
    let mut headers = HeaderMap::new();
    headers.insert(
        "www-authenticate",
        HeaderValue::from_static(r#"DPoP error="use_dpop_nonce", algs="ES256""#),
    );
    headers.insert("dpop-nonce", HeaderValue::from_static("n-1"));
    let first = Outgoing::new(&post, &uri, true, &[]);
    let ticket = oauth.credentials(&first).await.unwrap().ticket;
    let reply = Reply::new(ticket, StatusCode::UNAUTHORIZED, &headers);
    assert_eq!(oauth.refused(&first, &reply).await, Ok(Retry::Send));
    assert_eq!(oauth.dpop_nonce(url).as_deref(), Some("n-1"));
    assert_eq!(
        oauth.dpop_nonce("http://127.0.0.1:9/other").as_deref(),
        Some("n-1")
    );
    assert_eq!(oauth.dpop_nonce("http://127.0.0.1:10/mcp"), None);

    // Asked again in the same request: no more retries.
    let earlier = [ticket];
    let second = Outgoing::new(&post, &uri, true, &earlier);
    let ticket = oauth.credentials(&second).await.unwrap().ticket;
    headers.insert("dpop-nonce", HeaderValue::from_static("n-2"));
    let reply = Reply::new(ticket, StatusCode::UNAUTHORIZED, &headers);
    let failure = oauth.refused(&second, &reply).await.unwrap_err();
    assert_eq!(failure.kind(), AuthFailureKind::Rejected);
    assert!(failure.message().contains("use_dpop_nonce"), "{failure}");
    assert_eq!(oauth.dpop_nonce(url).as_deref(), Some("n-2"));

    // Any response's nonce is kept.
    let mut ok = HeaderMap::new();
    ok.insert("dpop-nonce", HeaderValue::from_static("n-3"));
    oauth.observed(&first, &Reply::new(ticket, StatusCode::OK, &ok));
    assert_eq!(oauth.dpop_nonce(url).as_deref(), Some("n-3"));
    assert!(user.seen().is_empty());
}

#[tokio::test]
async fn authorize_now_says_when_no_authorization_is_needed() {
    let world = world();
    let paths = Arc::new(Mutex::new(Vec::new()));
    let seen_paths = paths.clone();
    let rs = server(move |_, seen| {
        seen_paths.lock().unwrap().push(seen.path.clone());
        if seen.path == "/mcp" {
            json_response(405, &json!({}))
        } else {
            json_response(404, &json!({}))
        }
    })
    .await;
    let user = User::new(&world);
    let oauth = client(&user);
    assert!(
        oauth
            .authorize_now(&format!("{rs}/mcp"))
            .await
            .unwrap()
            .is_none()
    );
    assert!(user.seen().is_empty());
    // The probe and the two well-known URIs: no authorization server is looked for.
    assert_eq!(
        *paths.lock().unwrap(),
        ["/mcp", PRM_PATH, "/.well-known/oauth-protected-resource"]
    );
}

#[tokio::test]
async fn without_a_handler_the_flow_is_a_setting_error() {
    let (world, _, url) = setup(None).await;
    let oauth = OAuth::builder()
        .redirect_uri("http://127.0.0.1:9/callback")
        .build()
        .unwrap();
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    let failure = outcome(&mut transport, 1).await.unwrap_err();
    assert!(
        matches!(
            the_error(&failure),
            Error::InvalidSetting {
                setting: "handler",
                ..
            }
        ),
        "{failure:?}"
    );
    let TransportError::Auth(auth) = &failure else {
        unreachable!()
    };
    assert_eq!(auth.kind(), AuthFailureKind::Misconfigured);
    assert_eq!(rs_log(&world).len(), 1);
}

#[test]
fn errors_map_to_failures_that_keep_them() {
    let failure = AuthFailure::from(Error::Declined {
        reason: "closed the window".into(),
    });
    assert_eq!(failure.kind(), AuthFailureKind::Declined);
    assert_eq!(
        failure.message(),
        "the authorization was declined: closed the window"
    );
    assert!(matches!(
        failure.source().and_then(|s| s.downcast_ref::<Error>()),
        Some(Error::Declined { .. })
    ));
    for (error, kind) in [
        (Error::StateMismatch, AuthFailureKind::Issuer),
        (
            Error::ResourceMismatch {
                published: "a".into(),
                url: "b".into(),
            },
            AuthFailureKind::Server,
        ),
        (
            Error::Timeout { phase: "token" },
            AuthFailureKind::Unreachable,
        ),
        (
            Error::NoClientIdentity {
                issuer: "a".into(),
                hint: "b".into(),
            },
            AuthFailureKind::Misconfigured,
        ),
        (
            Error::InsufficientScope {
                required: vec![],
                requested: vec![],
            },
            AuthFailureKind::Forbidden,
        ),
    ] {
        assert_eq!(AuthFailure::from(error).kind(), kind);
    }
}

#[test]
fn the_tables_are_bounded() {
    let mut table = Bounded::new(3);
    for i in 0..10u64 {
        table.insert(i, i);
    }
    assert_eq!(table.map.len(), 3);
    assert_eq!(table.order.len(), 3);
    assert!(table.get(&6).is_none());
    assert_eq!(table.get(&9), Some(&9));
    // Replacing a kept key does not evict.
    table.insert(9, 90);
    assert_eq!(table.map.len(), 3);
    assert_eq!(table.get(&7), Some(&7));
}

fn client_with(user: &Arc<User>, store: &Arc<MemoryStore>) -> OAuth {
    OAuth::authorization_code(user.clone())
        .redirect_uri("http://127.0.0.1:9/callback")
        .store(store.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn tokens_and_registrations_are_stored_and_a_later_client_uses_them() {
    let (world, as1, url) = setup(None).await;
    let store = Arc::new(MemoryStore::new());
    let user = User::new(&world);
    let first = client_with(&user, &store);
    let mut transport = transport(&url, &first);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    let keys = store.list().await.unwrap();
    assert_eq!(keys, [StoreKey::client(&as1), StoreKey::tokens(&as1, &url)]);
    let Some(Stored::Tokens(record)) = store.load(&StoreKey::tokens(&as1, &url)).await.unwrap()
    else {
        panic!("no tokens stored")
    };
    assert_eq!(record.access_token, "as1-tok-1");
    assert_eq!(record.refresh_token.as_deref(), Some("as1-rt-1"));
    assert_eq!(record.scopes_requested, ["mcp:basic"]);

    // A later run: the stored token goes with the first request.
    let later_user = User::new(&world);
    let later = client_with(&later_user, &store);
    let mut transport = self::transport(&url, &later);
    transport.send(request(2, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 2).await, Ok(json!({"ok": true})));
    assert_eq!(
        rs_log(&world).last().unwrap(),
        &(
            "tools/list".to_owned(),
            Some("Bearer as1-tok-1".to_owned()),
            200
        )
    );
    assert!(later_user.seen().is_empty());

    // Its token and refresh token dead: the flow runs with the stored registration.
    {
        let mut w = world.lock().unwrap();
        w.refused.insert("as1-tok-1".into());
        w.revoked.insert("as1-rt-1".into());
    }
    transport.send(request(3, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 3).await, Ok(json!({"ok": true})));
    assert_eq!(
        later_user.asked(),
        [("mcp:basic".into(), "as1-client".into())]
    );
    assert_eq!(
        registrations(&world, "as1"),
        1,
        "registered once, in the first run"
    );
    let Some(Stored::Tokens(record)) = store.load(&StoreKey::tokens(&as1, &url)).await.unwrap()
    else {
        panic!("no tokens stored")
    };
    assert_eq!(record.access_token, "as1-tok-2");
}

#[tokio::test]
async fn a_refresh_token_rotated_by_another_process_is_taken_from_the_store() {
    let (world, as1, url) = setup(None).await;
    let store = Arc::new(MemoryStore::new());
    let user = User::new(&world);
    let this = client_with(&user, &store);
    this.authorize_now(&url).await.unwrap().unwrap();
    // Another process with the same store gets new tokens; this one's are dead.
    let other = client_with(&User::new(&world), &store);
    other.authorize_now(&url).await.unwrap().unwrap();
    {
        let mut w = world.lock().unwrap();
        w.refused.insert("as1-tok-1".into());
        w.revoked.insert("as1-rt-1".into());
    }
    let mut transport = transport(&url, &this);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    assert_eq!(
        rs_log(&world).last().unwrap().1.as_deref(),
        Some("Bearer as1-tok-2")
    );
    assert_eq!(user.seen().len(), 1, "no new authorization");
    assert_eq!(
        grants(&world, "as1"),
        ["authorization_code", "authorization_code", "refresh_token"]
    );
    assert!(
        store
            .load(&StoreKey::tokens(&as1, &url))
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_move_to_another_authorization_server_drops_the_stored_tokens_only() {
    let world = world();
    let as1 = authorization_server("as1", &world, None).await;
    let as2 = authorization_server("as2", &world, None).await;
    world.lock().unwrap().current_as = as1.clone();
    let url = format!("{}/mcp", resource_server(&world).await);
    let store = Arc::new(MemoryStore::new());
    let oauth = client_with(&User::new(&world), &store);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    world.lock().unwrap().current_as = as2.clone();
    transport.send(request(2, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 2).await, Ok(json!({"ok": true})));
    let mut keys = store.list().await.unwrap();
    keys.sort();
    let mut expected = vec![
        StoreKey::client(&as1),
        StoreKey::client(&as2),
        StoreKey::tokens(&as2, &url),
    ];
    expected.sort();
    assert_eq!(keys, expected);
}

/// A store that counts the lists made of it.
#[derive(Debug, Default)]
struct Counting {
    inner: MemoryStore,
    lists: std::sync::atomic::AtomicUsize,
}

impl TokenStore for Counting {
    fn load<'a>(
        &'a self,
        key: &'a StoreKey,
    ) -> BoxFuture<'a, Result<Option<Stored>, crate::client::StoreError>> {
        self.inner.load(key)
    }

    fn save<'a>(
        &'a self,
        key: &'a StoreKey,
        value: &'a Stored,
    ) -> BoxFuture<'a, Result<(), crate::client::StoreError>> {
        self.inner.save(key, value)
    }

    fn remove<'a>(
        &'a self,
        key: &'a StoreKey,
    ) -> BoxFuture<'a, Result<(), crate::client::StoreError>> {
        self.inner.remove(key)
    }

    fn list<'a>(&'a self) -> BoxFuture<'a, Result<Vec<StoreKey>, crate::client::StoreError>> {
        self.lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.list()
    }
}

#[tokio::test]
async fn the_store_is_asked_once_per_url() {
    let store = Arc::new(Counting::default());
    let oauth = OAuth::authorization_code(User::new(&world()))
        .redirect_uri("http://127.0.0.1:9/callback")
        .store(store.clone())
        .build()
        .unwrap();
    let post = Method::POST;
    for url in [
        "http://127.0.0.1:9/mcp",
        "http://127.0.0.1:9/mcp",
        "http://127.0.0.1:9/other",
    ] {
        let uri: Uri = url.parse().unwrap();
        let credentials = oauth
            .credentials(&Outgoing::new(&post, &uri, true, &[]))
            .await
            .unwrap();
        assert!(credentials.headers.is_empty());
    }
    assert_eq!(store.lists.load(std::sync::atomic::Ordering::SeqCst), 2);
}

/// A client credentials client (`svc`, secret `s`) of `as1`, which takes `client_secret_basic`.
fn service(world: &Shared) -> OAuth {
    world.lock().unwrap().as_extra = json!({
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
    });
    OAuth::client_credentials(crate::client::Registered::unbound("svc").secret("s"))
        .as_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_grant_without_a_user_replaces_the_flow() {
    let (world, _, url) = setup(None).await;
    let oauth = service(&world);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    assert_eq!(grants(&world, "as1"), ["client_credentials"]);
    assert_eq!(registrations(&world, "as1"), 0);
    let log = world.lock().unwrap().as_log.clone();
    let (_, _, form) = log.iter().find(|(_, path, _)| path == "/token").unwrap();
    assert_eq!(field(form, "scope"), Some("mcp:basic"));
    assert_eq!(field(form, "resource"), Some(url.as_str()));
    assert_eq!(
        rs_log(&world),
        [
            ("tools/list".into(), None, 401),
            ("tools/list".into(), Some("Bearer as1-tok-1".into()), 200)
        ]
    );

    // A request that may not involve the user may run it: no user is involved.
    let other = service(&world);
    let uri: Uri = url.parse().unwrap();
    let delete = Method::DELETE;
    let outgoing = Outgoing::new(&delete, &uri, false, &[]);
    let ticket = other.credentials(&outgoing).await.unwrap().ticket;
    let mut headers = HeaderMap::new();
    headers.insert(
        "www-authenticate",
        HeaderValue::from_static(r#"Bearer error="invalid_token", scope="mcp:basic""#),
    );
    let reply = Reply::new(ticket, StatusCode::UNAUTHORIZED, &headers);
    assert_eq!(other.refused(&outgoing, &reply).await, Ok(Retry::Send));
    assert_eq!(grants(&world, "as1").len(), 2);
}

#[tokio::test]
async fn a_grant_without_a_user_runs_again_near_expiry() {
    // Tokens live 10 s: always within the 30 s margin, and no refresh token comes with them.
    let (world, _, url) = setup(Some(10)).await;
    let oauth = service(&world);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    // Got after the 401, then renewed before the send again.
    assert_eq!(grants(&world, "as1"), ["client_credentials"; 2]);
    assert_eq!(
        rs_log(&world)[1],
        ("tools/list".into(), Some("Bearer as1-tok-2".into()), 200)
    );
}

#[tokio::test]
async fn a_renewal_refused_is_not_tried_again_for_the_same_token() {
    let (world, _, url) = setup(Some(10)).await;
    let oauth = service(&world);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    assert_eq!(grants(&world, "as1").len(), 2);
    world.lock().unwrap().refuse_grant = true;
    for id in 2..=3 {
        transport.send(request(id, "tools/list")).unwrap();
        assert_eq!(outcome(&mut transport, id).await, Ok(json!({"ok": true})));
    }
    // One renewal refused (before request 2); the token went as it was, twice.
    assert_eq!(grants(&world, "as1").len(), 3);
    let log = rs_log(&world);
    assert_eq!(log[2].1.as_deref(), Some("Bearer as1-tok-2"));
    assert_eq!(log[3].1.as_deref(), Some("Bearer as1-tok-2"));
}

#[tokio::test]
async fn a_refused_grant_fails_the_request_and_is_not_retried() {
    let (world, _, url) = setup(None).await;
    world.lock().unwrap().refuse_grant = true;
    let oauth = service(&world);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    let failure = outcome(&mut transport, 1).await.unwrap_err();
    assert!(
        matches!(the_error(&failure), Error::TokenRefused { error: Some(e), .. } if e == "invalid_client"),
        "{failure:?}"
    );
    assert_eq!(grants(&world, "as1"), ["client_credentials"]);
    assert_eq!(rs_log(&world).len(), 1);
}

#[tokio::test]
async fn a_dpop_bound_token_goes_with_a_fresh_proof_on_every_send_and_nonces_are_followed() {
    let (world, _, url) = setup(None).await;
    {
        let mut w = world.lock().unwrap();
        w.dpop = true;
        w.nonces = (Some("as-nonce".into()), Some("rs-nonce".into()));
        w.as_extra = json!({"dpop_signing_alg_values_supported": ["ES256"]});
    }
    let user = User::new(&world);
    let key = crate::client::DpopKey::generate().unwrap();
    let thumbprint = key.thumbprint().to_owned();
    let oauth = OAuth::authorization_code(user.clone())
        .redirect_uri("http://127.0.0.1:9/callback")
        .as_timeout(Duration::from_secs(2))
        .dpop(key)
        .build()
        .unwrap();
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    transport.send(request(2, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 2).await, Ok(json!({"ok": true})));

    let dpop = Some("DPoP as1-tok-1".to_owned());
    assert_eq!(
        rs_log(&world),
        [
            ("tools/list".into(), None, 401),
            // The first proof has no nonce: the server asks for one, once.
            ("tools/list".into(), dpop.clone(), 401),
            ("tools/list".into(), dpop.clone(), 200),
            ("tools/list".into(), dpop, 200),
        ]
    );
    // The token endpoint's nonce retry: two code exchanges, the second with its nonce.
    assert_eq!(grants(&world, "as1"), ["authorization_code"; 2]);
    {
        let w = world.lock().unwrap();
        assert_eq!(w.as_proofs.len(), 2);
        assert!(w.as_proofs[0].get("nonce").is_none());
        assert_eq!(w.as_proofs[1]["nonce"], "as-nonce");
        // At the resource server: every proof fresh, the latest nonce once the server gave it.
        assert_eq!(w.rs_proofs.len(), 3);
        assert!(w.rs_proofs[0].get("nonce").is_none());
        assert_eq!(w.rs_proofs[1]["nonce"], "rs-nonce");
        assert_eq!(w.rs_proofs[2]["nonce"], "rs-nonce");
        let jtis: HashSet<&str> = w
            .rs_proofs
            .iter()
            .chain(&w.as_proofs)
            .map(|c| c["jti"].as_str().unwrap())
            .collect();
        assert_eq!(jtis.len(), 5, "a new jti in every proof");
        assert_eq!(oauth.dpop_nonce(&url).as_deref(), Some("rs-nonce"));
    }
    // The proofs carry the client's key.
    let uri: Uri = url.parse().unwrap();
    let post = Method::POST;
    let credentials = oauth
        .credentials(&Outgoing::new(&post, &uri, true, &[]))
        .await
        .unwrap();
    let proof = credentials.headers["dpop"].to_str().unwrap();
    let header = decode_part(proof, 0);
    assert_eq!(header["typ"], "dpop+jwt");
    let jwk: jsonwebtoken::jwk::Jwk = serde_json::from_value(header["jwk"].clone()).unwrap();
    assert_eq!(
        jwk.thumbprint(jsonwebtoken::jwk::ThumbprintHash::SHA256)
            .unwrap(),
        thumbprint
    );
}

#[tokio::test]
async fn a_dpop_bound_token_without_a_key_fails_the_request() {
    let (world, _, url) = setup(None).await;
    let user = User::new(&world);
    let oauth = client(&user);
    let uri: Uri = url.parse().unwrap();
    let entry = oauth.inner.session.entry_for(&uri, true).unwrap();
    let discovery = oauth.discover(&url, &Challenges::default()).await.unwrap();
    let tokens = Tokens {
        access_token: "t".into(),
        token_type: TokenType::Dpop,
        expires_at: None,
        refresh_token: None,
        scopes: Vec::new(),
        issuer: discovery.auth_server.issuer.clone(),
        resource: url.clone(),
        dpop_key: None,
    };
    entry.install(tokens, Vec::new(), discovery);
    let post = Method::POST;
    let failure = oauth
        .credentials(&Outgoing::new(&post, &uri, true, &[]))
        .await
        .unwrap_err();
    assert!(failure.message().contains("no DPoP key"), "{failure}");
}

// Logout (revoke.rs).

fn revocations(world: &Shared) -> Vec<(Form, Option<String>)> {
    world.lock().unwrap().revocations.clone()
}

fn pairs(pairs: &[(&str, &str)]) -> Form {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// A `revocation_endpoint` (and more) in `as1`'s metadata.
fn offer_revocation(world: &Shared, as1: &str, more: Value) {
    let mut extra = json!({"revocation_endpoint": format!("{as1}/revoke")});
    if let Value::Object(more) = more {
        for (k, v) in more {
            extra[k] = v;
        }
    }
    world.lock().unwrap().as_extra = extra;
}

/// A store holding `as1`'s tokens for `resource` (and a refresh token when given).
async fn store_with(as1: &str, resource: &str, refresh: Option<&str>) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let mut record = TokenRecord::new("stored-at", "Bearer");
    record.refresh_token = refresh.map(str::to_owned);
    store
        .save(&StoreKey::tokens(as1, resource), &Stored::Tokens(record))
        .await
        .unwrap();
    store
}

fn failure(revocation: &Revocation) -> &Error {
    match revocation {
        Revocation::Failed(error) => error,
        other => panic!("not a failure: {other:?}"),
    }
}

#[tokio::test]
async fn logout_revokes_the_refresh_then_the_access_token_and_forgets_them() {
    let (world, as1, url) = setup(None).await;
    offer_revocation(&world, &as1, Value::Null);
    let store = Arc::new(MemoryStore::new());
    let user = User::new(&world);
    let oauth = client_with(&user, &store);
    let mut transport = transport(&url, &oauth);
    transport.send(request(1, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));

    let logout = oauth.logout().await.unwrap();
    assert_eq!(
        revocations(&world),
        [
            (
                pairs(&[
                    ("token", "as1-rt-1"),
                    ("token_type_hint", "refresh_token"),
                    ("client_id", "as1-client")
                ]),
                None
            ),
            (
                pairs(&[
                    ("token", "as1-tok-1"),
                    ("token_type_hint", "access_token"),
                    ("client_id", "as1-client")
                ]),
                None
            ),
        ]
    );
    assert_eq!(logout.tokens.len(), 1);
    let done = &logout.tokens[0];
    assert_eq!(
        (done.issuer.as_str(), done.resource.as_str()),
        (as1.as_str(), url.as_str())
    );
    assert!(done.refresh_token.is_revoked() && done.access_token.is_revoked());
    assert!(logout.revoked_any());
    // The tokens are gone from the store; the registration stays.
    assert_eq!(store.list().await.unwrap(), [StoreKey::client(&as1)]);

    // And from memory: the next request goes without a token and a new login follows, with the
    // same registration.
    transport.send(request(2, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 2).await, Ok(json!({"ok": true})));
    let log = rs_log(&world);
    assert_eq!(log[log.len() - 2], ("tools/list".into(), None, 401));
    assert_eq!(
        log[log.len() - 1],
        ("tools/list".into(), Some("Bearer as1-tok-2".into()), 200)
    );
    assert_eq!(user.seen().len(), 2);
    assert_eq!(registrations(&world, "as1"), 1);
    assert_eq!(grants(&world, "as1"), ["authorization_code"; 2]);

    // The new login's tokens are logged out in turn; then nothing is left.
    assert_eq!(oauth.logout().await.unwrap().tokens.len(), 1);
    assert_eq!(oauth.logout().await.unwrap().tokens.len(), 0);
}

#[tokio::test]
async fn logout_authenticates_as_the_token_requests_do() {
    let pem = DpopKey::generate().unwrap().to_pkcs8_pem();
    let methods = [
        TokenAuthMethod::ClientSecretBasic,
        TokenAuthMethod::ClientSecretPost,
        TokenAuthMethod::PrivateKeyJwt,
    ];
    for method in methods {
        let (world, as1, url) = setup(None).await;
        offer_revocation(
            &world,
            &as1,
            json!({"token_endpoint_auth_methods_supported":
                ["client_secret_basic", "client_secret_post", "private_key_jwt"]}),
        );
        let store = store_with(&as1, &url, None).await;
        let mut client = Registered::new(&as1, "pre").method(method);
        client = match method {
            TokenAuthMethod::PrivateKeyJwt => {
                client.private_key(SigningKey::from_pkcs8_pem(&pem).unwrap())
            }
            _ => client.secret("s3cret:x"),
        };
        let oauth = OAuth::builder()
            .client(client)
            .store(store.clone())
            .as_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let logout = oauth.logout_of(&url).await.unwrap();
        assert!(matches!(
            logout.tokens[0].refresh_token,
            Revocation::NoToken
        ));
        assert!(logout.tokens[0].access_token.is_revoked(), "{method:?}");
        let seen = revocations(&world);
        assert_eq!(seen.len(), 1, "no refresh token: one request");
        let (form, authorization) = &seen[0];
        let token = [("token", "stored-at"), ("token_type_hint", "access_token")];
        match method {
            TokenAuthMethod::ClientSecretBasic => {
                assert_eq!(form, &pairs(&token));
                // RFC 6749 section 2.3.1: the secret form-encoded first (`:` is `%3A`).
                let expected = format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode("pre:s3cret%3Ax")
                );
                assert_eq!(authorization.as_deref(), Some(expected.as_str()));
            }
            TokenAuthMethod::ClientSecretPost => {
                let mut expected = token.to_vec();
                expected.extend([("client_id", "pre"), ("client_secret", "s3cret:x")]);
                assert_eq!(form, &pairs(&expected));
                assert_eq!(authorization, &None);
            }
            _ => {
                assert_eq!(&form[..2], &pairs(&token)[..]);
                assert_eq!(field(form, "client_id"), Some("pre"));
                assert_eq!(
                    field(form, "client_assertion_type"),
                    Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
                );
                let claims = decode_part(field(form, "client_assertion").unwrap(), 1);
                assert_eq!(
                    (claims["iss"].as_str(), claims["sub"].as_str()),
                    (Some("pre"), Some("pre"))
                );
                assert_eq!(claims["aud"], as1.as_str());
                assert_eq!(authorization, &None);
            }
        }
        assert!(store.list().await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn without_a_revocation_endpoint_the_tokens_are_forgotten_and_nothing_is_revoked() {
    let (world, as1, url) = setup(None).await;
    let store = store_with(&as1, &url, Some("stored-rt")).await;
    let other = "http://127.0.0.1:9/other";
    store
        .save(
            &StoreKey::tokens(&as1, other),
            &Stored::Tokens(TokenRecord::new("other-at", "Bearer")),
        )
        .await
        .unwrap();
    let user = User::new(&world);
    let oauth = client_with(&user, &store);
    let logout = oauth.logout_of(&url).await.unwrap();
    assert_eq!(logout.tokens.len(), 1, "only the tokens covering the URL");
    let done = &logout.tokens[0];
    assert!(matches!(done.refresh_token, Revocation::NotOffered));
    assert!(matches!(done.access_token, Revocation::NotOffered));
    assert!(!logout.revoked_any());
    assert!(revocations(&world).is_empty());
    assert_eq!(
        store.list().await.unwrap(),
        [StoreKey::tokens(&as1, other)],
        "the other resource's tokens stay"
    );
    assert_eq!(
        done.access_token.to_string(),
        "not revoked (the authorization server offers no revocation)"
    );
}

#[tokio::test]
async fn a_failing_revocation_endpoint_still_forgets_the_tokens() {
    let (world, as1, url) = setup(None).await;
    offer_revocation(&world, &as1, Value::Null);
    world.lock().unwrap().revocation_status = Some(503);
    let store = Arc::new(MemoryStore::new());
    let user = User::new(&world);
    let oauth = client_with(&user, &store);
    oauth.authorize_now(&url).await.unwrap().unwrap();
    let logout = oauth.logout().await.unwrap();
    let done = &logout.tokens[0];
    for revocation in [&done.refresh_token, &done.access_token] {
        let Error::RevocationRefused {
            status,
            error,
            description,
            ..
        } = failure(revocation)
        else {
            panic!("{revocation:?}");
        };
        assert_eq!(
            (*status, error.as_deref(), description.as_deref()),
            (503, Some("temporarily_unavailable"), Some("down"))
        );
    }
    assert_eq!(revocations(&world).len(), 2, "each token tried once");
    assert_eq!(store.list().await.unwrap(), [StoreKey::client(&as1)]);

    // A client that does not know its registration there cannot revoke: it registers no new
    // client for it, and still forgets the tokens.
    let store = store_with(&as1, &url, Some("stored-rt")).await;
    world.lock().unwrap().revocation_status = None;
    let stranger = client_with(&user, &store);
    let logout = stranger.logout().await.unwrap();
    let done = &logout.tokens[0];
    assert!(matches!(
        failure(&done.refresh_token),
        Error::NoClientIdentity { .. }
    ));
    assert!(matches!(
        failure(&done.access_token),
        Error::NoClientIdentity { .. }
    ));
    assert_eq!(registrations(&world, "as1"), 1, "no registration for it");
    assert_eq!(revocations(&world).len(), 2, "no request");
    assert!(store.list().await.unwrap().is_empty());
}

/// An authorization server without a network: its metadata from memory, a revocation
/// endpoint that never answers.
#[derive(Debug)]
struct Silent;

const SILENT: &str = "https://as.example.com";

impl crate::fetch::Fetch for Silent {
    fn get<'a>(
        &'a self,
        url: &'a str,
    ) -> BoxFuture<'a, Result<crate::fetch::FetchResponse, crate::fetch::FetchError>> {
        let body = if url == format!("{SILENT}/.well-known/oauth-authorization-server") {
            json!({
                "issuer": SILENT,
                "authorization_endpoint": format!("{SILENT}/authorize"),
                "token_endpoint": format!("{SILENT}/token"),
                "revocation_endpoint": format!("{SILENT}/revoke"),
                "token_endpoint_auth_methods_supported": ["none"],
                "code_challenge_methods_supported": ["S256"],
            })
            .to_string()
        } else {
            return Box::pin(async {
                Ok(crate::fetch::FetchResponse::new(StatusCode::NOT_FOUND, ""))
            });
        };
        Box::pin(async move { Ok(crate::fetch::FetchResponse::new(StatusCode::OK, body)) })
    }

    fn post_form<'a>(
        &'a self,
        _url: &'a str,
        _form: &'a [(&'a str, &'a str)],
        _basic: Option<(&'a str, &'a str)>,
    ) -> BoxFuture<'a, Result<crate::fetch::FetchResponse, crate::fetch::FetchError>> {
        Box::pin(std::future::pending())
    }
}

#[tokio::test(start_paused = true)]
async fn a_revocation_endpoint_that_never_answers_gets_5_s_per_token() {
    let store = store_with(SILENT, "https://mcp.example.com/mcp", Some("rt")).await;
    let oauth = OAuth::builder()
        .client(Registered::new(SILENT, "pre"))
        .store(store.clone())
        .fetch(Arc::new(Silent))
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let logout = oauth.logout().await.unwrap();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= REVOCATION_TIMEOUT * 2
            && elapsed < REVOCATION_TIMEOUT * 2 + Duration::from_millis(100),
        "{elapsed:?}"
    );
    let done = &logout.tokens[0];
    for revocation in [&done.refresh_token, &done.access_token] {
        let Error::Unreachable { url, source } = failure(revocation) else {
            panic!("{revocation:?}");
        };
        assert_eq!(url, &format!("{SILENT}/revoke"));
        assert!(
            source.to_string().contains("no answer within 5 s"),
            "{source}"
        );
    }
    assert!(store.list().await.unwrap().is_empty());
}

// DPoP-bound tokens at rest.

#[tokio::test]
async fn a_dpop_bound_refresh_token_stays_usable_after_a_restart_with_a_file_store() {
    let (world, as1, url) = setup(None).await;
    {
        let mut w = world.lock().unwrap();
        w.dpop = true;
        w.as_extra = json!({"dpop_signing_alg_values_supported": ["ES256"]});
    }
    let dir = std::env::temp_dir().join(format!(
        "modelctx-dpop-restart-{}-{}",
        std::process::id(),
        as1.rsplit(':').next().unwrap()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let with_key = |user: &Arc<User>, key: DpopKey| {
        OAuth::authorization_code(user.clone())
            .redirect_uri("http://127.0.0.1:9/callback")
            .as_timeout(Duration::from_secs(2))
            .store(Arc::new(FileStore::new(&dir).unwrap()))
            .dpop(key)
            .build()
            .unwrap()
    };
    let key = DpopKey::generate().unwrap();
    let thumbprint = key.thumbprint().to_owned();
    let user = User::new(&world);
    {
        let first = with_key(&user, key);
        let mut transport = transport(&url, &first);
        transport.send(request(1, "tools/list")).unwrap();
        assert_eq!(outcome(&mut transport, 1).await, Ok(json!({"ok": true})));
    }
    // The record keeps the key the tokens are bound to (the private key: the file is 0600).
    let store = FileStore::new(&dir).unwrap();
    let Some(Stored::Tokens(record)) = store.load(&StoreKey::tokens(&as1, &url)).await.unwrap()
    else {
        panic!("no tokens stored")
    };
    assert_eq!(record.token_type, "DPoP");
    let stored_key = DpopKey::from_pkcs8_der(record.dpop_key.as_deref().unwrap()).unwrap();
    assert_eq!(stored_key.thumbprint(), thumbprint);

    // A restart: a new client, with a key of its own, on the same directory.
    let later_user = User::new(&world);
    let later = with_key(&later_user, DpopKey::generate().unwrap());
    let mut transport = self::transport(&url, &later);
    transport.send(request(2, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 2).await, Ok(json!({"ok": true})));
    assert_eq!(
        rs_log(&world).last().unwrap(),
        &(
            "tools/list".to_owned(),
            Some("DPoP as1-tok-1".to_owned()),
            200
        ),
        "the stored token, proven with the key it is bound to"
    );
    // Its access token refused: the refresh token is proven with the stored key too.
    world.lock().unwrap().refused.insert("as1-tok-1".into());
    transport.send(request(3, "tools/list")).unwrap();
    assert_eq!(outcome(&mut transport, 3).await, Ok(json!({"ok": true})));
    assert_eq!(
        rs_log(&world).last().unwrap(),
        &(
            "tools/list".to_owned(),
            Some("DPoP as1-tok-2".to_owned()),
            200
        )
    );
    assert_eq!(
        grants(&world, "as1"),
        ["authorization_code", "refresh_token"]
    );
    assert!(later_user.seen().is_empty(), "no new login");
    // The refreshed tokens are stored with the same key.
    let Some(Stored::Tokens(record)) = store.load(&StoreKey::tokens(&as1, &url)).await.unwrap()
    else {
        panic!("no tokens stored")
    };
    assert_eq!(record.access_token, "as1-tok-2");
    let again = DpopKey::from_pkcs8_der(record.dpop_key.as_deref().unwrap()).unwrap();
    assert_eq!(again.thumbprint(), thumbprint);
    let _ = std::fs::remove_dir_all(&dir);
}
