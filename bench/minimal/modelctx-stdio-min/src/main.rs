//! B1: the smallest modelctx stdio server: the `echo` tool.

#[derive(serde::Deserialize)]
struct Echo {
    text: String,
}

fn main() -> std::io::Result<()> {
    let schema = match serde_json::json!({
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }) {
        serde_json::Value::Object(map) => map,
        _ => unreachable!(),
    };
    let server = modelctx_server::Server::builder("echo", "0.0.0")
        .tool(modelctx_server::Tool::with_input_schema(
            "echo",
            schema,
            |args: Echo| async move { args.text },
        ))
        .build();
    tokio::runtime::Runtime::new()?.block_on(server.serve_stdio())
}
