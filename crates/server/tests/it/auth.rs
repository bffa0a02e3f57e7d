//! Authorization in the facade, with a fake guard (no tokens, no crypto): the scopes of tools,
//! prompts, resources and templates as the transport asks for them, the caller as handlers see
//! it (`Context::auth`), and the server's own scope check before a handler runs.
//!
//! Most tests put the `Grant` in the request's extensions themselves, as a layer in front of
//! the endpoint would, and serve without a guard in the transport's configuration: so what they
//! see is the facade's doing, whatever the transport checks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::{HeaderValue, Request, StatusCode, header, request::Parts};
use modelctx_http::server::{McpApp, McpService, PeerAddr};
use modelctx_server::{
    Challenge, Context, Grant, Guard, HttpConfig, NoArgs, Prompt, ProtocolVersion, ReadRequest,
    Resource, ResourceContents, ResourceTemplate, Server, Tool,
};
use modelctx_types::consts;
use serde_json::{Value, json};

use crate::common::within;

/// A guard whose callers are named by their `Authorization: Bearer <subject> <scope>...`
/// header, and whose scopes have a hierarchy: `files:*` covers every `files:` scope. It counts
/// the authorizations asked of it.
#[derive(Debug, Default)]
struct FakeGuard {
    authorizations: AtomicUsize,
}

impl FakeGuard {
    fn covers(granted: &str, needed: &str) -> bool {
        granted == needed
            || granted
                .strip_suffix('*')
                .is_some_and(|prefix| needed.starts_with(prefix))
    }

    fn authorizations(&self) -> usize {
        self.authorizations.load(Ordering::SeqCst)
    }
}

impl Guard for FakeGuard {
    fn authenticate<'a>(
        &'a self,
        request: &'a Parts,
    ) -> modelctx_http::event_store::BoxFuture<'a, Result<Grant, Challenge>> {
        let grant = request
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|credentials| {
                let mut words = credentials.split(' ');
                let mut grant = Grant::new("fake", words.next().unwrap_or_default());
                grant.scopes = words.map(str::to_owned).collect();
                grant
            });
        Box::pin(std::future::ready(grant.ok_or_else(|| {
            let mut challenge = Challenge::new(StatusCode::UNAUTHORIZED);
            challenge
                .headers
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            challenge
        })))
    }

    fn authorize(&self, grant: &Grant, needed: &[String]) -> Result<(), Challenge> {
        self.authorizations.fetch_add(1, Ordering::SeqCst);
        let covered = needed
            .iter()
            .all(|n| grant.scopes.iter().any(|g| Self::covers(g, n)));
        if covered {
            Ok(())
        } else {
            Err(Challenge::new(StatusCode::FORBIDDEN))
        }
    }
}

/// A grant to `subject` of `scopes`.
fn grant(subject: &str, scopes: &[&str]) -> Arc<Grant> {
    let mut grant = Grant::new("fake", subject);
    grant.client_id = Some("cli".into());
    grant.scopes = scopes.iter().map(|s| (*s).to_owned()).collect();
    Arc::new(grant)
}

/// How many handlers ran.
#[derive(Debug, Clone, Default)]
struct Ran(Arc<AtomicUsize>);

