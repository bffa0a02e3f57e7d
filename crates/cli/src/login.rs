//! The OAuth 2.1 client of mcx (`modelctx_client::auth::OAuth`): `mcx --url URL login`,
//! `mcx logout`, and the authorization of every client command with `--url`.
//!
//! Tokens and dynamic registrations are kept in a `FileStore` (one `0600` file per
//! authorization server in a `0700` directory) under `<config>/auth/`, `<config>` being
//! `$MCX_CONFIG_DIR`, else `$XDG_CONFIG_HOME/mcx` (Unix), else `~/.config/mcx` (Unix but
//! macOS), `~/Library/Application Support/mcx` (macOS) or `%APPDATA%\mcx` (Windows).
//!
//! `login` always runs the authorization code flow (terminal or not): it binds a loopback
//! redirect listener (`--redirect-port`, else the port of the registration kept for the server,
//! else any), prints the authorization URL on stderr, asks a browser to open it when one is
//! likely (`$DISPLAY` or `$WAYLAND_DISPLAY` on Unix, always on macOS and Windows, never with
//! `--no-browser`), waits for the redirect, stores the tokens and says for what.
//!
//! A client command with `--url` (and without `--bearer`, `--bearer-file`, `MCX_BEARER` or an
//! `Authorization` header) sends the stored tokens covering the URL, refreshed when they
//! expire. When none covers it and stderr is a terminal (and not `--no-login`), it logs in
//! first, outside `--timeout`; a login needed later (a step-up, a refresh token refused) happens
//! in place, on a terminal only. Off a terminal or with `--no-login`, a server that asks for
//! authorization fails the command with "run `mcx --url URL login`". On a terminal without a
//! stored token this costs one unauthenticated GET and the protected resource metadata lookup
//! before connecting, for protected servers and unprotected ones alike.
//!
//! `logout` revokes the stored tokens of the URL (`--all`: of every server) at their
//! authorization servers where they offer it (RFC 7009, the refresh token then the access token,
//! best effort, 5 s each), forgets them, and says per token what the server did; `--all` also
//! forgets the client registrations.
//!
//! What it does not do: the authorization server's HTTPS is checked against the webpki roots
//! only (`--cacert` is for the MCP server); there is no way to ask for scopes beyond those the
//! server's challenge and metadata name; two mcx processes refreshing the same tokens at once
//! may leave the older refresh token in the store (the last writer wins).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use clap::Args;
use modelctx_client::auth::{
    AuthorizationHandler, AuthorizationRequest, Challenges, FileStore, LoggedOut, LoopbackRedirect,
    MemoryStore, OAuth, OAuthError, Registered, StoreKey, Stored, TokenStore, Tokens,
};

use modelctx_client::{ConnectError, HttpTransportError, TransportError};

use crate::Target;
use crate::exit::{Failed, Kind};

/// The variable naming mcx's configuration directory.
pub(crate) const CONFIG_DIR_VARIABLE: &str = "MCX_CONFIG_DIR";

/// How mcx identifies itself to authorization servers and signs in (global options, with
/// --url).
#[derive(Args, Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct OAuthArgs {
    /// The client ID registered beforehand with the server's authorization server (a public
    /// client, unless --client-secret-file). Default: the client ID metadata document of
    /// --client-metadata-url where the authorization server supports those, else dynamic
    /// registration (kept in mcx's store).
    #[arg(long, value_name = "ID", requires = "url")]
    pub(crate) client_id: Option<String>,
    /// Read the secret of --client-id from this file (its trailing newline removed).
    #[arg(long, value_name = "PATH", requires = "client_id")]
    pub(crate) client_secret_file: Option<PathBuf>,
    /// The https URL of mcx's client ID metadata document, hosted by you: used as the client ID
    /// by authorization servers that support client ID metadata documents.
    #[arg(long, value_name = "URL", requires = "url")]
    pub(crate) client_metadata_url: Option<String>,
    /// The port of the loopback redirect URI http://127.0.0.1:PORT/callback (for a client
    /// registered with a fixed port). Default: the port of the registration mcx keeps for the
    /// server, else any free port.
    #[arg(long, value_name = "PORT", requires = "url")]
    pub(crate) redirect_port: Option<u16>,
    /// Never open a browser: only print the authorization URL.
    #[arg(long)]
    pub(crate) no_browser: bool,
    /// Never sign in from a client command (fail with "run mcx --url URL login" instead), even
    /// on a terminal.
    #[arg(long)]
    pub(crate) no_login: bool,
}

