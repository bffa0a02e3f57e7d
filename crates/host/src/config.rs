//! The `mcpServers` config file: [`HostConfig::from_json`], [`HostConfig::from_json_with`] and
//! [`HostConfig::load`].
//!
//! # Formats
//!
//! The file is one JSON object. Its `mcpServers` member (Claude Desktop, Claude Code's
//! `.mcp.json`, Cursor, Cline, LangChain-style dicts) or its `servers` member (VS Code's
//! `mcp.json`) maps each server's name to its entry; a file with both, or with neither, is an
//! error. Every other top-level member (VS Code's `inputs`, Claude Desktop's settings, ...) is
//! ignored. The servers keep the order of the file.
//!
//! An entry is a JSON object:
//!
//! - a stdio server when it has `command` (a string), with `args` (an array of strings), `env`
//!   (an object of strings) and `cwd` (a string), each optional;
//! - an HTTP server when it has `url` (`http://` or `https://`), with `headers` (an object of
//!   strings), optional;
//! - `type`, or LangChain's `transport`, may name the transport: `"stdio"`, or `"http"`,
//!   `"streamable-http"`, `"streamable_http"`, `"streamableHttp"` (Cline) and `"sse"`, which all
//!   make a [`TransportConfig::Http`] (the client falls back to the 2024-11-05 HTTP+SSE transport
//!   by itself). It is checked against the fields: `"stdio"` with a `url`, `"http"` with a
//!   `command`, `type` and `transport` that disagree are errors; `"websocket"` is an error (not
//!   an MCP transport this crate speaks). Without it, `command` or `url` decides;
//! - `disabled` (`true` or `false`, Cline and Roo Code) and `timeout` (milliseconds, a positive
//!   integer) go to [`ServerConfig::disabled`] and [`ServerConfig::timeout`];
//! - every other member is kept verbatim in [`ServerConfig::extra`] for the application (VS
//!   Code's `envFile` among them: it is not read).
//!
//! An entry with both `command` and `url`, with neither, with `headers` on a stdio server or
//! `args`, `env` or `cwd` on an HTTP one (fields that would be silently ignored) is an error.
//!
//! # Variable expansion
//!
//! As Claude Code does, `${VAR}` and `${VAR:-default}` are expanded in `command`, each of `args`,
//! the values of `env`, `cwd`, `url` and the values of `headers` (not in names, nor in `extra`);
//! VS Code's `${env:VAR}` (and `${env:VAR:-default}`) is the same thing.
//!
//! - `${VAR}` is the variable's value when it is set (an empty value included); else the default
//!   after `:-` when there is one (it ends at the first `}`; it is not expanded itself); else it
//!   is an error of the entry naming the variable and the field, never an empty string. The
//!   values come from the process environment ([`HostConfig::from_json`], where a value that is
//!   not UTF-8 counts as unset) or from the function given to [`HostConfig::from_json_with`].
//! - `$VAR` without braces is left as written, and so is a lone `$`.
//! - `$${` is the escape: it stands for a literal `${` (so `$${HOME}` gives `${HOME}`). Nothing
//!   else is an escape (`$$` elsewhere stays `$$`).
//! - A value is not expanded again, and a `${` inside `${...}` (a nested default) is an error.
//! - `${input:id}` (VS Code's prompts) is an error: it needs an input the host does not prompt
//!   for. VS Code's other variables are not expanded: `${config:...}`, `${command:...}` and any
//!   other `${prefix:...}` are errors, and `${workspaceFolder}`, `${userHome}`, ... are plain
//!   names, an error (saying so) unless the environment has such a variable.
//! - In a `disabled` entry a reference that cannot be resolved (unset, `${input:...}`) is no
//!   error: it stays as written, since the server is never started.
//!
//! # Errors
//!
//! Every problem of the file is reported at once ([`ConfigErrors`]), not just the first: each
//! bad entry with its server's name and the 1-based line where its entry starts
//! ([`ConfigError::line`]), and the line of the bad field in the message when it is another one.
//! A JSON syntax error is one error with serde_json's line, and its column in the message. A
//! server name must not be empty, and a name the text gives twice is an error (a JSON object
//! parse keeps the last entry silently); so is a member an entry gives twice. No input makes
//! these functions panic.
//!
//! The lines come from a small scan of the text once serde_json has accepted it: a tokenizer
//! over the JSON text that tracks strings and nesting and records the line of each member's key
//! (and of each array item). The same scan finds the keys the text repeats.
//!
//! # What it does not do
//!
//! It reads no `envFile`, prompts for no `${input:...}`, expands no workspace-folder or other
//! VS Code variables, and reads strict JSON only (no comments or trailing commas, which VS Code
//! tolerates; a UTF-8 byte order mark is skipped). It does not start anything: [`Host`] does.
//!
//! ```
//! use modelctx_host::{HostConfig, TransportConfig};
//!
//! let text = r#"{
//!   "mcpServers": {
//!     "files": { "command": "npx", "args": ["-y", "files-server", "${HOME}"] },
//!     "search": {
//!       "type": "http",
//!       "url": "${SEARCH_URL:-https://search.example/mcp}",
//!       "headers": { "Authorization": "Bearer ${SEARCH_TOKEN}" }
//!     }
//!   }
//! }"#;
//! let env = |name: &str| match name {
//!     "HOME" => Some("/home/ada".to_string()),
//!     "SEARCH_TOKEN" => Some("t0k3n".to_string()),
//!     _ => None,
//! };
//! let config = HostConfig::from_json_with(text, env).unwrap();
//! assert_eq!(config.servers[0].name, "files");
//! assert_eq!(config.servers[1].line, 4);
//! let TransportConfig::Http { url, headers } = &config.servers[1].transport else { panic!() };
//! assert_eq!(url, "https://search.example/mcp");
//! assert_eq!(headers["Authorization"], "Bearer t0k3n");
//!
//! // Without SEARCH_TOKEN, the entry is reported by name and line.
//! let errors = HostConfig::from_json_with(text, |_| None).unwrap_err();
//! assert_eq!(errors.0[0].server.as_deref(), Some("files"));
//! assert_eq!(errors.0[0].line, 3);
//! ```
//!
//! [`Host`]: crate::Host

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use modelctx_types::JsonObject;
use serde_json::Value;

/// Every server of a config file, in the file's order.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct HostConfig {
    /// The servers, in the order of the file.
    pub servers: Vec<ServerConfig>,
}

/// One server of the config.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// Its name: the key of its entry.
    pub name: String,
    /// How it is reached.
    pub transport: TransportConfig,
    /// `"disabled": true`: listed, never started.
    pub disabled: bool,
    /// How long its connection may take (`"timeout"`, milliseconds); `None`: the host's default.
    pub timeout: Option<Duration>,
    /// The fields of the entry this crate does not read, verbatim (for the application).
    pub extra: JsonObject,
    /// The line of the file where the entry starts (1-based; 0 for a config built in code).
    pub line: usize,
}

impl ServerConfig {
    /// A server reached over stdio, built in code.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: Vec<String>) -> Self {
        ServerConfig {
            name: name.into(),
            transport: TransportConfig::Stdio {
                command: command.into(),
                args,
                env: BTreeMap::new(),
                cwd: None,
            },
            disabled: false,
            timeout: None,
            extra: JsonObject::new(),
            line: 0,
        }
    }

    /// A server reached over Streamable HTTP, built in code.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        ServerConfig {
            name: name.into(),
            transport: TransportConfig::Http {
                url: url.into(),
                headers: BTreeMap::new(),
            },
            disabled: false,
            timeout: None,
            extra: JsonObject::new(),
            line: 0,
        }
    }
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum TransportConfig {
    /// A child process speaking MCP on its stdin and stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables set for it (over the safelisted environment the client passes on).
        env: BTreeMap<String, String>,
        /// Its working directory; `None`: the host's.
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint (`"type": "http"`, `"sse"` and LangChain's
    /// `"streamable_http"`: the client falls back to the 2024-11-05 HTTP+SSE transport by itself).
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
    },
}

