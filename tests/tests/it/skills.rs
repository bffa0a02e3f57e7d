//! The Skills extension (SEP-2640) end to end: a server serving the conformance fixtures' skills
//! directory and a skill built in code, a client listing, getting and loading them over
//! Streamable HTTP in both eras, verification failures as typed errors, and path-escape
//! attempts over the wire.

use modelctx_client::skill_types::{Skill, SkillFiles, SkillResource};
use modelctx_client::{Client, Error, ProtocolVersion, SkillError};
use modelctx_server::{DynamicSkill, HttpConfig, Server};
use modelctx_tests::client::serve_http;
use modelctx_tests::http::within;
use serde_json::json;

fn server() -> Server {
    Server::builder("skills", "1.0.0")
        .skills_dir(modelctx_tests::conformance_server::skills_dir())
        .skill(
            DynamicSkill::new("reports/daily", "Assemble today's report")
                .body(|| async { "# Daily\n\nRead `data/today.csv`.\n" })
                .file("data/today.csv", || async { "region,total\neu,12\n" }),
        )
        .build()
}

async fn connect(url: &str, version: ProtocolVersion) -> Client {
    within(
        "connect",
        Client::builder("t", "1")
            .protocol_version(version)
            .connect_http(url),
    )
    .await
    .expect("connected")
}

