//! Connection setup: the server hands each client a fresh region over a Unix socket
//! (see [`lanner_shm::handoff`]). The client gives up after [`SETUP_TIMEOUT`]. The server
//! reads nothing from the client during setup, so a client that connects and stalls
//! costs it nothing but the socket.
//!
//! No descriptor may travel over a connection's sockets but the offer's, and one that
//! does may be slow to close (see [`lanner_shm::doorbell`]). The listener refuses them
//! where the kernel can (`SO_PASSRIGHTS`, Linux 6.16; accepted sockets inherit it), and so
//! does the client once it has the offer. Wherever one could still be queued, the socket
//! is closed on the closer thread ([`lanner_shm::closer`]), never on a runtime thread:
//! the doorbells and waiters do so, and so does the client's setup socket until it
//! becomes the data doorbell.
//!
//! The descriptors of an offer the client has not read yet are charged to the server's
//! user, and enough of them make every later offer fail (`ETOOMANYREFS`): the listener
//! counts the offers not taken yet per client uid and refuses a connection beyond
//! [`lanner_shm::offers::MAX_UNTAKEN_OFFERS_PER_UID`], or when its table is full, before
//! sending any (see [`lanner_shm::offers`]). Such a client sees the server close without an offer.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use lanner_shm::closer;
use lanner_shm::doorbell::Doorbell;
use lanner_shm::handoff;
use lanner_shm::offers::UntakenOffers;
use lanner_shm::region::{Region, Side};
use lanner_shm::sys::{self, PeerCredentials};
use tokio::io::Interest;
use tokio::net::{UnixListener, UnixStream};

use super::sink::ShmSink;
use super::source::ShmSource;
use super::waiter::{ClosedApart, Waiter};
use super::{DEFAULT_RING_CAPACITY, IN_PLACE_MIN, socket_name};
use crate::occasional::occasionally;
use crate::transport::Transport;

/// How long a client waits for the server's setup message.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(5);

fn address(name: &str) -> io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(socket_name(name).as_bytes())
}

/// Accepts shared-memory connections made to `shm://name`.
#[derive(Debug)]
pub struct ShmListener {
    listener: UnixListener,
    name: String,
    ring_capacity: usize,
    /// The offers sent that their clients have not taken yet.
    offers: UntakenOffers,
}

impl ShmListener {
    /// Listens on `shm://name`. Fails with `AddrInUse` if another process (or listener)
    /// holds the name; the name is released when the listener is dropped.
    pub fn bind(name: &str) -> io::Result<ShmListener> {
        let listener = std::os::unix::net::UnixListener::bind_addr(&address(name)?)?;
        if !sys::refuse_passed_descriptors(listener.as_fd())? {
            tracing::debug!(
                name,
                "this kernel cannot refuse descriptors on shm:// sockets (SO_PASSRIGHTS, \
                 Linux 6.16): any a client passes are closed on a thread of their own"
            );
        }
        listener.set_nonblocking(true)?;
        Ok(ShmListener {
            listener: UnixListener::from_std(listener)?,
            name: name.to_owned(),
            ring_capacity: DEFAULT_RING_CAPACITY,
            offers: UntakenOffers::new(),
        })
    }

    /// The name this listener is bound to.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Gives connections accepted from now on rings of `capacity` bytes each way (a power
    /// of two from 4 KiB to 1 GiB; `InvalidInput` otherwise). Default
    /// [`DEFAULT_RING_CAPACITY`].
    pub fn set_ring_capacity(&mut self, capacity: usize) -> io::Result<()> {
        lanner_shm::region::check_capacity(capacity)?;
        self.ring_capacity = capacity;
        Ok(())
    }

