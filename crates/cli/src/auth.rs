//! `--auth-issuer`, `--auth-audience` and `--auth-token-file`: the OAuth 2.1 resource server
//! (`modelctx-auth`) in front of `mcx serve demo --http` and `mcx proxy`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use modelctx_server::auth::{Auth, AuthGuard, StaticToken};

/// Who may call an HTTP server of mcx (default: anyone the Host and Origin checks let through).
#[derive(Args, Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct AuthArgs {
    /// Require OAuth 2.1 access tokens issued by this authorization server (its issuer
    /// identifier: https, or http to a loopback host): JWTs (RFC 9068) checked against its
    /// keys, with the resource URL as their audience. The resource URL is http://ADDR/mcp, ADDR
    /// as given (port 0: the free port chosen at start), unless --auth-audience says otherwise.
    /// HTTP only.
    #[arg(long, value_name = "URL")]
    pub(crate) auth_issuer: Option<String>,
    /// The resource URL instead of http://ADDR/mcp: what tokens must name as their audience and
    /// the protected resource metadata says (the URL clients use: a host name, https behind a
    /// reverse proxy). Required with --auth-issuer when ADDR is unspecified (0.0.0.0, ::).
    #[arg(long, value_name = "URL", requires = "auth_issuer")]
    pub(crate) auth_audience: Option<String>,
    /// Require this bearer secret (the file's content without its trailing newline), compared
    /// in constant time: for local use. Its caller is `static`, with every scope of the server.
    /// HTTP only; with --auth-issuer, either is accepted.
    #[arg(long, value_name = "PATH")]
    pub(crate) auth_token_file: Option<PathBuf>,
}

impl AuthArgs {
    /// Whether any of the flags was given.
    pub(crate) fn any(&self) -> bool {
        self.auth_issuer.is_some() || self.auth_token_file.is_some()
    }

    /// The flag to name in an error saying the flags need HTTP.
    pub(crate) fn first_flag(&self) -> &'static str {
        if self.auth_issuer.is_some() {
            "--auth-issuer"
        } else {
            "--auth-token-file"
        }
    }
}

/// The resource URL for the server on `addr`: `--auth-audience`, else `http://ADDR/mcp`.
pub(crate) fn resource(args: &AuthArgs, addr: SocketAddr) -> Result<String, String> {
    if let Some(audience) = &args.auth_audience {
        return Ok(audience.clone());
    }
    if args.auth_issuer.is_some() && addr.ip().is_unspecified() {
        return Err(format!(
            "--auth-issuer: {} is no address clients use, so it cannot name the resource: give \
             --auth-audience (the URL clients use)",
            addr.ip()
        ));
    }
    Ok(format!("http://{addr}/mcp"))
}

/// The guard the flags ask for, for the server on `addr` (its port already fixed) whose items
/// need `scopes`; `None` without any flag. A static token's caller holds every scope.
pub(crate) fn guard(
    args: &AuthArgs,
    addr: SocketAddr,
    scopes: &[&str],
) -> Result<Option<AuthGuard>, String> {
    if !args.any() {
        return Ok(None);
    }
    let mut auth = Auth::resource(resource(args, addr)?).scopes_supported(scopes.iter().copied());
    if let Some(issuer) = &args.auth_issuer {
        auth = auth.issuer(issuer.as_str());
    }
    if let Some(path) = &args.auth_token_file {
        let token = StaticToken::from_file(path)
            .map_err(|e| format!("--auth-token-file {}: {e}", path.display()))?;
        auth = auth.verifier(token.scopes(scopes.iter().copied()));
    }
    auth.build().map(Some).map_err(|e| {
        let flags = if args.auth_issuer.is_some() {
            "--auth-issuer/--auth-audience"
        } else {
            "--auth-token-file"
        };
        format!("{flags}: {e}")
    })
}

/// Fetches the issuer's metadata and keys now, so that a wrong `--auth-issuer` shows at start;
/// a failure is only a warning (the guard tries again later).
pub(crate) async fn prefetch(guard: &AuthGuard, args: &AuthArgs) {
    if args.auth_issuer.is_none() {
        return;
    }
    if let Err(e) = guard.prefetch().await {
        eprintln!(
            "mcx: warning: the authorization server cannot be reached yet ({e}); tokens are \
             refused until it can"
        );
    }
}

