//! The test authorization server (`tests/ts/oidc-as.mjs`, oidc-provider 9.13.3, driven by
//! `modelctx_tests::oidc`) behaves as the resource-server tests need: what its tokens and its
//! introspection answers carry, DPoP binding, key rotation, its counters, the user flow, and
//! refusals. Tokens are decoded without verifying here, except where the point is that they
//! verify against the published keys.
//!
//! Skipped without Node (see `modelctx_tests::node`); `cargo xtask ci` runs them with
//! `MODELCTX_REQUIRE_NODE=1`, so they fail there instead.

use std::time::Duration;

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use modelctx_tests::oidc::{As, DpopKey, Stats, decode_unverified, forge_hs256_with_kid, unix_now};
use serde_json::{Value, json};

const RESOURCE: &str = "http://127.0.0.1:9/mcp";
const OPAQUE: &str = "http://127.0.0.1:9/mcp/opaque";

/// Verifies `token`'s ES256 signature with the AS's published key named by its `kid`.
async fn verify_with_jwks(auth: &As, token: &str) -> Value {
    let (header, _) = decode_unverified(token);
    let set: JwkSet = serde_json::from_value(auth.jwks().await).expect("a JWK set");
    let kid = header["kid"].as_str().expect("a kid");
    let jwk = set
        .find(kid)
        .unwrap_or_else(|| panic!("{kid} is not published"));
    let mut validation = Validation::new(Algorithm::ES256);
    validation.set_audience(&[RESOURCE]);
    validation.set_issuer(&[auth.issuer()]);
    jsonwebtoken::decode::<Value>(token, &DecodingKey::from_jwk(jwk).unwrap(), &validation)
        .expect("a signature by a published key")
        .claims
}

#[tokio::test]
async fn a_client_credentials_jwt_names_its_resource_and_the_client_as_subject() {
    let Some(auth) = As::start(&[RESOURCE]).await else {
        return;
    };
    let token = auth.client_credentials("mcp files:write", RESOURCE).await;
    assert_eq!(token.token_type, "Bearer");
    assert_eq!(token.expires_in, 3600);
    assert_eq!(token.scope.as_deref(), Some("mcp files:write"));

    let (header, claims) = decode_unverified(&token.access_token);
    assert_eq!(header["typ"], "at+jwt", "{header}");
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["kid"], "k1");
    assert_eq!(claims["aud"], RESOURCE, "a single string: {claims}");
    assert_eq!(claims["iss"], auth.issuer());
    assert_eq!(claims["scope"], "mcp files:write");
    assert_eq!(claims["client_id"], "svc");
    // oidc-provider always sets `sub`: the client id when there is no user.
    assert_eq!(claims["sub"], "svc");
    assert!(claims["jti"].is_string());
    let iat = claims["iat"].as_u64().unwrap();
    let exp = claims["exp"].as_u64().unwrap();
    assert!(iat.abs_diff(unix_now()) <= 5);
    assert_eq!(exp - iat, 3600);
    assert!(claims.get("cnf").is_none(), "not bound: {claims}");
    assert_eq!(verify_with_jwks(&auth, &token.access_token).await, claims);

    // Scopes the resource does not know are dropped, not refused.
    let token = auth.client_credentials("mcp unknown", RESOURCE).await;
    assert_eq!(token.scope.as_deref(), Some("mcp"));
    // Without a resource parameter, the first resource is the audience.
    let token = auth.client_credentials("mcp", "").await;
    let (_, claims) = decode_unverified(&token.access_token);
    assert_eq!(claims["aud"], RESOURCE);
}

#[tokio::test]
async fn opaque_tokens_are_introspected_with_their_resource_as_audience() {
    let Some(auth) = As::start(&[RESOURCE]).await else {
        return;
    };
    let token = auth.client_credentials("mcp demo:admin", OPAQUE).await;
    assert_eq!(
        token.access_token.split('.').count(),
        1,
        "opaque: {}",
        token.access_token
    );
    let answer = auth.introspect(&token.access_token).await;
    assert_eq!(answer["active"], true, "{answer}");
    assert_eq!(answer["aud"], RESOURCE, "{answer}");
    assert_eq!(answer["iss"], auth.issuer());
    assert_eq!(answer["scope"], "mcp demo:admin");
    assert_eq!(answer["client_id"], "svc");
    assert_eq!(answer["token_type"], "Bearer");
    let exp = answer["exp"].as_u64().unwrap();
    assert!(exp.abs_diff(unix_now() + 3600) <= 5, "{answer}");
    // Unlike the JWT form, no `sub` for a token without a user.
    assert!(answer.get("sub").is_none(), "{answer}");
    assert!(answer.get("cnf").is_none(), "{answer}");

    // A user's opaque token has the user as `sub`.
    let user = auth.auth_code_pkce("mcp", OPAQUE).await;
    let answer = auth.introspect(&user.access_token).await;
    assert_eq!(answer["active"], true, "{answer}");
    assert_eq!(answer["sub"], "alice");
    assert_eq!(answer["client_id"], "app");
    assert_eq!(answer["aud"], RESOURCE);

    // Unknown tokens: exactly `{"active": false}`. JWTs cannot be introspected at all.
    assert_eq!(
        auth.introspect("no-such-token").await,
        json!({"active": false})
    );
    let jwt = auth.client_credentials("mcp", RESOURCE).await;
    let answer = auth.introspect(&jwt.access_token).await;
    assert_eq!(answer["error"], "unsupported_token_type", "{answer}");
}

