//! Opening a connection: HELLO → WELCOME, within the handshake timeout, with frames capped
//! at the handshake size until it completes.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use bytes::Bytes;
use lanner_proto::{Event, OutFrame, ProtocolError};

use super::{Connection, Side};
use crate::error::{Error, ErrorKind};
use crate::options::ConnectionOptions;
use crate::server::{CallLimit, NameRegistry};
use crate::transport::{FrameSink, FrameSource, Received, RecvError, Transport};

/// Client side: sends HELLO, expects WELCOME.
pub(crate) async fn connect(
    transport: Transport,
    options: &ConnectionOptions,
) -> Result<Arc<Connection>, Error> {
    let Transport {
        mut sink,
        mut source,
        peer,
        credentials,
    } = transport;
    let (mut proto, hello) = lanner_proto::Connection::client(options.limits());
    send(sink.as_mut(), hello, &peer).await?;
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
        sink,
        source,
        peer,
        credentials,
        Side::Client,
        options,
    ))
}

/// Server side: expects HELLO, answers WELCOME (or CLOSE saying why not).
pub(crate) async fn accept(
    transport: Transport,
    options: &ConnectionOptions,
    names: Arc<NameRegistry>,
    calls: Arc<CallLimit>,
) -> Result<Arc<Connection>, Error> {
    let Transport {
        mut sink,
        mut source,
        peer,
        credentials,
    } = transport;
    let mut proto = lanner_proto::Connection::server(options.limits());
    let received = receive(source.as_mut(), options, &peer)
        .await?
        .and_then(|frame| proto.handle_frame(frame));
    match received {
        Ok(Event::Accepted { welcome }) => send(sink.as_mut(), welcome, &peer).await?,
        Ok(_) => return Err(Error::protocol(format!("{peer} sent no HELLO"))),
        Err(error) => {
            let _ = send(sink.as_mut(), error.close_frame(), &peer).await;
            return Err(handshake_failed(&peer, &error));
        }
    }
    Ok(Connection::start(
        proto,
        sink,
        source,
        peer,
        credentials,
        Side::Server(names, calls),
        options,
    ))
}

fn handshake_failed(peer: &str, error: &ProtocolError) -> Error {
    let error = Error::from_protocol(error);
    Error::new(
        error.kind(),
        format!("handshake with {peer} failed: {}", error.message()),
    )
}

/// Server side, when the connection cannot be admitted: waits (bounded by the handshake
/// timeout) for the HELLO, then answers CLOSE with `status` and `reason` instead of
/// WELCOME, so the client learns why.
pub(crate) async fn refuse(
    transport: Transport,
    options: &ConnectionOptions,
    status: lanner_proto::Status,
    reason: &str,
) {
    let Transport {
        mut sink,
        mut source,
        peer,
        ..
    } = transport;
    let _ = receive(source.as_mut(), options, &peer).await;
    let close = lanner_proto::frame::encode_close(status, reason);
    let _ = send(sink.as_mut(), close, &peer).await;
}

async fn send(sink: &mut dyn FrameSink, frame: Bytes, peer: &str) -> Result<(), Error> {
    let mut frame = OutFrame::contiguous(frame);
    poll_fn(|cx| sink.poll_send(cx, &mut frame))
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
