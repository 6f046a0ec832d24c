//! Listening on and connecting to an [`Endpoint`].

use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream, UnixListener};

use super::mem::MemListener;
use super::shm::ShmListener;
use super::{Transport, mem, shm, tcp, tls, unix};
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

/// [`connect`] with a client's options: over shared memory, the server's rings are faulted
/// in ahead of use up to [`crate::ConnectionOptions::shm_ring_size`].
pub async fn connect_with(
    endpoint: &Endpoint,
    options: &crate::ConnectionOptions,
) -> io::Result<Transport> {
    match endpoint {
        Endpoint::Shm(name) => shm::connect_populating(name, options.shm_ring_size).await,
        _ => connect(endpoint).await,
    }
}

/// Opens a TLS connection to `endpoint` (see [`tls::connect`]: `server_name` is the DNS
/// name or IP address the server's certificate must be valid for). Fails with
/// `InvalidInput` unless `endpoint` is a TCP endpoint.
pub async fn connect_tls(
    endpoint: &Endpoint,
    config: Arc<rustls::ClientConfig>,
    server_name: &str,
) -> io::Result<Transport> {
    match endpoint {
        Endpoint::Tcp(address) => tls::connect(address, config, server_name).await,
        _ => Err(tls_on_tcp_only()),
    }
}

fn tls_on_tcp_only() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "TLS is available on tcp:// endpoints only",
    )
}

/// A bound listener of any transport.
#[derive(Debug)]
pub enum Listener {
    /// TCP, plain or TLS.
    Tcp {
        /// The bound socket.
        listener: TcpListener,
        /// When set (see [`Listener::set_tls`]), every connection runs the TLS server
        /// handshake with this configuration in [`Incoming::establish`].
        tls: Option<Arc<rustls::ServerConfig>>,
    },
    /// Unix socket; its file is removed when the listener is dropped, if it is still this
    /// listener's (see [`SocketPath`]).
    Unix(UnixListener, SocketPath),
    /// Shared memory (set up through an abstract Unix socket).
    Shm(ShmListener),
    /// In-process.
    Mem(MemListener),
}

/// The path a Unix listener is bound to, and which file it bound there: dropping it
/// removes the file only if it is still that one. Another server may have bound the path
/// since (after someone removed this listener's file), and its socket must not go with
/// this one.
#[derive(Debug)]
pub struct SocketPath {
    path: PathBuf,
    /// The bound file's device and inode, if they could be read.
    file: Option<(u64, u64)>,
}

impl SocketPath {
    /// Notes the file just bound at `path`.
    fn bound(path: PathBuf) -> SocketPath {
        let file = file_identity(&path);
        SocketPath { path, file }
    }

    /// The path.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for SocketPath {
    fn drop(&mut self) {
        if self.file.is_some() && file_identity(&self.path) == self.file {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The device and inode of the file at `path` (not following a symbolic link).
fn file_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|metadata| (metadata.dev(), metadata.ino()))
}

/// Connections a Unix listener's kernel queue holds before connects fail with
/// "Resource temporarily unavailable" (the system may cap it lower: `somaxconn`).
const UNIX_BACKLOG: u32 = 1024;

/// How long a listener waits to learn whether a socket file at its path has a server.
const STALE_SOCKET_PROBE: std::time::Duration = std::time::Duration::from_secs(1);

/// Removes the socket file at `path` if its server is gone (connecting is refused), so
/// that a restarted server can bind its path again. Anything else there stays: a socket
/// with a server (or one this process may not connect to, or that does not answer within
/// [`STALE_SOCKET_PROBE`]), which binding then reports in use, and a file that is not a
/// socket, which is an error here: a mistyped path must not cost anyone a file. The file
/// removed is the one probed: if another server replaced it meanwhile (two servers
/// starting on one stale path), the new socket stays and binding reports it in use.
async fn remove_stale_socket(path: &std::path::Path) -> io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(metadata) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !metadata.file_type().is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket: not replaced",
                path.display()
            ),
        ));
    }
    let probed = file_identity(path);
    let probe = tokio::time::timeout(STALE_SOCKET_PROBE, tokio::net::UnixStream::connect(path));
    match probe.await {
        Ok(Err(e))
            if e.kind() == io::ErrorKind::ConnectionRefused && file_identity(path) == probed =>
        {
            std::fs::remove_file(path)
        }
        _ => Ok(()),
    }
}

