//! Capability gates: which declared capability each method and notification needs.
//!
//! Capabilities are kept as the JSON objects the peers exchange (they are open objects whose
//! members differ by version), and checked by path.

use modelctx_types::JsonObject;
use serde_json::Value;

use crate::version::{Direction, Era, ProtocolVersion};

/// The key of the tasks extension in `capabilities.extensions` (2026-07-28).
pub(crate) const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The server's capabilities as written for `version` (the `initialize` result, `server/discover`):
/// `tasks` (the experimental tasks of 2025-11-25) only in 2025-11-25, the one version that
/// defines it; 2026-07-28 has the tasks extension under `extensions` instead, and an older
/// version has no tasks at all. The rest as given.
pub(crate) fn for_version(
    caps: &JsonObject,
    version: ProtocolVersion,
) -> std::borrow::Cow<'_, JsonObject> {
    if version == ProtocolVersion::V2025_11_25 || !caps.contains_key("tasks") {
        return std::borrow::Cow::Borrowed(caps);
    }
    let mut written = caps.clone();
    written.remove("tasks");
    std::borrow::Cow::Owned(written)
}

/// Whether `caps` declares the capability at `path`: every step an object member, and the last
/// one present and not `false` or `null` (sub-capabilities such as `listChanged` are booleans,
/// capabilities are objects).
pub(crate) fn declared(caps: &JsonObject, path: &[&str]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return true;
    };
    let mut object = caps;
    for step in parents {
        match object.get(*step) {
            Some(Value::Object(inner)) => object = inner,
            _ => return false,
        }
    }
    !matches!(
        object.get(*last),
        None | Some(Value::Null | Value::Bool(false))
    )
}

/// The capability of the receiver that a request needs, as a path; `None` when the request needs
/// none. For requests to a server the path is in the server's capabilities, for requests to a
/// client in the client's.
pub(crate) fn request_gate(
    version: ProtocolVersion,
    method: &str,
    direction: Direction,
) -> Option<&'static [&'static str]> {
    let modern = version >= ProtocolVersion::V2026_07_28;
    Some(match (direction, method) {
        (Direction::ToServer, "resources/list" | "resources/templates/list" | "resources/read") => {
            &["resources"]
        }
        (Direction::ToServer, "resources/subscribe" | "resources/unsubscribe") => {
            &["resources", "subscribe"]
        }
        (Direction::ToServer, "prompts/list" | "prompts/get") => &["prompts"],
        (Direction::ToServer, "tools/list" | "tools/call") => &["tools"],
        (Direction::ToServer, "logging/setLevel") => &["logging"],
        // 2024-11-05 defines no capability for completions; the request is always allowed there.
        (Direction::ToServer, "completion/complete") if version == ProtocolVersion::V2024_11_05 => {
            return None;
        }
        (Direction::ToServer, "completion/complete") => &["completions"],
        (_, "tasks/get" | "tasks/update" | "tasks/cancel") if modern => {
            &["extensions", TASKS_EXTENSION]
        }
        (Direction::ToServer, "skills/list" | "skills/get") => {
            &["extensions", modelctx_types::skills::EXTENSION_ID]
        }
        (Direction::ToServer, "resources/directory/read") => &[
            "extensions",
            modelctx_types::skills::EXTENSION_ID,
            modelctx_types::skills::DIRECTORY_READ,
        ],
        (_, "tasks/list") => &["tasks", "list"],
        (_, "tasks/cancel") => &["tasks", "cancel"],
        (_, "tasks/get" | "tasks/result") => &["tasks"],
        (Direction::ToClient, "sampling/createMessage") => &["sampling"],
        (Direction::ToClient, "roots/list") => &["roots"],
        (Direction::ToClient, "elicitation/create") => &["elicitation"],
        _ => return None,
    })
}