/// `mcx login`'s options.
#[derive(Args, Debug)]
pub(crate) struct LoginArgs {
    /// The server to sign in to: the same as --url before the command (`mcx login --url URL`
    /// or `mcx --url URL login`).
    #[arg(long = "url", id = "login_url", value_name = "URL")]
    pub(crate) url: Option<String>,
}

/// `mcx logout`'s options.
#[derive(Args, Debug)]
pub(crate) struct LogoutArgs {
    /// The server whose tokens to forget: the same as --url before the command.
    #[arg(long = "url", id = "logout_url", value_name = "URL")]
    pub(crate) url: Option<String>,
    /// Forget every token and registration mcx keeps, for every server (--url is then
    /// ignored).
    #[arg(long)]
    pub(crate) all: bool,
}

/// `target` with the --url given after `login` or `logout` (`after`), if any; an error when
/// --url is given on both sides with different URLs.
pub(crate) fn with_url(target: &Target, after: Option<&String>) -> Result<Target, Failed> {
    let mut target = target.clone();
    match (&target.url, after) {
        (Some(before), Some(after)) if before != after => {
            return Err(Failed::usage(format!(
                "two different --url: {before} (before the command) and {after} (after it)"
            )));
        }
        (_, Some(after)) => target.url = Some(after.clone()),
        (_, None) => {}
    }
    Ok(target)
}

