//! `generated/methods.rs`: the JSON-RPC methods each side may send in each protocol version,
//! from the request and notification unions `wire` recorded. Always compiled, so a crate that
//! needs only the table (the session) does not compile the wire types of any version.

use std::fmt::Write as _;

use super::ir::ModuleIr;
use super::names::{PREAMBLE, rust_str};
use crate::schema::Error;

/// The fields of `Methods`: name, the schema union it lists, and its doc.
const UNIONS: [(&str, &str, &str); 4] = [
    (
        "client_requests",
        "ClientRequest",
        "Requests a client may send: the schema's `ClientRequest`.",
    ),
    (
        "server_requests",
        "ServerRequest",
        "Requests a server may send: the schema's `ServerRequest` (empty from 2026-07-28 on,\n    \
         /// where a server asks for input inside a result instead).",
    ),
    (
        "client_notifications",
        "ClientNotification",
        "Notifications a client may send: the schema's `ClientNotification`.",
    ),
    (
        "server_notifications",
        "ServerNotification",
        "Notifications a server may send: the schema's `ServerNotification`.",
    ),
];

/// The `ProtocolVersion` variant of a schema version (`2025-11-25` -> `V2025_11_25`), or `None`
/// for an extension.
fn variant(version: &str) -> Option<String> {
    (!version.starts_with("ext-")).then(|| format!("V{}", version.replace('-', "_")))
}

/// The code of `methods.rs`.
pub(super) fn generate(irs: &[ModuleIr]) -> Result<String, Error> {
    let mut out = format!(
        "{PREAMBLE}\n//! The JSON-RPC methods of every protocol version, by sender: the members of each\n\
         //! schema's `ClientRequest`, `ServerRequest`, `ClientNotification` and `ServerNotification`\n\
         //! unions, in the schema's order.\n//!\n\
         //! Compiled whichever version features are on. The methods of extensions (such as the\n\
         //! `io.modelcontextprotocol/tasks` extension) are not listed: they exist only where the\n\
         //! extension was negotiated, which is the session's rule.\n\n\
         use crate::ProtocolVersion;\n\n\
         /// The methods of one protocol version, by sender.\n\
         #[derive(Debug, Clone, Copy, PartialEq, Eq)]\n#[non_exhaustive]\npub struct Methods {{\n"
    );
    for (field, _, doc) in UNIONS {
        let _ = writeln!(
            out,
            "    /// {doc}\n    pub {field}: &'static [&'static str],"
        );
    }
    out.push_str("}\n\n");
    let versions: Vec<(&ModuleIr, String)> = irs
        .iter()
        .filter_map(|ir| variant(&ir.version).map(|v| (ir, v)))
        .collect();
    out.push_str(
        "/// The methods of `version`.\npub fn of(version: ProtocolVersion) -> &'static Methods {\n    match version {\n",
    );
    for (_, v) in &versions {
        let _ = writeln!(out, "        ProtocolVersion::{v} => &{v},");
    }
    out.push_str("    }\n}\n\n");
    for (ir, v) in &versions {
        let _ = write!(
            out,
            "/// The methods of {}.\npub const {v}: Methods = Methods {{\n",
            ir.version
        );
        for (field, union, _) in UNIONS {
            let methods = ir
                .method_unions
                .get(union)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            // A union the schema lacks is empty (2026-07-28 has no `ServerRequest`); one that is
            // present must list something, or the generator missed its members.
            if ir.method_unions.contains_key(union) && methods.is_empty() {
                return Err(format!("{}: {union} has no methods", ir.version).into());
            }
            let list: Vec<String> = methods.iter().map(|m| rust_str(m)).collect();
            let _ = writeln!(out, "    {field}: &[{}],", list.join(", "));
        }
        out.push_str("};\n\n");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extensions_have_no_protocol_version() {
        assert_eq!(variant("2025-11-25").as_deref(), Some("V2025_11_25"));
        assert_eq!(variant("ext-tasks"), None);
    }
}
