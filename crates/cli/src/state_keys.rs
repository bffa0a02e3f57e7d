//! `mcx serve demo --state-key KID:BASE64URL` (repeatable) and `MCX_STATE_KEYS`: the key ring
//! that seals the `requestState` of modern (2026-07-28) round trips, so that several instances
//! behind a load balancer accept each other's retries.

use base64::Engine as _;
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use modelctx_server::{StateKey, StateSealer};

/// The variable read when no `--state-key` is given: `KID:BASE64URL` entries, separated by
/// commas, the first the current key.
pub(crate) const ENV: &str = "MCX_STATE_KEYS";

/// base64url, with or without its `=` padding.
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The key ring of the `--state-key` flags, else of `env` (the value of [`ENV`], when set):
/// the first key current, the others previous. `Ok(None)` when neither names a key (the server
/// then makes a random key of its own). The error is a usage error, naming the entry by its
/// position and key id, never by its secret.
pub(crate) fn ring(flags: &[String], env: Option<&str>) -> Result<Option<StateSealer>, String> {
    let (entries, origin): (Vec<&str>, &str) = if flags.is_empty() {
        match env {
            Some(value) if !value.trim().is_empty() => {
                (value.split(',').map(str::trim).collect(), ENV)
            }
            _ => return Ok(None),
        }
    } else {
        (flags.iter().map(String::as_str).collect(), "--state-key")
    };
    let mut keys = entries.iter().enumerate().map(|(i, entry)| {
        parse(entry).map_err(|why| format!("{origin}: key {} of {}: {why}", i + 1, entries.len()))
    });
    let Some(current) = keys.next() else {
        return Ok(None);
    };
    let mut sealer = StateSealer::new(current?);
    for key in keys {
        sealer = sealer
            .with_previous(key?)
            .map_err(|e| format!("{origin}: {e}"))?;
    }
    Ok(Some(sealer))
}

/// One `KID:BASE64URL` entry, checked by `StateKey::new` (the id's characters, the secret's
/// length).
fn parse(entry: &str) -> Result<StateKey, String> {
    let Some((id, secret)) = entry.split_once(':') else {
        return Err("expected KID:BASE64URL (a key id, a colon, the secret in base64url)".into());
    };
    let secret = BASE64URL
        .decode(secret.trim())
        .map_err(|e| format!("the secret of key `{}` is not base64url ({e})", shown(id)))?;
    StateKey::new(id, secret).map_err(|e| format!("key `{}`: {e}", shown(id)))
}

