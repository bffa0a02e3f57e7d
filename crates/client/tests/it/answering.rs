//! The time a handler spends answering the server's request does not count against the timeout
//! of the calls in flight (legacy era: the server's requests come during a call); in the modern
//! era each round of a call is a request with a timeout of its own, and the handlers run between
//! rounds. On a paused clock (the handler's 5 s cost no real time), except over real sockets.

use crate::common;

use std::time::Duration;

use common::{Era, Fake, builder, complete, connect, full_capabilities, input_required, text};
use modelctx_client::{ClientBuilder, Elicitation, Elicited, Error, InputError, ProtocolVersion};
use modelctx_stdio::{LineCodec, LineReader, LineWriter};
use modelctx_types::Message;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

/// The timeout of every call.
const TIMEOUT: Duration = Duration::from_secs(1);
/// How long the user takes to fill in the form.
const ANSWERING: Duration = Duration::from_secs(5);
/// Longer than any wait of these tests, on the paused clock.
const LONG: Duration = Duration::from_secs(600);

/// A client whose calls time out after [`TIMEOUT`] and whose elicitation handler (a user at a
/// terminal) takes [`ANSWERING`] to answer.
fn slow_user() -> ClientBuilder {
    slow_user_with(TIMEOUT, ANSWERING)
}

/// A client whose calls time out after `timeout` and whose elicitation handler takes
/// `answering` to answer.
fn slow_user_with(timeout: Duration, answering: Duration) -> ClientBuilder {
    builder()
        .request_timeout(Some(timeout))
        .on_elicitation(move |elicitation| async move {
            let Elicitation::Form { message, .. } = elicitation else {
                return Err(InputError::new("only forms"));
            };
            tokio::time::sleep(answering).await;
            let content = json!({"name": format!("answer to {message}")});
            Ok(Elicited::accept(content.as_object().cloned().unwrap()))
        })
}

fn form(message: &str) -> Value {
    json!({
        "mode": "form",
        "message": message,
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    })
}

