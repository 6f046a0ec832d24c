//! Connection setup: the server hands each client a fresh region over a Unix socket
//! (see [`lanner_shm::handoff`]). The client gives up after [`SETUP_TIMEOUT`]. The server
//! reads nothing from the client during setup, so a client that connects and stalls
//! costs it nothing but the socket.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lanner_shm::doorbell::Doorbell;
use lanner_shm::handoff;
use lanner_shm::region::{Region, Side};
use lanner_shm::sys::{self, PeerCredentials};
use tokio::io::Interest;
use tokio::net::{UnixListener, UnixStream};

use super::sink::ShmSink;
use super::source::ShmSource;
use super::waiter::Waiter;
use super::{DEFAULT_RING_CAPACITY, IN_PLACE_MIN, socket_name};
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
}

impl ShmListener {
    /// Listens on `shm://name`. Fails with `AddrInUse` if another process (or listener)
    /// holds the name; the name is released when the listener is dropped.
    pub fn bind(name: &str) -> io::Result<ShmListener> {
        let listener = std::os::unix::net::UnixListener::bind_addr(&address(name)?)?;
        listener.set_nonblocking(true)?;
        Ok(ShmListener {
            listener: UnixListener::from_std(listener)?,
            name: name.to_owned(),
            ring_capacity: DEFAULT_RING_CAPACITY,
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
    /// fails its setup (it hung up already, say) is logged and skipped: only a failure of
    /// the listener itself is an error.
    pub async fn accept(&mut self) -> io::Result<Transport> {
        loop {
            let (stream, _) = self.listener.accept().await?;
            match self.set_up(stream) {
                Ok(transport) => return Ok(transport),
                Err(error) => {
                    tracing::info!(name = %self.name, %error, "shared-memory setup failed")
                }
            }
        }
    }

    fn set_up(&self, stream: UnixStream) -> io::Result<Transport> {
        let socket = OwnedFd::from(stream.into_std()?);
        let credentials = sys::peer_credentials(socket.as_fd())?;
        let (region, space) = handoff::offer_region(socket.as_fd(), self.ring_capacity)?;
        let peer = format!(
            "shm://{} (client pid {}, uid {})",
            self.name, credentials.pid, credentials.uid
        );
        transport(
            Side::Server,
            region,
            Bells {
                data: socket,
                space,
            },
            peer,
            Some(credentials),
            usize::MAX,
        )
    }
}

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
    // Who serves there, as the kernel says: the client checks it (see `ClientAuth`).
    let server = sys::peer_credentials(stream.as_fd())?;
    let (region, space) = tokio::time::timeout(SETUP_TIMEOUT, receive_region(&stream))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("shm://{name} sent no setup message within {SETUP_TIMEOUT:?}"),
            )
        })??;
    let data = OwnedFd::from(stream.into_std()?);
    transport(
        Side::Client,
        region,
        Bells { data, space },
        format!("shm://{name}"),
        Some(server),
        populate_up_to,
    )
}

async fn receive_region(stream: &UnixStream) -> io::Result<(Region, OwnedFd)> {
    loop {
        stream.readable().await?;
        match stream.try_io(Interest::READABLE, || {
            handoff::accept_region(stream.as_fd())
        }) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            result => return result,
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

/// A connection's two doorbell sockets (see [`lanner_shm::handoff`]): `data` carries
/// "a record was published" rings, on which the receiving half sleeps; `space` carries
/// "ring space was released" rings, on which the sending half waits.
struct Bells {
    data: OwnedFd,
    space: OwnedFd,
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
    let source_waiter = Waiter::new(bells.data.try_clone()?)?;
    let sink_waiter = Waiter::new(bells.space.try_clone()?)?;
    let data = Arc::new(Doorbell::new(bells.data));
    let space = Arc::new(Doorbell::new(bells.space));
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
}
