//! Every official example payload of protocol 2026-07-28 decodes into the type its folder names and
//! encodes back to an equal JSON value.

use std::path::PathBuf;

use modelctx_types::v2026_07_28;
use serde_json::Value;

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
        let mut files: Vec<_> = std::fs::read_dir(&folder).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            let value: Value = serde_json::from_str(&text).unwrap();
            let label = format!("{type_name}/{}", file.file_name().unwrap().to_string_lossy());
            match v2026_07_28::__roundtrip(&type_name, value.clone()) {
                None => failures.push(format!("{label}: no generated type named {type_name}")),
                Some(Err(e)) => failures.push(format!("{label}: does not decode: {e}")),
                Some(Ok(back)) if back != value => failures.push(format!(
                    "{label}: re-encodes differently\n  in:  {value}\n  out: {back}"
                )),
                Some(Ok(_)) => {}
            }
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{} of {checked} examples failed:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(checked, 129, "the pinned upstream snapshot has 129 examples");
}
