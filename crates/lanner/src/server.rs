//! Serving objects: publish them under names, listen on endpoints.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use lanner_proto::Status;
use tokio::task::JoinHandle;

use crate::access::AccessPolicy;
use crate::auth::ServerAuth;
use crate::call::Reply;
use crate::client::Client;
use crate::connection::{self, Admission, Connection};
use crate::error::{Error, ErrorKind};
use crate::handoff::Handoffs;
use crate::id::{ClassId, InterfaceId};
use crate::object::Object;
use crate::occasional::occasionally;
use crate::options::ConnectionOptions;
use crate::transport::Listener;
use crate::url::Endpoint;

/// Makes a new instance of a registered class.
type Factory = Arc<dyn Fn() -> Object + Send + Sync>;

/// A registered class: its factory, and the interfaces its instances implement, learned
/// from the first one made (a factory is opaque until it runs; a class's instances all
/// implement the same interfaces, as a COM class's do).
struct Class {
    factory: Factory,
    interfaces: std::sync::OnceLock<Vec<InterfaceId>>,
}

/// Published names → objects, and registered classes → factories, shared by all of a
/// server's connections.
#[derive(Default)]
pub(crate) struct NameRegistry {
    names: RwLock<Names>,
    classes: RwLock<HashMap<ClassId, Arc<Class>>>,
    /// Objects clients handed on to third parties, waiting for their tokens.
    pub(crate) handoffs: Arc<Handoffs>,
}

/// Published names, both ways.
#[derive(Default)]
struct Names {
    objects: HashMap<String, Object>,
    /// The name each published object was last published under, by object identity: an
    /// object handed out without its name (a result, a reference) obeys its name's rules.
    by_identity: HashMap<usize, String>,
}

impl NameRegistry {
    /// A new instance of `class`, if it is registered.
    pub(crate) fn instantiate(&self, class: ClassId) -> Option<Object> {
        let class = self.class(class)?;
        let object = (class.factory)();
        class
            .interfaces
            .get_or_init(|| object.interfaces().to_vec());
        Some(object)
    }

    /// Whether instances of `class` are known not to implement `interface` (known once
    /// one was made): a request for it is refused without running the factory.
    pub(crate) fn class_lacks(&self, class: ClassId, interface: InterfaceId) -> bool {
        self.class(class).is_some_and(|class| {
            class
                .interfaces
                .get()
                .is_some_and(|interfaces| !interfaces.contains(&interface))
        })
    }

    fn class(&self, class: ClassId) -> Option<Arc<Class>> {
        self.classes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&class)
            .cloned()
    }

    pub(crate) fn get(&self, name: &str) -> Option<Object> {
        self.names
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .objects
            .get(name)
            .cloned()
    }

    /// The name `object` is published under, if it is.
    pub(crate) fn name_of(&self, object: &Object) -> Option<String> {
        self.names
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_identity
            .get(&object.identity())
            .cloned()
    }

    fn insert(&self, name: String, object: Object) -> Option<Object> {
        let mut names = self.names.write().unwrap_or_else(|e| e.into_inner());
        let identity = object.identity();
        names.by_identity.insert(identity, name.clone());
        let previous = names.objects.insert(name, object);
        // The same object published again under the same name: it keeps that name, as
        // the one it was last published under (forgetting it would pick any other name
        // it has).
        if let Some(previous) = previous.as_ref().filter(|p| p.identity() != identity) {
            names.forget_identity(previous);
        }
        previous
    }

    fn remove(&self, name: &str) -> Option<Object> {
        let mut names = self.names.write().unwrap_or_else(|e| e.into_inner());
        let removed = names.objects.remove(name);
        if let Some(removed) = &removed {
            names.forget_identity(removed);
        }
        removed
    }
}

impl Names {
    /// `object` left a name: forget its identity unless it is still published elsewhere.
    fn forget_identity(&mut self, object: &Object) {
        let identity = object.identity();
        match self.objects.iter().find(|(_, o)| o.identity() == identity) {
            Some((name, _)) => {
                let name = name.clone();
                self.by_identity.insert(identity, name);
            }
            None => {
                self.by_identity.remove(&identity);
            }
        }
    }
}