    /// The next connection: creates its region and hands it to the client. A client that
    /// fails its setup (it hung up already, say) is logged and skipped, and so is one
    /// refused because its user's clients hold too many offers not taken yet (see the
    /// module's docs): only a failure of the listener itself is an error. Waiting, it
    /// checks every [`lanner_shm::offers::SWEEP_INTERVAL`] which of those offers were
    /// taken since.
    pub async fn accept(&mut self) -> io::Result<Transport> {
        loop {
            let accepted = match self.offers.next_sweep() {
                None => self.listener.accept().await,
                Some(at) => {
                    let at = tokio::time::Instant::from_std(at);
                    match tokio::time::timeout_at(at, self.listener.accept()).await {
                        Ok(accepted) => accepted,
                        Err(_) => {
                            self.offers.sweep();
                            continue;
                        }
                    }
                }
            };
            let (stream, _) = accepted?;
            match self.set_up(stream) {
                Ok(Some(transport)) => return Ok(transport),
                Ok(None) => {}
                Err(error) => {
                    tracing::info!(name = %self.name, %error, "shared-memory setup failed")
                }
            }
        }
    }

    /// Sets up the connection `stream`; `None` if its client is refused (the socket is then
    /// shut down and closed on the closer thread, the offer never sent).
    fn set_up(&mut self, stream: UnixStream) -> io::Result<Option<Transport>> {
        let data = Doorbell::new(OwnedFd::from(stream.into_std()?));
        // Inherited from the listener, except by a connection made before the listener
        // refused descriptors: whatever that one queued meanwhile, the drains catch.
        sys::refuse_passed_descriptors(data.as_fd())?;
        let credentials = sys::peer_credentials(data.as_fd())?;
        let offer = self
            .offers
            .offer(data.as_fd(), credentials.uid, self.ring_capacity)?;
        let (region, space) = match offer {
            Ok(offered) => offered,
            Err(refusal) => {
                occasionally!(
                warn,
                name = %self.name,
                pid = credentials.pid,
                uid = credentials.uid,
                %refusal,
                    "shared-memory connection refused before its offer"
                );
                return Ok(None);
            }
        };
        let space = Doorbell::new(space);
        let peer = format!(
            "shm://{} (client pid {}, uid {})",
            self.name, credentials.pid, credentials.uid
        );
        transport(
            Side::Server,
            region,
            Bells { data, space },
            peer,
            Some(credentials),
            usize::MAX,
        )
        .map(Some)
    }
}

impl Drop for ShmListener {
    /// Connections not accepted yet are closed with the listener, and so are the
    /// descriptors a client queued on one (on a kernel that does not refuse them): they
    /// are accepted first and closed on the closer thread. The listener itself is closed
    /// here, so that its name is free again when the drop returns. The sockets kept for
    /// offers not taken yet go on the closer thread too (the offers themselves stay with
    /// their clients until read or closed).
    fn drop(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        // Bounded: clients may keep connecting meanwhile.
        for _ in 0..MAX_PENDING_ON_DROP {
            let Poll::Ready(Ok((stream, _))) = self.listener.poll_accept(&mut cx) else {
                break;
            };
            if let Ok(stream) = stream.into_std() {
                closer::close_later([OwnedFd::from(stream)]);
            }
        }
    }
}

/// Pending connections a dropped [`ShmListener`] accepts, at most, to close them apart.
const MAX_PENDING_ON_DROP: usize = 1024;

/// Connects to the listener of `shm://name` on this host. The server's rings are faulted in
/// ahead of use if they are no larger than [`DEFAULT_RING_CAPACITY`] (see
/// [`connect_populating`]).
pub async fn connect(name: &str) -> io::Result<Transport> {
    connect_populating(name, DEFAULT_RING_CAPACITY).await
}