#[tokio::test]
async fn dpop_bound_tokens_carry_the_key_thumbprint() {
    let Some(auth) = As::start(&[RESOURCE]).await else {
        return;
    };
    let key = DpopKey::new();
    // The AS requires nonces: a proof without one is refused, with a nonce to use.
    let refused = auth
        .try_client_credentials_dpop(&key, "mcp", RESOURCE, None)
        .await
        .expect_err("a proof without a nonce");
    assert_eq!(refused.status, 400);
    assert_eq!(refused.error, "use_dpop_nonce", "{:?}", refused.body);
    let nonce = refused.dpop_nonce.expect("a DPoP-Nonce header");
    let token = auth
        .try_client_credentials_dpop(&key, "mcp", RESOURCE, Some(&nonce))
        .await
        .expect("a token with the nonce");
    assert_eq!(token.token_type, "DPoP");
    let other = auth
        .try_client_credentials_dpop(&key, "mcp", RESOURCE, Some("not-a-nonce"))
        .await
        .expect_err("a nonce the AS did not issue");
    assert_eq!(other.error, "use_dpop_nonce");

    // The helper does that round trip itself: one refusal, then the token.
    let before = auth.stats().await;
    let token = auth.client_credentials_dpop(&key, "mcp", RESOURCE).await;
    assert_eq!(auth.stats().await.token - before.token, 2);
    assert_eq!(token.token_type, "DPoP");
    let (_, claims) = decode_unverified(&token.access_token);
    assert_eq!(claims["cnf"], json!({"jkt": key.jkt()}), "{claims}");

    let opaque = auth.client_credentials_dpop(&key, "mcp", OPAQUE).await;
    let answer = auth.introspect(&opaque.access_token).await;
    assert_eq!(answer["cnf"], json!({"jkt": key.jkt()}), "{answer}");
    assert_eq!(answer["token_type"], "DPoP");

    let other = DpopKey::new();
    let token = auth.client_credentials_dpop(&other, "mcp", RESOURCE).await;
    let (_, claims) = decode_unverified(&token.access_token);
    assert_eq!(claims["cnf"]["jkt"], other.jkt());
    assert_ne!(other.jkt(), key.jkt());
}

#[tokio::test]
async fn rotation_changes_the_signing_key_and_publishes_both() {
    let Some(auth) = As::start(&[RESOURCE]).await else {
        return;
    };
    let old = auth.client_credentials("mcp", RESOURCE).await.access_token;
    assert_eq!(decode_unverified(&old).0["kid"], "k1");

    let kid = auth.rotate().await;
    assert_eq!(kid, "k2");
    let new = auth.client_credentials("mcp", RESOURCE).await.access_token;
    assert_eq!(decode_unverified(&new).0["kid"], "k2");
    let jwks = auth.jwks().await;
    let kids: Vec<&str> = jwks["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kid"].as_str().unwrap())
        .collect();
    assert_eq!(kids, ["k2", "k1"]);
    for key in jwks["keys"].as_array().unwrap() {
        assert!(key.get("d").is_none(), "a private key published: {key}");
        assert_eq!(key["use"], "sig");
        assert_eq!(key["alg"], "ES256");
    }
    // Both verify; tokens issued before the rotation are still introspectable (shared storage).
    verify_with_jwks(&auth, &old).await;
    verify_with_jwks(&auth, &new).await;
    let opaque = auth.client_credentials("mcp", OPAQUE).await;
    auth.rotate().await;
    assert_eq!(auth.introspect(&opaque.access_token).await["active"], true);
}

