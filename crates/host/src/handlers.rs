//! The client of one server: its builder with the host's handlers (sampling through the policy
//! to the application's model, elicitation, roots) and its OAuth.
//!
//! The host core calls [`client_builder`] for every connection it makes (first and again after
//! a reconnect). What the builder gets:
//! - sampling, when the application gave a model ([`HostBuilder::on_sampling`]): each request
//!   goes to [`Policy::approve_sampling`] (which may edit it), then to the model with the asking
//!   server's name and the edited request; a refusal is the client's [`InputError`] with the
//!   policy's reason (a legacy server gets it as a JSON-RPC error, code -32603, the reason as
//!   the message; in the modern era the call that needed the input fails in the client);
//! - elicitation, form and URL mode, when the application gave a handler
//!   ([`HostBuilder::on_elicitation`]): [`Policy::approve_elicitation`] first, likewise;
//! - roots: the application's handler when it gave one ([`HostBuilder::on_roots`]), called
//!   with the server's name and the roots of the host's tables for it; else, when the server
//!   has its own ([`HostBuilder::server_roots`]) or the host has shared ones
//!   ([`HostBuilder::roots`]) at connection time, answered from the host's table as it is
//!   when asked, so a change made since is seen (the host then calls the client's
//!   `roots_changed`);
//! - OAuth ([`HostBuilder::oauth`]) for an HTTP server whose entry sets no `Authorization`
//!   header: the host's one [`OAuth`](modelctx_client::auth::OAuth) client, whose token store
//!   keeps each server's tokens under its URL (per authorization server and resource);
//! - its connection timeout: the entry's `timeout`, else [`HostBuilder::connect_timeout`].
//!
//! [`HostBuilder::on_sampling`]: crate::HostBuilder::on_sampling
//! [`HostBuilder::on_elicitation`]: crate::HostBuilder::on_elicitation
//! [`HostBuilder::server_roots`]: crate::HostBuilder::server_roots
//! [`HostBuilder::on_roots`]: crate::HostBuilder::on_roots
//! [`HostBuilder::roots`]: crate::HostBuilder::roots
//! [`HostBuilder::oauth`]: crate::HostBuilder::oauth
//! [`HostBuilder::connect_timeout`]: crate::HostBuilder::connect_timeout
//! [`Policy::approve_sampling`]: crate::Policy::approve_sampling
//! [`Policy::approve_elicitation`]: crate::Policy::approve_elicitation

use std::sync::{Arc, PoisonError};

use modelctx_client::{ClientBuilder, InputError, model};

use crate::config::{ServerConfig, TransportConfig};
use crate::host::Shared;
use crate::policy::{Decision, ElicitationRequest, SamplingRequest};

