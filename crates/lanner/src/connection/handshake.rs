//! Opening a connection: HELLO → WELCOME (→ AUTH, for mechanisms with a last step), within
//! the handshake timeout, with frames capped at the handshake size until the peer is
//! authenticated. A failed authentication ends with a CLOSE saying why, on both sides, and
//! is logged by the server.

use std::future::{Future, poll_fn};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use lanner_proto::{
    ClientAuthenticator, Event, OutFrame, Principal, ProtocolError, ServerAuthenticator,
};

use super::{Connection, Side};
use crate::access::{AccessPolicy, PeerIdentity};
use crate::error::{Error, ErrorKind};
use crate::options::ConnectionOptions;
use crate::server::{CallLimit, NameRegistry};
use crate::transport::{FrameSink, FrameSource, Received, RecvError, Transport};

/// Client side: sends HELLO, expects WELCOME (checking the server's proof, if the
/// mechanism has one), sends AUTH if the mechanism has that step. Requests may follow at
/// once: the client never waits for an answer to AUTH.
pub(crate) async fn connect(
    transport: Transport,
    options: &ConnectionOptions,
    deadline: HandshakeDeadline,
    authenticator: Box<dyn ClientAuthenticator>,
    onward: super::Onward,
) -> Result<Arc<Connection>, Error> {
    let Transport {
        mut sink,
        mut source,
        peer,
        credentials,
        ..
    } = transport;
    let (mut proto, hello) = lanner_proto::Connection::client_with(options.limits(), authenticator);
    send(sink.as_mut(), hello, deadline, &peer).await?;
    let frame = receive(source.as_mut(), deadline, &peer)
        .await
        .map_err(|error| hint_at_tls(error, &peer))?
        .map_err(|error| handshake_failed(&peer, &error))?;
    match proto.handle_frame(frame) {
        Ok(Event::Established { auth }) => {
            if let Some(auth) = auth {
                send(sink.as_mut(), auth, deadline, &peer).await?;
            }
        }
        Ok(Event::Closed(close)) => {
            return Err(Error::from_status(
                close.status,
                format!("{peer} refused the connection: {}", close.reason),
            ));
        }
        Ok(_) => return Err(Error::protocol(format!("{peer} sent no WELCOME"))),
        // Tell the server why (it logs it); this side reports it to the caller.
        Err(error) => return Err(refuse_peer(sink.as_mut(), &error, deadline, &peer).await),
    }
    let principal = proto
        .peer_principal()
        .cloned()
        .unwrap_or(Principal::Anonymous);
    let identity = PeerIdentity::new(principal, credentials, None);
    Ok(Connection::start(
        proto,
        sink,
        source,
        peer,
        identity,
        Side::Client(onward),
        options,
    ))
}

/// What a server-side handshake needs besides the transport.
pub(crate) struct Admission {
    /// The mechanisms this connection may authenticate with.
    pub(crate) authenticator: Box<dyn ServerAuthenticator>,
    /// The access policy the peer's calls obey (None: everything allowed).
    pub(crate) policy: Option<Arc<AccessPolicy>>,
    pub(crate) names: Arc<NameRegistry>,
    pub(crate) calls: Arc<CallLimit>,
}

/// Server side: expects HELLO, answers WELCOME (or CLOSE saying why not), then AUTH if
/// the mechanism has that step. Until the client is authenticated, only handshake-sized
/// frames are read and nothing is allocated by the client's say-so.
pub(crate) async fn accept(
    transport: Transport,
    options: &ConnectionOptions,
    deadline: HandshakeDeadline,
    admission: Admission,
) -> Result<Arc<Connection>, Error> {
    let Transport {
        mut sink,
        mut source,
        peer,
        credentials,
        ..
    } = transport;
    let mut proto =
        lanner_proto::Connection::server_with(options.limits(), admission.authenticator);
    let received = receive(source.as_mut(), deadline, &peer)
        .await?
        .and_then(|frame| proto.handle_frame(frame));
    let received = match received {
        Ok(Event::Accepted { welcome }) => {
            send(sink.as_mut(), welcome, deadline, &peer).await?;
            if proto.is_open() {
                Ok(Event::Authenticated)
            } else {
                receive(source.as_mut(), deadline, &peer)
                    .await?
                    .and_then(|frame| proto.handle_frame(frame))
            }
        }
        other => other,
    };
    match received {
        Ok(Event::Authenticated) => {}
        Ok(Event::Closed(close)) => {
            return Err(Error::from_status(
                close.status,
                format!("{peer} gave up the handshake: {}", close.reason),
            ));
        }
        Ok(_) => {
            return Err(Error::protocol(format!(
                "{peer} did not follow the handshake"
            )));
        }
        Err(error) => return Err(refuse_peer(sink.as_mut(), &error, deadline, &peer).await),
    }
    let principal = proto
        .peer_principal()
        .cloned()
        .unwrap_or(Principal::Anonymous);
    tracing::debug!(%peer, %principal, "authenticated");
    let identity = PeerIdentity::new(principal, credentials, admission.policy);
    Ok(Connection::start(
        proto,
        sink,
        source,
        peer,
        identity,
        Side::Server(admission.names, admission.calls),
        options,
    ))
}

