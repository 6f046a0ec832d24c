//! Connecting to servers: one connection per endpoint, shared by every proxy behind it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Weak};

use crate::auth::{ClientAuth, ClientTransport};
use crate::connection::{self, Connection};
use crate::error::Error;
use crate::id::ClassId;
use crate::options::ConnectionOptions;
use crate::proxy::Proxy;
use crate::reference::ObjectRef;
use crate::root;
use crate::transport;
use crate::url::{Endpoint, ObjectUrl};

/// Opens and caches connections. All proxies obtained through one `Client` for objects at
/// the same endpoint share one connection (calls on it are multiplexed by call id); a
/// connection that broke is replaced by a new one on the next lookup.
///
/// # Shared or private connections
///
/// The shared, multiplexed connection suits most programs: any number of tasks and threads
/// call through it, calls outstanding together are written and read in batches (one
/// system call for many messages), and a server sees one connection per client process.
/// A call that is alone on its connection is answered fastest: its caller reads its own
/// reply, spinning on the transport, with no hand-off to another task. On a shared
/// connection that happens only while no other call is outstanding.
///
/// [`Client::private`] gives a thread (or task) connections of its own, like DCE's
/// private client sockets: its calls, made one after another, are always alone on their
/// connection and so always take that fastest path, and they never wait behind another
/// thread's traffic (a large payload, a batch). Use private connections for a few
/// latency-critical threads that each make sequential calls, or to spread one process's
/// load over several server workers (a server receives each connection's calls, and runs
/// those that complete without waiting, on one worker at a time); keep the shared one
/// for many concurrent calls, which it batches, and when the number of connections
/// matters.
///
/// # Lifetime
///
/// A connection stays open while its `Client` (any clone) or a proxy or reference made
/// through it is alive, and closes when the last of them is dropped. Objects this side
/// handed to the server over it (a callback the server keeps, to call later) are released
/// when it closes: keep the `Client` or a proxy alive for as long as the server should
/// be able to call them.
///
/// A connection is served by tasks on the tokio runtime it was opened on. When that
/// runtime shuts down (a client kept across runtimes, as tests and short-lived runtimes
/// do), the connection fails: calls on references it handed over end with
/// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable), and a proxy made from a URL
/// opens a new connection on the runtime of its next call.
#[derive(Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

struct ClientInner {
    options: ConnectionOptions,
    auth: ClientAuth,
    /// Where references handed over by third parties may lead (`None`: anywhere).
    handoff_filter: Option<HandoffFilter>,
    /// One slot per endpoint, each opened on its own: a server that is slow to answer
    /// (or unreachable until the handshake timeout) holds up only the callers that want
    /// that endpoint, never those of another.
    connections: std::sync::Mutex<HashMap<Endpoint, Arc<EndpointSlot>>>,
}

/// The connection to one endpoint, if open; its lock is held while opening one, so that
/// callers wanting the same endpoint together open it once.
#[derive(Default)]
struct EndpointSlot {
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
    /// Attempts to open one that have ended so far, and how the last one failed (if it
    /// did): callers that waited for the lock while an attempt failed take its error rather
    /// than make one attempt each, one after another (a server that accepts and never
    /// answers would otherwise keep the k-th of them waiting k handshake timeouts).
    attempts: std::sync::Mutex<(u64, Option<Error>)>,
}

impl EndpointSlot {
    fn attempts(&self) -> std::sync::MutexGuard<'_, (u64, Option<Error>)> {
        self.attempts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// See [`Client::with_handoff_filter`].
type HandoffFilter = Arc<dyn Fn(&Endpoint) -> bool + Send + Sync>;

/// A [`Client`] that does not keep it alive: what a connection remembers of the client
/// that opened it (the client holds its connections).
#[derive(Clone)]
pub(crate) struct WeakClient(Weak<ClientInner>);

impl WeakClient {
    /// The client, if it still exists.
    pub(crate) fn upgrade(&self) -> Option<Client> {
        self.0.upgrade().map(|inner| Client { inner })
    }
}

static GLOBAL: LazyLock<Client> = LazyLock::new(Client::new);

impl Default for Client {
    fn default() -> Self {
        Client::new()
    }
}

impl Client {
    /// A client with default [`ConnectionOptions`].
    pub fn new() -> Client {
        Client::with_options(ConnectionOptions::default())
    }

    /// A client whose connections use `options`.
    pub fn with_options(options: ConnectionOptions) -> Client {
        Client::build(options, ClientAuth::default(), None)
    }

