use modelctx_server::{NoArgs, Tool};

struct Opaque;

async fn opaque(_: NoArgs) -> Opaque {
    Opaque
}

fn main() {
    let _ = Tool::with_input_schema("opaque", Default::default(), opaque);
}
