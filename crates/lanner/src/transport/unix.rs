//! Unix domain stream socket transport.

use std::io;
use std::path::Path;

use tokio::net::UnixStream;

use super::stream::{StreamSink, StreamSource};
use super::{PeerCredentials, Transport};

/// Connects to the socket at `path`.
pub async fn connect(path: &Path) -> io::Result<Transport> {
    let stream = UnixStream::connect(path).await?;
    Ok(from_stream(
        stream,
        format!("unix://{}", path.display()),
        None,
    ))
}

/// Wraps a connected Unix stream; `credentials` says who the peer process is (servers
/// read them with `lanner_shm::sys::peer_credentials`).
pub fn from_stream(
    stream: UnixStream,
    peer: String,
    credentials: Option<PeerCredentials>,
) -> Transport {
    let (reader, writer) = stream.into_split();
    Transport {
        sink: Box::new(StreamSink::new(writer)),
        source: Box::new(StreamSource::new(reader)),
        peer,
        credentials,
        certificate_subject: None,
    }
}
