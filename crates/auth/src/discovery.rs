//! The authorization server's metadata: RFC 8414, or OpenID Connect Discovery 1.0.

use serde_json::Value;

use crate::AuthError;
use crate::as_metadata::{Unusable, fetch_document, metadata_urls};
use crate::fetch::{Fetch, check_url};

/// What the resource server needs from an authorization server's metadata (whose `issuer`
/// member was checked equal, byte for byte, to the configured issuer).
#[derive(Debug, Clone)]
pub(crate) struct AsMetadata {
    /// `jwks_uri`, checked by [`check_url`].
    pub(crate) jwks_uri: Option<String>,
    /// `introspection_endpoint` (RFC 7662), checked by [`check_url`].
    pub(crate) introspection_endpoint: Option<String>,
}

/// Fetches the metadata of `issuer`, trying [`metadata_urls`] in order until one answers `200`
/// with a JSON object. A document whose `issuer` is not `issuer` byte for byte is not used (RFC
/// 8414 section 3.3), nor one whose `jwks_uri` or `introspection_endpoint` is not a URL the
/// client may fetch (https, or http on loopback). Every failure is
/// [`AuthError::Unavailable`]: the token is not at fault.
pub(crate) async fn discover(fetch: &dyn Fetch, issuer: &str) -> Result<AsMetadata, AuthError> {
    check_url(issuer).map_err(|e| AuthError::Unavailable(e.to_string()))?;
    let urls = metadata_urls(issuer)
        .map_err(|why| AuthError::Unavailable(format!("issuer {issuer}: {why}")))?;
    let mut last = None;
    for url in urls {
        match fetch_one(fetch, &url, issuer).await {
            Ok(metadata) => return Ok(metadata),
            Err(why) => {
                tracing::debug!(%url, %why, "authorization server metadata not usable");
                last = Some(format!("{url}: {why}"));
            }
        }
    }
    Err(AuthError::Unavailable(format!(
        "no metadata for issuer {issuer} ({})",
        last.unwrap_or_default()
    )))
}

