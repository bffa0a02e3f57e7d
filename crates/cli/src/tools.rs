//! Tools as a terminal user sees them: a tool's arguments in one line (`(a: number, b?:
//! string)`), the whole tool in `tools show`, the arguments of `tools call` from `--args` and
//! `--arg key=value`, and tools that only run as tasks (called with `--task`).

use serde_json::{Map, Value};

/// What `tools list` and `tools call` say of a tool that can only run as a task.
pub(crate) const TASK_ONLY: &str = "task only: call it with --task";

/// The widest argument list `tools list` shows; `tools show` shows them all.
const MAX_SIGNATURE: usize = 60;

/// Whether the tool can only run as a task (`execution.taskSupport` is `"required"`).
pub(crate) fn task_only(tool: &Value) -> bool {
    tool["execution"]["taskSupport"] == "required"
}

/// Why `tools call` does not call tool `name`: it can only run as a task.
pub(crate) fn task_only_refusal(name: &str) -> String {
    format!(
        "tool `{name}` can only run as a task (its execution.taskSupport is \"required\"): call \
         it with `mcx tools call {name} --task`"
    )
}

/// The argument names of an input schema, the required ones first (in the order of its
/// `required`), then the others (in the order of its `properties`).
fn argument_names(schema: &Value) -> Vec<(&str, bool)> {
    let properties = schema["properties"].as_object();
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut names: Vec<(&str, bool)> = Vec::new();
    for name in &required {
        if properties.is_some_and(|p| p.contains_key(*name))
            && !names.iter().any(|(n, _)| n == name)
        {
            names.push((name, true));
        }
    }
    for name in properties.into_iter().flat_map(Map::keys) {
        if !required.contains(&name.as_str()) {
            names.push((name, false));
        }
    }
    names
}

/// The tool's arguments in one line, `(a: number, b?: string)` (`?`: optional), cut at
/// [`MAX_SIGNATURE`] characters with `...`.
pub(crate) fn signature(tool: &Value) -> String {
    let full = full_signature(&tool["inputSchema"]);
    if full.chars().count() <= MAX_SIGNATURE {
        return full;
    }
    let cut: String = full.chars().take(MAX_SIGNATURE - 4).collect();
    format!("{cut}...)")
}

/// Every argument of `schema` in one line.
fn full_signature(schema: &Value) -> String {
    let arguments: Vec<String> = argument_names(schema)
        .into_iter()
        .map(|(name, required)| {
            let optional = if required { "" } else { "?" };
            format!(
                "{name}{optional}: {}",
                type_name(&schema["properties"][name])
            )
        })
        .collect();
    format!("({})", arguments.join(", "))
}

/// The type a JSON schema describes, in short: `string`, `integer|null`, `string[]`,
/// `"a"|"b"` for an enum, the name of a `$ref`, `any` when it does not say.
pub(crate) fn type_name(schema: &Value) -> String {
    if let Some(values) = schema["enum"].as_array() {
        let shown: Vec<String> = values.iter().take(6).map(Value::to_string).collect();
        let more = if values.len() > 6 { "|..." } else { "" };
        return format!("{}{more}", shown.join("|"));
    }
    if let Some(value) = schema.get("const") {
        return value.to_string();
    }
    match &schema["type"] {
        Value::String(kind) if kind == "array" => {
            let items = &schema["items"];
            if items.is_object() {
                let item = type_name(items);
                return if item.contains('|') {
                    format!("({item})[]")
                } else {
                    format!("{item}[]")
                };
            }
            return "array".into();
        }
        Value::String(kind) => return kind.clone(),
        Value::Array(kinds) => {
            let kinds: Vec<&str> = kinds.iter().filter_map(Value::as_str).collect();
            if !kinds.is_empty() {
                return kinds.join("|");
            }
        }
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(members) = schema[key].as_array() {
            let mut kinds: Vec<String> = Vec::new();
            for kind in members.iter().map(type_name) {
                if !kinds.contains(&kind) {
                    kinds.push(kind);
                }
            }
            if !kinds.is_empty() {
                return kinds.join("|");
            }
        }
    }
    if let Some(reference) = schema["$ref"].as_str() {
        return reference.rsplit('/').next().unwrap_or(reference).to_owned();
    }
    "any".into()
}

