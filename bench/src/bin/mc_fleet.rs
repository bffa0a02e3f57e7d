//! modelctx over Streamable HTTP with the Redis stores of `modelctx-redis` (the fleet rows of H3
//! and H4): the same echo server as `mc_http`, its legacy sessions in a `RedisSessionStore`, its
//! SSE events in a `RedisEventStore`, changes and client messages on a `RedisBus`.
//!
//! ```text
//! mc_fleet redis           redis-server on a free loopback port (no persistence) and one
//!                          instance on it, in this process
//! mc_fleet nginx           redis-server, two instances (`mc_fleet instance URL`, each a child
//!                          process) and nginx round-robin in front of them (no sticky sessions;
//!                          keep-alive connections to the instances); announces nginx's port
//! mc_fleet instance URL    one instance on the Redis at URL
//! ```
//!
//! Every process it starts is its descendant, so the load generator's CPU and memory figures
//! (summed over the server's process tree) count Redis, nginx and the instances. When its stdin
//! ends (the load generator closes it), it stops them and exits. `redis-server` and `nginx` are
//! looked for on the PATH, then in `/usr/bin` and `/usr/sbin` (Debian puts nginx there).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use modelctx_http::server::ServerConfig;
use modelctx_redis::{Fleet, FleetConfig};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// How long a child gets to become ready.
const READY_WITHIN: Duration = Duration::from_secs(20);

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["redis"] => {
            let dir = TempDir::new("redis")?;
            let mut redis = start_redis(&dir.0)?;
            let url = format!("redis://127.0.0.1:{}/", redis.port);
            let served = serve_instance(&url, || {
                // Stopped when the load generator closes stdin.
                wait_for_stdin_end();
            });
            redis.stop();
            served
        }
        ["nginx"] => fleet_of_two(),
        ["instance", url] => serve_instance(url, wait_for_stdin_end),
        _ => Err("usage: mc_fleet redis | mc_fleet nginx | mc_fleet instance URL".into()),
    }
}

/// One instance on the Redis at `url`: serves until `until` returns.
fn serve_instance(url: &str, until: impl FnOnce() + Send + 'static) -> Result<(), Error> {
    modelctx_bench::runtime().block_on(async {
        let fleet = Fleet::connect(url, FleetConfig::new()).await?;
        let server = modelctx_bench::modelctx_server_with(|builder| {
            builder
                .session_store(Arc::new(fleet.session_store()))
                .bus(Arc::new(fleet.bus()))
        });
        let config = ServerConfig::default().event_store(Arc::new(fleet.event_store()));
        let running = server
            .serve_http(modelctx_bench::loopback(), config)
            .await?;
        modelctx_bench::announce(running.local_addr());
        tokio::task::spawn_blocking(until).await?;
        drop(running);
        fleet.shutdown().await?;
        Ok(())
    })
}

/// Redis, two instances and nginx in front of them; until stdin ends.
fn fleet_of_two() -> Result<(), Error> {
    let dir = TempDir::new("fleet")?;
    let mut redis = start_redis(&dir.0)?;
    let url = format!("redis://127.0.0.1:{}/", redis.port);
    let exe = std::env::current_exe()?;
    let mut instances = Vec::new();
    let mut upstreams = Vec::new();
    for _ in 0..2 {
        let mut child = Command::new(&exe)
            .args(["instance", &url])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let port = announced_port(&mut child)?;
        upstreams.push(SocketAddr::from(([127, 0, 0, 1], port)));
        instances.push(child);
    }
    let nginx = start_nginx(&dir.0, &upstreams);
    let outcome = nginx.and_then(|(mut nginx, port)| {
        modelctx_bench::announce(SocketAddr::from(([127, 0, 0, 1], port)));
        wait_for_stdin_end();
        stop_nginx(&dir.0, &mut nginx);
        Ok(())
    });
    for mut child in instances {
        // Its stdin closed: it ends; killed should it not.
        drop(child.stdin.take());
        let _ = child.kill();
        let _ = child.wait();
    }
    redis.stop();
    outcome
}

fn wait_for_stdin_end() {
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

/// The port in a child's `LISTENING <port>` line.
fn announced_port(child: &mut Child) -> Result<u16, Error> {
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    line.trim()
        .strip_prefix("LISTENING ")
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| format!("an instance said {line:?}, not `LISTENING <port>`").into())
}

