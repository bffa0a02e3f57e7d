//! The public builders ([`Auth`], [`Issuer`], [`Dpop`]) and the configuration they build.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jsonwebtoken::{Algorithm, AlgorithmFamily};
use modelctx_http::server::Metadata;

use crate::canonical::{Parts, Resource};
use crate::challenge::ChallengeInfo;
use crate::guard::AuthGuard;
use crate::jwt::{self, JwtPolicy};
use crate::metadata::{self, advertised, alg_name};
use crate::verifier::TokenVerifier;
use crate::{Clock, Fetch, SystemClock};

/// The default clock skew allowed on token times.
pub(crate) const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);
/// The largest clock skew [`Auth::leeway`] accepts.
pub(crate) const MAX_LEEWAY: Duration = Duration::from_secs(120);

/// Whether and how DPoP (RFC 9449) sender-constrained tokens are accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Dpop {
    /// Only `Bearer` tokens; a `DPoP` authorization counts as no credentials (401 without an
    /// error code, as for any scheme this server does not take).
    Off,
    /// `Bearer` and `DPoP` tokens; a DPoP-bound token must come with a valid proof. The default.
    #[default]
    Allowed,
    /// Only `DPoP` tokens with a valid proof; the metadata says bound tokens are required.
    Required,
}

/// An authorization server whose access tokens are accepted.
///
/// Defaults: audiences the resource (its canonical URI); algorithms RS256/384/512,
/// PS256/384/512, ES256/384 and EdDSA; `typ` must be `at+jwt` (RFC 9068); no introspection
/// (opaque tokens are refused).
#[derive(Clone)]
pub struct Issuer {
    url: String,
    audiences: Vec<String>,
    algorithms: Option<Vec<Algorithm>>,
    accept_typ_jwt: bool,
    introspection: Option<Credentials>,
}

impl Issuer {
    /// The authorization server with issuer identifier `url` (its metadata's `issuer`, compared
    /// byte for byte): `https`, or `http` to a loopback host (tests).
    pub fn new(url: impl Into<String>) -> Issuer {
        Issuer {
            url: url.into(),
            audiences: Vec::new(),
            algorithms: None,
            accept_typ_jwt: false,
            introspection: None,
        }
    }

    /// Adds an audience the tokens may name instead of the resource (an `api://` identifier
    /// some servers use). Once one is added, the resource is accepted only if added too.
    pub fn audience(mut self, audience: impl Into<String>) -> Issuer {
        self.audiences.push(audience.into());
        self
    }

    /// The signature algorithms accepted (asymmetric only: HMAC is refused by
    /// [`Auth::build`]).
    pub fn algorithms(mut self, algorithms: impl IntoIterator<Item = Algorithm>) -> Issuer {
        self.algorithms = Some(algorithms.into_iter().collect());
        self
    }

    /// Accepts tokens typed `JWT` as well as `at+jwt` (Keycloak, Entra ID). The audience check
    /// still refuses ID tokens, whose audience is the client.
    pub fn accept_typ_jwt(mut self) -> Issuer {
        self.accept_typ_jwt = true;
        self
    }

    /// Introspects opaque tokens at the server's introspection endpoint (RFC 7662), as this
    /// client (`client_secret_basic`).
    pub fn introspection(
        mut self,
        client_id: impl Into<String>,
        client_secret: impl Into<String>,
    ) -> Issuer {
        self.introspection = Some(Credentials {
            client_id: client_id.into(),
            client_secret: client_secret.into(),
        });
        self
    }
}

impl fmt::Debug for Issuer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Issuer")
            .field("url", &self.url)
            .field("audiences", &self.audiences)
            .field("algorithms", &self.algorithms)
            .field("accept_typ_jwt", &self.accept_typ_jwt)
            .field("introspection", &self.introspection)
            .finish()
    }
}

/// A client's credentials at an introspection endpoint. `Debug` hides the secret.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) client_id: String,
    pub(crate) client_secret: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("client_id", &self.client_id)
            .finish_non_exhaustive()
    }
}

