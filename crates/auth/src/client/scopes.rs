//! Which scopes to ask for (MCP's scope selection strategy, 2025-11-25 on): the challenge's
//! `scope` first, else everything the protected resource metadata lists in `scopes_supported`,
//! else none; `offline_access` added only when the authorization server offers it; a step-up
//! asks for the union of what was asked and what the server now requires.

use super::Error;

/// The scope that asks for a refresh token (OpenID Connect Core section 11).
pub(crate) const OFFLINE_ACCESS: &str = "offline_access";

/// The scopes of an authorization request, in order, without duplicates:
/// 1. `challenge` (the `scope` of the 401 or 403 that started it), when it names any: the
///    server said what it needs, and nothing else is added from the metadata;
/// 2. else `resource_scopes` (the protected resource metadata's `scopes_supported`);
/// 3. else none, and the request has no `scope` parameter.
///
/// Then `offline_access`: kept or added only when `offline_access` is on, the authorization
/// server lists it in its `scopes_supported` (`server_scopes`) and another scope was chosen (it
/// is never asked for alone); dropped from the chosen ones otherwise.
pub(crate) fn choose(
    challenge: &[String],
    resource_scopes: Option<&[String]>,
    server_scopes: Option<&[String]>,
    offline_access: bool,
) -> Vec<String> {
    let source = if challenge.is_empty() {
        resource_scopes.unwrap_or_default()
    } else {
        challenge
    };
    let mut chosen: Vec<String> = Vec::new();
    for scope in source {
        if !scope.is_empty() && scope != OFFLINE_ACCESS && !chosen.contains(scope) {
            chosen.push(scope.clone());
        }
    }
    let offered = server_scopes.is_some_and(|s| s.iter().any(|s| s == OFFLINE_ACCESS));
    if offline_access && offered && !chosen.is_empty() {
        chosen.push(OFFLINE_ACCESS.to_owned());
    }
    chosen
}

/// The scopes of a step-up (a 403 `insufficient_scope` naming `required`): what was `requested`
/// for the current token plus what is required and was not, in that order (MCP 2026-07-28: the
/// union, so the new token keeps what the old one could do). When every required scope was
/// already requested, asking again cannot help: [`Error::InsufficientScope`].
pub(crate) fn step_up(requested: &[String], required: &[String]) -> Result<Vec<String>, Error> {
    let missing: Vec<&String> = required
        .iter()
        .filter(|scope| !scope.is_empty() && !requested.contains(scope))
        .collect();
    if missing.is_empty() {
        return Err(Error::InsufficientScope {
            required: required.to_vec(),
            requested: requested.to_vec(),
        });
    }
    let mut union = requested.to_vec();
    for scope in missing {
        if !union.contains(scope) {
            union.push(scope.clone());
        }
    }
    Ok(union)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(scopes: &[&str]) -> Vec<String> {
        scopes.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_challenge_comes_first() {
        let resource = v(&["mcp:basic", "mcp:read", "mcp:write"]);
        assert_eq!(
            choose(&v(&["mcp:basic"]), Some(&resource), None, true),
            ["mcp:basic"]
        );
    }

    #[test]
    fn else_every_scope_the_resource_supports() {
        let resource = v(&["mcp:basic", "mcp:read", "mcp:write"]);
        assert_eq!(choose(&[], Some(&resource), None, true), resource);
    }

    #[test]
    fn else_no_scope_at_all() {
        assert!(choose(&[], None, None, true).is_empty());
        assert!(choose(&[], Some(&[]), None, true).is_empty());
        // Not even `offline_access` alone, whatever the authorization server offers.
        let server = v(&["mcp:basic", "offline_access"]);
        assert!(choose(&[], None, Some(&server), true).is_empty());
    }

    #[test]
    fn offline_access_only_when_the_authorization_server_offers_it() {
        let resource = v(&["mcp:basic"]);
        let offers = v(&["mcp:basic", "offline_access"]);
        let does_not = v(&["mcp:basic", "mcp:read"]);
        assert_eq!(
            choose(&[], Some(&resource), Some(&offers), true),
            ["mcp:basic", "offline_access"]
        );
        assert_eq!(
            choose(&[], Some(&resource), Some(&does_not), true),
            ["mcp:basic"]
        );
        assert_eq!(choose(&[], Some(&resource), None, true), ["mcp:basic"]);
        // Turned off by the application.
        assert_eq!(
            choose(&[], Some(&resource), Some(&offers), false),
            ["mcp:basic"]
        );
        // Listed by the resource or the challenge but not offered: dropped; offered: once.
        let with = v(&["offline_access", "mcp:basic", "mcp:basic"]);
        assert_eq!(
            choose(&[], Some(&with), Some(&does_not), true),
            ["mcp:basic"]
        );
        assert_eq!(
            choose(&with, None, Some(&offers), true),
            ["mcp:basic", "offline_access"]
        );
    }

    #[test]
    fn a_step_up_asks_for_the_union() {
        assert_eq!(
            step_up(&v(&["mcp:basic"]), &v(&["mcp:write"])).unwrap(),
            ["mcp:basic", "mcp:write"]
        );
        assert_eq!(
            step_up(&v(&["a", "b"]), &v(&["b", "c", "c"])).unwrap(),
            ["a", "b", "c"]
        );
        assert_eq!(step_up(&[], &v(&["a"])).unwrap(), ["a"]);
    }

    #[test]
    fn a_step_up_for_scopes_already_asked_for_gives_up() {
        for (requested, required) in [
            (v(&["mcp:admin"]), v(&["mcp:admin"])),
            (v(&["a", "b"]), v(&["b"])),
            (v(&["a"]), v(&[])),
        ] {
            match step_up(&requested, &required) {
                Err(Error::InsufficientScope {
                    required: r,
                    requested: q,
                }) => assert_eq!((r, q), (required.clone(), requested.clone())),
                other => panic!("{requested:?} {required:?}: {other:?}"),
            }
        }
    }
}
