//! Listening on and connecting to an [`Endpoint`].

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;

use tokio::net::{TcpListener, UnixListener};

use super::mem::MemListener;
use super::shm::ShmListener;
use super::{Transport, mem, shm, tcp, unix};
use crate::url::Endpoint;

/// Opens a transport to `endpoint`.
pub async fn connect(endpoint: &Endpoint) -> io::Result<Transport> {
    match endpoint {
        Endpoint::Tcp(address) => tcp::connect(address).await,
        Endpoint::Unix(path) => unix::connect(path).await,
        Endpoint::Shm(name) => shm::connect(name).await,
        Endpoint::Mem(name) => mem::connect(name),
    }
}

/// A bound listener of any transport.
#[derive(Debug)]
pub enum Listener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix socket; the path is removed when the listener is dropped.
    Unix(UnixListener, PathBuf),
    /// Shared memory (set up through an abstract Unix socket).
    Shm(ShmListener),
    /// In-process.
    Mem(MemListener),
}

impl Listener {
    /// Binds `endpoint`. A TCP port of 0 picks a free port (see [`Listener::local_endpoint`]).
    /// A stale Unix socket file left by a dead server is replaced; a live one is not.
    pub async fn bind(endpoint: &Endpoint) -> io::Result<Listener> {
        match endpoint {
            Endpoint::Tcp(address) => Ok(Listener::Tcp(TcpListener::bind(address).await?)),
            Endpoint::Unix(path) => {
                if path.exists() && std::os::unix::net::UnixStream::connect(path).is_err() {
                    std::fs::remove_file(path)?;
                }
                Ok(Listener::Unix(UnixListener::bind(path)?, path.clone()))
            }
            Endpoint::Shm(name) => Ok(Listener::Shm(ShmListener::bind(name)?)),
            Endpoint::Mem(name) => Ok(Listener::Mem(MemListener::bind(name)?)),
        }
    }

    /// The endpoint actually bound (with the real port for TCP).
    pub fn local_endpoint(&self) -> io::Result<Endpoint> {
        Ok(match self {
            Listener::Tcp(listener) => Endpoint::Tcp(listener.local_addr()?.to_string()),
            Listener::Unix(_, path) => Endpoint::Unix(path.clone()),
            Listener::Shm(listener) => Endpoint::Shm(listener.name().to_owned()),
            Listener::Mem(listener) => Endpoint::Mem(listener.name().to_owned()),
        })
    }

    /// The next incoming connection. A connection whose setup fails (the client hung up
    /// already, say) is logged and skipped, so that one bad client cannot hold up the
    /// others: only a failure of the listener itself is an error.
    pub async fn accept(&mut self) -> io::Result<Transport> {
        match self {
            Listener::Tcp(listener) => loop {
                let (stream, _) = listener.accept().await?;
                match tcp::from_stream(stream) {
                    Ok(transport) => return Ok(transport),
                    Err(error) => tracing::info!(%error, "TCP connection setup failed"),
                }
            },
            Listener::Unix(listener, path) => loop {
                let (stream, _) = listener.accept().await?;
                match lanner_shm::sys::peer_credentials(stream.as_fd()) {
                    Ok(credentials) => {
                        let peer = format!(
                            "unix://{} (client pid {}, uid {})",
                            path.display(),
                            credentials.pid,
                            credentials.uid
                        );
                        return Ok(unix::from_stream(stream, peer, Some(credentials)));
                    }
                    Err(error) => tracing::info!(%error, "Unix connection setup failed"),
                }
            },
            Listener::Shm(listener) => listener.accept().await,
            Listener::Mem(listener) => listener.accept().await,
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}
