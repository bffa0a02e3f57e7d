use modelctx_server::{NoArgs, Tool};

// A handler is an async fn (or a closure returning a future), not a plain fn.
fn now(_: NoArgs) -> String {
    "noon".to_owned()
}

fn main() {
    let _ = Tool::new("now", now);
}