/// One problem of a config file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", display_error(self))]
#[non_exhaustive]
pub struct ConfigError {
    /// The server whose entry is wrong; `None` for the file as a whole.
    pub server: Option<String>,
    /// The line (1-based; 0 when unknown).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

fn display_error(error: &ConfigError) -> String {
    match (&error.server, error.line) {
        (Some(server), 0) => format!("server {server:?}: {}", error.message),
        (Some(server), line) => format!("line {line}: server {server:?}: {}", error.message),
        (None, 0) => error.message.clone(),
        (None, line) => format!("line {line}: {}", error.message),
    }
}

/// Every problem of a config file (at least one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct ConfigErrors(pub Vec<ConfigError>);

/// The member of the file that lists the servers (Claude Desktop, Claude Code, Cursor, ...).
const MCP_SERVERS: &str = "mcpServers";
/// VS Code's name for it.
const VS_CODE_SERVERS: &str = "servers";

/// The members of an entry this module reads; every other one goes to `extra`.
const KNOWN_FIELDS: [&str; 10] = [
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "type",
    "transport",
    "disabled",
    "timeout",
];

/// VS Code's predefined variables, named in the error when the environment has none of them.
const VS_CODE_VARIABLES: [&str; 11] = [
    "workspaceFolder",
    "workspaceFolderBasename",
    "workspaceRoot",
    "userHome",
    "cwd",
    "file",
    "fileBasename",
    "fileDirname",
    "relativeFile",
    "pathSeparator",
    "/",
];

impl HostConfig {
    /// Reads a config from its JSON text, expanding `${VAR}` from the process environment (see
    /// the [module docs](self) for the formats and the rules).
    ///
    /// # Errors
    ///
    /// Every problem of the text: a JSON syntax error, or each bad entry with its name and line.
    pub fn from_json(text: &str) -> Result<HostConfig, ConfigErrors> {
        Self::from_json_with(text, |name| std::env::var(name).ok())
    }

    /// Reads a config from its JSON text, expanding `${VAR}` with `env` (`None`: unset), for
    /// tests and for hosts that keep their own environment.
    ///
    /// # Errors
    ///
    /// As [`HostConfig::from_json`].
    pub fn from_json_with(
        text: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<HostConfig, ConfigErrors> {
        parse(text, &env)
    }

    /// Reads the config file at `path` (see [`HostConfig::from_json`]).
    ///
    /// # Errors
    ///
    /// A file that cannot be read (missing, not UTF-8, ...) is one [`ConfigError`] naming the
    /// path and the cause; else as [`HostConfig::from_json`].
    pub fn load(path: impl AsRef<Path>) -> Result<HostConfig, ConfigErrors> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| {
            ConfigErrors(vec![ConfigError {
                server: None,
                line: 0,
                message: format!("cannot read the config file {}: {error}", path.display()),
            }])
        })?;
        Self::from_json(&text)
    }
}

fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<HostConfig, ConfigErrors> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(error) => return Err(ConfigErrors(vec![syntax_error(&error)])),
    };
    let root = Scanner::new(text).document();
    let mut errors = Vec::new();
    let servers = read_config(&value, root.as_ref(), env, &mut errors);
    if errors.is_empty() {
        Ok(HostConfig { servers })
    } else {
        Err(ConfigErrors(errors))
    }
}

fn syntax_error(error: &serde_json::Error) -> ConfigError {
    let full = error.to_string();
    let position = format!(" at line {} column {}", error.line(), error.column());
    let what = full.strip_suffix(&position).unwrap_or(&full);
    let message = if error.line() == 0 {
        format!("not valid JSON: {what}")
    } else {
        format!("not valid JSON (column {}): {what}", error.column())
    };
    ConfigError {
        server: None,
        line: error.line(),
        message,
    }
}

fn file_error(line: usize, message: String) -> ConfigError {
    ConfigError {
        server: None,
        line,
        message,
    }
}

fn read_config(
    value: &Value,
    root: Option<&Node>,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
) -> Vec<ServerConfig> {
    let root_line = root.map_or(1, |node| node.line);
    let Value::Object(top) = value else {
        errors.push(file_error(
            root_line,
            format!(
                "the config must be a JSON object with a {MCP_SERVERS:?} (or VS Code's \
                 {VS_CODE_SERVERS:?}) member"
            ),
        ));
        return Vec::new();
    };
    if let Some(root) = root {
        for (first, again) in repeats(root) {
            if again.key == MCP_SERVERS || again.key == VS_CODE_SERVERS {
                errors.push(file_error(
                    again.line,
                    format!(
                        "{:?} is given twice (first at line {}): JSON keeps only the last",
                        again.key, first.line
                    ),
                ));
            }
        }
    }
    let key = match (top.get(MCP_SERVERS), top.get(VS_CODE_SERVERS)) {
        (Some(_), Some(_)) => {
            let line = member_line(root, MCP_SERVERS).max(member_line(root, VS_CODE_SERVERS));
            errors.push(file_error(
                line,
                format!(
                    "both {MCP_SERVERS:?} and {VS_CODE_SERVERS:?}: list the servers in one of them"
                ),
            ));
            return Vec::new();
        }
        (Some(_), None) => MCP_SERVERS,
        (None, Some(_)) => VS_CODE_SERVERS,
        (None, None) => {
            errors.push(file_error(
                root_line,
                format!("no {MCP_SERVERS:?} member (nor VS Code's {VS_CODE_SERVERS:?}) lists the servers"),
            ));
            return Vec::new();
        }
    };
    let Some(Value::Object(entries)) = top.get(key) else {
        errors.push(file_error(
            member_line(root, key),
            format!("{key:?} must be an object mapping each server's name to its entry"),
        ));
        return Vec::new();
    };
    let map = child(root, key);
    // The file's order comes from the scan (serde_json's map is sorted); without it (it cannot
    // fail on text serde_json accepted, but if it did), the map's order and no lines.
    let listed: Vec<(&str, usize)> = match map {
        Some(node) if matches!(node.shape, Shape::Object(_)) => node
            .members()
            .iter()
            .map(|member| (member.key.as_str(), member.line))
            .collect(),
        _ => entries.keys().map(|name| (name.as_str(), 0)).collect(),
    };
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut servers = Vec::new();
    for (name, line) in listed {
        if let Some(first) = seen.get(name) {
            errors.push(ConfigError {
                server: Some(name.to_string()),
                line,
                message: format!(
                    "a second entry with this name (the first is at line {first}): JSON keeps \
                     only the last one, so give each server its own name"
                ),
            });
            continue;
        }
        seen.insert(name, line);
        let Some(entry) = entries.get(name) else {
            continue;
        };
        // The value serde_json kept is the last one the text gives: read it with its own lines.
        let node = map
            .and_then(|map| map.member(name))
            .map(|member| &member.value);
        let mut entry_errors = EntryErrors {
            name,
            line,
            node,
            found: Vec::new(),
        };
        if let Some(server) = read_entry(entry, env, &mut entry_errors) {
            servers.push(server);
        }
        // In the order of the file (a stable sort: a field's problems keep their order).
        entry_errors.found.sort_by_key(|(line, _)| *line);
        errors.extend(entry_errors.found.into_iter().map(|(_, error)| error));
    }
    servers
}

/// A transport an entry's `type` / `transport` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Stdio,
    Http,
    WebSocket,
}

fn kind_of(name: &str) -> Option<Kind> {
    match name {
        "stdio" => Some(Kind::Stdio),
        "http" | "streamable-http" | "streamable_http" | "streamableHttp" | "sse" => {
            Some(Kind::Http)
        }
        "websocket" => Some(Kind::WebSocket),
        _ => None,
    }
}

/// The errors of one entry, with what they need to say where.
struct EntryErrors<'a> {
    name: &'a str,
    line: usize,
    node: Option<&'a Node>,
    /// Each problem found, with the line of the field it concerns (the entry's for the entry).
    found: Vec<(usize, ConfigError)>,
}