    fn build(
        options: ConnectionOptions,
        auth: ClientAuth,
        handoff_filter: Option<HandoffFilter>,
    ) -> Client {
        Client {
            inner: Arc::new(ClientInner {
                options,
                auth,
                handoff_filter,
                connections: std::sync::Mutex::new(HashMap::new()),
            }),
        }
    }

    /// This client's options with another way to authenticate (default:
    /// [`ClientAuth::peer_credentials`], local transports only). The returned client opens
    /// its own connections.
    pub fn with_auth(self, auth: ClientAuth) -> Client {
        Client::build(
            self.inner.options.clone(),
            auth,
            self.inner.handoff_filter.clone(),
        )
    }

    /// This client, connecting for references handed over by third parties only to the
    /// endpoints `allow` accepts. The returned client opens its own connections.
    ///
    /// A reference to an object in a third process travels as that process's endpoint
    /// and a token (see [`ObjRef`](crate::ObjRef)); its first call connects there and
    /// claims the object. The endpoint is whatever the peer that handed the reference
    /// over wrote, so by default a peer can have this client connect, and
    /// authenticate, anywhere it can reach. `allow` is asked before that first call
    /// connects (even over a connection already open); refused, the call fails with
    /// `PermissionDenied` and nothing is sent to the endpoint. Calls on the object through
    /// references this client resolved or created itself, or that the object's own
    /// server handed to it, are not affected.
    ///
    /// ```
    /// use lanner::{Client, Endpoint};
    ///
    /// // References handed over may lead to this host's shared-memory services only.
    /// let client = Client::new().with_handoff_filter(|endpoint| matches!(endpoint, Endpoint::Shm(_)));
    /// # drop(client);
    /// ```
    ///
    /// `allow` sees the endpoint as the reference wrote it: a TCP host is the name or
    /// address text, not resolved. Prefer allowing known names and addresses over
    /// refusing bad ones (`127.1`, `[::ffff:127.0.0.1]` and a host name that resolves to a
    /// refused address all name the same host), and keep in mind that an allowed name
    /// connects wherever DNS says. A second call replaces the filter rather than adding
    /// to it. The process-wide [`Client::global`] (used by [`crate::connect`]) has no
    /// filter: a program that wants one everywhere makes its own filtered client and
    /// uses it instead.
    ///
    /// A server claims the references its clients hand it through its
    /// [hand-off client](crate::Server::with_handoff_client): give it one with a filter.
    pub fn with_handoff_filter(
        self,
        allow: impl Fn(&Endpoint) -> bool + Send + Sync + 'static,
    ) -> Client {
        Client::build(
            self.inner.options.clone(),
            self.inner.auth.clone(),
            Some(Arc::new(allow)),
        )
    }

    /// Whether this client may connect to `endpoint` to claim a reference handed over by
    /// a third party (see [`Client::with_handoff_filter`]).
    pub(crate) fn may_claim_at(&self, endpoint: &Endpoint) -> bool {
        self.inner
            .handoff_filter
            .as_ref()
            .is_none_or(|allow| allow(endpoint))
    }

    /// A client with this one's options and authentication and connections of its own:
    /// proxies obtained through it use connections that no other client shares (a
    /// reconnection goes through it too). Call it once per thread that wants private
    /// connections and keep the result; see [the type's docs](Client#shared-or-private-connections)
    /// for when that pays.
    ///
    /// ```no_run
    /// # async fn example(client: &lanner::Client) -> Result<(), lanner::Error> {
    /// let private = client.private();
    /// let object = private.resolve("unix:///tmp/app.sock/calc").await?; // its own connection
    /// # drop(object);
    /// # Ok(())
    /// # }
    /// ```
    pub fn private(&self) -> Client {
        Client::build(
            self.inner.options.clone(),
            self.inner.auth.clone(),
            self.inner.handoff_filter.clone(),
        )
    }

    /// The process-wide client used by [`crate::connect`].
    pub fn global() -> &'static Client {
        &GLOBAL
    }

    /// Resolves an object URL (`tcp://host:port/name`, `unix:///path/name`,
    /// `shm://endpoint/name`, `mem://endpoint/name`) to a reference: one round trip on the
    /// endpoint's shared connection (opened if needed).
    ///
    /// The reference remembers the URL: if its connection breaks, a later call reconnects
    /// and resolves the name again (see [`ObjectRef`]).
    pub async fn resolve(&self, url: &str) -> Result<ObjectRef, Error> {
        let url = ObjectUrl::parse(url)?;
        let object = self.resolve_url(&url).await?;
        Ok(object.found_at(self.clone(), url))
    }