/// A key id as the user wrote it, shortened and stripped of control characters for a message.
fn shown(id: &str) -> String {
    id.chars().filter(|c| !c.is_control()).take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `len` bytes of secret, in base64url without padding.
    fn secret(len: usize) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(vec![0xfb_u8; len])
    }

    fn flags(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|e| (*e).to_owned()).collect()
    }

    #[test]
    fn the_first_key_is_current_and_the_others_previous() {
        let k1 = format!("k1:{}", secret(32));
        let k2 = format!("k2:{}", secret(48));
        let sealer = ring(&flags(&[&k2, &k1]), None).unwrap().unwrap();
        assert_eq!(sealer.current_key_id(), "k2");
        // The previous key opens what it sealed: compare with a ring of k1 alone.
        let old = ring(&flags(&[&k1]), None).unwrap().unwrap();
        let binding = modelctx_session::state::Binding {
            principal: None,
            method: modelctx_types::consts::ToolsCall::VALUE,
            params: None,
        };
        let now = std::time::SystemTime::now();
        let state = old.seal(now, &binding, &[], b"").unwrap();
        assert!(sealer.open(now, &binding, &state).is_ok());
        // And what the new ring seals, only it opens.
        let state = sealer.seal(now, &binding, &[], b"").unwrap();
        assert!(state.starts_with("v1.k2."), "{state}");
        assert!(old.open(now, &binding, &state).is_err());
    }

    #[test]
    fn padding_is_optional_and_base64url_only() {
        let unpadded = format!("k:{}", secret(32));
        let padded = format!(
            "k:{}",
            base64::engine::general_purpose::URL_SAFE.encode([0xfb_u8; 32])
        );
        assert!(padded.ends_with('='), "32 bytes need padding: {padded}");
        assert!(
            unpadded.contains('-') || unpadded.contains('_'),
            "{unpadded}"
        );
        for entry in [unpadded, padded] {
            assert_eq!(
                ring(&flags(&[&entry]), None)
                    .unwrap()
                    .unwrap()
                    .current_key_id(),
                "k"
            );
        }
        // Standard base64 (`+`, `/`) is not base64url.
        let standard = format!(
            "k:{}",
            base64::engine::general_purpose::STANDARD.encode([0xfb_u8; 32])
        );
        assert!(standard.contains('+') || standard.contains('/'));
        let refused = ring(&flags(&[&standard]), None).unwrap_err();
        assert!(
            refused.starts_with("--state-key: key 1 of 1: the secret of key `k` is not base64url"),
            "{refused}"
        );
    }

    #[test]
    fn bad_entries_are_usage_errors_that_do_not_show_the_secret() {
        let short = secret(16);
        let cases = [
            (
                format!("k1{}", secret(32)),
                "--state-key: key 1 of 1: expected KID:BASE64URL".to_owned(),
            ),
            (
                format!("k1:{short}"),
                "--state-key: key 1 of 1: key `k1`: the key secret is 16 bytes long; at least 32 \
                 are required"
                    .to_owned(),
            ),
            (
                format!("bad id:{}", secret(32)),
                "--state-key: key 1 of 1: key `bad id`: a key id must be".to_owned(),
            ),
            (
                "k1:not*base64".to_owned(),
                "--state-key: key 1 of 1: the secret of key `k1` is not base64url".to_owned(),
            ),
        ];
        for (entry, expected) in cases {
            let refused = ring(&flags(&[&entry]), None).unwrap_err();
            assert!(refused.starts_with(&expected), "{entry}: {refused}");
            if let Some((_, secret)) = entry.split_once(':') {
                assert!(!refused.contains(secret), "{refused}");
            }
        }
        // The position names which entry is wrong.
        let good = format!("k1:{}", secret(32));
        let refused = ring(&flags(&[&good, "k2:"]), None).unwrap_err();
        assert!(
            refused.starts_with("--state-key: key 2 of 2: key `k2`"),
            "{refused}"
        );
        // Two keys with one id, and more than the sealer holds.
        let refused = ring(&flags(&[&good, &good]), None).unwrap_err();
        assert_eq!(
            refused,
            "--state-key: the sealer already has a key with id `k1`"
        );
        let many: Vec<String> = (0..9).map(|i| format!("k{i}:{}", secret(32))).collect();
        let refused = ring(&many, None).unwrap_err();
        assert_eq!(refused, "--state-key: a sealer holds at most 8 keys");
    }

    #[test]
    fn the_variable_is_read_only_without_flags() {
        let k1 = format!("k1:{}", secret(32));
        let k2 = format!("k2:{}", secret(32));
        let env = format!(" {k2} , {k1} ");
        let sealer = ring(&[], Some(&env)).unwrap().unwrap();
        assert_eq!(sealer.current_key_id(), "k2");
        // Flags win over the variable.
        let sealer = ring(&flags(&[&k1]), Some(&env)).unwrap().unwrap();
        assert_eq!(sealer.current_key_id(), "k1");
        let sealer = ring(&flags(&[&k1]), Some("garbage")).unwrap().unwrap();
        assert_eq!(sealer.current_key_id(), "k1");
        // Unset or empty: no ring (a random key of the process).
        assert!(ring(&[], None).unwrap().is_none());
        assert!(ring(&[], Some(" ")).unwrap().is_none());
        // Its errors name it.
        let refused = ring(&[], Some(&format!("{k1},k2:AAAA"))).unwrap_err();
        assert!(
            refused.starts_with("MCX_STATE_KEYS: key 2 of 2: key `k2`: the key secret is 3 bytes"),
            "{refused}"
        );
        let refused = ring(&[], Some(&format!("{k1},"))).unwrap_err();
        assert!(
            refused.starts_with("MCX_STATE_KEYS: key 2 of 2: expected KID:BASE64URL"),
            "{refused}"
        );
    }
}
