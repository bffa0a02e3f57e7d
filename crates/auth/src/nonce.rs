//! DPoP server nonces (RFC 9449 section 8), stateless.
//!
//! A nonce is `base64url(t || HMAC-SHA256(key, t))`, where `t` is the number of the current
//! 60-second slot since the epoch (8 bytes, big-endian). A nonce of the current or the previous
//! slot is accepted, so a nonce lives 60 to 120 s. Nothing is stored: every instance that shares
//! the key accepts the nonces of the others.

use std::fmt;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// The length of a nonce's slot.
pub(crate) const SLOT: Duration = Duration::from_secs(60);

const SLOT_LEN: usize = 8;
const MAC_LEN: usize = 32;

/// Issues and checks DPoP nonces with an HMAC-SHA256 key.
pub(crate) struct Nonces {
    key: [u8; 32],
}

impl fmt::Debug for Nonces {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nonces").finish_non_exhaustive()
    }
}

impl Nonces {
    /// Nonces keyed with `key`; give every instance behind one load balancer the same key.
    pub(crate) fn new(key: [u8; 32]) -> Nonces {
        Nonces { key }
    }

    /// The nonce of `now`'s slot.
    pub(crate) fn current(&self, now: SystemTime) -> String {
        let slot = slot(now);
        let mut nonce = [0; SLOT_LEN + MAC_LEN];
        nonce[..SLOT_LEN].copy_from_slice(&slot.to_be_bytes());
        nonce[SLOT_LEN..].copy_from_slice(&self.mac(slot));
        URL_SAFE_NO_PAD.encode(nonce)
    }

    /// Whether `nonce` is ours and of `now`'s slot or the previous one. The MAC is compared in
    /// constant time.
    pub(crate) fn check(&self, nonce: &str, now: SystemTime) -> bool {
        let mut bytes = [0; SLOT_LEN + MAC_LEN];
        match URL_SAFE_NO_PAD.decode_slice(nonce, &mut bytes) {
            Ok(n) if n == bytes.len() => {}
            _ => return false,
        }
        let (slot_bytes, mac) = bytes.split_at(SLOT_LEN);
        let Ok(slot_bytes) = <[u8; SLOT_LEN]>::try_from(slot_bytes) else {
            return false;
        };
        let nonce_slot = u64::from_be_bytes(slot_bytes);
        let current = slot(now);
        if nonce_slot != current && Some(nonce_slot) != current.checked_sub(1) {
            return false;
        }
        bool::from(self.mac(nonce_slot).ct_eq(mac))
    }

    fn mac(&self, slot: u64) -> [u8; MAC_LEN] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.key)
            .expect("HMAC takes a key of any length");
        mac.update(&slot.to_be_bytes());
        mac.finalize().into_bytes().into()
    }
}

/// The 60-second slot `now` falls in (0 before the epoch).
fn slot(now: SystemTime) -> u64 {
    now.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs() / SLOT.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    const T0: u64 = 1_800_000_000 / 60 * 60; // the start of a slot

    #[test]
    fn the_current_and_the_previous_slot_are_accepted() {
        let nonces = Nonces::new([7; 32]);
        let nonce = nonces.current(at(T0 + 5));
        assert_eq!(nonce, nonces.current(at(T0 + 59)), "stable within a slot");
        assert!(nonces.check(&nonce, at(T0)));
        assert!(nonces.check(&nonce, at(T0 + 59)));
        assert!(nonces.check(&nonce, at(T0 + 60)), "previous slot");
        assert!(nonces.check(&nonce, at(T0 + 119)), "previous slot");
        assert!(!nonces.check(&nonce, at(T0 + 120)), "stale");
        assert!(!nonces.check(&nonce, at(T0 - 1)), "from the future");
        assert_ne!(nonce, nonces.current(at(T0 + 60)));
    }

    #[test]
    fn another_key_or_a_forged_nonce_is_refused() {
        let nonces = Nonces::new([7; 32]);
        let now = at(T0 + 1);
        let nonce = nonces.current(now);
        assert!(!Nonces::new([8; 32]).check(&nonce, now));
        // One bit of the MAC flipped.
        let mut bytes = URL_SAFE_NO_PAD.decode(&nonce).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        assert!(!nonces.check(&URL_SAFE_NO_PAD.encode(&bytes), now));
        // A later slot with the old MAC.
        let mut bytes = URL_SAFE_NO_PAD.decode(&nonce).unwrap();
        bytes[..8].copy_from_slice(&(T0 / 60 - 1).to_be_bytes());
        assert!(!nonces.check(&URL_SAFE_NO_PAD.encode(&bytes), now));
        for junk in [
            "",
            "abc",
            "!!!!",
            &nonce[..nonce.len() - 1],
            &format!("{nonce}AA"),
        ] {
            assert!(!nonces.check(junk, now), "{junk}");
        }
    }
}