impl Listener {
    /// Binds `endpoint`. A TCP port of 0 picks a free port (see [`Listener::local_endpoint`]).
    /// A stale Unix socket file left by a dead server is replaced; a live one is not, nor
    /// is a file that is not a socket (an error).
    pub async fn bind(endpoint: &Endpoint) -> io::Result<Listener> {
        match endpoint {
            Endpoint::Tcp(address) => Ok(Listener::Tcp {
                listener: TcpListener::bind(address).await?,
                tls: None,
            }),
            Endpoint::Unix(path) => {
                remove_stale_socket(path).await?;
                // Descriptors refused before the socket can be reached: connections
                // inherit it from the listener.
                let socket = tokio::net::UnixSocket::new_stream()?;
                unix::refuse_passed_descriptors(&socket);
                socket.bind(path)?;
                let bound = SocketPath::bound(path.clone());
                let listener = socket.listen(UNIX_BACKLOG)?;
                Ok(Listener::Unix(listener, bound))
            }
            Endpoint::Shm(name) => Ok(Listener::Shm(ShmListener::bind(name)?)),
            Endpoint::Mem(name) => Ok(Listener::Mem(MemListener::bind(name)?)),
        }
    }

    /// The endpoint actually bound (with the real port for TCP).
    pub fn local_endpoint(&self) -> io::Result<Endpoint> {
        Ok(match self {
            Listener::Tcp { listener, .. } => Endpoint::Tcp(listener.local_addr()?.to_string()),
            Listener::Unix(_, bound) => Endpoint::Unix(bound.path.clone()),
            Listener::Shm(listener) => Endpoint::Shm(listener.name().to_owned()),
            Listener::Mem(listener) => Endpoint::Mem(listener.name().to_owned()),
        })
    }

    /// Applies a server's options that concern the listener itself: the ring size of
    /// shared-memory connections ([`crate::ConnectionOptions::shm_ring_size`];
    /// `InvalidInput` if it is not a valid ring size). Other listeners have nothing to set.
    pub fn apply(&mut self, options: &crate::ConnectionOptions) -> io::Result<()> {
        match self {
            Listener::Shm(listener) => listener.set_ring_capacity(options.shm_ring_size),
            _ => Ok(()),
        }
    }

    /// Makes every connection accepted from now on a TLS connection: [`Incoming::establish`]
    /// runs the TLS server handshake with `config` (see [`tls::accept`]). Only TCP listeners
    /// can do this; on any other the result is an `InvalidInput` error.
    pub fn set_tls(&mut self, config: Arc<rustls::ServerConfig>) -> io::Result<()> {
        match self {
            Listener::Tcp { tls, .. } => {
                *tls = Some(config);
                Ok(())
            }
            _ => Err(tls_on_tcp_only()),
        }
    }

    /// The next incoming connection, to be finished with [`Incoming::establish`]. A
    /// connection whose setup fails here (the client hung up already, say) is logged and
    /// skipped, so that one bad client cannot hold up the others: only a failure of the
    /// listener itself is an error. Nothing here waits for a client: the TLS handshake (if
    /// the listener has TLS set) runs in [`Incoming::establish`], which the caller runs in
    /// a task of its own, under a timeout.
    pub async fn accept(&mut self) -> io::Result<Incoming> {
        match self {
            Listener::Tcp { listener, tls } => loop {
                let (stream, address) = listener.accept().await?;
                if let Some(config) = tls {
                    return Ok(Incoming(Setup::Tls {
                        stream,
                        config: config.clone(),
                        peer: format!("tls://{address}"),
                    }));
                }
                match tcp::from_stream(stream) {
                    Ok(transport) => return Ok(Incoming(Setup::Ready(transport))),
                    Err(error) => tracing::info!(%error, "TCP connection setup failed"),
                }
            },
            Listener::Unix(listener, bound) => loop {
                let (stream, _) = listener.accept().await?;
                match lanner_shm::sys::peer_credentials(stream.as_fd()) {
                    Ok(credentials) => {
                        let peer = format!(
                            "unix://{} (client pid {}, uid {})",
                            bound.path.display(),
                            credentials.pid,
                            credentials.uid
                        );
                        match unix::from_stream(stream, peer, Some(credentials)) {
                            Ok(transport) => return Ok(Incoming(Setup::Ready(transport))),
                            Err(error) => tracing::info!(%error, "Unix connection setup failed"),
                        }
                    }
                    Err(error) => tracing::info!(%error, "Unix connection setup failed"),
                }
            },
            Listener::Shm(listener) => Ok(Incoming(Setup::Ready(listener.accept().await?))),
            Listener::Mem(listener) => Ok(Incoming(Setup::Ready(listener.accept().await?))),
        }
    }
}

