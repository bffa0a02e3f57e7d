//! `mcx` answers the server's requests: elicitation as a form on a terminal (declined off
//! one), roots from `--root`, sampling from `--sampling-reply` (refused without), in both eras,
//! against the demo server and the TypeScript `server-everything`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::cli::{MCX, serve_demo_with};

/// `--stdio` with the demo server.
fn demo() -> String {
    format!("'{MCX} serve demo --stdio'")
}

/// The `confirm` tool of the demo server (elicitation), for `deploy`.
const CONFIRM: &str = r#"tools call confirm --args '{"action": "deploy"}'"#;

/// Runs `mcx args` under `script(1)` with `typed` as the user's keys (see
/// [`crate::cli::typing_on_a_terminal`]): whether mcx succeeded, and what the terminal showed.
fn typing_on_a_terminal(args: &str, typed: &str) -> (bool, String) {
    let command = format!("{MCX} {args}");
    let (status, screen) =
        crate::cli::typing_on_a_terminal(&command, typed, Duration::from_secs(60));
    (status.success(), screen)
}

/// Runs `mcx args` off a terminal (stdin empty, output piped).
fn mcx(args: &[&str]) -> Output {
    Command::new(MCX)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("mcx runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn elicitation_is_a_form_on_a_terminal_legacy_over_stdio() {
    // An answer that is not yes or no is asked again; the optional note; an empty answer to
    // the submit question submits.
    let (ok, screen) = typing_on_a_terminal(
        &format!("--era legacy --stdio {} {CONFIRM}", demo()),
        "maybe\ny\nship it\n\n",
    );
    assert!(ok, "{screen}");
    for shown in [
        "The server asks: Really deploy?",
        "confirm (required): Go ahead?",
        "[y/n] > ",
        "answer y or n",
        "note: Anything to add",
        "Submit? [Y/n/cancel]",
        "deploy: done (ship it)",
    ] {
        assert!(screen.contains(shown), "{shown:?} not in {screen}");
    }
}

#[test]
fn elicitation_is_a_form_on_a_terminal_modern_over_http() {
    let (server, _) = serve_demo_with(&["--http", "127.0.0.1:0"]);
    let (ok, screen) = typing_on_a_terminal(
        &format!("--era modern --url {} {CONFIRM}", server.url),
        "y\n\n\n",
    );
    assert!(ok, "{screen}");
    assert!(
        screen.contains("The server asks: Really deploy?"),
        "{screen}"
    );
    assert!(screen.contains("deploy: done\r\n"), "{screen}");
}

#[test]
fn on_a_terminal_an_elicitation_can_be_declined_or_cancelled() {
    for era in ["legacy", "modern"] {
        let args = format!("--era {era} --stdio {} {CONFIRM}", demo());
        let (ok, screen) = typing_on_a_terminal(&args, "y\n\nn\n");
        assert!(ok, "{screen}");
        assert!(
            screen.contains(r#"deploy: not done ("decline")"#),
            "{era}: {screen}"
        );
        // Ctrl-D at the first question.
        let (ok, screen) = typing_on_a_terminal(&args, "\u{4}");
        assert!(ok, "{screen}");
        assert!(screen.contains("mcx: cancelled"), "{era}: {screen}");
        assert!(
            screen.contains(r#"deploy: not done ("cancel")"#),
            "{era}: {screen}"
        );
    }
}

#[test]
fn off_a_terminal_an_elicitation_is_declined_with_a_note() {
    for era in ["legacy", "modern"] {
        let out = mcx(&[
            "--era",
            era,
            "--stdio",
            &format!("{MCX} serve demo --stdio"),
            "tools",
            "call",
            "confirm",
            "--args",
            r#"{"action": "deploy"}"#,
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            "deploy: not done (\"decline\")\n",
            "{era}"
        );
        let err = text(&out.stderr);
        assert!(
            err.contains(
                "mcx: the server asked for input: Really deploy?; declined (neither stdin nor stderr is a terminal)"
            ),
            "{era}: {err}"
        );
    }
}

#[test]
fn sampling_is_answered_with_the_reply_in_both_eras() {
    for era in ["legacy", "modern"] {
        let out = mcx(&[
            "--era",
            era,
            "--stdio",
            &format!("{MCX} serve demo --stdio"),
            "--sampling-reply",
            "An old silent pond",
            "tools",
            "call",
            "haiku",
            "--args",
            r#"{"topic": "frogs"}"#,
        ]);
        assert!(out.status.success(), "{era}: {}", text(&out.stderr));
        assert_eq!(
            text(&out.stdout),
            "mcx wrote: An old silent pond\n",
            "{era}"
        );
        let err = text(&out.stderr);
        assert!(
            err.contains("mcx: the server asked for a sample (1 message, at most 60 tokens); answered with --sampling-reply"),
            "{era}: {err}"
        );
    }
}

#[test]
fn without_a_reply_sampling_is_refused_with_a_reason() {
    for era in ["legacy", "modern"] {
        let out = mcx(&[
            "--era",
            era,
            "--stdio",
            &format!("{MCX} serve demo --stdio"),
            "tools",
            "call",
            "haiku",
            "--args",
            r#"{"topic": "frogs"}"#,
        ]);
        assert!(!out.status.success(), "{era}: {}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(
            err.contains("refused: mcx has no model: give --sampling-reply TEXT"),
            "{era}: {err}"
        );
        // The tool's failure (legacy: the server got the error) or the call's says why.
        let failure = err
            .lines()
            .find(|l| !l.starts_with("mcx: the server asked"))
            .unwrap_or_default();
        assert!(
            failure.contains("mcx has no model: give --sampling-reply"),
            "{era}: {err}"
        );
    }
}

/// A directory of this test's own, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("mcx-answers-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `--stdio` with the TypeScript `server-everything` (legacy), or `None` (skipped) without
/// Node.
fn everything() -> Option<String> {
    let node = modelctx_tests::node::node()?;
    let script: PathBuf = modelctx_tests::node::ts_dir()
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    if !script.is_file() {
        return modelctx_tests::node::skipped(format!("{} is missing", script.display()));
    }
    Some(format!("{node} {} stdio", script.display()))
}

fn names(tools: &serde_json::Value) -> Vec<String> {
    tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

fn canonical(path: &Path) -> String {
    std::fs::canonicalize(path)
        .expect("canonical")
        .display()
        .to_string()
}

#[test]
fn roots_from_dash_dash_root_reach_server_everything() {
    let Some(everything) = everything() else {
        return;
    };
    let dir = TempDir::new("roots");
    let (src, docs) = (dir.0.join("src"), dir.0.join("docs"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&docs).unwrap();
    // A path through `..`: the root is the canonical directory.
    let via_dots = src.join("..").join("docs");
    let out = mcx(&[
        "--root",
        src.to_str().unwrap(),
        "--root",
        via_dots.to_str().unwrap(),
        "--stdio",
        &everything,
        "tools",
        "call",
        "get-roots-list",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains("Current MCP Roots (2 total)"), "{shown}");
    assert!(shown.contains("1. src\n"), "{shown}");
    assert!(
        shown.contains(&format!("URI: file://{}\n", canonical(&src))),
        "{shown}"
    );
    assert!(shown.contains("2. docs\n"), "{shown}");
    assert!(
        shown.contains(&format!("URI: file://{}\n", canonical(&docs))),
        "{shown}"
    );

    // Without --root no roots are declared: server-everything has no roots tool then, but its
    // elicitation (form and URL) and sampling tools, which mcx always answers.
    let out = mcx(&["--stdio", &everything, "tools", "list", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed = names(&serde_json::from_slice(&out.stdout).expect("JSON"));
    assert!(!listed.contains(&"get-roots-list".to_owned()), "{listed:?}");
    for tool in [
        "trigger-elicitation-request",
        "trigger-url-elicitation",
        "trigger-sampling-request",
    ] {
        assert!(listed.contains(&tool.to_owned()), "{tool}: {listed:?}");
    }
}

#[test]
fn server_everything_elicitation_and_sampling_from_the_terminal() {
    let Some(everything) = everything() else {
        return;
    };
    // Its form: `name` (required) asked first, then twelve optional fields in name order
    // (a date, a boolean, an email, ... choices); every default taken, the others skipped.
    let typed = format!("Ada\n{}\n", "\n".repeat(12));
    let (ok, screen) = typing_on_a_terminal(
        &format!("--stdio '{everything}' tools call trigger-elicitation-request"),
        &typed,
    );
    assert!(ok, "{screen}");
    for shown in [
        "String (name, required): Your full, legal name",
        "Integer (integer): Your favorite integer",
        "integer from 1 to 100 [42] > ",
        "1) Superman (hero-1) (default)",
        "choices 1-3, separated by commas [fish-1] > ",
        "User provided the requested information",
        "- Name: Ada",
        "- Favorite Integer: 42",
    ] {
        assert!(screen.contains(shown), "{shown:?} not in {screen}");
    }

    // A URL elicitation: the URL shown, consent asked.
    let (ok, screen) = typing_on_a_terminal(
        &format!(
            r#"--stdio '{everything}' tools call trigger-url-elicitation --args '{{"url": "https://example.com/login"}}'"#
        ),
        "y\n",
    );
    assert!(ok, "{screen}");
    for shown in [
        "The server asks you to open a URL: Please open the link to complete this action.",
        "  https://example.com/login\r\n",
        "Open it? [y/N/cancel] ",
        "User completed the URL elicitation flow",
    ] {
        assert!(screen.contains(shown), "{shown:?} not in {screen}");
    }

    let out = mcx(&[
        "--stdio",
        &everything,
        "--sampling-reply",
        "An old silent pond",
        "tools",
        "call",
        "trigger-sampling-request",
        "--args",
        r#"{"prompt": "a haiku"}"#,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let shown = text(&out.stdout);
    assert!(shown.contains(r#""text": "An old silent pond""#), "{shown}");
    assert!(shown.contains(r#""model": "mcx""#), "{shown}");
    assert!(shown.contains(r#""stopReason": "endTurn""#), "{shown}");
}

/// The demo's `roots` tool, `mcx tools call roots` with `args` before the command.
fn call_roots(args: &[&str]) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["tools", "call", "roots"]);
    mcx(&all)
}

#[test]
fn roots_from_dash_dash_root_reach_the_demo_in_both_eras() {
    let dir = TempDir::new("demo-roots");
    let (src, docs) = (dir.0.join("src"), dir.0.join("docs"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&docs).unwrap();
    let via_dots = src.join("..").join("docs");
    let expected = format!(
        "file://{} (src)\nfile://{} (docs)\n",
        canonical(&src),
        canonical(&docs)
    );
    let roots = [
        "--root",
        src.to_str().unwrap(),
        "--root",
        via_dots.to_str().unwrap(),
    ];
    let stdio = format!("{MCX} serve demo --stdio");

    // Modern, over Streamable HTTP: the tool's input request.
    let (server, _) = serve_demo_with(&["--http", "127.0.0.1:0"]);
    let mut modern = vec!["--era", "modern", "--url", &server.url];
    modern.extend(roots);
    // Legacy, over stdio: the server's `roots/list` request.
    let mut legacy = vec!["--era", "legacy", "--stdio", &stdio];
    legacy.extend(roots);
    for (era, args) in [("modern", &modern), ("legacy", &legacy)] {
        let out = call_roots(args);
        assert!(out.status.success(), "{era}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), expected, "{era}");
    }
}

#[test]
fn without_dash_dash_root_the_demo_says_the_client_has_no_roots() {
    let (server, _) = serve_demo_with(&["--http", "127.0.0.1:0"]);
    let stdio = format!("{MCX} serve demo --stdio");
    for (era, target, status) in [
        // The protocol's missing-capability error (exit status 4, a protocol error).
        ("modern", ["--url", server.url.as_str()], 4),
        // The tool fails (exit status 5, a tool's isError).
        ("legacy", ["--stdio", stdio.as_str()], 5),
    ] {
        let mut args = vec!["--era", era];
        args.extend(target);
        let out = call_roots(&args);
        assert_eq!(
            out.status.code(),
            Some(status),
            "{era}: {}",
            text(&out.stderr)
        );
        assert_eq!(text(&out.stdout), "", "{era}");
        let err = text(&out.stderr);
        assert!(
            err.contains("the client does not support roots"),
            "{era}: {err}"
        );
    }
}
