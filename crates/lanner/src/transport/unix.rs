//! Unix domain stream socket transport.

use std::io;
use std::path::Path;

use tokio::net::UnixStream;

use super::Transport;
use super::stream::{StreamSink, StreamSource};

/// Connects to the socket at `path`.
pub async fn connect(path: &Path) -> io::Result<Transport> {
    let stream = UnixStream::connect(path).await?;
    Ok(from_stream(stream, format!("unix://{}", path.display())))
}

/// Wraps a connected Unix stream.
pub fn from_stream(stream: UnixStream, peer: String) -> Transport {
    let (reader, writer) = stream.into_split();
    Transport {
        sink: Box::new(StreamSink::new(writer)),
        source: Box::new(StreamSource::new(reader)),
        peer,
    }
}