impl Ran {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// A server whose tool `rm` needs `files:write`, prompt `secret` `prompts:read`, resource
/// `file:///etc/passwd` `admin` and template `file:///home/{user}` `home` (the prompt's and
/// the template's completers count as handlers); `ls`, `file:///home/open` (which the template
/// matches too) and `whoami` need nothing.
fn builder(ran: &Ran) -> modelctx_server::ServerBuilder {
    let counted = |ran: &Ran| {
        let ran = ran.clone();
        move |_: NoArgs| {
            ran.0.fetch_add(1, Ordering::SeqCst);
            std::future::ready("done")
        }
    };
    let read = |ran: &Ran| {
        let ran = ran.clone();
        move |_: Context, request: ReadRequest| {
            ran.0.fetch_add(1, Ordering::SeqCst);
            std::future::ready(ResourceContents::text(request.uri, "contents"))
        }
    };
    let prompt_ran = ran.clone();
    let completed = |ran: &Ran| {
        let ran = ran.clone();
        move |_: String, _: serde_json::Map<String, Value>| {
            ran.0.fetch_add(1, Ordering::SeqCst);
            std::future::ready(vec!["bob".to_owned()])
        }
    };
    Server::builder("s", "1")
        .tool(Tool::new("rm", counted(ran)).scopes(["files:write"]))
        .tool(Tool::new("ls", counted(ran)))
        .tool(Tool::new("whoami", whoami))
        .prompt(
            Prompt::with_arguments("secret", Vec::new(), move |_: Value| {
                prompt_ran.0.fetch_add(1, Ordering::SeqCst);
                std::future::ready("the secret".to_owned())
            })
            .complete("topic", completed(ran))
            .scopes(["prompts:read"]),
        )
        .resource(Resource::new("file:///etc/passwd", "passwd", read(ran)).scopes(["admin"]))
        .resource(Resource::new("file:///home/open", "open", read(ran)))
        .resource_template(
            ResourceTemplate::new("file:///home/{user}", "home", read(ran))
                .unwrap()
                .complete("user", completed(ran))
                .scopes(["home"]),
        )
}

/// Who the caller is, as the handler sees it.
async fn whoami(context: Context, _: NoArgs) -> String {
    match context.auth() {
        Some(grant) => format!(
            "{} {} {}",
            grant.subject,
            grant.client_id.as_deref().unwrap_or("-"),
            grant.scopes.join(",")
        ),
        None => "nobody".to_owned(),
    }
}

/// The scopes the transport is told `method` with `params` (as text) needs.
fn scopes_of(server: &Server, method: &str, params: Option<&str>) -> Option<Vec<String>> {
    let params = params.map(|p| serde_json::value::RawValue::from_string(p.to_owned()).unwrap());
    McpApp::required_scopes(server, method, params.as_deref()).map(|s| s.to_vec())
}

/// The scopes the transport is told `method` on `name` (`params.uri` of a resource method,
/// else `params.name`) needs.
fn scopes(server: &Server, method: &str, name: Option<&str>) -> Option<Vec<String>> {
    let member = match method {
        consts::ResourcesRead::VALUE | consts::ResourcesSubscribe::VALUE => "uri",
        _ => "name",
    };
    let params = name.map(|name| json!({ member: name }).to_string());
    scopes_of(server, method, params.as_deref())
}

#[test]
fn the_scopes_of_each_kind_are_what_the_transport_is_told() {
    let server = builder(&Ran::default()).build();
    let one = |s: &str| Some(vec![s.to_owned()]);
    let call = consts::ToolsCall::VALUE;
    let get = consts::PromptsGet::VALUE;
    let read = consts::ResourcesRead::VALUE;
    let subscribe = consts::ResourcesSubscribe::VALUE;
    assert_eq!(scopes(&server, call, Some("rm")), one("files:write"));
    assert_eq!(scopes(&server, get, Some("secret")), one("prompts:read"));
    for method in [read, subscribe] {
        assert_eq!(
            scopes(&server, method, Some("file:///etc/passwd")),
            one("admin")
        );
        assert_eq!(
            scopes(&server, method, Some("file:///home/bob")),
            one("home")
        );
        // The resource at the exact URI decides, as it does for reading.
        assert_eq!(scopes(&server, method, Some("file:///home/open")), None);
        assert_eq!(scopes(&server, method, Some("file:///elsewhere")), None);
    }
    // Unscoped items, unknown names, names of another kind, other methods: none.
    assert_eq!(scopes(&server, call, Some("ls")), None);
    assert_eq!(scopes(&server, call, Some("unknown")), None);
    assert_eq!(scopes(&server, call, Some("secret")), None);
    assert_eq!(scopes(&server, get, Some("rm")), None);
    assert_eq!(scopes(&server, call, None), None);
    assert_eq!(scopes(&server, consts::ToolsList::VALUE, None), None);
    assert_eq!(
        scopes(
            &server,
            consts::ResourcesUnsubscribe::VALUE,
            Some("file:///etc/passwd")
        ),
        None
    );
    // What the request names is read as routing reads it: the `uri` of a read, whatever
    // `name` says beside it; a member given twice, the last one.
    assert_eq!(
        scopes_of(
            &server,
            read,
            Some(r#"{"uri":"file:///etc/passwd","name":"ls"}"#)
        ),
        one("admin")
    );
    assert_eq!(
        scopes_of(&server, call, Some(r#"{"name":"ls","name":"rm"}"#)),
        one("files:write")
    );
    assert_eq!(
        scopes_of(&server, call, Some(r#"{"name":"rm","name":"ls"}"#)),
        None
    );
    // Completing runs a prompt's or a template's completers: their scopes.
    let complete = consts::CompletionComplete::VALUE;
    let completing = |reference: Value| {
        let params = json!({"ref": reference, "argument": {"name": "user", "value": "b"}});
        scopes_of(&server, complete, Some(&params.to_string()))
    };
    assert_eq!(
        completing(json!({"type": consts::RefPrompt::VALUE, "name": "secret"})),
        one("prompts:read")
    );
    assert_eq!(
        completing(json!({"type": consts::RefResource::VALUE, "uri": "file:///home/{user}"})),
        one("home")
    );
    assert_eq!(
        completing(json!({"type": consts::RefResource::VALUE, "uri": "file:///etc/passwd"})),
        one("admin")
    );
    assert_eq!(
        completing(json!({"type": consts::RefPrompt::VALUE, "name": "rm"})),
        None
    );
    assert_eq!(
        completing(json!({"type": consts::RefResource::VALUE, "uri": "file:///home/open"})),
        None
    );
    assert_eq!(scopes_of(&server, complete, None), None);
    // Handed out as the value kept since registration, not built per call.
    let rm = serde_json::value::RawValue::from_string(r#"{"name":"rm"}"#.into()).unwrap();
    let first = McpApp::required_scopes(&server, call, Some(&rm)).unwrap();
    let second = McpApp::required_scopes(&server, call, Some(&rm)).unwrap();
    assert!(Arc::ptr_eq(&first, &second));
    // Items added while the server runs count too.
    server
        .add_tool(Tool::new("late", whoami).scopes(["late", "late", "more"]))
        .unwrap();
    assert_eq!(
        scopes(&server, call, Some("late")),
        Some(vec!["late".to_owned(), "more".to_owned()])
    );
}

const MODERN: ProtocolVersion = ProtocolVersion::V2026_07_28;
const LEGACY: ProtocolVersion = ProtocolVersion::V2025_06_18;

/// A POST to the endpoint in `version`, with the modern headers (`Mcp-Name` from `name`) when
/// it is 2026-07-28, the session id if any, and `grant` in its extensions.
fn post(
    version: ProtocolVersion,
    body: String,
    name: Option<(&str, &str)>,
    session: Option<&str>,
    grant: Option<Arc<Grant>>,
) -> Request<String> {
    let mut request = Request::builder()
        .method("POST")
        .uri("/mcp")
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", version.as_str());
    if let Some((method, name)) = name {
        request = request.header("mcp-method", method);
        if !name.is_empty() {
            request = request.header("mcp-name", name);
        }
    }
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let mut request = request.body(body).unwrap();
    request
        .extensions_mut()
        .insert(PeerAddr(SocketAddr::from(([127, 0, 0, 1], 50_000))));
    if let Some(grant) = grant {
        request.extensions_mut().insert(grant);
    }
    request
}

/// Sends `request`: the status, the session id, and the JSON-RPC messages of the body.
async fn send(
    service: &McpService,
    request: Request<String>,
) -> (StatusCode, Option<String>, Vec<Value>) {
    within("the response", async {
        let response = service.handle(request).await;
        let status = response.status();
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(axum::body::Body::new(response.into_body()), usize::MAX)
            .await
            .unwrap();
        let body = String::from_utf8(body.to_vec()).unwrap();
        let messages = match serde_json::from_str::<Value>(&body) {
            Ok(one) => vec![one],
            Err(_) => body
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .filter(|data| !data.trim().is_empty())
                .map(|data| serde_json::from_str(data.trim()).unwrap())
                .collect(),
        };
        (status, session, messages)
    })
    .await
}

/// A modern request of `method` on `name` (a tool or prompt name, or a URI) with `params`.
async fn modern(
    service: &McpService,
    method: &str,
    name: &str,
    params: Value,
    grant: Option<Arc<Grant>>,
) -> Value {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN.as_str(),
        "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
    let (status, _, messages) = send(
        service,
        post(MODERN, body, Some((method, name)), None, grant),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{messages:?}");
    messages
        .into_iter()
        .find(|m| m["id"] == json!(7))
        .expect("a reply")
}

/// Opens a legacy session with `grant` on its `initialize`; returns its id.
async fn open(service: &McpService, grant: Option<Arc<Grant>>) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": consts::Initialize::VALUE,
        "params": {"protocolVersion": LEGACY.as_str(), "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}});
    let (status, session, _) = send(
        service,
        post(LEGACY, initialize.to_string(), None, None, grant.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let session = session.expect("a session id");
    let initialized =
        json!({"jsonrpc": "2.0", "method": consts::NotificationsInitialized::VALUE}).to_string();
    let (status, _, _) = send(
        service,
        post(LEGACY, initialized, None, Some(&session), grant),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    session
}

/// A legacy request (its body as given) on `session`.
async fn legacy(
    service: &McpService,
    session: &str,
    body: String,
    grant: Option<Arc<Grant>>,
) -> Value {
    let (status, _, messages) = send(service, post(LEGACY, body, None, Some(session), grant)).await;
    assert_eq!(status, StatusCode::OK, "{messages:?}");
    messages
        .into_iter()
        .find(|m| m["id"] == json!(9))
        .expect("a reply")
}

fn call(name: &str) -> String {
    call_id(9, name)
}

fn call_id(id: i64, name: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": consts::ToolsCall::VALUE,
        "params": {"name": name, "arguments": {}}})
    .to_string()
}

fn text(reply: &Value) -> &str {
    reply["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {reply}"))
}

#[tokio::test]
async fn a_handler_reads_the_grant_of_its_http_request_in_both_eras() {
    let server = builder(&Ran::default()).build();
    let service = server.http_service(HttpConfig::default()).unwrap();

    let whoami = json!({"name": "whoami", "arguments": {}});
    let reply = modern(
        &service,
        consts::ToolsCall::VALUE,
        "whoami",
        whoami.clone(),
        Some(grant("alice", &["a", "b"])),
    )
    .await;
    assert_eq!(text(&reply), "alice cli a,b");
    let reply = modern(&service, consts::ToolsCall::VALUE, "whoami", whoami, None).await;
    assert_eq!(text(&reply), "nobody");

    // Legacy: the grant of the POST that carried the call, not of the one that opened the
    // session.
    let session = open(&service, Some(grant("alice", &[]))).await;
    let reply = legacy(
        &service,
        &session,
        call("whoami"),
        Some(grant("bob", &["x"])),
    )
    .await;
    assert_eq!(text(&reply), "bob cli x");
    let reply = legacy(&service, &session, call("whoami"), None).await;
    assert_eq!(text(&reply), "nobody");
}

/// The refusal of the server's own check: its code and the scopes it names.
fn refused(reply: &Value, scope: &str) {
    assert_eq!(reply["error"]["code"], json!(-32000), "{reply}");
    assert_eq!(
        reply["error"]["data"],
        json!({"reason": "insufficient_scope", "scope": scope}),
        "{reply}"
    );
}

#[tokio::test]
async fn the_server_checks_scopes_with_its_guard_before_a_handler_runs() {
    let ran = Ran::default();
    let guard = Arc::new(FakeGuard::default());
    /// The same guard, shared with the test to count its authorizations.
    #[derive(Debug)]
    struct Shared(Arc<FakeGuard>);
    impl Guard for Shared {
        fn authenticate<'a>(
            &'a self,
            request: &'a Parts,
        ) -> modelctx_http::event_store::BoxFuture<'a, Result<Grant, Challenge>> {
            self.0.authenticate(request)
        }
        fn authorize(&self, grant: &Grant, needed: &[String]) -> Result<(), Challenge> {
            self.0.authorize(grant, needed)
        }
    }
    let server = builder(&ran).auth(Shared(guard.clone())).build();
    // The transport's configuration has no guard: it lets every request through unchecked,
    // and only the server's own check stands between the grant and the handlers.
    let service = McpService::new(HttpConfig::default(), Arc::new(server)).unwrap();
    let rm = json!({"name": "rm", "arguments": {}});
    let tools_call = consts::ToolsCall::VALUE;

    let reply = modern(
        &service,
        tools_call,
        "rm",
        rm.clone(),
        Some(grant("alice", &["files:read"])),
    )
    .await;
    refused(&reply, "files:write");
    assert_eq!(ran.count(), 0, "the handler did not run");
    assert_eq!(guard.authorizations(), 1, "the guard decided");

    // The guard's hierarchy applies: `files:*` covers `files:write`.
    let reply = modern(
        &service,
        tools_call,
        "rm",
        rm.clone(),
        Some(grant("alice", &["files:*"])),
    )
    .await;
    assert_eq!(text(&reply), "done");
    assert_eq!(ran.count(), 1);

    // No grant: nothing to check (no guard in front); an unscoped tool: no check either.
    let reply = modern(&service, tools_call, "rm", rm, None).await;
    assert_eq!(text(&reply), "done");
    let ls = json!({"name": "ls", "arguments": {}});
    let reply = modern(&service, tools_call, "ls", ls, Some(grant("alice", &[]))).await;
    assert_eq!(text(&reply), "done");
    assert_eq!(ran.count(), 3);
    assert_eq!(guard.authorizations(), 2);

    // Prompts, resources and templates alike.
    let nobody = || Some(grant("alice", &["files:*"]));
    let get = consts::PromptsGet::VALUE;
    let reply = modern(&service, get, "secret", json!({"name": "secret"}), nobody()).await;
    refused(&reply, "prompts:read");
    let read = consts::ResourcesRead::VALUE;
    for (uri, scope) in [
        ("file:///etc/passwd", "admin"),
        ("file:///home/bob", "home"),
    ] {
        let reply = modern(&service, read, uri, json!({"uri": uri}), nobody()).await;
        refused(&reply, scope);
    }
    assert_eq!(ran.count(), 3, "no handler ran");
    let reply = modern(
        &service,
        read,
        "file:///home/bob",
        json!({"uri": "file:///home/bob"}),
        Some(grant("alice", &["home"])),
    )
    .await;
    assert_eq!(
        reply["result"]["contents"][0]["text"],
        json!("contents"),
        "{reply}"
    );
    assert_eq!(ran.count(), 4);

    // Completing a scoped prompt's argument or template's variable runs their completers: the
    // same scopes. A `name` beside a read's `uri` does not change what the read needs.
    let complete = consts::CompletionComplete::VALUE;
    let completing = |reference: Value, argument: &str| json!({"ref": reference, "argument": {"name": argument, "value": "b"}});
    let prompt_ref = json!({"type": consts::RefPrompt::VALUE, "name": "secret"});
    let template_ref = json!({"type": consts::RefResource::VALUE, "uri": "file:///home/{user}"});
    let reply = modern(
        &service,
        complete,
        "",
        completing(prompt_ref, "topic"),
        nobody(),
    )
    .await;
    refused(&reply, "prompts:read");
    let reply = modern(
        &service,
        complete,
        "",
        completing(template_ref.clone(), "user"),
        nobody(),
    )
    .await;
    refused(&reply, "home");
    let reply = modern(
        &service,
        read,
        "file:///etc/passwd",
        json!({"uri": "file:///etc/passwd", "name": "ls"}),
        nobody(),
    )
    .await;
    refused(&reply, "admin");
    assert_eq!(ran.count(), 4, "no completer ran");
    let reply = modern(
        &service,
        complete,
        "",
        completing(template_ref, "user"),
        Some(grant("alice", &["home"])),
    )
    .await;
    assert_eq!(
        reply["result"]["completion"]["values"],
        json!(["bob"]),
        "{reply}"
    );
    assert_eq!(ran.count(), 5);

    // Legacy sessions: the call, and a subscription to a scoped resource.
    let session = open(&service, nobody()).await;
    let reply = legacy(
        &service,
        &session,
        call("rm"),
        Some(grant("bob", &["prompts:read"])),
    )
    .await;
    refused(&reply, "files:write");
    let subscribe = json!({"jsonrpc": "2.0", "id": 9, "method": consts::ResourcesSubscribe::VALUE,
        "params": {"uri": "file:///etc/passwd"}});
    let reply = legacy(&service, &session, subscribe.to_string(), nobody()).await;
    refused(&reply, "admin");
    // A name given twice is read as routing reads it (the last one): no way around the check.
    let twice = format!(
        r#"{{"jsonrpc": "2.0", "id": 9, "method": "{}", "params": {{"name": "ls", "name": "rm", "arguments": {{}}}}}}"#,
        consts::ToolsCall::VALUE
    );
    let reply = legacy(&service, &session, twice, Some(grant("bob", &[]))).await;
    refused(&reply, "files:write");
    assert_eq!(ran.count(), 5, "no handler ran");
}

#[tokio::test]
async fn without_a_guard_of_its_own_the_server_compares_scopes_exactly() {
    let ran = Ran::default();
    let server = builder(&ran).build();
    let service = server.http_service(HttpConfig::default()).unwrap();
    let rm = json!({"name": "rm", "arguments": {}});
    let tools_call = consts::ToolsCall::VALUE;
    let reply = modern(
        &service,
        tools_call,
        "rm",
        rm.clone(),
        Some(grant("alice", &["files:*"])),
    )
    .await;
    refused(&reply, "files:write");
    assert_eq!(ran.count(), 0);
    let reply = modern(
        &service,
        tools_call,
        "rm",
        rm,
        Some(grant("alice", &["files:write"])),
    )
    .await;
    assert_eq!(text(&reply), "done");
    assert_eq!(ran.count(), 1);
}

/// End to end with the transport asking the guard: 401 without credentials, 403 for a scoped
/// tool whose scope the token lacks (the handler never runs), and the caller in the handler.
#[tokio::test]
async fn over_http_a_scoped_tool_is_refused_403_and_the_caller_is_seen() {
    let ran = Ran::default();
    let server = builder(&ran).auth(FakeGuard::default()).build();
    let service = server.http_service(HttpConfig::default()).unwrap();
    let body = |name: &str| {
        json!({"jsonrpc": "2.0", "id": 7, "method": consts::ToolsCall::VALUE,
            "params": {"name": name, "arguments": {}, "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN.as_str(),
                "io.modelcontextprotocol/clientCapabilities": {}}}})
        .to_string()
    };
    let with = |name: &str, credentials: Option<&str>| {
        let mut request = post(
            MODERN,
            body(name),
            Some((consts::ToolsCall::VALUE, name)),
            None,
            None,
        );
        if let Some(credentials) = credentials {
            let value = HeaderValue::from_str(&format!("Bearer {credentials}")).unwrap();
            request.headers_mut().insert(header::AUTHORIZATION, value);
        }
        request
    };
    let (status, _, _) = send(&service, with("rm", None)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, messages) = send(&service, with("rm", Some("alice files:read"))).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{messages:?}");
    assert!(messages.is_empty(), "an empty body: {messages:?}");
    assert_eq!(ran.count(), 0);
    let (status, _, messages) = send(&service, with("rm", Some("alice files:write"))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(text(&messages[0]), "done");
    assert_eq!(ran.count(), 1);
    let (_, _, messages) = send(&service, with("whoami", Some("carol x y"))).await;
    assert_eq!(text(&messages[0]), "carol - x,y");
    // The transport asks the server's reader: completing a scoped prompt's argument, and a
    // read whose `name` names an unscoped tool beside its scoped `uri`, are refused 403.
    let modern_post = |method: &str, params: Value, credentials: &str| {
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN.as_str(),
            "io.modelcontextprotocol/clientCapabilities": {}});
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let name = params["uri"].as_str().unwrap_or_default().to_owned();
        let mut request = post(MODERN, body.to_string(), Some((method, &name)), None, None);
        let value = HeaderValue::from_str(&format!("Bearer {credentials}")).unwrap();
        request.headers_mut().insert(header::AUTHORIZATION, value);
        request
    };
    let completion = json!({"ref": {"type": consts::RefPrompt::VALUE, "name": "secret"},
        "argument": {"name": "topic", "value": "b"}});
    let request = modern_post(
        consts::CompletionComplete::VALUE,
        completion.clone(),
        "erin files:*",
    );
    let (status, _, messages) = send(&service, request).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{messages:?}");
    let read = json!({"uri": "file:///etc/passwd", "name": "ls"});
    let request = modern_post(consts::ResourcesRead::VALUE, read, "erin files:*");
    let (status, _, messages) = send(&service, request).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{messages:?}");
    assert_eq!(ran.count(), 1, "no completer or reader ran");
    let request = modern_post(
        consts::CompletionComplete::VALUE,
        completion,
        "erin prompts:read",
    );
    let (status, _, messages) = send(&service, request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        messages[0]["result"]["completion"]["values"],
        json!(["bob"])
    );
    assert_eq!(ran.count(), 2);
    // Legacy: the session is opened and used by the same caller.
    let legacy_post = |body: String, session: Option<&str>| {
        let mut request = post(LEGACY, body, None, session, None);
        request.headers_mut().insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer dave files:*"),
        );
        request
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": consts::Initialize::VALUE,
        "params": {"protocolVersion": LEGACY.as_str(), "capabilities": {},
        "clientInfo": {"name": "c", "version": "1"}}});
    let (status, session, _) = send(&service, legacy_post(initialize.to_string(), None)).await;
    assert_eq!(status, StatusCode::OK);
    let session = session.unwrap();
    let initialized =
        json!({"jsonrpc": "2.0", "method": consts::NotificationsInitialized::VALUE}).to_string();
    let (status, _, _) = send(&service, legacy_post(initialized, Some(&session))).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, _, messages) = send(&service, legacy_post(call("whoami"), Some(&session))).await;
    assert_eq!(text(&messages[0]), "dave - files:*");
}

/// Review 2: a listen stream whose filter names a scoped resource hears of its changes only
/// when the caller holds its scopes, as a legacy `resources/subscribe` of it would be refused.
#[tokio::test]
async fn a_listen_stream_hears_only_of_resources_its_caller_may_read() {
    use axum::body::HttpBody;

    let server = Arc::new(builder(&Ran::default()).build());
    let service = McpService::new(HttpConfig::default(), server.clone()).unwrap();
    let listen = consts::SubscriptionsListen::VALUE;
    // What the stream says after its acknowledgement, once `file:///home/open` changed.
    let heard = |scopes: &'static [&'static str]| {
        let server = server.clone();
        let service = &service;
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 7, "method": listen, "params": {
                "notifications": {"resourceSubscriptions":
                    ["file:///etc/passwd", "file:///home/open"]},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": MODERN.as_str(),
                    "io.modelcontextprotocol/clientCapabilities": {}}}});
            let request = post(
                MODERN,
                body.to_string(),
                Some((listen, "")),
                None,
                Some(grant("alice", scopes)),
            );
            let response = service.handle(request).await;
            assert_eq!(response.status(), StatusCode::OK);
            let mut body = std::pin::pin!(response.into_body());
            let mut text = String::new();
            let mut notified = false;
            within("the listen stream", async {
                loop {
                    let frame = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await;
                    let data = frame.expect("the stream goes on").unwrap();
                    let Ok(data) = data.into_data() else {
                        continue;
                    };
                    text.push_str(std::str::from_utf8(&data).unwrap());
                    if !notified
                        && text.contains(consts::NotificationsSubscriptionsAcknowledged::VALUE)
                    {
                        notified = true;
                        text.clear();
                        server.notify_resource_updated("file:///etc/passwd");
                        server.notify_resource_updated("file:///home/open");
                    }
                    if notified && text.contains("file:///home/open") {
                        return text;
                    }
                }
            })
            .await
        }
    };
    let without = heard(&["home"]).await;
    assert!(!without.contains("file:///etc/passwd"), "{without}");
    let with = heard(&["admin"]).await;
    assert!(with.contains("file:///etc/passwd"), "{with}");
}

