//! The server side: this process's stdin and stdout as a line transport.
//!
//! When stdin or stdout is a pipe or a Unix socket (as when a client spawned this process), it is
//! read and written directly through tokio's reactor, with no hop to the blocking thread pool
//! (`tokio::io::stdin()` makes one per read). Otherwise (a terminal, a file) tokio's own
//! `Stdin`/`Stdout` are used. A stdout that shares its open file with stderr (`2>&1`) also keeps
//! tokio's `Stdout`, since making it non-blocking would make writes to stderr fail when the pipe
//! is full.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::codec::LineCodec;
use crate::io::{LineReader, LineWriter};

/// This process's standard input, read without blocking threads where it can be.
#[derive(Debug)]
pub struct Stdin(StdinKind);

#[derive(Debug)]
enum StdinKind {
    #[cfg(unix)]
    Pipe(tokio::net::unix::pipe::Receiver),
    #[cfg(unix)]
    Socket(tokio::net::UnixStream),
    Std(tokio::io::Stdin),
}

/// This process's standard output, written without blocking threads where it can be.
#[derive(Debug)]
pub struct Stdout(StdoutKind);

#[derive(Debug)]
enum StdoutKind {
    #[cfg(unix)]
    Pipe(tokio::net::unix::pipe::Sender),
    #[cfg(unix)]
    Socket(tokio::net::UnixStream),
    Std(tokio::io::Stdout),
}

impl Stdin {
    /// Whether reads go through the reactor (a pipe or a socket) rather than the blocking pool.
    pub fn is_direct(&self) -> bool {
        !matches!(self.0, StdinKind::Std(_))
    }
}

impl Stdout {
    /// Whether writes go through the reactor (a pipe or a socket) rather than the blocking pool.
    pub fn is_direct(&self) -> bool {
        !matches!(self.0, StdoutKind::Std(_))
    }
}

/// This process's stdin and stdout as the two halves of a line transport, with the default codec
/// (4 MiB lines). Call it once, from within a tokio runtime; nothing else may read stdin or
/// write stdout afterwards (logs go to stderr: see the crate docs).
pub fn stdio() -> io::Result<(LineReader<Stdin>, LineWriter<Stdout>)> {
    stdio_with_codec(LineCodec::new())
}

/// [`stdio`] with a codec of the caller's (for another maximum line length).
pub fn stdio_with_codec(codec: LineCodec) -> io::Result<(LineReader<Stdin>, LineWriter<Stdout>)> {
    let (stdin, stdout) = open()?;
    Ok((LineReader::new(stdin, codec), LineWriter::new(stdout)))
}

#[cfg(unix)]
fn open() -> io::Result<(Stdin, Stdout)> {
    use std::os::fd::{AsFd, OwnedFd};
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    /// A duplicate of a standard descriptor, its identity and whether it is a FIFO or a socket.
    fn inspect(fd: std::os::fd::BorrowedFd<'_>) -> Option<(OwnedFd, (u64, u64), bool, bool)> {
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        let meta = file.metadata().ok()?;
        let kind = meta.file_type();
        Some((
            file.into(),
            (meta.dev(), meta.ino()),
            kind.is_fifo(),
            kind.is_socket(),
        ))
    }

    fn socket(fd: OwnedFd) -> io::Result<tokio::net::UnixStream> {
        let stream = std::os::unix::net::UnixStream::from(fd);
        stream.set_nonblocking(true)?;
        tokio::net::UnixStream::from_std(stream)
    }

    let stderr = inspect(io::stderr().as_fd()).map(|(_, id, ..)| id);
    let stdin = match inspect(io::stdin().as_fd()) {
        Some((fd, id, fifo, _)) if fifo && Some(id) != stderr => {
            StdinKind::Pipe(tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?)
        }
        Some((fd, id, _, true)) if Some(id) != stderr => StdinKind::Socket(socket(fd)?),
        _ => StdinKind::Std(tokio::io::stdin()),
    };
    let stdout = match inspect(io::stdout().as_fd()) {
        Some((fd, id, fifo, _)) if fifo && Some(id) != stderr => {
            StdoutKind::Pipe(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?)
        }
        Some((fd, id, _, true)) if Some(id) != stderr => StdoutKind::Socket(socket(fd)?),
        _ => StdoutKind::Std(tokio::io::stdout()),
    };
    Ok((Stdin(stdin), Stdout(stdout)))
}

#[cfg(not(unix))]
fn open() -> io::Result<(Stdin, Stdout)> {
    Ok((
        Stdin(StdinKind::Std(tokio::io::stdin())),
        Stdout(StdoutKind::Std(tokio::io::stdout())),
    ))
}

impl AsyncRead for Stdin {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            #[cfg(unix)]
            StdinKind::Pipe(r) => Pin::new(r).poll_read(cx, buf),
            #[cfg(unix)]
            StdinKind::Socket(s) => Pin::new(s).poll_read(cx, buf),
            StdinKind::Std(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stdout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().0 {
            #[cfg(unix)]
            StdoutKind::Pipe(w) => Pin::new(w).poll_write(cx, buf),
            #[cfg(unix)]
            StdoutKind::Socket(s) => Pin::new(s).poll_write(cx, buf),
            StdoutKind::Std(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            #[cfg(unix)]
            StdoutKind::Pipe(w) => Pin::new(w).poll_flush(cx),
            #[cfg(unix)]
            StdoutKind::Socket(s) => Pin::new(s).poll_flush(cx),
            StdoutKind::Std(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().0 {
            #[cfg(unix)]
            StdoutKind::Pipe(w) => Pin::new(w).poll_shutdown(cx),
            #[cfg(unix)]
            StdoutKind::Socket(s) => Pin::new(s).poll_shutdown(cx),
            StdoutKind::Std(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
