//! `mcx demo` as a newcomer sees it (the first walk in full, the others one line each, the
//! same lines from one run to the next, `--wire`).

use serde_json::Value;

use crate::cli::{mcx, stderr, stdout};

/// The walks' headings, in order.
const WALKS: [&str; 4] = [
    "== stdio (era found by the probe) ==",
    "== stdio (legacy era, pinned to 2025-11-25) ==",
    "== Streamable HTTP (era found by the probe) ==",
    "== Streamable HTTP (legacy era, pinned to 2025-11-25) ==",
];

/// `mcx demo` with `args`, which must succeed; its stdout.
fn demo(args: &[&str]) -> String {
    let mut all = vec!["demo"];
    all.extend_from_slice(args);
    let out = mcx(&all);
    let text = stdout(&out);
    assert!(out.status.success(), "{text}\n{}", stderr(&out));
    text
}

/// `text` without what must differ between runs: the port of `127.0.0.1:PORT`.
fn without_ports(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("127.0.0.1:") {
        let (before, after) = rest.split_at(at + "127.0.0.1:".len());
        out.push_str(before);
        out.push_str("PORT");
        rest = after.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    out.push_str(rest);
    out
}

#[test]
fn the_first_walk_is_shown_in_full_the_others_as_one_line_each() {
    let text = demo(&[]);
    // The first walk, in full.
    assert_eq!(text.matches(WALKS[0]).count(), 1, "{text}");
    for line in [
        "connected to mcx-demo 0.1.0, protocol 2026-07-28 (Modern era)",
        "call echo {text: hello} -> hello",
        "<- progress 3/3 step 3 of 3",
        "<- log [notice countdown]",
        "<- elicitation: \"Really deploy?\"",
        "-> canned-model-1 wrote: Tokens drift like leaves",
        "-> file:///home/user/project (project)",
        "<- notification: tools/list_changed",
        "call secret -> the secret is 42",
        "closed the connection",
    ] {
        assert_eq!(text.matches(line).count(), 1, "{line:?} in:\n{text}");
    }
    assert!(!text.contains("protocol 2025-11-25 (Legacy era)"), "{text}");
    // The others: one line each, saying what ran and that it passed like the first.
    for (walk, protocol) in [
        (WALKS[1], "2025-11-25"),
        (WALKS[2], "2026-07-28"),
        (WALKS[3], "2025-11-25"),
    ] {
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(walk)).collect();
        assert_eq!(
            lines,
            [format!(
                "{walk} protocol {protocol}: 22 steps, all passed as above (--all to see them)"
            )],
            "{text}"
        );
    }
    assert!(
        text.ends_with("demo finished: every feature worked over stdio and HTTP, in both eras\n")
    );
}

#[test]
fn two_runs_print_the_same_lines_but_for_the_port() {
    // Every walk, so that each transport and era is compared; three runs, since an order that
    // depends on timing may come out the same twice.
    let runs: Vec<String> = (0..3).map(|_| without_ports(&demo(&["--all"]))).collect();
    for run in &runs[1..] {
        if *run != runs[0] {
            let first: Vec<&str> = runs[0].lines().collect();
            let other: Vec<&str> = run.lines().collect();
            let at = first
                .iter()
                .zip(&other)
                .position(|(a, b)| a != b)
                .unwrap_or(first.len().min(other.len()));
            panic!(
                "the runs differ from line {}:\n{}\n---\n{}",
                at + 1,
                first[at.saturating_sub(3)..first.len().min(at + 4)].join("\n"),
                other[at.saturating_sub(3)..other.len().min(at + 4)].join("\n"),
            );
        }
    }
    // The list change is printed between the call and its result, every time.
    for run in &runs {
        let lines: Vec<&str> = run.lines().collect();
        let unlock = lines
            .iter()
            .position(|l| l.starts_with("  call unlock"))
            .expect("the unlock step");
        assert_eq!(lines[unlock + 1], "    <- notification: tools/list_changed");
        assert_eq!(lines[unlock + 2], "    -> unlocked the `secret` tool");
    }
}

/// The messages `--wire` printed: direction (`>` sent, `<` received) and the message.
fn messages(text: &str) -> Vec<(char, Value)> {
    text.lines()
        .filter_map(|line| {
            let line = line.strip_prefix("    ")?;
            let (arrow, json) = line.split_at_checked(2)?;
            let arrow = match arrow {
                "> " => '>',
                "< " => '<',
                _ => return None,
            };
            let value: Value = serde_json::from_str(json).expect("one line of JSON");
            assert_eq!(value["jsonrpc"], "2.0", "{line}");
            Some((arrow, value))
        })
        .collect()
}

#[test]
fn wire_prints_the_messages_of_the_walk_shown_in_order() {
    let text = demo(&["--wire"]);
    let messages = messages(&text);
    // The first walk: the modern probe first, and no `initialize` (the legacy walks are not
    // shown).
    assert_eq!(messages[0].0, '>');
    assert_eq!(messages[0].1["method"], "server/discover");
    assert_eq!(messages[1].0, '<');
    assert_eq!(messages[1].1["id"], messages[0].1["id"]);
    assert!(
        !messages.iter().any(|(_, m)| m["method"] == "initialize"),
        "{text}"
    );
    // Each request sent is answered after it, once.
    for (i, (arrow, message)) in messages.iter().enumerate() {
        if *arrow != '>' || message.get("id").is_none() || message.get("method").is_none() {
            continue;
        }
        let answers: Vec<usize> = messages
            .iter()
            .enumerate()
            .filter(|(_, (a, m))| {
                *a == '<' && m.get("method").is_none() && m["id"] == message["id"]
            })
            .map(|(j, _)| j)
            .collect();
        let listen = message["method"] == "subscriptions/listen";
        if listen {
            // Ended by the client when it closes: answered by no result.
            continue;
        }
        assert!(
            answers.len() == 1 && answers[0] > i,
            "{message} answered at {answers:?} (sent at {i}):\n{text}"
        );
    }
    // A step's messages follow its line: `echo`'s call and its result.
    let lines: Vec<&str> = text.lines().collect();
    let echo = lines
        .iter()
        .position(|l| *l == "  call echo {text: hello} -> hello")
        .expect("the echo step");
    let call: Value = serde_json::from_str(&lines[echo + 1]["    > ".len()..]).unwrap();
    assert_eq!(call["method"], "tools/call");
    assert_eq!(call["params"]["name"], "echo");
    let answer: Value = serde_json::from_str(&lines[echo + 2]["    < ".len()..]).unwrap();
    assert_eq!(answer["id"], call["id"]);
    assert_eq!(answer["result"]["content"][0]["text"], "hello");
    // Without --wire, no message.
    assert!(self::messages(&demo(&[])).is_empty());
}

#[test]
fn wire_with_all_prints_the_messages_of_every_walk() {
    let text = demo(&["--wire", "--all"]);
    let messages = messages(&text);
    let sent = |method: &str| {
        messages
            .iter()
            .filter(|(a, m)| *a == '>' && m["method"] == method)
            .count()
    };
    // Two modern walks (probe), two legacy ones (initialize, then initialized).
    assert_eq!(sent("server/discover"), 2, "{text}");
    assert_eq!(sent("initialize"), 2, "{text}");
    assert_eq!(sent("notifications/initialized"), 2, "{text}");
    // Seven tools called in each walk (`confirm` twice in the modern era: again with the
    // answer).
    assert!(sent("tools/call") >= 4 * 7, "{text}");
}