/// A Lanner server: a set of published objects, reachable on any number of endpoints.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use lanner::{Object, Server};
/// # #[lanner::interface]
/// # pub trait Calculator {
/// #     async fn add(&self, a: i64, b: i64) -> Result<i64, lanner::Error>;
/// # }
/// # struct MyCalc;
/// # impl Calculator for MyCalc {
/// #     async fn add(&self, a: i64, b: i64) -> Result<i64, lanner::Error> { Ok(a + b) }
/// # }
/// # #[tokio::main]
/// # async fn main() -> Result<(), lanner::Error> {
/// let server = Server::new();
/// server.publish("calc", Object::new(CalculatorStub::new(Arc::new(MyCalc))));
/// // Serves until `listening` is dropped.
/// let listening = server.listen("unix:///tmp/calc.sock").await?;
/// println!("serving at {}", listening.endpoint().object_url("calc"));
/// # Ok(())
/// # }
/// ```
///
/// The default authentication, peer credentials, works on `unix://`, `shm://` and
/// `mem://` only; to listen on `tcp://`, say how clients authenticate first
/// (`Server::new().with_auth(ServerAuth::psk(key))`, see [`Server::with_auth`] and
/// [`ServerAuth`]).
#[derive(Clone)]
pub struct Server {
    names: Arc<NameRegistry>,
    options: ConnectionOptions,
    max_connections: usize,
    max_handshakes: usize,
    calls: Arc<CallLimit>,
    auth: ServerAuth,
    policy: Option<Arc<AccessPolicy>>,
}

impl Default for Server {
    fn default() -> Self {
        Server::new()
    }
}

impl Server {
    /// A server with default [`ConnectionOptions`].
    pub fn new() -> Server {
        Server::with_options(ConnectionOptions::default())
    }

    /// A server whose connections use `options`.
    pub fn with_options(options: ConnectionOptions) -> Server {
        Server {
            names: Arc::new(NameRegistry::default()),
            options,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_handshakes: DEFAULT_MAX_HANDSHAKES,
            calls: Arc::new(CallLimit {
                max: DEFAULT_MAX_SUSPENDED_CALLS,
                running: AtomicUsize::new(0),
            }),
            auth: ServerAuth::default(),
            policy: None,
        }
    }

    /// Sets how clients authenticate (default: [`ServerAuth::peer_credentials`], which
    /// works on local transports only; listening on TCP then fails until a mechanism for
    /// TCP is given). Set it before listening.
    pub fn with_auth(mut self, auth: ServerAuth) -> Server {
        self.auth = auth;
        self
    }

    /// Sets which principals may call what (see [`AccessPolicy`]). Without a policy, every
    /// authenticated client may call every object it can reach. Set it before listening;
    /// listening fails with `InvalidArgument` if a name in it means nothing (see
    /// [`AccessPolicy::check`]).
    pub fn with_access(mut self, policy: AccessPolicy) -> Server {
        self.policy = Some(Arc::new(policy));
        self
    }

    /// Sets how many calls may be suspended in this server's methods at once, across all
    /// its connections (default 100,000). A call that finishes without waiting does not
    /// count; one that arrives while the server is full is answered at once with
    /// `Overloaded` (not executed). Set it before listening.
    pub fn with_max_suspended_calls(mut self, max: usize) -> Server {
        self.calls = Arc::new(CallLimit {
            max,
            running: AtomicUsize::new(0),
        });
        self
    }

    /// Sets how many connections each endpoint this server listens on keeps open at once
    /// (default 10,000). A client beyond that is refused at its handshake with
    /// `Overloaded` ("too many connections"), which costs the server one small read and
    /// one small write.
    pub fn with_max_connections(mut self, max_connections: usize) -> Server {
        self.max_connections = max_connections;
        self
    }

    /// Sets how long an object a client hands on to a third party waits for the third
    /// party to claim it (default 30 s). A client passing a reference to this server's
    /// object to another process grants it a token; the object stays alive for that long
    /// even if nobody else holds it, and is released if the token is never redeemed.
    pub fn with_handoff_lease(self, lease: Duration) -> Server {
        self.names.handoffs.set_lease(lease);
        self
    }

    /// Sets the client this server's connections use to reach the servers of object
    /// references handed to them by third parties (default: [`Client::global`]). Give one
    /// configured with the [`crate::ClientAuth`] those servers expect.
    pub fn with_handoff_client(self, client: Client) -> Server {
        self.names.handoffs.set_client(client);
        self
    }

    /// Sets how many connections each endpoint may have in their handshake at once
    /// (default 256). A connection beyond it makes room by dropping the oldest handshake
    /// still under way: clients that connect and say nothing cannot make the server hold
    /// more sockets and tasks than that, nor keep honest clients waiting behind them (an
    /// honest handshake is over in a round trip or two, long before that many newer
    /// connections arrive). Each handshake is also bounded by
    /// [`ConnectionOptions::handshake_timeout`].
    pub fn with_max_pending_handshakes(mut self, max: usize) -> Server {
        self.max_handshakes = max.max(1);
        self
    }

