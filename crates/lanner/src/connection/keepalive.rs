//! Detecting a silent peer: a connection that has received nothing for an interval sends
//! a PING; if nothing at all arrives within the timeout after it, the peer is declared
//! gone and the connection fails (pending calls get `Unavailable`).
//!
//! Anything received counts as a sign of life, so a busy connection never sends a probe,
//! and the check costs one counter increment per received frame. So does the peer taking
//! what we write while the transport is full (a large reply it reads slowly, having
//! nothing to send): a PING queued behind that reply could not be answered before the
//! peer has read it all. So, too, does the socket's send queue shrinking: a frame the
//! kernel took at once (the transport never full) may still take longer than the
//! keepalive's silence to reach a peer behind a slow link, and a PING behind it waits as
//! long. A peer that is stopped (SIGSTOP), partitioned away or wedged is detected within
//! about two intervals plus the timeout (a stopped one once its kernel's receive buffer is
//! full). The peer's receiver answers the PING, so a method that computes for a long time
//! without awaiting does not make its server look dead (it runs on its own task once it
//! has awaited; see the dispatch module) unless it blocks the receiving thread itself.

use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lanner_proto::OutFrame;
use lanner_proto::frame::encode_ping;

use super::Connection;
use crate::error::Error;

impl Connection {
    /// Frames received, and writes the peer made room for while the transport was full.
    fn signs_of_life(&self) -> (u64, u64) {
        (
            self.frames_received.load(Ordering::Relaxed),
            self.write_progress.load(Ordering::Relaxed),
        )
    }

    /// Whether the peer took some of what the transport had taken (its send queue shrank)
    /// since `last`, the queue's size at the previous look, which this updates. What the
    /// kernel took at once may take far longer than the keepalive's silence to reach a
    /// peer behind a slow link, with the transport never full: a PING queued behind it
    /// cannot be answered before it has arrived.
    fn send_queue_drained(&self, last: &mut Option<usize>) -> bool {
        let now = self.writer_unsent();
        let drained = matches!((*last, now), (Some(before), Some(now)) if now < before);
        *last = now;
        drained
    }
}

/// Watches `connection` until it closes or is dropped.
pub(super) fn spawn(connection: Weak<Connection>, interval: Duration, timeout: Duration) {
    tokio::spawn(async move {
        let mut seen = None;
        let mut unsent = None;
        let mut nonce = 0u64;
        loop {
            tokio::time::sleep(interval).await;
            let Some(alive) = Connection::upgrade_open(&connection) else {
                return;
            };
            let received = alive.signs_of_life();
            let drained = alive.send_queue_drained(&mut unsent);
            if seen != Some(received) || drained {
                seen = Some(received);
                continue;
            }
            nonce = nonce.wrapping_add(1);
            let _ = alive.send_frame(OutFrame::contiguous(encode_ping(nonce)));
            // The PING is in the queue now (or waits behind a full transport's flusher).
            alive.send_queue_drained(&mut unsent);
            drop(alive);
            tokio::time::sleep(timeout).await;
            let Some(alive) = Connection::upgrade_open(&connection) else {
                return;
            };
            let drained = alive.send_queue_drained(&mut unsent);
            if alive.signs_of_life() == received && !drained {
                let silence = interval + timeout;
                alive.fail(Error::unavailable(format!(
                    "{} sent nothing for {silence:?}, not even an answer to a keepalive probe: it is stopped, unreachable or gone",
                    alive.peer()
                )));
                return;
            }
        }
    });
}
