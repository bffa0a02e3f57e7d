//! Serving a [`Server`] on a transport: any that yields and accepts messages (channels), an
//! in-memory pair for tests, stdio, and line-framed byte streams.

use modelctx_types::{Incoming, Message};
use tokio::sync::mpsc;

use tokio_util::sync::CancellationToken;

use crate::run::{Conn, Frame, Input, Lifetime, Origin, driver};
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
                if tx.send(Input::Incoming(incoming)).await.is_err() {
                    return;
                }
            }
        });
        let conn = Conn::new(self.shared.clone());
        let changes = Some(self.shared.changes.subscribe());
        let lifetime = Lifetime::Connection {
            ended: CancellationToken::new(),
        };
        driver::run(conn, rx, output, Origin::default(), lifetime, changes).await;
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

    use std::sync::{Arc, Mutex};

    use modelctx_session::Transmit;
    use modelctx_stdio::{Line, LineError, LineReader, LineWriter};
    use tokio::io::{AsyncRead, AsyncWrite};
    use tokio_util::sync::CancellationToken;

    use crate::run::driver::Source;
    use crate::run::{Conn, Frame, Input, Lifetime, Origin, Output, driver};
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
            reader: LineReader<R>,
            writer: LineWriter<W>,
        ) -> io::Result<()>
        where
            R: AsyncRead + Unpin + Send + 'static,
            W: AsyncWrite + Unpin + Send + 'static,
        {
            let read_failed = Arc::new(Mutex::new(None));
            let input = LineInput {
                reader,
                peeked: None,
                failed: read_failed.clone(),
            };
            // The driver reads and writes the stream itself (no reader or writer task between
            // them, no hand-off per message), on a task of its own: the future this returns is
            // often `block_on`'s, and a driver on that thread would wake a worker thread for
            // every message it hands a handler (and be woken by them).
            let failed = Arc::new(Mutex::new(None));
            let sink = Lines {
                writer,
                failed: failed.clone(),
            };
            let conn = Conn::new(self.shared.clone());
            let changes = Some(self.shared.changes.subscribe());
            let lifetime = Lifetime::Connection {
                ended: CancellationToken::new(),
            };
            let origin = Origin::default();
            driver::run_on_task(driver::run(conn, input, sink, origin, lifetime, changes)).await;
            let read = read_failed.lock().unwrap_or_else(|e| e.into_inner()).take();
            let written = failed.lock().unwrap_or_else(|e| e.into_inner()).take();
            match (read, written) {
                (Some(e), _) | (_, Some(e)) if !modelctx_stdio::is_closed(&e) => Err(e),
                _ => Ok(()),
            }
        }
    }

    /// The driver's input from a line stream: each line is decoded on the driver's task as it
    /// is read (one parse into envelopes whose params stay raw), with no reader task and no
    /// channel between. The read error that ends it is kept for `serve_lines`.
    struct LineInput<R> {
        reader: LineReader<R>,
        /// A line taken from the read buffer by `has_ready`, handed out next.
        peeked: Option<Input>,
        failed: Arc<Mutex<Option<io::Error>>>,
    }

    /// What the driver makes of one line: a message or batch; bytes that are not JSON-RPC
    /// (the session answers them as its rules say); or, for an over-long or non-UTF-8 line,
    /// its error answer as it is, and on to the next line.
    fn input_of(line: Result<Line, LineError>) -> Input {
        match line {
            Ok(line) => match modelctx_types::decode(line.as_bytes()) {
                Ok(incoming) => Input::Incoming(incoming),
                Err(_) => Input::Unreadable(line.as_bytes().to_vec()),
            },
            Err(error) => Input::Reply(error.to_error_response().into()),
        }
    }

    impl<R: AsyncRead + Unpin + Send> Source for LineInput<R> {
        async fn next(&mut self) -> Option<Input> {
            if let Some(input) = self.peeked.take() {
                return Some(input);
            }
            // Cancel-safe: `next_line` loses no line when dropped.
            match self.reader.next_line().await {
                Ok(Some(line)) => Some(input_of(line)),
                Ok(None) => None,
                Err(e) => {
                    *self.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
                    None
                }
            }
        }

        fn has_ready(&mut self) -> bool {
            if self.peeked.is_none() {
                self.peeked = self.reader.next_buffered().map(input_of);
            }
            self.peeked.is_some()
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

    /// Messages are encoded into the writer's buffer as they come (no I/O) and written when
    /// the driver flushes: a call crosses no writer task, and many messages go out with one
    /// system call under load.
    impl<W: AsyncWrite + Unpin + Send> Output for Lines<W> {
        async fn write(&mut self, transmit: Transmit) -> bool {
            let fed = match Frame::of(transmit) {
                Some(Frame::Single(message)) => self.writer.feed(&message),
                Some(Frame::Batch(messages)) => self.writer.feed(&messages),
                None => return true,
            };
            self.record(fed).is_ok()
        }

        fn buffered(&self) -> usize {
            self.writer.buffered()
        }

        async fn flush(&mut self) -> io::Result<()> {
            let flushed = self.writer.flush().await;
            self.record(flushed)
        }

        async fn shutdown(&mut self) {
            let shut = self.writer.shutdown().await;
            let _ = self.record(shut);
        }
    }

    #[cfg(test)]
    mod tests {
        use modelctx_stdio::{LineCodec, LineReader, LineWriter};
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

        use crate::{NoArgs, Server, Tool};

        /// The driver reads the line stream itself: a line connection runs on the driver's
        /// task alone (next to its caller's), with no reader task handing it lines.
        #[tokio::test(flavor = "current_thread")]
        async fn the_driver_reads_the_lines_itself() {
            let hi = |_: NoArgs| std::future::ready("hi");
            let server = Server::builder("s", "1").tool(Tool::new("hi", hi)).build();
            let (client, server_end) = tokio::io::duplex(64 * 1024);
            let (server_read, server_write) = tokio::io::split(server_end);
            let serving = tokio::spawn(async move {
                let reader = LineReader::new(server_read, LineCodec::new());
                server
                    .serve_lines(reader, LineWriter::new(server_write))
                    .await
            });
            let (client_read, mut client_write) = tokio::io::split(client);
            let mut lines = BufReader::new(client_read).lines();
            client_write
                .write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n")
                .await
                .unwrap();
            let line = lines.next_line().await.unwrap().unwrap();
            assert!(line.contains(r#""id":1"#), "{line}");
            // `serving` and the driver's task.
            let tasks = tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks();
            assert_eq!(tasks, 2);
            client_write.shutdown().await.unwrap();
            serving.await.unwrap().unwrap();
        }
    }
}
