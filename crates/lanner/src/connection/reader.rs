//! The reader task: receives frames, completes calls, dispatches requests.
//!
//! Waiting strategy: after each frame (and after each write, via a kick), the reader polls
//! its transport for the connection's spin budget, yielding to the runtime between polls,
//! before it sleeps in the kernel. See [`crate::ConnectionOptions`].

use std::future::poll_fn;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lanner_proto::Event;

use super::{Connection, Ownership, ReaderSignal};
use crate::error::Error;
use crate::transport::{FrameSource, RecvError};

enum Holder {
    Strong(Arc<Connection>),
    Weak(Weak<Connection>),
}

impl Holder {
    fn get(&self) -> Option<Arc<Connection>> {
        match self {
            Holder::Strong(connection) => Some(connection.clone()),
            Holder::Weak(connection) => connection.upgrade(),
        }
    }
}

pub(super) fn spawn(
    connection: &Arc<Connection>,
    mut source: Box<dyn FrameSource>,
    signal: Arc<ReaderSignal>,
    ownership: Ownership,
    spin: Duration,
) {
    source.set_max_frame_size(connection.max_incoming_frame_size());
    let holder = match ownership {
        Ownership::Server => Holder::Strong(connection.clone()),
        Ownership::Client => Holder::Weak(Arc::downgrade(connection)),
    };
    tokio::spawn(async move {
        let error = read_loop(&holder, source.as_mut(), &signal, spin).await;
        if let Some(connection) = holder.get() {
            connection.fail(error);
        }
    });
}

async fn read_loop(
    holder: &Holder,
    source: &mut dyn FrameSource,
    signal: &ReaderSignal,
    spin: Duration,
) -> Error {
    loop {
        let frame = match next_frame(source, signal, spin).await {
            Ok(Some(frame)) => frame,
            Ok(None) => return Error::unavailable("the peer closed the connection"),
            Err(RecvError::Io(error)) => return Error::io("reading from the peer", &error),
            Err(RecvError::Frame(error)) => {
                let error = lanner_proto::ProtocolError::from(error);
                if let Some(connection) = holder.get() {
                    let _ = connection
                        .write(lanner_proto::OutFrame::contiguous(error.close_frame()))
                        .await;
                }
                return Error::from_protocol(&error);
            }
        };
        let Some(connection) = holder.get() else {
            return Error::unavailable("the connection was dropped");
        };
        match connection.handle_frame(frame) {
            Ok(Event::Response(response)) => connection.complete(response),
            Ok(Event::Request(request)) => connection.dispatch(request),
            Ok(Event::Credit(_)) => connection.credits_granted(),
            Ok(Event::Closed(close)) => {
                return Error::from_protocol(&lanner_proto::ProtocolError::PeerClosed {
                    status: close.status,
                    reason: close.reason,
                });
            }
            Ok(Event::Accepted { .. } | Event::Established) => {
                return Error::protocol("handshake event on an open connection");
            }
            Err(error) => {
                tracing::warn!(peer = %connection.peer(), %error, "closing connection");
                let _ = connection
                    .write(lanner_proto::OutFrame::contiguous(error.close_frame()))
                    .await;
                return Error::from_protocol(&error);
            }
        }
        if signal.shutdown.load(Ordering::Relaxed) {
            return Error::unavailable("the connection was dropped");
        }
    }
}

/// The next frame: poll, spin for the budget (yielding between polls), then sleep until
/// the transport is readable or a writer kicks us back into spinning.
async fn next_frame(
    source: &mut dyn FrameSource,
    signal: &ReaderSignal,
    spin: Duration,
) -> Result<Option<Bytes>, RecvError> {
    let mut spin_until = Instant::now() + spin;
    loop {
        if let Poll::Ready(result) = poll_fn(|cx| Poll::Ready(source.poll_recv(cx))).await {
            return result;
        }
        if signal.shutdown.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if !spin.is_zero() && Instant::now() < spin_until {
            tokio::task::yield_now().await;
            continue;
        }
        signal.asleep.store(true, Ordering::SeqCst);
        let woken = poll_fn(|cx| {
            signal.waker.register(cx.waker());
            if signal.kicked.swap(false, Ordering::SeqCst)
                || signal.shutdown.load(Ordering::SeqCst)
            {
                return Poll::Ready(None);
            }
            source.poll_recv(cx).map(Some)
        })
        .await;
        signal.asleep.store(false, Ordering::SeqCst);
        match woken {
            Some(result) => return result,
            None => spin_until = Instant::now() + spin,
        }
    }
}
