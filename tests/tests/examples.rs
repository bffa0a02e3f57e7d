//! Every official example payload of protocol 2026-07-28 decodes into the type its folder names and
//! encodes back to an equal JSON value.

use std::path::PathBuf;

use modelctx_types::v2026_07_28;
use serde_json::Value;

/// Example files that carry a member their type does not define, which the type drops on the way
/// back: (folder/file, member, why). Each entry is checked to still be needed.
const STRAY_MEMBERS: &[(&str, &str, &str)] = &[(
    "ListRootsRequest/list-roots-request.json",
    "id",
    "in 2026-07-28 `roots/list` is no longer a JSON-RPC request: it travels inside an \
     `input_required` result's `inputRequests`, so `ListRootsRequest` has no `id` (nor `jsonrpc`), \
     like its siblings CreateMessageRequest and ElicitRequest whose examples carry none",
)];

fn examples_dir() -> PathBuf {
    xtask::schema::schema_dir(None).join("2026-07-28/examples")
}

#[test]
fn every_2026_07_28_example_round_trips_through_its_type() {
    let dir = examples_dir();
    let mut checked = 0;
    let mut failures = Vec::new();
    let mut folders: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    folders.sort();
    for folder in folders {
        let type_name = folder.file_name().unwrap().to_str().unwrap().to_owned();
        let mut files: Vec<_> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let value: Value = serde_json::from_str(&text).unwrap();
            let label = format!(
                "{type_name}/{}",
                file.file_name().unwrap().to_string_lossy()
            );
            let stray = STRAY_MEMBERS.iter().find(|(name, ..)| *name == label);
            let mut expected = value.clone();
            if let Some((_, member, why)) = stray {
                let removed = expected.as_object_mut().and_then(|o| o.remove(*member));
                if removed.is_none() {
                    failures.push(format!("{label}: no longer carries `{member}`; drop its STRAY_MEMBERS entry ({why})"));
                }
            }
            match v2026_07_28::__roundtrip(&type_name, value.clone()) {
                None => failures.push(format!("{label}: no generated type named {type_name}")),
                Some(Err(e)) => failures.push(format!("{label}: does not decode: {e}")),
                Some(Ok(back)) if back != expected => failures.push(format!(
                    "{label}: re-encodes differently\n  in:  {expected}\n  out: {back}"
                )),
                Some(Ok(_)) => {}
            }
            checked += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {checked} examples failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        checked, 129,
        "the pinned upstream snapshot has 129 examples"
    );
}
