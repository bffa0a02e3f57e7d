//! Serving a [`Server`] on a transport: any that yields and accepts messages (channels), an
//! in-memory pair for tests, stdio, and line-framed byte streams.

use modelctx_types::{Incoming, Message};
use tokio::sync::mpsc;

use crate::driver::{self, Frame, Input};
use crate::server::Server;

/// The size of the queues between a transport and its connection's driver.
const QUEUE: usize = 256;

/// The client end of an in-memory connection to a server (see [`Server::in_memory`]).
#[derive(Debug)]
#[non_exhaustive]
pub struct InMemory {
    /// Messages to the server.
    pub to_server: mpsc::Sender<Incoming>,
    /// What the server sends.
    pub from_server: mpsc::Receiver<Frame>,
}

impl InMemory {
    /// Sends one message to the server.
    pub async fn send(&self, message: Message) -> bool {
        self.to_server.send(Incoming::Single(message)).await.is_ok()
    }

    /// The next message from the server (a batch reply comes whole).
    pub async fn recv(&mut self) -> Option<Frame> {
        self.from_server.recv().await
    }
}

impl Server {
    /// Serves one connection whose transport yields messages on `input` and takes what the
    /// server sends on `output`; returns when `input` closes (or `output` is dropped) and the
    /// connection's handlers are cancelled. A closed `input` ends the connection, as a closed
    /// stdin does.
    pub async fn serve_channels(
        &self,
        mut input: mpsc::Receiver<Incoming>,
        output: mpsc::Sender<Frame>,
    ) {
        let (tx, rx) = mpsc::channel(QUEUE);
        let forward = tokio::spawn(async move {
            while let Some(incoming) = input.recv().await {
                if tx.send(Input::Incoming(incoming, None)).await.is_err() {
                    return;
                }
            }
        });
        driver::run_channel(self.shared.clone(), rx, output).await;
        forward.abort();
    }

    /// A connection to this server in the same process, served on a new task: for tests and for
    /// hosts that embed a server.
    ///
    /// The client end takes [`Message`]s and gives [`Frame`]s; `modelctx-client`'s
    /// `connect_channels` takes both ends as they are. Here, a 2026-07-28 request, which needs no
    /// handshake (its version rides in `_meta`):
    ///
    /// ```
    /// use modelctx_server::{Frame, NoArgs, Server, Tool};
    /// use modelctx_types::{Incoming, Message, consts, decode_str, meta_keys};
    ///
    /// async fn hello(_: NoArgs) -> &'static str {
    ///     "hello"
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let server = Server::builder("s", "1.0.0").tool(Tool::new("hello", hello)).build();
    /// let mut memory = server.in_memory();
    /// let call = serde_json::json!({
    ///     "jsonrpc": "2.0",
    ///     "id": 1,
    ///     "method": consts::ToolsCall::VALUE,
    ///     "params": {"name": "hello", "_meta": {
    ///         meta_keys::PROTOCOL_VERSION: "2026-07-28",
    ///         meta_keys::CLIENT_CAPABILITIES: {},
    ///     }},
    /// });
    /// let Incoming::Single(call) = decode_str(&call.to_string())? else {
    ///     unreachable!("one message")
    /// };
    /// assert!(memory.send(call).await);
    /// let Some(Frame::Single(Message::Response(answer))) = memory.recv().await else {
    ///     panic!("the answer")
    /// };
    /// let result: serde_json::Value = serde_json::from_str(answer.result.get())?;
    /// assert_eq!(result["content"][0]["text"], "hello");
    /// # Ok(()) }
    /// ```
    pub fn in_memory(&self) -> InMemory {
        let (to_server, input) = mpsc::channel(QUEUE);
        let (output, from_server) = mpsc::channel(QUEUE);
        let server = self.clone();
        tokio::spawn(async move { server.serve_channels(input, output).await });
        InMemory {
            to_server,
            from_server,
        }
    }
}

#[cfg(feature = "stdio")]
mod stdio {
    use std::io;