/// Whether the receiver declared what `method` with `params` needs. Beyond [`request_gate`]:
/// a URL-mode elicitation needs `elicitation.url`; a form-mode one needs `elicitation.form`, or
/// an `elicitation` object without modes (which means form only); sampling with tools needs
/// `sampling.tools`, and with `includeContext` other than `none`, `sampling.context`
/// (2025-11-25 and later; before, URL mode and tools in sampling do not exist, so no client
/// can answer them).
pub(crate) fn request_allowed(
    version: ProtocolVersion,
    method: &str,
    direction: Direction,
    params: Option<&JsonObject>,
    receiver: &JsonObject,
) -> Result<(), &'static [&'static str]> {
    if let Some(path) = request_gate(version, method, direction)
        && !declared(receiver, path)
    {
        return Err(path);
    }
    let param = |name: &str| params.and_then(|p| p.get(name));
    let modes = version >= ProtocolVersion::V2025_11_25;
    match method {
        "elicitation/create" => {
            let url_mode = param("mode").and_then(Value::as_str) == Some("url");
            let elicitation = receiver.get("elicitation").and_then(Value::as_object);
            let has = |mode: &str| elicitation.is_some_and(|e| e.contains_key(mode));
            let no_modes =
                elicitation.is_some_and(|e| !e.contains_key("form") && !e.contains_key("url"));
            // Before 2025-11-25 there is no URL mode for a client to have declared.
            if url_mode && (!modes || !has("url")) {
                return Err(&["elicitation", "url"]);
            }
            if modes && !url_mode && !has("form") && !no_modes {
                return Err(&["elicitation", "form"]);
            }
        }
        "sampling/createMessage" => {
            // Before 2025-11-25 there are no tools in sampling, nor a `sampling.context`.
            if (param("tools").is_some() || param("toolChoice").is_some())
                && (!modes || !declared(receiver, &["sampling", "tools"]))
            {
                return Err(&["sampling", "tools"]);
            }
            if modes
                && param("includeContext")
                    .and_then(Value::as_str)
                    .is_some_and(|c| c != "none")
                && !declared(receiver, &["sampling", "context"])
            {
                return Err(&["sampling", "context"]);
            }
        }
        _ => {}
    }
    Ok(())
}

/// Whether a client with `capabilities` can answer the server's `method` with `params`:
/// a request of a legacy session, or an input request of a 2026-07-28 `input_required` result
/// (which follows the 2025-11-25 rules). `Err` names the capability missing, as a dotted path
/// (`elicitation.url`, `sampling.tools`, ...). It does not say whether `method` exists in
/// `version`: `ServerSession::send_request` does.
pub fn client_can_answer(
    version: ProtocolVersion,
    method: &str,
    params: Option<&JsonObject>,
    capabilities: &JsonObject,
) -> Result<(), String> {
    let version = match version.era() {
        Era::Modern => ProtocolVersion::V2025_11_25,
        Era::Legacy => version,
    };
    request_allowed(version, method, Direction::ToClient, params, capabilities)
        .map_err(|path| path.join("."))
}

/// The capability of the sender that a notification needs (a server announcing list changes
/// needs to have declared `listChanged`, and so on); `None` when it needs none.
pub(crate) fn notification_gate(method: &str) -> Option<&'static [&'static str]> {
    Some(match method {
        "notifications/tools/list_changed" => &["tools", "listChanged"],
        "notifications/prompts/list_changed" => &["prompts", "listChanged"],
        "notifications/resources/list_changed" => &["resources", "listChanged"],
        "notifications/resources/updated" => &["resources", "subscribe"],
        "notifications/message" => &["logging"],
        "notifications/roots/list_changed" => &["roots", "listChanged"],
        "notifications/tasks/status" => &["tasks"],
        _ => return None,
    })
}

