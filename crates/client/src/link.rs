//! The transports a client runs on, behind one small interface for the driver: messages out,
//! [`LinkEvent`]s in.

use modelctx_session::Transmit;
#[cfg(feature = "http")]
use modelctx_types::Message;
use modelctx_types::RequestId;
#[cfg(feature = "http")]
use std::sync::Arc;

use crate::error::TransportError;

pub(crate) use crate::channels::{Channels, LinkEvent, QUEUE, WRITE_TIMEOUT, feed, forward};

#[cfg(feature = "stdio")]
use crate::stdio::ServerExit;
/// No child process without the feature `stdio`.
#[cfg(not(feature = "stdio"))]
pub(crate) type ServerExit = std::convert::Infallible;

/// Which way a message went on the wire (see [`ClientBuilder::on_wire`](crate::ClientBuilder::on_wire)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Direction {
    /// From the client to the server.
    Sent,
    /// From the server to the client.
    Received,
}

/// A wire tap: each JSON-RPC message (or batch) as one line of JSON, with its direction.
pub(crate) type WireFn = std::sync::Arc<dyn Fn(Direction, &str) + Send + Sync>;

/// `bytes` (an encoded message or batch) as text.
fn wire_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// What a received input looks like on the wire: one message, or a batch of the elements that
/// were messages (none when no element was).
pub(crate) fn received_text(incoming: &modelctx_types::Incoming) -> Option<String> {
    match incoming {
        modelctx_types::Incoming::Single(message) => {
            Some(wire_text(modelctx_types::encode(message)))
        }
        modelctx_types::Incoming::Batch(items) => {
            let messages: Vec<modelctx_types::Message> = items
                .iter()
                .filter_map(|m| m.as_ref().ok().cloned())
                .collect();
            (!messages.is_empty()).then(|| wire_text(modelctx_types::encode_batch(&messages)))
        }
        _ => None,
    }
}

/// How the transport may carry one request; only Streamable HTTP uses them.
#[derive(Debug, Clone)]
pub(crate) struct Hints {
    /// Whether a modern request whose response stream breaks may be sent again.
    #[cfg_attr(not(feature = "http"), allow(dead_code))]
    pub(crate) reissue: bool,
    /// The `x-mcp-header` parameters of the tool a modern `tools/call` calls.
    #[cfg(feature = "http")]
    pub(crate) param_headers: Option<std::sync::Arc<[modelctx_http::headers::ParamHeader]>>,
}

impl Default for Hints {
    /// Sent again when its stream breaks; no `Mcp-Param-*` headers.
    fn default() -> Self {
        Hints {
            reissue: true,
            #[cfg(feature = "http")]
            param_headers: None,
        }
    }
}

/// A message-level transport: channels (in memory, or the tasks of a line-framed stream), a
/// child process's pipes, or HTTP.
pub(crate) enum Link {
    Channels(Box<Channels>),
    /// A server run as a child process: its pipes, and the process.
    #[cfg(feature = "stdio")]
    Stdio {
        channels: Box<Channels>,
        child: Box<crate::stdio::Child>,
    },
    #[cfg(feature = "http")]
    Http(Box<modelctx_http::client::HttpTransport>),
}

impl Link {
    /// Starts `command` as a child process, and a link over its pipes.
    #[cfg(feature = "stdio")]
    pub(crate) fn spawn(
        command: &modelctx_stdio::ServerCommand,
        write_timeout: std::time::Duration,
    ) -> std::io::Result<Link> {
        let (channels, child) = crate::stdio::spawn(command, write_timeout)?;
        Ok(Link::Stdio {
            channels: Box::new(channels),
            child: Box::new(child),
        })
    }

    /// The next event; after [`LinkEvent::Closed`], never returns.
    pub(crate) async fn recv(&mut self) -> LinkEvent {
        match self {
            Link::Channels(c) => c.recv().await,
            #[cfg(feature = "stdio")]
            Link::Stdio { channels, .. } => channels.recv().await,
            #[cfg(feature = "http")]
            Link::Http(t) => http_event(t.recv().await),
        }
    }