    /// Publishes `object` as `name`; clients reach it at `<endpoint>/<name>`. Returns the
    /// object previously published under that name, if any.
    pub fn publish(&self, name: impl Into<String>, object: Object) -> Option<Object> {
        self.names.insert(name.into(), object)
    }

    /// Registers class `class`: a client's [`crate::Client::create`] of it calls `factory`
    /// for a new object and hands the client a reference to it (activation, like COM's
    /// `CoCreateInstanceEx`: one round trip). The instance lives as long as references to
    /// it do. Every instance must implement the same interfaces, as a COM class's do: the
    /// server learns them from the first instance and refuses, without calling the
    /// factory, a request for one they lack. Returns whether a factory was registered for
    /// `class` already (it is replaced).
    pub fn register_class(
        &self,
        class: ClassId,
        factory: impl Fn() -> Object + Send + Sync + 'static,
    ) -> bool {
        self.names
            .classes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                class,
                Arc::new(Class {
                    factory: Arc::new(factory),
                    interfaces: std::sync::OnceLock::new(),
                }),
            )
            .is_some()
    }

    /// Withdraws a name. Clients already holding a reference keep it.
    pub fn unpublish(&self, name: &str) -> Option<Object> {
        self.names.remove(name)
    }

    /// Starts accepting connections on `endpoint` (`tcp://host:port`, `unix:///path`,
    /// `shm://name`, `mem://name`). Runs until the returned [`Listening`] is dropped or
    /// closed: keep it (`let _listening = server.listen(…).await?;`) for as long as the
    /// server should accept connections. Fails with `Unauthenticated` if no client could
    /// authenticate there with this server's [`ServerAuth`].
    #[must_use = "the listener stops when the returned `Listening` is dropped: keep it (`let _listening = ...`) for as long as the server should accept connections"]
    pub async fn listen(&self, endpoint: &str) -> Result<Listening, Error> {
        let endpoint = Endpoint::parse(endpoint)?;
        self.auth.check_endpoint(&endpoint)?;
        if let Some(policy) = &self.policy {
            policy.check()?;
        }
        let mut listener = Listener::bind(&endpoint)
            .await
            .map_err(|e| Error::io(&format!("listening on {endpoint}"), &e))?;
        listener.apply(&self.options).map_err(|e| {
            Error::new(
                crate::ErrorKind::InvalidArgument,
                format!("listening on {endpoint}: {e}"),
            )
        })?;
        let tls = match (&endpoint, self.auth.tls_config()) {
            (Endpoint::Tcp(_), Some(config)) => {
                listener
                    .set_tls(config.clone())
                    .map_err(|e| Error::io("setting up TLS", &e))?;
                true
            }
            _ => false,
        };
        let endpoint = listener
            .local_endpoint()
            .map_err(|e| Error::io("reading the bound address", &e))?;
        let names = self.names.clone();
        let options = self.options.clone();
        let max_connections = self.max_connections;
        let handshakes = crate::handshake_slots::HandshakeSlots::new(self.max_handshakes);
        let calls = self.calls.clone();
        let auth = self.auth.clone();
        let policy = self.policy.clone();
        let connections = Arc::new(Connections::default());
        let accepted = connections.clone();
        let task = tokio::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok(incoming) => {
                        let names = names.clone();
                        let options = options.clone();
                        let accepted = accepted.clone();
                        let calls = calls.clone();
                        let auth = auth.clone();
                        let policy = policy.clone();
                        let open = accepted.count();
                        let evicted = handshakes.start(|handshake| tokio::spawn(async move {
                            let peer = incoming.peer().to_owned();
                            // One deadline for the TLS handshake and Lanner's together.
                            let deadline = connection::HandshakeDeadline::starting_now(&options);
                            let transport = match deadline.bound(incoming.establish()).await {
                                Some(Ok(transport)) => transport,
                                Some(Err(error)) => {
                                    tracing::warn!(%peer, %error, "connection setup failed");
                                    return;
                                }
                                None => {
                                    tracing::warn!(%peer, "connection setup timed out");
                                    return;
                                }
                            };
                            if open >= max_connections {
                                tracing::warn!(%peer, open, "too many connections: refused");
                                let reason = format!(
                                    "too many connections ({open}, the server allows {max_connections})"
                                );
                                let status = lanner_proto::Status::Overloaded;
                                connection::refuse(transport, deadline, status, &reason).await;
                                return;
                            }
                            let subject = tls.then(|| transport.certificate_subject.clone());
                            let admission = Admission {
                                authenticator: auth.authenticator(transport.credentials, subject),
                                policy,
                                names,
                                calls,
                            };
                            let accepted_now =
                                connection::accept(transport, &options, deadline, admission).await;
                            drop(handshake);
                            match accepted_now {
                                Ok(connection) => accepted.add(&connection, max_connections),
                                Err(error) if error.kind() == ErrorKind::Unauthenticated => {
                                    tracing::warn!(%peer, %error, "authentication failed");
                                }
                                Err(error) => tracing::info!(%peer, %error, "connection refused"),
                            }
                        }));
                        if evicted {
                            occasionally!(
                                warn,
                                "every handshake slot was taken: the oldest handshake was dropped"
                            );
                        }
                    }
                    Err(error) => {
                        occasionally!(warn, %error, "accept failed");
                        // Out of descriptors or memory, retrying at once would fail the same
                        // way until some are freed; any other failure is most often the one
                        // connection's (aborted before it was taken), but a broken listener
                        // would fail for ever, so it gets a pause too.
                        let pause = if out_of_resources(&error) { 10 } else { 1 };
                        tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                    }
                }
            }
        });
        Ok(Listening {
            endpoint,
            task,
            connections,
        })
    }
}

