//! From a token's claims (a JWT's payload or an introspection response) to a [`Grant`].

use std::time::{Duration, SystemTime};

use modelctx_http::server::Grant;
use serde_json::{Map, Value};

use crate::AuthError;
use crate::canonical::same_resource;

/// The grant a token's claims describe, issued by `issuer`. Reads `sub` (required),
/// `client_id`, the scopes (`scope`, a space-separated string; else `scp`, a string or an array
/// of strings), `exp` and `cnf.jkt`. Checks nothing else: issuer, audience and times are the
/// caller's to check.
pub(crate) fn grant_from_claims(
    issuer: &str,
    claims: Map<String, Value>,
) -> Result<Grant, AuthError> {
    let subject = match claims.get("sub") {
        Some(Value::String(sub)) if !sub.is_empty() => sub.clone(),
        _ => return Err(AuthError::InvalidToken("no subject (sub)".into())),
    };
    let mut grant = Grant::new(issuer, subject);
    grant.client_id = claims
        .get("client_id")
        .and_then(Value::as_str)
        .map(str::to_owned);
    grant.scopes = scopes(&claims)?;
    grant.expires_at = match claims.get("exp") {
        None => None,
        Some(exp) => Some(
            numeric_date(exp)
                .ok_or_else(|| AuthError::InvalidToken("exp is not a NumericDate".into()))?,
        ),
    };
    grant.jkt = match claims.get("cnf") {
        None => None,
        Some(cnf) => match cnf.get("jkt") {
            Some(Value::String(jkt)) => Some(jkt.clone()),
            None => None,
            Some(_) => return Err(AuthError::InvalidToken("cnf.jkt is not a string".into())),
        },
    };
    grant.claims = claims;
    Ok(grant)
}

fn scopes(claims: &Map<String, Value>) -> Result<Vec<String>, AuthError> {
    let split = |s: &str| {
        s.split(' ')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    };
    match claims.get("scope").or_else(|| claims.get("scp")) {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(split(s)),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| AuthError::InvalidToken("a scope is not a string".into()))
            })
            .collect(),
        Some(_) => Err(AuthError::InvalidToken("scope is not a string".into())),
    }
}

/// `iss` is `issuer` exactly (RFC 9068 section 4, RFC 7662 section 2.2). `required`: a JWT
/// access token must carry it; an introspection answer may leave it out.
pub(crate) fn check_issuer(
    iss: Option<&Value>,
    issuer: &str,
    required: bool,
) -> Result<(), AuthError> {
    match iss {
        Some(Value::String(iss)) if iss == issuer => Ok(()),
        Some(_) => Err(AuthError::InvalidToken("another issuer".into())),
        None if required => Err(AuthError::InvalidToken("no issuer (iss)".into())),
        None => Ok(()),
    }
}

/// `aud`, a string or an array of strings, names one of `audiences` (RFC 8707: compared as
/// canonical resource URIs).
pub(crate) fn check_audience(aud: Option<&Value>, audiences: &[String]) -> Result<(), AuthError> {
    let names = |a: &str| audiences.iter().any(|ours| same_resource(a, ours));
    let ok = match aud {
        Some(Value::String(a)) => names(a),
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).any(names),
        Some(_) => false,
        None => return Err(AuthError::InvalidToken("no audience (aud)".into())),
    };
    if ok {
        Ok(())
    } else {
        Err(AuthError::InvalidToken("another audience".into()))
    }
}

/// A JWT NumericDate (seconds since the epoch, possibly fractional) as a time.
pub(crate) fn numeric_date(value: &Value) -> Option<SystemTime> {
    let seconds = value.as_f64()?;
    if !seconds.is_finite() || !(0.0..=1e12).contains(&seconds) {
        return None;
    }
    SystemTime::UNIX_EPOCH.checked_add(Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn claims(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn scope_string_scp_array_client_and_binding_are_read() {
        let grant = grant_from_claims(
            "https://as",
            claims(
                json!({"sub": "alice", "client_id": "app", "scope": "a  b", "exp": 10,
                "cnf": {"jkt": "thumb"}}),
            ),
        )
        .unwrap();
        assert_eq!(grant.subject, "alice");
        assert_eq!(grant.client_id.as_deref(), Some("app"));
        assert_eq!(grant.scopes, ["a", "b"]);
        assert_eq!(
            grant.expires_at,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(10))
        );
        assert_eq!(grant.jkt.as_deref(), Some("thumb"));
        assert_eq!(grant.claims["sub"], "alice");
        let scp = grant_from_claims("i", claims(json!({"sub": "s", "scp": ["x", "y"]}))).unwrap();
        assert_eq!(scp.scopes, ["x", "y"]);
    }

    #[test]
    fn a_token_without_subject_or_with_bad_members_is_refused() {
        for bad in [
            json!({}),
            json!({"sub": ""}),
            json!({"sub": 5}),
            json!({"sub": "s", "scope": 5}),
            json!({"sub": "s", "scp": [1]}),
            json!({"sub": "s", "exp": "soon"}),
            json!({"sub": "s", "exp": -1}),
            json!({"sub": "s", "cnf": {"jkt": 1}}),
        ] {
            assert!(
                matches!(
                    grant_from_claims("i", claims(bad.clone())),
                    Err(AuthError::InvalidToken(_))
                ),
                "{bad}"
            );
        }
    }
}