/// [`connect`], faulting the server's rings in ahead of use if they are no larger than
/// `populate_up_to` bytes: the server announces their size, and a hostile one could
/// otherwise make this process commit up to the format's limit (2 GiB).
pub async fn connect_populating(name: &str, populate_up_to: usize) -> io::Result<Transport> {
    // Not std's blocking connect: to a listener whose backlog is full it waits until the
    // listener accepts, maybe never (a local process can bind the abstract name first and
    // never accept), holding the runtime's thread. Without blocking, a full backlog fails
    // at once.
    let stream = UnixStream::connect_addr(&address(name)?.into())
        .await
        .map_err(|e| match e.kind() {
            io::ErrorKind::ConnectionRefused => {
                io::Error::new(e.kind(), format!("nothing listens on shm://{name}"))
            }
            io::ErrorKind::WouldBlock => io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("shm://{name} accepts no more connections now (its backlog is full)"),
            ),
            _ => e,
        })?;
    // The server may queue descriptors on it: if the setup fails, it is closed on the
    // closer thread.
    let stream = ClosedApart::new(stream);
    // Who serves there, as the kernel says: the client checks it (see `ClientAuth`).
    let server = sys::peer_credentials(stream.get().as_fd())?;
    let (region, space) = tokio::time::timeout(SETUP_TIMEOUT, receive_region(stream.get()))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("shm://{name} sent no setup message within {SETUP_TIMEOUT:?}"),
            )
        })??;
    let data = Doorbell::new(OwnedFd::from(stream.into_inner().into_std()?));
    transport(
        Side::Client,
        region,
        Bells { data, space },
        format!("shm://{name}"),
        Some(server),
        populate_up_to,
    )
}

/// The server's offer on `stream`: the region and the client's end of the space doorbell.
async fn receive_region(stream: &UnixStream) -> io::Result<(Region, Doorbell)> {
    loop {
        stream.readable().await?;
        match stream.try_io(Interest::READABLE, || {
            handoff::accept_region(stream.as_fd())
        }) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            result => return result.map(|(region, space)| (region, Doorbell::new(space))),
        }
    }
}

/// Faults the region's pages in on a blocking thread (see [`lanner_shm::Populator`]): the
/// connection is usable at once, and within a few milliseconds its rings take no page
/// faults on first touch. Best effort: a kernel without `MADV_POPULATE_WRITE` (before
/// Linux 5.14) faults pages in as messages first reach them, as before.
pub(super) fn populate_in_background(populator: lanner_shm::Populator, peer: &str) {
    let peer = peer.to_owned();
    let populate = move || {
        if let Err(error) = populator.populate() {
            tracing::debug!(%peer, %error, "shared-memory region not populated ahead of use");
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(populate)),
        Err(_) => populate(),
    }
}

/// A connection's two doorbells (see [`lanner_shm::handoff`]): `data` carries "a record
/// was published" rings, on which the receiving half sleeps; `space` carries "ring space
/// was released" rings, on which the sending half waits.
struct Bells {
    data: Doorbell,
    space: Doorbell,
}

