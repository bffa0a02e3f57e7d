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
//!   for. VS Code's other variables (`${workspaceFolder}`, `${userHome}`, `${config:...}`, ...)
//!   are not expanded: when the environment has no such variable, the entry is in error.
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
            errors,
            failed: false,
        };
        if let Some(server) = read_entry(entry, env, &mut entry_errors) {
            servers.push(server);
        }
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
    errors: &'a mut Vec<ConfigError>,
    failed: bool,
}

impl EntryErrors<'_> {
    /// A problem of the entry as a whole.
    fn entry(&mut self, message: impl std::fmt::Display) {
        self.failed = true;
        self.errors.push(ConfigError {
            server: Some(self.name.to_string()),
            line: self.line,
            message: message.to_string(),
        });
    }

    /// A problem of a field at `line` (the entry's when 0).
    fn at(&mut self, field: &str, line: usize, message: impl std::fmt::Display) {
        if line == 0 || line == self.line {
            self.entry(format_args!("`{field}`: {message}"));
        } else {
            self.entry(format_args!("`{field}` (line {line}): {message}"));
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
            e.entry("needs `command` (a stdio server) or `url` (an HTTP server)");
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
        if let Some(url) = &url {
            if !is_http_url(url) {
                e.field("url", "must be an http:// or https:// URL");
            }
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
    if e.failed {
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
