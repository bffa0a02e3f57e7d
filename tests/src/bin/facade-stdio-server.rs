//! The facade's test server: on stdin and stdout, or with `--http`, on 127.0.0.1 (a free port,
//! printed as `LISTENING <port>`) until stdin closes. `--client-tests` serves the richer server
//! of the client tests; `--max-line BYTES` bounds the lines read on stdin.
//!
//! Over stdio it writes `direct: stdin <bool>, stdout <bool>` (whether the pipes are driven by
//! the reactor) to stderr when it starts and `ended: <what serve_lines returned>` when the
//! connection ends, and `CANCELLED wait` each time a call of the `wait` tool sees its
//! cancellation. Misbehaviour of the process, for the tests of a client's shutdown:
//! `--ignore-stdin-close` (keeps running after the connection ended), `--ignore-sigterm`,
//! `--stderr-flood MIB` (writes that much to stderr while serving, lines of every length, then
//! `flood done`).

use std::io::Write;

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    modelctx_tests::facade::SAY_CANCELLED.store(true, std::sync::atomic::Ordering::SeqCst);
    let flag = |name: &str| args.iter().any(|a| a == name);
    let value = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1)?.parse::<usize>().ok())
    };
    // `--client-tests`: the richer server of the client tests.
    let server = if flag("--client-tests") {
        modelctx_tests::facade::client_server()
    } else {
        modelctx_tests::facade::server()
    };
    if flag("--http") {
        let config = modelctx_http::server::ServerConfig::default();
        let running = server.serve_http("127.0.0.1:0", config).await?;
        println!("LISTENING {}", running.local_addr().port());
        let mut sink = Vec::new();
        let _ = tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut sink).await;
        running.shutdown(std::time::Duration::from_secs(1)).await;
        return Ok(());
    }
    if flag("--ignore-sigterm") {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            while term.recv().await.is_some() {
                let _ = writeln!(std::io::stderr(), "ignoring SIGTERM");
            }
        });
    }
    if let Some(mib) = value("--stderr-flood") {
        std::thread::spawn(move || flood_stderr(mib));
    }
    // `--max-line BYTES`: the longest line read (default: the transport's 4 MiB).
    let codec = value("--max-line").map_or_else(
        modelctx_stdio::LineCodec::new,
        modelctx_stdio::LineCodec::with_max_line_length,
    );
    let (reader, writer) = modelctx_stdio::stdio_with_codec(codec)?;
    let _ = writeln!(
        std::io::stderr(),
        "direct: stdin {}, stdout {}",
        reader.get_ref().is_direct(),
        writer.get_ref().is_direct()
    );
    let ended = server.serve_lines(reader, writer).await;
    // The handlers still running were cancelled when the connection ended; they finish on
    // their own tasks: let them (bounded), so what they say comes before `ended:` and before
    // the runtime, dropped at exit, drops them unfinished.
    let settle = std::time::Instant::now();
    while server.load().handlers > 0 && settle.elapsed() < std::time::Duration::from_secs(5) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let _ = writeln!(std::io::stderr(), "ended: {ended:?}");
    if flag("--ignore-stdin-close") {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
        }
    }
    ended
}

/// Writes `mib` MiB to stderr: lines of every length, some far over any line limit.
fn flood_stderr(mib: usize) {
    let mut stderr = std::io::stderr().lock();
    let long = "x".repeat(100_000);
    let mut written = 0;
    let mut i = 0usize;
    while written < mib << 20 {
        let line = if i.is_multiple_of(50) {
            long.clone()
        } else {
            format!("flood line {i}")
        };
        if writeln!(stderr, "{line}").is_err() {
            return;
        }
        written += line.len() + 1;
        i += 1;
    }
    let _ = writeln!(stderr, "flood done");
}
