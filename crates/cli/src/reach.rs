//! How `mcx` reaches a server: the TLS settings of an `https` URL (`--cacert`) and the
//! environment of a server run as a child (`--env`, `--inherit-env`).
//!
//! Over `https`, the server's certificate must chain to one of the webpki roots (the public
//! certificate authorities Mozilla trusts) or to a CA of `--cacert`; no client certificate is
//! sent, and there is no way to skip the check. A child server gets a filtered environment
//! (modelctx-stdio's `ServerCommand`: a few variables such as `HOME` and `PATH`), so that
//! tokens and keys in the user's environment do not reach a server that was not meant to have
//! them; `--env` adds variables and `--inherit-env` passes the whole environment. The hints of
//! a failed connection are added here too ([`hint`]).

use std::path::Path;
use std::sync::Arc;

use clap::Args;
use modelctx_client::{ConnectError, HttpConfig, ServerCommand, TransportError};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use crate::Target;

/// The environment of a server run as a child (`--stdio`).
#[derive(Args, Debug, Default, Clone)]
pub(crate) struct ChildEnv {
    /// Set a variable in the server's environment, `KEY=VALUE`; `KEY` alone passes mcx's own
    /// variable of that name (which keeps a secret out of the process list; refused when mcx
    /// has none). Repeatable; with --stdio.
    #[arg(long = "env", value_name = "KEY[=VALUE]", requires = "stdio")]
    pub(crate) env: Vec<String>,
    /// Pass mcx's whole environment to the server, not only the few variables it gets by
    /// default (with --stdio).
    #[arg(long, requires = "stdio")]
    pub(crate) inherit_env: bool,
}

impl ChildEnv {
    /// `command` with the environment asked for: every variable with `--inherit-env`, then the
    /// `--env` ones (a `KEY=VALUE` over an inherited variable of the same name). A `KEY` alone
    /// that is not set in mcx's environment is refused, naming it.
    pub(crate) fn apply(&self, mut command: ServerCommand) -> Result<ServerCommand, String> {
        if self.inherit_env {
            command = command.inherit_all_env();
        }
        for item in &self.env {
            let (key, value) = match item.split_once('=') {
                Some((key, value)) => (key, Some(value)),
                None => (item.as_str(), None),
            };
            if key.is_empty() {
                return Err(format!("--env `{item}`: the name is empty"));
            }
            if key.contains('\0') || value.is_some_and(|v| v.contains('\0')) {
                return Err(format!("--env `{key}`: a NUL character"));
            }
            command = match value {
                Some(value) => command.env(key, value),
                // Unset, it would silently not reach the server.
                None if std::env::var_os(key).is_none() => {
                    return Err(format!(
                        "--env `{key}`: `{key}` is not set in mcx's environment (give --env \
                         {key}=VALUE to set it)"
                    ));
                }
                None => command.inherit_env(key),
            };
        }
        Ok(command)
    }
}

/// `config` with the TLS settings `cacert` asks for: the webpki roots and the certificates of
/// that PEM file; unchanged without it (the transport then trusts the webpki roots).
pub(crate) fn with_tls(
    mut config: HttpConfig,
    cacert: Option<&Path>,
) -> Result<HttpConfig, String> {
    if let Some(path) = cacert {
        config.tls = Some(Arc::new(tls_config(path)?));
    }
    Ok(config)
}

/// `message`, the error of connecting to `target`, with a hint when `error` says what to do
/// about it: an HTTP 401 asks for a token, a certificate of an unknown issuer for `--cacert`.
/// (The 404's hint, a wrong path, is the client's own message.)
pub(crate) fn hint(message: String, error: &ConnectError, target: &Target) -> String {
    if status(error) == Some(401) {
        let given = target.bearer.is_some()
            || target.bearer_file.is_some()
            || target.headers.iter().any(|h| {
                h.split_once(':')
                    .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("authorization"))
            })
            || std::env::var_os(crate::commands::BEARER_VARIABLE).is_some_and(|v| !v.is_empty());
        return if given {
            format!("{message} (the token given was refused)")
        } else {
            format!("{message} (give a token: --bearer-file PATH, --bearer TOKEN or MCX_BEARER)")
        };
    }
    if !message.contains("invalid peer certificate: UnknownIssuer") {
        return message;
    }
    match &target.cacert {
        Some(path) => format!(
            "{message} (the server's certificate is signed neither by a CA of --cacert {} nor \
             by a public one)",
            path.display()
        ),
        None => format!(
            "{message} (the server's certificate is not signed by a public certificate \
             authority: to trust its CA, give its certificate with --cacert PATH)"
        ),
    }
}

