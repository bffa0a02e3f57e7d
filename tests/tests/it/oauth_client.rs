//! modelctx's OAuth client (modelctx-auth, feature `client`, through
//! `modelctx_client::ClientBuilder::auth`) end to end against a real authorization server,
//! oidc-provider 9.13.3 (`tests/ts/oidc-as.mjs --forms`: its login and consent forms, which
//! [`FormUser`] posts as a user would), and a modelctx server guarded by modelctx-auth, in both
//! eras: the first 401, the protected resource metadata, the AS metadata, dynamic registration
//! (a public native client, a loopback redirect URI), authorization code + PKCE with the
//! `resource` parameter, the token, the tool call; then refresh before expiry without a second
//! login, refresh token rotation, step-up with the union of scopes, DPoP-bound tokens with the
//! nonces of both the AS and the server, `offline_access`, and the AS's pre-registered native
//! client with modelctx's `LoopbackRedirect` on a random port (the user's browser GETs the
//! redirect on it).
//!
//! And logout: `OAuth::logout_of` revokes the refresh token at oidc-provider's revocation
//! endpoint (RFC 7009; its JWT access tokens it cannot revoke, and says so), forgets the tokens,
//! and the next call logs in again. And a DPoP-bound login kept in a `FileStore` survives a
//! restart: the next run (with a key of its own) proves and refreshes the stored tokens with the
//! key they are bound to (oidc-provider binds a public client's refresh token to it).
//!
//! Like the other tests with a Node peer, each test is skipped (saying so) without Node unless
//! `MODELCTX_REQUIRE_NODE` is set (`cargo xtask ci` sets it).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use modelctx_client::auth::{
    DpopKey, Fetch, FileStore, LoopbackRedirect, MemoryStore, OAuth, Registered, StoreKey, Stored,
    TokenRecord, TokenStore,
};
use modelctx_client::{Client, model};
use modelctx_http::server::RunningServer;
use modelctx_server::auth::{Auth, Dpop};
use modelctx_server::{Context, HttpConfig, NoArgs, Server, Tool};
use modelctx_tests::http::within;
use modelctx_tests::oidc::{As, CLI_CLIENT, CLI_REDIRECT, FormUser, TtlFetch, USER};
use modelctx_types::ProtocolVersion;
use serde_json::json;

/// The redirect URI the client registers; nothing listens there ([`FormUser`] hands back the
/// redirect itself).
const REDIRECT_URI: &str = "http://127.0.0.1/callback";

/// The protocol versions of the two eras: the legacy one (sessions, `initialize`) and the
/// modern one (2026-07-28, no session).
const ERAS: [ProtocolVersion; 2] = [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28];

/// Who called, as the handler sees it: the subject and the granted scopes (sorted).
fn caller(context: &Context) -> String {
    match context.auth() {
        Some(grant) => {
            let mut scopes = grant.scopes.clone();
            scopes.sort();
            format!("{} {}", grant.subject, scopes.join(","))
        }
        None => "nobody".to_owned(),
    }
}

async fn whoami(context: Context, _: NoArgs) -> String {
    caller(&context)
}

async fn write(context: Context, _: NoArgs) -> String {
    format!("written by {}", caller(&context))
}

/// A protected server, its AS, and the resource's URI.
struct Setup {
    authorization_server: As,
    resource: String,
    running: RunningServer,
}

/// The AS (with forms) and a server with tools `whoami` and `write` (which needs
/// `files:write`), guarded by modelctx-auth advertising only `mcp`; `dpop` makes the server
/// require DPoP-bound tokens and nonces of its own. `None`: Node is missing (skipped).
async fn setup(dpop: bool) -> Option<Setup> {
    // Bound first: the resource's URI names the port, and the AS must know it when it starts.
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .await
        .expect("a port");
    let addr: SocketAddr = listener.local_addr().expect("its address");
    let resource = format!("http://{addr}/mcp");
    let authorization_server = As::start_forms(&[&resource]).await?;
    let mut auth = Auth::resource(&resource).issuer(authorization_server.issuer());
    if dpop {
        auth = auth.dpop(Dpop::Required).dpop_nonces([7; 32]);
    }
    let guard = auth.scopes_supported(["mcp"]).build().expect("the guard");
    let running = Server::builder("protected", "1")
        .tool(Tool::new("whoami", whoami))
        .tool(Tool::new("write", write).scopes(["files:write"]))
        .auth(guard)
        .build()
        .serve_http_on(listener, HttpConfig::default())
        .await
        .expect("the server listens");
    Some(Setup {
        authorization_server,
        resource,
        running,
    })
}