fn tool_text(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// The client's answer to the server's request `id`, waiting as long as it takes.
async fn answer_to(fake: &mut Fake, id: &Value) -> Value {
    let found = fake
        .find(LONG, |m| match m {
            Message::Response(r) => common::id_json(&r.id) == *id,
            _ => false,
        })
        .await
        .expect("the handler's answer");
    let Message::Response(response) = found else {
        unreachable!()
    };
    serde_json::from_str(response.result.get()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn legacy_a_call_does_not_time_out_while_the_user_answers() {
    let client_builder = slow_user().protocol_version(ProtocolVersion::V2025_11_25);
    let (client, mut fake) = connect(Era::Legacy, client_builder, full_capabilities()).await;
    let started = Instant::now();
    // Two calls in flight: the server's request may belong to either (nothing on the wire says
    // which), so both wait for the user.
    let ask = client.call_tool("ask", ());
    let other = client.call_tool("other", ());
    let serve = async {
        let first = fake.expect_request("tools/call").await;
        let second = fake.expect_request("tools/call").await;
        fake.request(json!("e1"), "elicitation/create", form("Who?"))
            .await;
        let answer = answer_to(&mut fake, &json!("e1")).await;
        assert_eq!(answer["content"]["name"], json!("answer to Who?"));
        let answered = Instant::now();
        // Within the timeout after the answer: the time the user took did not count.
        tokio::time::sleep(TIMEOUT / 2).await;
        fake.reply(&first.id, tool_text("asked")).await;
        fake.reply(&second.id, tool_text("other")).await;
        answered
    };
    let (ask, other, answered) = tokio::join!(ask, other, serve);
    assert_eq!(text(&ask.unwrap()), "asked");
    assert_eq!(text(&other.unwrap()), "other");
    assert!(answered - started >= ANSWERING, "{:?}", answered - started);
    let sizes = client.table_sizes().await.unwrap();
    assert_eq!((sizes.calls, sizes.inputs, sizes.paused_calls), (0, 0, 0));

    // The timer runs again once the answer is sent: a server that stays silent after it, and
    // one that stays silent from the start, still time out.
    let call = client.call_tool("ask", ());
    let serve = async {
        let request = fake.expect_request("tools/call").await;
        fake.request(json!("e2"), "elicitation/create", form("Again?"))
            .await;
        answer_to(&mut fake, &json!("e2")).await;
        let answered = Instant::now();
        fake.expect_cancelled(&request.id).await;
        answered
    };
    let (result, answered) = tokio::join!(call, serve);
    assert!(matches!(result, Err(Error::Timeout(TIMEOUT))), "{result:?}");
    assert!(Instant::now() - answered <= TIMEOUT + Duration::from_millis(10));

    let started = Instant::now();
    let (result, request) = tokio::join!(
        client.call_tool("silent", ()),
        fake.expect_request("tools/call")
    );
    assert!(matches!(result, Err(Error::Timeout(TIMEOUT))), "{result:?}");
    assert_eq!(started.elapsed(), TIMEOUT);
    fake.expect_cancelled(&request.id).await;
    let sizes = client.table_sizes().await.unwrap();
    assert_eq!((sizes.calls, sizes.inputs, sizes.paused_calls), (0, 0, 0));
}

/// A call started while the handler runs is not part of what the user answers: its timeout runs.
#[tokio::test(start_paused = true)]
async fn legacy_a_call_started_during_the_answer_keeps_its_timeout() {
    let client_builder = slow_user().protocol_version(ProtocolVersion::V2025_11_25);
    let (client, mut fake) = connect(Era::Legacy, client_builder, full_capabilities()).await;
    let (asking, request) = tokio::join!(
        async {
            let mut call = Box::pin(client.call_tool("ask", ()));
            // Let the call go out; the server asks while it waits.
            tokio::select! {
                _ = &mut call => panic!("answered early"),
                () = tokio::time::sleep(TIMEOUT / 4) => {}
            }
            let started = Instant::now();
            let late = client.call_tool("late", ()).await;
            (call, late, started.elapsed())
        },
        async {
            let first = fake.expect_request("tools/call").await;
            fake.request(json!("e1"), "elicitation/create", form("Who?"))
                .await;
            first
        }
    );
    let (call, late, waited) = asking;
    assert!(matches!(late, Err(Error::Timeout(TIMEOUT))), "{late:?}");
    assert_eq!(waited, TIMEOUT);
    answer_to(&mut fake, &json!("e1")).await;
    fake.reply(&request.id, tool_text("asked")).await;
    assert_eq!(text(&call.await.unwrap()), "asked");
}

/// Modern: the server asks with an `input_required` result; the user's time falls between two
/// requests, each with its own timeout.
#[tokio::test(start_paused = true)]
async fn modern_each_round_has_its_own_timeout() {
    let (client, mut fake) = connect(Era::Modern, slow_user(), full_capabilities()).await;
    let started = Instant::now();
    let serve = async {
        let first = fake.expect_request("tools/call").await;
        let asking = json!({"e1": {"method": "elicitation/create", "params": form("Who?")}});
        fake.reply(&first.id, input_required(Some(asking), "state"))
            .await;
        let retry = fake
            .find(
                LONG,
                |m| matches!(m, Message::Request(r) if r.method == "tools/call"),
            )
            .await
            .expect("the call retried");
        let Message::Request(retry) = retry else {
            unreachable!()
        };
        fake.reply(&retry.id, complete(tool_text("asked"))).await;
        retry
    };
    let (result, retry) = tokio::join!(client.call_tool("ask", ()), serve);
    assert_eq!(text(&result.unwrap()), "asked");
    assert!(started.elapsed() >= ANSWERING);
    assert_eq!(
        common::params(&retry)["inputResponses"]["e1"]["content"]["name"],
        json!("answer to Who?")
    );

    // A round the server does not answer times out after the timeout of one round.
    let started = Instant::now();
    let (result, request) = tokio::join!(
        client.call_tool("silent", ()),
        fake.expect_request("tools/call")
    );
    assert!(matches!(result, Err(Error::Timeout(TIMEOUT))), "{result:?}");
    assert_eq!(started.elapsed(), TIMEOUT);
    let _ = request;
}

/// A legacy server on a line-framed byte stream (what a stdio server is): `ask` asks the user
/// and answers with what the user said; `silent` is never answered.
async fn line_server(stream: tokio::io::DuplexStream) -> std::io::Result<()> {
    let (read, mut write) = tokio::io::split(stream);
    let mut lines = BufReader::new(read).lines();
    let mut asking: Option<Value> = None;
    while let Some(line) = lines.next_line().await? {
        let message: Value = serde_json::from_str(&line).expect("JSON from the client");
        let id = message["id"].clone();
        let out = match message["method"].as_str() {
            Some("initialize") => json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "lines", "version": "1"},
            }}),
            Some("tools/call") if message["params"]["name"] == "ask" => {
                asking = Some(id);
                json!({"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create",
                    "params": form("Who?")})
            }
            Some(_) => continue,
            None if id == "e1" => {
                let name = message["result"]["content"]["name"].clone();
                let call = asking.take().expect("a call waits");
                json!({"jsonrpc": "2.0", "id": call, "result": tool_text(name.as_str().unwrap())})
            }
            None => continue,
        };
        write.write_all(format!("{out}\n").as_bytes()).await?;
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn over_a_line_stream_a_call_does_not_time_out_while_the_user_answers() {
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(line_server(server_end));
    let (read, write) = tokio::io::split(client_end);
    let client = slow_user()
        .protocol_version(ProtocolVersion::V2025_11_25)
        .connect_lines(
            LineReader::new(read, LineCodec::new()),
            LineWriter::new(write),
        )
        .await
        .expect("connected");
    let started = Instant::now();
    let asked = client.call_tool("ask", ()).await;
    assert_eq!(text(&asked.unwrap()), "answer to Who?");
    assert!(started.elapsed() >= ANSWERING);

    let started = Instant::now();
    let silent = client.call_tool("silent", ()).await;
    assert!(matches!(silent, Err(Error::Timeout(TIMEOUT))), "{silent:?}");
    assert_eq!(started.elapsed(), TIMEOUT);
    client.close().await;
    server.await.unwrap().unwrap();
}

/// A legacy Streamable HTTP server (2025-11-25) in a few lines of HTTP/1.1: `ask` answers on
/// an event stream that first carries the server's question, then, once the client's answer
/// came in a POST of its own, the call's result with what the user said; `silent` opens its
/// event stream and sends nothing. No standalone stream (a GET gets 405).
mod http {
    use std::sync::{Arc, Mutex};

    use serde_json::{Value, json};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio::sync::oneshot;

    type Answer = Arc<Mutex<Option<oneshot::Sender<Value>>>>;

    /// Serves on 127.0.0.1; the endpoint's URL.
    pub(super) async fn serve() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let answer: Answer = Arc::default();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(connection(stream, answer.clone()));
            }
        });
        url
    }

    /// One request (headers and a `Content-Length` body), or `None` when the client closed.
    async fn read_request(
        stream: &mut TcpStream,
        buffer: &mut Vec<u8>,
    ) -> Option<(String, Vec<u8>)> {
        let end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0; 4096];
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buffer.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buffer[..end]).into_owned();
        let length = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        while buffer.len() < end + length {
            let mut chunk = [0; 4096];
            let n = stream.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buffer.extend_from_slice(&chunk[..n]);
        }
        let body = buffer[end..end + length].to_vec();
        buffer.drain(..end + length);
        Some((head, body))
    }

    async fn respond(stream: &mut TcpStream, status: &str, headers: &str, body: &str) {
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\n{headers}\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(response.as_bytes()).await;
    }

    fn event(message: &Value) -> String {
        format!("event: message\ndata: {message}\n\n")
    }

    async fn connection(mut stream: TcpStream, answer: Answer) {
        // Each write goes at once (no Nagle delay).
        stream.set_nodelay(true).unwrap();
        let mut buffer = Vec::new();
        while let Some((head, body)) = read_request(&mut stream, &mut buffer).await {
            if !head.starts_with("POST ") {
                respond(&mut stream, "405 Method Not Allowed", "", "").await;
                continue;
            }
            let message: Value = serde_json::from_slice(&body).expect("JSON from the client");
            let id = message["id"].clone();
            match message["method"].as_str() {
                Some("initialize") => {
                    let result = json!({"jsonrpc": "2.0", "id": id, "result": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "http", "version": "1"},
                    }});
                    let headers = "content-type: application/json\r\nmcp-session-id: s1\r\n";
                    respond(&mut stream, "200 OK", headers, &result.to_string()).await;
                }
                Some("tools/call") => {
                    // An event stream, read to its end (the connection's).
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                                cache-control: no-cache\r\nconnection: close\r\n\r\n";
                    let _ = stream.write_all(head.as_bytes()).await;
                    if message["params"]["name"] != "ask" {
                        // Silent until the client goes away.
                        let _ = stream.read(&mut [0; 64]).await;
                        return;
                    }
                    let (tx, rx) = oneshot::channel();
                    *answer.lock().unwrap() = Some(tx);
                    let question = json!({"jsonrpc": "2.0", "id": "e1",
                        "method": "elicitation/create", "params": super::form("Who?")});
                    let _ = stream.write_all(event(&question).as_bytes()).await;
                    let Ok(content) = rx.await else { return };
                    let name = content["name"].as_str().unwrap_or_default().to_owned();
                    let result =
                        json!({"jsonrpc": "2.0", "id": id, "result": super::tool_text(&name)});
                    let _ = stream.write_all(event(&result).as_bytes()).await;
                    return;
                }
                None if id == "e1" => {
                    let content = message["result"]["content"].clone();
                    if let Some(tx) = answer.lock().unwrap().take() {
                        let _ = tx.send(content);
                    }
                    respond(&mut stream, "202 Accepted", "", "").await;
                }
                // Notifications (initialized, cancelled) and anything else.
                _ => respond(&mut stream, "202 Accepted", "", "").await,
            }
        }
    }
}

