//! The skills catalog: scanning a directory, the entries, directory reads, and every way out of
//! the directory the scan and the lookups refuse.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::*;
use crate::ErrorCode;

/// A fresh directory under the system's temporary one, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir =
            std::env::temp_dir().join(format!("modelctx-skills-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn write(&self, path: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }

    fn skill(&self, path: &str, name: &str) {
        self.write(
            &format!("{path}/SKILL.md"),
            format!("---\nname: {name}\ndescription: The {name} skill\n---\n# {name}\n"),
        );
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn build(dirs: &[&Path], limits: SkillsLimits) -> Result<(Catalog, Vec<Resource>), SkillsError> {
    Pending {
        dirs: dirs.iter().map(|d| d.to_path_buf()).collect(),
        trees: Vec::new(),
        dynamic: Vec::new(),
        limits,
        source: Source::default(),
    }
    .build()
}

fn params(value: Value) -> JsonObject {
    value.as_object().cloned().unwrap()
}

#[test]
fn a_tree_of_skills_gives_complete_entries_with_digests_and_sizes() {
    let root = TempDir::new("tree");
    root.write(
        "pdf-processing/SKILL.md",
        "---\nname: pdf-processing\ndescription: Fill PDF forms\nlicense: MIT\nmetadata:\n  version: \"2.1\"\n---\nUse templates/.\n",
    );
    root.write("pdf-processing/templates/invoice.md", "# Invoice\n");
    root.write("pdf-processing/templates/regional/eu.md", "# EU\n");
    root.write("pdf-processing/logo.png", b"\x89PNG\x00\xff");
    root.skill("acme/billing/refunds", "refunds");
    root.skill("acme/billing/refunds/partial", "partial");
    root.write("acme/billing/refunds/partial/notes.txt", "notes");
    root.write("README.md", "not a skill file");
    root.write(".git/HEAD", "hidden");
    let (catalog, resources) = build(&[&root.0], SkillsLimits::default()).unwrap();

    let uris: Vec<&str> = catalog.skills.keys().map(String::as_str).collect();
    assert_eq!(
        uris,
        [
            "skill://acme/billing/refunds/SKILL.md",
            "skill://acme/billing/refunds/partial/SKILL.md",
            "skill://pdf-processing/SKILL.md",
        ]
    );
    let pdf = &catalog.skills["skill://pdf-processing/SKILL.md"];
    assert!(pdf.problems().is_empty(), "{:?}", pdf.problems());
    // The frontmatter verbatim, as JSON.
    assert_eq!(
        Value::Object(pdf.frontmatter.clone()),
        json!({"name": "pdf-processing", "description": "Fill PDF forms", "license": "MIT",
               "metadata": {"version": "2.1"}})
    );
    let listed = pdf.resources.listed();
    let files: Vec<&str> = listed.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        files,
        [
            "skill://pdf-processing/SKILL.md",
            "skill://pdf-processing/logo.png",
            "skill://pdf-processing/templates/invoice.md",
            "skill://pdf-processing/templates/regional/eu.md",
        ]
    );
    assert_eq!(listed[2].size, 10);
    assert_eq!(
        listed[2].digest,
        modelctx_types::skills::digest(b"# Invoice\n")
    );
    // A nested skill's files are the enclosing skill's too.
    let refunds = &catalog.skills["skill://acme/billing/refunds/SKILL.md"];
    assert_eq!(refunds.resources.listed().len(), 3);
    let partial = &catalog.skills["skill://acme/billing/refunds/partial/SKILL.md"];
    assert_eq!(partial.resources.listed().len(), 2);
    // Every skill file is a resource, once; the README and hidden files are not.
    let served: BTreeSet<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(served.len(), 7);
    assert!(
        !served
            .iter()
            .any(|u| u.contains("README") || u.contains(".git"))
    );
    let skill_md = resources
        .iter()
        .find(|r| r.uri == "skill://pdf-processing/SKILL.md")
        .unwrap();
    assert_eq!(skill_md.definition.name, "pdf-processing");
    assert_eq!(
        skill_md.definition.description.as_deref(),
        Some("Fill PDF forms")
    );
    assert_eq!(
        skill_md.definition.mime_type.as_deref(),
        Some("text/markdown")
    );
}

#[test]
fn lists_pages_and_gets_answer_as_the_spec_says() {
    let root = TempDir::new("wire");
    for name in ["a", "b", "c"] {
        root.skill(name, name);
    }
    root.write("a/templates/x.md", "x");
    root.write("a/templates/deep/y.md", "y");
    let (catalog, _) = build(&[&root.0], SkillsLimits::default()).unwrap();

    // Two pages of two, then one: every entry once.
    let first = catalog.list(&JsonObject::new(), 2).unwrap();
    assert_eq!(first["skills"].as_array().unwrap().len(), 2);
    let cursor = first["nextCursor"].as_str().unwrap();
    let second = catalog.list(&params(json!({"cursor": cursor})), 2).unwrap();
    assert_eq!(second["skills"][0]["uri"], "skill://c/SKILL.md");
    assert!(second.get("nextCursor").is_none());
    let bad = catalog.list(&params(json!({"cursor": "nonsense"})), 2);
    assert_eq!(bad.unwrap_err().code, ErrorCode::INVALID_PARAMS);

    let got = catalog
        .get(&params(json!({"uri": "skill://a/SKILL.md"})))
        .unwrap();
    assert_eq!(got["skill"]["frontmatter"]["name"], "a");
    assert_eq!(got["skill"]["resources"].as_array().unwrap().len(), 3);
    let unknown = catalog
        .get(&params(json!({"uri": "skill://nope/SKILL.md"})))
        .unwrap_err();
    assert_eq!(unknown.code, ErrorCode::INVALID_PARAMS);
    assert_eq!(
        unknown.message,
        "No skill is served at skill://nope/SKILL.md"
    );

    let read = |uri: &str| catalog.read_directory(&params(json!({"uri": uri})), 10);
    let children = read("skill://a").unwrap();
    assert_eq!(
        children["resources"],
        json!([
            {"uri": "skill://a/SKILL.md", "name": "SKILL.md", "mimeType": "text/markdown"},
            {"uri": "skill://a/templates", "name": "templates", "mimeType": "inode/directory"},
        ])
    );
    let templates = read("skill://a/templates").unwrap();
    assert_eq!(templates["resources"][0]["uri"], "skill://a/templates/deep");
    assert_eq!(templates["resources"][1]["uri"], "skill://a/templates/x.md");
    let not_dir = read("skill://a/SKILL.md").unwrap_err();
    assert_eq!(not_dir.code, ErrorCode::INVALID_PARAMS);
    assert_eq!(
        not_dir.message,
        "skill://a/SKILL.md is not a directory resource"
    );
    for missing in [
        "skill://a/",
        "skill://zzz",
        "skill://a/templates/../templates",
    ] {
        assert_eq!(read(missing).unwrap_err().code, ErrorCode::INVALID_PARAMS);
    }
    // Paged too.
    let paged = catalog
        .read_directory(&params(json!({"uri": "skill://a"})), 1)
        .unwrap();
    let next = paged["nextCursor"].as_str().unwrap();
    let rest = catalog
        .read_directory(&params(json!({"uri": "skill://a", "cursor": next})), 1)
        .unwrap();
    assert_eq!(rest["resources"][0]["uri"], "skill://a/templates");
}

#[test]
fn uris_that_try_to_leave_the_catalog_only_miss() {
    let root = TempDir::new("lookups");
    root.skill("a", "a");
    root.write("a/ref.md", "ref");
    root.write("secret.txt", "outside any skill");
    let (catalog, resources) = build(&[&root.0], SkillsLimits::default()).unwrap();
    let served: BTreeSet<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    for attempt in [
        "skill://a/../secret.txt",
        "skill://a/%2e%2e/secret.txt",
        "skill://a/%2E%2E/secret.txt",
        "skill://a/ref%2Emd",
        "skill://a/ref.md%00",
        "skill://a/ref.md\0",
        "skill://a//ref.md",
        "skill://a/./ref.md",
        "skill://secret.txt",
        "skill://A/ref.md",
        "skill:///a/ref.md",
    ] {
        assert!(!served.contains(attempt), "{attempt}");
        assert!(catalog.get(&params(json!({"uri": attempt}))).is_err());
        assert!(
            catalog
                .read_directory(&params(json!({"uri": attempt})), 10)
                .is_err()
        );
    }
    assert!(served.contains("skill://a/ref.md"));
}

#[test]
fn names_are_percent_encoded_so_that_no_two_meet() {
    let root = TempDir::new("names");
    root.skill("a", "a");
    root.write("a/my file.md", "1");
    root.write("a/my%20file.md", "2");
    root.write("a/caf\u{e9}.md", "3");
    let (catalog, _) = build(&[&root.0], SkillsLimits::default()).unwrap();
    let files: Vec<&str> = catalog.skills["skill://a/SKILL.md"]
        .resources
        .listed()
        .iter()
        .map(|r| r.uri.as_str())
        .collect();
    assert!(files.contains(&"skill://a/my%20file.md"));
    assert!(files.contains(&"skill://a/my%2520file.md"));
    assert!(files.contains(&"skill://a/caf%C3%A9.md"));
}

#[cfg(unix)]
#[test]
fn symbolic_links_are_refused_to_files_and_directories() {
    let outside = TempDir::new("outside");
    let secret = outside.write("secret.txt", "secret");
    for (tag, link, target) in [
        ("file", "a/leak.txt", secret.clone()),
        ("dir", "a/leak", outside.0.clone()),
        ("skill", "b", outside.0.clone()),
        ("inner", "a/inner.txt", PathBuf::from("SKILL.md")),
    ] {
        let root = TempDir::new(tag);
        root.skill("a", "a");
        std::os::unix::fs::symlink(&target, root.0.join(link)).unwrap();
        let error = build(&[&root.0], SkillsLimits::default()).unwrap_err();
        assert!(
            matches!(&error, SkillsError::Symlink(p) if p.ends_with(link)),
            "{error}"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_file_swapped_between_listing_and_opening_is_refused() {
    let root = TempDir::new("swap");
    let outside = TempDir::new("swap-outside");
    root.skill("a", "a");
    let file = root.write("a/f.md", "mine");
    let other = outside.write("g.md", "theirs");
    let canonical_dir = std::fs::canonicalize(root.0.join("a")).unwrap();
    let listed = std::fs::symlink_metadata(&file).unwrap();
    // What the walk listed, then found another file (another inode) at its place.
    std::fs::remove_file(&file).unwrap();
    std::fs::hard_link(&other, &file).unwrap();
    let error = read_file(
        &canonical_dir.join("f.md"),
        &canonical_dir,
        &listed,
        &SkillsLimits::default(),
        0,
    )
    .unwrap_err();
    assert!(matches!(error, SkillsError::Changed(_)), "{error}");
    // A directory on the way replaced by a link: the file opened is not under the directory
    // the walk is in.
    let moved = TempDir::new("swap-moved");
    moved.write("f.md", "elsewhere");
    let via_link = root.0.join("link");
    std::os::unix::fs::symlink(&moved.0, &via_link).unwrap();
    let listed = std::fs::metadata(moved.0.join("f.md")).unwrap();
    let error = read_file(
        &via_link.join("f.md"),
        &canonical_dir,
        &listed,
        &SkillsLimits::default(),
        0,
    )
    .unwrap_err();
    assert!(matches!(error, SkillsError::Changed(_)), "{error}");
}

#[cfg(unix)]
#[test]
fn special_files_and_names_that_are_not_utf8_are_refused() {
    use std::os::unix::ffi::OsStrExt as _;
    let root = TempDir::new("bytes");
    root.skill("a", "a");
    std::fs::write(
        root.0
            .join("a")
            .join(std::ffi::OsStr::from_bytes(b"bad\xff.md")),
        "x",
    )
    .unwrap();
    let error = build(&[&root.0], SkillsLimits::default()).unwrap_err();
    assert!(matches!(error, SkillsError::Name { .. }), "{error}");

    let root = TempDir::new("fifo");
    root.skill("a", "a");
    let status = std::process::Command::new("mkfifo")
        .arg(root.0.join("a/pipe"))
        .status();
    if status.is_ok_and(|s| s.success()) {
        let error = build(&[&root.0], SkillsLimits::default()).unwrap_err();
        assert!(matches!(error, SkillsError::NotAFile(_)), "{error}");
    }
}

#[test]
fn skills_that_break_the_rules_are_refused_with_their_reason() {
    let cases: [(&str, &str, &str); 5] = [
        (
            "mismatch",
            "---\nname: other\ndescription: d\n---\n",
            "is not its directory's name",
        ),
        (
            "Bad_Name",
            "---\nname: Bad_Name\ndescription: d\n---\n",
            "naming rules",
        ),
        ("nodesc", "---\nname: nodesc\n---\n", "no description"),
        (
            "nofront",
            "# no frontmatter\n",
            "must begin with YAML frontmatter",
        ),
        ("badyaml", "---\nname: [x\n---\n", "not a YAML mapping"),
    ];
    for (dir, text, reason) in cases {
        let root = TempDir::new("rules");
        root.write(&format!("{dir}/SKILL.md"), text);
        let error = build(&[&root.0], SkillsLimits::default()).unwrap_err();
        assert!(
            matches!(&error, SkillsError::Skill { reason: r, .. } if r.contains(reason)),
            "{dir}: {error}"
        );
    }
    let root = TempDir::new("root");
    root.write("SKILL.md", "---\nname: root\ndescription: d\n---\n");
    let error = build(&[&root.0], SkillsLimits::default()).unwrap_err();
    assert!(error.to_string().contains("no skill path"), "{error}");
    let missing = build(&[Path::new("/nonexistent/skills")], SkillsLimits::default());
    assert!(matches!(
        missing,
        Err(SkillsError::Io {
            kind: std::io::ErrorKind::NotFound,
            ..
        })
    ));
}

#[test]
fn bounds_are_checked_with_clear_errors() {
    let root = TempDir::new("bounds");
    root.skill("a", "a");
    for i in 0..4 {
        root.write(&format!("a/f{i}.md"), "0123456789");
    }
    root.write("a/deep/er/still/x.md", "x");
    let limit = |change: fn(&mut SkillsLimits)| {
        let mut limits = SkillsLimits::default();
        change(&mut limits);
        build(&[&root.0], limits).unwrap_err().to_string()
    };
    assert!(limit(|l| l.files_per_skill = 3).contains("more than 3 files in one skill"));
    assert!(limit(|l| l.bytes_per_skill = 30).contains("bytes"));
    assert!(limit(|l| l.bytes_per_skill = 5).contains("larger than 5 bytes"));
    assert!(limit(|l| l.total_bytes = 40).contains("more than 40 bytes in all"));
    assert!(limit(|l| l.total_files = 2).contains("more than 2 files in all"));
    assert!(limit(|l| l.depth = 3).contains("deeper than 3 directories"));
    assert!(build(&[&root.0], SkillsLimits::default()).is_ok());
}

#[test]
fn two_directories_serving_one_skill_are_refused() {
    let one = TempDir::new("dup1");
    let two = TempDir::new("dup2");
    one.skill("a", "a");
    two.skill("a", "a");
    let error = build(&[&one.0, &two.0], SkillsLimits::default()).unwrap_err();
    assert_eq!(error, SkillsError::Duplicate("skill://a/SKILL.md".into()));
}

#[test]
fn dynamic_skills_are_entries_without_digests() {
    let skill = DynamicSkill::new("reports/daily", "Today's report")
        .field("license", "MIT")
        .body(|| async { "# Daily\n" })
        .file("data/today.csv", || async { "a,b\n" });
    let mut built = Built::default();
    built.add_dynamic(skill).unwrap();
    let entry = &built.catalog.skills["skill://reports/daily/SKILL.md"];
    assert_eq!(entry.resources, SkillFiles::Dynamic);
    assert_eq!(
        Value::Object(entry.frontmatter.clone()),
        json!({"name": "daily", "description": "Today's report", "license": "MIT"})
    );
    let uris: BTreeSet<&str> = built.resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(
        uris,
        BTreeSet::from([
            "skill://reports/daily/SKILL.md",
            "skill://reports/daily/data/today.csv"
        ])
    );
    let children = built
        .catalog
        .read_directory(&params(json!({"uri": "skill://reports/daily/data"})), 10)
        .unwrap();
    assert_eq!(children["resources"][0]["name"], "today.csv");

    for (path, file) in [
        ("../daily", "x.md"),
        ("reports//daily", "x.md"),
        ("reports/Daily", "x.md"),
        ("reports/daily", "../x.md"),
        ("reports/daily", "SKILL.md"),
        ("reports/daily", "a/./b"),
    ] {
        let skill = DynamicSkill::new(path, "d").file(file, || async { "" });
        assert!(
            Built::default().add_dynamic(skill).is_err(),
            "{path} {file}"
        );
    }
    let empty = DynamicSkill::new("daily", "");
    assert!(Built::default().add_dynamic(empty).is_err());
}

#[test]
fn files_given_in_memory_are_a_tree_like_a_directory() {
    let files = |list: &[(&str, &str)]| -> Vec<(String, Vec<u8>)> {
        list.iter()
            .map(|(p, b)| ((*p).to_owned(), b.as_bytes().to_vec()))
            .collect()
    };
    let skill = "---\nname: demo\ndescription: A demo\n---\n";
    let pending = Pending {
        trees: vec![files(&[("demo/SKILL.md", skill), ("demo/refs/a.md", "a")])],
        ..Pending::default()
    };
    let (catalog, resources) = pending.build().unwrap();
    let entry = &catalog.skills["skill://demo/SKILL.md"];
    assert_eq!(entry.resources.listed().len(), 2);
    assert_eq!(resources.len(), 2);
    for bad in [
        vec![("../demo/SKILL.md", skill)],
        vec![("demo/./SKILL.md", skill)],
        vec![("/demo/SKILL.md", skill)],
        vec![("demo/SKILL.md", skill), ("demo/SKILL.md", skill)],
        vec![("demo/SKILL.md", skill), ("demo/SKILL.md/x", "x")],
    ] {
        let pending = Pending {
            trees: vec![files(&bad)],
            ..Pending::default()
        };
        assert!(pending.build().is_err(), "{bad:?}");
    }
}

#[test]
fn the_capability_names_the_extension_with_directory_reads() {
    let mut caps = params(json!({"extensions": {"other/ext": {}}}));
    declare(&mut caps);
    assert_eq!(
        caps["extensions"],
        json!({"other/ext": {}, "io.modelcontextprotocol/skills": {"directoryRead": true}})
    );
}
