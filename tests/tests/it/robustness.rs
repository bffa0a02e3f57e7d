//! Bad input gets an error, never a panic: every fixture, mutated many ways, goes through the
//! envelope decoder, method dispatch and every generated type of its version.

use modelctx_tests::{VERSIONS, registry};
use modelctx_types::{
    Incoming, Message, decode, v2024_11_05, v2025_03_26, v2025_06_18, v2025_11_25, v2026_07_28,
};
use serde_json::Value;

/// A small deterministic generator (xorshift64*), so a failure is reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `(version, raw bytes, value)` of every fixture: the newest version's first, then the older ones
/// oldest first, the order the seeded mutations have always been drawn in.
fn fixtures() -> Vec<(&'static str, Vec<u8>, Value)> {
    let (newest, older) = VERSIONS.split_last().unwrap();
    let mut out = Vec::new();
    for version in std::iter::once(newest).chain(older) {
        for fixture in modelctx_tests::fixtures(version) {
            let bytes = std::fs::read(&fixture.path).unwrap();
            out.push((*version, bytes, fixture.value));
        }
    }
    out
}

/// Values that stress the decoders: wrong kinds, huge and fractional numbers, odd strings.
const REPLACEMENTS: &[&str] = &[
    "null",
    "true",
    "0",
    "-1",
    "1.5",
    "1e400",
    "18446744073709551616",
    "-9223372036854775809",
    "\"\"",
    "\"\\u0000\"",
    "[]",
    "{}",
    "[[[[[[[[[[]]]]]]]]]]",
    "{\"type\":null}",
    "\"\\ud800\"",
];

fn mutate(rng: &mut Rng, value: &Value) -> Value {
    let mut value = value.clone();
    // Walk to a random node (as a JSON pointer), then replace it or drop one of its members.
    let mut path = String::new();
    let mut node = &value;
    loop {
        let go_deeper = rng.below(3) != 0;
        match node {
            Value::Object(map) if go_deeper && !map.is_empty() => {
                let key = map.keys().nth(rng.below(map.len())).unwrap().clone();
                if rng.below(5) == 0 {
                    let target = value
                        .pointer_mut(&path)
                        .and_then(Value::as_object_mut)
                        .unwrap();
                    target.remove(&key);
                    return value;
                }
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                node = &map[&key];
            }
            Value::Array(items) if go_deeper && !items.is_empty() => {
                let i = rng.below(items.len());
                path.push_str(&format!("/{i}"));
                node = &items[i];
            }
            _ => break,
        }
    }
    let replacement = REPLACEMENTS[rng.below(REPLACEMENTS.len())];
    *value.pointer_mut(&path).unwrap() = serde_json::from_str(replacement).unwrap_or(Value::Null);
    value
}

fn every_type(version: &str, value: &Value) {
    let (rt, names) = registry(version);
    for name in names {
        let _ = rt(name, value.clone());
        let _ = modelctx_types::model::__roundtrip(version, name, value.clone());
    }
}

fn dispatch(version: &str, message: &Message) {
    let Message::Request(request) = message else {
        return;
    };
    let params = request.params.as_deref();
    match version {
        "2024-11-05" => drop(v2024_11_05::ClientRequest::from_parts(
            &request.method,
            params,
        )),
        "2025-03-26" => drop(v2025_03_26::ClientRequest::from_parts(
            &request.method,
            params,
        )),
        "2025-06-18" => drop(v2025_06_18::ClientRequest::from_parts(
            &request.method,
            params,
        )),
        "2025-11-25" => drop(v2025_11_25::ClientRequest::from_parts(
            &request.method,
            params,
        )),
        _ => drop(v2026_07_28::ClientRequest::from_parts(
            &request.method,
            params,
        )),
    }
}

#[test]
fn mutated_fixtures_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut inputs = 0;
    for (version, bytes, value) in fixtures() {
        // Every prefix of the raw bytes (bounded), and a few flipped bytes.
        for end in (0..bytes.len()).step_by((bytes.len() / 16).max(1)) {
            let _ = decode(&bytes[..end]);
            inputs += 1;
        }
        for _ in 0..4 {
            let mut flipped = bytes.clone();
            let i = rng.below(flipped.len());
            flipped[i] = rng.next() as u8;
            let _ = decode(&flipped);
            inputs += 1;
        }
        // Structural mutations, through every layer.
        for _ in 0..6 {
            let mutated = mutate(&mut rng, &value);
            every_type(version, &mutated);
            if let Ok(Incoming::Single(message)) = decode(&serde_json::to_vec(&mutated).unwrap()) {
                dispatch(version, &message);
            }
            inputs += 1;
        }
    }
    assert!(inputs > 5000, "only {inputs} inputs");
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    match decode(deep.as_bytes()) {
        Err(_) => {}
        // An array is a batch; its one element is refused on its own.
        Ok(Incoming::Batch(items)) => assert!(items.iter().all(Result::is_err)),
        Ok(other) => panic!("decoded {other:?}"),
    }
    // Params stay raw in the envelope; the nesting limit applies when they are decoded.
    let nested = format!("{}1{}", "{\"a\":".repeat(10_000), "}".repeat(10_000));
    let message =
        format!("{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{nested}}}");
    if let Ok(Incoming::Single(Message::Request(request))) = decode(message.as_bytes()) {
        let params = request.params.as_deref();
        assert!(v2026_07_28::ClientRequest::from_parts(&request.method, params).is_err());
    }
}
