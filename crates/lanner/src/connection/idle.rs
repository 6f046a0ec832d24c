//! Closing connections nobody uses: with an idle timeout set, a connection that has had no
//! call in either direction, and none outstanding, for that long is closed with a CLOSE
//! saying why, unless either side holds references to the other's objects that it could
//! not find again (results, callbacks, created instances, handed-over references; objects
//! resolved by name it finds again). So a server keeping a client's callback (a
//! subscriber, say) keeps that client's connection open. Keepalive probes do not count as
//! use. A client whose proxies came from a URL reconnects by itself on its next call.

use std::sync::Weak;
use std::time::{Duration, Instant};

use lanner_proto::Status;

use super::Connection;

/// How many times per timeout the connection is looked at.
const CHECKS_PER_TIMEOUT: u32 = 4;

/// Watches `connection` until it closes, is dropped, or stays idle for `timeout`.
pub(super) fn spawn(connection: Weak<Connection>, timeout: Duration) {
    tokio::spawn(async move {
        let mut last = None;
        let mut idle_since = Instant::now();
        loop {
            tokio::time::sleep(timeout / CHECKS_PER_TIMEOUT).await;
            let Some(alive) = Connection::upgrade_open(&connection) else {
                return;
            };
            let activity = alive.activity();
            if activity.busy || last != Some(activity.calls) {
                last = Some(activity.calls);
                idle_since = Instant::now();
                continue;
            }
            if idle_since.elapsed() >= timeout {
                let reason = format!("the connection was idle for {timeout:?}");
                // Checked again under the lock that new calls take: one that started since
                // keeps the connection open.
                let still_idle = |connection: &Connection, state: &super::State| {
                    let now = connection.activity_in(state);
                    !now.busy && now.calls == activity.calls
                };
                if alive.close_if(Status::Unavailable, &reason, still_idle) {
                    tracing::debug!(peer = %alive.peer(), ?timeout, "closed an idle connection");
                    return;
                }
            }
        }
    });
}

/// A connection's use, as the idle check sees it.
pub(super) struct Activity {
    /// Calls made and served so far.
    pub(super) calls: u64,
    /// Some call is outstanding in either direction.
    pub(super) busy: bool,
}