/// Over real sockets the clock runs for real: a paused clock jumps ahead whenever the runtime
/// waits on I/O with nothing else to do (a loopback packet delayed under load would then look
/// like a silent server), so this test waits real seconds, with margins a loaded machine keeps.
#[tokio::test]
async fn over_legacy_http_a_call_does_not_time_out_while_the_user_answers() {
    const TIMEOUT: Duration = Duration::from_secs(2);
    const ANSWERING: Duration = Duration::from_secs(5);
    let url = http::serve().await;
    let client = slow_user_with(TIMEOUT, ANSWERING)
        .protocol_version(ProtocolVersion::V2025_11_25)
        .connect_http(&url)
        .await
        .expect("connected");
    let started = Instant::now();
    let asked = client.call_tool("ask", ()).await;
    assert_eq!(text(&asked.unwrap()), "answer to Who?");
    assert!(started.elapsed() >= ANSWERING);

    let started = Instant::now();
    let silent = client.call_tool("silent", ()).await;
    assert!(matches!(silent, Err(Error::Timeout(_))), "{silent:?}");
    assert!(started.elapsed() >= TIMEOUT);

    // The question came on the response stream of `ask`: it belongs to `ask` alone, and a call
    // in flight beside it keeps its timeout (it ends while the user is still answering).
    let started = Instant::now();
    let silent = async {
        let result = client.call_tool("silent", ()).await;
        (result, started.elapsed())
    };
    let (asked, (silent, waited)) = tokio::join!(client.call_tool("ask", ()), silent);
    assert_eq!(text(&asked.unwrap()), "answer to Who?");
    assert!(matches!(silent, Err(Error::Timeout(_))), "{silent:?}");
    assert!(waited >= TIMEOUT && waited < ANSWERING, "{waited:?}");
    assert!(started.elapsed() >= ANSWERING);

    let sizes = client.table_sizes().await.unwrap();
    assert_eq!((sizes.calls, sizes.inputs, sizes.paused_calls), (0, 0, 0));
    client.close().await;
}
