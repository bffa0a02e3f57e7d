//! Completions: the providers of candidate values that prompts and resource templates hold,
//! and the answer of `completion/complete`.

use std::future::Future;
use std::sync::Arc;

use modelctx_types::JsonObject;
use serde_json::json;

use crate::handler::{BoxFuture, Runner};

/// A completion provider: given the argument's partial value (and the other arguments already
/// given), the candidate values.
pub(crate) type Completer = Arc<dyn Fn(String, JsonObject) -> BoxFuture<Vec<String>> + Send + Sync>;

/// A completion provider from an async function.
pub(crate) fn completer<F, Fut>(complete: F) -> Completer
where
    F: Fn(String, JsonObject) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Vec<String>> + Send + 'static,
{
    let complete = Arc::new(complete);
    Arc::new(move |partial, others| {
        let complete = complete.clone();
        Box::pin(async move { complete(partial, others).await })
    })
}

/// The most values one completion answer carries.
const MAX_COMPLETIONS: usize = 100;

/// The work of a `completion/complete` whose provider (if any) was found: the candidates, at
/// most [`MAX_COMPLETIONS`] of them, with their total.
pub(crate) fn run(completer: Option<Completer>, partial: String, others: JsonObject) -> Runner {
    Box::new(move |_context| {
        Box::pin(async move {
            let mut values = match completer {
                Some(completer) => completer(partial, others).await,
                None => Vec::new(),
            };
            let total = values.len();
            values.truncate(MAX_COMPLETIONS);
            crate::wire::raw(&json!({"completion": {
                "values": values,
                "total": total,
                "hasMore": total > MAX_COMPLETIONS,
            }}))
        })
    })
}