    /// Writes one transmit and, once the transport took it, shows `tap` what it writes (a
    /// modern cancellation over HTTP writes nothing: it closes the request's stream). An `Err`
    /// names the request that could not be sent, if it was one. `hints`: how a modern HTTP
    /// request is carried (nothing is sent again over channels, and there are no headers).
    pub(crate) async fn send(
        &mut self,
        transmit: Transmit,
        hints: Hints,
        tap: Option<&WireFn>,
    ) -> Result<(), (Option<RequestId>, TransportError)> {
        // Encoded only for a tap.
        let shown = tap.and_then(|_| self.sent_text(&transmit));
        self.write(transmit, hints)?;
        if let (Some(tap), Some(text)) = (tap, shown) {
            tap(Direction::Sent, &text);
        }
        Ok(())
    }

    /// What [`send`](Self::send) writes for `transmit`, as one line of JSON; `None` when it
    /// writes no message.
    fn sent_text(&self, transmit: &Transmit) -> Option<String> {
        let bytes = match transmit {
            Transmit::Message { message, .. } => modelctx_types::encode(message),
            Transmit::Batch(messages) => modelctx_types::encode_batch(messages),
            Transmit::Cancel {
                notification, era, ..
            } => {
                #[cfg(feature = "http")]
                if matches!(self, Link::Http(_)) && *era == modelctx_session::Era::Modern {
                    return None;
                }
                let _ = era;
                modelctx_types::encode(&notification.clone().into())
            }
            _ => return None,
        };
        Some(wire_text(bytes))
    }

    fn write(
        &mut self,
        transmit: Transmit,
        hints: Hints,
    ) -> Result<(), (Option<RequestId>, TransportError)> {
        match self {
            Link::Channels(c) => {
                let _ = hints;
                c.send(transmit)
            }
            #[cfg(feature = "stdio")]
            Link::Stdio { channels, .. } => {
                let _ = hints;
                channels.send(transmit)
            }
            #[cfg(feature = "http")]
            Link::Http(t) => match transmit {
                Transmit::Message { message, .. } => {
                    let id = match &message {
                        Message::Request(r) => Some(r.id.clone()),
                        _ => None,
                    };
                    let mut options = send_options(&message).reissue(hints.reissue);
                    if let Some(params) = hints.param_headers {
                        options = options.param_headers(params);
                    }
                    t.send_with(message, options)
                        .map_err(|e| (id, TransportError::Refused(Arc::new(e))))
                }
                Transmit::Batch(messages) => t
                    .send_batch(messages)
                    .map_err(|e| (None, TransportError::Refused(Arc::new(e)))),
                Transmit::Cancel {
                    request_id,
                    notification,
                    era,
                } => {
                    // The answer is not wanted any more: its response stream is closed (the
                    // modern era's cancellation itself)...
                    t.cancel(&request_id);
                    if era == modelctx_session::Era::Modern {
                        return Ok(());
                    }
                    // ...and a legacy server is told with the notification.
                    let message = Message::from(notification);
                    let options = send_options(&message);
                    t.send_with(message, options)
                        .map_err(|e| (None, TransportError::Refused(Arc::new(e))))
                }
                _ => Ok(()),
            },
        }
    }

    /// Tells the transport the version the session speaks (only Streamable HTTP uses it, for
    /// the `MCP-Protocol-Version` header of legacy requests).
    pub(crate) fn set_version(&self, version: Option<modelctx_session::ProtocolVersion>) {
        match self {
            #[cfg(feature = "http")]
            Link::Http(t) => t.set_version(version),
            _ => {
                let _ = version;
            }
        }
    }

    /// Whether the legacy session's standalone stream (HTTP) is being opened: what the server
    /// sends outside of requests does not reach the client yet.
    pub(crate) fn standalone_opening(&self) -> bool {
        match self {
            #[cfg(feature = "http")]
            Link::Http(t) => {
                t.standalone_stream() == modelctx_http::client::StandaloneStream::Opening
            }
            _ => false,
        }
    }