/// The connections a listener accepted, for a graceful shutdown.
#[derive(Default)]
struct Connections {
    live: Mutex<Vec<Weak<Connection>>>,
    /// The listener shut down: a handshake that finishes now is closed at once.
    shut: std::sync::atomic::AtomicBool,
}

impl Connections {
    /// Lists a connection whose handshake has just completed, or closes it at once if
    /// `max` connections are open already. The count taken as a connection was accepted
    /// (which refuses it before its handshake, telling its client why) misses the
    /// connections whose handshakes run at the same time: without this second look,
    /// every one of a burst of connections accepted together was admitted, whatever
    /// `max`. Checked only now, once the client has authenticated, so that connections
    /// that never finish their handshake hold no place under the limit.
    fn add(&self, connection: &Arc<Connection>, max: usize) {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        if self.shut.load(Ordering::SeqCst) {
            drop(live);
            connection.close(lanner_proto::Status::Unavailable, "the server shut down");
            return;
        }
        live.retain(|c| c.upgrade().is_some_and(|c| c.holds_resources()));
        let open = live.len();
        if open >= max {
            drop(live);
            tracing::warn!(peer = %connection.peer(), open, "too many connections: closed");
            let reason = format!("too many connections ({open}, the server allows {max})");
            connection.close(lanner_proto::Status::Overloaded, &reason);
            return;
        }
        live.push(Arc::downgrade(connection));
    }

    /// The open connections, taken once and for all: later ones are refused.
    fn shut_down(&self) -> Vec<Arc<Connection>> {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        self.shut.store(true, Ordering::SeqCst);
        live.iter()
            .filter_map(Weak::upgrade)
            .filter(|c| c.closed().is_none())
            .collect()
    }

    /// Connections still open (ones whose handshake is under way are not counted: each is
    /// checked again as its handshake completes, see [`Connections::add`]). No lock per
    /// connection, only its atomic flag: this runs on every accept. A connection whose peer sent GOAWAY still counts (and
    /// is still shut down) until it has ended: its peer may go on calling. One that has
    /// ended counts until it has let go of its socket and queued answers (a lingering
    /// close holds them up to `CLOSE_LINGER` for a slow reader): a peer that gets its
    /// connections closed and reads nothing would otherwise make the server hold any number
    /// of them, whatever the limit.
    fn count(&self) -> usize {
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|c| c.upgrade().is_some_and(|c| c.holds_resources()));
        live.len()
    }
}

/// What a graceful shutdown ([`Listening::shutdown`]) found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Connections that were open when the shutdown began.
    pub connections: usize,
    /// Calls still running when the grace period ended (their callers get `Unavailable`).
    pub unfinished_calls: u32,
}

/// A running listener. Dropping it (or [`Listening::close`]) stops accepting new
/// connections; connections already open keep working. Bind it to a name that lives as
/// long as the server should accept (`let _listening = …`; `let _ = …` drops it at once).
#[must_use = "dropping a `Listening` stops accepting connections at once: keep it (`let _listening = ...`) for as long as the server should accept connections"]
pub struct Listening {
    endpoint: Endpoint,
    task: JoinHandle<()>,
    connections: Arc<Connections>,
}