/// mcx's configuration directory, from the variables `var` gives (see the module's docs).
pub(crate) fn config_dir(var: &dyn Fn(&str) -> Option<OsString>) -> Result<PathBuf, String> {
    let set = |name: &str| {
        var(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = set(CONFIG_DIR_VARIABLE) {
        return Ok(dir);
    }
    if cfg!(windows) {
        return set("APPDATA")
            .map(|dir| dir.join("mcx"))
            .ok_or_else(|| format!("no configuration directory: set {CONFIG_DIR_VARIABLE}"));
    }
    // XDG asks for an absolute path; a relative one is ignored.
    if let Some(dir) = set("XDG_CONFIG_HOME").filter(|dir| dir.is_absolute()) {
        return Ok(dir.join("mcx"));
    }
    let home = set("HOME").ok_or_else(|| {
        format!("no configuration directory: HOME is not set (set {CONFIG_DIR_VARIABLE})")
    })?;
    if cfg!(target_os = "macos") {
        return Ok(home.join("Library/Application Support/mcx"));
    }
    Ok(home.join(".config/mcx"))
}

/// The directory of the token store.
fn store_dir() -> Result<PathBuf, String> {
    Ok(config_dir(&|name| std::env::var_os(name))?.join("auth"))
}

/// The token store, created when missing.
fn open_store() -> Result<Arc<FileStore>, Failed> {
    let dir = store_dir().map_err(Failed::usage)?;
    FileStore::new(&dir)
        .map(Arc::new)
        .map_err(|e| Failed::new(Kind::Usage, format!("the token store: {e}")))
}

/// The token store of a client command: with `create`, created when missing; without, the
/// existing one only (nothing is written under the user's config directory by a command that
/// cannot log in). A store that cannot be used is replaced by one in memory, with a warning.
fn command_store(create: bool) -> Arc<dyn TokenStore> {
    let exists = store_dir().is_ok_and(|dir| dir.is_dir());
    if !create && !exists {
        return Arc::new(MemoryStore::new());
    }
    match open_store() {
        Ok(store) => store,
        Err(failed) => {
            eprintln!("mcx: warning: {}; tokens are not kept", failed.message);
            Arc::new(MemoryStore::new())
        }
    }
}

/// Whether a browser is likely to open (see the module's docs); `var` gives the variables.
fn browser_likely(var: &dyn Fn(&str) -> Option<OsString>) -> bool {
    if cfg!(any(target_os = "macos", windows)) {
        return true;
    }
    ["DISPLAY", "WAYLAND_DISPLAY"]
        .iter()
        .any(|name| var(name).is_some_and(|value| !value.is_empty()))
}

/// Asks the system to open `url` in a browser, without waiting for it.
fn open_browser(url: &str) -> std::io::Result<()> {
    let mut command = if cfg!(target_os = "macos") {
        let mut command = std::process::Command::new("open");
        command.arg(url);
        command
    } else if cfg!(windows) {
        let mut command = std::process::Command::new("rundll32");
        command.args(["url.dll,FileProtocolHandler", url]);
        command
    } else {
        let mut command = std::process::Command::new("xdg-open");
        command.arg(url);
        command
    };
    let mut child = command
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    // Reaped in the background: the opener may wait for the browser.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}

/// What the loopback handler does with an authorization request: print its URL on stderr and
/// ask a browser to open it (unless `no_browser`, or no browser is likely).
fn show(no_browser: bool) -> impl Fn(&AuthorizationRequest) + Send + Sync + 'static {
    move |request| {
        let say = |text: String| eprintln!("mcx: {}", crate::output::for_stderr(&text));
        say(format!(
            "to authorize mcx for {} at {}, open this URL in a browser:",
            request.resource, request.issuer
        ));
        eprintln!("\n    {}\n", crate::output::for_stderr(&request.url));
        if !no_browser && browser_likely(&|name| std::env::var_os(name)) {
            match open_browser(&request.url) {
                Ok(()) => say("a browser was asked to open it".to_owned()),
                Err(e) => say(format!("no browser could be opened ({e})")),
            }
        }
        say(format!(
            "waiting for the redirect to {} (Ctrl-C to give up)",
            request.redirect_uri
        ));
    }
}

/// Whether the stored `resource` covers `url`: the same URL, or a parent of it on a `/`
/// boundary (fragments ignored).
pub(crate) fn covers(resource: &str, url: &str) -> bool {
    let resource = resource.split('#').next().unwrap_or_default();
    let url = url.split('#').next().unwrap_or_default();
    match url.strip_prefix(resource) {
        Some("") => true,
        Some(rest) => resource.ends_with('/') || rest.starts_with(['/', '?']),
        None => false,
    }
}

/// The keys of the stored tokens covering `url`.
async fn covering(store: &dyn TokenStore, url: &str) -> Result<Vec<StoreKey>, Failed> {
    let keys = store.list().await.map_err(|e| store_failed(&e))?;
    Ok(keys
        .into_iter()
        .filter(|key| matches!(key, StoreKey::Tokens { resource, .. } if covers(resource, url)))
        .collect())
}

fn store_failed(error: &dyn std::fmt::Display) -> Failed {
    Failed::new(Kind::Usage, format!("the token store: {error}"))
}

/// The redirect URI of the registration kept at the authorization server of the first of
/// `keys`: a later run sends the same one, so that the registration (and its refresh tokens)
/// stay usable.
async fn stored_redirect_uri(store: &dyn TokenStore, keys: &[StoreKey]) -> Option<String> {
    let issuer = keys.first()?.issuer();
    match store.load(&StoreKey::client(issuer)).await {
        Ok(Some(Stored::Client(record))) => record.redirect_uris.into_iter().next(),
        _ => None,
    }
}

/// The port of a loopback redirect URI `http://127.0.0.1:PORT/callback`.
fn loopback_port(uri: &str) -> Option<u16> {
    let rest = uri.strip_prefix("http://127.0.0.1:")?;
    let port = rest.strip_suffix(modelctx_client::auth::CALLBACK_PATH)?;
    port.parse().ok()
}

/// The redirect URI of `port`.
fn redirect_uri_of(port: u16) -> String {
    format!(
        "http://127.0.0.1:{port}{}",
        modelctx_client::auth::CALLBACK_PATH
    )
}

/// The loopback listener: on `--redirect-port`, else on the port of `stored` (any port when
/// that one is taken), else on any port.
async fn bind(args: &OAuthArgs, stored: Option<&str>) -> Result<LoopbackRedirect, Failed> {
    let failed = |port: u16, e: std::io::Error| {
        Failed::new(
            Kind::Connection,
            format!("cannot listen for the redirect on 127.0.0.1:{port}: {e}"),
        )
    };
    if let Some(port) = args.redirect_port {
        return LoopbackRedirect::bind(("127.0.0.1", port))
            .await
            .map_err(|e| failed(port, e));
    }
    if let Some(port) = stored.and_then(loopback_port)
        && let Ok(loopback) = LoopbackRedirect::bind(("127.0.0.1", port)).await
    {
        return Ok(loopback);
    }
    LoopbackRedirect::bind(("127.0.0.1", 0))
        .await
        .map_err(|e| failed(0, e))
}

/// The pre-registered client of `--client-id` (with its secret).
fn registered(args: &OAuthArgs) -> Result<Option<Registered>, Failed> {
    let Some(id) = &args.client_id else {
        return Ok(None);
    };
    let mut client = Registered::unbound(id);
    if let Some(path) = &args.client_secret_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Failed::usage(format!("--client-secret-file {}: {e}", path.display())))?;
        let secret = text.strip_suffix('\n').unwrap_or(&text);
        let secret = secret.strip_suffix('\r').unwrap_or(secret);
        if secret.is_empty() {
            return Err(Failed::usage(format!(
                "--client-secret-file {}: the file is empty",
                path.display()
            )));
        }
        client = client.secret(secret);
    }
    Ok(Some(client))
}