    use std::future::Future;
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};

    use modelctx_stdio::{LineReader, LineWriter};
    use tokio::io::{AsyncRead, AsyncWrite};
    use tokio::sync::mpsc;

    use super::QUEUE;
    use crate::driver::{self, Frame, Input, Sink};
    use crate::server::Server;

    impl Server {
        /// Serves one connection on stdin and stdout (newline-delimited JSON-RPC) until stdin
        /// closes. Nothing else may write to stdout: log to stderr.
        pub async fn serve_stdio(&self) -> io::Result<()> {
            let (reader, writer) = modelctx_stdio::stdio()?;
            self.serve_lines(reader, writer).await
        }

        /// Serves one connection on a line-framed byte stream (a pipe, a socket, an in-process
        /// duplex) until the reader ends.
        pub async fn serve_lines<R, W>(
            &self,
            mut reader: LineReader<R>,
            writer: LineWriter<W>,
        ) -> io::Result<()>
        where
            R: AsyncRead + Unpin + Send + 'static,
            W: AsyncWrite + Unpin + Send + 'static,
        {
            let (input_tx, input) = mpsc::channel(QUEUE);
            let read = tokio::spawn(async move {
                loop {
                    let line = match reader.next_line().await {
                        Ok(Some(line)) => line,
                        Ok(None) => return Ok(()),
                        Err(e) if modelctx_stdio::is_closed(&e) => return Ok(()),
                        Err(e) => return Err(e),
                    };
                    let input = match line {
                        Ok(line) => match modelctx_types::decode(line.as_bytes()) {
                            Ok(incoming) => Input::Incoming(incoming, None),
                            Err(_) => Input::Unreadable(line.as_bytes().to_vec()),
                        },
                        // An over-long or non-UTF-8 line: its error answer, and on to the next.
                        Err(error) => Input::Reply(error.to_error_response().into()),
                    };
                    if input_tx.send(input).await.is_err() {
                        return Ok(());
                    }
                }
            });
            // The driver writes the stream itself (no writer task between them), on a task of
            // its own: the future this returns is often `block_on`'s, and a driver on that
            // thread would wake a worker thread for every message it hands the reader or a
            // handler (and be woken by them).
            let failed = Arc::new(Mutex::new(None));
            let sink = Lines {
                writer,
                failed: failed.clone(),
            };
            driver::run_on_task(driver::run_lines(
                self.shared.clone(),
                input,
                Box::new(sink),
            ))
            .await;
            // The connection is over; a reader still waiting for input is not needed.
            read.abort();
            let read = read.await.unwrap_or(Ok(()));
            let written = failed.lock().unwrap_or_else(|e| e.into_inner()).take();
            match (read, written) {
                (Err(e), _) | (_, Some(e)) if !modelctx_stdio::is_closed(&e) => Err(e),
                _ => Ok(()),
            }
        }
    }

    /// The driver's end of a line stream: the first write error is kept for `serve_lines`.
    struct Lines<W> {
        writer: LineWriter<W>,
        failed: Arc<Mutex<Option<io::Error>>>,
    }

    impl<W> Lines<W> {
        fn record(&self, result: io::Result<()>) -> io::Result<()> {
            if let Err(e) = &result {
                let mut failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
                if failed.is_none() {
                    *failed = Some(io::Error::new(e.kind(), e.to_string()));
                }
            }
            result
        }
    }

    impl<W: AsyncWrite + Unpin + Send> Sink for Lines<W> {
        fn feed(&mut self, frame: &Frame) -> io::Result<()> {
            let fed = match frame {
                Frame::Single(message) => self.writer.feed(message),
                Frame::Batch(messages) => self.writer.feed(messages),
            };
            self.record(fed)
        }

        fn buffered(&self) -> usize {
            self.writer.buffered()
        }

        fn flush(&mut self) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send + '_>> {
            Box::pin(async move {
                let flushed = self.writer.flush().await;
                self.record(flushed)
            })
        }

        fn shutdown(&mut self) -> Pin<Box<dyn Future<Output = io::Result<()>> + Send + '_>> {
            Box::pin(async move {
                let shut = self.writer.shutdown().await;
                self.record(shut)
            })
        }
    }
}