/// Whether the schema of an argument lets it be a string (`type` is `string` or lists it, or a
/// member of `anyOf`/`oneOf` does): its `--arg` value is then sent as a string as it is.
fn says_string(schema: &Value) -> bool {
    match &schema["type"] {
        Value::String(kind) => return kind == "string",
        Value::Array(kinds) => return kinds.iter().any(|k| k == "string"),
        _ => {}
    }
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|key| schema[*key].as_array())
        .flatten()
        .any(says_string)
}

/// The value of `--arg key=text`: `text` as JSON when it is a JSON number, boolean, null,
/// object or array, and as a string otherwise or when `schema` (the argument's) says string.
pub(crate) fn arg_value(text: &str, schema: &Value) -> Value {
    if says_string(schema) {
        return Value::String(text.to_owned());
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::String(_)) | Err(_) => Value::String(text.to_owned()),
        Ok(value) => value,
    }
}

/// The arguments of `tools call`: the `--args` object with each `--arg key=value` set over it
/// (the last one of a key wins), typed by the tool's `input_schema` when it is known.
pub(crate) fn arguments(
    args: Option<&str>,
    arg: &[String],
    input_schema: &Value,
) -> Result<Value, String> {
    let mut arguments = match args {
        None => Map::new(),
        Some(text) => match serde_json::from_str(text) {
            Ok(Value::Object(object)) => object,
            Ok(_) => return Err("--args: must be a JSON object".into()),
            Err(e) => return Err(format!("--args: invalid JSON: {e}")),
        },
    };
    for item in arg {
        let (key, text) = item
            .split_once('=')
            .ok_or_else(|| format!("--arg `{item}`: expected key=value"))?;
        if key.is_empty() {
            return Err(format!("--arg `{item}`: the name is empty"));
        }
        let value = arg_value(text, &input_schema["properties"][key]);
        arguments.insert(key.to_owned(), value);
    }
    Ok(Value::Object(arguments))
}

/// The tool in full, as `tools show` prints it: lines of text.
pub(crate) fn describe(tool: &Value) -> Vec<String> {
    let mut lines = Vec::new();
    let name = tool["name"].as_str().unwrap_or("");
    let title = tool["title"]
        .as_str()
        .or_else(|| tool["annotations"]["title"].as_str());
    match title {
        Some(title) if title != name => lines.push(format!("{name} - {title}")),
        _ => lines.push(name.to_owned()),
    }
    if let Some(description) = tool["description"].as_str() {
        lines.extend(description.lines().map(|l| format!("  {l}")));
    }
    lines.push(String::new());

    let input = &tool["inputSchema"];
    let names = argument_names(input);
    if names.is_empty() {
        lines.push("arguments: none".into());
    } else {
        lines.push(format!("arguments: {}", full_signature(input)));
        let rows: Vec<Vec<String>> = names
            .iter()
            .map(|(name, required)| {
                let schema = &input["properties"][*name];
                vec![
                    format!("  {name}"),
                    type_name(schema),
                    if *required { "required" } else { "optional" }.into(),
                    crate::output::first_line(&schema["description"]),
                ]
            })
            .collect();
        let table = crate::output::format_table(&["", "", "", ""], &rows);
        lines.extend(table.lines().map(str::to_owned));
    }
    lines.push(String::new());
    lines.push("input schema:".into());
    lines.extend(pretty(input));
    match tool.get("outputSchema") {
        Some(output) if !output.is_null() => {
            lines.push("output schema:".into());
            lines.extend(pretty(output));
        }
        _ => lines.push("output schema: none".into()),
    }
    match tool["annotations"].as_object() {
        Some(annotations) if !annotations.is_empty() => {
            lines.push("annotations:".into());
            for (key, value) in annotations {
                lines.push(format!("  {key}: {}", scalar(value)));
            }
        }
        _ => lines.push("annotations: none".into()),
    }
    let support = match tool["execution"]["taskSupport"].as_str() {
        Some("required") => format!("required ({TASK_ONLY})"),
        Some(other) => other.to_owned(),
        None => "forbidden (not given)".into(),
    };
    lines.push(format!("task support: {support}"));
    if let Some(execution) = tool["execution"].as_object() {
        for (key, value) in execution.iter().filter(|(k, _)| *k != "taskSupport") {
            lines.push(format!("execution {key}: {}", scalar(value)));
        }
    }
    let shown = [
        "name",
        "title",
        "description",
        "inputSchema",
        "outputSchema",
        "annotations",
        "execution",
    ];
    if let Some(object) = tool.as_object() {
        for (key, value) in object.iter().filter(|(k, _)| !shown.contains(&k.as_str())) {
            lines.push(format!("{key}: {}", scalar(value)));
        }
    }
    lines
}

