//! `mcx skills list|get|pull` against the demo server's embedded skills, and `pull` refusing what
//! a hostile server's manifest would write outside the directory or what does not match it.

use serde_json::json;

use crate::cli::{TempDir, demo_stdio, json, mcx, stderr, stdout};

#[test]
fn the_demo_skills_are_listed_shown_and_pulled_verified() {
    let server = demo_stdio();
    let out = mcx(&["--stdio", &server, "skills", "list"]);
    assert!(
        stdout(&out).contains("skill://mcx-demo/SKILL.md  mcx-demo  3"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let listed = json(&mcx(&["--stdio", &server, "skills", "list", "--json"]));
    assert_eq!(listed["skills"][0]["frontmatter"]["name"], "mcx-demo");
    let entry = json(&mcx(&[
        "--stdio",
        &server,
        "skills",
        "get",
        "skill://mcx-demo/SKILL.md",
        "--json",
    ]));
    assert_eq!(entry["resources"].as_array().unwrap().len(), 3);
    let shown = mcx(&[
        "--stdio",
        &server,
        "skills",
        "get",
        "skill://mcx-demo/SKILL.md",
    ]);
    assert!(stdout(&shown).contains("sha256:"), "{}", stdout(&shown));

    let dir = TempDir::new("skills-pull");
    let target = dir.0.join("demo");
    let target_text = target.to_string_lossy().into_owned();
    let out = mcx(&["--stdio", &server, "skills", "pull", &target_text]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "skill://mcx-demo/SKILL.md -> 3 files\n");
    for file in [
        "mcx-demo/SKILL.md",
        "mcx-demo/references/tools.md",
        "mcx-demo/examples/session.md",
    ] {
        let bytes = std::fs::read(target.join(file)).expect(file);
        let listed = entry["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["uri"] == format!("skill://{file}"))
            .unwrap();
        assert_eq!(
            listed["digest"],
            modelctx_types::skills::digest(&bytes),
            "{file}"
        );
    }
    let unknown = mcx(&["--stdio", &server, "skills", "get", "skill://nope/SKILL.md"]);
    assert_eq!(unknown.status.code(), Some(4));
    assert!(stderr(&unknown).contains("No skill is served at skill://nope/SKILL.md"));
}

/// A stdio server (a shell script) whose one skill's manifest lists `extra` beside its
/// `SKILL.md`, every read of `extra` answered with `content`.
fn hostile_skill_server(dir: &TempDir, tag: &str, extra: &str, content: &str) -> String {
    let skill = "---\nname: evil\ndescription: A skill\n---\nbody\n";
    let entry = json!({
        "uri": "skill://evil/SKILL.md",
        "frontmatter": {"name": "evil", "description": "A skill"},
        "resources": [
            {"uri": "skill://evil/SKILL.md", "digest": modelctx_types::skills::digest(skill.as_bytes()),
             "size": skill.len()},
            {"uri": extra, "digest": modelctx_types::skills::digest(b"fine"), "size": 4},
        ]
    });
    let list = json!({"skills": [entry]}).to_string();
    let skill_md =
        json!({"contents": [{"uri": "skill://evil/SKILL.md", "text": skill}]}).to_string();
    let other = json!({"contents": [{"uri": extra, "text": content}]}).to_string();
    let script = dir.0.join(format!("{tag}.sh"));
    std::fs::write(
        &script,
        format!(
            r#"list='{list}'
skill='{skill_md}'
other='{other}'
while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":\([0-9][0-9]*\).*/\1/p')
  [ -z "$id" ] && continue
  case "$line" in
    *'"method":"initialize"'*)
      printf '{{"jsonrpc":"2.0","id":%s,"result":{{"protocolVersion":"2025-11-25","capabilities":{{"resources":{{}},"extensions":{{"io.modelcontextprotocol/skills":{{}}}}}},"serverInfo":{{"name":"hostile","version":"1"}}}}}}\n' "$id" ;;
    *'"method":"skills/list"'*)
      printf '{{"jsonrpc":"2.0","id":%s,"result":%s}}\n' "$id" "$list" ;;
    *'"method":"resources/read"'*'SKILL.md'*)
      printf '{{"jsonrpc":"2.0","id":%s,"result":%s}}\n' "$id" "$skill" ;;
    *'"method":"resources/read"'*)
      printf '{{"jsonrpc":"2.0","id":%s,"result":%s}}\n' "$id" "$other" ;;
    *)
      printf '{{"jsonrpc":"2.0","id":%s,"error":{{"code":-32601,"message":"no"}}}}\n' "$id" ;;
  esac
done
"#
        ),
    )
    .expect("script written");
    format!("sh {}", script.display())
}

#[test]
fn pull_refuses_paths_that_escape_the_directory_and_content_that_does_not_match() {
    let dir = TempDir::new("skills-hostile");
    for (tag, extra, content, refusal) in [
        (
            "dotdot",
            "skill://evil/../../escaped.txt",
            "fine",
            "outside the directory",
        ),
        (
            "encoded",
            "skill://evil/%2e%2e/%2e%2e/escaped.txt",
            "fine",
            "outside the directory",
        ),
        (
            "separator",
            "skill://evil/..%2f..%2fescaped.txt",
            "fine",
            "outside the directory",
        ),
        ("tampered", "skill://evil/notes.txt", "evil", "digest"),
        ("longer", "skill://evil/notes.txt", "fine!", "bytes"),
    ] {
        let server = hostile_skill_server(&dir, tag, extra, content);
        let target = dir.0.join(tag).join("pulled");
        let target_text = target.to_string_lossy().into_owned();
        let out = mcx(&["--stdio", &server, "skills", "pull", &target_text]);
        assert_eq!(out.status.code(), Some(4), "{tag}: {}", stderr(&out));
        assert!(stderr(&out).contains(refusal), "{tag}: {}", stderr(&out));
        // Nothing of the skill was written, inside or outside.
        assert!(!target.join("evil").exists(), "{tag}");
        assert!(!dir.0.join(tag).join("escaped.txt").exists(), "{tag}");
        assert!(!dir.0.join("escaped.txt").exists(), "{tag}");
    }
}

#[cfg(unix)]
#[test]
fn pull_does_not_write_through_a_symbolic_link() {
    let dir = TempDir::new("skills-link");
    let outside = dir.0.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let target = dir.0.join("pulled");
    std::fs::create_dir_all(&target).unwrap();
    std::os::unix::fs::symlink(&outside, target.join("mcx-demo")).unwrap();
    let target_text = target.to_string_lossy().into_owned();
    let out = mcx(&["--stdio", &demo_stdio(), "skills", "pull", &target_text]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
}