/// The OAuth 2.1 resource server's configuration. [`build`](Auth::build) checks it.
///
/// Defaults: no issuers or verifiers (at least one is required), no `scopes_supported`, no
/// `resource_name`, [`Dpop::Allowed`] without nonces, a leeway of 30 s, scopes compared exactly
/// (no hierarchy), the default HTTP client, the system clock [`SystemClock`].
#[derive(Clone, Debug)]
pub struct Auth {
    resource: String,
    resource_name: Option<String>,
    issuers: Vec<Issuer>,
    scopes_supported: Vec<String>,
    verifiers: Vec<Arc<dyn TokenVerifier>>,
    dpop: Dpop,
    nonce_key: Option<NonceKey>,
    leeway: Duration,
    scope_implies: Option<fn(&str, &str) -> bool>,
    fetcher: Option<Arc<dyn Fetch>>,
    clock: Arc<dyn Clock>,
}

impl Auth {
    /// A resource server for the MCP endpoint at `uri` (its canonical URI, RFC 8707: absolute,
    /// `http` or `https`, no fragment; `https://mcp.example.com/mcp`, say): what tokens must
    /// name as their audience, and where its metadata is served.
    pub fn resource(uri: impl Into<String>) -> Auth {
        Auth {
            resource: uri.into(),
            resource_name: None,
            issuers: Vec::new(),
            scopes_supported: Vec::new(),
            verifiers: Vec::new(),
            dpop: Dpop::default(),
            nonce_key: None,
            leeway: DEFAULT_LEEWAY,
            scope_implies: None,
            fetcher: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// Accepts the access tokens of the authorization server `url`, with [`Issuer`]'s defaults.
    pub fn issuer(self, url: impl Into<String>) -> Auth {
        self.issuer_with(Issuer::new(url))
    }

    /// Accepts the access tokens of `issuer`.
    pub fn issuer_with(mut self, issuer: Issuer) -> Auth {
        self.issuers.push(issuer);
        self
    }

    /// The scopes clients may ask for: the metadata's `scopes_supported` and the `scope` of a
    /// 401 challenge (`offline_access` is never listed).
    pub fn scopes_supported(mut self, scopes: impl IntoIterator<Item = impl Into<String>>) -> Auth {
        self.scopes_supported = scopes.into_iter().map(Into::into).collect();
        self
    }

    /// A name for people, the metadata's `resource_name` (default none).
    pub fn resource_name(mut self, name: impl Into<String>) -> Auth {
        self.resource_name = Some(name.into());
        self
    }

    /// Also accepts the tokens `verifier` knows (API keys, [`StaticToken`](crate::StaticToken)),
    /// asked before the issuers.
    pub fn verifier(mut self, verifier: impl TokenVerifier) -> Auth {
        self.verifiers.push(Arc::new(verifier));
        self
    }

    /// Whether DPoP is off, allowed (the default) or required.
    pub fn dpop(mut self, dpop: Dpop) -> Auth {
        self.dpop = dpop;
        self
    }

    /// Requires DPoP nonces (RFC 9449 8), made with `key` (HMAC-SHA256). Give every instance
    /// behind one load balancer the same key.
    pub fn dpop_nonces(mut self, key: [u8; 32]) -> Auth {
        self.nonce_key = Some(NonceKey(key));
        self
    }

    /// The clock skew allowed on token times (`exp`, `nbf`, `iat`): default 30 s, at most 120 s.
    pub fn leeway(mut self, leeway: Duration) -> Auth {
        self.leeway = leeway;
        self
    }

    /// Scope hierarchy: `implies(granted, needed)` says whether a granted scope covers a needed
    /// one (`files` covers `files:read`, say); a scope always covers itself. Default: none.
    pub fn scope_implies(mut self, implies: fn(&str, &str) -> bool) -> Auth {
        self.scope_implies = Some(implies);
        self
    }

    /// The HTTP client for the authorization servers' metadata, keys and introspection
    /// (default: the crate's own hyper client).
    pub fn fetcher(mut self, fetch: impl Fetch) -> Auth {
        self.fetcher = Some(Arc::new(fetch));
        self
    }

    /// The clock token times are checked against (tests).
    pub fn clock(mut self, clock: impl Clock) -> Auth {
        self.clock = Arc::new(clock);
        self
    }

    /// Checks the configuration: the resource parses; at least one issuer or verifier; each
    /// issuer `https` (or `http` to a loopback host) without a query, configured once, with
    /// asymmetric algorithms only; scopes are RFC 6749 scope tokens; the leeway is at most
    /// 120 s; nonces only with DPoP.
    ///
    /// The result is the resource server's [`Guard`](modelctx_http::server::Guard): give it to
    /// `ServerBuilder::auth` (modelctx-server) or set it as `ServerConfig::guard`.
    pub fn build(self) -> Result<AuthGuard, ConfigError> {
        self.config().map(AuthGuard::new)
    }

    /// The checked configuration.
    pub(crate) fn config(self) -> Result<AuthConfig, ConfigError> {
        let resource = Resource::parse(&self.resource)?;
        if self.issuers.is_empty() && self.verifiers.is_empty() {
            return Err(ConfigError::NothingToAccept);
        }
        if self.leeway > MAX_LEEWAY {
            return Err(ConfigError::Leeway(self.leeway));
        }
        if self.nonce_key.is_some() && self.dpop == Dpop::Off {
            return Err(ConfigError::NoncesWithoutDpop);
        }
        if let Some(bad) = self.scopes_supported.iter().find(|s| !is_scope_token(s)) {
            return Err(ConfigError::Scope(bad.clone()));
        }
        let mut issuers: Vec<IssuerConfig> = Vec::with_capacity(self.issuers.len());
        for issuer in self.issuers {
            check_issuer_url(&issuer.url)?;
            if issuers.iter().any(|i| i.policy.issuer == issuer.url) {
                return Err(ConfigError::DuplicateIssuer(issuer.url));
            }
            let algorithms = match issuer.algorithms {
                None => jwt::default_algorithms(),
                Some(algs) if algs.is_empty() => {
                    return Err(ConfigError::Algorithm {
                        issuer: issuer.url,
                        why: "none is allowed",
                    });
                }
                Some(algs) if algs.iter().any(|a| a.family() == AlgorithmFamily::Hmac) => {
                    return Err(ConfigError::Algorithm {
                        issuer: issuer.url,
                        why: "HMAC (a shared secret) is not accepted",
                    });
                }
                Some(algs) => algs,
            };
            let audiences = if issuer.audiences.is_empty() {
                vec![resource.as_str().to_owned()]
            } else {
                issuer.audiences
            };
            issuers.push(IssuerConfig {
                policy: JwtPolicy {
                    issuer: issuer.url,
                    audiences,
                    algorithms,
                    leeway: self.leeway,
                    accept_typ_jwt: issuer.accept_typ_jwt,
                },
                introspection: issuer.introspection,
            });
        }
        let dpop_algorithms = match self.dpop {
            Dpop::Off => Vec::new(),
            Dpop::Allowed | Dpop::Required => crate::dpop::default_dpop_algorithms(),
        };
        let dpop_names = || {
            dpop_algorithms
                .iter()
                .copied()
                .map(alg_name)
                .collect::<Vec<_>>()
                .join(" ")
        };
        let metadata = (!issuers.is_empty()).then(|| {
            let servers: Vec<String> = issuers.iter().map(|i| i.policy.issuer.clone()).collect();
            let dpop = (self.dpop != Dpop::Off)
                .then_some((dpop_algorithms.as_slice(), self.dpop == Dpop::Required));
            let body = metadata::document(
                &resource,
                &servers,
                &self.scopes_supported,
                dpop,
                self.resource_name.as_deref(),
            );
            Metadata::new(resource.well_known_paths(), body)
        });
        let scope = advertised(&self.scopes_supported)
            .collect::<Vec<_>>()
            .join(" ");
        let challenge = ChallengeInfo {
            resource_metadata: if metadata.is_some() {
                resource.metadata_url()
            } else {
                String::new()
            },
            scope: (!scope.is_empty()).then_some(scope),
            dpop_algs: (self.dpop != Dpop::Off).then(dpop_names),
            bearer_allowed: self.dpop != Dpop::Required,
        };
        Ok(AuthConfig {
            resource,
            issuers,
            verifiers: self.verifiers,
            dpop: self.dpop,
            dpop_algorithms,
            nonce_key: self.nonce_key.map(|k| k.0),
            scope_implies: self.scope_implies,
            fetcher: self.fetcher,
            clock: self.clock,
            challenge,
            metadata,
        })
    }
}

/// A nonce key; `Debug` hides it.
#[derive(Clone, Copy)]
struct NonceKey([u8; 32]);

impl fmt::Debug for NonceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NonceKey(..)")
    }
}

