//! How `mcx` reaches servers: HTTPS with `--cacert` (a TLS front with the test CA's
//! certificate before `mcx serve demo --http`), the environment of a child server (`--env`,
//! `--inherit-env`, for `--stdio` and `mcx proxy`), and tools as a terminal user sees them
//! (`tools list` with arguments, `tools show`, `tools call --arg`, task-only tools).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;

use serde_json::Value;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::cli::{MCX, TempDir, demo_stdio, json, mcx, serve_demo_with, stderr, stdout};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A TLS server with the test CA's certificate for 127.0.0.1 that passes each connection on,
/// decrypted, to a plain HTTP server; stopped when dropped.
struct TlsFront {
    /// `https://127.0.0.1:PORT/mcp`.
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TlsFront {
    /// In front of the plain `http://` endpoint `upstream`.
    fn new(upstream: &str) -> TlsFront {
        let authority = upstream
            .strip_prefix("http://")
            .and_then(|rest| rest.split('/').next())
            .expect("an http URL")
            .to_owned();
        let certificates: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(fixture("server.pem"))
                .expect("the server certificate")
                .collect::<Result<_, _>>()
                .expect("PEM");
        let key = PrivateKeyDer::from_pem_file(fixture("server.key")).expect("the server key");
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certificates, key)
        .expect("a server configuration");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("https://{}/mcp", listener.local_addr().expect("address"));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                loop {
                    let (tcp, _) = tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok(accepted) => accepted,
                            Err(_) => continue,
                        },
                        _ = &mut stopped => return,
                    };
                    let acceptor = acceptor.clone();
                    let authority = authority.clone();
                    tokio::spawn(async move {
                        // A client that refuses the certificate ends the handshake here.
                        let Ok(mut tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let Ok(mut plain) = tokio::net::TcpStream::connect(&authority).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    });
                }
            });
        });
        TlsFront {
            url,
            stop: Some(stop),
            thread: Some(thread),
        }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[test]
fn https_with_the_test_ca_as_cacert_and_a_certificate_error_without_it() {
    let (server, _) = serve_demo_with(&["--http", "127.0.0.1:0"]);
    let front = TlsFront::new(&server.url);
    let url = front.url.as_str();
    let ca = fixture("ca.pem").display().to_string();

    let out = mcx(&["--url", url, "--cacert", &ca, "tools", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).lines().any(|l| l.starts_with("echo ")),
        "{}",
        stdout(&out)
    );
    let out = mcx(&[
        "--url",
        url,
        "--cacert",
        &ca,
        "tools",
        "call",
        "echo",
        "--arg",
        "text=over TLS",
    ]);
    assert_eq!(stdout(&out), "over TLS\n", "{}", stderr(&out));

    // Without --cacert the test CA is not trusted: the error says it is the certificate.
    let out = mcx(&["--url", url, "--timeout", "10", "tools", "list"]);
    assert!(!out.status.success());
    assert!(stdout(&out).is_empty(), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.starts_with("mcx: "), "{err}");
    assert!(err.contains("certificate"), "{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");
    assert!(err.contains("--cacert PATH"), "{err}");
    assert_ne!(out.status.code(), Some(2), "not a usage error: {err}");

    // A --cacert that is not a certificate file is refused before connecting.
    let key = fixture("server.key").display().to_string();
    let out = mcx(&["--url", url, "--cacert", &key, "tools", "list"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("--cacert {key}: no certificate in the file")),
        "{}",
        stderr(&out)
    );
    // --cacert goes with --url.
    let out = mcx(&["--stdio", &demo_stdio(), "--cacert", &ca, "tools", "list"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// A stdio MCP server (a shell script): tool `env` says the value of `FOO` in its environment;
/// tool `research` can only run as a task (a call without one is refused, as the TypeScript SDK
/// does, and recorded in the file `calls` beside the script).
fn shell_server(dir: &TempDir) -> String {
    let script = dir.0.join("server.sh");
    std::fs::write(
        &script,
        r#"calls="$(dirname "$0")/calls"
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$line" in
    *'"method":"initialize"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"shell","version":"1"}}}\n' "$id" ;;
    *'"method":"tools/list"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"env","description":"Says FOO","inputSchema":{"type":"object"}},{"name":"research","description":"Researches a topic","inputSchema":{"type":"object","properties":{"topic":{"type":"string"}},"required":["topic"]},"execution":{"taskSupport":"required"}}]}}\n' "$id" ;;
    *'"method":"tools/call"'*'"name":"research"'*)
      echo research >> "$calls"
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"SERVER SAYS: method not found"}}\n' "$id" ;;
    *'"method":"tools/call"'*)
      printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"FOO=[%s]"}]}}\n' "$id" "$FOO" ;;
    *)
      printf '{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}\n' "$id" ;;
  esac
