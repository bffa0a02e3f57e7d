//! A raw HTTP/1.1 client for the fault injectors: every step bounded in time and size, every
//! failure an error (never a panic), so that a fault can be aimed exactly (a stream cut after
//! the third event, a body that is not JSON, a `Content-Length` that lies).

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one read or write may take before the exchange is given up.
pub(crate) const STEP: Duration = Duration::from_secs(10);
/// The largest response head or body the injectors read.
const MAX_READ: usize = 1024 * 1024;

/// The legacy version the raw sessions speak.
pub(crate) const LEGACY: &str = "2025-11-25";
/// The modern version.
pub(crate) const MODERN: &str = "2026-07-28";

pub(crate) type Result<T> = std::result::Result<T, String>;

/// `future`, or an error naming `what` after `limit`.
pub(crate) async fn within<T>(
    what: &str,
    limit: Duration,
    future: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| Err(format!("{what}: nothing within {limit:?}")))
}

/// A response head, with the connection to read its body from.
pub(crate) struct Response {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
    stream: TcpStream,
    /// Raw bytes read past the head, not yet decoded.
    buf: Vec<u8>,
    chunked: bool,
    remaining: Option<usize>,
    /// Decoded body bytes not yet consumed.
    body: Vec<u8>,
    ended: bool,
    read_total: usize,
}

/// One server-sent event.
#[derive(Debug, Default, Clone)]
pub(crate) struct Event {
    pub(crate) id: Option<String>,
    pub(crate) data: String,
}