/// A folder under the system's temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Result<TempDir, Error> {
        let path =
            std::env::temp_dir().join(format!("modelctx-bench-{label}-{}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        // nginx started as root runs its worker as `nobody`, which must reach its files here.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The first of `candidates` that runs with `version_arg`.
fn find_binary(what: &str, candidates: &[&str], version_arg: &str) -> Result<PathBuf, Error> {
    candidates
        .iter()
        .find(|c| {
            Command::new(c)
                .arg(version_arg)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(PathBuf::from)
        .ok_or_else(|| {
            format!(
                "{what} is not installed (tried {}); the fleet rows need it",
                candidates.join(", ")
            )
            .into()
        })
}

fn free_port() -> Result<u16, Error> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A `redis-server` child on a loopback port; killed by [`stop`](Redis::stop).
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `redis-server` on a free loopback port, no persistence, data in `dir`; ready when it answers
/// `PING`.
fn start_redis(dir: &Path) -> Result<Redis, Error> {
    let binary = find_binary(
        "redis-server",
        &["redis-server", "/usr/bin/redis-server"],
        "--version",
    )?;
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        let mut child = Command::new(&binary)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--protected-mode", "yes", "--loglevel", "warning"])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                last = format!("redis-server exited ({status})");
                break;
            }
            if ping(port) {
                return Ok(Redis { child, port });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        if last.is_empty() {
            last = "redis-server did not answer PING".into();
        }
    }
    Err(last.into())
}

/// Whether the Redis on `port` answers `PING` with `+PONG`.
fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(1)));
    let mut reply = [0u8; 7];
    stream.write_all(b"PING\r\n").is_ok()
        && stream.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}

/// nginx's configuration: round-robin over `upstreams` (no sticky directive), keep-alive
/// connections to them, no buffering (SSE), no access log.
fn nginx_config(dir: &Path, port: u16, upstreams: &[SocketAddr]) -> String {
    let t = dir.display();
    let servers: String = upstreams
        .iter()
        .map(|addr| format!("    server {addr};\n"))
        .collect();
    format!(
        r#"daemon off;
worker_processes 1;
pid {t}/nginx.pid;
error_log {t}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {t}/body;
  proxy_temp_path {t}/proxy;
  fastcgi_temp_path {t}/f;
  uwsgi_temp_path {t}/u;
  scgi_temp_path {t}/s;
  upstream mcx {{
{servers}    keepalive 256;
  }}
  server {{
    listen 127.0.0.1:{port};
    keepalive_requests 1000000;
    location /mcp {{
      proxy_pass http://mcx;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host $http_host;
      proxy_buffering off;
      proxy_request_buffering off;
    }}
  }}
}}
"#
    )
}

fn nginx_command(binary: &Path, dir: &Path) -> Command {
    let mut command = Command::new(binary);
    command
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .arg("-e")
        .arg(dir.join("error.log"));
    command
}

/// nginx on a free loopback port in front of `upstreams`; ready when it accepts connections.
fn start_nginx(dir: &Path, upstreams: &[SocketAddr]) -> Result<(Child, u16), Error> {
    let binary = find_binary("nginx", &["nginx", "/usr/sbin/nginx"], "-v")?;
    let mut last = String::new();
    for _ in 0..3 {
        let port = free_port()?;
        std::fs::write(dir.join("nginx.conf"), nginx_config(dir, port, upstreams))?;
        let mut child = nginx_command(&binary, dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = Instant::now() + READY_WITHIN;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                last = format!(
                    "nginx exited ({status}): {}",
                    std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
                );
                break;
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok((child, port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    Err(last.into())
}

/// Stops nginx as `nginx -s stop` does (a TERM to the master, which ends its worker; a SIGKILL
/// would leave the worker behind), then waits for it.
fn stop_nginx(dir: &Path, nginx: &mut Child) {
    if let Ok(binary) = find_binary("nginx", &["nginx", "/usr/sbin/nginx"], "-v") {
        let _ = nginx_command(&binary, dir)
            .args(["-s", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = nginx.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = nginx.kill();
    let _ = nginx.wait();
}