/// The OAuth client with mcx's settings, `store`, `redirect_uri` and `handler`.
fn build(
    args: &OAuthArgs,
    store: Arc<dyn TokenStore>,
    redirect_uri: Option<String>,
    handler: Option<Arc<dyn AuthorizationHandler>>,
) -> Result<OAuth, Failed> {
    let mut builder = OAuth::builder().client_name("mcx").store(store);
    if let Some(client) = registered(args)? {
        builder = builder.client(client);
    }
    if let Some(url) = &args.client_metadata_url {
        builder = builder.client_metadata_url(url);
    }
    if let Some(uri) = redirect_uri {
        builder = builder.redirect_uri(uri);
    }
    if let Some(handler) = handler {
        builder = builder.handler(handler);
    }
    builder.build().map_err(|e| Failed::usage(e.to_string()))
}

/// The OAuth client of a command with `--url URL`, if any:
/// - stderr a terminal (and not `--no-login`): with a loopback listener and the browser; when no
///   stored token covers `url`, logged in first (a failure there is the command's, unless the
///   server has no protected resource metadata: then a warning, and no OAuth);
/// - else, with stored tokens covering `url`: without a handler, so that a login needed later
///   fails the command ([`login_needed`]);
/// - else none: there is nothing to send and no way to get it ([`connect_failed`] then says to
///   log in when the server is a protected resource).
pub(crate) async fn for_command(target: &Target, url: &str) -> Result<Option<OAuth>, Failed> {
    let args = &target.oauth;
    let interactive = !args.no_login && std::io::stderr().is_terminal();
    let _ = LOGIN_URL.set(url.to_owned());
    let store = command_store(interactive);
    let covering = covering(store.as_ref(), url).await?;
    let stored = stored_redirect_uri(store.as_ref(), &covering).await;
    if !interactive {
        if covering.is_empty() {
            return Ok(None);
        }
        let redirect_uri = args.redirect_port.map(redirect_uri_of).or(stored);
        return build(args, store, redirect_uri, None).map(Some);
    }
    let loopback = bind(args, stored.as_deref()).await?;
    let redirect_uri = loopback.redirect_uri();
    let handler = Arc::new(loopback.handler(show(args.no_browser)));
    let oauth = build(args, store, Some(redirect_uri), Some(handler))?;
    if !covering.is_empty() {
        return Ok(Some(oauth));
    }
    match oauth.authorize_now(url).await {
        Ok(Some(tokens)) => eprintln!("mcx: {}", logged_in(&tokens)),
        Ok(None) => {}
        // The server (or its metadata) cannot be reached: connecting says so.
        Err(OAuthError::Unreachable { .. }) => {}
        Err(e) if !protected(url).await => {
            eprintln!(
                "mcx: warning: {}; going on without OAuth",
                crate::output::for_stderr(&login_failed(url, &e).message)
            );
            return Ok(None);
        }
        Err(e) => return Err(login_failed(url, &e)),
    }
    Ok(Some(oauth))
}

