//! The facade's test server on stdin and stdout.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    modelctx_tests::facade::server().serve_stdio().await
}
