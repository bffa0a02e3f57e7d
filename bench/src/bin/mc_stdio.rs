//! modelctx over stdio (default features off: `stdio` only in the minimal build), tool `echo`.

fn main() -> std::io::Result<()> {
    let server = modelctx_bench::modelctx_server();
    modelctx_bench::runtime().block_on(server.serve_stdio())
}