impl EntryErrors<'_> {
    fn failed(&self) -> bool {
        !self.found.is_empty()
    }

    fn push(&mut self, field_line: usize, message: String) {
        let error = ConfigError {
            server: Some(self.name.to_string()),
            line: self.line,
            message,
        };
        self.found.push((field_line, error));
    }

    /// A problem of the entry as a whole.
    fn entry(&mut self, message: impl std::fmt::Display) {
        self.push(self.line, message.to_string());
    }

    /// A problem of a field at `line` (the entry's when 0).
    fn at(&mut self, field: &str, line: usize, message: impl std::fmt::Display) {
        if line == 0 || line == self.line {
            self.push(self.line, format!("`{field}`: {message}"));
        } else {
            self.push(line, format!("`{field}` (line {line}): {message}"));
        }
    }

    /// A problem of the member `field` of the entry.
    fn field(&mut self, field: &str, message: impl std::fmt::Display) {
        let line = member_line(self.node, field);
        self.at(field, line, message);
    }

    /// The line of `field`'s item `index` (an array's), or of its member `key` (an object's).
    fn item_line(&self, field: &str, index: usize) -> usize {
        match child(self.node, field).map(|node| &node.shape) {
            Some(Shape::Array(items)) => items.get(index).map_or(0, |item| item.line),
            _ => 0,
        }
    }

    fn key_line(&self, field: &str, key: &str) -> usize {
        member_line(child(self.node, field), key)
    }

    fn string<'v>(&mut self, fields: &'v JsonObject, field: &str) -> Option<&'v str> {
        match fields.get(field)? {
            Value::String(text) => Some(text),
            _ => {
                self.field(field, "must be a string");
                None
            }
        }
    }

    fn strings<'v>(&mut self, fields: &'v JsonObject, field: &str) -> Vec<&'v str> {
        match fields.get(field) {
            None => Vec::new(),
            Some(Value::Array(items)) => {
                let mut strings = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    match item {
                        Value::String(text) => strings.push(text.as_str()),
                        _ => {
                            let line = self.item_line(field, index);
                            self.at(&format!("{field}[{index}]"), line, "must be a string");
                        }
                    }
                }
                strings
            }
            Some(_) => {
                self.field(field, "must be an array of strings");
                Vec::new()
            }
        }
    }

    fn string_map<'v>(&mut self, fields: &'v JsonObject, field: &str) -> Vec<(&'v str, &'v str)> {
        match fields.get(field) {
            None => Vec::new(),
            Some(Value::Object(members)) => {
                let mut pairs = Vec::with_capacity(members.len());
                for (key, value) in members {
                    match value {
                        Value::String(text) => pairs.push((key.as_str(), text.as_str())),
                        _ => {
                            let line = self.key_line(field, key);
                            self.at(&format!("{field}.{key}"), line, "must be a string");
                        }
                    }
                }
                pairs
            }
            Some(_) => {
                self.field(field, "must be an object of strings");
                Vec::new()
            }
        }
    }

    /// The transport `type` and `transport` name, and the member that named it.
    fn kind(&mut self, fields: &JsonObject) -> Option<(Kind, &'static str)> {
        let mut found: Option<(Kind, &'static str, &str)> = None;
        for field in ["type", "transport"] {
            match fields.get(field) {
                None => {}
                Some(Value::String(name)) => match (kind_of(name), found) {
                    (Some(kind), Some((first, first_field, first_name))) if kind != first => {
                        self.field(
                            field,
                            format_args!("is {name:?} but `{first_field}` is {first_name:?}"),
                        );
                    }
                    (Some(_), Some(_)) => {}
                    (Some(kind), None) => found = Some((kind, field, name)),
                    (None, _) => self.field(
                        field,
                        format_args!(
                            "{name:?} is no transport: \"stdio\" or \"http\" (also \
                             \"streamable-http\", \"streamable_http\", \"streamableHttp\", \"sse\")"
                        ),
                    ),
                },
                Some(_) => self.field(field, "must be a string such as \"stdio\" or \"http\""),
            }
        }
        found.map(|(kind, field, _)| (kind, field))
    }

    /// `text` with its variables expanded; a problem is reported on `field` at `line`.
    fn expand(&mut self, expander: &Expander<'_>, field: &str, line: usize, text: &str) -> String {
        let mut problems = Vec::new();
        let expanded = expander.expand(text, &mut problems);
        for problem in problems {
            self.at(field, line, problem);
        }
        expanded
    }
}

fn read_entry(
    value: &Value,
    env: &dyn Fn(&str) -> Option<String>,
    e: &mut EntryErrors<'_>,
) -> Option<ServerConfig> {
    if e.name.is_empty() {
        e.entry("a server's name must not be empty");
    }
    let Value::Object(fields) = value else {
        e.entry("the entry must be a JSON object (with `command` or `url`)");
        return None;
    };
    if let Some(node) = e.node {
        for (first, again) in repeats(node) {
            let message = format!(
                "is given twice (first at line {}): JSON keeps only the last",
                first.line
            );
            e.at(&again.key, again.line, message);
        }
    }

    let disabled = match fields.get("disabled") {
        None => false,
        Some(Value::Bool(disabled)) => *disabled,
        Some(_) => {
            e.field("disabled", "must be true or false");
            false
        }
    };
    let timeout = match fields.get("timeout") {
        None => None,
        Some(value) => match value.as_u64() {
            Some(millis) if millis > 0 => Some(Duration::from_millis(millis)),
            _ => {
                e.field("timeout", "must be a positive whole number of milliseconds");
                None
            }
        },
    };
    let kind = e.kind(fields);
    let command = e.string(fields, "command");
    let url = e.string(fields, "url");
    let cwd = e.string(fields, "cwd");
    let args = e.strings(fields, "args");
    let vars = e.string_map(fields, "env");
    let headers = e.string_map(fields, "headers");
    let extra: JsonObject = fields
        .iter()
        .filter(|(key, _)| !KNOWN_FIELDS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();

    let has_command = fields.contains_key("command");
    let has_url = fields.contains_key("url");
    let stdio = match (kind, has_command, has_url) {
        (Some((Kind::WebSocket, field)), _, _) => {
            e.field(
                field,
                "\"websocket\" is not supported: the MCP transports are stdio and Streamable \
                 HTTP (with its HTTP+SSE fallback)",
            );
            None
        }
        (_, true, true) => {
            e.entry("has both `command` (a stdio server) and `url` (an HTTP server): keep one");
            None
        }
        (Some((Kind::Stdio, field)), false, true) => {
            e.field(field, "is \"stdio\" but the entry has `url`, not `command`");
            None
        }
        (Some((Kind::Stdio, field)), false, false) => {
            e.field(field, "is \"stdio\" but the entry has no `command`");
            None
        }
        (Some((Kind::Http, field)), true, false) => {
            e.field(
                field,
                "names an HTTP transport but the entry has `command`, not `url`",
            );
            None
        }
        (Some((Kind::Http, field)), false, false) => {
            e.field(field, "names an HTTP transport but the entry has no `url`");
            None
        }
        (_, true, false) => Some(true),
        (_, false, true) => Some(false),
        (None, false, false) => {
            // Other hosts' names for `url` (Gemini CLI's `httpUrl`, Windsurf's `serverUrl`).
            match ["httpUrl", "serverUrl"]
                .iter()
                .find(|name| fields.contains_key(**name))
            {
                Some(name) => e.entry(format_args!(
                    "needs `command` (a stdio server) or `url` (an HTTP server): `{name}` is \
                     another host's name for `url`"
                )),
                None => e.entry("needs `command` (a stdio server) or `url` (an HTTP server)"),
            }
            None
        }
    };
    match stdio {
        Some(true) if fields.contains_key("headers") => {
            e.field(
                "headers",
                "is for HTTP servers; this one is a stdio server (`command`)",
            );
        }
        Some(false) => {
            for field in ["args", "env", "cwd"] {
                if fields.contains_key(field) {
                    e.field(
                        field,
                        "is for stdio servers; this one is an HTTP server (`url`)",
                    );
                }
            }
        }
        _ => {}
    }

    let expander = Expander {
        env,
        keep_unresolved: disabled,
    };
    let transport = if stdio == Some(true) {
        let command = command.map(|command| {
            let line = member_line(e.node, "command");
            e.expand(&expander, "command", line, command)
        });
        if command.as_deref() == Some("") {
            e.field("command", "is empty");
        }
        let args: Vec<String> = args
            .iter()
            .enumerate()
            .map(|(index, arg)| {
                let line = e.item_line("args", index);
                e.expand(&expander, &format!("args[{index}]"), line, arg)
            })
            .collect();
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(key, value)| {
                let line = e.key_line("env", key);
                let value = e.expand(&expander, &format!("env.{key}"), line, value);
                (key.to_string(), value)
            })
            .collect();
        let cwd = cwd.map(|cwd| {
            let line = member_line(e.node, "cwd");
            e.expand(&expander, "cwd", line, cwd)
        });
        if cwd.as_deref() == Some("") {
            e.field("cwd", "is empty");
        }
        command.map(|command| TransportConfig::Stdio {
            command,
            args,
            env: vars,
            cwd: cwd.map(PathBuf::from),
        })
    } else if stdio == Some(false) {
        let url = url.map(|url| {
            let line = member_line(e.node, "url");
            e.expand(&expander, "url", line, url)
        });
        if let Some(url) = &url
            && !is_http_url(url)
        {
            e.field("url", "must be an http:// or https:// URL");
        }
        let headers: BTreeMap<String, String> = headers
            .iter()
            .map(|(name, value)| {
                let line = e.key_line("headers", name);
                let value = e.expand(&expander, &format!("headers.{name}"), line, value);
                (name.to_string(), value)
            })
            .collect();
        url.map(|url| TransportConfig::Http { url, headers })
    } else {
        None
    };
    if e.failed() {
        return None;
    }
    Some(ServerConfig {
        name: e.name.to_string(),
        transport: transport?,
        disabled,
        timeout,
        extra,
        line: e.line,
    })
}