async fn fetch_one(fetch: &dyn Fetch, url: &str, issuer: &str) -> Result<AsMetadata, String> {
    let raw = fetch_document(fetch, url, issuer)
        .await
        .map_err(|why: Unusable| why.to_string())?;
    let endpoint = |name: &str| -> Result<Option<String>, String> {
        match raw.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(url)) => {
                check_url(url).map_err(|e| format!("{name}: {e}"))?;
                Ok(Some(url.clone()))
            }
            Some(_) => Err(format!("{name} is not a string")),
        }
    };
    Ok(AsMetadata {
        jwks_uri: endpoint("jwks_uri")?,
        introspection_endpoint: endpoint("introspection_endpoint")?,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use crate::BoxFuture;
    use bytes::Bytes;
    use serde_json::json;

    use super::*;
    use crate::fetch::{FetchError, FetchResponse};

    /// Answers GETs from a table (404 otherwise) and records the URLs asked (the guard's tests
    /// use it too).
    #[derive(Debug, Default)]
    pub(crate) struct Table {
        pub(crate) docs: HashMap<String, Value>,
        pub(crate) asked: Mutex<Vec<String>>,
    }

    impl Table {
        /// How many GETs were made.
        pub(crate) fn gets(&self) -> usize {
            self.asked.lock().unwrap().len()
        }
    }

    impl Fetch for Table {
        fn get<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            self.asked.lock().unwrap().push(url.to_owned());
            let response = match self.docs.get(url) {
                Some(doc) => FetchResponse::new(http::StatusCode::OK, doc.to_string()),
                None => FetchResponse::new(http::StatusCode::NOT_FOUND, Bytes::new()),
            };
            Box::pin(async move { Ok(response) })
        }

        fn post_form<'a>(
            &'a self,
            _: &'a str,
            _: &'a [(&'a str, &'a str)],
            _: Option<(&'a str, &'a str)>,
        ) -> BoxFuture<'a, Result<FetchResponse, FetchError>> {
            unreachable!("no POST expected")
        }
    }

    pub(crate) fn table(docs: &[(&str, Value)]) -> Table {
        Table {
            docs: docs
                .iter()
                .map(|(url, doc)| ((*url).to_owned(), doc.clone()))
                .collect(),
            asked: Mutex::default(),
        }
    }

    #[tokio::test]
    async fn the_first_document_found_in_order_is_used() {
        let issuer = "http://127.0.0.1:9/realms/a";
        let oidc_appended = "http://127.0.0.1:9/realms/a/.well-known/openid-configuration";
        let fetch = table(&[(
            oidc_appended,
            json!({"issuer": issuer, "jwks_uri": "http://127.0.0.1:9/certs",
                   "introspection_endpoint": "http://localhost:9/introspect"}),
        )]);
        let metadata = discover(&fetch, issuer).await.unwrap();
        assert_eq!(
            metadata.jwks_uri.as_deref(),
            Some("http://127.0.0.1:9/certs")
        );
        assert_eq!(
            metadata.introspection_endpoint.as_deref(),
            Some("http://localhost:9/introspect")
        );
        assert_eq!(
            *fetch.asked.lock().unwrap(),
            [
                "http://127.0.0.1:9/.well-known/oauth-authorization-server/realms/a",
                "http://127.0.0.1:9/.well-known/openid-configuration/realms/a",
                oidc_appended,
            ]
        );

        // RFC 8414's document wins when present: nothing else is asked.
        let rfc8414 = "http://127.0.0.1:9/.well-known/oauth-authorization-server/realms/a";
        let fetch = table(&[
            (
                rfc8414,
                json!({"issuer": issuer, "jwks_uri": "http://127.0.0.1:9/k1"}),
            ),
            (
                oidc_appended,
                json!({"issuer": issuer, "jwks_uri": "http://127.0.0.1:9/k2"}),
            ),
        ]);
        let metadata = discover(&fetch, issuer).await.unwrap();
        assert_eq!(metadata.jwks_uri.as_deref(), Some("http://127.0.0.1:9/k1"));
        assert_eq!(metadata.introspection_endpoint, None);
        assert_eq!(*fetch.asked.lock().unwrap(), [rfc8414]);
    }

    #[tokio::test]
    async fn a_document_naming_another_issuer_is_refused() {
        let issuer = "http://127.0.0.1:9/realms/a";
        for other in [
            "http://127.0.0.1:9/realms/a/",
            "http://127.0.0.1:9/realms/A",
            "http://127.0.0.1:9/realms/b",
            "HTTP://127.0.0.1:9/realms/a",
        ] {
            let fetch = table(&[
                (
                    "http://127.0.0.1:9/.well-known/oauth-authorization-server/realms/a",
                    json!({"issuer": other, "jwks_uri": "http://127.0.0.1:9/k"}),
                ),
                (
                    "http://127.0.0.1:9/realms/a/.well-known/openid-configuration",
                    json!({"issuer": other, "jwks_uri": "http://127.0.0.1:9/k"}),
                ),
            ]);
            let result = discover(&fetch, issuer).await;
            assert!(
                matches!(result, Err(AuthError::Unavailable(_))),
                "{other}: {result:?}"
            );
        }
        let missing = table(&[(
            "http://127.0.0.1:9/.well-known/oauth-authorization-server",
            json!({"jwks_uri": "http://127.0.0.1:9/k"}),
        )]);
        assert!(matches!(
            discover(&missing, "http://127.0.0.1:9").await,
            Err(AuthError::Unavailable(_))
        ));
    }

    #[tokio::test]
    async fn endpoints_that_are_not_https_are_refused() {
        let issuer = "http://127.0.0.1:9";
        for doc in [
            json!({"issuer": issuer, "jwks_uri": "http://id.example.com/jwks"}),
            json!({"issuer": issuer, "introspection_endpoint": "http://10.1.1.1/introspect"}),
            json!({"issuer": issuer, "jwks_uri": 5}),
        ] {
            let fetch = table(&[(
                "http://127.0.0.1:9/.well-known/oauth-authorization-server",
                doc.clone(),
            )]);
            let result = discover(&fetch, issuer).await;
            assert!(
                matches!(result, Err(AuthError::Unavailable(_))),
                "{doc}: {result:?}"
            );
        }
        // Nor is a plain-http issuer that is not on loopback asked at all.
        let fetch = table(&[]);
        assert!(matches!(
            discover(&fetch, "http://id.example.com").await,
            Err(AuthError::Unavailable(_))
        ));
        assert!(fetch.asked.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn discovery_and_keys_over_the_default_client() {
        use std::sync::Arc;

        use http::Response;
        use http_body_util::Full;

        use crate::fetch::HttpFetch;
        use crate::fetch::tests::{Seen, serve};
        use crate::jwks::{Jwks, JwksPolicy};

        let issuer = Arc::new(Mutex::new(String::new()));
        let named = issuer.clone();
        let addr = serve(Arc::new(move |seen: Seen| {
            let issuer = named.lock().unwrap().clone();
            let body = match seen.path.as_str() {
                "/.well-known/openid-configuration/tenant" => {
                    json!({"issuer": issuer, "jwks_uri": format!("{issuer}/certs")})
                }
                "/tenant/certs" => json!({"keys": [crate::jwks::tests::p256("k1")]}),
                _ => {
                    return Response::builder()
                        .status(404)
                        .body(Full::new(Bytes::new()))
                        .unwrap();
                }
            };
            Response::builder()
                .header("cache-control", "max-age=600")
                .body(Full::new(Bytes::from(body.to_string())))
                .unwrap()
        }))
        .await;
        *issuer.lock().unwrap() = format!("http://{addr}/tenant");
        let issuer = issuer.lock().unwrap().clone();
        let fetch = Arc::new(HttpFetch::new());
        let metadata = discover(fetch.as_ref(), &issuer).await.unwrap();
        let jwks_uri = metadata.jwks_uri.unwrap();
        assert_eq!(jwks_uri, format!("{issuer}/certs"));
        let keys = Jwks::new(fetch, jwks_uri, JwksPolicy::default());
        keys.key(Some("k1"), jsonwebtoken::Algorithm::ES256)
            .await
            .unwrap();
        assert_eq!(keys.fetches(), 1);
    }

    #[tokio::test]
    async fn nothing_found_is_unavailable() {
        let fetch = table(&[]);
        let result = discover(&fetch, "http://127.0.0.1:9/x").await;
        assert!(
            matches!(result, Err(AuthError::Unavailable(_))),
            "{result:?}"
        );
        assert_eq!(fetch.asked.lock().unwrap().len(), 3);
    }
}