#[tokio::test]
async fn skills_are_listed_got_and_loaded_verified_in_both_eras() {
    let server = server();
    let (running, url) = serve_http(&server, HttpConfig::default()).await;
    for version in [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28] {
        let client = connect(&url, version).await;
        let caps = client.server_capabilities_json().unwrap();
        assert_eq!(
            caps["extensions"]["io.modelcontextprotocol/skills"],
            json!({"directoryRead": true}),
            "{version}"
        );
        let skills = within("list", client.list_skills()).await.unwrap();
        let uris: Vec<&str> = skills.iter().map(|s| s.uri.as_str()).collect();
        assert_eq!(
            uris,
            [
                "skill://acme/billing/refunds/SKILL.md",
                "skill://pdf-processing/SKILL.md",
                "skill://reports/daily/SKILL.md",
            ],
            "{version}"
        );
        let pdf = within("get", client.get_skill("skill://pdf-processing/SKILL.md"))
            .await
            .unwrap();
        assert_eq!(pdf, skills[1]);
        assert_eq!(pdf.frontmatter["metadata"], json!({"version": "2.1.0"}));
        assert_eq!(pdf.resources.listed().len(), 4);
        // Loading reads the SKILL.md, verified; each other file is read when asked.
        let loaded = within("load", client.load_skill(&pdf)).await.unwrap();
        assert!(loaded.verified);
        assert!(loaded.text().unwrap().contains("# PDF processing"));
        let forms = within(
            "read",
            client.read_skill_file(&pdf, "skill://pdf-processing/references/FORMS.md"),
        )
        .await
        .unwrap();
        assert!(forms.text().unwrap().starts_with("# Forms"));
        // The dynamic skill: no digests, its SKILL.md still matches its frontmatter.
        let daily = &skills[2];
        assert_eq!(daily.resources, SkillFiles::Dynamic);
        let loaded = within("load", client.load_skill(daily)).await.unwrap();
        assert!(!loaded.verified);
        assert!(loaded.text().unwrap().ends_with("Read `data/today.csv`.\n"));
        let csv = within(
            "read",
            client.read_skill_file(daily, "skill://reports/daily/data/today.csv"),
        )
        .await
        .unwrap();
        assert_eq!(csv.text(), Some("region,total\neu,12\n"));
        let children = within("dir", client.read_directory("skill://pdf-processing", None))
            .await
            .unwrap();
        let names: Vec<&str> = children
            .resources
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["SKILL.md", "references", "templates"]);
        let unknown = within("get", client.get_skill("skill://nope/SKILL.md")).await;
        assert!(
            matches!(&unknown, Err(Error::Remote(e)) if e.code.0 == -32602),
            "{unknown:?}"
        );
        client.close().await;
    }
    running.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn what_the_entry_does_not_describe_is_refused_with_a_typed_error() {
    let server = server();
    let (running, url) = serve_http(&server, HttpConfig::default()).await;
    let client = connect(&url, ProtocolVersion::V2026_07_28).await;
    let real = within(
        "get",
        client.get_skill("skill://acme/billing/refunds/SKILL.md"),
    )
    .await
    .unwrap();
    let email = "skill://acme/billing/refunds/examples/email.md";
    let tamper = |change: &dyn Fn(&mut SkillResource)| {
        let mut files = real.resources.listed().to_vec();
        files.iter_mut().filter(|f| f.uri == email).for_each(change);
        Skill::new(
            real.uri.clone(),
            real.frontmatter.clone(),
            SkillFiles::Listed(files),
        )
    };
    let wrong_digest = tamper(&|f| f.digest = format!("sha256:{}", "0".repeat(64)));
    let read = within("read", client.read_skill_file(&wrong_digest, email)).await;
    assert!(
        matches!(read, Err(SkillError::DigestMismatch { .. })),
        "{read:?}"
    );
    let wrong_size = tamper(&|f| f.size += 1);
    let read = within("read", client.read_skill_file(&wrong_size, email)).await;
    assert!(
        matches!(read, Err(SkillError::SizeMismatch { .. })),
        "{read:?}"
    );
    // A file the entry does not list is not even asked for.
    let unlisted = within(
        "read",
        client.read_skill_file(&real, "skill://acme/billing/refunds/examples/other.md"),
    )
    .await;
    assert!(
        matches!(unlisted, Err(SkillError::Unlisted { .. })),
        "{unlisted:?}"
    );
    // An entry whose frontmatter is not the file's.
    let mut frontmatter = real.frontmatter.clone();
    frontmatter.insert("description".into(), json!("Exfiltrate credentials"));
    let lying = Skill::new(real.uri.clone(), frontmatter, real.resources.clone());
    let loaded = within("load", client.load_skill(&lying)).await;
    assert!(
        matches!(loaded, Err(SkillError::Frontmatter { .. })),
        "{loaded:?}"
    );
    client.close().await;
    running.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn uris_that_try_to_leave_the_skills_directory_are_not_found() {
    let server = server();
    let (running, url) = serve_http(&server, HttpConfig::default()).await;
    for version in [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28] {
        let client = connect(&url, version).await;
        for attempt in [
            "skill://pdf-processing/../README.md",
            "skill://pdf-processing/%2e%2e/README.md",
            "skill://pdf-processing/templates/%2E%2E/%2E%2E/README.md",
            "skill://README.md",
            "skill://pdf-processing/SKILL.md%00",
            "skill://pdf-processing/..%2fSKILL.md",
            "skill://pdf-processing/./SKILL.md",
            "skill:///etc/passwd",
            "skill://pdf-processing/../../../../etc/passwd",
        ] {
            let read = within("read", client.read_resource(attempt)).await;
            assert!(
                matches!(read, Err(Error::Remote(_))),
                "{version} {attempt}: {read:?}"
            );
            let got = within("get", client.get_skill(attempt)).await;
            assert!(
                matches!(&got, Err(Error::Remote(e)) if e.code.0 == -32602),
                "{version} {attempt}: {got:?}"
            );
            let dir = within("dir", client.read_directory(attempt, None)).await;
            assert!(
                matches!(&dir, Err(Error::Remote(e)) if e.code.0 == -32602),
                "{version} {attempt}: {dir:?}"
            );
        }
        client.close().await;
    }
    running.shutdown(std::time::Duration::from_secs(1)).await;
}

#[tokio::test]
async fn a_server_without_skills_has_no_skills_methods() {
    let server = Server::builder("plain", "1").declare_resources().build();
    let (running, url) = serve_http(&server, HttpConfig::default()).await;
    for version in [ProtocolVersion::V2025_11_25, ProtocolVersion::V2026_07_28] {
        let client = connect(&url, version).await;
        let listed = within("list", client.list_skills()).await;
        assert!(matches!(listed, Err(Error::NotAvailable(_))), "{listed:?}");
        client.close().await;
    }
    running.shutdown(std::time::Duration::from_secs(1)).await;
}
