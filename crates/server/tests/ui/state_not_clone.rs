use modelctx_server::{NoArgs, State, Tool};

// Each call gets a clone of the state: it must be `Clone` (share what cannot be cloned through
// an `Arc`).
struct Pool;

async fn query(_pool: State<Pool>, _: NoArgs) -> String {
    String::new()
}

fn main() {
    let _ = Tool::with_input_schema("query", Default::default(), query);
}