/// The transport over `region`; its rings are faulted in ahead of use if they are no
/// larger than `populate_up_to`.
fn transport(
    side: Side,
    region: Region,
    bells: Bells,
    peer: String,
    credentials: Option<PeerCredentials>,
    populate_up_to: usize,
) -> io::Result<Transport> {
    let source_waiter = Waiter::new(bells.data.try_clone_socket()?)?;
    let sink_waiter = Waiter::new(bells.space.try_clone_socket()?)?;
    let data = Arc::new(bells.data);
    let space = Arc::new(bells.space);
    // A server faults its rings in only once the client is authenticated: before that,
    // anyone able to connect could make it commit a region's memory for each connection
    // they open and drop (while keeping the region's descriptor).
    let mut populate_when_authenticated = None;
    if region.capacity() <= populate_up_to {
        match side {
            Side::Client => populate_in_background(region.populator(), &peer),
            Side::Server => populate_when_authenticated = Some((region.populator(), peer.clone())),
        }
    }
    let (loans, lent_to_us) = region.loans(side);
    let (producer, consumer) = region.split(side, data.clone(), space.clone(), IN_PLACE_MIN);
    Ok(Transport {
        sink: Box::new(ShmSink::new(producer, sink_waiter, Some(loans))),
        source: Box::new(ShmSource::new(
            consumer,
            source_waiter,
            [data, space],
            lent_to_us,
            populate_when_authenticated,
        )),
        peer,
        credentials,
        certificate_subject: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_that_never_accepts_fails_a_connect_instead_of_blocking_it() {
        let name = format!("backlog-full-{}", std::process::id());
        // Bound first by someone who never accepts, with room for one pending connection.
        let squatter =
            std::os::unix::net::UnixListener::bind_addr(&address(&name).unwrap()).expect("bind");
        socket2::SockRef::from(&squatter).listen(0).expect("listen");
        let _pending = std::os::unix::net::UnixStream::connect_addr(&address(&name).unwrap())
            .expect("the backlog takes one connection");
        // The connect runs on a thread of its own: a blocking connect would block it
        // until the listener accepts or closes.
        let (done, outcome) = std::sync::mpsc::channel();
        let connecting = name.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let result = runtime.block_on(connect(&connecting)).map(drop);
            let _ = done.send(result);
        });
        let error = outcome
            .recv_timeout(Duration::from_secs(10))
            .expect("the connect returned instead of waiting for the listener")
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionRefused, "{error}");
        assert!(error.to_string().contains("backlog is full"), "{error}");
        drop(squatter);
    }

    /// A client that connects and reads nothing, keeping its socket open.
    fn never_reading(name: &str) -> std::os::unix::net::UnixStream {
        std::os::unix::net::UnixStream::connect_addr(&address(name).unwrap()).unwrap()
    }

    /// What the server sent `client` first: `Some(descriptors)` for a message, `None` for
    /// end of file (it closed the connection without an offer). Takes the offer.
    fn first_message(client: &std::os::unix::net::UnixStream) -> Option<usize> {
        // Under valgrind the server sets up each connection many times slower.
        let patience = if sys::testing::under_valgrind() {
            300
        } else {
            5
        };
        client
            .set_read_timeout(Some(Duration::from_secs(patience)))
            .unwrap();
        match sys::recv_with_fds(client.as_fd(), &mut [0u8; 16]) {
            Ok((0, _)) => None,
            Ok((_, fds)) => {
                let count = fds.len();
                closer::close_later(fds);
                Some(count)
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => None,
            Err(e) => panic!("reading the offer: {e}"),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_user_whose_clients_never_read_their_offers_is_refused_until_they_do() {
        let name = format!("untaken-offers-{}", std::process::id());
        let mut listener = ShmListener::bind(&name).unwrap();
        listener.set_ring_capacity(4096).unwrap();
        // Accepted connections are dropped at once, as when their handshakes time out:
        // the offers stay in the clients' queues all the same.
        let accepting = tokio::spawn(async move {
            loop {
                drop(listener.accept().await.unwrap());
            }
        });
        let bound = lanner_shm::offers::MAX_UNTAKEN_OFFERS_PER_UID;
        let mut held: Vec<_> = (0..bound).map(|_| never_reading(&name)).collect();
        let refused = never_reading(&name);
        let outcome = tokio::task::spawn_blocking(move || first_message(&refused));
        assert_eq!(outcome.await.unwrap(), None, "refused without an offer");
        // The client's error says why it may have been.
        let error = match connect(&name).await {
            Ok(_) => panic!("a client of the same user connected at the bound"),
            Err(error) => error,
        };
        assert!(error.to_string().contains("offers to this user"), "{error}");
        // Half of them read their offers, the rest close their sockets: room again.
        for client in &held[..bound / 2] {
            assert_eq!(first_message(client), Some(2));
        }
        held.truncate(bound / 2);
        let transport = connect(&name).await.expect("accepted again");
        drop(transport);
        // Those that read keep no entry, however long they stay connected.
        let more: Vec<_> = (0..bound - 1).map(|_| never_reading(&name)).collect();
        connect(&name)
            .await
            .expect("the readers' offers count no more");
        drop((held, more));
        accepting.abort();
    }

    #[tokio::test]
    async fn a_dropped_listener_frees_its_name_at_once_and_closes_pending_connections() {
        use std::io::Read;
        let name = format!("dropped-listener-{}", std::process::id());
        let listener = ShmListener::bind(&name).unwrap();
        // Connected, never accepted: it goes with the listener (on the closer thread).
        let mut pending =
            std::os::unix::net::UnixStream::connect_addr(&address(&name).unwrap()).unwrap();
        drop(listener);
        let again = ShmListener::bind(&name).expect("the name is free once the drop returns");
        pending
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let read = pending.read(&mut [0u8; 16]);
        assert!(
            matches!(&read, Ok(0))
                || matches!(&read, Err(e) if e.kind() == io::ErrorKind::ConnectionReset),
            "{read:?}"
        );
        drop(again);
    }
}
