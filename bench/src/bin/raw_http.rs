//! The HTTP limit: a bare hyper server (HTTP/1.1, TCP_NODELAY) that parses each JSON-RPC body
//! with serde_json and returns a fixed-shape JSON reply (202 for a notification); with
//! `raw_http sse`, the reply as one SSE event (`text/event-stream`).

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, body::Incoming};

async fn handle(
    request: Request<Incoming>,
    sse: bool,
) -> Result<Response<Full<Bytes>>, hyper::Error> {
    let body = request.into_body().collect().await?.to_bytes();
    let response = match modelctx_bench::raw_reply(&body) {
        Some(reply) if sse => {
            let mut event = Vec::with_capacity(reply.len() + 8);
            event.extend_from_slice(b"data: ");
            event.extend_from_slice(&reply);
            event.extend_from_slice(b"\n\n");
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(Full::new(Bytes::from(event)))
        }
        Some(reply) => Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(reply))),
        None => Response::builder()
            .status(202)
            .body(Full::new(Bytes::new())),
    };
    Ok(response.expect("a valid response"))
}

fn main() -> std::io::Result<()> {
    let sse = std::env::args().nth(1).is_some_and(|a| a == "sse");
    modelctx_bench::runtime().block_on(async {
        let listener = tokio::net::TcpListener::bind(modelctx_bench::loopback()).await?;
        modelctx_bench::announce(listener.local_addr()?);
        modelctx_bench::serve_hyper(
            listener,
            hyper::service::service_fn(move |r| handle(r, sse)),
        )
        .await
    })
}