    /// Resolves `url` on the endpoint's shared connection (opened if needed or broken).
    pub(crate) async fn resolve_url(&self, url: &ObjectUrl) -> Result<ObjectRef, Error> {
        let connection = self.connection(&url.endpoint).await?;
        root::resolve(&connection, &url.name)
            .await
            .map_err(|e| Error::new(e.kind(), format!("resolving {url}: {}", e.message())))
    }

    /// Creates an instance of class `class` on the server at `endpoint` (a URL without an
    /// object name: `tcp://host:port`, `unix:///path`, `shm://name`, `mem://name`) and
    /// returns a proxy for its interface `P`: one round trip, like COM's
    /// `CoCreateInstanceEx`. The instance lives while references to it do. An unknown
    /// class is `NotFound`; a class whose instances lack `P` is `Unimplemented`.
    pub async fn create<P: Proxy>(&self, endpoint: &str, class: ClassId) -> Result<P, Error> {
        let endpoint = Endpoint::parse(endpoint)?;
        let connection = self.connection(&endpoint).await?;
        root::create(&connection, class, P::INTERFACE_ID)
            .await
            .map_err(|e| {
                Error::new(
                    e.kind(),
                    format!("creating a {class} at {endpoint}: {}", e.message()),
                )
            })?
            .query::<P>()
    }

    /// Resolves an object URL and returns a proxy for interface `P` of that object.
    pub async fn connect<P: Proxy>(&self, url: &str) -> Result<P, Error> {
        self.resolve(url).await?.query::<P>()
    }

    /// The shared connection to `endpoint`, opened if needed or broken.
    pub(crate) async fn connection(&self, endpoint: &Endpoint) -> Result<Arc<Connection>, Error> {
        let slot = self.endpoint_slot(endpoint);
        // Declared before the slot's lock is taken, so dropped after it is released:
        // however this ends (an error, or the caller giving up while it waits or opens).
        let _forget = ForgetIfUnused {
            client: self,
            endpoint,
            slot: &slot,
        };
        let attempts_before = slot.attempts().0;
        let mut current = slot.connection.lock().await;
        if let Some(connection) = current.as_ref().filter(|c| c.usable()) {
            return Ok(connection.clone());
        }
        if let (ended, Some(failed)) = &*slot.attempts()
            && *ended != attempts_before
        {
            // An attempt that ended while this caller waited failed: its answer is this
            // caller's too.
            return Err(failed.clone());
        }
        let opened = self.open(endpoint).await;
        // A broken connection is not kept for the next caller either.
        *current = opened.as_ref().ok().cloned();
        let mut attempts = slot.attempts();
        attempts.0 += 1;
        attempts.1 = opened.as_ref().err().cloned();
        drop(attempts);
        opened
    }

    /// The slot of `endpoint`, made if there is none.
    fn endpoint_slot(&self, endpoint: &Endpoint) -> Arc<EndpointSlot> {
        let mut connections = lock(&self.inner.connections);
        match connections.get(endpoint) {
            Some(slot) => slot.clone(),
            None => {
                let slot = Arc::new(EndpointSlot::default());
                connections.insert(endpoint.clone(), slot.clone());
                slot
            }
        }
    }

    /// Drops `endpoint`'s slot if it holds no connection and nobody else waits on it, so
    /// that endpoints that could not be reached (named by references from anywhere) do
    /// not accumulate.
    fn forget_if_unused(&self, endpoint: &Endpoint, slot: &Arc<EndpointSlot>) {
        let mut connections = lock(&self.inner.connections);
        // Only the map and `slot` hold it: anyone else would have cloned it under this
        // lock first.
        let unused = connections
            .get(endpoint)
            .is_some_and(|kept| Arc::ptr_eq(kept, slot))
            && Arc::strong_count(slot) == 2
            && slot
                .connection
                .try_lock()
                .is_ok_and(|connection| connection.is_none());
        if unused {
            connections.remove(endpoint);
        }
    }

