//! `mcx --url URL login` against a real authorization server (oidc-provider with its login and
//! consent forms, `modelctx_tests::oidc`, played by `FormUser`) in front of `mcx serve demo
//! --http 127.0.0.1:0 --auth-issuer ISSUER`: the authorization URL on stderr, the redirect
//! received on mcx's loopback port, the tokens in the store of `MCX_CONFIG_DIR` (a `0600` file);
//! later commands use them without any prompt; `mcx logout` revokes (RFC 7009) and forgets them;
//! off a terminal, a command that would need a login fails saying to run `mcx login`.
//!
//! Skipped without Node (unless `MODELCTX_REQUIRE_NODE` is set), like the other AS tests.

use std::path::Path;
use std::process::{Output, Stdio};

use modelctx_tests::http::within;
use modelctx_tests::oidc::{As, FormUser, USER};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::cli::{MCX, TempDir, serve_demo_with, serve_http, stderr, stdout};

/// mcx with `args`, its configuration in `config`, stdin closed and stdout and stderr piped
/// (no terminal).
async fn run(config: &Path, args: &[&str]) -> Output {
    within(
        &format!("mcx {args:?}"),
        Command::new(MCX)
            .args(args)
            .env("MCX_CONFIG_DIR", config)
            .env_remove("MCX_BEARER")
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("mcx runs")
}

/// The files of the token store in `config`.
fn store_files(config: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(config.join("auth"))
        .expect("the store's directory")
        .map(|entry| entry.expect("an entry").path())
        .collect();
    files.sort();
    files
}

/// `mode`'s permission bits.
#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn login_keeps_tokens_that_later_commands_use_and_logout_forgets() {
    // mcx picks its port (0), so the AS learns the resource once mcx prints its URL.
    let Some(authorization_server) = As::start_forms(&["http://127.0.0.1:9/unused"]).await else {
        return;
    };
    let issuer = authorization_server.issuer().to_owned();
    let (server, _) = serve_demo_with(&["--http", "127.0.0.1:0", "--auth-issuer", &issuer]);
    let url = server.url.clone();
    authorization_server.add_resource(&url).await;
    let config = TempDir::new("login");
    let config = config.0.as_path();

    // Off a terminal, without a login: the command says what to run, and writes nothing.
    let refused = run(config, &["--url", &url, "--timeout", "10", "tools", "list"]).await;
    assert!(!refused.status.success(), "{}", stdout(&refused));
    let login_hint = format!("run `mcx --url {url} login`");
    assert!(
        stderr(&refused).contains(&login_hint),
        "{}",
        stderr(&refused)
    );
    assert!(!config.join("auth").exists(), "nothing stored");

    // `login`: the URL on stderr, the user signs in, the browser lands on mcx's loopback port.
    let mut login = Command::new(MCX)
        .args(["--url", &url, "--no-browser", "login"])
        .env("MCX_CONFIG_DIR", config)
        .env_remove("MCX_BEARER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("mcx login runs");
    let mut lines = BufReader::new(login.stderr.take().expect("stderr")).lines();
    let mut said = Vec::new();
    let (authorization_url, waiting) = within("the authorization URL", async {
        let mut authorization_url = None;
        loop {
            let line = lines
                .next_line()
                .await
                .expect("stderr")
                .unwrap_or_else(|| panic!("mcx ended first: {said:?}"));
            said.push(line.clone());
            let line = line.trim();
            if line.starts_with(&format!("{issuer}/")) {
                authorization_url = Some(line.to_owned());
            }
            if let Some(rest) = line.strip_prefix("mcx: waiting for the redirect to ") {
                let redirect = rest.split_whitespace().next().expect("a URI").to_owned();
                break (authorization_url.expect("the URL first"), redirect);
            }
        }
    })
    .await;
    let drained = tokio::spawn(async move {
        let mut rest = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            rest.push(line);
        }
        rest
    });
    let port = waiting
        .strip_prefix("http://127.0.0.1:")
        .and_then(|rest| rest.strip_suffix("/callback"))
        .and_then(|port| port.parse::<u16>().ok())
        .unwrap_or_else(|| panic!("not a loopback redirect URI: {waiting}"));
    assert_ne!(port, 0);
    assert!(
        authorization_url.contains(&format!("127.0.0.1%3A{port}%2Fcallback")),
        "the redirect URI of the printed port: {authorization_url}"
    );
    let user = FormUser::new(&authorization_server);
    let page = user.browse(&authorization_url).await.expect("signs in");
    assert_eq!(page, 200, "the loopback listener's page");
    let logged = within("mcx login", login.wait_with_output())
        .await
        .expect("mcx login ends");
    let rest = drained.await.expect("stderr drained");
    assert!(logged.status.success(), "{said:?} {rest:?}");
    let logged_out = stdout(&logged);
    assert!(
        logged_out.starts_with(&format!("logged in to {url} at {issuer} (scopes ")),
        "{logged_out}"
    );
    assert!(logged_out.contains("demo:admin"), "{logged_out}");
    assert_eq!((user.logins(), user.consents()), (1, 1));

    // The store: one file for the AS, the user's alone.
    let files = store_files(config);
    assert_eq!(files.len(), 1, "{files:?}");
    let kept = std::fs::read_to_string(&files[0]).expect("the store's file");
    assert!(
        kept.contains("access_token") && kept.contains(&url),
        "{kept}"
    );
    #[cfg(unix)]
    {
        assert_eq!(mode(&files[0]), 0o600, "{files:?}");
        assert_eq!(mode(&config.join("auth")), 0o700);
    }

    // Later commands, off a terminal, use the stored token: no prompt, no login.
    let listed = run(config, &["--url", &url, "--timeout", "10", "tools", "list"]).await;
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(stdout(&listed).contains("whoami"), "{}", stdout(&listed));
    let called = run(
        config,
        &["--url", &url, "--timeout", "10", "tools", "call", "whoami"],
    )
    .await;
    assert!(called.status.success(), "{}", stderr(&called));
    assert!(
        stdout(&called).starts_with(&format!("{USER} (issuer {issuer}), scopes ")),
        "{}",
        stdout(&called)
    );
    assert!(
        !stderr(&called).contains("http://"),
        "no URL shown: {}",
        stderr(&called)
    );
    assert_eq!(user.logins(), 1, "no second login");

    // `logout` revokes the refresh token at the AS (RFC 7009; oidc-provider cannot revoke its
    // JWT access tokens, and says so) and forgets the tokens.
    let kept: serde_json::Value = serde_json::from_str(&kept).expect("JSON");
    let client_id = kept["client"]["client_id"]
        .as_str()
        .expect("the registration")
        .to_owned();
    let refresh_token = kept["tokens"][&url]["refresh_token"]
        .as_str()
        .expect("a refresh token (offline_access)")
        .to_owned();
    let out = run(config, &["--url", &url, "logout"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with(&format!(
            "logged out of {url} at {issuer} (refresh token revoked; access token "
        )),
        "{}",
        stdout(&out)
    );
    let refused = authorization_server
        .refresh(&client_id, &refresh_token, &url)
        .await
        .expect_err("the refresh token is revoked");
    assert_eq!(refused.error, "invalid_grant", "{refused:?}");
    for file in store_files(config) {
        let kept = std::fs::read_to_string(&file).expect("the store's file");
        assert!(!kept.contains("access_token"), "{kept}");
    }
    // And the next command, off a terminal, says to log in again.
    let refused = run(config, &["--url", &url, "--timeout", "10", "tools", "list"]).await;
    assert!(!refused.status.success(), "{}", stdout(&refused));
    assert!(
        stderr(&refused).contains(&login_hint),
        "{}",
        stderr(&refused)
    );
    // As does `--no-login`, whatever the terminal.
    let refused = run(config, &["--url", &url, "--no-login", "tools", "list"]).await;
    assert!(
        stderr(&refused).contains(&login_hint),
        "{}",
        stderr(&refused)
    );
    drop(server);
}

#[tokio::test]
async fn login_to_a_server_that_does_not_ask_for_authorization_says_so() {
    let server = serve_http();
    let config = TempDir::new("login-open");
    let out = run(&config.0, &["--url", &server.url, "--no-browser", "login"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "{} does not ask for authorization: nothing to log in to\n",
            server.url
        )
    );
    // Commands against it are unchanged, and store nothing.
    let listed = run(&config.0, &["--url", &server.url, "tools", "list"]).await;
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(store_files(&config.0).is_empty());
}

#[test]
fn login_and_logout_need_a_server_and_bearer_tokens_bypass_oauth() {
    let config = TempDir::new("login-usage");
    let mcx = |args: &[&str], bearer: Option<&str>| {
        let mut command = std::process::Command::new(MCX);
        command
            .args(args)
            .env("MCX_CONFIG_DIR", &config.0)
            .env_remove("MCX_BEARER")
            .stdin(Stdio::null());
        if let Some(token) = bearer {
            command.env("MCX_BEARER", token);
        }
        command.output().expect("mcx runs")
    };
    let out = mcx(&["login"], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--url"), "{}", stderr(&out));
    let out = mcx(&["logout"], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--all"), "{}", stderr(&out));
    let out = mcx(&["--url", "http://127.0.0.1:9/mcp", "login"], Some("t"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("bearer"), "{}", stderr(&out));
    // --url after the command names the server too (it reaches the same bearer check).
    let out = mcx(&["login", "--url", "http://127.0.0.1:9/mcp"], Some("t"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("bearer"), "{}", stderr(&out));
    let out = mcx(
        &[
            "--url",
            "http://127.0.0.1:9/mcp",
            "logout",
            "--url",
            "http://127.0.0.1:8/mcp",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("two different --url"),
        "{}",
        stderr(&out)
    );
    let out = mcx(&["logout", "--url", "http://127.0.0.1:9/mcp"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = mcx(&["logout", "--all"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "no tokens stored\n");
}