impl std::fmt::Debug for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listening")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Listening {
    /// The endpoint actually bound (a TCP port of 0 is replaced by the real port).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Stops accepting connections and releases the endpoint: once this returns, the
    /// endpoint can be listened on again. (Dropping a `Listening` stops it too, but the
    /// endpoint is released only when the runtime gets to cancel the accepting task.)
    pub async fn close(mut self) {
        self.stop_accepting().await;
    }

    async fn stop_accepting(&mut self) {
        self.task.abort();
        let _ = (&mut self.task).await;
    }

    /// Shuts down gracefully: stops accepting, tells every client connected through this
    /// listener to make no new calls (GOAWAY: their new calls fail at once with
    /// `Unavailable`, never sent, and `Client::connect` opens a new connection), waits up
    /// to `grace` for the calls already running to finish and be answered, and for the
    /// requests clients sent before they read the GOAWAY to arrive (each client answers a
    /// PING sent after the GOAWAY; this wait is bounded by 2 s as well, for a client that
    /// does not answer), and for the answers to be written (a client that reads slowly
    /// gets the rest of the grace period; one that reads nothing holds the shutdown up
    /// that long), then closes the connections. Calls still running at the end are cut
    /// off: their callers get `Unavailable` (may have executed). A `grace` too long to be
    /// a date (`Duration::MAX`) waits as long as calls run and answers are written.
    pub async fn shutdown(mut self, grace: Duration) -> ShutdownReport {
        self.stop_accepting().await;
        // A client whose handshake is still under way is closed when it completes.
        let connections = self.connections.shut_down();
        for connection in &connections {
            connection.go_away();
        }
        let started = Instant::now();
        let deadline = crate::marshal::deadline_after(grace);
        let unfinished = loop {
            // Whether each client has answered the PING after the GOAWAY, read before the
            // calls are counted: a request that arrived before the answer is counted (under
            // the state lock) before the answer is noted, so it is seen by the count.
            let all_heard = connections.iter().all(|c| c.goaway_heard())
                || started.elapsed() >= crate::connection::GOAWAY_ANSWER_WAIT;
            let running: u32 = connections.iter().map(|c| c.calls_being_served()).sum();
            // Answers still being written to a slow reader: the CLOSE after them would
            // give them only its linger.
            let writing = connections.iter().any(|c| c.writes_pending());
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if (running == 0 && all_heard && !writing) || left.is_some_and(|left| left.is_zero()) {
                break running;
            }
            tokio::time::sleep(left.map_or(SHUTDOWN_POLL, |left| SHUTDOWN_POLL.min(left))).await;
        };
        for connection in &connections {
            connection.close(lanner_proto::Status::Unavailable, "the server shut down");
        }
        ShutdownReport {
            connections: connections.len(),
            unfinished_calls: unfinished,
        }
    }
}

/// Whether an accept failed for want of descriptors or memory (which only time frees), not
/// because of the one connection it was taking (aborted before it was accepted, say).
fn out_of_resources(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// A server's bound on calls suspended in its methods (those that did not finish on their
/// first poll): each holds its arguments and its task until it finishes. Calls that finish
/// at once are not counted, so checking the bound costs one relaxed load per call.
pub(crate) struct CallLimit {
    max: usize,
    running: AtomicUsize,
}

impl CallLimit {
    /// No room for another call.
    pub(crate) fn is_full(&self) -> bool {
        self.running.load(Ordering::Relaxed) >= self.max
    }

    /// The answer to a call refused because the limit is reached.
    pub(crate) fn refusal(&self) -> Reply {
        let message = format!(
            "the server is running its maximum of {} suspended calls; try again later",
            self.max
        );
        Reply::status(Status::Overloaded, &message)
    }

    /// Counts a call that is suspended until the returned guard drops.
    pub(crate) fn suspend(limit: Arc<CallLimit>) -> SuspendedCall {
        limit.running.fetch_add(1, Ordering::Relaxed);
        SuspendedCall(limit)
    }
}

/// One suspended call, counted until dropped.
pub(crate) struct SuspendedCall(Arc<CallLimit>);

impl Drop for SuspendedCall {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Connections per listening endpoint unless [`Server::with_max_connections`] says
/// otherwise.
const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Connections in their handshake per listening endpoint unless
/// [`Server::with_max_pending_handshakes`] says otherwise.
const DEFAULT_MAX_HANDSHAKES: usize = 256;

/// Suspended calls per server unless [`Server::with_max_suspended_calls`] says otherwise.
const DEFAULT_MAX_SUSPENDED_CALLS: usize = 100_000;

/// How often a shutdown looks whether the last calls have finished.
const SHUTDOWN_POLL: Duration = Duration::from_millis(2);

impl Drop for Listening {
    fn drop(&mut self) {
        self.task.abort();
    }
}
