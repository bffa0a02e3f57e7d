//! The modelctx echo server as the README writes it (default features, the input schema derived
//! by schemars), and the pass-through middleware layer of the `layered` rows. Shared by the root
//! package and the `otel` build (`otel/`, which includes this file), so that both serve the same
//! server.

use std::task::{Context, Poll};

use modelctx_server::middleware::{Layer, McpRequest, Service};

/// The arguments of `echo`: `{"text": string}`, its input schema derived by schemars.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Echo {
    text: String,
}

async fn echo(args: Echo) -> String {
    args.text
}

/// The modelctx server of the benchmarks, written as the README shows (default features, the
/// input schema derived): the tool `echo` alone (served over stdio by `mc_stdio`, over
/// Streamable HTTP by `mc_http`). The lean build of the same server is `lean/`.
pub fn modelctx_server() -> modelctx_server::Server {
    modelctx_server_with(|builder| builder)
}

/// [`modelctx_server`] with more on its builder (`mc_fleet`: the Redis stores and bus; the
/// `layered` rows: [`PassThrough`]).
pub fn modelctx_server_with(
    more: impl FnOnce(modelctx_server::ServerBuilder) -> modelctx_server::ServerBuilder,
) -> modelctx_server::Server {
    more(
        modelctx_server::Server::builder("modelctx-bench", "0.0.0")
            .tool(modelctx_server::Tool::new("echo", echo).description("Says the text back")),
    )
    .build()
}

/// A middleware layer that does nothing but pass every request on: the cost of the chain
/// itself (`ServerBuilder::layer`). Unlike `tower::layer::util::Identity`, which hands back the
/// service it is given, it wraps it in a service of its own, so the server has a chain to go
/// through (the boxed service, its lock, its readiness, the boxed future of the call).
#[derive(Clone, Copy, Debug, Default)]
pub struct PassThrough;

impl<S> Layer<S> for PassThrough {
    type Service = Passing<S>;

    fn layer(&self, inner: S) -> Passing<S> {
        Passing(inner)
    }
}

/// The service of [`PassThrough`]: the inner service's readiness and call, as they are.
#[derive(Clone, Debug)]
pub struct Passing<S>(S);

impl<S: Service<McpRequest>> Service<McpRequest> for Passing<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: McpRequest) -> S::Future {
        self.0.call(request)
    }
}