/// A plain TCP client whose server hangs up before answering its HELLO may have reached a
/// TLS server (which sends an alert and closes): say so.
fn hint_at_tls(error: Error, peer: &str) -> Error {
    if peer.starts_with("tcp://") && error.kind() == ErrorKind::Unavailable {
        return Error::new(
            error.kind(),
            format!(
                "{} (a server that speaks TLS does this to a plain client: connect with ClientAuth::tls)",
                error.message()
            ),
        );
    }
    error
}

/// Tells the peer with a CLOSE frame why the handshake failed; returns the error.
async fn refuse_peer(
    sink: &mut dyn FrameSink,
    error: &ProtocolError,
    deadline: HandshakeDeadline,
    peer: &str,
) -> Error {
    let _ = send(sink, error.close_frame(), deadline, peer).await;
    handshake_failed(peer, error)
}

fn handshake_failed(peer: &str, error: &ProtocolError) -> Error {
    let error = Error::from_protocol(error);
    Error::new(
        error.kind(),
        format!("handshake with {peer} failed: {}", error.message()),
    )
}

/// Server side, when the connection cannot be admitted: waits (until the handshake's
/// deadline) for the HELLO, then answers CLOSE with `status` and `reason` instead of
/// WELCOME, so the client learns why.
pub(crate) async fn refuse(
    transport: Transport,
    deadline: HandshakeDeadline,
    status: lanner_proto::Status,
    reason: &str,
) {
    let Transport {
        mut sink,
        mut source,
        peer,
        ..
    } = transport;
    let _ = receive(source.as_mut(), deadline, &peer).await;
    let close = lanner_proto::frame::encode_close(status, reason);
    let _ = send(sink.as_mut(), close, deadline, &peer).await;
}

/// When a connection's setup must be over: the handshake timeout counted once, from
/// before the transport is opened (or accepted), across every step that follows. Counted
/// per step instead, a peer answering each step just in time would hold a handshake slot
/// for several timeouts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HandshakeDeadline {
    /// `None` for a timeout too long to be a date (`Duration::MAX`): no deadline.
    at: Option<tokio::time::Instant>,
    timeout: Duration,
}

impl HandshakeDeadline {
    /// The deadline of a setup starting now.
    pub(crate) fn starting_now(options: &ConnectionOptions) -> HandshakeDeadline {
        HandshakeDeadline {
            at: crate::marshal::deadline_after(options.handshake_timeout)
                .map(tokio::time::Instant::from_std),
            timeout: options.handshake_timeout,
        }
    }

    /// Runs `step` until the deadline: `None` if it passed first.
    pub(crate) async fn bound<T>(self, step: impl Future<Output = T>) -> Option<T> {
        match self.at {
            Some(at) => tokio::time::timeout_at(at, step).await.ok(),
            None => Some(step.await),
        }
    }

    /// The handshake took too long: the peer is `Unavailable`, as one that does not
    /// accept the connection at all (a URL reference backs off from it the same way).
    fn exceeded(self, peer: &str) -> Error {
        Error::new(
            ErrorKind::Unavailable,
            format!(
                "handshake with {peer} did not complete within {:?}",
                self.timeout
            ),
        )
    }
}

async fn send(
    sink: &mut dyn FrameSink,
    frame: Bytes,
    deadline: HandshakeDeadline,
    peer: &str,
) -> Result<(), Error> {
    let mut frame = OutFrame::contiguous(frame);
    deadline
        .bound(poll_fn(|cx| sink.poll_send(cx, &mut frame)))
        .await
        .ok_or_else(|| deadline.exceeded(peer))?
        .map_err(|e| Error::io(&format!("handshake with {peer}"), &e))
}

/// The next frame from the peer. The inner error is a protocol violation the peer should
/// be told about with a CLOSE frame.
async fn receive(
    source: &mut dyn FrameSource,
    deadline: HandshakeDeadline,
    peer: &str,
) -> Result<Result<Bytes, ProtocolError>, Error> {
    let received = deadline
        .bound(poll_fn(|cx| {
            loop {
                match source.poll_recv(cx) {
                    Poll::Ready(Ok(Received::Partial | Received::Empty)) => continue,
                    other => return other,
                }
            }
        }))
        .await
        .ok_or_else(|| deadline.exceeded(peer))?;
    match received {
        Ok(Received::Frame(frame)) => Ok(Ok(frame)),
        Ok(Received::Shared) => Ok(Err(lanner_proto::FrameError::BadExternal(
            "a frame in shared memory during the handshake",
        )
        .into())),
        Ok(_) => Err(Error::unavailable(format!(
            "{peer} closed the connection during the handshake"
        ))),
        Err(RecvError::Io(error)) => Err(Error::io(&format!("handshake with {peer}"), &error)),
        Err(RecvError::Frame(error)) => Ok(Err(error.into())),
    }
}