done
"#,
    )
    .expect("script written");
    format!("sh {}", script.display())
}

/// `mcx args` with `FOO=outer` (and not `FOO2`) in its environment.
fn mcx_with_foo(args: &[&str]) -> Output {
    Command::new(MCX)
        .args(args)
        .env("FOO", "outer")
        .stdin(Stdio::null())
        .output()
        .expect("mcx runs")
}

#[test]
fn a_stdio_server_sees_foo_only_with_env_or_inherit_env() {
    let dir = TempDir::new("reach-env");
    let server = shell_server(&dir);
    for (flags, seen) in [
        (&[][..], "FOO=[]"),
        (&["--env", "FOO=bar"][..], "FOO=[bar]"),
        // The name alone passes mcx's own variable.
        (&["--env", "FOO"][..], "FOO=[outer]"),
        (&["--inherit-env"][..], "FOO=[outer]"),
        (&["--inherit-env", "--env", "FOO=bar"][..], "FOO=[bar]"),
        (
            &["--env", "OTHER=1", "--env", "FOO=a=b c"][..],
            "FOO=[a=b c]",
        ),
    ] {
        let mut args = vec!["--stdio", &server];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["tools", "call", "env"]);
        let out = mcx_with_foo(&args);
        assert_eq!(
            stdout(&out),
            format!("{seen}\n"),
            "{flags:?}: {}",
            stderr(&out)
        );
    }
    // They go with --stdio.
    for flags in [&["--env", "FOO=bar"][..], &["--inherit-env"][..]] {
        let mut args = vec!["--url", "http://127.0.0.1:9/mcp"];
        args.extend_from_slice(flags);
        args.push("ping");
        let out = mcx(&args);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("'--url <URL>' cannot be used with"),
            "{}",
            stderr(&out)
        );
    }
    // A name alone that mcx's environment does not have is refused, naming it.
    let out = Command::new(MCX)
        .args(["--stdio", &server, "--env", "FOO2", "tools", "call", "env"])
        .env_remove("FOO2")
        .stdin(Stdio::null())
        .output()
        .expect("mcx runs");
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "mcx: --env `FOO2`: `FOO2` is not set in mcx's environment (give --env FOO2=VALUE to \
         set it)\n"
    );
    assert!(stdout(&out).is_empty());
    let out = mcx(&["--stdio", &server, "--env", "=x", "ping"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--env `=x`: the name is empty"),
        "{}",
        stderr(&out)
    );
}

/// `mcx proxy --stdio SERVER --listen 127.0.0.1:0 extra...` with `FOO=outer` in its
/// environment; its URL; ended when dropped.
struct Proxy {
    child: Child,
    url: String,
}

