//! The wire types of the Model Context Protocol, for every protocol version, and the JSON-RPC
//! envelope that carries them.
//!
//! The version modules ([`v2024_11_05`], [`v2025_03_26`], [`v2025_06_18`], [`v2025_11_25`],
//! [`v2026_07_28`] and the tasks extension [`ext_tasks`]) are **generated** by
//! `cargo xtask codegen` from the official JSON schema of each version, with the project's
//! corrections of the lossy upstream typing applied (`schema/corrections.toml`: `schema.ts` is the
//! source of truth for number versus integer and for nullability). Each definition of a schema is a
//! type of the same name. The envelope ([`Message`], [`RequestId`], [`ErrorCode`], ...) is written
//! by hand.
//!
//! [`methods`] lists, for each [`ProtocolVersion`], the requests and notifications each side may
//! send (generated from the same schemas, and compiled whichever version features are on): the
//! table the session checks methods against.
//!
//! [`meta_keys`] spells the `_meta` keys MCP reserves; [`trace_context`] reads and writes the W3C
//! trace context (`traceparent`, `tracestate`) a request carries in `params._meta`, as plain data
//! (the facades convert it to OpenTelemetry's types behind their `otel` features).
//!
//! With the `validation` feature, [`schema`] validates values against JSON Schemas: a tool's
//! arguments against its `inputSchema`, its `structuredContent` against its `outputSchema`. The
//! schemas may come from an untrusted peer, so compiled schemas are kept in a bounded cache, a
//! schema's size and depth are limited, and no `$ref` is ever fetched.
//!
//! # What this crate does not do
//!
//! It performs no I/O and holds no protocol state: it does not know which version a connection
//! negotiated, whether a method is allowed now, or whether batches are allowed. The session crate
//! decides that. Decoding validates the shape of messages, not JSON Schema constraints such as
//! `minimum` or a tool's input schema: those are checked only when asked, through [`schema`]
//! (feature `validation`), which reads no file and opens no connection either.
//!
//! # How messages are decoded
//!
//! ```text
//! bytes ──decode()──► Message ──(method, raw params)──► ClientRequest::from_parts ──► typed params
//!                       │
//!                       └──(request's method, raw result)──► ServerResult::decode ──► typed result
//! ```
//!
//! * The envelope classifies a message by which fields are present and keeps `params` and
//!   `result` as raw JSON, so a message is parsed once, by the code that knows its type.
//! * Requests and notifications are enums dispatched on `method` (`ClientRequest`,
//!   `ServerRequest`, `ClientNotification`, `ServerNotification` in each version).
//! * Results cannot be told apart by their shape (every result is a valid `Result`), so they are
//!   decoded by correlating with the request's method and then, from 2026-07-28 on, the value of
//!   `resultType` (absent means `complete`; a value not allowed for the method is an error).
//! * Other unions are dispatched on a shared tag (`type` for content blocks), on the presence of a
//!   key no other member has, or on explicit rules (`schema/overrides.toml`), never by trying each
//!   member in turn.
//! * Unknown members of open objects (results, capabilities, `_meta`, tool schemas) are kept in an
//!   `extra` map and written back. Optional fields are absent when `None`; required-nullable and
//!   any-JSON fields keep an explicit `null`.
//!
//! # Optional features
//!
//! * `v2024-11-05`, `v2025-03-26`, `v2025-06-18`, `v2025-11-25`, `v2026-07-28`: one module per
//!   protocol version (all on by default).
//! * `ext-tasks`: the `io.modelcontextprotocol/tasks` extension (needs `v2026-07-28`, whose
//!   identical definitions it re-exports).
//! * `skills`: the content rules of the Skills extension in [`skills`] (the `sha256:` digest of
//!   a file, the YAML frontmatter of a `SKILL.md`; adds `sha2` and `yaml_serde`). Its names and
//!   wire shapes are compiled without it.
//! * `validation`: the [`schema`] module, JSON Schema validation of values with a bounded cache
//!   of compiled schemas (off by default; adds the `jsonschema` crate, without its remote or file
//!   retrieval).
//!
//! # Stability
//!
//! A version module is a snapshot of a released schema, pinned by hash in `schema/manifest.toml`;
//! its generated structs are not `#[non_exhaustive]`, so that conversions written against them are
//! checked exhaustively by the compiler. Error `Display` texts are not part of the API.

