//! rmcp 3.11 over Streamable HTTP, tool `echo`, served with hyper (HTTP/1.1, TCP_NODELAY):
//! `rmcp_http session` keeps legacy sessions (rmcp's default: SSE responses);
//! `rmcp_http stateless` serves without sessions, with JSON responses.

use std::sync::Arc;

use modelctx_bench::rmcp_echo::Echo;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

fn main() -> std::io::Result<()> {
    let stateless = std::env::args().nth(1).is_some_and(|a| a == "stateless");
    modelctx_bench::runtime().block_on(async {
        let mut config = StreamableHttpServerConfig::default();
        if stateless {
            config.legacy_session_mode = false;
            config.json_response = true;
        }
        let service = StreamableHttpService::new(
            || Ok(Echo::default()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let listener = tokio::net::TcpListener::bind(modelctx_bench::loopback()).await?;
        modelctx_bench::announce(listener.local_addr()?);
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            let service = hyper_util::service::TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    })
}