/// The OAuth client of these tests: the authorization code flow played by `user`, dynamic
/// registration with [`REDIRECT_URI`], tokens in `store`.
fn oauth(user: &Arc<FormUser>, store: &Arc<MemoryStore>) -> modelctx_client::auth::OAuthBuilder {
    OAuth::authorization_code(user.clone())
        .redirect_uri(REDIRECT_URI)
        .client_name("modelctx e2e")
        .store(store.clone())
}

/// Connects to `resource` in `era` with `oauth`.
async fn connect(resource: &str, era: ProtocolVersion, oauth: OAuth) -> Client {
    within(
        "connect",
        Client::builder("e2e", "1")
            .protocol_version(era)
            .auth(Arc::new(oauth) as Arc<dyn modelctx_client::auth::Authorizer>)
            .connect_http(resource),
    )
    .await
    .unwrap_or_else(|e| panic!("connect in {era:?}: {e}"))
}

/// Calls `tool` and returns its text.
async fn call(client: &Client, tool: &str) -> Result<String, modelctx_client::Error> {
    let result = within(tool, client.call_tool(tool, json!({}))).await?;
    Ok(result
        .content
        .iter()
        .map(|block| match block {
            model::ContentBlock::TextContent(t) => t.text.clone(),
            other => panic!("{tool} answered {other:?}"),
        })
        .collect())
}

/// The one token record in `store`, with the resource it is for.
async fn tokens(store: &MemoryStore) -> (String, TokenRecord) {
    let keys = store.list().await.expect("the store lists");
    let mut found = Vec::new();
    for key in keys {
        if let StoreKey::Tokens { resource, .. } = &key
            && let Some(Stored::Tokens(record)) = store.load(&key).await.expect("the store loads")
        {
            found.push((resource.clone(), record));
        }
    }
    assert_eq!(found.len(), 1, "one token record: {found:?}");
    found.remove(0)
}

/// The client id dynamic registration gave, from `store`.
async fn registered_client_id(store: &MemoryStore, issuer: &str) -> String {
    match store.load(&StoreKey::client(issuer)).await {
        Ok(Some(Stored::Client(record))) => record.client_id,
        other => panic!("no registration of {issuer} in the store: {other:?}"),
    }
}