/// An RFC 6749 3.3 scope token: one or more of `%x21 / %x23-5B / %x5D-7E` (no space, `"` or
/// `\`).
fn is_scope_token(scope: &str) -> bool {
    !scope.is_empty()
        && scope
            .bytes()
            .all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E))
}

fn check_issuer_url(url: &str) -> Result<(), ConfigError> {
    let refuse = |why| ConfigError::Issuer {
        url: url.to_owned(),
        why,
    };
    let parts = Parts::split(url).map_err(refuse)?;
    if parts.scheme == "http" && !parts.is_loopback() {
        return Err(refuse("is http to a host that is not loopback (use https)"));
    }
    if parts.query.is_some() {
        return Err(refuse("has a query"));
    }
    Ok(())
}

/// What the resource server was configured with, checked by [`Auth::build`]. The
/// [`Guard`](modelctx_http::server::Guard) is made from it.
pub(crate) struct AuthConfig {
    /// The canonical resource.
    pub(crate) resource: Resource,
    /// The issuers, in the order they were added.
    pub(crate) issuers: Vec<IssuerConfig>,
    /// The other verifiers, asked first, in order.
    pub(crate) verifiers: Vec<Arc<dyn TokenVerifier>>,
    /// The DPoP mode.
    pub(crate) dpop: Dpop,
    /// The DPoP proof algorithms (empty with DPoP off).
    pub(crate) dpop_algorithms: Vec<Algorithm>,
    /// The DPoP nonce key, when nonces are required.
    pub(crate) nonce_key: Option<[u8; 32]>,
    /// The scope hierarchy (`granted`, `needed`); `None`: exact comparison.
    pub(crate) scope_implies: Option<fn(&str, &str) -> bool>,
    /// The HTTP client; `None`: the default client.
    pub(crate) fetcher: Option<Arc<dyn Fetch>>,
    /// The clock for token times.
    pub(crate) clock: Arc<dyn Clock>,
    /// What every challenge says.
    pub(crate) challenge: ChallengeInfo,
    /// The protected resource metadata and its paths; `None` without issuers (no
    /// authorization server to name).
    pub(crate) metadata: Option<Metadata>,
}

