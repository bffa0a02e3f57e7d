//! Every official example payload of protocol 2026-07-28 decodes into the type its folder names and
//! encodes back to an equal JSON value.

use modelctx_tests::{fixtures, roundtrip};

/// Example files that carry a member their type does not define, which the type drops on the way
/// back: (folder/file, member, why). Each entry is checked to still be needed.
const STRAY_MEMBERS: &[(&str, &str, &str)] = &[(
    "ListRootsRequest/list-roots-request.json",
    "id",
    "in 2026-07-28 `roots/list` is no longer a JSON-RPC request: it travels inside an \
     `input_required` result's `inputRequests`, so `ListRootsRequest` has no `id` (nor `jsonrpc`), \
     like its siblings CreateMessageRequest and ElicitRequest whose examples carry none",
)];

#[test]
fn every_2026_07_28_example_round_trips_through_its_type() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for fixture in fixtures("2026-07-28") {
        let label = fixture.label();
        let stray = STRAY_MEMBERS.iter().find(|(name, ..)| *name == label);
        let mut expected = fixture.value.clone();
        if let Some((_, member, why)) = stray {
            let removed = expected.as_object_mut().and_then(|o| o.remove(*member));
            if removed.is_none() {
                failures.push(format!(
                    "{label}: no longer carries `{member}`; drop its STRAY_MEMBERS entry ({why})"
                ));
            }
        }
        let type_name = &fixture.type_name;
        match roundtrip("2026-07-28", type_name, fixture.value) {
            None => failures.push(format!("{label}: no generated type named {type_name}")),
            Some(Err(e)) => failures.push(format!("{label}: does not decode: {e}")),
            Some(Ok(back)) if back != expected => failures.push(format!(
                "{label}: re-encodes differently\n  in:  {expected}\n  out: {back}"
            )),
            Some(Ok(_)) => {}
        }
        checked += 1;
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
