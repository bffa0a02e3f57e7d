//! Running a server's side of a connection: the request runner ([`runner`]), which routes
//! requests to handlers and applies what they ask, with no I/O; the connection driver
//! ([`driver`]), which owns a runner for a connection's life; what handlers ask
//! ([`command`]); the [`Output`] each transport writes through ([`output`]); and the state a
//! legacy session keeps between requests, as plain data ([`store`]).
//!
//! Imports run one way: `transport` and `http` use this module; this module uses the routes
//! (`server`) and the context; the context uses only [`command`].

pub(crate) mod command;
pub(crate) mod driver;
pub(crate) mod output;
pub(crate) mod runner;
pub(crate) mod store;

pub(crate) use command::{Command, Commands};
pub(crate) use driver::{Input, Lifetime};
pub use output::Frame;
#[cfg_attr(not(any(feature = "stdio", feature = "http")), allow(unused_imports))]
pub(crate) use output::Output;
pub(crate) use runner::{Conn, Origin};
pub use store::{
    InMemoryStore, SessionState, SessionStore, StoreError, StoreErrorKind, StoreFuture,
};
