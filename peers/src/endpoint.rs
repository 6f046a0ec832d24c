//! Transports, the endpoints a server process reports, and plain stream connections.
//!
//! Servers listen on loopback only: `127.0.0.1` with an ephemeral port, or a Unix socket
//! under the system's temporary directory.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio_util::either::Either;

/// The medium under an RPC framework.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Transport {
    /// TCP over loopback, with `TCP_NODELAY` on both sides.
    Tcp,
    /// A Unix stream socket.
    Unix,
}

impl Transport {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Unix => "unix",
        }
    }
}

/// Where a server listens: `tcp:127.0.0.1:PORT` or `unix:/PATH` in text form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix socket path.
    Unix(PathBuf),
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Tcp(addr) => write!(f, "tcp:{addr}"),
            Endpoint::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl std::str::FromStr for Endpoint {
    type Err = String;

    fn from_str(text: &str) -> Result<Endpoint, String> {
        if let Some(addr) = text.strip_prefix("tcp:") {
            addr.parse()
                .map(Endpoint::Tcp)
                .map_err(|e| format!("bad TCP endpoint {text:?}: {e}"))
        } else if let Some(path) = text.strip_prefix("unix:") {
            Ok(Endpoint::Unix(PathBuf::from(path)))
        } else {
            Err(format!(
                "bad endpoint {text:?}: expected tcp:ADDR:PORT or unix:PATH"
            ))
        }
    }
}

/// A bound listener on loopback.
pub enum Listener {
    /// TCP on 127.0.0.1.
    Tcp(TcpListener),
    /// A Unix socket; the path is removed when the listener is dropped.
    Unix(UnixListener, SocketFile),
}

/// A Unix socket path that is removed on drop.
pub struct SocketFile(pub PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A connected stream of either kind.
pub type Stream = Either<TcpStream, UnixStream>;

impl Listener {
    /// Binds a listener for `transport` on loopback; `tag` names the Unix socket file.
    /// Must run inside a Tokio runtime.
    pub async fn bind(transport: Transport, tag: &str) -> std::io::Result<Listener> {
        match transport {
            Transport::Tcp => Ok(Listener::Tcp(TcpListener::bind("127.0.0.1:0").await?)),
            Transport::Unix => {
                let path = std::env::temp_dir()
                    .join(format!("lanner-peers-{tag}-{}.sock", std::process::id()));
                let _ = std::fs::remove_file(&path);
                let listener = UnixListener::bind(&path)?;
                Ok(Listener::Unix(listener, SocketFile(path)))
            }
        }
    }

    /// Where clients connect.
    pub fn endpoint(&self) -> std::io::Result<Endpoint> {
        match self {
            Listener::Tcp(listener) => Ok(Endpoint::Tcp(listener.local_addr()?)),
            Listener::Unix(_, file) => Ok(Endpoint::Unix(file.0.clone())),
        }
    }

    /// Accepts the next connection (TCP ones with `TCP_NODELAY` set).
    pub async fn accept(&self) -> std::io::Result<Stream> {
        match self {
            Listener::Tcp(listener) => {
                let (stream, _) = listener.accept().await?;
                stream.set_nodelay(true)?;
                Ok(Either::Left(stream))
            }
            Listener::Unix(listener, _) => Ok(Either::Right(listener.accept().await?.0)),
        }
    }
}

/// Connects to `endpoint` (TCP with `TCP_NODELAY` set).
pub async fn connect(endpoint: &Endpoint) -> std::io::Result<Stream> {
    match endpoint {
        Endpoint::Tcp(addr) => {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Ok(Either::Left(stream))
        }
        Endpoint::Unix(path) => Ok(Either::Right(connect_unix(path).await?)),
    }
}

/// Connects to a Unix socket at `path`.
pub async fn connect_unix(path: &Path) -> std::io::Result<UnixStream> {
    UnixStream::connect(path).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_round_trip_as_text() {
        for text in ["tcp:127.0.0.1:4000", "unix:/tmp/x.sock"] {
            let endpoint: Endpoint = text.parse().unwrap();
            assert_eq!(endpoint.to_string(), text);
        }
        assert!("udp:1".parse::<Endpoint>().is_err());
    }
}