#![cfg_attr(docsrs, feature(doc_cfg))]
// Helpers the generated code of only some versions uses are dead when those versions are off;
// with every version on (as CI builds it) dead code is still an error.
#![cfg_attr(
    not(all(
        feature = "v2024-11-05",
        feature = "v2025-03-26",
        feature = "v2025-06-18",
        feature = "v2025-11-25",
        feature = "v2026-07-28",
        feature = "ext-tasks"
    )),
    allow(dead_code)
)]

mod jsonrpc;
pub use jsonrpc::*;

mod version;
pub use version::{Era, ProtocolVersion};

pub mod meta_keys;

pub mod trace_context;

mod rules;
pub use rules::{BatchRefused, check_batch, opens_session};

mod support;
pub use support::{IntConst, JsonObject, ParamsDecodeError, ResultDecodeError, ResultType};

mod generated;
pub use generated::*;

pub mod model;

pub mod skills;

#[cfg(feature = "validation")]
#[cfg_attr(docsrs, doc(cfg(feature = "validation")))]
pub mod schema;

#[cfg(all(
    test,
    feature = "v2024-11-05",
    feature = "v2025-03-26",
    feature = "v2025-06-18",
    feature = "v2025-11-25",
    feature = "v2026-07-28"
))]
mod tests {
    use super::*;

    /// The always-compiled table lists exactly what the dispatch enums of each version decode.
    #[test]
    fn method_table_matches_the_dispatch_enums() {
        macro_rules! check {
            ($v:ident, $module:ident) => {
                let m = methods::of(ProtocolVersion::$v);
                assert_eq!(m, &methods::$v);
                assert_eq!(m.client_requests, $module::ClientRequest::METHODS);
                assert_eq!(m.client_notifications, $module::ClientNotification::METHODS);
                assert_eq!(m.server_notifications, $module::ServerNotification::METHODS);
            };
        }
        check!(V2024_11_05, v2024_11_05);
        check!(V2025_03_26, v2025_03_26);
        check!(V2025_06_18, v2025_06_18);
        check!(V2025_11_25, v2025_11_25);
        check!(V2026_07_28, v2026_07_28);
        let legacy = [
            (
                ProtocolVersion::V2024_11_05,
                v2024_11_05::ServerRequest::METHODS,
            ),
            (
                ProtocolVersion::V2025_03_26,
                v2025_03_26::ServerRequest::METHODS,
            ),
            (
                ProtocolVersion::V2025_06_18,
                v2025_06_18::ServerRequest::METHODS,
            ),
            (
                ProtocolVersion::V2025_11_25,
                v2025_11_25::ServerRequest::METHODS,
            ),
        ];
        for (v, server_requests) in legacy {
            assert_eq!(methods::of(v).server_requests, server_requests, "{v}");
        }
        // 2026-07-28 servers send no JSON-RPC requests: `InputRequest`s travel inside results.
        assert!(
            methods::of(ProtocolVersion::V2026_07_28)
                .server_requests
                .is_empty()
        );
    }

    /// The method counts of the spec (`spec/NOTES.md`), both directions counted once.
    #[test]
    fn methods_per_version_follow_the_spec() {
        let requests: Vec<usize> = ProtocolVersion::ALL
            .iter()
            .map(|v| {
                let m = methods::of(*v);
                let mut all: Vec<&str> = m.client_requests.to_vec();
                all.extend(m.server_requests);
                all.sort_unstable();
                all.dedup();
                all.len()
            })
            .collect();
        assert_eq!(requests, [15, 15, 16, 20, 10]);
        let modern = methods::of(ProtocolVersion::V2026_07_28);
        assert_eq!(
            modern.client_notifications,
            [consts::NotificationsCancelled::VALUE]
        );
        assert!(!modern.client_requests.contains(&consts::Ping::VALUE));
        assert!(
            modern
                .client_requests
                .contains(&consts::ServerDiscover::VALUE)
        );
        // The tasks extension's methods are not part of any version.
        assert!(ProtocolVersion::ALL.iter().all(|v| {
            let m = methods::of(*v);
            !m.client_requests.contains(&consts::TasksUpdate::VALUE)
                && !m
                    .server_notifications
                    .contains(&consts::NotificationsTasks::VALUE)
        }));
    }
}

/// The examples of this crate's `README.md`, compiled (and run) as doctests so they stay true.
#[doc = include_str!("../README.md")]
#[cfg(all(doctest, feature = "v2025-11-25"))]
pub struct ReadmeDoctests;
