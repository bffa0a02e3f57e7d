//! Skills served from a `SkillsSource` beside the server's own, in every protocol version.

use crate::common;

use common::*;
use modelctx_server::{Context, Server, SkillsFuture, SkillsSource};
use modelctx_types::ErrorObject;
use modelctx_types::skills::{ReadResourceDirectoryResult, Skill, SkillFiles};
use serde_json::{Value, json};

/// A source of one skill, `skill://far/away/SKILL.md`, and its directory `skill://far`, whose
/// pages answer with the cursor they were asked with.
struct Far;

fn far_skill(description: &str) -> Skill {
    let frontmatter = json!({"name": "away", "description": description});
    let Value::Object(frontmatter) = frontmatter else {
        unreachable!()
    };
    Skill::new(
        "skill://far/away/SKILL.md",
        frontmatter,
        SkillFiles::Dynamic,
    )
}

impl SkillsSource for Far {
    fn list(&self, _: Context) -> SkillsFuture<Vec<Skill>> {
        // Its own `greet` too: the server's own is listed instead.
        let mut greet = far_skill("not the server's");
        greet.uri = "skill://greet/SKILL.md".into();
        Box::pin(async move { Ok(vec![far_skill("From afar"), greet]) })
    }

    fn get(&self, _: Context, uri: String) -> SkillsFuture<Option<Skill>> {
        Box::pin(
            async move { Ok((uri == "skill://far/away/SKILL.md").then(|| far_skill("From afar"))) },
        )
    }

    fn read_directory(
        &self,
        _: Context,
        uri: String,
        cursor: Option<String>,
    ) -> SkillsFuture<ReadResourceDirectoryResult> {
        Box::pin(async move {
            if uri != "skill://far" {
                return Err(ErrorObject::new(
                    modelctx_types::ErrorCode::INVALID_PARAMS,
                    format!("far has no {uri}"),
                ));
            }
            let page = json!({
                "resources": [{"uri": "skill://far/away", "name": "away", "mimeType": "inode/directory"}],
                "nextCursor": format!("after-{}", cursor.unwrap_or_default()),
            });
            Ok(serde_json::from_value(page).expect("a page"))
        })
    }
}

#[tokio::test]
async fn a_sources_skills_are_served_beside_the_servers_own() {
    let skill_md = "---\nname: greet\ndescription: Greets the user\n---\nSay hello.\n";
    let server = Server::builder("skills", "1")
        .skill_files([("greet/SKILL.md", skill_md)])
        .skills_source(Far)
        .build();
    for (name, config) in eras() {
        let mut client = Client::connect(&server, config).await;
        let listed = client.request("skills/list", json!({})).await.unwrap();
        let skills = listed["skills"].as_array().unwrap();
        let uris: Vec<&str> = skills.iter().map(|s| s["uri"].as_str().unwrap()).collect();
        assert_eq!(
            uris,
            ["skill://far/away/SKILL.md", "skill://greet/SKILL.md"],
            "{name}"
        );
        assert_eq!(
            skills[1]["frontmatter"]["description"], "Greets the user",
            "{name}"
        );

        let got = client
            .request("skills/get", json!({"uri": "skill://far/away/SKILL.md"}))
            .await
            .unwrap();
        assert_eq!(
            got["skill"]["frontmatter"]["description"], "From afar",
            "{name}"
        );
        let own = client
            .request("skills/get", json!({"uri": "skill://greet/SKILL.md"}))
            .await
            .unwrap();
        assert_eq!(
            own["skill"]["frontmatter"]["description"], "Greets the user",
            "{name}"
        );
        let missing = client
            .request("skills/get", json!({"uri": "skill://none/SKILL.md"}))
            .await;
        assert_eq!(code(&missing), -32602, "{name}");

        // Directories: the server's own, then the source's (its cursor passed on both ways).
        let own = client
            .request("resources/directory/read", json!({"uri": "skill://greet"}))
            .await
            .unwrap();
        assert_eq!(
            own["resources"][0]["uri"], "skill://greet/SKILL.md",
            "{name}"
        );
        let far = client
            .request(
                "resources/directory/read",
                json!({"uri": "skill://far", "cursor": "c1"}),
            )
            .await
            .unwrap();
        assert_eq!(far["resources"][0]["uri"], "skill://far/away", "{name}");
        assert_eq!(far["nextCursor"], "after-c1", "{name}");
        let refused = client
            .request("resources/directory/read", json!({"uri": "skill://near"}))
            .await;
        assert_eq!(code(&refused), -32602, "{name}");
        let bad = client
            .request(
                "resources/directory/read",
                json!({"uri": "skill://far", "cursor": 3}),
            )
            .await;
        assert_eq!(code(&bad), -32602, "{name}");
    }
}

#[tokio::test]
async fn a_source_alone_declares_the_extension() {
    let server = Server::builder("skills", "1").skills_source(Far).build();
    let (_, config) = eras().pop().unwrap();
    let mut client = Client::connect(&server, config).await;
    let listed = client.request("skills/list", json!({})).await.unwrap();
    assert_eq!(listed["skills"].as_array().unwrap().len(), 2);
    let caps = client.session.peer().unwrap().capabilities.clone().unwrap();
    assert_eq!(
        caps["extensions"]["io.modelcontextprotocol/skills"]["directoryRead"],
        json!(true)
    );
}
