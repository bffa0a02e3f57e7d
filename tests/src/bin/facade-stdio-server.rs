//! The facade's test server: on stdin and stdout, or with `--http`, on 127.0.0.1 (a free port,
//! printed as `LISTENING <port>`) until stdin closes. `--client-tests` serves the richer server
//! of the client tests; `--max-line BYTES` bounds the lines read on stdin.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    // `--client-tests`: the richer server of the client tests.
    let server = if std::env::args().any(|a| a == "--client-tests") {
        modelctx_tests::facade::client_server()
    } else {
        modelctx_tests::facade::server()
    };
    if std::env::args().any(|a| a == "--http") {
        let config = modelctx_http::server::ServerConfig::default();
        let running = server
            .serve_http(([127, 0, 0, 1], 0).into(), config)
            .await?;
        println!("LISTENING {}", running.local_addr().port());
        let mut sink = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut sink).await;
        running.shutdown(std::time::Duration::from_secs(1)).await;
        return Ok(());
    }
    // `--max-line BYTES`: the longest line read (default: the transport's 4 MiB).
    let args: Vec<String> = std::env::args().collect();
    let max_line = args
        .iter()
        .position(|a| a == "--max-line")
        .and_then(|i| args.get(i + 1)?.parse::<usize>().ok());
    let codec = max_line.map_or_else(
        modelctx_stdio::LineCodec::new,
        modelctx_stdio::LineCodec::with_max_line_length,
    );
    let (reader, writer) = modelctx_stdio::stdio_with_codec(codec)?;
    server.serve_lines(reader, writer).await
}
