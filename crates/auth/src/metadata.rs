//! The protected resource metadata document (RFC 9728 section 2).

use bytes::Bytes;
use jsonwebtoken::Algorithm;
use serde_json::{Map, Value};

use crate::canonical::Resource;

/// The scope MCP says never to advertise (2026-07-28: not in `scopes_supported`, not in a
/// challenge): refresh tokens are the client's business with the authorization server.
pub(crate) const OFFLINE_ACCESS: &str = "offline_access";

/// The JWS name of an algorithm (`ES256`).
pub(crate) fn alg_name(alg: Algorithm) -> String {
    match serde_json::to_value(alg) {
        Ok(Value::String(name)) => name,
        _ => format!("{alg:?}"),
    }
}

/// The document: `resource` (canonical), `authorization_servers`, `scopes_supported` (without
/// `offline_access`; absent when empty), `bearer_methods_supported: ["header"]` (tokens only in
/// the `Authorization` header), with `dpop` (the proof algorithms, whether bound tokens are
/// required) `dpop_signing_alg_values_supported` and `dpop_bound_access_tokens_required`, and
/// `resource_name` (RFC 9728 2: a name for people) when given.
pub(crate) fn document(
    resource: &Resource,
    authorization_servers: &[String],
    scopes_supported: &[String],
    dpop: Option<(&[Algorithm], bool)>,
    resource_name: Option<&str>,
) -> Bytes {
    let mut doc = Map::new();
    doc.insert("resource".into(), resource.as_str().into());
    doc.insert(
        "authorization_servers".into(),
        authorization_servers.to_vec().into(),
    );
    let scopes: Vec<&str> = advertised(scopes_supported).collect();
    if !scopes.is_empty() {
        doc.insert("scopes_supported".into(), scopes.into());
    }
    doc.insert("bearer_methods_supported".into(), vec!["header"].into());
    if let Some((algs, required)) = dpop {
        let names: Vec<String> = algs.iter().copied().map(alg_name).collect();
        doc.insert("dpop_signing_alg_values_supported".into(), names.into());
        doc.insert("dpop_bound_access_tokens_required".into(), required.into());
    }
    if let Some(name) = resource_name {
        doc.insert("resource_name".into(), name.into());
    }
    Bytes::from(Value::Object(doc).to_string())
}

/// The scopes that may be named to a client: each once, in order, never `offline_access`.
pub(crate) fn advertised(scopes: &[String]) -> impl Iterator<Item = &str> {
    scopes
        .iter()
        .enumerate()
        .filter(|(i, s)| s.as_str() != OFFLINE_ACCESS && !scopes[..*i].contains(s))
        .map(|(_, s)| s.as_str())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(doc: Bytes) -> Value {
        serde_json::from_slice(&doc).unwrap()
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_document_names_resource_servers_scopes_and_bearer_header() {
        let resource = Resource::parse("HTTPS://MCP.example.com/mcp/").unwrap();
        let doc = parse(document(
            &resource,
            &strings(&["https://id.example.com"]),
            &strings(&["mcp", "offline_access", "files:write", "mcp"]),
            None,
            None,
        ));
        assert_eq!(
            doc,
            json!({
                "resource": "https://mcp.example.com/mcp",
                "authorization_servers": ["https://id.example.com"],
                "scopes_supported": ["mcp", "files:write"],
                "bearer_methods_supported": ["header"],
            })
        );
    }

    #[test]
    fn without_scopes_there_is_no_scopes_member() {
        let resource = Resource::parse("https://h").unwrap();
        let doc = parse(document(
            &resource,
            &strings(&["https://a", "https://b"]),
            &strings(&["offline_access"]),
            None,
            None,
        ));
        assert_eq!(doc["resource"], "https://h");
        assert_eq!(
            doc["authorization_servers"],
            json!(["https://a", "https://b"])
        );
        assert!(doc.get("scopes_supported").is_none(), "{doc}");
        assert!(!doc.to_string().contains(OFFLINE_ACCESS));
    }

    #[test]
    fn dpop_members_and_resource_name() {
        let resource = Resource::parse("https://h/mcp").unwrap();
        let algs = [Algorithm::ES256, Algorithm::EdDSA, Algorithm::PS256];
        let allowed = parse(document(
            &resource,
            &strings(&["https://a"]),
            &[],
            Some((&algs, false)),
            Some("Files"),
        ));
        assert_eq!(
            allowed["dpop_signing_alg_values_supported"],
            json!(["ES256", "EdDSA", "PS256"])
        );
        assert_eq!(allowed["dpop_bound_access_tokens_required"], false);
        assert_eq!(allowed["resource_name"], "Files");
        let required = parse(document(
            &resource,
            &strings(&["https://a"]),
            &[],
            Some((&algs[..1], true)),
            None,
        ));
        assert_eq!(
            required["dpop_signing_alg_values_supported"],
            json!(["ES256"])
        );
        assert_eq!(required["dpop_bound_access_tokens_required"], true);
        assert!(required.get("resource_name").is_none());
        let off = parse(document(
            &resource,
            &strings(&["https://a"]),
            &[],
            None,
            None,
        ));
        assert!(off.get("dpop_signing_alg_values_supported").is_none());
        assert!(off.get("dpop_bound_access_tokens_required").is_none());
    }
}