/// One line for stderr saying what the guard accepts.
pub(crate) fn describe(guard: &AuthGuard, args: &AuthArgs) -> String {
    let mut accepted = Vec::new();
    if let Some(issuer) = &args.auth_issuer {
        accepted.push(format!("access tokens of {issuer}"));
    }
    if let Some(path) = &args.auth_token_file {
        accepted.push(format!("the secret in {}", path.display()));
    }
    let accepted = accepted.join(" or ");
    if args.auth_issuer.is_some() {
        format!("requests need {accepted} (resource {})", guard.resource())
    } else {
        format!("requests need {accepted}")
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        auth: AuthArgs,
    }

    fn parse(args: &[&str]) -> Result<AuthArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("mcx").chain(args.iter().copied())).map(|c| c.auth)
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_flags_parse_and_the_audience_needs_an_issuer() {
        assert_eq!(parse(&[]).unwrap(), AuthArgs::default());
        assert!(!parse(&[]).unwrap().any());
        let args = parse(&[
            "--auth-issuer",
            "https://id.example.com",
            "--auth-audience",
            "https://mcp.example.com/mcp",
            "--auth-token-file",
            "/tmp/t",
        ])
        .unwrap();
        assert_eq!(args.auth_issuer.as_deref(), Some("https://id.example.com"));
        assert_eq!(
            args.auth_audience.as_deref(),
            Some("https://mcp.example.com/mcp")
        );
        assert_eq!(args.auth_token_file, Some(PathBuf::from("/tmp/t")));
        assert!(args.any());
        let refused = parse(&["--auth-audience", "https://mcp.example.com/mcp"]).unwrap_err();
        assert_eq!(
            refused.kind(),
            clap::error::ErrorKind::MissingRequiredArgument
        );
        assert!(parse(&["--auth-token-file", "/tmp/t"]).unwrap().any());
    }

    #[test]
    fn the_resource_is_the_served_url_unless_the_audience_says_otherwise() {
        let issuer = parse(&["--auth-issuer", "http://127.0.0.1:9"]).unwrap();
        assert_eq!(
            resource(&issuer, addr("127.0.0.1:8080")).unwrap(),
            "http://127.0.0.1:8080/mcp"
        );
        assert_eq!(
            resource(&issuer, addr("[::1]:8080")).unwrap(),
            "http://[::1]:8080/mcp"
        );
        let error = resource(&issuer, addr("0.0.0.0:8080")).unwrap_err();
        assert!(error.contains("--auth-audience"), "{error}");
        let audience = parse(&[
            "--auth-issuer",
            "http://127.0.0.1:9",
            "--auth-audience",
            "https://mcp.example.com/api",
        ])
        .unwrap();
        assert_eq!(
            resource(&audience, addr("0.0.0.0:8080")).unwrap(),
            "https://mcp.example.com/api"
        );
        let guard = guard(&audience, addr("0.0.0.0:8080"), &[])
            .unwrap()
            .unwrap();
        assert_eq!(guard.resource(), "https://mcp.example.com/api");
        assert_eq!(
            guard.well_known_paths()[0],
            "/.well-known/oauth-protected-resource/api"
        );
    }

    #[test]
    fn no_flag_no_guard_and_bad_values_are_refused_with_the_flag_named() {
        let here = addr("127.0.0.1:8080");
        assert!(guard(&AuthArgs::default(), here, &[]).unwrap().is_none());
        let bad_issuer = parse(&["--auth-issuer", "http://id.example.com"]).unwrap();
        let error = guard(&bad_issuer, here, &[]).unwrap_err();
        assert!(error.starts_with("--auth-issuer"), "{error}");
        let missing = parse(&["--auth-token-file", "/nonexistent/mcx-token"]).unwrap();
        let error = guard(&missing, here, &[]).unwrap_err();
        assert!(
            error.starts_with("--auth-token-file /nonexistent/mcx-token: "),
            "{error}"
        );
    }

    #[test]
    fn a_token_file_makes_a_guard_for_the_served_url() {
        let path = std::env::temp_dir().join(format!("mcx-auth-unit-{}", std::process::id()));
        std::fs::write(&path, "s3cret\n").unwrap();
        let args = AuthArgs {
            auth_token_file: Some(path.clone()),
            ..AuthArgs::default()
        };
        let built = guard(&args, addr("127.0.0.1:8080"), &["demo:admin"]);
        std::fs::write(&path, "\n").unwrap();
        let empty = guard(&args, addr("127.0.0.1:8080"), &[]);
        let _ = std::fs::remove_file(&path);
        let built = built.unwrap().unwrap();
        assert_eq!(built.resource(), "http://127.0.0.1:8080/mcp");
        assert!(describe(&built, &args).contains("the secret in"));
        let error = empty.unwrap_err();
        assert!(error.contains("empty secret"), "{error}");
    }
}
