//! Opening a connection: HELLO → WELCOME, within the handshake timeout, with frames capped
//! at the handshake size until it completes.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use lanner_proto::{Event, OutFrame, ProtocolError};

use super::writer::Writer;
use super::{Connection, Ownership};
use crate::error::{Error, ErrorKind};
use crate::options::ConnectionOptions;
use crate::server::NameRegistry;
use crate::transport::{FrameSource, Received, RecvError, Transport};

/// Client side: sends HELLO, expects WELCOME.
pub(crate) async fn connect(
    transport: Transport,
    options: &ConnectionOptions,
) -> Result<Arc<Connection>, Error> {
    let Transport {
        sink,
        mut source,
        peer,
    } = transport;
    let (mut proto, hello) = lanner_proto::Connection::client(options.limits());
    let mut writer = Writer::new(sink);
    send(&mut writer, hello, &peer).await?;
    let frame = receive(source.as_mut(), options, &peer)
        .await?
        .map_err(|error| handshake_failed(&peer, &error))?;
    match proto.handle_frame(frame) {
        Ok(Event::Established) => {}
        Ok(Event::Closed(close)) => {
            return Err(Error::from_status(
                close.status,
                format!("{peer} refused the connection: {}", close.reason),
            ));
        }
        Ok(_) => return Err(Error::protocol(format!("{peer} sent no WELCOME"))),
        Err(error) => return Err(handshake_failed(&peer, &error)),
    }
    Ok(Connection::start(
        proto,
        writer.into_sink(),
        source,
        peer,
        None,
        Ownership::Client,
        options.spin,
    ))
}

/// Server side: expects HELLO, answers WELCOME (or CLOSE saying why not).
pub(crate) async fn accept(
    transport: Transport,
    options: &ConnectionOptions,
    names: Arc<NameRegistry>,
) -> Result<Arc<Connection>, Error> {
    let Transport {
        sink,
        mut source,
        peer,
    } = transport;
    let mut proto = lanner_proto::Connection::server(options.limits());
    let mut writer = Writer::new(sink);
    let received = receive(source.as_mut(), options, &peer)
        .await?
        .and_then(|frame| proto.handle_frame(frame));
    match received {
        Ok(Event::Accepted { welcome }) => send(&mut writer, welcome, &peer).await?,
        Ok(_) => return Err(Error::protocol(format!("{peer} sent no HELLO"))),
        Err(error) => {
            let _ = send(&mut writer, error.close_frame(), &peer).await;
            return Err(handshake_failed(&peer, &error));
        }
    }
    Ok(Connection::start(
        proto,
        writer.into_sink(),
        source,
        peer,
        Some(names),
        Ownership::Server,
        options.spin,
    ))
}

fn handshake_failed(peer: &str, error: &ProtocolError) -> Error {
    let error = Error::from_protocol(error);
    Error::new(
        error.kind(),
        format!("handshake with {peer} failed: {}", error.message()),
    )
}

async fn send(writer: &mut Writer, frame: Bytes, peer: &str) -> Result<(), Error> {
    writer.queue(OutFrame::contiguous(frame));
    poll_fn(|cx| writer.poll_flush(cx))
        .await
        .map_err(|e| Error::io(&format!("handshake with {peer}"), &e))
}

/// The first frame from the peer. The inner error is a protocol violation the peer should
/// be told about with a CLOSE frame.
async fn receive(
    source: &mut dyn FrameSource,
    options: &ConnectionOptions,
    peer: &str,
) -> Result<Result<Bytes, ProtocolError>, Error> {
    let received = tokio::time::timeout(
        options.handshake_timeout,
        poll_fn(|cx| {
            loop {
                match source.poll_recv(cx) {
                    Poll::Ready(Ok(Received::Partial | Received::Empty)) => continue,
                    other => return other,
                }
            }
        }),
    )
    .await
    .map_err(|_| {
        Error::new(
            ErrorKind::DeadlineExceeded,
            format!(
                "handshake with {peer} did not complete within {:?}",
                options.handshake_timeout
            ),
        )
    })?;
    match received {
        Ok(Received::Frame(frame)) => Ok(Ok(frame)),
        Ok(_) => Err(Error::unavailable(format!(
            "{peer} closed the connection during the handshake"
        ))),
        Err(RecvError::Io(error)) => Err(Error::io(&format!("handshake with {peer}"), &error)),
        Err(RecvError::Frame(error)) => Ok(Err(error.into())),
    }
}
