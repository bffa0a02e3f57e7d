//! Shared pieces of the benchmark binaries: the echo tool's schema, the modelctx echo server (and
//! the pass-through middleware layer of its `layered` rows), the runtime every server uses, and
//! the `LISTENING <port>` line of the HTTP servers.

/// The input schema of the `echo` tool, `{"text": string}`, written by hand (the rmcp server's).
pub fn echo_schema() -> serde_json::Map<String, serde_json::Value> {
    match serde_json::json!({
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }) {
        serde_json::Value::Object(map) => map,
        _ => unreachable!(),
    }
}

mod echo;
pub use echo::{PassThrough, Passing, modelctx_server, modelctx_server_with};

mod common;
pub use common::{announce, loopback, runtime};

/// Serves a hyper service on every accepted connection (HTTP/1.1, `TCP_NODELAY`), forever.
pub async fn serve_hyper<S>(listener: tokio::net::TcpListener, service: S) -> std::io::Result<()>
where
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<http_body_util::Full<bytes::Bytes>>,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let service = service.clone();
        tokio::spawn(async move {
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

/// The rmcp echo server: a hand-written `ServerHandler` (no macros, no schemars).
pub mod rmcp_echo {
    use std::sync::Arc;

    use rmcp::ErrorData;
    use rmcp::handler::server::ServerHandler;
    use rmcp::model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    };
    use rmcp::service::{RequestContext, RoleServer};

    /// The `echo` tool's server.
    #[derive(Clone)]
    pub struct Echo {
        tool: Tool,
    }

    impl Default for Echo {
        fn default() -> Self {
            Echo {
                tool: Tool::new("echo", "Says the text back", Arc::new(super::echo_schema())),
            }
        }
    }

    impl ServerHandler for Echo {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
        }

        async fn list_tools(
            &self,
            _request: Option<PaginatedRequestParams>,
            _context: RequestContext<RoleServer>,
        ) -> Result<ListToolsResult, ErrorData> {
            Ok(ListToolsResult {
                tools: vec![self.tool.clone()],
                ..Default::default()
            })
        }

        async fn call_tool(
            &self,
            request: CallToolRequestParams,
            _context: RequestContext<RoleServer>,
        ) -> Result<CallToolResponse, ErrorData> {
            if request.name != "echo" {
                return Err(ErrorData::invalid_params("unknown tool", None));
            }
            let text = request
                .arguments
                .as_ref()
                .and_then(|a| a.get("text"))
                .and_then(|t| t.as_str())
                .ok_or_else(|| ErrorData::invalid_params("`text` must be a string", None))?;
            Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
        }
    }
}

/// The raw limit's reply to a request: the echo result's shape, serialized with serde_json.
/// `None` for a notification (no id).
pub fn raw_reply(request: &[u8]) -> Option<Vec<u8>> {
    #[derive(serde::Deserialize)]
    struct Request<'a> {
        #[serde(default)]
        id: Option<serde_json::Value>,
        #[serde(borrow, default)]
        #[allow(dead_code)]
        method: Option<std::borrow::Cow<'a, str>>,
        #[serde(default)]
        #[allow(dead_code)]
        params: Option<serde_json::Value>,
    }
    #[derive(serde::Serialize)]
    struct Reply<'a> {
        jsonrpc: &'static str,
        id: &'a serde_json::Value,
        result: serde_json::Value,
    }
    let request: Request<'_> =
        match serde_json::from_slice(request) {
            Ok(request) => request,
            Err(_) => return Some(
                br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}"#
                    .to_vec(),
            ),
        };
    let id = request.id?;
    let result = serde_json::json!({"content": [{"type": "text", "text": "hello benchmark!"}]});
    serde_json::to_vec(&Reply {
        jsonrpc: "2.0",
        id: &id,
        result,
    })
    .ok()
}
