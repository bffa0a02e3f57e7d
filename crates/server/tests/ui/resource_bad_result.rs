use modelctx_server::{ReadRequest, ResourceTemplate};

// A read gives `ResourceContents` (with its URI and MIME type), not bare text.
async fn user(request: ReadRequest) -> String {
    format!("user {}", request.var("id").unwrap_or_default())
}

fn main() {
    let _ = ResourceTemplate::new("users://{id}", "user", user);
}