    /// Opens a new connection to `endpoint`: transport and handshake together within
    /// the handshake timeout.
    async fn open(&self, endpoint: &Endpoint) -> Result<Arc<Connection>, Error> {
        let options = &self.inner.options;
        // Bounded: a TCP connect to an unreachable host would otherwise wait for the
        // kernel's SYN retries (minutes).
        let deadline = connection::HandshakeDeadline::starting_now(options);
        let auth = &self.inner.auth;
        let opening = async {
            match auth.transport_for(endpoint)? {
                ClientTransport::Plain => transport::connect_with(endpoint, options).await,
                ClientTransport::Tls(config, name) => {
                    transport::connect_tls(endpoint, config.clone(), name).await
                }
            }
            .map_err(|e| Error::io(&format!("connecting to {endpoint}"), &e))
        };
        let transport = deadline.bound(opening).await.ok_or_else(|| {
            Error::unavailable(format!(
                "connecting to {endpoint}: no answer within {:?}",
                options.handshake_timeout
            ))
        })??;
        auth.check_server(endpoint, transport.credentials)?;
        let opened_by = WeakClient(Arc::downgrade(&self.inner));
        connection::connect(
            transport,
            options,
            deadline,
            auth.authenticator(),
            connection::Onward {
                endpoint: endpoint.clone(),
                client: opened_by,
            },
        )
        .await
    }
}

/// Drops an endpoint's slot when dropped, if it is unused then (see
/// [`Client::forget_if_unused`]).
struct ForgetIfUnused<'a> {
    client: &'a Client,
    endpoint: &'a Endpoint,
    slot: &'a Arc<EndpointSlot>,
}

impl Drop for ForgetIfUnused<'_> {
    fn drop(&mut self) {
        self.client.forget_if_unused(self.endpoint, self.slot);
    }
}

/// The endpoint map's lock (nothing panics while holding it; a poisoned one is used as
/// it is).
fn lock(
    connections: &std::sync::Mutex<HashMap<Endpoint, Arc<EndpointSlot>>>,
) -> std::sync::MutexGuard<'_, HashMap<Endpoint, Arc<EndpointSlot>>> {
    connections.lock().unwrap_or_else(|e| e.into_inner())
}

/// Resolves an object URL with the process-wide [`Client`] and returns a proxy for
/// interface `P`:
///
/// ```no_run
/// # #[lanner::interface]
/// # pub trait Calculator {
/// #     async fn add(&self, a: i64, b: i64) -> Result<i64, lanner::Error>;
/// # }
/// # #[tokio::main]
/// # async fn main() -> Result<(), lanner::Error> {
/// let calc: CalculatorProxy = lanner::connect("unix:///tmp/calc.sock/calc").await?;
/// # Ok(())
/// # }
/// ```
///
/// The process-wide client authenticates with peer credentials, which work on `unix://`,
/// `shm://` and `mem://` only. For `tcp://`, make a client that says how to authenticate
/// and connect through it:
///
/// ```no_run
/// # #[lanner::interface]
/// # pub trait Calculator {
/// #     async fn add(&self, a: i64, b: i64) -> Result<i64, lanner::Error>;
/// # }
/// # #[tokio::main]
/// # async fn main() -> Result<(), lanner::Error> {
/// # let secret = [0u8; 32];
/// let key = lanner::PreSharedKey::new("calc", secret)?; // the server's key
/// let client = lanner::Client::new().with_auth(lanner::ClientAuth::psk(key));
/// let calc: CalculatorProxy = client.connect("tcp://127.0.0.1:7000/calc").await?;
/// # Ok(())
/// # }
/// ```
pub async fn connect<P: Proxy>(url: &str) -> Result<P, Error> {
    Client::global().connect::<P>(url).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn endpoints(client: &Client) -> usize {
        lock(&client.inner.connections).len()
    }

    #[tokio::test]
    async fn endpoints_that_could_not_be_opened_are_not_kept() {
        let client = Client::with_options(
            ConnectionOptions::default().with_handshake_timeout(Duration::from_secs(3600)),
        );
        let dir = std::env::temp_dir();
        let pid = std::process::id();

        // Nobody listens there: the attempt fails.
        let missing = Endpoint::parse(&format!(
            "unix://{}",
            dir.join(format!("lanner-nobody-{pid}.sock")).display()
        ))
        .unwrap();
        assert!(client.connection(&missing).await.is_err());
        assert_eq!(endpoints(&client), 0);

        // A listener that never answers: the caller gives up while the handshake waits,
        // and a second caller while it waits for the first.
        let path = dir.join(format!("lanner-mute-{pid}.sock"));
        let _ = std::fs::remove_file(&path);
        let _mute = tokio::net::UnixListener::bind(&path).unwrap();
        let silent = Endpoint::parse(&format!("unix://{}", path.display())).unwrap();
        let (first, second) = tokio::join!(
            tokio::time::timeout(Duration::from_millis(50), client.connection(&silent)),
            tokio::time::timeout(Duration::from_millis(100), client.connection(&silent)),
        );
        assert!(first.is_err() && second.is_err());
        assert_eq!(endpoints(&client), 0);
        let _ = std::fs::remove_file(&path);
    }
}
