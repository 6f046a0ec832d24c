//! Connection setup: the server hands the client a fresh region over a Unix socket.
//!
//! The setup message is 16 bytes (`"LNRSHM\0\0"`, layout version u32, ring capacity u32,
//! little-endian) with the region's memfd attached (`SCM_RIGHTS`). The client checks the
//! memfd's seals and size and the region's header before using it, and gives up after
//! [`SETUP_TIMEOUT`]. The server reads nothing from the client during setup, so a client
//! that connects and stalls costs it nothing but the socket.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lanner_shm::doorbell::Doorbell;
use lanner_shm::region::{Region, Side};
use lanner_shm::sys::{self, PeerCredentials};
use tokio::io::Interest;
use tokio::net::{UnixListener, UnixStream};

use super::sink::ShmSink;
use super::source::ShmSource;
use super::waiter::Waiter;
use super::{DEFAULT_RING_CAPACITY, IN_PLACE_MIN, socket_name};
use crate::transport::Transport;

const MAGIC: [u8; 8] = *b"LNRSHM\0\0";
const VERSION: u32 = 1;
const MESSAGE_LEN: usize = 16;

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

    /// The next connection: creates its region and hands it to the client.
    pub async fn accept(&mut self) -> io::Result<Transport> {
        let (stream, _) = self.listener.accept().await?;
        let socket = OwnedFd::from(stream.into_std()?);
        let credentials = sys::peer_credentials(socket.as_fd())?;
        let (region, memfd) = Region::create(self.ring_capacity)?;
        let mut message = [0u8; MESSAGE_LEN];
        message[..8].copy_from_slice(&MAGIC);
        message[8..12].copy_from_slice(&VERSION.to_le_bytes());
        let capacity = u32::try_from(self.ring_capacity).expect("capacity ≤ 1 GiB");
        message[12..].copy_from_slice(&capacity.to_le_bytes());
        // A fresh socket's buffer always has room for 16 bytes.
        let sent = sys::send_with_fds(socket.as_fd(), &message, &[memfd.as_fd()])?;
        if sent != MESSAGE_LEN {
            return Err(io::Error::other("the setup message did not fit the socket"));
        }
        let peer = format!(
            "shm://{} (client pid {}, uid {})",
            self.name, credentials.pid, credentials.uid
        );
        transport(Side::Server, region, socket, peer, Some(credentials))
    }
}

/// Connects to the listener of `shm://name` on this host.
pub async fn connect(name: &str) -> io::Result<Transport> {
    let stream = std::os::unix::net::UnixStream::connect_addr(&address(name)?).map_err(|e| {
        if e.kind() == io::ErrorKind::ConnectionRefused {
            io::Error::new(e.kind(), format!("nothing listens on shm://{name}"))
        } else {
            e
        }
    })?;
    stream.set_nonblocking(true)?;
    let stream = UnixStream::from_std(stream)?;
    let (message, fds) = tokio::time::timeout(SETUP_TIMEOUT, receive_setup(&stream))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("shm://{name} sent no setup message within {SETUP_TIMEOUT:?}"),
            )
        })??;
    let capacity = parse_setup(&message, fds.len())?;
    let region = Region::open(fds[0].as_fd(), capacity)?;
    let socket = OwnedFd::from(stream.into_std()?);
    transport(Side::Client, region, socket, format!("shm://{name}"), None)
}

async fn receive_setup(stream: &UnixStream) -> io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut message = vec![0u8; MESSAGE_LEN];
    loop {
        stream.readable().await?;
        let received = stream.try_io(Interest::READABLE, || {
            sys::recv_with_fds(stream.as_fd(), &mut message)
        });
        match received {
            Ok((0, _)) => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "the server closed the connection during shared-memory setup",
                ));
            }
            Ok((len, fds)) => {
                message.truncate(len);
                return Ok((message, fds));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

/// Checks the setup message; returns the ring capacity.
fn parse_setup(message: &[u8], fds: usize) -> io::Result<usize> {
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    if message.len() != MESSAGE_LEN || message[..8] != MAGIC {
        return Err(invalid(
            "the server's setup message is not a Lanner shared-memory setup".into(),
        ));
    }
    let word = |at: usize| u32::from_le_bytes(message[at..at + 4].try_into().expect("4 bytes"));
    let version = word(8);
    if version != VERSION {
        return Err(invalid(format!(
            "the server speaks shared-memory setup version {version}; this build speaks {VERSION}"
        )));
    }
    if fds != 1 {
        return Err(invalid(format!(
            "the setup message carried {fds} file descriptors instead of 1"
        )));
    }
    Ok(word(12) as usize)
}

fn transport(
    side: Side,
    region: Region,
    socket: OwnedFd,
    peer: String,
    credentials: Option<PeerCredentials>,
) -> io::Result<Transport> {
    let source_waiter = Waiter::new(socket.try_clone()?)?;
    let sink_waiter = Waiter::new(socket.try_clone()?)?;
    let bell = Arc::new(Doorbell::new(socket));
    let (producer, consumer) = region.split(side, bell, IN_PLACE_MIN);
    Ok(Transport {
        sink: Box::new(ShmSink::new(producer, sink_waiter)),
        source: Box::new(ShmSource::new(consumer, source_waiter)),
        peer,
        credentials,
    })
}
