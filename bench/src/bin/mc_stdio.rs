//! modelctx over stdio, built as the README shows (default features), tool `echo`.

fn main() -> std::io::Result<()> {
    let server = modelctx_bench::modelctx_server();
    modelctx_bench::runtime().block_on(server.serve_stdio())
}
