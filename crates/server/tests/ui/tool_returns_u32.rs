use modelctx_server::{NoArgs, Tool};

// A number is not a tool result: return it as text, or as `Json<u32>`.
async fn count(_: NoArgs) -> u32 {
    42
}

fn main() {
    let _ = Tool::new("count", count);
}
