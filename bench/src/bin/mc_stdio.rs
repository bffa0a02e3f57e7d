//! modelctx over stdio, built as the README shows (default features), tool `echo`; with
//! `mc_stdio layered`, one pass-through middleware layer around every request
//! (`modelctx_bench::PassThrough`).

fn main() -> std::io::Result<()> {
    let layered = std::env::args().nth(1).is_some_and(|a| a == "layered");
    let server = modelctx_bench::modelctx_server_with(|builder| {
        if layered {
            builder.layer(modelctx_bench::PassThrough)
        } else {
            builder
        }
    });
    modelctx_bench::runtime().block_on(server.serve_stdio())
}