/// A JSON value in a line: a string as it is, anything else as JSON.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A JSON value pretty-printed, indented by two spaces.
fn pretty(value: &Value) -> Vec<String> {
    serde_json::to_string_pretty(value)
        .unwrap_or_else(|_| value.to_string())
        .lines()
        .map(|l| format!("  {l}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_signature_names_types_and_marks_optional_arguments() {
        let add = json!({"name": "add", "inputSchema": {"type": "object",
            "properties": {"b": {"type": "number"}, "a": {"type": "number"}},
            "required": ["a", "b"]}});
        assert_eq!(signature(&add), "(a: number, b: number)");
        let countdown = json!({"inputSchema": {"type": "object", "properties": {
            "delay_ms": {"type": ["integer", "null"]}, "steps": {"type": "integer"}},
            "required": ["steps"]}});
        assert_eq!(
            signature(&countdown),
            "(steps: integer, delay_ms?: integer|null)"
        );
        assert_eq!(signature(&json!({"inputSchema": {"type": "object"}})), "()");
        // Not an object at all: no arguments rather than a failure.
        assert_eq!(signature(&json!({"name": "x"})), "()");
        // A required name without a property is left out.
        let odd = json!({"inputSchema": {"properties": {"a": {}}, "required": ["z", "a", "a"]}});
        assert_eq!(signature(&odd), "(a: any)");
    }

    #[test]
    fn a_long_signature_is_cut() {
        let properties: Map<String, Value> = (0..20)
            .map(|i| (format!("argument_{i:02}"), json!({"type": "string"})))
            .collect();
        let tool = json!({"inputSchema": {"properties": properties}});
        let shown = signature(&tool);
        assert_eq!(shown.chars().count(), MAX_SIGNATURE);
        assert!(shown.starts_with("(argument_00?: string, "), "{shown}");
        assert!(shown.ends_with("...)"), "{shown}");
        // `tools show` has them all.
        let lines = describe(&tool).join("\n");
        assert!(lines.contains("argument_19?: string)"), "{lines}");
    }

    #[test]
    fn type_names() {
        for (schema, name) in [
            (json!({"type": "string"}), "string"),
            (
                json!({"type": "array", "items": {"type": "string"}}),
                "string[]",
            ),
            (
                json!({"type": "array", "items": {"type": ["string", "null"]}}),
                "(string|null)[]",
            ),
            (json!({"type": "array"}), "array"),
            (json!({"enum": ["a", "b", 1]}), r#""a"|"b"|1"#),
            (json!({"enum": [1, 2, 3, 4, 5, 6, 7]}), "1|2|3|4|5|6|..."),
            (json!({"const": "fixed"}), r#""fixed""#),
            (
                json!({"anyOf": [{"type": "string"}, {"type": "null"}, {"type": "string"}]}),
                "string|null",
            ),
            (json!({"oneOf": [{"$ref": "#/$defs/Point"}]}), "Point"),
            (json!({"description": "anything"}), "any"),
            (json!(true), "any"),
        ] {
            assert_eq!(type_name(&schema), name, "{schema}");
        }
    }

    #[test]
    fn arg_values_are_json_unless_they_are_strings_or_the_schema_says_string() {
        let none = Value::Null;
        assert_eq!(arg_value("2", &none), json!(2));
        assert_eq!(arg_value("2.5", &none), json!(2.5));
        assert_eq!(arg_value("true", &none), json!(true));
        assert_eq!(arg_value("null", &none), json!(null));
        assert_eq!(arg_value(r#"{"x": [1]}"#, &none), json!({"x": [1]}));
        assert_eq!(arg_value("[1, 2]", &none), json!([1, 2]));
        assert_eq!(arg_value("hello world", &none), json!("hello world"));
        assert_eq!(arg_value("", &none), json!(""));
        assert_eq!(arg_value("02134", &none), json!("02134"));
        // A JSON string is kept as written, quotes and all.
        assert_eq!(arg_value(r#""quoted""#, &none), json!(r#""quoted""#));
        // The schema says string: the text as it is.
        let string = json!({"type": "string"});
        assert_eq!(arg_value("42", &string), json!("42"));
        assert_eq!(arg_value("true", &string), json!("true"));
        assert_eq!(
            arg_value("42", &json!({"type": ["string", "null"]})),
            json!("42")
        );
        assert_eq!(
            arg_value(
                "42",
                &json!({"anyOf": [{"type": "string"}, {"type": "null"}]})
            ),
            json!("42")
        );
        // It says number: JSON.
        assert_eq!(arg_value("42", &json!({"type": "number"})), json!(42));
    }

    #[test]
    fn arg_merges_into_args_and_wins() {
        let schema = json!({"properties": {"text": {"type": "string"}, "n": {"type": "integer"}}});
        let merged = arguments(
            Some(r#"{"text": "from args", "keep": 1}"#),
            &[
                "text=7".into(),
                "n=3".into(),
                "n=4".into(),
                "extra=a=b".into(),
            ],
            &schema,
        )
        .unwrap();
        assert_eq!(
            merged,
            json!({"text": "7", "keep": 1, "n": 4, "extra": "a=b"})
        );
        assert_eq!(arguments(None, &[], &Value::Null).unwrap(), json!({}));
        for (args, arg, error) in [
            (Some("{"), &[][..], "--args: invalid JSON"),
            (Some("[1]"), &[][..], "--args: must be a JSON object"),
            (
                None,
                &["novalue".to_owned()][..],
                "--arg `novalue`: expected key=value",
            ),
            (
                None,
                &["=1".to_owned()][..],
                "--arg `=1`: the name is empty",
            ),
        ] {
            let failed = arguments(args, arg, &Value::Null).unwrap_err();
            assert!(failed.starts_with(error), "{failed}");
        }
    }

    #[test]
    fn a_tool_is_described_in_full() {
        let tool = json!({
            "name": "add",
            "title": "Addition",
            "description": "Adds two numbers.\nExactly.",
            "inputSchema": {"type": "object", "properties": {
                "a": {"type": "number", "description": "One number."},
                "b": {"type": "number"}}, "required": ["a"]},
            "outputSchema": {"type": "object", "properties": {"sum": {"type": "number"}}},
            "annotations": {"readOnlyHint": true},
            "execution": {"taskSupport": "required"},
            "icons": [{"src": "https://example.com/i.png"}]
        });
        let text = describe(&tool).join("\n");
        for expected in [
            "add - Addition\n  Adds two numbers.\n  Exactly.\n",
            "arguments: (a: number, b?: number)\n  a  number  required  One number.\n  b  number  optional\n",
            "input schema:\n  {\n    \"properties\": {",
            "output schema:\n  {\n",
            "\"sum\": {",
            "annotations:\n  readOnlyHint: true\n",
            "task support: required (task only: call it with --task)",
            "icons: [{\"src\":\"https://example.com/i.png\"}]",
        ] {
            assert!(text.contains(expected), "{expected:?} in:\n{text}");
        }
        assert!(task_only(&tool));
        let plain = json!({"name": "echo", "inputSchema": {"type": "object"}});
        let text = describe(&plain).join("\n");
        for expected in [
            "echo\n\narguments: none",
            "output schema: none",
            "annotations: none",
            "task support: forbidden (not given)",
        ] {
            assert!(text.contains(expected), "{expected:?} in:\n{text}");
        }
        assert!(!task_only(&plain));
        assert!(!task_only(
            &json!({"execution": {"taskSupport": "optional"}})
        ));
    }
}
