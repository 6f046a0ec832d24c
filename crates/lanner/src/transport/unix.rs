//! Unix domain stream socket transport.

use std::io;
use std::path::Path;

use tokio::net::UnixStream;

use super::stream::{StreamSink, StreamSource};
use super::watched_socket;
use super::{PeerCredentials, Transport};

/// Connects to the socket at `path`. The transport's credentials are the server's (who
/// listens there, as the kernel says), for the client to check.
pub async fn connect(path: &Path) -> io::Result<Transport> {
    let stream = UnixStream::connect(path).await?;
    let server = lanner_shm::sys::peer_credentials(std::os::fd::AsFd::as_fd(&stream))?;
    from_stream(stream, format!("unix://{}", path.display()), Some(server))
}

/// Wraps a connected Unix stream; `credentials` says who the peer process is (servers
/// read them with `lanner_shm::sys::peer_credentials`). The socket is in the reactor
/// only while the connection waits on it (see `watched_socket`).
pub fn from_stream(
    stream: UnixStream,
    peer: String,
    credentials: Option<PeerCredentials>,
) -> io::Result<Transport> {
    let (reader, writer) = watched_socket::split(stream.into_std()?.into());
    Ok(Transport {
        sink: Box::new(StreamSink::new(writer)),
        source: Box::new(StreamSource::new(reader)),
        peer,
        credentials,
        certificate_subject: None,
    })
}