/// The builder of the client of `server`, with the host's handlers and settings in `shared`.
pub(crate) fn client_builder(server: &ServerConfig, shared: &Arc<Shared>) -> ClientBuilder {
    let mut builder = modelctx_client::Client::builder(&shared.client_name, &shared.client_version)
        .connect_timeout(Some(server.timeout.unwrap_or(shared.connect_timeout)));
    if let Some(sampler) = &shared.sampler {
        let (sampler, policy, name) = (sampler.clone(), shared.policy.clone(), server.name.clone());
        builder = builder.on_sampling(move |params| {
            let (sampler, policy, name) = (sampler.clone(), policy.clone(), name.clone());
            async move {
                let mut request = SamplingRequest::new(name, params);
                match policy.approve_sampling(&mut request).await {
                    Decision::Allow => sampler(request.server, request.params).await,
                    Decision::Deny { reason } => Err(InputError::new(reason)),
                }
            }
        });
    }
    if let Some(elicitor) = &shared.elicitor {
        let (elicitor, policy, name) =
            (elicitor.clone(), shared.policy.clone(), server.name.clone());
        builder = builder
            .on_elicitation(move |elicitation| {
                let (elicitor, policy, name) = (elicitor.clone(), policy.clone(), name.clone());
                async move {
                    let request = ElicitationRequest::new(name, elicitation);
                    match policy.approve_elicitation(&request).await {
                        Decision::Allow => elicitor(request.server, request.elicitation).await,
                        Decision::Deny { reason } => Err(InputError::new(reason)),
                    }
                }
            })
            .url_elicitation();
    }
    if let Some(router) = &shared.roots_router {
        let (router, shared, name) = (router.clone(), shared.clone(), server.name.clone());
        builder = builder.on_roots(move || router(name.clone(), roots_of(&name, &shared)));
    } else if roots_of(&server.name, shared).is_some() {
        let (shared, name) = (shared.clone(), server.name.clone());
        builder = builder.on_roots(move || {
            let roots = roots_of(&name, &shared).unwrap_or_default();
            std::future::ready(Ok(roots))
        });
    }
    if let (Some(oauth), TransportConfig::Http { headers, .. }) = (&shared.oauth, &server.transport)
        && !headers
            .keys()
            .any(|name| name.eq_ignore_ascii_case("authorization"))
    {
        builder =
            builder.auth(Arc::new(oauth.clone()) as Arc<dyn modelctx_client::auth::Authorizer>);
    }
    builder
}