/// Whether the server at `url` publishes protected resource metadata (RFC 9728): an OAuth
/// resource server, to which `mcx login` applies.
async fn protected(url: &str) -> bool {
    let Ok(oauth) = OAuth::builder().build() else {
        return false;
    };
    oauth
        .discover(url, &Challenges::default())
        .await
        .is_ok_and(|discovery| discovery.protected_resource.is_some())
}

/// What to say when connecting to `url` failed with `error` for want of a login mcx may not do
/// here: the stored tokens no longer do and no login is allowed, or there were none and the
/// server (401) is a protected resource. `None`: something else.
pub(crate) async fn connect_failed(url: &str, error: &ConnectError) -> Option<Failed> {
    if let Some(message) = error.oauth_error().and_then(login_needed) {
        return Some(Failed::new(Kind::Connection, message));
    }
    let unauthorized = matches!(
        error,
        ConnectError::Unreachable(TransportError::Http(HttpTransportError::Status { status, .. }))
            if *status == http::StatusCode::UNAUTHORIZED
    );
    if unauthorized && LOGIN_URL.get().is_some() && protected(url).await {
        return Some(Failed::new(Kind::Connection, login_hint(url)));
    }
    None
}

/// The URL of the command (when mcx may use OAuth for it), for [`login_needed`]'s message.
static LOGIN_URL: OnceLock<String> = OnceLock::new();

/// The message for `error` when it means that the command needed a login it may not do.
pub(crate) fn login_needed(error: &OAuthError) -> Option<String> {
    match error {
        OAuthError::InvalidSetting {
            setting: "handler", ..
        }
        | OAuthError::InteractionRequired { .. } => {
            Some(login_hint(LOGIN_URL.get().map_or("URL", String::as_str)))
        }
        _ => None,
    }
}

/// Says to run `mcx login` for `url`.
fn login_hint(url: &str) -> String {
    format!(
        "{url} asks for authorization and mcx holds no usable token for it: run `mcx --url {url} \
         login` (mcx signs in by itself only when stderr is a terminal, without --no-login)"
    )
}

/// A failed login.
fn login_failed(url: &str, error: &OAuthError) -> Failed {
    let kind = match error {
        OAuthError::Unreachable { .. } | OAuthError::Timeout { .. } => Kind::Connection,
        OAuthError::InvalidSetting { .. } => Kind::Usage,
        _ => Kind::Protocol,
    };
    Failed::new(kind, format!("cannot log in to {url}: {error}"))
}

/// `logged in to <resource> at <issuer> (scopes …, expires …)`.
fn logged_in(tokens: &Tokens) -> String {
    let scopes = if tokens.scopes.is_empty() {
        "no scopes".to_owned()
    } else {
        format!("scopes {}", tokens.scopes.join(" "))
    };
    let expires = match tokens.expires_at {
        Some(at) => {
            let left = at
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .as_secs();
            format!("expires in {left} s")
        }
        None => "no expiry given".to_owned(),
    };
    let refresh = if tokens.refresh_token.is_some() {
        ", refreshable"
    } else {
        ""
    };
    format!(
        "logged in to {} at {} ({scopes}, {expires}{refresh})",
        tokens.resource, tokens.issuer
    )
}

