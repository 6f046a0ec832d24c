//! Closing connections nobody uses: with an idle timeout set, a connection that has had no
//! call in either direction, and none outstanding, for that long is closed, unless either
//! side holds references to the other's objects that it could not find again (results,
//! callbacks, created instances, handed-over references; objects resolved by name it
//! finds again). So a server keeping a client's callback (a subscriber, say) keeps that
//! client's connection open. Keepalive probes do not count as use. A client whose proxies
//! came from a URL reconnects by itself on its next call.
//!
//! Closing goes the way of a graceful shutdown: a GOAWAY first (neither side makes new
//! calls on the connection from then on), then, once the peer has answered the PING after
//! it (so every request it sent before it read the GOAWAY is here) and no call is
//! outstanding either way, a CLOSE. A request that crossed the GOAWAY is served, not
//! failed with `Unavailable` although it never ran.

use std::sync::Weak;
use std::time::{Duration, Instant};

use lanner_proto::Status;

use super::control::CLOSE_LINGER;
use super::poll_interval::PollInterval;
use super::{Connection, GOAWAY_ANSWER_WAIT};

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
                // Checked again under the lock that new calls take: one that started since
                // keeps the connection open.
                let still_idle = |connection: &Connection, state: &super::State| {
                    let now = connection.activity_in(state);
                    !now.busy && now.calls == activity.calls
                };
                if alive.go_away_if(still_idle) {
                    drop(alive);
                    drain(connection, timeout).await;
                    return;
                }
            }
        }
    });
}

/// Closes `connection`, which went away for having been idle for `timeout`, once the
/// peer has heard the GOAWAY (or did not say so in [`GOAWAY_ANSWER_WAIT`]), no call is
/// outstanding in either direction and every answer is written (or a peer that stopped
/// reading has had [`CLOSE_LINGER`] to take them since the calls ended: the close's own
/// linger follows). References handed out since (in the answer to a request that
/// crossed the GOAWAY) do not keep it open: nobody can call through them once neither
/// side makes new calls.
async fn drain(connection: Weak<Connection>, timeout: Duration) {
    let started = Instant::now();
    let reason = format!("the connection was idle for {timeout:?}");
    // Since when no call has been outstanding (with answers perhaps still unwritten).
    let mut calls_over_since: Option<Instant> = None;
    let mut interval = PollInterval::new();
    loop {
        interval.tick().await;
        let Some(alive) = Connection::upgrade_open(&connection) else {
            return;
        };
        if !alive.goaway_heard() && started.elapsed() < GOAWAY_ANSWER_WAIT {
            continue;
        }
        if alive.writes_pending()
            && calls_over_since.is_none_or(|since| since.elapsed() < CLOSE_LINGER)
        {
            if !alive.activity().calls_outstanding {
                calls_over_since.get_or_insert_with(Instant::now);
            } else {
                calls_over_since = None;
            }
            continue;
        }
        let quiet = |connection: &Connection, state: &super::State| {
            !connection.activity_in(state).calls_outstanding
        };
        if alive.close_if(Status::Unavailable, &reason, quiet) {
            tracing::debug!(peer = %alive.peer(), ?timeout, "closed an idle connection");
            return;
        }
    }
}

/// A connection's use, as the idle check sees it.
pub(super) struct Activity {
    /// Calls made and served so far.
    pub(super) calls: u64,
    /// Some call is outstanding in either direction.
    pub(super) calls_outstanding: bool,
    /// Some call is outstanding, or either side holds references it could not find again.
    pub(super) busy: bool,
}