/// A path as a JSON object with `{}` at the end (`["elicitation", "url"]` gives
/// `{"elicitation": {"url": {}}}`), for `requiredCapabilities`.
pub(crate) fn path_object(path: &[&str]) -> JsonObject {
    let mut value = JsonObject::new();
    for step in path.iter().rev() {
        let mut outer = JsonObject::new();
        outer.insert((*step).to_owned(), Value::Object(value));
        value = outer;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> JsonObject {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn the_tasks_capability_is_written_in_2025_11_25_only() {
        let caps = obj(json!({"tools": {}, "tasks": {"list": {}}}));
        let written = for_version(&caps, ProtocolVersion::V2025_11_25);
        assert!(written.contains_key("tasks"));
        for version in [
            ProtocolVersion::V2024_11_05,
            ProtocolVersion::V2025_06_18,
            ProtocolVersion::V2026_07_28,
        ] {
            let written = for_version(&caps, version);
            assert!(!written.contains_key("tasks"), "{version}");
            assert!(written.contains_key("tools"), "{version}");
        }
    }

    #[test]
    fn declared_follows_paths_and_ignores_false() {
        let caps =
            obj(json!({"tools": {}, "resources": {"subscribe": true, "listChanged": false}}));
        assert!(declared(&caps, &["tools"]));
        assert!(declared(&caps, &["resources", "subscribe"]));
        assert!(!declared(&caps, &["resources", "listChanged"]));
        assert!(!declared(&caps, &["prompts"]));
        assert!(!declared(&caps, &["tools", "listChanged"]));
    }

    #[test]
    fn elicitation_modes_are_gated() {
        let v = ProtocolVersion::V2025_11_25;
        let url = obj(json!({"mode": "url"}));
        let form = obj(json!({"mode": "form"}));
        let empty = obj(json!({"elicitation": {}}));
        let both = obj(json!({"elicitation": {"form": {}, "url": {}}}));
        let d = Direction::ToClient;
        assert!(request_allowed(v, "elicitation/create", d, Some(&form), &empty).is_ok());
        assert_eq!(
            request_allowed(v, "elicitation/create", d, Some(&url), &empty),
            Err(&["elicitation", "url"][..])
        );
        assert!(request_allowed(v, "elicitation/create", d, Some(&url), &both).is_ok());
        assert_eq!(
            request_allowed(v, "elicitation/create", d, None, &JsonObject::new()),
            Err(&["elicitation"][..])
        );
    }

    #[test]
    fn sampling_tools_and_context_are_gated() {
        let v = ProtocolVersion::V2025_11_25;
        let d = Direction::ToClient;
        let plain = obj(json!({"sampling": {}}));
        let tools = obj(json!({"tools": []}));
        let ctx = obj(json!({"includeContext": "thisServer"}));
        assert!(request_allowed(v, "sampling/createMessage", d, None, &plain).is_ok());
        assert!(request_allowed(v, "sampling/createMessage", d, Some(&tools), &plain).is_err());
        assert!(request_allowed(v, "sampling/createMessage", d, Some(&ctx), &plain).is_err());
        let full = obj(json!({"sampling": {"tools": {}, "context": {}}}));
        assert!(request_allowed(v, "sampling/createMessage", d, Some(&tools), &full).is_ok());
    }

    #[test]
    fn modern_input_requests_follow_the_2025_11_25_rules() {
        let url = obj(json!({"mode": "url"}));
        let form_only = obj(json!({"elicitation": {}}));
        for v in [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28] {
            assert_eq!(
                client_can_answer(v, "elicitation/create", Some(&url), &form_only),
                Err("elicitation.url".to_owned())
            );
            assert!(client_can_answer(v, "elicitation/create", None, &form_only).is_ok());
            assert_eq!(
                client_can_answer(v, "roots/list", None, &JsonObject::new()),
                Err("roots".to_owned())
            );
        }
    }

    #[test]
    fn url_elicitation_and_sampling_tools_do_not_exist_before_2025_11_25() {
        let v = ProtocolVersion::V2025_06_18;
        let d = Direction::ToClient;
        let all = obj(json!({"elicitation": {"url": {}}, "sampling": {"tools": {}}}));
        let url = obj(json!({"mode": "url"}));
        let tools = obj(json!({"tools": []}));
        assert!(request_allowed(v, "elicitation/create", d, Some(&url), &all).is_err());
        assert!(request_allowed(v, "sampling/createMessage", d, Some(&tools), &all).is_err());
        assert!(request_allowed(v, "elicitation/create", d, None, &all).is_ok());
    }

    #[test]
    fn skills_requests_need_the_extension_and_directory_reads_its_setting() {
        let d = Direction::ToServer;
        let v = ProtocolVersion::V2025_11_25;
        let none = obj(json!({"resources": {}}));
        let plain = obj(json!({"extensions": {"io.modelcontextprotocol/skills": {}}}));
        let dirs =
            obj(json!({"extensions": {"io.modelcontextprotocol/skills": {"directoryRead": true}}}));
        assert!(request_allowed(v, "skills/list", d, None, &none).is_err());
        assert!(request_allowed(v, "skills/get", d, None, &plain).is_ok());
        assert!(request_allowed(v, "resources/directory/read", d, None, &plain).is_err());
        assert!(request_allowed(v, "resources/directory/read", d, None, &dirs).is_ok());
    }

    #[test]
    fn path_object_nests() {
        assert_eq!(
            Value::Object(path_object(&["a", "b"])),
            json!({"a": {"b": {}}})
        );
    }
}
