//! TCP transport. Every connection has `TCP_NODELAY` set: Lanner frames are whole
//! messages, and Nagle's algorithm would hold a small request back for a round trip. A
//! frame with a large payload sent alone may go behind a few PONG frames, which place the
//! payload where the kernel copies it at full speed (see `page_padding`).

use std::io;

use tokio::net::TcpStream;

use super::Transport;
use super::stream::{StreamSink, StreamSource};
use super::watched_socket;

/// Connects to `address` (`host:port`).
pub async fn connect(address: &str) -> io::Result<Transport> {
    let stream = TcpStream::connect(address).await?;
    from_stream(stream)
}

/// Wraps a connected TCP stream, setting `TCP_NODELAY`. The socket is in the reactor only
/// while the connection waits on it (see `watched_socket`).
pub fn from_stream(stream: TcpStream) -> io::Result<Transport> {
    stream.set_nodelay(true)?;
    let peer = stream
        .peer_addr()
        .map(|a| format!("tcp://{a}"))
        .unwrap_or_else(|_| "tcp://?".into());
    let (reader, writer) = watched_socket::split(stream.into_std()?.into());
    Ok(Transport {
        sink: Box::new(StreamSink::new(writer).padding_page_fragments()),
        source: Box::new(StreamSource::new(reader)),
        peer,
        credentials: None,
        certificate_subject: None,
    })
}
