//! A cutting proxy between some legacy load clients and the server: it forwards bytes both
//! ways and cuts half of the event streams the server sends (the connection is closed a few
//! hundred bytes after the stream's priming event), so that the real client
//! (`modelctx-client`) must resume them with `Last-Event-ID`. Its calls must still all succeed,
//! with every progress notification once and in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

use crate::{Ctx, Rng};

/// The end of a chunked body (the last chunk's CRLF, then the zero-size chunk): a stream that
/// ends before its cut is spared, so that the cut never falls on a later response of the
/// connection (a JSON answer, which cannot be resumed).
const BODY_END: &[u8] = b"\n0\r\n\r\n";

/// The most connections the proxy forwards at once (its clients open a few each).
const MAX_PIPES: usize = 256;

pub(crate) const CUT: &str = "load client's event stream cut by the proxy";

/// Resumptions seen by the proxy (requests with `Last-Event-ID`).
#[derive(Default)]
pub(crate) struct ProxyCounts {
    pub(crate) resumptions: AtomicU64,
}

/// Accepts connections on `listener` and forwards each to the server until the task is
/// aborted (which closes every connection).
pub(crate) async fn run(listener: TcpListener, ctx: Arc<Ctx>, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut pipes = JoinSet::new();
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(_) => {
                // Out of descriptors, say: wait rather than spin.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        while pipes.try_join_next().is_some() {}
        if pipes.len() >= MAX_PIPES {
            // Bounded: a client that opens more connections than this is refused.
            continue;
        }
        let (ctx, seed) = (ctx.clone(), rng.next());
        pipes.spawn(async move {
            if let Ok(server) = crate::raw::connect(ctx.addr).await {
                pipe(&ctx, client, server, seed).await;
            }
        });
    }
}