fn is_http_url(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &url[7..]
    } else if lower.starts_with("https://") {
        &url[8..]
    } else {
        return false;
    };
    !rest.is_empty()
}

/// The `${...}` expansion (see the module docs).
struct Expander<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    /// Leave a reference that cannot be resolved as written (a disabled entry).
    keep_unresolved: bool,
}

/// Why a `${...}` was not expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Problem {
    /// `${VAR}`: not set and no default (the reference, the variable).
    Unset(String, String),
    /// `${input:...}`.
    Input(String),
    /// `${workspaceFolder}`, `${config:...}`, ...
    Unsupported(String),
    /// `${}`, `${a b}`, `${env:}`, ...
    Malformed(String),
    /// A `${` with no `}`.
    Unterminated,
    /// A `${` inside a `${...}`.
    Nested(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Unset(reference, name) => write!(
                f,
                "`${{{reference}}}`: the variable {name} is not set (and there is no `:-default`)"
            ),
            Problem::Input(reference) => write!(
                f,
                "`${{{reference}}}` needs an input the host does not prompt for (write the value, \
                 or `${{env:VAR}}`)"
            ),
            Problem::Unsupported(reference) => write!(
                f,
                "`${{{reference}}}` is not expanded here: only `${{VAR}}`, `${{VAR:-default}}` \
                 and `${{env:VAR}}` are (no VS Code variables)"
            ),
            Problem::Malformed(reference) => write!(
                f,
                "`${{{reference}}}` is not a variable reference (`${{VAR}}`, `${{VAR:-default}}` \
                 or `${{env:VAR}}`; `$${{` is a literal `${{`)"
            ),
            Problem::Unterminated => {
                write!(f, "a `${{` has no closing `}}` (`$${{` is a literal `${{`)")
            }
            Problem::Nested(reference) => write!(
                f,
                "`${{{reference}`: a `${{` inside `${{...}}` is not expanded (no nesting)"
            ),
        }
    }
}

impl Expander<'_> {
    fn expand(&self, text: &str, problems: &mut Vec<Problem>) -> String {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(dollar) = rest.find('$') {
            out.push_str(&rest[..dollar]);
            let from = &rest[dollar..];
            if let Some(after) = from.strip_prefix("$${") {
                out.push_str("${");
                rest = after;
            } else if let Some(after) = from.strip_prefix("${") {
                let Some(close) = after.find('}') else {
                    problems.push(Problem::Unterminated);
                    out.push_str(from);
                    return out;
                };
                let reference = &after[..close];
                rest = &after[close + 1..];
                match self.resolve(reference) {
                    Ok(value) => out.push_str(&value),
                    Err(Problem::Unset(..) | Problem::Input(_) | Problem::Unsupported(_))
                        if self.keep_unresolved =>
                    {
                        out.push_str("${");
                        out.push_str(reference);
                        out.push('}');
                    }
                    Err(problem) => {
                        problems.push(problem);
                        out.push_str("${");
                        out.push_str(reference);
                        out.push('}');
                    }
                }
            } else {
                out.push('$');
                rest = &from[1..];
            }
        }
        out.push_str(rest);
        out
    }

    fn resolve(&self, reference: &str) -> Result<String, Problem> {
        if reference.contains("${") {
            return Err(Problem::Nested(reference.to_string()));
        }
        if reference.starts_with("input:") {
            return Err(Problem::Input(reference.to_string()));
        }
        let (body, env_form) = match reference.strip_prefix("env:") {
            Some(body) => (body, true),
            None => (reference, false),
        };
        let (name, default) = match body.split_once(':') {
            None => (body, None),
            Some((name, rest)) => match rest.strip_prefix('-') {
                Some(default) => (name, Some(default)),
                None if env_form || name.is_empty() => {
                    return Err(Problem::Malformed(reference.to_string()));
                }
                None => return Err(Problem::Unsupported(reference.to_string())),
            },
        };
        if !is_variable_name(name) {
            return Err(Problem::Malformed(reference.to_string()));
        }
        match ((self.env)(name), default) {
            (Some(value), _) => Ok(value),
            (None, Some(default)) => Ok(default.to_string()),
            (None, None) if !env_form && VS_CODE_VARIABLES.contains(&name) => {
                Err(Problem::Unsupported(reference.to_string()))
            }
            (None, None) => Err(Problem::Unset(reference.to_string(), name.to_string())),
        }
    }
}

/// A name the environment can hold: not empty, no space, control, `=`, `$`, `{`, `}` or `:`.
fn is_variable_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| {
            !c.is_whitespace() && !c.is_control() && !matches!(c, '=' | '$' | '{' | '}' | ':')
        })
}

/// What the scan of the text knows of a JSON value: where it starts and, for an object or an
/// array, its members' or items' lines.
#[derive(Debug)]
struct Node {
    line: usize,
    shape: Shape,
}

#[derive(Debug)]
enum Shape {
    Object(Vec<Member>),
    Array(Vec<Node>),
    Scalar,
}

#[derive(Debug)]
struct Member {
    key: String,
    /// The line of its key.
    line: usize,
    value: Node,
}

impl Node {
    fn members(&self) -> &[Member] {
        match &self.shape {
            Shape::Object(members) => members,
            _ => &[],
        }
    }

    /// The member `key` serde_json keeps: the last one the text gives.
    fn member(&self, key: &str) -> Option<&Member> {
        self.members().iter().rev().find(|member| member.key == key)
    }
}

fn child<'n>(node: Option<&'n Node>, key: &str) -> Option<&'n Node> {
    node?.member(key).map(|member| &member.value)
}

fn member_line(node: Option<&Node>, key: &str) -> usize {
    node.and_then(|node| node.member(key))
        .map_or(0, |member| member.line)
}