/// The roots `server` sees now: its own, else the shared ones; `None` when there are neither.
fn roots_of(server: &str, shared: &Shared) -> Option<Vec<model::Root>> {
    let own = shared
        .roots_per_server
        .read()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(roots) = own.get(server) {
        return Some(roots.clone());
    }
    drop(own);
    shared
        .roots
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    use modelctx_client::auth::{MemoryStore, OAuth, StoreKey, Stored, TokenRecord, TokenStore};
    use modelctx_client::{
        Client, ConnectError, Elicitation, Elicited, Era, Error, ProtocolVersion,
    };
    use modelctx_server::{Context, NoArgs, Server, Tool, sampling_request};
    use modelctx_types::JsonObject;
    use serde_json::json;

    use super::*;
    use crate::Host;
    use crate::config::HostConfig;
    use crate::policy::{Rules, SamplingRule};

    /// What a server's input request came to, as its tool says it.
    fn refused(error: modelctx_server::InputError) -> String {
        match error {
            modelctx_server::InputError::Refused(e) => {
                format!("refused {}: {}", e.code.0, e.message)
            }
            other => format!("failed: {other}"),
        }
    }

    async fn sample(context: Context, _: NoArgs) -> String {
        let params = model::CreateMessageRequestParams {
            system_prompt: Some("You are a poet.".into()),
            ..sampling_request("A haiku, please", 500)
        };
        match context.sample(params).await {
            Ok(answer) => match answer.content {
                model::CreateMessageResultContent::TextContent(text) => text.text,
                other => format!("{other:?}"),
            },
            Err(e) => refused(e),
        }
    }

    async fn elicit(context: Context, _: NoArgs) -> String {
        let schema = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        match context.elicit("Your name?", schema).await {
            Ok(answer) => format!("{:?} {:?}", answer.action, answer.content),
            Err(e) => refused(e),
        }
    }

    async fn elicit_url(context: Context, _: NoArgs) -> String {
        match context
            .elicit_url("Sign in", "https://example.com/sign-in", "e-1")
            .await
        {
            Ok(answer) => format!("{:?}", answer.action),
            Err(e) => refused(e),
        }
    }

    async fn roots(context: Context, _: NoArgs) -> String {
        match context.list_roots().await {
            Ok(roots) => {
                let uris: Vec<_> = roots.roots.iter().map(|r| r.uri.as_str()).collect();
                uris.join(",")
            }
            Err(e) => refused(e),
        }
    }

    /// A modelctx server over HTTP on loopback whose tools ask the client for input; its URL.
    async fn serve() -> (String, modelctx_server::RunningServer) {
        let server = Server::builder("asking", "1.0.0")
            .tool(Tool::new("sample", sample))
            .tool(Tool::new("elicit", elicit))
            .tool(Tool::new("elicit_url", elicit_url))
            .tool(Tool::new("roots", roots))
            .build();
        let running = server
            .serve_http("127.0.0.1:0", modelctx_server::HttpConfig::default())
            .await
            .unwrap();
        (format!("http://{}/mcp", running.local_addr()), running)
    }

    /// The client of the host's server `name` at `url`, in the legacy era (2025-11-25) or the
    /// one the probe finds.
    async fn connect(shared: &Arc<Shared>, name: &str, url: &str, legacy: bool) -> Client {
        let mut builder = client_builder(&ServerConfig::http(name, url), shared);
        if legacy {
            builder = builder.protocol_version(ProtocolVersion::V2025_11_25);
        }
        let client = builder.connect_http(url).await.unwrap();
        assert_eq!(client.era() == Some(Era::Modern), !legacy);
        client
    }

    /// The text of a tool's result.
    async fn call(client: &Client, tool: &str) -> Result<String, Error> {
        let result = client.call_tool(tool, JsonObject::new()).await?;
        match result.content.first() {
            Some(model::ContentBlock::TextContent(text)) => Ok(text.text.clone()),
            other => panic!("{other:?}"),
        }
    }

    fn answer(text: String) -> model::CreateMessageResult {
        model::CreateMessageResult {
            meta: None,
            content: model::CreateMessageResultContent::TextContent(model::TextContent {
                meta: None,
                annotations: None,
                text,
            }),
            model: "test-model".into(),
            role: model::Role::Assistant,
            stop_reason: Some("endTurn".into()),
            extra: JsonObject::new(),
        }
    }

    type Seen<T> = Arc<Mutex<Vec<(String, T)>>>;

    #[tokio::test]
    async fn sampling_goes_through_the_policy_to_the_model_with_the_server_name() {
        let (url, running) = serve().await;
        for legacy in [true, false] {
            let seen: Seen<model::CreateMessageRequestParams> = Arc::default();
            let model = seen.clone();
            let rules = Rules::new()
                .sampling(
                    SamplingRule::allow()
                        .max_tokens(100)
                        .system_prompt_prefix("Be brief."),
                )
                .server_sampling("beta", SamplingRule::deny());
            let shared = Arc::new(
                Host::builder(HostConfig::default())
                    .policy(rules)
                    .on_sampling(move |server, params| {
                        model.lock().unwrap().push((server.clone(), params));
                        std::future::ready(Ok(answer(format!("the model answered {server}"))))
                    })
                    .into_shared(),
            );
            let alpha = connect(&shared, "alpha", &url, legacy).await;
            assert_eq!(
                call(&alpha, "sample").await.unwrap(),
                "the model answered alpha"
            );
            {
                let seen = seen.lock().unwrap();
                assert_eq!(seen.len(), 1);
                let (server, params) = &seen[0];
                assert_eq!(server, "alpha");
                assert_eq!(params.max_tokens, 100, "capped by the policy");
                assert_eq!(
                    params.system_prompt.as_deref(),
                    Some("Be brief.\n\nYou are a poet."),
                    "prefixed by the policy"
                );
            }
            let beta = connect(&shared, "beta", &url, legacy).await;
            let expected = "the policy denies sampling requests of server \"beta\"";
            assert_refused(&beta, "sample", "sampling/createMessage", expected, legacy).await;
            assert_eq!(
                seen.lock().unwrap().len(),
                1,
                "the model never saw beta's request"
            );
            alpha.close().await;
            beta.close().await;
        }
        running.shutdown(Duration::from_secs(1)).await;
    }

    /// Calls `tool`, whose request `method` the policy refuses for `reason`: a legacy server
    /// gets a JSON-RPC error with the reason (which the tool says); in the modern era the call
    /// that needed the input fails in the client.
    async fn assert_refused(client: &Client, tool: &str, method: &str, reason: &str, legacy: bool) {
        if legacy {
            let text = call(client, tool).await.unwrap();
            assert_eq!(text, format!("refused -32603: {reason}"));
        } else {
            match call(client, tool).await {
                Err(Error::Input {
                    method: refused,
                    reason: why,
                }) => {
                    assert_eq!(refused, method);
                    assert_eq!(why, reason);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn without_a_model_sampling_is_not_declared() {
        let (url, running) = serve().await;
        let shared = Arc::new(Host::builder(HostConfig::default()).into_shared());
        let client = connect(&shared, "alpha", &url, true).await;
        let text = call(&client, "sample").await.unwrap();
        assert!(text.contains("does not support sampling"), "{text}");
        client.close().await;
        running.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn elicitation_goes_through_the_policy_to_the_handler_with_the_server_name() {
        let (url, running) = serve().await;
        for legacy in [true, false] {
            let seen: Seen<Elicitation> = Arc::default();
            let handler = seen.clone();
            let shared = Arc::new(
                Host::builder(HostConfig::default())
                    .policy(Rules::new().server_elicitation("beta", false))
                    .on_elicitation(move |server, elicitation| {
                        let url = matches!(elicitation, Elicitation::Url { .. });
                        handler.lock().unwrap().push((server, elicitation));
                        let mut content = JsonObject::new();
                        content.insert("name".into(), "Ada".into());
                        std::future::ready(Ok(if url {
                            Elicited::accepted()
                        } else {
                            Elicited::accept(content)
                        }))
                    })
                    .into_shared(),
            );
            let alpha = connect(&shared, "alpha", &url, legacy).await;
            let text = call(&alpha, "elicit").await.unwrap();
            assert!(text.starts_with("Accept") && text.contains("Ada"), "{text}");
            // URL mode is declared too.
            assert_eq!(call(&alpha, "elicit_url").await.unwrap(), "Accept");
            {
                let seen = seen.lock().unwrap();
                assert_eq!(seen.len(), 2);
                assert_eq!(seen[0].0, "alpha");
                assert!(
                    matches!(&seen[0].1, Elicitation::Form { message, .. } if message == "Your name?")
                );
                assert!(
                    matches!(&seen[1].1, Elicitation::Url { url, .. } if url == "https://example.com/sign-in")
                );
            }
            let beta = connect(&shared, "beta", &url, legacy).await;
            let expected = "the policy denies elicitations of server \"beta\"";
            assert_refused(&beta, "elicit", "elicitation/create", expected, legacy).await;
            assert_eq!(
                seen.lock().unwrap().len(),
                2,
                "the handler never saw beta's"
            );
            alpha.close().await;
            beta.close().await;
        }
        running.shutdown(Duration::from_secs(1)).await;
    }

    fn root(uri: &str) -> model::Root {
        model::Root {
            meta: None,
            name: None,
            uri: uri.into(),
        }
    }

    #[tokio::test]
    async fn the_applications_roots_handler_answers_with_the_server_name_and_the_tables_roots() {
        let (url, running) = serve().await;
        for legacy in [true, false] {
            let shared = Arc::new(
                Host::builder(HostConfig::default())
                    .server_roots("alpha", vec![root("file:///alpha")])
                    .on_roots(|server, roots: Option<Vec<model::Root>>| {
                        let mut roots = roots.unwrap_or_default();
                        roots.push(root(&format!("file:///{server}-app")));
                        std::future::ready(Ok(roots))
                    })
                    .into_shared(),
            );
            let alpha = connect(&shared, "alpha", &url, legacy).await;
            let beta = connect(&shared, "beta", &url, legacy).await;
            assert_eq!(
                call(&alpha, "roots").await.unwrap(),
                "file:///alpha,file:///alpha-app"
            );
            // Without roots of its own or shared ones, it still declares roots and asks.
            assert_eq!(call(&beta, "roots").await.unwrap(), "file:///beta-app");
            alpha.close().await;
            beta.close().await;
        }
        running.shutdown(Duration::from_secs(1)).await;
    }

    #[tokio::test]
    async fn a_server_sees_its_own_roots_else_the_shared_ones_as_they_are_now() {
        let (url, running) = serve().await;
        for legacy in [true, false] {
            let shared = Arc::new(
                Host::builder(HostConfig::default())
                    .roots(vec![root("file:///shared")])
                    .server_roots("alpha", vec![root("file:///alpha"), root("file:///b")])
                    .into_shared(),
            );
            let alpha = connect(&shared, "alpha", &url, legacy).await;
            let beta = connect(&shared, "beta", &url, legacy).await;
            assert_eq!(
                call(&alpha, "roots").await.unwrap(),
                "file:///alpha,file:///b"
            );
            assert_eq!(call(&beta, "roots").await.unwrap(), "file:///shared");
            // A change is seen by the next roots/list (the host tells the servers).
            *shared.roots.write().unwrap() = Some(vec![root("file:///new")]);
            beta.roots_changed().await.unwrap();
            assert_eq!(call(&beta, "roots").await.unwrap(), "file:///new");
            assert_eq!(
                call(&alpha, "roots").await.unwrap(),
                "file:///alpha,file:///b"
            );
            shared
                .roots_per_server
                .write()
                .unwrap()
                .insert("beta".into(), vec![root("file:///beta")]);
            assert_eq!(call(&beta, "roots").await.unwrap(), "file:///beta");
            alpha.close().await;
            beta.close().await;
        }
        // Without roots, none are declared.
        let shared = Arc::new(
            Host::builder(HostConfig::default())
                .server_roots("alpha", vec![root("file:///alpha")])
                .into_shared(),
        );
        let gamma = connect(&shared, "gamma", &url, true).await;
        let text = call(&gamma, "roots").await.unwrap();
        assert!(text.contains("does not support roots"), "{text}");
        gamma.close().await;
        running.shutdown(Duration::from_secs(1)).await;
    }

    /// A TCP listener that accepts connections and never answers; its URL.
    async fn silent() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        (url, task)
    }

    #[tokio::test]
    async fn the_connect_timeout_is_the_entrys_else_the_hosts() {
        let (url, task) = silent().await;
        let quick = Duration::from_millis(300);
        let patient = Arc::new(
            Host::builder(HostConfig::default())
                .connect_timeout(Duration::from_secs(60))
                .into_shared(),
        );
        let mut entry = ServerConfig::http("slow", &url);
        entry.timeout = Some(quick);
        let impatient = Arc::new(
            Host::builder(HostConfig::default())
                .connect_timeout(quick)
                .into_shared(),
        );
        for (entry, shared) in [
            (entry, patient),
            (ServerConfig::http("slow", &url), impatient),
        ] {
            let started = Instant::now();
            let connecting = client_builder(&entry, &shared).connect_http(&url);
            let result = tokio::time::timeout(Duration::from_secs(20), connecting)
                .await
                .expect("the connect timeout applies");
            assert!(
                matches!(result, Err(ConnectError::Timeout { .. })),
                "{result:?}"
            );
            assert!(started.elapsed() < Duration::from_secs(10));
        }
        task.abort();
    }

    /// A guard that admits `Authorization: Bearer <token>` only.
    #[derive(Debug, Clone)]
    struct Doorman(&'static str);

    impl modelctx_server::Guard for Doorman {
        fn authenticate<'a>(
            &'a self,
            request: &'a http::request::Parts,
        ) -> modelctx_server::event_store::BoxFuture<
            'a,
            Result<modelctx_server::Grant, modelctx_server::Challenge>,
        > {
            let expected = format!("Bearer {}", self.0);
            let given = request.headers.get(http::header::AUTHORIZATION);
            let result = if given.is_some_and(|v| v.as_bytes() == expected.as_bytes()) {
                Ok(modelctx_server::Grant::new("test", "alice"))
            } else {
                let mut challenge = modelctx_server::Challenge::new(http::StatusCode::UNAUTHORIZED);
                challenge.headers.insert(
                    http::header::WWW_AUTHENTICATE,
                    http::HeaderValue::from_static(r#"Bearer error="invalid_token""#),
                );
                Err(challenge)
            };
            Box::pin(std::future::ready(result))
        }

        fn authorize(
            &self,
            _: &modelctx_server::Grant,
            _: &[String],
        ) -> Result<(), modelctx_server::Challenge> {
            Ok(())
        }
    }

    async fn guarded(token: &'static str) -> (String, modelctx_server::RunningServer) {
        let server = Server::builder("guarded", "1.0.0")
            .auth(Doorman(token))
            .tool(Tool::new("hello", |_: NoArgs| std::future::ready("hi")))
            .build();
        let running = server
            .serve_http("127.0.0.1:0", modelctx_server::HttpConfig::default())
            .await
            .unwrap();
        (format!("http://{}/mcp", running.local_addr()), running)
    }

    #[tokio::test]
    async fn each_http_server_is_authorized_with_its_own_stored_tokens() {
        let (alpha_url, alpha) = guarded("token-alpha").await;
        let (beta_url, beta) = guarded("token-beta").await;
        let store = Arc::new(MemoryStore::new());
        for (url, token) in [(&alpha_url, "token-alpha"), (&beta_url, "token-beta")] {
            let record = Stored::Tokens(TokenRecord::new(token, "Bearer"));
            let key = StoreKey::tokens("https://issuer.example", url.as_str());
            store.save(&key, &record).await.unwrap();
        }
        let oauth = OAuth::builder()
            .store(store as Arc<dyn TokenStore>)
            .build()
            .unwrap();
        let shared = Arc::new(
            Host::builder(HostConfig::default())
                .oauth(oauth)
                .into_shared(),
        );
        for (name, url) in [("alpha", &alpha_url), ("beta", &beta_url)] {
            let client = client_builder(&ServerConfig::http(name, url.as_str()), &shared)
                .connect_http(url)
                .await
                .unwrap();
            assert_eq!(call(&client, "hello").await.unwrap(), "hi");
            client.close().await;
        }
        // Without the host's OAuth, the server refuses.
        let bare = Arc::new(Host::builder(HostConfig::default()).into_shared());
        let refused = client_builder(&ServerConfig::http("alpha", alpha_url.as_str()), &bare)
            .connect_http(&alpha_url)
            .await;
        assert!(refused.is_err());
        alpha.shutdown(Duration::from_secs(1)).await;
        beta.shutdown(Duration::from_secs(1)).await;
    }

    #[test]
    fn oauth_is_for_http_servers_without_their_own_authorization_header() {
        let oauth = OAuth::builder().build().unwrap();
        let shared = Arc::new(
            Host::builder(HostConfig::default())
                .oauth(oauth)
                .into_shared(),
        );
        let authorized = |entry: &ServerConfig| {
            format!("{:?}", client_builder(entry, &shared)).contains("auth: true")
        };
        assert!(authorized(&ServerConfig::http(
            "a",
            "https://a.example/mcp"
        )));
        let mut with_header = ServerConfig::http("b", "https://b.example/mcp");
        if let TransportConfig::Http { headers, .. } = &mut with_header.transport {
            headers.insert("authorization".into(), "Bearer mine".into());
        }
        assert!(!authorized(&with_header));
        // MCP leaves a stdio server's authorization to its environment.
        assert!(!authorized(&ServerConfig::stdio("c", "server", Vec::new())));
        let bare = Arc::new(Host::builder(HostConfig::default()).into_shared());
        let entry = ServerConfig::http("a", "https://a.example/mcp");
        assert!(format!("{:?}", client_builder(&entry, &bare)).contains("auth: false"));
    }
}