/// Forwards one connection; cuts it inside an event stream when the dice say so.
async fn pipe(ctx: &Ctx, client: TcpStream, server: TcpStream, seed: u64) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if contains_ignore_case(&buf[..n], b"last-event-id:") {
                ctx.proxy.resumptions.fetch_add(1, Ordering::Relaxed);
            }
            if server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let down = async {
        let mut rng = Rng::new(seed);
        let mut cutter = Cutter::default();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match server_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            match cutter.feed(&buf[..n], &mut rng) {
                Some(keep) => {
                    let _ = client_write.write_all(&buf[..keep]).await;
                    ctx.figures.fault(CUT);
                    ctx.figures
                        .outcome(CUT, "cut inside the stream; the client resumes");
                    break;
                }
                None => {
                    if client_write.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    // Either direction ending ends the connection (both halves are dropped).
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

/// Decides where to cut the bytes the server sends: in half of the event streams, 1 to 400
/// bytes after the end of the first event (the priming event, which carries the first id, so
/// the client always has an id to resume from).
#[derive(Default, Debug)]
pub(crate) struct Cutter {
    /// The last bytes seen, so that a marker split across reads is still found.
    tail: Vec<u8>,
    state: State,
}

#[derive(Default, Debug, PartialEq)]
enum State {
    /// Looking for an event-stream response head.
    #[default]
    Head,
    /// In a stream to cut: looking for the end of its first event, then `after` bytes more.
    FirstEvent { after: usize },
    /// Counting down to the cut.
    Counting { left: usize },
}

impl Cutter {
    /// Feeds the next bytes; `Some(n)`: forward the first `n` of them, then cut.
    pub(crate) fn feed(&mut self, bytes: &[u8], rng: &mut Rng) -> Option<usize> {
        let mut at = 0;
        while at < bytes.len() {
            match self.state {
                State::Head => {
                    let marker = b"text/event-stream";
                    let Some(end) = self.find(bytes, at, marker) else {
                        self.remember(&bytes[at..]);
                        return None;
                    };
                    self.tail.clear();
                    // A stream spared leaves the state at `Head`: its events never name the
                    // content type, the next response's head does.
                    if rng.below(2) == 0 {
                        self.state = State::FirstEvent {
                            after: 1 + rng.below(400) as usize,
                        };
                    }
                    at = end;
                }
                State::FirstEvent { after } => {
                    // The head ends with "\r\n\r\n", which holds no "\n\n": the first "\n\n"
                    // after the content type ends the first event.
                    let event_end = self.find(bytes, at, b"\n\n");
                    let body_end = self.find(bytes, at, BODY_END);
                    match (event_end, body_end) {
                        (_, Some(body)) if event_end.is_none_or(|event| body < event) => {
                            self.spare(&mut at, body);
                        }
                        (Some(event), _) => {
                            self.tail.clear();
                            self.state = State::Counting { left: after };
                            at = event;
                        }
                        _ => {
                            self.remember(&bytes[at..]);
                            return None;
                        }
                    }
                }
                State::Counting { left } => {
                    let cut = at + left;
                    match self.find(bytes, at, BODY_END) {
                        // The stream ended before the cut: it is spared.
                        Some(body) if body <= cut => self.spare(&mut at, body),
                        _ if cut <= bytes.len() => return Some(cut),
                        _ => {
                            self.state = State::Counting {
                                left: cut - bytes.len(),
                            };
                            self.remember(&bytes[at..]);
                            return None;
                        }
                    }
                }
            }
        }
        None
    }

    /// The stream ended (at `end`) before its cut: back to looking for the next one.
    fn spare(&mut self, at: &mut usize, end: usize) {
        self.tail.clear();
        self.state = State::Head;
        *at = end;
    }

    /// The position just after `marker` in `tail + bytes[at..]`, as an index of `bytes`.
    fn find(&self, bytes: &[u8], at: usize, marker: &[u8]) -> Option<usize> {
        let mut joined = self.tail.clone();
        joined.extend_from_slice(&bytes[at..]);
        let lower: Vec<u8> = joined.iter().map(u8::to_ascii_lowercase).collect();
        let pos = lower.windows(marker.len()).position(|w| w == marker)?;
        let end_in_joined = pos + marker.len();
        // The marker ends inside `bytes` (the tail is shorter than the marker).
        Some(at + end_in_joined.saturating_sub(self.tail.len()))
    }

    fn remember(&mut self, bytes: &[u8]) {
        self.tail.extend_from_slice(bytes);
        let keep = 32;
        if self.tail.len() > keep {
            self.tail.drain(..self.tail.len() - keep);
        }
    }
}

fn contains_ignore_case(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `parts` until a cut; the bytes forwarded in all.
    fn forwarded(seed: u64, parts: &[&[u8]]) -> Option<usize> {
        let mut rng = Rng::new(seed);
        let mut cutter = Cutter::default();
        let mut total = 0;
        for part in parts {
            if let Some(keep) = cutter.feed(part, &mut rng) {
                return Some(total + keep);
            }
            total += part.len();
        }
        None
    }

    #[test]
    fn streams_are_cut_after_their_first_event_or_spared_and_json_is_never_cut() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";
        let priming = b"id: s-1\nretry: 1000\ndata:\n\n";
        let rest = vec![b'x'; 1000];
        let json = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{}";
        assert_eq!(forwarded(1, &[json, json]), None);
        let mut cut = 0;
        let mut spared = 0;
        for seed in 1..200 {
            // The same bytes in one piece and split inside the markers cut at the same place.
            let whole = [&head[..], &priming[..], &rest[..]].concat();
            let split: [&[u8]; 4] = [
                &head[..30],
                &head[30..],
                &priming[..20],
                &[&priming[20..], &rest[..]].concat(),
            ];
            let one = forwarded(seed, &[&whole]);
            assert_eq!(one, forwarded(seed, &split), "seed {seed}");
            match one {
                Some(at) => {
                    cut += 1;
                    let first_event_end = head.len() + priming.len();
                    assert!(at > first_event_end && at <= first_event_end + 400, "{at}");
                }
                None => spared += 1,
            }
        }
        assert!(cut > 50 && spared > 50, "{cut} cut, {spared} spared");
        // A stream that ends before its cut is spared: the cut never falls in the JSON answer
        // that follows it on the connection (which cannot be resumed).
        let short = b"1c\r\nid: s-1\nretry: 1000\ndata:\n\n\r\n0\r\n\r\n";
        let stream_end = head.len() + short.len();
        for seed in 1..200 {
            let one = forwarded(seed, &[head, short, json, json]);
            let split = forwarded(seed, &[head, &short[..30], &short[30..], json, json]);
            assert_eq!(one, split, "seed {seed}");
            assert!(
                one.is_none_or(|at| at < stream_end),
                "seed {seed}: cut at {one:?}"
            );
        }
    }
}