impl Proxy {
    fn start(server: &str, extra: &[&str]) -> Proxy {
        let mut child = Command::new(MCX)
            .args(["proxy", "--stdio", server, "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("FOO", "outer")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mcx proxy starts");
        let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let url = loop {
            let line = lines.next().expect("the proxy's URL line").expect("stderr");
            if let Some(url) = line
                .strip_prefix("mcx proxy: ")
                .and_then(|rest| rest.split_whitespace().next())
                .filter(|url| url.starts_with("http://"))
            {
                break url.to_owned();
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Proxy { child, url }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn the_proxys_children_see_foo_only_with_env_or_inherit_env() {
    let dir = TempDir::new("reach-proxy-env");
    let server = shell_server(&dir);
    for (flags, seen) in [
        (&[][..], "FOO=[]"),
        (&["--env", "FOO=bar"][..], "FOO=[bar]"),
        (&["--inherit-env"][..], "FOO=[outer]"),
    ] {
        let proxy = Proxy::start(&server, flags);
        let out = mcx(&[
            "--url",
            &proxy.url,
            "--timeout",
            "10",
            "tools",
            "call",
            "env",
        ]);
        assert_eq!(
            stdout(&out),
            format!("{seen}\n"),
            "{flags:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn help_says_the_childs_environment_is_filtered_and_names_the_flags() {
    for args in [&["--help"][..], &["proxy", "--help"][..]] {
        let out = mcx(args);
        assert!(out.status.success(), "{}", stderr(&out));
        // Help wraps lines: compare with single spaces.
        let help = stdout(&out)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for expected in [
            "environment is filtered",
            "add some with --env, or pass them all with --inherit-env",
            "--env <KEY[=VALUE]>",
            "--inherit-env",
        ] {
            assert!(
                help.contains(expected),
                "{args:?}: {expected:?} in:\n{help}"
            );
        }
    }
    let out = mcx(&["tools", "call", "--help"]);
    let help = stdout(&out)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(help.contains("--arg <KEY=VALUE>"), "{help}");
    assert!(help.contains("merged into --args"), "{help}");
}

#[test]
fn tools_list_shows_the_arguments_and_tools_show_the_whole_tool() {
    let server = demo_stdio();
    let out = mcx(&["--stdio", &server, "tools", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(text.starts_with("NAME"), "{text}");
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.contains(" ARGUMENTS ")),
        "{text}"
    );
    assert!(
        line("add").starts_with("add (a: number, b: number) "),
        "{text}"
    );
    assert!(
        line("countdown").starts_with("countdown (steps: integer, delay_ms?: integer|null) "),
        "{text}"
    );
    assert!(line("echo").starts_with("echo (text: string) "), "{text}");
    assert!(!text.contains("task only"), "{text}");

    let out = mcx(&["--stdio", &server, "tools", "show", "add"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for expected in [
        "arguments: (a: number, b: number)",
        "input schema:\n  {",
        "output schema:\n  {",
        "\"sum\": {",
        "task support: forbidden (not given)",
    ] {
        assert!(text.contains(expected), "{expected:?} in:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["a", "number", "required", "One", "number."]),
        "{text}"
    );
    let value = json(&mcx(&[
        "--stdio", &server, "tools", "show", "add", "--json",
    ]));
    assert_eq!(value["name"], "add");
    assert_eq!(value["inputSchema"]["properties"]["a"]["type"], "number");
    assert!(value["outputSchema"].is_object(), "{value}");

    let out = mcx(&["--stdio", &server, "tools", "show", "nope"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("no tool `nope`"), "{}", stderr(&out));
}

#[test]
fn arg_gives_arguments_one_by_one_typed_by_the_schema() {
    let server = demo_stdio();
    let call = |extra: &[&str]| {
        let mut args = vec!["--stdio", server.as_str(), "tools", "call"];
        args.extend_from_slice(extra);
        mcx(&args)
    };
    let value = json(&call(&["add", "--arg", "a=2", "--arg", "b=3.5", "--json"]));
    assert_eq!(value["structuredContent"]["sum"], 5.5);
    // Merged with --args; --arg wins.
    let value = json(&call(&[
        "add",
        "--args",
        r#"{"a": 1, "b": 1}"#,
        "--arg",
        "b=5",
        "--json",
    ]));
    assert_eq!(value["structuredContent"]["sum"], 6.0);
    // The schema says string: 42 stays "42", true stays "true".
    let out = call(&["echo", "--arg", "text=42"]);
    assert_eq!(stdout(&out), "42\n", "{}", stderr(&out));
    let out = call(&["echo", "--arg", "text=true"]);
    assert_eq!(stdout(&out), "true\n", "{}", stderr(&out));
    let out = call(&["echo", "--arg", "nokey"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("--arg `nokey`: expected key=value"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn task_only_tools_are_marked_and_not_called() {
    let dir = TempDir::new("reach-task");
    let server = shell_server(&dir);
    let calls = dir.0.join("calls");
    let out = mcx(&["--stdio", &server, "tools", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let research = text
        .lines()
        .find(|l| l.starts_with("research "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(research.contains("(topic: string)"), "{research}");
    assert!(
        research.ends_with("(task only: call it with --task) Researches a topic"),
        "{research}"
    );
    let env = text.lines().find(|l| l.starts_with("env ")).expect("env");
    assert!(!env.contains("task only"), "{env}");

    let out = mcx(&["--stdio", &server, "tools", "show", "research"]);
    assert!(
        stdout(&out).contains("task support: required (task only: call it with --task)"),
        "{}",
        stdout(&out)
    );

    // With --arg the tool is listed first: refused without a call, status 4 (what the server
    // offers decides, as for a tool it does not have).
    let out = mcx(&[
        "--stdio", &server, "tools", "call", "research", "--arg", "topic=x",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("tool `research` can only run as a task"),
        "{err}"
    );
    assert!(!err.contains("SERVER SAYS"), "{err}");
    assert!(!calls.exists(), "the tool was called");
    // Without, the server's refusal is replaced by the reason.
    let out = mcx(&[
        "--stdio",
        &server,
        "tools",
        "call",
        "research",
        "--args",
        r#"{"topic": "x"}"#,
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("tool `research` can only run as a task"),
        "{err}"
    );
    assert!(!err.contains("SERVER SAYS"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(
        std::fs::read_to_string(&calls).expect("one call"),
        "research\n"
    );
    // Under --json: the protocol kind.
    let out = mcx(&[
        "--stdio", &server, "tools", "call", "research", "--arg", "topic=x", "--json",
    ]);
    assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
    let error: Value = serde_json::from_slice(&out.stdout).expect("a JSON error");
    assert_eq!(error["error"]["kind"], "protocol", "{error}");
    // Other tools are called as usual.
    let out = mcx(&["--stdio", &server, "tools", "call", "env", "--json"]);
    let value: Value = json(&out);
    assert_eq!(value["content"][0]["text"], "FOO=[]");
}

#[test]
fn serve_demo_http_and_the_proxy_take_a_host_name() {
    // `localhost` is resolved; the URL printed names the address bound.
    let (server, _) = serve_demo_with(&["--http", "localhost:0"]);
    let address = server
        .url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix("/mcp"))
        .unwrap_or_else(|| panic!("{}", server.url));
    assert!(
        address
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| a.ip().is_loopback()),
        "{}",
        server.url
    );
    let out = mcx(&["--url", &server.url, "ping"]);
    assert!(out.status.success(), "{}", stderr(&out));

    let mut proxy = Command::new(MCX)
        .args(["proxy", "--stdio", &demo_stdio(), "--listen", "localhost:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcx proxy starts");
    let mut lines = BufReader::new(proxy.stderr.take().expect("stderr")).lines();
    let line = lines.next().expect("the proxy's URL line").expect("stderr");
    std::thread::spawn(move || lines.for_each(drop));
    let url = line
        .strip_prefix("mcx proxy: ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    let out = mcx(&[
        "--url",
        &url,
        "--timeout",
        "10",
        "tools",
        "call",
        "echo",
        "--arg",
        "text=hi",
    ]);
    let _ = proxy.kill();
    let _ = proxy.wait();
    assert_eq!(stdout(&out), "hi\n", "{}", stderr(&out));

    // An address that does not resolve is said as such (status 1, as `serve` fails).
    let out = mcx(&["serve", "demo", "--http", "no-such-host.invalid:0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("mcx: binding no-such-host.invalid:0: "),
        "{}",
        stderr(&out)
    );
}