impl Response {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Decodes more body bytes (reading when needed, at most `chunk` bytes a read, after a
    /// `pause`); false at the end.
    async fn fill(&mut self, chunk: usize, pause: Duration) -> Result<bool> {
        if self.ended {
            return Ok(false);
        }
        loop {
            if self.chunked {
                if let Some(pos) = find(&self.buf, b"\r\n") {
                    let line = String::from_utf8_lossy(&self.buf[..pos]).to_string();
                    let size =
                        usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                            .map_err(|_| format!("a bad chunk size line: {line:?}"))?;
                    if size == 0 {
                        self.ended = true;
                        return Ok(false);
                    }
                    if self.buf.len() >= pos + 2 + size + 2 {
                        self.body
                            .extend_from_slice(&self.buf[pos + 2..pos + 2 + size]);
                        self.buf.drain(..pos + 2 + size + 2);
                        return Ok(true);
                    }
                }
            } else if let Some(remaining) = self.remaining {
                if remaining == 0 {
                    self.ended = true;
                    return Ok(false);
                }
                if !self.buf.is_empty() {
                    let take = remaining.min(self.buf.len());
                    self.body.extend(self.buf.drain(..take));
                    self.remaining = Some(remaining - take);
                    return Ok(true);
                }
            } else if !self.buf.is_empty() {
                self.body.append(&mut self.buf);
                return Ok(true);
            }
            if self.read_total > MAX_READ {
                return Err(format!("the response is longer than {MAX_READ} bytes"));
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            let mut bytes = vec![0u8; chunk.clamp(1, 16 * 1024)];
            let n = tokio::time::timeout(STEP, self.stream.read(&mut bytes))
                .await
                .map_err(|_| format!("the body stalled for {STEP:?}"))?
                .map_err(|e| format!("reading the body: {e}"))?;
            if n == 0 {
                self.ended = true;
                if self.chunked || self.remaining.is_some_and(|r| r > 0) {
                    return Err("the connection ended inside the body".into());
                }
                return Ok(false);
            }
            self.read_total += n;
            self.buf.extend_from_slice(&bytes[..n]);
        }
    }

    /// The whole body.
    pub(crate) async fn body(mut self) -> Result<Vec<u8>> {
        while self.fill(16 * 1024, Duration::ZERO).await? {}
        Ok(self.body)
    }

    /// Reads the body `chunk` bytes at a time with a `pause` before each read, until it ends
    /// (true) or `limit` has passed (false): a slow reader.
    pub(crate) async fn read_slowly(
        &mut self,
        chunk: usize,
        pause: Duration,
        limit: Duration,
    ) -> Result<bool> {
        let started = tokio::time::Instant::now();
        while started.elapsed() < limit {
            if !self.fill(chunk, pause).await? {
                return Ok(true);
            }
            self.body.clear();
        }
        Ok(false)
    }

    /// The next SSE event with data or an id (comments skipped); `None` at the end.
    pub(crate) async fn next_event(&mut self) -> Result<Option<Event>> {
        self.next_event_reading(16 * 1024, Duration::ZERO).await
    }

    /// [`next_event`](Self::next_event) reading at most `chunk` bytes at a time, with a
    /// `pause` before each read: a slow reader.
    pub(crate) async fn next_event_reading(
        &mut self,
        chunk: usize,
        pause: Duration,
    ) -> Result<Option<Event>> {
        loop {
            if let Some((pos, len)) = event_end(&self.body) {
                let block: Vec<u8> = self.body.drain(..pos + len).collect();
                if let Some(event) = parse_event(&String::from_utf8_lossy(&block)) {
                    return Ok(Some(event));
                }
                continue;
            }
            if !self.fill(chunk, pause).await? {
                return Ok(None);
            }
        }
    }
}

/// Where the first event of `body` ends: the position of its blank line and that line's length.
fn event_end(body: &[u8]) -> Option<(usize, usize)> {
    let lf = find(body, b"\n\n").map(|p| (p, 2));
    let crlf = find(body, b"\r\n\r\n").map(|p| (p, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

/// One SSE event block; `None` for a block of comments only.
pub(crate) fn parse_event(block: &str) -> Option<Event> {
    let mut event = Event::default();
    let mut any = false;
    for line in block.lines() {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "id" => {
                event.id = Some(value.to_owned());
                any = true;
            }
            "data" => {
                if !event.data.is_empty() {
                    event.data.push('\n');
                }
                event.data.push_str(value);
                any = true;
            }
            _ => {}
        }
    }
    any.then_some(event)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Opens a connection to `addr`.
pub(crate) async fn connect(addr: SocketAddr) -> Result<TcpStream> {
    tokio::time::timeout(STEP, TcpStream::connect(addr))
        .await
        .map_err(|_| "connect timed out".to_owned())?
        .map_err(|e| format!("connect: {e}"))
}

/// Sends one request on a new connection: `Host` and `Content-Length` (of `body`, unless the
/// headers give one) are added; then reads the response head.
pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response> {
    let mut stream = connect(addr).await?;
    let mut head = format!("{method} /mcp HTTP/1.1\r\nHost: {addr}\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-length"))
    {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("Connection: close\r\n\r\n");
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await
    };
    tokio::time::timeout(STEP, write)
        .await
        .map_err(|_| "writing the request timed out".to_owned())?
        .map_err(|e| format!("writing the request: {e}"))?;
    read_head(stream).await
}

async fn read_head(mut stream: TcpStream) -> Result<Response> {
    let mut buf = Vec::new();
    let end = loop {
        if let Some(pos) = find(&buf, b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > 64 * 1024 {
            return Err("a response head longer than 64 KiB".into());
        }
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(STEP, stream.read(&mut chunk))
            .await
            .map_err(|_| format!("no response head within {STEP:?}"))?
            .map_err(|e| format!("reading the head: {e}"))?;
        if n == 0 {
            return Err("the connection ended before a response head".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("a bad status line in {head:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let get = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let chunked = get("transfer-encoding").is_some_and(|v| v.contains("chunked"));
    let remaining = get("content-length").and_then(|v| v.parse().ok());
    Ok(Response {
        status,
        headers,
        stream,
        buf: buf[end + 4..].to_vec(),
        chunked,
        remaining,
        body: Vec::new(),
        ended: false,
        read_total: 0,
    })
}

/// The headers of a legacy POST, in `session` once it has one.
pub(crate) fn legacy_headers(session: Option<&str>) -> Vec<(&str, &str)> {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
        headers.push(("MCP-Protocol-Version", LEGACY));
    }
    headers
}

/// The `initialize` request of a raw legacy client.
pub(crate) fn initialize(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
        "protocolVersion": LEGACY, "capabilities": {},
        "clientInfo": {"name": "soak-raw", "version": "1"}}})
}

/// Opens a legacy session (`initialize`, then `notifications/initialized`); its id.
pub(crate) async fn open_session(addr: SocketAddr) -> Result<String> {
    let response = request(
        addr,
        "POST",
        &legacy_headers(None),
        initialize(0).to_string().as_bytes(),
    )
    .await?;
    if response.status != 200 {
        return Err(format!("initialize answered {}", response.status));
    }
    let session = response
        .header("mcp-session-id")
        .ok_or("initialize answered without a session id")?
        .to_owned();
    response.body().await?;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let response = request(
        addr,
        "POST",
        &legacy_headers(Some(&session)),
        initialized.to_string().as_bytes(),
    )
    .await?;
    if response.status != 202 {
        return Err(format!(
            "notifications/initialized answered {}",
            response.status
        ));
    }
    Ok(session)
}

/// Ends a legacy session with DELETE.
pub(crate) async fn end_session(addr: SocketAddr, session: &str) -> Result<()> {
    let headers = [
        ("Mcp-Session-Id", session),
        ("MCP-Protocol-Version", LEGACY),
    ];
    let response = request(addr, "DELETE", &headers, b"").await?;
    match response.status {
        200..=299 | 404 => Ok(()),
        other => Err(format!("DELETE answered {other}")),
    }
}

/// A `tools/call` of `countdown` asking for progress (`token` names it), legacy or modern.
pub(crate) fn countdown_call(id: u64, steps: u32, delay_ms: u64, modern: bool) -> Value {
    let mut meta = json!({"progressToken": format!("p{id}")});
    if modern {
        meta["io.modelcontextprotocol/protocolVersion"] = json!(MODERN);
        meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
        meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "soak-raw", "version": "1"});
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "countdown", "arguments": {"steps": steps, "delay_ms": delay_ms}, "_meta": meta}})
}

/// The headers of a modern `tools/call` of `tool`.
pub(crate) fn modern_call_headers(tool: &str) -> Vec<(&str, &str)> {
    vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", tool),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_blocks_parse_with_either_line_ending_and_comments_are_skipped() {
        assert!(parse_event(": keep-alive\n").is_none());
        let event = parse_event("id: s-3\ndata: {\"a\":1}\n").unwrap();
        assert_eq!(event.id.as_deref(), Some("s-3"));
        assert_eq!(event.data, "{\"a\":1}");
        // The priming event: an id and empty data.
        let priming = parse_event("id: s-1\nretry: 1000\ndata:\n").unwrap();
        assert_eq!(priming.id.as_deref(), Some("s-1"));
        assert!(priming.data.is_empty());
        assert_eq!(event_end(b"id: 1\r\n\r\nid: 2\n\n"), Some((5, 4)));
        assert_eq!(event_end(b"id: 1\n\nid: 2\r\n\r\n"), Some((5, 2)));
        assert_eq!(event_end(b"id: 1\n"), None);
    }
}