    /// How the server process ended, when the link is one to a child process.
    #[cfg(feature = "stdio")]
    pub(crate) async fn describe_exit(&mut self) -> Option<String> {
        match self {
            Link::Stdio { child, .. } => Some(child.describe_exit().await),
            _ => None,
        }
    }

    /// Ends the transport: closes the server's input (and, for a child process, shuts it down
    /// as the specification asks); over HTTP, ends a legacy session with `DELETE`. How a child
    /// process stopped, for a link to one.
    pub(crate) async fn shut_down(self) -> Option<ServerExit> {
        match self {
            Link::Channels(mut c) => c.out = None,
            #[cfg(feature = "stdio")]
            Link::Stdio {
                mut channels,
                child,
            } => {
                channels.out = None;
                return child.shut_down().await;
            }
            #[cfg(feature = "http")]
            Link::Http(t) => t.close().await,
        }
        None
    }
}

/// What the HTTP transport must know of a message that it does not read itself: which request
/// starts a legacy session, which notification completes its handshake, which request is a
/// listen stream.
#[cfg(feature = "http")]
fn send_options(message: &Message) -> modelctx_http::client::SendOptions {
    use modelctx_types::consts::{NotificationsInitialized, SubscriptionsListen};
    let options = modelctx_http::client::SendOptions::default();
    match message {
        message if modelctx_types::opens_session(message) => options.starts_session(),
        Message::Request(r) if r.method == SubscriptionsListen::VALUE => options.listen(),
        Message::Notification(n) if n.method == NotificationsInitialized::VALUE => {
            options.opens_standalone()
        }
        _ => options,
    }
}

#[cfg(feature = "http")]
fn http_event(inbound: Option<modelctx_http::client::Inbound>) -> LinkEvent {
    use modelctx_http::client::Inbound;
    match inbound {
        None => LinkEvent::Closed("the HTTP transport stopped".into()),
        Some(Inbound::Message(m)) => LinkEvent::Message(m),
        Some(Inbound::Unreadable(e)) => {
            LinkEvent::Unreadable(crate::notify::Unreadable::unseen(e.to_string()))
        }
        Some(Inbound::RequestFailed { id, error }) => LinkEvent::RequestFailed {
            id,
            error: TransportError::Http(error),
        },
        Some(Inbound::SessionEnded) => LinkEvent::SessionEnded,
        Some(Inbound::ListenReopened { id, wire }) => LinkEvent::ListenReopened { id, wire },
        Some(Inbound::Closed(e)) => LinkEvent::Closed(e.to_string()),
        Some(Inbound::AskedDuring { request, during }) => {
            LinkEvent::AskedDuring { request, during }
        }
        Some(Inbound::Undelivered {
            what,
            answer: Some(_),
            error,
        }) => LinkEvent::AnswerLost(format!("{what}: {error}")),
        Some(other) => LinkEvent::Note(format!("{other:?}")),
    }
}

#[cfg(all(test, feature = "http"))]
mod tests {
    use modelctx_http::client::{Inbound, TransportError as HttpError};
    use modelctx_types::RequestId;

    use super::{LinkEvent, http_event};

    fn undelivered(answer: Option<RequestId>) -> LinkEvent {
        http_event(Some(Inbound::Undelivered {
            what: "x".into(),
            answer,
            error: HttpError::Connection("closed".into()),
        }))
    }

    /// The server waits for an answer of ours: its loss is a warning, not a debug note.
    #[test]
    fn an_undelivered_answer_is_lost_an_undelivered_notification_a_note() {
        match undelivered(Some(RequestId::from(2))) {
            LinkEvent::AnswerLost(what) => {
                assert_eq!(what, "x: connection failed: closed");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(undelivered(None), LinkEvent::Note(_)));
    }
}
