//! The crate's errors: [`Error`] for a call, [`FleetError`] for [`Fleet::connect`](crate::Fleet::connect),
//! and the one place where a Redis error becomes a [`StoreError`].

use std::time::Duration;

use modelctx_server::StoreError;

/// A call to Redis failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Redis gave no answer within the operation timeout
    /// ([`FleetConfig::op_timeout`](crate::FleetConfig::op_timeout)): it is down, unreachable or
    /// being reconnected to.
    #[error("redis: {op} got no answer within {after:?}")]
    Timeout {
        /// What was asked (a command or script name).
        op: &'static str,
        /// The timeout.
        after: Duration,
    },
    /// Redis, or the connection to it, said no.
    #[error("redis: {op} failed: {source}")]
    Redis {
        /// What was asked.
        op: &'static str,
        /// Its error.
        #[source]
        source: redis::RedisError,
    },
    /// A value read from Redis is not what this crate wrote there.
    #[error("redis: {op}: the stored value is not valid: {source}")]
    Corrupt {
        /// What was asked.
        op: &'static str,
        /// Why it is not valid.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    pub(crate) fn redis(op: &'static str, source: redis::RedisError) -> Error {
        Error::Redis { op, source }
    }

    /// Whether Redis could not be used at all (no answer in time, no connection, loading its
    /// data, read-only, out of memory), as opposed to a call that Redis ran and refused or a
    /// value that cannot be read. A caller may try again later: an unavailable Redis is
    /// reconnected to in the background.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Timeout { .. } => true,
            Error::Redis { source, .. } => {
                use redis::{ErrorKind, ServerErrorKind};
                source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
                    || matches!(
                        source.kind(),
                        ErrorKind::Server(
                            ServerErrorKind::BusyLoading
                                | ServerErrorKind::TryAgain
                                | ServerErrorKind::ClusterDown
                                | ServerErrorKind::MasterDown
                                | ServerErrorKind::ReadOnly
                        ) | ErrorKind::ClusterConnectionNotFound
                    )
                    || source.code() == Some("OOM")
            }
            Error::Corrupt { .. } => false,
        }
    }
}

/// [`Fleet::connect`](crate::Fleet::connect) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FleetError {
    /// The URL or the configuration cannot be used.
    #[error("redis: invalid configuration: {0}")]
    Config(String),
    /// The URL cannot be used.
    #[error("redis: invalid URL: {0}")]
    Url(#[source] redis::RedisError),
    /// Redis could not be reached or did not answer.
    #[error("redis: cannot connect: {0}")]
    Connect(#[source] Error),
    /// The server is older than 6.2 (which has `GETEX` and exclusive `XRANGE` starts).
    #[error("redis: version {version} is too old; 6.2 or newer is needed")]
    TooOld {
        /// The `redis_version` it reported.
        version: String,
    },
    /// Every instance number (`0..4096`) is leased by a live instance.
    #[error(
        "redis: no free instance number: all {} are leased",
        crate::MAX_INSTANCES
    )]
    NoInstanceNumber,
}

/// A Redis failure as the session store reports it: the one place where the store's errors
/// are made, so that how they are classified ([`Error::is_unavailable`]) is decided here:
/// [`StoreError::unavailable`] (the transport answers 503, the client tries again) or
/// [`StoreError::failed`].
pub(crate) fn store_error(error: Error) -> StoreError {
    if error.is_unavailable() {
        StoreError::unavailable(error)
    } else {
        StoreError::failed(error)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn timeouts_and_io_are_unavailable_refusals_and_bad_values_are_not() {
        let timeout = Error::Timeout {
            op: "GETEX",
            after: Duration::from_secs(1),
        };
        assert!(timeout.is_unavailable());
        assert_eq!(timeout.to_string(), "redis: GETEX got no answer within 1s");

        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(Error::redis("SET", refused).is_unavailable());

        let script = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR Error running script",
        ));
        assert!(!Error::redis("remove", script).is_unavailable());

        let loading = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::BusyLoading),
            "LOADING",
        ));
        assert!(Error::redis("GETEX", loading).is_unavailable());

        let corrupt = Error::Corrupt {
            op: "GETEX",
            source: serde_json::from_str::<serde_json::Value>("{").unwrap_err(),
        };
        assert!(!corrupt.is_unavailable());
    }

    #[test]
    fn a_store_error_says_whether_redis_was_unavailable() {
        use modelctx_server::StoreErrorKind;
        let down = store_error(Error::Timeout {
            op: "GETEX",
            after: Duration::from_secs(1),
        });
        assert_eq!(down.kind(), StoreErrorKind::Unavailable);
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(
            store_error(Error::redis("SET", refused)).kind(),
            StoreErrorKind::Unavailable
        );
        let script = redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
            "ERR Error running script",
        ));
        assert_eq!(
            store_error(Error::redis("remove", script)).kind(),
            StoreErrorKind::Failed
        );
        let corrupt = Error::Corrupt {
            op: "GETEX",
            source: serde_json::from_str::<serde_json::Value>("{").unwrap_err(),
        };
        assert_eq!(store_error(corrupt).kind(), StoreErrorKind::Failed);
    }

    #[test]
    fn a_store_error_keeps_its_cause() {
        let error = store_error(Error::Timeout {
            op: "SET",
            after: Duration::from_millis(500),
        });
        let source = error.source().expect("a cause");
        let ours = source.downcast_ref::<Error>().expect("this crate's error");
        assert!(matches!(ours, Error::Timeout { op: "SET", .. }));
    }
}