/// Review 6: the server's own check asks the guard that admitted the request (here the
/// configuration's: the server has none of its own), so that guard's scope hierarchy applies
/// in both checks; nothing of it is remembered for another endpoint.
#[tokio::test]
async fn the_server_checks_scopes_with_the_guard_that_admitted_the_request() {
    let ran = Ran::default();
    let server = builder(&ran).build();
    let mut config = HttpConfig::default();
    config.guard = Some(Arc::new(FakeGuard::default()));
    let service = server.http_service(config).unwrap();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": consts::ToolsCall::VALUE,
        "params": {"name": "rm", "arguments": {}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": MODERN.as_str(),
            "io.modelcontextprotocol/clientCapabilities": {}}}});
    let mut request = post(
        MODERN,
        body.to_string(),
        Some((consts::ToolsCall::VALUE, "rm")),
        None,
        None,
    );
    request.headers_mut().insert(
        header::AUTHORIZATION,
        HeaderValue::from_static("Bearer alice files:*"),
    );
    let (status, _, messages) = send(&service, request).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(text(&messages[0]), "done", "{messages:?}");
    assert_eq!(ran.count(), 1);
    // Another endpoint of the same server without a guard: a grant a layer in front put there
    // is compared exactly (no guard admitted it, and the server has none of its own).
    let unguarded = server.http_service(HttpConfig::default()).unwrap();
    let rm = json!({"name": "rm", "arguments": {}});
    let reply = modern(
        &unguarded,
        consts::ToolsCall::VALUE,
        "rm",
        rm,
        Some(grant("alice", &["files:*"])),
    )
    .await;
    refused(&reply, "files:write");
    assert_eq!(ran.count(), 1);
}