#[tokio::test]
async fn the_stats_count_key_set_and_introspection_requests() {
    let Some(auth) = As::start(&[RESOURCE]).await else {
        return;
    };
    let zero = Stats {
        jwks: 0,
        introspect: 0,
        token: 0,
    };
    assert_eq!(auth.stats().await, zero);
    auth.jwks().await;
    auth.jwks().await;
    let token = auth.client_credentials("mcp", OPAQUE).await;
    auth.introspect(&token.access_token).await;
    assert_eq!(
        auth.stats().await,
        Stats {
            jwks: 2,
            introspect: 1,
            token: 1
        }
    );
}

#[tokio::test]
async fn the_authorization_code_flow_with_pkce_gives_alice_a_token() {
    let Some(auth) = As::start(&[RESOURCE]).await else {
        return;
    };
    let token = auth.auth_code_pkce("mcp files:write", RESOURCE).await;
    assert_eq!(token.token_type, "Bearer");
    assert_eq!(token.scope.as_deref(), Some("mcp files:write"));
    let claims = verify_with_jwks(&auth, &token.access_token).await;
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["client_id"], "app");
    assert_eq!(claims["aud"], RESOURCE);
    assert_eq!(claims["scope"], "mcp files:write");
}

#[tokio::test]
async fn an_unknown_resource_is_refused() {
    let Some(auth) = As::start(&[RESOURCE]).await else {
        return;
    };
    let refused = auth
        .try_client_credentials("mcp", "http://127.0.0.1:9/other", None)
        .await
        .expect_err("an unknown resource");
    assert_eq!(refused.status, 400);
    assert_eq!(refused.error, "invalid_target", "{:?}", refused.body);
}

#[tokio::test]
async fn short_lived_tokens_and_arbitrary_signatures_for_the_negative_tests() {
    let Some(auth) = As::start(&[RESOURCE]).await else {
        return;
    };
    let token = auth
        .client_credentials_ttl("mcp", RESOURCE, Duration::from_secs(2))
        .await;
    assert_eq!(token.expires_in, 2);
    let (_, claims) = decode_unverified(&token.access_token);
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        2
    );

    // Defaults, then overrides: a future nbf, another audience, no typ.
    let later = unix_now() + 3600;
    let signed = auth
        .sign(
            json!({"typ": null}),
            json!({"nbf": later, "aud": "http://elsewhere"}),
        )
        .await;
    let (header, claims) = decode_unverified(&signed);
    assert_eq!(header, json!({"alg": "ES256", "kid": "k1"}));
    assert_eq!(claims["nbf"], later);
    assert_eq!(claims["aud"], "http://elsewhere");
    assert_eq!(claims["iss"], auth.issuer());
    assert_eq!(claims["sub"], "alice");
    assert_eq!(claims["scope"], "mcp");
    assert!(claims["exp"].as_u64().unwrap() > unix_now());

    // Defaults only: a token the resource server should accept, signed by the current key.
    let signed = auth.sign(json!({}), json!({})).await;
    let (header, _) = decode_unverified(&signed);
    assert_eq!(header["typ"], "at+jwt");
    let claims = verify_with_jwks(&auth, &signed).await;
    assert_eq!(claims["aud"], RESOURCE);
    auth.rotate().await;
    let signed = auth.sign(json!({}), json!({})).await;
    assert_eq!(decode_unverified(&signed).0["kid"], "k2");
}

#[tokio::test]
async fn the_current_key_is_the_one_that_signs_for_the_confusion_tests() {
    let Some(auth) = As::start(&[RESOURCE]).await else {
        return;
    };
    let key = auth.current_key().await;
    assert_eq!(key.kid, "k1");
    assert_eq!(key.sec1.len(), 65);
    assert!(key.spki_pem.starts_with("-----BEGIN PUBLIC KEY-----"));
    // The published point verifies the AS's tokens.
    let token = auth.client_credentials("mcp", RESOURCE).await.access_token;
    let x = key.jwk["x"].as_str().unwrap();
    let y = key.jwk["y"].as_str().unwrap();
    let decoding = DecodingKey::from_ec_components(x, y).unwrap();
    let mut validation = Validation::new(Algorithm::ES256);
    validation.set_audience(&[RESOURCE]);
    jsonwebtoken::decode::<Value>(&token, &decoding, &validation).expect("signed by k1");
    // A token MACed with those bytes names the key it pretends to be signed by.
    let (_, claims) = decode_unverified(&token);
    let forged = forge_hs256_with_kid(&key.sec1, Some(&key.kid), &claims);
    let (header, forged_claims) = decode_unverified(&forged);
    assert_eq!(header["alg"], "HS256");
    assert_eq!(header["kid"], "k1");
    assert_eq!(forged_claims, claims);

    auth.rotate().await;
    let rotated = auth.current_key().await;
    assert_eq!(rotated.kid, "k2");
    assert_ne!(rotated.sec1, key.sec1);
}