/// The HTTP status the endpoint answered instead of an MCP answer, when that is why connecting
/// failed.
fn status(error: &ConnectError) -> Option<u16> {
    use modelctx_client::HttpTransportError as Http;
    match error {
        ConnectError::Unreachable(TransportError::Http(Http::Status { status, .. })) => {
            Some(status.as_u16())
        }
        _ => None,
    }
}

/// A rustls client configuration (ring, the safe default protocol versions, no client
/// certificate) that trusts the webpki roots and every certificate of the PEM file at `path`.
fn tls_config(path: &Path) -> Result<rustls::ClientConfig, String> {
    let roots = roots(path)?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(config)
}

/// The webpki roots and the certificates of the PEM file at `path`.
fn roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots =
        rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    for certificate in read_certificates(path)? {
        roots.add(certificate).map_err(|e| {
            format!(
                "--cacert {}: a certificate that cannot be a trust anchor: {e}",
                path.display()
            )
        })?;
    }
    Ok(roots)
}

/// The certificates (`BEGIN CERTIFICATE` sections) of the PEM file at `path`: at least one.
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    // Read first, so that a missing file is said as such (the PEM iterator's error is terse).
    let pem = std::fs::read(path).map_err(|e| format!("--cacert {shown}: {e}"))?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--cacert {shown}: not a valid PEM file: {e}"))?;
    if certificates.is_empty() {
        return Err(format!(
            "--cacert {shown}: no certificate in the file (expected PEM `-----BEGIN CERTIFICATE-----` sections)"
        ));
    }
    Ok(certificates)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::path::PathBuf;

    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    }

    /// A file of this test process, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, contents: &[u8]) -> TempFile {
            let path =
                std::env::temp_dir().join(format!("mcx-reach-{name}-{}", std::process::id()));
            std::fs::write(&path, contents).expect("written");
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn every_certificate_of_a_pem_file_is_read() {
        let ca = std::fs::read(fixture("ca.pem")).expect("the CA fixture");
        let server = std::fs::read(fixture("server.pem")).expect("the server fixture");
        assert_eq!(read_certificates(&fixture("ca.pem")).unwrap().len(), 1);
        // A bundle, with text around its sections as CA bundles often have.
        let mut bundle = b"# test bundle\n".to_vec();
        bundle.extend_from_slice(&ca);
        bundle.extend_from_slice(b"\n");
        bundle.extend_from_slice(&server);
        let file = TempFile::new("bundle", &bundle);
        let read = read_certificates(&file.0).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!(read[0], read_certificates(&fixture("ca.pem")).unwrap()[0]);
        // Both are trusted next to the webpki roots.
        let webpki = webpki_roots::TLS_SERVER_ROOTS.len();
        assert_eq!(roots(&file.0).unwrap().len(), webpki + 2);
        assert_eq!(roots(&fixture("ca.pem")).unwrap().len(), webpki + 1);
        assert!(tls_config(&file.0).is_ok());
    }

    #[test]
    fn a_cacert_without_certificates_is_refused_by_name() {
        let file = TempFile::new("empty", b"nothing here\n");
        let error = read_certificates(&file.0).unwrap_err();
        assert!(error.contains("no certificate in the file"), "{error}");
        assert!(error.starts_with("--cacert "), "{error}");
        // A key is not a certificate.
        let error = read_certificates(&fixture("server.key")).unwrap_err();
        assert!(error.contains("no certificate in the file"), "{error}");
        let missing = fixture("missing.pem");
        let error = read_certificates(&missing).unwrap_err();
        assert!(
            error.starts_with(&format!("--cacert {}: ", missing.display())),
            "{error}"
        );
        // A broken section.
        let file = TempFile::new(
            "broken",
            b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n",
        );
        let error = read_certificates(&file.0).unwrap_err();
        assert!(error.contains("not a valid PEM file"), "{error}");
    }

    #[test]
    fn without_cacert_the_config_is_left_to_the_transport() {
        let config = with_tls(HttpConfig::default(), None).unwrap();
        assert!(config.tls.is_none());
        let config = with_tls(HttpConfig::default(), Some(&fixture("ca.pem"))).unwrap();
        assert!(config.tls.is_some());
    }

    #[test]
    fn an_unknown_issuer_gets_a_hint_naming_cacert() {
        let refused = "cannot connect to https://x/mcp: connection failed: client error \
                       (Connect): invalid peer certificate: UnknownIssuer"
            .to_owned();
        let certificate_hint = |message: String, target: &Target| {
            hint(
                message,
                &ConnectError::Url("(the message decides)".into()),
                target,
            )
        };
        let hinted = certificate_hint(refused.clone(), &Target::default());
        assert!(hinted.starts_with(&refused), "{hinted}");
        assert!(
            hinted.ends_with("give its certificate with --cacert PATH)"),
            "{hinted}"
        );
        let with = Target {
            cacert: Some("ca.pem".into()),
            ..Target::default()
        };
        let hinted = certificate_hint(refused.clone(), &with);
        assert!(hinted.contains("a CA of --cacert ca.pem"), "{hinted}");
        let other = "cannot connect to https://x/mcp: connection refused".to_owned();
        assert_eq!(certificate_hint(other.clone(), &Target::default()), other);
    }

    #[test]
    fn a_401_asks_for_a_token() {
        let unauthorized = ConnectError::Unreachable(TransportError::Http(
            modelctx_client::HttpTransportError::Status {
                status: http::StatusCode::UNAUTHORIZED,
                body: String::new(),
            },
        ));
        let message = "cannot connect to http://x/mcp: the endpoint answered HTTP 401 \
                       Unauthorized"
            .to_owned();
        // Unless MCX_BEARER is set where the tests run.
        if std::env::var_os(crate::commands::BEARER_VARIABLE).is_none() {
            assert_eq!(
                hint(message.clone(), &unauthorized, &Target::default()),
                format!(
                    "{message} (give a token: --bearer-file PATH, --bearer TOKEN or MCX_BEARER)"
                )
            );
        }
        let with = Target {
            bearer: Some("secret".into()),
            ..Target::default()
        };
        assert_eq!(
            hint(message.clone(), &unauthorized, &with),
            format!("{message} (the token given was refused)")
        );
        let forbidden = ConnectError::Unreachable(TransportError::Http(
            modelctx_client::HttpTransportError::Status {
                status: http::StatusCode::FORBIDDEN,
                body: String::new(),
            },
        ));
        assert_eq!(
            hint(message.clone(), &forbidden, &Target::default()),
            message
        );
    }

    fn env_of(child_env: &ChildEnv) -> (Vec<(OsString, OsString)>, Vec<OsString>, bool) {
        let command = child_env
            .apply(ServerCommand::new("server"))
            .expect("applies");
        let (set, inherited, all) = command.get_envs();
        (set.to_vec(), inherited.to_vec(), all)
    }

    #[test]
    fn env_sets_or_passes_variables_and_inherit_env_passes_all() {
        let (set, inherited, all) = env_of(&ChildEnv::default());
        assert!(set.is_empty() && inherited.is_empty() && !all);
        let (set, inherited, all) = env_of(&ChildEnv {
            env: vec![
                "FOO=bar".into(),
                "EMPTY=".into(),
                "EQ=a=b".into(),
                // Set wherever the tests run.
                "PATH".into(),
            ],
            inherit_env: false,
        });
        assert_eq!(
            set,
            [("FOO", "bar"), ("EMPTY", ""), ("EQ", "a=b")]
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        );
        assert_eq!(inherited, [OsString::from("PATH")]);
        assert!(!all);
        let (_, _, all) = env_of(&ChildEnv {
            env: Vec::new(),
            inherit_env: true,
        });
        assert!(all);
        let unset = format!("MCX_TEST_UNSET_{}", std::process::id());
        let error = ChildEnv {
            env: vec![unset.clone()],
            inherit_env: false,
        }
        .apply(ServerCommand::new("server"))
        .unwrap_err();
        assert_eq!(
            error,
            format!(
                "--env `{unset}`: `{unset}` is not set in mcx's environment (give --env \
                 {unset}=VALUE to set it)"
            )
        );
        for bad in ["=x", "", "A\0=b", "A=\0"] {
            let error = ChildEnv {
                env: vec![bad.into()],
                inherit_env: false,
            }
            .apply(ServerCommand::new("server"))
            .unwrap_err();
            assert!(error.starts_with("--env `"), "{bad:?}: {error}");
        }
    }
}