/// `mcx --url URL login`.
pub(crate) async fn login(target: &Target) -> ExitCode {
    let Some(url) = &target.url else {
        return Failed::usage("login needs --url URL (the server to sign in to) before it")
            .report(false);
    };
    match crate::commands::bearer(target) {
        Ok(None) => {}
        Ok(Some(_)) => {
            return Failed::usage(
                "a bearer token is given (--bearer, --bearer-file or MCX_BEARER): mcx sends it \
                 and does not log in",
            )
            .report(false);
        }
        Err(e) => return Failed::usage(e).report(false),
    }
    let logged = async {
        let args = &target.oauth;
        let store = open_store()?;
        let covering = covering(store.as_ref(), url).await?;
        let stored = stored_redirect_uri(store.as_ref(), &covering).await;
        let loopback = bind(args, stored.as_deref()).await?;
        let redirect_uri = loopback.redirect_uri();
        let handler = Arc::new(loopback.handler(show(args.no_browser)));
        let oauth = build(args, store, Some(redirect_uri), Some(handler))?;
        oauth
            .authorize_now(url)
            .await
            .map_err(|e| login_failed(url, &e))
    };
    let logged = tokio::select! {
        logged = logged => logged,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("mcx: interrupted; not logged in");
            return ExitCode::from(130);
        }
    };
    match logged {
        Ok(Some(tokens)) => {
            say!("{}", logged_in(&tokens));
            ExitCode::SUCCESS
        }
        Ok(None) => {
            say!("{url} does not ask for authorization: nothing to log in to");
            ExitCode::SUCCESS
        }
        Err(failed) => failed.report(false),
    }
}

/// `mcx --url URL logout` and `mcx logout --all`: the stored tokens of the URL (with `--all`,
/// of every server) revoked at their authorization servers where they offer it (RFC 7009, best
/// effort, 5 s per token: `OAuth::logout_of`), then forgotten; with `--all`, the client
/// registrations too.
pub(crate) async fn logout(target: &Target, args: &LogoutArgs) -> ExitCode {
    let url = match (&target.url, args.all) {
        (_, true) => None,
        (Some(url), false) => Some(url.as_str()),
        (None, false) => {
            return Failed::usage(
                "logout needs --url URL before it (the server whose tokens to forget), or --all",
            )
            .report(false);
        }
    };
    match log_out(&target.oauth, url).await {
        Ok((logged_out, registrations)) => {
            for entry in &logged_out {
                say!(
                    "logged out of {} at {} (refresh token {}; access token {})",
                    entry.resource,
                    entry.issuer,
                    entry.refresh_token,
                    entry.access_token
                );
            }
            if registrations > 0 {
                say!("{registrations} client registration(s) forgotten");
            }
            if logged_out.is_empty() && registrations == 0 {
                match url {
                    Some(url) => say!("no tokens stored for {url}"),
                    None => say!("no tokens stored"),
                }
            }
            ExitCode::SUCCESS
        }
        Err(failed) => failed.report(false),
    }
}

