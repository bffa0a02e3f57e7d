use modelctx_server::{Context, Tool};

// The context must come first, and the arguments must be deserializable.
async fn wrong(_args: u32, _context: Context) -> String {
    String::new()
}

fn main() {
    let _ = Tool::with_input_schema("wrong", Default::default(), wrong);
}
