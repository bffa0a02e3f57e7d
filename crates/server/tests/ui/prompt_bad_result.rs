use modelctx_server::Prompt;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Topic {
    topic: String,
}

// A prompt gives messages (or one text), not a list of strings.
async fn brainstorm(args: Topic) -> Vec<String> {
    vec![format!("Ideas about {}", args.topic)]
}

fn main() {
    let _ = Prompt::new("brainstorm", brainstorm);
}
