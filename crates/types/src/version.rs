//! Protocol versions and the two eras: vocabulary shared by every layer, like [`RequestId`](crate::RequestId).

use std::fmt;

/// A protocol version this crate speaks.
///
/// Ordered by release date, so `a < b` means `a` is older.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ProtocolVersion {
    /// `2024-11-05`, the first release.
    V2024_11_05,
    /// `2025-03-26`: adds batches, audio, tool annotations, completions capability.
    V2025_03_26,
    /// `2025-06-18`: removes batches; adds elicitation and structured tool output.
    V2025_06_18,
    /// `2025-11-25`: the last initialize-based release (tasks, URL elicitation, sampling tools).
    V2025_11_25,
    /// `2026-07-28`: the stateless "modern" protocol.
    V2026_07_28,
}

/// The two eras of the protocol. Exhaustive on purpose: every layer decides per era, and a third
/// era would be a breaking change for all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Era {
    /// `initialize`-based sessions: 2025-11-25 and older.
    Legacy,
    /// Stateless requests that carry their version and client capabilities in `_meta`:
    /// 2026-07-28 and newer.
    Modern,
}

impl ProtocolVersion {
    /// Every version, oldest first.
    pub const ALL: &'static [ProtocolVersion] = &[
        ProtocolVersion::V2024_11_05,
        ProtocolVersion::V2025_03_26,
        ProtocolVersion::V2025_06_18,
        ProtocolVersion::V2025_11_25,
        ProtocolVersion::V2026_07_28,
    ];

    /// The newest initialize-based version.
    pub const LATEST_LEGACY: ProtocolVersion = ProtocolVersion::V2025_11_25;

    /// The newest version.
    pub const LATEST: ProtocolVersion = ProtocolVersion::V2026_07_28;

    /// The version as on the wire (`"2025-11-25"`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ProtocolVersion::V2024_11_05 => "2024-11-05",
            ProtocolVersion::V2025_03_26 => "2025-03-26",
            ProtocolVersion::V2025_06_18 => "2025-06-18",
            ProtocolVersion::V2025_11_25 => "2025-11-25",
            ProtocolVersion::V2026_07_28 => "2026-07-28",
        }
    }

    /// The version a wire string names, or `None` for a version this crate does not know.
    pub fn parse(s: &str) -> Option<ProtocolVersion> {
        ProtocolVersion::ALL
            .iter()
            .copied()
            .find(|v| v.as_str() == s)
    }

    /// The era the version belongs to.
    pub const fn era(self) -> Era {
        match self {
            ProtocolVersion::V2026_07_28 => Era::Modern,
            _ => Era::Legacy,
        }
    }

    /// Whether JSON-RPC batches are allowed (2025-03-26 only).
    pub const fn allows_batches(self) -> bool {
        matches!(self, ProtocolVersion::V2025_03_26)
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_print_and_order() {
        for v in ProtocolVersion::ALL {
            assert_eq!(ProtocolVersion::parse(v.as_str()), Some(*v));
            assert_eq!(v.to_string(), v.as_str());
        }
        assert_eq!(ProtocolVersion::parse("2025-01-01"), None);
        assert_eq!(ProtocolVersion::LATEST.era(), Era::Modern);
        assert_eq!(ProtocolVersion::LATEST_LEGACY.era(), Era::Legacy);
        assert!(ProtocolVersion::V2024_11_05 < ProtocolVersion::V2026_07_28);
        assert!(ProtocolVersion::V2025_03_26.allows_batches());
        assert!(!ProtocolVersion::V2025_06_18.allows_batches());
    }
}