/// Logs out of `url` (every server: `None`, which forgets the registrations too): what was
/// logged out, and how many registrations were forgotten.
async fn log_out(args: &OAuthArgs, url: Option<&str>) -> Result<(Vec<LoggedOut>, usize), Failed> {
    let store = open_store()?;
    let keys = match url {
        Some(url) => covering(store.as_ref(), url).await?,
        None => store.list().await.map_err(|e| store_failed(&e))?,
    };
    let mut logged_out = Vec::new();
    // Each resource's tokens with the client identity kept for their issuer: the same redirect
    // URI as at the login, so that the stored registration is the one used to revoke.
    for key in &keys {
        let StoreKey::Tokens { resource, .. } = key else {
            continue;
        };
        let redirect_uri = stored_redirect_uri(store.as_ref(), std::slice::from_ref(key)).await;
        let oauth = build(args, store.clone(), redirect_uri, None)?;
        let target = url.unwrap_or(resource);
        let done = oauth
            .logout_of(target)
            .await
            .map_err(|e| Failed::new(Kind::Usage, format!("cannot log out of {target}: {e}")))?;
        logged_out.extend(done.tokens);
        if url.is_some() {
            break;
        }
    }
    let mut registrations = 0;
    if url.is_none() {
        for key in store.list().await.map_err(|e| store_failed(&e))? {
            store.remove(&key).await.map_err(|e| store_failed(&e))?;
            registrations += usize::from(matches!(key, StoreKey::Client { .. }));
        }
    }
    Ok((logged_out, registrations))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn the_config_dir_follows_the_variables_in_order() {
        let dir = |pairs: &[(&str, &str)]| config_dir(&vars(pairs));
        assert_eq!(
            dir(&[
                ("MCX_CONFIG_DIR", "/tmp/m"),
                ("XDG_CONFIG_HOME", "/x"),
                ("HOME", "/h"),
                ("APPDATA", "C:\\a"),
            ]),
            Ok(PathBuf::from("/tmp/m"))
        );
        if cfg!(all(unix, not(target_os = "macos"))) {
            assert_eq!(
                dir(&[("XDG_CONFIG_HOME", "/x"), ("HOME", "/h")]),
                Ok(PathBuf::from("/x/mcx"))
            );
            // Empty or relative: ignored.
            assert_eq!(
                dir(&[
                    ("MCX_CONFIG_DIR", ""),
                    ("XDG_CONFIG_HOME", "rel"),
                    ("HOME", "/h")
                ]),
                Ok(PathBuf::from("/h/.config/mcx"))
            );
            let missing = dir(&[]).unwrap_err();
            assert!(missing.contains("MCX_CONFIG_DIR"), "{missing}");
        }
        if cfg!(target_os = "macos") {
            assert_eq!(
                dir(&[("HOME", "/h")]),
                Ok(PathBuf::from("/h/Library/Application Support/mcx"))
            );
        }
        if cfg!(windows) {
            assert_eq!(
                dir(&[("APPDATA", "C:\\a"), ("HOME", "/h")]),
                Ok(PathBuf::from("C:\\a").join("mcx"))
            );
        }
    }

    #[test]
    fn a_browser_is_likely_with_a_display() {
        if cfg!(any(target_os = "macos", windows)) {
            assert!(browser_likely(&vars(&[])));
            return;
        }
        assert!(!browser_likely(&vars(&[])));
        assert!(!browser_likely(&vars(&[("DISPLAY", "")])));
        assert!(browser_likely(&vars(&[("DISPLAY", ":0")])));
        assert!(browser_likely(&vars(&[("WAYLAND_DISPLAY", "wayland-0")])));
    }

    #[test]
    fn a_resource_covers_itself_and_what_is_below_it() {
        let mcp = "http://127.0.0.1:8080/mcp";
        assert!(covers(mcp, mcp));
        assert!(covers(mcp, "http://127.0.0.1:8080/mcp/sub"));
        assert!(covers(mcp, "http://127.0.0.1:8080/mcp?x=1"));
        assert!(covers(mcp, "http://127.0.0.1:8080/mcp#frag"));
        assert!(covers("http://127.0.0.1:8080", mcp));
        assert!(covers("http://127.0.0.1:8080/", mcp));
        assert!(!covers(mcp, "http://127.0.0.1:8080/mcpx"));
        assert!(!covers(mcp, "http://127.0.0.1:8080/"));
        assert!(!covers("http://127.0.0.1:80", mcp));
        assert!(!covers(mcp, "https://127.0.0.1:8080/mcp"));
    }

    #[test]
    fn a_loopback_redirect_uri_gives_its_port() {
        assert_eq!(loopback_port(&redirect_uri_of(8123)), Some(8123));
        assert_eq!(loopback_port("http://127.0.0.1:8123/cb"), None);
        assert_eq!(loopback_port("http://localhost:8123/callback"), None);
        assert_eq!(loopback_port("https://app.example/callback"), None);
    }

    #[test]
    fn a_login_needed_names_the_command_to_run() {
        let needed = OAuthError::InteractionRequired {
            resource: "http://127.0.0.1:1/mcp".to_owned(),
        };
        let message = login_needed(&needed).expect("a login is needed");
        assert!(message.contains("login`"), "{message}");
        assert!(login_needed(&OAuthError::StateMismatch).is_none());
    }
}