/// Each member whose key an earlier member of the same object already has, with that earlier one.
fn repeats(node: &Node) -> Vec<(&Member, &Member)> {
    let mut first: BTreeMap<&str, &Member> = BTreeMap::new();
    let mut repeats = Vec::new();
    for member in node.members() {
        match first.get(member.key.as_str()) {
            Some(earlier) => repeats.push((*earlier, member)),
            None => {
                first.insert(&member.key, member);
            }
        }
    }
    repeats
}

/// Deeper than serde_json's own limit (128): the scan only runs on text serde_json accepted.
const MAX_DEPTH: usize = 256;

/// A tokenizer over JSON text that records the lines of members and items (see the module docs).
/// It returns `None` on text that is not JSON (never reached after serde_json's parse) and never
/// panics.
struct Scanner<'a> {
    text: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Self {
        Scanner {
            text,
            pos: 0,
            line: 1,
        }
    }

    fn document(mut self) -> Option<Node> {
        self.value(0)
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(byte) = self.peek() {
            match byte {
                b'\n' => self.line += 1,
                b' ' | b'\t' | b'\r' => {}
                _ => break,
            }
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Option<Node> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.skip_whitespace();
        let line = self.line;
        let shape = match self.peek()? {
            b'{' => {
                self.pos += 1;
                let mut members = Vec::new();
                self.skip_whitespace();
                if self.peek()? == b'}' {
                    self.pos += 1;
                } else {
                    loop {
                        self.skip_whitespace();
                        let line = self.line;
                        let key = serde_json::from_str::<String>(self.string()?).ok()?;
                        self.skip_whitespace();
                        if self.peek()? != b':' {
                            return None;
                        }
                        self.pos += 1;
                        let value = self.value(depth + 1)?;
                        members.push(Member { key, line, value });
                        self.skip_whitespace();
                        match self.peek()? {
                            b',' => self.pos += 1,
                            b'}' => {
                                self.pos += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                Shape::Object(members)
            }
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                self.skip_whitespace();
                if self.peek()? == b']' {
                    self.pos += 1;
                } else {
                    loop {
                        items.push(self.value(depth + 1)?);
                        self.skip_whitespace();
                        match self.peek()? {
                            b',' => self.pos += 1,
                            b']' => {
                                self.pos += 1;
                                break;
                            }
                            _ => return None,
                        }
                    }
                }
                Shape::Array(items)
            }
            b'"' => {
                self.string()?;
                Shape::Scalar
            }
            _ => {
                let start = self.pos;
                while self.peek().is_some_and(|byte| {
                    byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'-' | b'.')
                }) {
                    self.pos += 1;
                }
                if self.pos == start {
                    return None;
                }
                Shape::Scalar
            }
        };
        Some(Node { line, shape })
    }

    /// A string token, quotes included.
    fn string(&mut self) -> Option<&'a str> {
        if self.peek()? != b'"' {
            return None;
        }
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.pos += 1;
                    return self.text.get(start..self.pos);
                }
                b'\\' => self.pos += 2,
                b'\n' => {
                    self.line += 1;
                    self.pos += 1;
                }
                _ => self.pos += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| value.to_string())
        }
    }

    fn parse_ok(text: &str) -> HostConfig {
        match HostConfig::from_json_with(text, env(&[])) {
            Ok(config) => config,
            Err(errors) => panic!("{errors}"),
        }
    }

    fn parse_err(text: &str) -> Vec<ConfigError> {
        parse_err_with(text, env(&[]))
    }

    fn parse_err_with(text: &str, env: impl Fn(&str) -> Option<String>) -> Vec<ConfigError> {
        match HostConfig::from_json_with(text, env) {
            Ok(config) => panic!("accepted: {config:?}"),
            Err(errors) => {
                assert!(!errors.0.is_empty());
                errors.0
            }
        }
    }

    /// The only error, which must name `server` and mention each of `words`.
    fn only_error(text: &str, server: Option<&str>, words: &[&str]) -> ConfigError {
        let errors = parse_err(text);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let error = errors.into_iter().next().unwrap();
        assert_eq!(error.server.as_deref(), server, "{error}");
        for word in words {
            assert!(error.message.contains(word), "{word:?} not in {error}");
        }
        error
    }

    fn stdio(server: &ServerConfig) -> (&str, &[String], &BTreeMap<String, String>, Option<&Path>) {
        match &server.transport {
            TransportConfig::Stdio {
                command,
                args,
                env,
                cwd,
            } => (command, args, env, cwd.as_deref()),
            other => panic!("not stdio: {other:?}"),
        }
    }

    fn http(server: &ServerConfig) -> (&str, &BTreeMap<String, String>) {
        match &server.transport {
            TransportConfig::Http { url, headers } => (url, headers),
            other => panic!("not HTTP: {other:?}"),
        }
    }

    #[test]
    fn claude_desktop_format_keeps_the_file_order_and_the_lines() {
        let text = r#"{
  "globalShortcut": "Ctrl+Space",
  "mcpServers": {
    "zeta-files": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/ada/Desktop"]
    },
    "alpha-github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "ghcr.io/github/github-mcp-server"],
      "env": { "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_123" }
    }
  }
}"#;
        let config = parse_ok(text);
        let names: Vec<_> = config.servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["zeta-files", "alpha-github"]);
        assert_eq!(config.servers[0].line, 4);
        assert_eq!(config.servers[1].line, 8);
        let (command, args, vars, cwd) = stdio(&config.servers[0]);
        assert_eq!(command, "npx");
        assert_eq!(
            args,
            [
                "-y",
                "@modelcontextprotocol/server-filesystem",
                "/Users/ada/Desktop"
            ]
        );
        assert!(vars.is_empty());
        assert_eq!(cwd, None);
        let (command, _, vars, _) = stdio(&config.servers[1]);
        assert_eq!(command, "docker");
        assert_eq!(vars["GITHUB_PERSONAL_ACCESS_TOKEN"], "ghp_123");
        assert!(!config.servers[1].disabled);
        assert_eq!(config.servers[1].timeout, None);
        assert!(config.servers[1].extra.is_empty());
    }

    #[test]
    fn claude_code_format_with_http_headers_and_defaults() {
        let text = r#"{
  "mcpServers": {
    "api": {
      "type": "http",
      "url": "${API_BASE_URL:-https://api.example.com}/mcp",
      "headers": { "Authorization": "Bearer ${API_KEY}", "X-Team": "${TEAM:-core}" }
    },
    "legacy": { "type": "sse", "url": "https://legacy.example.com/sse" },
    "local": {
      "command": "${TOOLS:-/opt/tools}/bin/server",
      "args": ["--config", "${HOME}/.server.json"],
      "env": { "CACHE_DIR": "${HOME}/.cache" }
    }
  }
}"#;
        let vars = env(&[("API_KEY", "sk-1"), ("HOME", "/home/ada"), ("TEAM", "")]);
        let config = HostConfig::from_json_with(text, vars).unwrap();
        let (url, headers) = http(&config.servers[0]);
        assert_eq!(url, "https://api.example.com/mcp");
        assert_eq!(headers["Authorization"], "Bearer sk-1");
        // Set, even empty: the value, not the default (as Claude Code: "if set").
        assert_eq!(headers["X-Team"], "");
        assert_eq!(http(&config.servers[1]).0, "https://legacy.example.com/sse");
        let (command, args, vars, _) = stdio(&config.servers[2]);
        assert_eq!(command, "/opt/tools/bin/server");
        assert_eq!(args, ["--config", "/home/ada/.server.json"]);
        assert_eq!(vars["CACHE_DIR"], "/home/ada/.cache");
    }

    #[test]
    fn vs_code_format_with_servers_and_env_colon() {
        let text = r#"{
  "inputs": [
    { "type": "promptString", "id": "token", "description": "Token", "password": true }
  ],
  "servers": {
    "memory": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-memory"],
      "env": { "MEMORY_FILE_PATH": "${env:HOME}/memory.json" },
      "envFile": "${workspaceFolder}/.env"
    },
    "remote": { "type": "http", "url": "https://mcp.example.com/${env:TENANT}" }
  }
}"#;
        let vars = env(&[("HOME", "/home/ada"), ("TENANT", "acme")]);
        let config = HostConfig::from_json_with(text, vars).unwrap();
        assert_eq!(config.servers.len(), 2);
        let (_, _, vars, _) = stdio(&config.servers[0]);
        assert_eq!(vars["MEMORY_FILE_PATH"], "/home/ada/memory.json");
        // envFile is not read, but kept verbatim for the application.
        assert_eq!(
            config.servers[0].extra["envFile"],
            Value::String("${workspaceFolder}/.env".into())
        );
        assert_eq!(http(&config.servers[1]).0, "https://mcp.example.com/acme");
        assert_eq!(config.servers[1].line, 13);
    }

    #[test]
    fn cursor_format_with_a_url_entry_and_no_type() {
        let text = r#"{
  "mcpServers": {
    "linear": { "url": "https://mcp.linear.app/mcp", "headers": { "X-Key": "k" } },
    "local": { "command": "python", "args": ["server.py"], "cwd": "/srv/mcp" }
  }
}"#;
        let config = parse_ok(text);
        let (url, headers) = http(&config.servers[0]);
        assert_eq!(url, "https://mcp.linear.app/mcp");
        assert_eq!(headers["X-Key"], "k");
        assert_eq!(stdio(&config.servers[1]).3, Some(Path::new("/srv/mcp")));
    }

    #[test]
    fn langchain_format_with_transport() {
        let text = r#"{
  "mcpServers": {
    "math": { "transport": "stdio", "command": "python", "args": ["math_server.py"] },
    "weather": { "transport": "streamable_http", "url": "http://localhost:8000/mcp" },
    "news": { "transport": "sse", "url": "http://localhost:8001/sse" },
    "notes": { "type": "streamable-http", "transport": "streamable_http", "url": "http://localhost:8002/mcp" },
    "cline": { "type": "streamableHttp", "url": "http://localhost:8003/mcp" }
  }
}"#;
        let config = parse_ok(text);
        assert_eq!(stdio(&config.servers[0]).0, "python");
        assert_eq!(http(&config.servers[1]).0, "http://localhost:8000/mcp");
        assert_eq!(http(&config.servers[2]).0, "http://localhost:8001/sse");
        assert_eq!(http(&config.servers[3]).0, "http://localhost:8002/mcp");
        assert_eq!(http(&config.servers[4]).0, "http://localhost:8003/mcp");
        // `transport` is read, not left in extra.
        assert!(config.servers.iter().all(|server| server.extra.is_empty()));
    }

    #[test]
    fn the_servers_member_must_be_one_and_an_object() {
        let error = only_error(
            "{\n\"mcpServers\": {},\n\"servers\": {}\n}",
            None,
            &["both", "mcpServers", "servers"],
        );
        assert_eq!(error.line, 3);
        only_error(r#"{"inputs": []}"#, None, &["no \"mcpServers\""]);
        only_error("[1, 2]", None, &["must be a JSON object"]);
        let error = only_error("{\n\"mcpServers\": [\n]}", None, &["must be an object"]);
        assert_eq!(error.line, 2);
        let error = only_error(
            "{\"mcpServers\": {},\n\"mcpServers\": {}}",
            None,
            &["given twice", "first at line 1"],
        );
        assert_eq!(error.line, 2);
        assert!(parse_ok(r#"{"mcpServers": {}}"#).servers.is_empty());
        assert!(
            parse_ok(r#"{"servers": {}, "other": 1}"#)
                .servers
                .is_empty()
        );
    }

    #[test]
    fn type_is_checked_against_the_fields() {
        only_error(
            r#"{"mcpServers": {"s": {"type": "stdio", "url": "http://x/mcp"}}}"#,
            Some("s"),
            &["`type`", "\"stdio\"", "has `url`"],
        );
        only_error(
            r#"{"mcpServers": {"s": {"type": "stdio"}}}"#,
            Some("s"),
            &["no `command`"],
        );
        only_error(
            r#"{"mcpServers": {"s": {"type": "http", "command": "srv"}}}"#,
            Some("s"),
            &["`type`", "has `command`"],
        );
        only_error(
            r#"{"mcpServers": {"s": {"transport": "sse"}}}"#,
            Some("s"),
            &["`transport`", "no `url`"],
        );
        only_error(
            r#"{"mcpServers": {"s": {"type": "stdio", "transport": "sse", "command": "x"}}}"#,
            Some("s"),
            &["`transport`", "\"sse\"", "`type` is \"stdio\""],
        );
        only_error(
            r#"{"mcpServers": {"s": {"type": "grpc", "command": "x"}}}"#,
            Some("s"),
            &["\"grpc\" is no transport"],
        );
        only_error(
            r#"{"mcpServers": {"s": {"type": 1, "command": "x"}}}"#,
            Some("s"),
            &["`type`", "must be a string"],
        );
        only_error(
            r#"{"mcpServers": {"s": {"command": "x", "url": "http://x/mcp"}}}"#,
            Some("s"),
            &["both `command`", "`url`"],
        );
        only_error(
            r#"{"mcpServers": {"s": {"args": ["x"]}}}"#,
            Some("s"),
            &["needs `command`", "or `url`"],
        );
        only_error(
            r#"{"mcpServers": {"s": {"httpUrl": "https://x/mcp"}}}"#,
            Some("s"),
            &[
                "needs `command`",
                "`httpUrl` is another host's name for `url`",
            ],
        );
    }

    #[test]
    fn websocket_is_not_supported() {
        only_error(
            r#"{"mcpServers": {"ws": {"transport": "websocket", "url": "ws://localhost:9/"}}}"#,
            Some("ws"),
            &["`transport`", "\"websocket\" is not supported"],
        );
    }

    #[test]
    fn fields_of_the_other_transport_are_errors() {
        only_error(
            r#"{"mcpServers": {"s": {"command": "x", "headers": {"A": "b"}}}}"#,
            Some("s"),
            &["`headers`", "for HTTP servers"],
        );
        let errors = parse_err(
            r#"{"mcpServers": {"s": {"url": "http://x/", "args": [], "env": {}, "cwd": "/"}}}"#,
        );
        let fields: Vec<_> = errors
            .iter()
            .map(|e| e.message.split('`').nth(1).unwrap())
            .collect();
        assert_eq!(fields, ["args", "env", "cwd"]);
        assert!(
            errors
                .iter()
                .all(|e| e.message.contains("for stdio servers"))
        );
    }

    #[test]
    fn field_types_are_checked_with_the_line_of_the_bad_field() {
        let text = r#"{
  "mcpServers": {
    "s": {
      "command": "srv",
      "args": [
        "ok",
        7
      ],
      "env": {
        "A": "x",
        "B": true
      },
      "cwd": 3
    },
    "t": { "url": "http://x/", "headers": ["A: b"] },
    "u": { "command": ["srv"] },
    "v": { "url": "ftp://x/" },
    "w": "npx server"
  }
}"#;
        let errors = parse_err(text);
        let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            [
                "line 3: server \"s\": `args[1]` (line 7): must be a string",
                "line 3: server \"s\": `env.B` (line 11): must be a string",
                "line 3: server \"s\": `cwd` (line 13): must be a string",
                "line 15: server \"t\": `headers`: must be an object of strings",
                "line 16: server \"u\": `command`: must be a string",
                "line 17: server \"v\": `url`: must be an http:// or https:// URL",
                "line 18: server \"w\": the entry must be a JSON object (with `command` or `url`)",
            ]
        );
    }

    #[test]
    fn disabled_and_timeout_are_read_and_checked() {
        let text = r#"{"mcpServers": {
            "a": {"command": "x", "disabled": true, "timeout": 15000},
            "b": {"url": "https://x/mcp", "disabled": false}
        }}"#;
        let config = parse_ok(text);
        assert!(config.servers[0].disabled);
        assert_eq!(config.servers[0].timeout, Some(Duration::from_secs(15)));
        assert!(!config.servers[1].disabled);
        assert!(config.servers[0].extra.is_empty());
        for bad in ["0", "-5", "1.5", "\"100\"", "null"] {
            let text =
                format!(r#"{{"mcpServers": {{"a": {{"command": "x", "timeout": {bad}}}}}}}"#);
            let errors = parse_err(&text);
            assert_eq!(errors.len(), 1, "{bad}: {errors:?}");
            assert!(
                errors[0].message.contains("`timeout`: must be a positive"),
                "{bad}"
            );
        }
        only_error(
            r#"{"mcpServers": {"a": {"command": "x", "disabled": "yes"}}}"#,
            Some("a"),
            &["`disabled`", "true or false"],
        );
    }

    #[test]
    fn other_fields_are_kept_verbatim_and_unknown_top_level_members_ignored() {
        let text = r#"{
  "mcpServers": {
    "s": {
      "command": "x",
      "alwaysAllow": ["read_file"],
      "autoApprove": [],
      "oauth": { "clientId": "abc", "scopes": ["a", "b"], "port": 8080 },
      "note": "${NOT_EXPANDED}"
    }
  },
  "theme": "dark",
  "inputs": 5
}"#;
        let config = parse_ok(text);
        let extra = &config.servers[0].extra;
        assert_eq!(extra.len(), 4);
        assert_eq!(extra["alwaysAllow"], serde_json::json!(["read_file"]));
        assert_eq!(extra["autoApprove"], serde_json::json!([]));
        assert_eq!(
            extra["oauth"],
            serde_json::json!({ "clientId": "abc", "scopes": ["a", "b"], "port": 8080 })
        );
        assert_eq!(extra["note"], serde_json::json!("${NOT_EXPANDED}"));
    }

    #[test]
    fn every_field_that_expands_does() {
        let text = r#"{"mcpServers": {
            "s": {"command": "${V}c", "args": ["${V}a"], "env": {"${V}": "${V}e"}, "cwd": "/${V}"},
            "h": {"url": "https://${V}/", "headers": {"${V}": "${V}h"}}
        }}"#;
        let config = HostConfig::from_json_with(text, env(&[("V", "v")])).unwrap();
        let (command, args, vars, cwd) = stdio(&config.servers[0]);
        assert_eq!(command, "vc");
        assert_eq!(args, ["va"]);
        // Names are not expanded, values are.
        assert_eq!(vars["${V}"], "ve");
        assert_eq!(cwd, Some(Path::new("/v")));
        let (url, headers) = http(&config.servers[1]);
        assert_eq!(url, "https://v/");
        assert_eq!(headers["${V}"], "vh");
    }

    fn expand(text: &str) -> Result<String, Vec<Problem>> {
        let vars = env(&[("A", "1"), ("B", "two"), ("EMPTY", ""), ("NESTED", "${A}")]);
        let expander = Expander {
            env: &vars,
            keep_unresolved: false,
        };
        let mut problems = Vec::new();
        let out = expander.expand(text, &mut problems);
        if problems.is_empty() {
            Ok(out)
        } else {
            Err(problems)
        }
    }

    #[test]
    fn expansion_rules() {
        let ok = |text: &str| expand(text).unwrap();
        assert_eq!(ok("plain"), "plain");
        assert_eq!(ok("${A}-${B}"), "1-two");
        assert_eq!(ok("${env:B}"), "two");
        assert_eq!(ok("${MISSING:-fallback}"), "fallback");
        assert_eq!(ok("${env:MISSING:-x y}"), "x y");
        assert_eq!(ok("${MISSING:-}"), "");
        assert_eq!(ok("${A:-fallback}"), "1");
        assert_eq!(ok("${EMPTY:-fallback}"), "");
        // The default ends at the first `}`, which may leave text after it.
        assert_eq!(ok("${MISSING:-a}b}"), "ab}");
        // `$VAR`, a lone `$` and `$$` stay as written.
        assert_eq!(ok("$A and $ and $$ and $"), "$A and $ and $$ and $");
        // `$${` is a literal `${`.
        assert_eq!(ok("$${A}"), "${A}");
        assert_eq!(ok("$$${A}"), "$${A}");
        // A value is not expanded again.
        assert_eq!(ok("${NESTED}"), "${A}");
        assert_eq!(ok("✓${A}é"), "✓1é");
    }

    #[test]
    fn expansion_problems() {
        let problems = |text: &str| expand(text).unwrap_err();
        assert_eq!(
            problems("${MISSING}/${env:GONE}"),
            [
                Problem::Unset("MISSING".into(), "MISSING".into()),
                Problem::Unset("env:GONE".into(), "GONE".into()),
            ]
        );
        assert_eq!(
            problems("${input:token}"),
            [Problem::Input("input:token".into())]
        );
        assert_eq!(
            problems("${workspaceFolder}/x"),
            [Problem::Unsupported("workspaceFolder".into())]
        );
        assert_eq!(
            problems("${config:editor.fontSize}"),
            [Problem::Unsupported("config:editor.fontSize".into())]
        );
        assert_eq!(problems("${}"), [Problem::Malformed("".into())]);
        assert_eq!(problems("${a b}"), [Problem::Malformed("a b".into())]);
        assert_eq!(problems("${env:}"), [Problem::Malformed("env:".into())]);
        assert_eq!(
            problems("${env:A:x}"),
            [Problem::Malformed("env:A:x".into())]
        );
        assert_eq!(problems("${:-x}"), [Problem::Malformed(":-x".into())]);
        assert_eq!(problems("${A=1}"), [Problem::Malformed("A=1".into())]);
        assert_eq!(problems("x ${A"), [Problem::Unterminated]);
        assert_eq!(problems("${A:-${B}}"), [Problem::Nested("A:-${B".into())]);
    }

    #[test]
    fn an_unset_variable_is_an_error_naming_the_variable_and_the_field() {
        let text = r#"{
  "mcpServers": {
    "gh": {
      "command": "docker",
      "env": {
        "GITHUB_TOKEN": "${GITHUB_TOKEN}"
      }
    }
  }
}"#;
        let error = only_error(
            text,
            Some("gh"),
            &["`env.GITHUB_TOKEN` (line 6)", "GITHUB_TOKEN is not set"],
        );
        assert_eq!(error.line, 3);
        // With a value it is fine.
        let config = HostConfig::from_json_with(text, env(&[("GITHUB_TOKEN", "t")])).unwrap();
        assert_eq!(stdio(&config.servers[0]).2["GITHUB_TOKEN"], "t");
    }

    #[test]
    fn input_and_vs_code_variables_are_errors_with_a_clear_message() {
        let text = r#"{"servers": {
  "a": {"command": "x", "env": {"KEY": "${input:api-key}"}},
  "b": {"command": "x", "cwd": "${workspaceFolder}"}
}}"#;
        let errors = parse_err(text);
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0].server.as_deref(), Some("a"));
        assert!(
            errors[0]
                .message
                .contains("`${input:api-key}` needs an input the host does not prompt for")
        );
        assert_eq!(errors[1].server.as_deref(), Some("b"));
        assert!(
            errors[1]
                .message
                .contains("`${workspaceFolder}` is not expanded here")
        );
    }

    #[test]
    fn a_disabled_entry_keeps_unresolved_references_as_written() {
        let text = r#"{"mcpServers": {
  "off": {"command": "x", "args": ["${MISSING}", "${input:id}", "${A}"], "disabled": true}
}}"#;
        let config = HostConfig::from_json_with(text, env(&[("A", "1")])).unwrap();
        assert_eq!(
            stdio(&config.servers[0]).1,
            ["${MISSING}", "${input:id}", "1"]
        );
        // Syntax problems are still errors.
        let text = r#"{"mcpServers": {"off": {"command": "${", "disabled": true}}}"#;
        only_error(text, Some("off"), &["`command`", "no closing"]);
        // Enabled, the same entry is an error.
        let text = text
            .replace("\"${\"", "\"${MISSING}\"")
            .replace("true", "false");
        only_error(&text, Some("off"), &["MISSING is not set"]);
    }

    #[test]
    fn every_bad_entry_is_reported_with_its_line() {
        let text = r#"{
  "mcpServers": {
    "good": { "command": "x" },
    "no-transport": { "args": [] },
    "": { "command": "x" },
    "unset": {
      "url": "https://${HOST}/mcp",
      "headers": { "Authorization": "Bearer ${TOKEN}" }
    },
    "also-good": { "url": "http://localhost/mcp" }
  }
}"#;
        let errors = parse_err(text);
        let shown: Vec<_> = errors
            .iter()
            .map(|e| (e.server.clone().unwrap(), e.line))
            .collect();
        assert_eq!(
            shown,
            [
                ("no-transport".to_string(), 4),
                (String::new(), 5),
                ("unset".to_string(), 6),
                ("unset".to_string(), 6),
            ]
        );
        assert!(errors[1].message.contains("must not be empty"));
        assert!(errors[2].message.contains("`url` (line 7)") && errors[2].message.contains("HOST"));
        assert!(
            errors[3]
                .message
                .contains("`headers.Authorization` (line 8)")
        );
        assert!(errors[3].message.contains("TOKEN"));
    }

    #[test]
    fn a_repeated_server_name_or_field_is_an_error() {
        let text = r#"{
  "mcpServers": {
    "dup": { "command": "first" },
    "other": { "command": "x" },
    "dup": { "command": "second" }
  }
}"#;
        let error = only_error(text, Some("dup"), &["second entry", "first is at line 3"]);
        assert_eq!(error.line, 5);
        // The same name spelled with an escape is the same name.
        let text =
            "{\"mcpServers\": {\"a\": {\"command\": \"x\"},\n\"\\u0061\": {\"command\": \"y\"}}}";
        assert_eq!(only_error(text, Some("a"), &["second entry"]).line, 2);
        let text = "{\"mcpServers\": {\"s\": {\"command\": \"x\",\n\"command\": \"y\"}}}";
        only_error(
            text,
            Some("s"),
            &["`command` (line 2)", "given twice (first at line 1)"],
        );
    }

    #[test]
    fn a_syntax_error_has_serde_json_s_line_and_column() {
        let text =
            "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"x\" }\n    \"b\": {}\n  }\n}";
        let error = only_error(
            text,
            None,
            &["not valid JSON (column 5)", "expected `,` or `}`"],
        );
        assert_eq!(error.line, 4);
        assert_eq!(
            error.to_string(),
            "line 4: not valid JSON (column 5): expected `,` or `}`"
        );
        let error = only_error("", None, &["not valid JSON", "EOF"]);
        assert_eq!(error.line, 1);
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let config = parse_ok("\u{feff}{\"mcpServers\": {\"a\": {\"command\": \"x\"}}}");
        assert_eq!(config.servers[0].name, "a");
    }

    #[test]
    fn from_json_expands_from_the_process_environment() {
        // PATH is set in any test environment; this reads it as the process has it.
        let path = std::env::var("PATH").unwrap();
        let config = HostConfig::from_json(
            r#"{"mcpServers": {"a": {"command": "x", "args": ["${PATH}"]}}}"#,
        )
        .unwrap();
        assert_eq!(stdio(&config.servers[0]).1, [path]);
    }

    #[test]
    fn load_reads_a_file_and_names_the_path_it_cannot_read() {
        let dir = std::env::temp_dir().join(format!("modelctx-host-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("mcp.json");
        std::fs::write(&path, r#"{"mcpServers": {"a": {"url": "https://x/mcp"}}}"#).unwrap();
        let config = HostConfig::load(&path).unwrap();
        assert_eq!(config.servers[0].name, "a");
        assert_eq!(config.servers[0].line, 1);

        let missing = dir.join("missing.json");
        let errors = HostConfig::load(&missing).unwrap_err();
        assert_eq!(errors.0.len(), 1);
        assert_eq!(errors.0[0].server, None);
        assert!(errors.0[0].message.contains(&missing.display().to_string()));
        std::fs::write(&path, b"{\"mcpServers\": \xff}").unwrap();
        let errors = HostConfig::load(&path).unwrap_err();
        assert!(errors.0[0].message.contains("cannot read"), "{errors}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_scan_finds_lines_through_strings_escapes_and_nesting() {
        let text = "{\"a\\\"{\": [1, {\"b\": \"}\\n\\\\\"},\n  -1.5e+3, true, null],\n\"c\": {\n\"d\": \"x\"}}";
        let root = Scanner::new(text).document().unwrap();
        assert_eq!(root.members()[0].key, "a\"{");
        let Shape::Array(items) = &root.members()[0].value.shape else {
            panic!()
        };
        assert_eq!(
            items.iter().map(|i| i.line).collect::<Vec<_>>(),
            [1, 1, 2, 2, 2]
        );
        assert_eq!(member_line(Some(&root), "c"), 3);
        assert_eq!(member_line(child(Some(&root), "c"), "d"), 4);
        // Not JSON: no answer, no panic.
        for junk in [
            "{\"a\" 1}",
            "[1 2]",
            "{\"a\":",
            "\"abc",
            "{,}",
            "[",
            "}",
            "\"\\",
        ] {
            assert!(Scanner::new(junk).document().is_none(), "{junk}");
        }
    }

    /// A deterministic stream of pseudo-random numbers (xorshift64*).
    struct Random(u64);

    impl Random {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Parses `text`, which must not panic; an error must carry a line within the text.
    fn never_panics(text: &str) {
        let lines = text.lines().count() + 1;
        let vars = env(&[("A", "1")]);
        if let Err(errors) = HostConfig::from_json_with(text, vars) {
            assert!(!errors.0.is_empty());
            for error in &errors.0 {
                assert!(error.line <= lines, "{error} in {text:?}");
                let _ = error.to_string();
            }
        }
    }

    #[test]
    fn no_input_panics() {
        let valid = r#"{
  "inputs": [{"id": "x"}],
  "mcpServers": {
    "a": {"command": "x${A}", "args": ["${A:-b}", "$${", "é"], "env": {"K": "${env:A}"},
          "cwd": "/", "timeout": 5, "disabled": false, "extra": {"n": [1, 2.5, null]}},
    "b": {"type": "http", "url": "https://x/${B:-y}", "headers": {"H": "v\u00e9\n"}},
    "c": {"transport": "websocket", "url": "ws://x"},
    "a": {"command": ""}
  }
}"#;
        // Every truncation of a valid file (at each char boundary).
        for (end, _) in valid.char_indices() {
            never_panics(&valid[..end]);
        }
        never_panics(valid);
        let mut random = Random(0x9e37_79b9_7f4a_7c15);
        // Random edits of it with the characters that matter to JSON and to the expansion.
        let specials = [
            "{", "}", "[", "]", "\"", ",", ":", "\\", "$", "${", "}}", "\n", "é", "0", "-", "null",
        ];
        for _ in 0..3000 {
            let mut text = valid.to_string();
            for _ in 0..1 + random.below(4) {
                let mut at = random.below(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                let mut end = (at + random.below(3)).min(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.replace_range(at..end, specials[random.below(specials.len())]);
            }
            never_panics(&text);
        }
        // Arbitrary bytes (as a text: lossy), short and long.
        for _ in 0..2000 {
            let len = random.below(64);
            let bytes: Vec<u8> = (0..len).map(|_| random.next() as u8).collect();
            never_panics(&String::from_utf8_lossy(&bytes));
            let structural: String = (0..len)
                .map(|_| specials[random.below(specials.len())])
                .collect();
            never_panics(&structural);
        }
        // Deep nesting: serde_json's recursion limit answers, no stack overflow.
        never_panics(&"[".repeat(100_000));
        never_panics(&format!(
            "{{\"mcpServers\": {}1{}}}",
            "[".repeat(200),
            "]".repeat(200)
        ));
    }
}