/// A connection accepted by [`Listener::accept`] whose setup may not be finished: a TLS
/// connection still needs its handshake, which [`Incoming::establish`] runs.
pub struct Incoming(Setup);

enum Setup {
    /// Set up already (plain TCP, Unix sockets, shared memory, in-process).
    Ready(Transport),
    /// A TCP connection waiting for its TLS handshake.
    Tls {
        stream: TcpStream,
        config: Arc<rustls::ServerConfig>,
        peer: String,
    },
}

impl Incoming {
    /// Who connected (an address or path), for logs: the same as the transport's
    /// [`Transport::peer`] once established.
    pub fn peer(&self) -> &str {
        match &self.0 {
            Setup::Ready(transport) => &transport.peer,
            Setup::Tls { peer, .. } => peer,
        }
    }

    /// Finishes the connection's setup: runs the TLS server handshake (see
    /// [`tls::accept`]) if the listener had TLS set, otherwise returns the transport at
    /// once. The handshake waits for the client, so run this in a task of its own and
    /// under a timeout.
    pub async fn establish(self) -> io::Result<Transport> {
        match self.0 {
            Setup::Ready(transport) => Ok(transport),
            Setup::Tls { stream, config, .. } => tls::accept(stream, config).await,
        }
    }
}

impl std::fmt::Debug for Incoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming")
            .field("peer", &self.peer())
            .field("tls_pending", &matches!(self.0, Setup::Tls { .. }))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("lanner-listener-{tag}-{}.sock", std::process::id()))
    }

    #[tokio::test]
    async fn a_file_that_is_not_a_socket_is_never_replaced() {
        let path = path("file");
        std::fs::write(&path, b"notes").unwrap();
        let Err(error) = Listener::bind(&Endpoint::Unix(path.clone())).await else {
            panic!("bound over a regular file");
        };
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists, "{error}");
        assert_eq!(std::fs::read(&path).unwrap(), b"notes");
        std::fs::remove_file(&path).unwrap();
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_live_one_is_not() {
        let path = path("socket");
        let _ = std::fs::remove_file(&path);
        // A server that died: its socket file stays, and connecting is refused.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let listener = Listener::bind(&Endpoint::Unix(path.clone()))
            .await
            .expect("the stale socket is replaced");
        // A second server on the path of a live one fails, and leaves it working.
        let Err(error) = Listener::bind(&Endpoint::Unix(path.clone())).await else {
            panic!("bound over a live socket");
        };
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse, "{error}");
        tokio::net::UnixStream::connect(&path)
            .await
            .expect("the live server still answers");
        drop(listener);
        assert!(!path.exists(), "the listener's file stayed");
    }

    #[tokio::test]
    async fn dropping_a_listener_leaves_another_servers_socket_at_its_path() {
        let path = path("replaced");
        let _ = std::fs::remove_file(&path);
        let first = Listener::bind(&Endpoint::Unix(path.clone())).await.unwrap();
        // Someone removes the first server's file, and a second server binds the path.
        std::fs::remove_file(&path).unwrap();
        let second = Listener::bind(&Endpoint::Unix(path.clone())).await.unwrap();
        drop(first);
        tokio::net::UnixStream::connect(&path)
            .await
            .expect("the second server's socket is still there");
        drop(second);
        assert!(!path.exists());
    }
}
