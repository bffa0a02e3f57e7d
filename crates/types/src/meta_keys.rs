//! The `_meta` keys MCP reserves (2026-07-28), and the one modelctx adds. One spelling for every
//! layer: the session reads and writes them, transports read the version for routing and headers,
//! and facades read what they show their users.

/// The protocol version a 2026-07-28 request names, in `params._meta`.
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The client capabilities a 2026-07-28 request declares, in `params._meta`.
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The client's name and version on a 2026-07-28 request, in `params._meta`.
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// The log level a 2026-07-28 request asks for, in `params._meta`.
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// The server's name and version on a 2026-07-28 result, in `result._meta`.
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// The subscription a message on a `subscriptions/listen` stream belongs to, in `_meta`.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The progress token of a request, in `params._meta` (every version).
pub const PROGRESS_TOKEN: &str = "progressToken";
/// Not part of MCP: on a modern request's log message, the id of the request it is about (as the
/// client sent it). Over stdio a notification names no request, and a proxy that shares one server
/// among clients (`mcx proxy`) routes log messages by it.
pub const RELATED_REQUEST_ID: &str = "dev.modelctx/relatedRequestId";