#[tokio::test]
async fn the_full_flow_registers_logs_in_and_calls_in_both_eras() {
    let Some(setup) = setup(false).await else {
        return;
    };
    for era in ERAS {
        let user = FormUser::new(&setup.authorization_server);
        let store = Arc::new(MemoryStore::new());
        let oauth = oauth(&user, &store).build().expect("the OAuth settings");
        let client = connect(&setup.resource, era, oauth).await;
        assert_eq!(client.protocol_version(), Some(era));
        assert_eq!(
            call(&client, "whoami").await.expect("whoami"),
            format!("{USER} mcp"),
            "{era:?}"
        );
        // One user, one login, one consent (a native client is asked every time), for the
        // scope of the server's challenge; the token is a JWT for the resource, from this AS.
        assert_eq!((user.logins(), user.consents()), (1, 1), "{era:?}");
        let (resource, record) = tokens(&store).await;
        assert_eq!(resource, setup.resource, "{era:?}");
        assert_eq!(record.token_type, "Bearer", "{era:?}");
        let (_, claims) = modelctx_tests::oidc::decode_unverified(&record.access_token);
        assert_eq!(claims["aud"], json!(setup.resource), "{era:?}");
        assert_eq!(
            claims["iss"],
            json!(setup.authorization_server.issuer()),
            "{era:?}"
        );
        assert_eq!(claims["sub"], json!(USER), "{era:?}");
        // A dynamically registered client, not one of the AS's static ones.
        let client_id = registered_client_id(&store, setup.authorization_server.issuer()).await;
        assert_eq!(claims["client_id"], json!(client_id), "{era:?}");
        assert!(!["app", "cli", "svc"].contains(&client_id.as_str()));
        // Later calls use the token: no more login.
        assert_eq!(
            call(&client, "whoami").await.expect("whoami again"),
            format!("{USER} mcp")
        );
        assert_eq!(user.logins(), 1, "{era:?}");
        client.close().await;
    }
    setup.running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn offline_access_brings_a_refresh_token() {
    let Some(setup) = setup(false).await else {
        return;
    };
    let user = FormUser::new(&setup.authorization_server);
    let store = Arc::new(MemoryStore::new());
    let client = connect(
        &setup.resource,
        ProtocolVersion::V2026_07_28,
        oauth(&user, &store).build().expect("the OAuth settings"),
    )
    .await;
    call(&client, "whoami").await.expect("whoami");
    // The AS lists `offline_access`, so the client asks for it (with the challenge's `mcp`);
    // oidc-provider issues a refresh token only for it (and only to a client registered with the
    // `refresh_token` grant, which registration asks for).
    assert_eq!(
        user.asked(),
        [vec!["mcp".to_owned(), "offline_access".to_owned()]]
    );
    let (_, record) = tokens(&store).await;
    assert!(record.refresh_token.is_some(), "{record:?}");

    // Without it, no refresh token.
    let user = FormUser::new(&setup.authorization_server);
    let store = Arc::new(MemoryStore::new());
    let client = connect(
        &setup.resource,
        ProtocolVersion::V2026_07_28,
        oauth(&user, &store)
            .offline_access(false)
            .build()
            .expect("the OAuth settings"),
    )
    .await;
    call(&client, "whoami").await.expect("whoami");
    assert_eq!(user.asked(), [vec!["mcp".to_owned()]]);
    let (_, record) = tokens(&store).await;
    assert!(record.refresh_token.is_none(), "{record:?}");
    setup.running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_token_about_to_expire_is_refreshed_without_a_second_login_in_both_eras() {
    let Some(setup) = setup(false).await else {
        return;
    };
    for era in ERAS {
        let user = FormUser::new(&setup.authorization_server);
        let store = Arc::new(MemoryStore::new());
        // Access tokens of 2 s: within the client's 30 s margin at once, so each request
        // renews the token first.
        let fetch = TtlFetch::new(Duration::from_secs(2));
        let oauth = oauth(&user, &store)
            .fetch(fetch.clone() as Arc<dyn Fetch>)
            .build()
            .expect("the OAuth settings");
        let client = connect(&setup.resource, era, oauth).await;
        // Within the token's 2 s the server would take it as it is: a new token after the
        // calls is the client's renewal before expiry, not an answer to a 401.
        let (_, before) = tokens(&store).await;
        let requests = fetch.token_requests();
        for _ in 0..3 {
            assert_eq!(
                call(&client, "whoami").await.expect("whoami"),
                format!("{USER} mcp"),
                "{era:?}"
            );
        }
        let (_, after) = tokens(&store).await;
        assert!(fetch.token_requests() > requests, "{era:?}: no refresh");
        assert_ne!(before.access_token, after.access_token, "{era:?}");
        assert!(after.refresh_token.is_some(), "{era:?}");
        // Past the lifetime of every token it had: still no login.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let requests = fetch.token_requests();
        assert_eq!(
            call(&client, "whoami").await.expect("whoami after expiry"),
            format!("{USER} mcp"),
            "{era:?}"
        );
        assert!(fetch.token_requests() > requests, "{era:?}: no refresh");
        assert_eq!(user.logins(), 1, "{era:?}: refreshed, not logged in again");
        client.close().await;
    }
    setup.running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_rotated_refresh_token_replaces_the_old_one_which_the_as_refuses() {
    let Some(setup) = setup(false).await else {
        return;
    };
    let issuer = setup.authorization_server.issuer();
    let user = FormUser::new(&setup.authorization_server);
    let store = Arc::new(MemoryStore::new());
    let oauth = oauth(&user, &store)
        .fetch(TtlFetch::new(Duration::from_secs(2)) as Arc<dyn Fetch>)
        .build()
        .expect("the OAuth settings");
    let client = connect(&setup.resource, ProtocolVersion::V2026_07_28, oauth).await;
    let (_, before) = tokens(&store).await;
    let old = before.refresh_token.expect("a refresh token");
    // The call renews the token first; oidc-provider rotates a public client's refresh token
    // on every use.
    call(&client, "whoami").await.expect("whoami");
    let (_, after) = tokens(&store).await;
    let new = after
        .refresh_token
        .expect("a refresh token after the refresh");
    assert_ne!(old, new, "the store holds the rotated refresh token");
    assert_eq!(user.logins(), 1);
    // The old one is spent.
    let client_id = registered_client_id(&store, issuer).await;
    let refused = setup
        .authorization_server
        .refresh(&client_id, &old, &setup.resource)
        .await
        .expect_err("the old refresh token is refused");
    assert_eq!(refused.error, "invalid_grant", "{refused:?}");
    client.close().await;
    setup.running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_step_up_asks_for_the_union_of_scopes_in_both_eras() {
    let Some(setup) = setup(false).await else {
        return;
    };
    for era in ERAS {
        let user = FormUser::new(&setup.authorization_server);
        let store = Arc::new(MemoryStore::new());
        let oauth = oauth(&user, &store).build().expect("the OAuth settings");
        let client = connect(&setup.resource, era, oauth).await;
        assert_eq!(
            call(&client, "whoami").await.expect("whoami"),
            format!("{USER} mcp")
        );
        // `write` needs `files:write`: the server's 403 names it, the client authorizes again
        // for what it had and what is needed, and the call goes through.
        assert_eq!(
            call(&client, "write")
                .await
                .expect("write after the step-up"),
            format!("written by {USER} files:write,mcp"),
            "{era:?}"
        );
        let asked = user.asked();
        assert_eq!(asked.len(), 2, "{era:?}: {asked:?}");
        let mut second = asked[1].clone();
        second.sort();
        assert_eq!(second, ["files:write", "mcp", "offline_access"], "{era:?}");
        let (_, record) = tokens(&store).await;
        let mut granted = record.scopes_granted.clone();
        granted.sort();
        assert!(
            granted.contains(&"files:write".to_owned()) && granted.contains(&"mcp".to_owned()),
            "{era:?}: {granted:?}"
        );
        // And the earlier tool still works with the new token.
        assert_eq!(
            call(&client, "whoami").await.expect("whoami after"),
            format!("{USER} files:write,mcp")
        );
        assert_eq!(user.logins(), 2, "{era:?}");
        client.close().await;
    }
    setup.running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn dpop_bound_tokens_with_the_nonces_of_the_as_and_the_server_in_both_eras() {
    let Some(setup) = setup(true).await else {
        return;
    };
    for era in ERAS {
        let user = FormUser::new(&setup.authorization_server);
        let store = Arc::new(MemoryStore::new());
        let oauth = oauth(&user, &store)
            .dpop(DpopKey::generate().expect("a DPoP key"))
            .build()
            .expect("the OAuth settings");
        // The AS answers the first token request `use_dpop_nonce`, the server the first
        // request with the token: both are retried with the nonce given.
        let client = connect(&setup.resource, era, oauth).await;
        assert_eq!(
            call(&client, "whoami").await.expect("whoami"),
            format!("{USER} mcp"),
            "{era:?}"
        );
        let (_, record) = tokens(&store).await;
        assert_eq!(record.token_type, "DPoP", "{era:?}");
        let (_, claims) = modelctx_tests::oidc::decode_unverified(&record.access_token);
        assert!(claims["cnf"]["jkt"].is_string(), "{era:?}: {claims}");
        assert_eq!(user.logins(), 1, "{era:?}");
        client.close().await;
    }
    setup.running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn logout_revokes_the_refresh_token_and_the_next_call_logs_in_again() {
    let Some(setup) = setup(false).await else {
        return;
    };
    let issuer = setup.authorization_server.issuer();
    for era in ERAS {
        let user = FormUser::new(&setup.authorization_server);
        let store = Arc::new(MemoryStore::new());
        let oauth = oauth(&user, &store).build().expect("the OAuth settings");
        // Logged in before connecting (as `mcx login` does): the tokens, to refresh later.
        let login = within("login", oauth.authorize_now(&setup.resource))
            .await
            .expect("the login")
            .expect("the server asks for authorization");
        assert!(
            login.refresh_token.is_some(),
            "offline_access: a refresh token"
        );
        let client = connect(&setup.resource, era, oauth.clone()).await;
        assert_eq!(
            call(&client, "whoami").await.expect("whoami"),
            format!("{USER} mcp")
        );
        assert_eq!(user.logins(), 1, "{era:?}");

        let logout = within("logout", oauth.logout_of(&setup.resource))
            .await
            .expect("the logout");
        assert_eq!(logout.tokens.len(), 1, "{era:?}: {logout:?}");
        let done = &logout.tokens[0];
        assert_eq!(
            (done.issuer.as_str(), done.resource.as_str()),
            (issuer, setup.resource.as_str())
        );
        assert!(
            done.refresh_token.is_revoked(),
            "{era:?}: {}",
            done.refresh_token
        );
        // oidc-provider cannot revoke its JWT access tokens (`rejectStructuredTokens`): it says
        // so, and the client reports it (the token stays valid until it expires).
        assert!(!done.access_token.is_revoked(), "{era:?}");
        assert!(
            done.access_token
                .to_string()
                .contains("unsupported_token_type"),
            "{era:?}: {}",
            done.access_token
        );
        // Forgotten: only the registration is left in the store.
        assert_eq!(
            store.list().await.expect("the store lists"),
            [StoreKey::client(issuer)],
            "{era:?}"
        );

        // The next refresh of the old tokens is refused: the grant is gone.
        let discovery = within(
            "discovery",
            oauth.discover(&setup.resource, &Default::default()),
        )
        .await
        .expect("discovery");
        let refused = within("refresh", oauth.refresh(&discovery, &login))
            .await
            .expect_err("the revoked refresh token is refused");
        assert!(
            refused.to_string().contains("invalid_grant"),
            "{era:?}: {refused}"
        );

        // The next call goes without a token: the server's 401 brings one new login.
        assert_eq!(
            call(&client, "whoami")
                .await
                .expect("whoami after the logout"),
            format!("{USER} mcp"),
            "{era:?}"
        );
        assert_eq!(user.logins(), 2, "{era:?}: one new login");
        let (_, record) = tokens(&store).await;
        assert_ne!(record.access_token, login.access_token, "{era:?}");
        client.close().await;
    }
    setup.running.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_dpop_bound_login_survives_a_restart_with_a_file_store() {
    let Some(setup) = setup(true).await else {
        return;
    };
    let dir = std::env::temp_dir().join(format!(
        "modelctx-oauth-restart-{}-{}",
        std::process::id(),
        setup.resource.rsplit(':').next().expect("a port")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let era = ProtocolVersion::V2026_07_28;
    // Tokens of 2 s: the restarted client renews them first, with the refresh token, which
    // oidc-provider binds to the key of a public client (RFC 9449 section 5).
    let client_of = |user: &Arc<FormUser>, key: DpopKey, fetch: &Arc<TtlFetch>| {
        OAuth::authorization_code(user.clone())
            .redirect_uri(REDIRECT_URI)
            .client_name("modelctx e2e")
            .store(Arc::new(FileStore::new(&dir).expect("the store")))
            .fetch(fetch.clone() as Arc<dyn Fetch>)
            .dpop(key)
            .build()
            .expect("the OAuth settings")
    };
    let key = DpopKey::generate().expect("a DPoP key");
    let thumbprint = key.thumbprint().to_owned();
    let user = FormUser::new(&setup.authorization_server);
    let fetch = TtlFetch::new(Duration::from_secs(2));
    let first = connect(&setup.resource, era, client_of(&user, key, &fetch)).await;
    assert_eq!(
        call(&first, "whoami").await.expect("whoami"),
        format!("{USER} mcp")
    );
    first.close().await;
    assert_eq!(user.logins(), 1);

    // A new process: a client with a key of its own, on the same directory.
    let later_user = FormUser::new(&setup.authorization_server);
    let fetch = TtlFetch::new(Duration::from_secs(2));
    let requests = fetch.token_requests();
    let later = client_of(
        &later_user,
        DpopKey::generate().expect("another DPoP key"),
        &fetch,
    );
    let client = connect(&setup.resource, era, later).await;
    assert_eq!(
        call(&client, "whoami")
            .await
            .expect("whoami after the restart"),
        format!("{USER} mcp")
    );
    assert_eq!(later_user.logins(), 0, "the stored login is used");
    assert!(
        fetch.token_requests() > requests,
        "renewed with its refresh token"
    );
    let store = FileStore::new(&dir).expect("the store");
    let keys = store.list().await.expect("the store lists");
    let token_key = keys
        .iter()
        .find(|k| matches!(k, StoreKey::Tokens { .. }))
        .expect("tokens stored");
    let Ok(Some(Stored::Tokens(record))) = store.load(token_key).await else {
        panic!("no tokens in the store")
    };
    assert!(
        record.dpop_key.is_some(),
        "the key is stored with the tokens"
    );
    let (_, claims) = modelctx_tests::oidc::decode_unverified(&record.access_token);
    assert_eq!(
        claims["cnf"]["jkt"],
        json!(thumbprint),
        "the renewed token is bound to the first run's key"
    );
    client.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    setup.running.shutdown(Duration::from_secs(1)).await;
}

/// Scenario 2: the AS's pre-registered native client `cli` (registered with
/// `http://127.0.0.1/callback`) with modelctx's [`LoopbackRedirect`] on a random port, which
/// oidc-provider accepts for a native client's loopback redirect (RFC 8252 section 7.3): the
/// user signs in and their "browser" GETs the final redirect on the listener, which hands it to
/// the flow. No dynamic registration.
#[tokio::test]
async fn the_pre_registered_cli_client_with_a_loopback_listener_in_both_eras() {
    let Some(setup) = setup(false).await else {
        return;
    };
    let issuer = setup.authorization_server.issuer().to_owned();
    for era in ERAS {
        let user = FormUser::new(&setup.authorization_server);
        let store = Arc::new(MemoryStore::new());
        let loopback = LoopbackRedirect::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let port = loopback.local_addr().port();
        let redirect_uri = loopback.redirect_uri();
        assert_eq!(redirect_uri, format!("http://127.0.0.1:{port}/callback"));
        assert_ne!(redirect_uri, CLI_REDIRECT, "a port of its own");
        // What the user's browser got from the listener, and the URLs shown.
        let (pages, mut got) = tokio::sync::mpsc::unbounded_channel();
        let shown = Arc::new(std::sync::Mutex::new(Vec::new()));
        let handler = loopback.handler({
            let (user, shown) = (user.clone(), shown.clone());
            move |request| {
                shown
                    .lock()
                    .expect("not poisoned")
                    .push(request.url.clone());
                let (user, url, pages) = (user.clone(), request.url.clone(), pages.clone());
                tokio::spawn(async move {
                    let _ = pages.send(user.browse(&url).await);
                });
            }
        });
        let oauth = OAuth::authorization_code(Arc::new(handler))
            .redirect_uri(redirect_uri.clone())
            .client(Registered::new(&issuer, CLI_CLIENT))
            .store(store.clone())
            .build()
            .expect("the OAuth settings");
        let client = connect(&setup.resource, era, oauth).await;
        assert_eq!(
            call(&client, "whoami").await.expect("whoami"),
            format!("{USER} mcp"),
            "{era:?}"
        );
        // The browser's GET of the redirect was answered by the listener's page.
        let page = within("the browser", got.recv()).await.expect("a page");
        assert_eq!(page, Ok(200), "{era:?}");
        let shown = shown.lock().expect("not poisoned").clone();
        assert_eq!(shown.len(), 1, "{era:?}: {shown:?}");
        assert!(
            shown[0].contains(&format!("client_id={CLI_CLIENT}&")),
            "{era:?}: {shown:?}"
        );
        assert!(
            shown[0].contains(&format!("127.0.0.1%3A{port}%2Fcallback")),
            "{era:?}: the listener's port: {shown:?}"
        );
        assert_eq!((user.logins(), user.consents()), (1, 1), "{era:?}");
        // The token is the pre-registered client's, for the resource; nothing was registered.
        let (resource, record) = tokens(&store).await;
        assert_eq!(resource, setup.resource, "{era:?}");
        let (_, claims) = modelctx_tests::oidc::decode_unverified(&record.access_token);
        assert_eq!(claims["client_id"], json!(CLI_CLIENT), "{era:?}");
        assert_eq!(claims["aud"], json!(setup.resource), "{era:?}");
        assert_eq!(
            store.load(&StoreKey::client(&issuer)).await.expect("loads"),
            None,
            "{era:?}: no dynamic registration"
        );
        client.close().await;
    }
    setup.running.shutdown(Duration::from_secs(1)).await;
}
