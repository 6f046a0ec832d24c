//! Connection options shared by clients and servers.

use std::time::Duration;

use lanner_proto::Limits;

/// How a connection waits for incoming messages and what it accepts from its peer.
///
/// Waiting: after each message sent or received, a connection's reader polls for
/// `spin` before it sleeps in the kernel. On virtual machines waking a sleeping thread on
/// another CPU costs tens of microseconds, an order of magnitude more than a loopback
/// round trip, so a short spin pays for itself on busy connections; an idle connection
/// still uses no CPU once the budget is spent. Set `spin` to zero for pure blocking.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConnectionOptions {
    /// How long a reader polls before sleeping (default 50 µs).
    pub spin: Duration,
    /// The largest frame accepted from the peer (default 16 MiB).
    pub max_frame_size: u32,
    /// How many requests the peer may have outstanding towards us (default 256).
    pub credits: u32,
    /// How long opening a connection may take before it is given up (default 5 s; the
    /// error is `Unavailable`): connecting (or accepting), the TLS handshake if any and
    /// Lanner's handshake together, counted once from the start rather than per step.
    pub handshake_timeout: Duration,
    /// How long a call waits for its answer unless its proxy sets its own timeout
    /// ([`crate::Proxy::with_timeout`]); `None` (the default) waits as long as the
    /// connection lives. The time left travels with the request, so the server can see it
    /// ([`crate::CallContext::remaining`]).
    pub call_timeout: Option<Duration>,
    /// After this long with nothing received, send the peer a keepalive probe (default
    /// 15 s; silence is looked for once per interval, so the probe goes out after one to
    /// two intervals of it); `None` never probes, so a silent peer is never detected.
    pub keepalive: Option<Duration>,
    /// How long after a probe the peer has to show any sign of life before the connection
    /// is declared dead and its calls fail with `Unavailable` (default 15 s).
    pub keepalive_timeout: Duration,
    /// Close a connection that has had no call in either direction (and none
    /// outstanding) for this long; `None` (the default) never does. Keepalive probes do
    /// not count as use. A connection over which either side holds references to the
    /// other's objects that it could not find again by URL (results, callbacks, created
    /// instances) is in use however quiet it is. Closing is graceful: a GOAWAY first, so
    /// that a call the peer sent at that moment is served, not failed.
    pub idle_timeout: Option<Duration>,
    /// Bytes per ring, each direction, of a shared-memory (`shm://`) connection (default
    /// 4 MiB; a power of two from 4 KiB to 1 GiB). A server gives the connections it
    /// accepts rings of this size. Both sides fault the rings in when the connection is
    /// set up, so each connection commits twice this much memory at once (see
    /// [`crate::transport::shm`]); a client does that for rings up to this size, and lets
    /// larger ones fault in as messages reach them. Messages larger than half a ring
    /// travel in pieces.
    pub shm_ring_size: usize,
}

impl Default for ConnectionOptions {
    fn default() -> Self {
        let limits = Limits::default();
        ConnectionOptions {
            spin: Duration::from_micros(50),
            max_frame_size: limits.max_frame_size,
            credits: limits.credits,
            handshake_timeout: Duration::from_secs(5),
            call_timeout: None,
            keepalive: Some(Duration::from_secs(15)),
            keepalive_timeout: Duration::from_secs(15),
            idle_timeout: None,
            shm_ring_size: crate::transport::shm::DEFAULT_RING_CAPACITY,
        }
    }
}

impl ConnectionOptions {
    /// Sets the ring size of shared-memory connections (see
    /// [`ConnectionOptions::shm_ring_size`]).
    pub fn with_shm_ring_size(mut self, bytes: usize) -> Self {
        self.shm_ring_size = bytes;
        self
    }

    /// Sets the spin budget.
    pub fn with_spin(mut self, spin: Duration) -> Self {
        self.spin = spin;
        self
    }

    /// Busy-poll mode: readers never sleep ([`ConnectionOptions::BUSY_POLL`] of spin). The
    /// lowest latency, at the price of a core per busy connection's reader; meant for
    /// shared memory between pinned processes. A caller waiting alone for its reply still
    /// spins on its own thread for at most a millisecond, then leaves the reply to the
    /// reader, so that the other tasks of its thread keep running. (With a finite budget
    /// it spins at most the budget or a millisecond, whichever is longer.)
    pub fn busy_poll(self) -> Self {
        self.with_spin(Self::BUSY_POLL)
    }

    /// The spin budget of busy-poll mode: a year, which is never in practice. (Any larger
    /// budget is treated as this one.)
    pub const BUSY_POLL: Duration = Duration::from_secs(365 * 24 * 3600);

    /// Sets the maximum frame size accepted from the peer.
    pub fn with_max_frame_size(mut self, max_frame_size: u32) -> Self {
        self.max_frame_size = max_frame_size;
        self
    }

    /// Sets the credits granted to the peer.
    pub fn with_credits(mut self, credits: u32) -> Self {
        self.credits = credits;
        self
    }

    /// Sets the handshake timeout.
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// Sets the default call timeout (see [`ConnectionOptions::call_timeout`]).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// Probes a peer silent for `interval`, and declares it dead if it still says nothing
    /// within `timeout` (see [`ConnectionOptions::keepalive`]).
    pub fn with_keepalive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keepalive = Some(interval);
        self.keepalive_timeout = timeout;
        self
    }

    /// Closes connections idle for `timeout` (see [`ConnectionOptions::idle_timeout`]).
    pub fn with_idle_timeout(mut self, timeout: Duration) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// Never probes the peer.
    pub fn without_keepalive(mut self) -> Self {
        self.keepalive = None;
        self
    }

    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_frame_size: self.max_frame_size,
            credits: self.credits,
        }
        .clamped()
    }
}
