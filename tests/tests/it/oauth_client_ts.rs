//! modelctx's OAuth client (modelctx-auth, feature `client`, through
//! `modelctx_client::ClientBuilder::auth`) against the TypeScript SDK's protected server
//! (`@modelcontextprotocol/server` 2.4.0: `requireBearerAuth`, its protected resource metadata
//! and `createMcpHandler`; `tests/ts/protected-server.mjs`), with oidc-provider as the
//! authorization server (`tests/ts/oidc-as.mjs --forms`, whose forms [`FormUser`] posts), in both
//! eras: the SDK's 401 challenge, its protected resource metadata, dynamic registration,
//! authorization code + PKCE with the `resource` parameter, the JWT the server verifies with
//! jose, the tool call; then a tool whose `scopeChallenge` needs `files:write`: the SDK's 403
//! `insufficient_scope` and the client's step-up with the union of the scopes.
//!
//! Like the other tests with a Node peer, each test is skipped (saying so) without Node unless
//! `MODELCTX_REQUIRE_NODE` is set (`cargo xtask ci` sets it).

use std::sync::Arc;

use modelctx_client::auth::{Authorizer, MemoryStore, OAuth, StoreKey, Stored, TokenStore};
use modelctx_client::{Client, model};
use modelctx_tests::http::within;
use modelctx_tests::node;
use modelctx_tests::oidc::{As, FormUser, USER, decode_unverified};
use modelctx_types::ProtocolVersion;
use serde_json::json;

/// The redirect URI the client registers; nothing listens there ([`FormUser`] hands back the
/// redirect itself).
const REDIRECT_URI: &str = "http://127.0.0.1/callback";

/// The legacy era (`initialize`, served by the SDK's stateless fallback) and the modern one.
const ERAS: [ProtocolVersion; 2] = [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28];

/// The AS, the TypeScript server and its resource URI.
struct Setup {
    authorization_server: As,
    resource: String,
    _server: node::Listening,
}

/// Starts the AS (with forms), then the TypeScript server for it (its port, and so the resource,
/// is known once it listens: the AS is told then). `None`: Node is missing (skipped).
async fn setup() -> Option<Setup> {
    // A placeholder resource: the AS needs one to start; the client always names its own.
    let authorization_server = As::start_forms(&["http://127.0.0.1:9/unused"]).await?;
    let server =
        node::spawn_listening("protected-server.mjs", &[authorization_server.issuer()]).await?;
    let resource = format!("http://127.0.0.1:{}/mcp", server.at);
    authorization_server.add_resource(&resource).await;
    Some(Setup {
        authorization_server,
        resource,
        _server: server,
    })
}

/// Connects to `resource` in `era`, authorized by the authorization code flow `user` plays.
async fn connect(
    resource: &str,
    era: ProtocolVersion,
    user: &Arc<FormUser>,
    store: &Arc<MemoryStore>,
) -> Client {
    let oauth = OAuth::authorization_code(user.clone())
        .redirect_uri(REDIRECT_URI)
        .client_name("modelctx e2e against the TypeScript server")
        .store(store.clone())
        .build()
        .expect("the OAuth settings");
    within(
        "connect",
        Client::builder("e2e", "1")
            .protocol_version(era)
            .auth(Arc::new(oauth) as Arc<dyn Authorizer>)
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

/// The access token stored for `resource`.
async fn access_token(store: &MemoryStore, issuer: &str, resource: &str) -> String {
    match store.load(&StoreKey::tokens(issuer, resource)).await {
        Ok(Some(Stored::Tokens(record))) => record.access_token,
        other => panic!("no tokens for {resource} in the store: {other:?}"),
    }
}

#[tokio::test]
async fn the_full_flow_against_the_typescript_server_in_both_eras() {
    let Some(setup) = setup().await else {
        return;
    };
    let issuer = setup.authorization_server.issuer();
    for era in ERAS {
        let user = FormUser::new(&setup.authorization_server);
        let store = Arc::new(MemoryStore::new());
        let client = connect(&setup.resource, era, &user, &store).await;
        assert_eq!(client.protocol_version(), Some(era));
        // The SDK's challenge names `mcp` and its metadata; the client asks for it (and
        // `offline_access`, which the AS offers), the JWT carries `mcp` for this resource.
        assert_eq!(
            call(&client, "whoami").await.expect("whoami"),
            format!("{USER} mcp"),
            "{era:?}"
        );
        assert_eq!((user.logins(), user.consents()), (1, 1), "{era:?}");
        assert_eq!(
            user.asked(),
            [vec!["mcp".to_owned(), "offline_access".to_owned()]],
            "{era:?}"
        );
        let token = access_token(&store, issuer, &setup.resource).await;
        let (_, claims) = decode_unverified(&token);
        assert_eq!(claims["aud"], json!(setup.resource), "{era:?}");
        assert_eq!(claims["iss"], json!(issuer), "{era:?}");
        // Registered dynamically: the registration is kept per issuer.
        assert!(matches!(
            store.load(&StoreKey::client(issuer)).await,
            Ok(Some(Stored::Client(_)))
        ));
        // Later calls go with the token: no second login.
        assert_eq!(
            call(&client, "whoami").await.expect("whoami again"),
            format!("{USER} mcp")
        );
        assert_eq!(user.logins(), 1, "{era:?}");
        client.close().await;
    }
}

#[tokio::test]
async fn a_step_up_for_the_typescript_server_s_scope_challenge_in_both_eras() {
    let Some(setup) = setup().await else {
        return;
    };
    for era in ERAS {
        let user = FormUser::new(&setup.authorization_server);
        let store = Arc::new(MemoryStore::new());
        let client = connect(&setup.resource, era, &user, &store).await;
        assert_eq!(
            call(&client, "whoami").await.expect("whoami"),
            format!("{USER} mcp")
        );
        // `write`'s scope challenge: 403 `insufficient_scope`, `scope="mcp files:write"`; the
        // client authorizes again for what it had and what is asked, and the call goes through.
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
        assert_eq!(user.logins(), 2, "{era:?}");
        // The new token serves the other tool too.
        assert_eq!(
            call(&client, "whoami").await.expect("whoami after"),
            format!("{USER} files:write,mcp")
        );
        assert_eq!(user.logins(), 2, "{era:?}");
        client.close().await;
    }
}
