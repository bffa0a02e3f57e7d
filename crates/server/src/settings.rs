//! The settings of a server.

/// Settings of a [`Server`](crate::Server).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Settings {
    /// Items per page of `tools/list` and the other lists (default 100).
    pub page_size: usize,
    /// Limits on the requests handlers answer (default: none, counting every request a handler
    /// answers: [`Limits::HANDLER_METHODS`](crate::Limits::HANDLER_METHODS)).
    pub limits: crate::limits::Limits,
    /// How long modern clients may cache list results (`ttlMs`, `cacheScope`; default: not at
    /// all, `ttlMs: 0`, `"private"`). The session writes it into the results of `tools/list`,
    /// `prompts/list`, `resources/list` and `resources/templates/list`
    /// (`modelctx_session::ServerConfig::list_cache`).
    pub list_cache: Option<crate::resource::CacheHint>,
    /// The longest resource URI accepted, in bytes (default 8192, 8 KiB): a longer `uri` of
    /// `resources/read`, `resources/subscribe` or `resources/unsubscribe`, `ref.uri` of
    /// `completion/complete`, or URI in a listen stream's `resourceSubscriptions` is refused
    /// with -32602.
    pub max_uri_len: usize,
    /// The most 2026-07-28 requests the HTTP app (`http_service`, `serve_http`) handles at once,
    /// over all clients, open `subscriptions/listen` streams included (default 1024): each has a
    /// task of its own until it is answered. A request beyond is answered at once with the
    /// JSON-RPC error -32000 (`data.reason` `"rate_limited"`), as [`Limits`](crate::Limits)
    /// refuse; a notification beyond is dropped.
    pub max_modern_requests: usize,
    /// How tasks are kept and run (default [`TaskSettings::default`]: kept one hour, clients
    /// told to poll every second, at most 256 handlers running as tasks at once).
    ///
    /// [`TaskSettings::default`]: crate::tasks::TaskSettings
    pub tasks: crate::tasks::TaskSettings,
    /// How tool schemas are compiled and bounded (default: [`SchemaLimits::default`]: at most
    /// 256 KiB and 64 levels, 256 compiled schemas kept, `pattern`s matched in linear time, so
    /// a schema whose pattern needs backreferences or look-around is refused by
    /// [`Server::add_tool`] and [`ServerBuilder::try_build`], and makes
    /// [`ServerBuilder::build`] panic). Each tool's schemas are
    /// compiled once, when it is registered. A server whose own schemas need such patterns
    /// sets `patterns: PatternEngine::Backtracking { .. }`: matching a client's argument can
    /// then cost up to the backtracking limit per string.
    ///
    /// [`SchemaLimits::default`]: modelctx_types::schema::SchemaLimits::default
    /// [`Server::add_tool`]: crate::Server::add_tool
    /// [`ServerBuilder::try_build`]: crate::ServerBuilder::try_build
    /// [`ServerBuilder::build`]: crate::ServerBuilder::build
    #[cfg(feature = "validation")]
    pub schema_limits: modelctx_types::schema::SchemaLimits,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            page_size: 100,
            limits: crate::limits::Limits::default(),
            list_cache: None,
            max_uri_len: 8 * 1024,
            max_modern_requests: 1024,
            tasks: crate::tasks::TaskSettings::default(),
            #[cfg(feature = "validation")]
            schema_limits: modelctx_types::schema::SchemaLimits::default(),
        }
    }
}
