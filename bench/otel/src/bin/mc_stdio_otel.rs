//! modelctx over stdio built with `otel`, tool `echo`, with the OpenTelemetry pipeline of
//! `modelctx_bench_otel::install` (or, with `mc_stdio_otel off`, none).

fn main() -> std::io::Result<()> {
    let _pipeline = modelctx_bench_otel::install();
    let server = modelctx_bench_otel::modelctx_server();
    modelctx_bench_otel::runtime().block_on(server.serve_stdio())
}
