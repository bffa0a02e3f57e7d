use modelctx_server::{Context, ReadRequest, Resource, ResourceContents};

// The context comes first, and a resource handler takes the `ReadRequest`, not a URI.
async fn readme(uri: String, _context: Context) -> ResourceContents {
    ResourceContents::text(uri, "# Read me")
}

async fn license(request: ReadRequest) -> ResourceContents {
    ResourceContents::text(request.uri, "MIT")
}

fn main() {
    let _ = Resource::new("docs://readme", "readme", readme);
    // The right shape compiles: only the line above is an error.
    let _ = Resource::new("docs://license", "license", license);
}
