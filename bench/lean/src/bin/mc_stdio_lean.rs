//! modelctx over stdio in its lean build (default features off), tool `echo`.

fn main() -> std::io::Result<()> {
    let server = modelctx_bench_lean::modelctx_server();
    modelctx_bench_lean::runtime().block_on(server.serve_stdio())
}
