//! Server-sent events, both ways: [`encode`] frames the events the server writes and streams them
//! as a response body (feature `server`); [`decode`] reads the event streams the client receives,
//! bounded and split anywhere (feature `client`).

#[cfg(feature = "client")]
pub(crate) mod decode;
#[cfg(feature = "server")]
pub(crate) mod encode;

#[cfg(feature = "client")]
pub(crate) use decode::{SseDecoder, SseError, SseEvent};
#[cfg(feature = "server")]
pub(crate) use encode::{StreamBody, event, priming};