impl fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AuthConfig")
            .field("resource", &self.resource.as_str())
            .field("issuers", &self.issuers)
            .field("verifiers", &self.verifiers)
            .field("dpop", &self.dpop)
            .field("dpop_nonces", &self.nonce_key.is_some())
            .field("scope_implies", &self.scope_implies.is_some())
            .field("fetcher", &self.fetcher)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// One issuer's checks: its JWT policy (default algorithms filled in), and introspection.
#[derive(Debug, Clone)]
pub(crate) struct IssuerConfig {
    /// The issuer, audiences (default: the canonical resource), algorithms, leeway and `typ`.
    pub(crate) policy: JwtPolicy,
    /// Introspection credentials, for opaque tokens.
    pub(crate) introspection: Option<Credentials>,
}

/// Why [`Auth::build`] refused a configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The resource URI is not a canonical server URI.
    #[error("resource {uri:?} {why}")]
    Resource {
        /// The URI.
        uri: String,
        /// Why.
        why: &'static str,
    },
    /// Neither an issuer nor a verifier is configured: no token could be accepted.
    #[error("no issuer and no token verifier: no token could be accepted")]
    NothingToAccept,
    /// An issuer URL may not be used.
    #[error("issuer {url:?} {why}")]
    Issuer {
        /// The URL.
        url: String,
        /// Why.
        why: &'static str,
    },
    /// An issuer is configured twice.
    #[error("issuer {0:?} is configured twice")]
    DuplicateIssuer(String),
    /// An issuer's algorithm list cannot be used.
    #[error("issuer {issuer:?}: algorithms: {why}")]
    Algorithm {
        /// The issuer.
        issuer: String,
        /// Why.
        why: &'static str,
    },
    /// A scope is not an RFC 6749 scope token (empty, or with a space, `"` or `\`).
    #[error("scope {0:?} is not a scope token")]
    Scope(String),
    /// The leeway is more than 120 s.
    #[error("leeway {0:?} exceeds 120 s")]
    Leeway(Duration),
    /// DPoP nonces are configured with DPoP off.
    #[error("DPoP nonces are configured, but DPoP is off")]
    NoncesWithoutDpop,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::StaticToken;

    fn auth() -> Auth {
        Auth::resource("https://MCP.example.com/mcp/").issuer("https://id.example.com")
    }

    fn err(auth: Auth) -> ConfigError {
        auth.config().unwrap_err()
    }

    #[test]
    fn a_minimal_configuration() {
        let config = auth()
            .scopes_supported(["mcp", "offline_access"])
            .config()
            .unwrap();
        assert_eq!(config.resource.as_str(), "https://mcp.example.com/mcp");
        assert_eq!(
            config.metadata.as_ref().map_or(&[][..], |m| &m.paths[..]),
            [
                "/.well-known/oauth-protected-resource/mcp",
                "/.well-known/oauth-protected-resource"
            ]
        );
        let issuer = &config.issuers[0];
        assert_eq!(issuer.policy.issuer, "https://id.example.com");
        assert_eq!(issuer.policy.audiences, ["https://mcp.example.com/mcp"]);
        assert_eq!(issuer.policy.algorithms, jwt::default_algorithms());
        assert_eq!(issuer.policy.leeway, Duration::from_secs(30));
        assert!(!issuer.policy.accept_typ_jwt);
        assert_eq!(issuer.introspection, None);
        assert_eq!(config.dpop, Dpop::Allowed);
        assert_eq!(
            config.dpop_algorithms,
            crate::dpop::default_dpop_algorithms()
        );
        assert_eq!(config.nonce_key, None);
        assert!(config.fetcher.is_none());
        assert!(config.scope_implies.is_none());
        assert_eq!(
            config.challenge,
            ChallengeInfo {
                resource_metadata:
                    "https://mcp.example.com/.well-known/oauth-protected-resource/mcp".into(),
                scope: Some("mcp".into()),
                dpop_algs: Some("ES256 ES384 RS256 PS256 EdDSA".into()),
                bearer_allowed: true,
            }
        );
        let metadata = config.metadata.as_ref().unwrap();
        let doc: Value = serde_json::from_slice(&metadata.body).unwrap();
        assert_eq!(
            doc,
            json!({
                "resource": "https://mcp.example.com/mcp",
                "authorization_servers": ["https://id.example.com"],
                "scopes_supported": ["mcp"],
                "bearer_methods_supported": ["header"],
                "dpop_signing_alg_values_supported": ["ES256", "ES384", "RS256", "PS256", "EdDSA"],
                "dpop_bound_access_tokens_required": false,
            })
        );
    }

    #[test]
    fn every_setting_reaches_the_configuration() {
        fn implies(granted: &str, needed: &str) -> bool {
            needed.starts_with(granted)
        }
        let config = Auth::resource("http://127.0.0.1:8080/mcp")
            .issuer_with(
                Issuer::new("http://127.0.0.1:9000/realms/a")
                    .audience("api://files")
                    .audience("account")
                    .algorithms([Algorithm::ES256])
                    .accept_typ_jwt()
                    .introspection("rs", "rs-secret"),
            )
            .issuer("https://b.example.com")
            .verifier(StaticToken::new("k"))
            .dpop(Dpop::Required)
            .dpop_nonces([7; 32])
            .leeway(Duration::from_secs(120))
            .scope_implies(implies)
            .resource_name("Files")
            .config()
            .unwrap();
        let a = &config.issuers[0];
        assert_eq!(a.policy.audiences, ["api://files", "account"]);
        assert_eq!(a.policy.algorithms, [Algorithm::ES256]);
        assert!(a.policy.accept_typ_jwt);
        assert_eq!(a.policy.leeway, Duration::from_secs(120));
        let creds = a.introspection.as_ref().unwrap();
        assert_eq!(
            (creds.client_id.as_str(), creds.client_secret.as_str()),
            ("rs", "rs-secret")
        );
        assert_eq!(
            config.issuers[1].policy.audiences,
            ["http://127.0.0.1:8080/mcp"]
        );
        assert_eq!(config.verifiers.len(), 1);
        assert_eq!(config.nonce_key, Some([7; 32]));
        assert!((config.scope_implies.unwrap())("files", "files:read"));
        assert!(!config.challenge.bearer_allowed);
        assert_eq!(config.challenge.scope, None);
        let doc: Value = serde_json::from_slice(&config.metadata.as_ref().unwrap().body).unwrap();
        assert_eq!(
            doc["authorization_servers"],
            json!(["http://127.0.0.1:9000/realms/a", "https://b.example.com"])
        );
        assert_eq!(doc["dpop_bound_access_tokens_required"], true);
        assert_eq!(doc["resource_name"], "Files");
        // Neither the introspection secret nor the nonce key is shown.
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("rs-secret") && !shown.contains("7, 7"),
            "{shown}"
        );
    }

    #[test]
    fn debug_hides_secrets_before_build_too() {
        let auth = Auth::resource("https://h")
            .issuer_with(Issuer::new("https://a").introspection("rs", "rs-secret"))
            .dpop_nonces([7; 32]);
        let shown = format!("{auth:?}");
        assert!(shown.contains("\"rs\""), "{shown}");
        assert!(
            !shown.contains("rs-secret") && !shown.contains("7, 7"),
            "{shown}"
        );
    }

    #[test]
    fn dpop_off_and_verifiers_only() {
        let config = auth().dpop(Dpop::Off).config().unwrap();
        assert!(config.dpop_algorithms.is_empty());
        assert_eq!(config.challenge.dpop_algs, None);
        assert!(config.challenge.bearer_allowed);
        let doc: Value = serde_json::from_slice(&config.metadata.as_ref().unwrap().body).unwrap();
        assert!(doc.get("dpop_signing_alg_values_supported").is_none());
        // With verifiers only there is no authorization server, so no metadata to name.
        let config = Auth::resource("https://h/mcp")
            .verifier(StaticToken::new("k"))
            .config()
            .unwrap();
        assert!(config.metadata.is_none());
        assert!(
            config
                .metadata
                .as_ref()
                .map_or(&[][..], |m| &m.paths[..])
                .is_empty()
        );
        assert_eq!(config.challenge.resource_metadata, "");
    }

    #[test]
    fn invalid_configurations_are_refused() {
        assert!(matches!(
            err(Auth::resource("https://h/mcp#x").issuer("https://a")),
            ConfigError::Resource {
                why: "has a fragment",
                ..
            }
        ));
        assert_eq!(
            err(Auth::resource("https://h/mcp")),
            ConfigError::NothingToAccept
        );
        for (url, why) in [
            (
                "http://id.example.com",
                "is http to a host that is not loopback (use https)",
            ),
            ("https://id.example.com?x=1", "has a query"),
            ("https://id.example.com#x", "has a fragment"),
            ("id.example.com", "is not an absolute URI"),
        ] {
            assert_eq!(
                err(Auth::resource("https://h/mcp").issuer(url)),
                ConfigError::Issuer {
                    url: url.into(),
                    why
                }
            );
        }
        assert!(
            Auth::resource("https://h")
                .issuer("http://localhost:1/x")
                .config()
                .is_ok()
        );
        assert_eq!(
            err(auth().issuer("https://id.example.com")),
            ConfigError::DuplicateIssuer("https://id.example.com".into())
        );
        assert!(matches!(
            err(Auth::resource("https://h").issuer_with(
                Issuer::new("https://a").algorithms([Algorithm::ES256, Algorithm::HS256])
            )),
            ConfigError::Algorithm { .. }
        ));
        assert!(matches!(
            err(Auth::resource("https://h").issuer_with(Issuer::new("https://a").algorithms([]))),
            ConfigError::Algorithm { .. }
        ));
        assert_eq!(
            err(auth().leeway(Duration::from_millis(120_001))),
            ConfigError::Leeway(Duration::from_millis(120_001))
        );
        assert!(auth().leeway(Duration::ZERO).config().is_ok());
        assert_eq!(
            err(auth().dpop(Dpop::Off).dpop_nonces([0; 32])),
            ConfigError::NoncesWithoutDpop
        );
        for bad in ["", "a b", "a\"b", "a\\b", "é"] {
            assert_eq!(
                err(auth().scopes_supported(["mcp", bad])),
                ConfigError::Scope(bad.into())
            );
        }
    }
}
