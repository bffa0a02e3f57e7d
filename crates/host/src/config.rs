//! The `mcpServers` config file.
//!
//! OWNER: the config work package. The types below are the contract the rest of the crate
//! builds on; fill in the parsing (`HostConfig::from_json*`, `load`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use modelctx_types::JsonObject;

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
