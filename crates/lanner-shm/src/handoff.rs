//! Handing a fresh region to the peer over the connection's Unix socket.
//!
//! The offer is 16 bytes (`"LNRSHM\0\0"`, layout version u32, ring capacity u32,
//! little-endian) with two descriptors attached (`SCM_RIGHTS`): the region's memfd, and one
//! end of a fresh socket pair, the connection's second doorbell. The receiver checks the
//! memfd's seals and size and the region's header before using it (see [`Region::open`]).
//!
//! A connection has two doorbells because a doorbell must have one sleeper: the setup
//! socket carries "a record was published" rings (the receiving half sleeps on it), the
//! pair carries "ring space was released" rings (the sending half waits on it). With one
//! socket for both, whichever half drained a ring could make the kernel drop the other
//! half's readiness event (epoll reports what is readable when the event is collected,
//! not when it happened), and that half would sleep through its wake-up.
//!
//! No descriptor travels over either doorbell after the offer, and one that does could be
//! slow to close (see [`crate::doorbell`]). So both sides make the kernel refuse them
//! where it can (`SO_PASSRIGHTS`, Linux 6.16; [`sys::refuse_passed_descriptors`]): the
//! server on its end of the space doorbell as it makes the pair (and the runtime on its
//! listener, whose accepted sockets inherit it), the client on the setup socket and on its
//! end of the space doorbell as soon as it has the offer, after which it drains both once
//! for descriptors queued before. The client also closes on the closer thread
//! ([`crate::closer`]) every descriptor it does not keep from a refused offer: any of them
//! could be such a socket.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::doorbell::{self, Drained};
use crate::region::Region;
use crate::{closer, sys};

const MAGIC: [u8; 8] = *b"LNRSHM\0\0";
const VERSION: u32 = 2;
const OFFER_LEN: usize = 16;

/// Server side: creates a region whose rings hold `capacity` bytes each and sends it on
/// `socket`, with the peer's end of the space doorbell. The socket must be fresh (its
/// buffer has room for the 16-byte offer). Returns the region and this side's end of the
/// space doorbell.
pub fn offer_region(socket: BorrowedFd<'_>, capacity: usize) -> io::Result<(Region, OwnedFd)> {
    let (region, memfd) = Region::create(capacity)?;
    let (ours, theirs) = UnixStream::pair()?;
    // Before the client can reach it: no descriptor can ever be queued on our end.
    sys::refuse_passed_descriptors(ours.as_fd())?;
    let mut offer = [0u8; OFFER_LEN];
    offer[..8].copy_from_slice(&MAGIC);
    offer[8..12].copy_from_slice(&VERSION.to_le_bytes());
    let capacity = u32::try_from(capacity).expect("Region::create checked the capacity");
    offer[12..].copy_from_slice(&capacity.to_le_bytes());
    let sent = sys::send_with_fds(socket, &offer, &[memfd.as_fd(), theirs.as_fd()])?;
    if sent != OFFER_LEN {
        return Err(io::Error::other(
            "the shared-memory offer did not fit the socket",
        ));
    }
    Ok((region, ours.into()))
}

/// Client side: receives the server's offer from `socket` and maps the region. Returns the
/// region and this side's end of the space doorbell. On a non-blocking socket with nothing
/// to read yet, fails with `WouldBlock`.
///
/// From then on the kernel refuses descriptors sent to `socket` or to the space doorbell,
/// where it can (`SO_PASSRIGHTS`); whatever the server queued on them before fails the
/// setup (`InvalidData`). Received descriptors that are not kept are closed on the closer
/// thread.
pub fn accept_region(socket: BorrowedFd<'_>) -> io::Result<(Region, OwnedFd)> {
    let mut offer = [0u8; OFFER_LEN];
    let (len, fds) = sys::recv_with_fds(socket, &mut offer)?;
    let region = match open_offer(&offer[..len], &fds) {
        Ok(region) => region,
        Err(error) => {
            closer::close_later(fds);
            return Err(error);
        }
    };
    let [memfd, space] = <[_; 2]>::try_from(fds).expect("open_offer counted them");
    // A memfd on tmpfs (open_offer checked): its close is quick.
    drop(memfd);
    match refuse_descriptors_from_now_on(socket, space.as_fd()) {
        Ok(()) => Ok((region, space)),
        Err(error) => {
            closer::close_later([space]);
            Err(error)
        }
    }
}

/// Checks the offer (its bytes and the descriptors that came with them) and maps its
/// region.
fn open_offer(offer: &[u8], fds: &[OwnedFd]) -> io::Result<Region> {
    if offer.is_empty() {
        let uid = sys::process_credentials().uid;
        return Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            format!(
                "the server closed the connection without a shared-memory offer: it refused \
                 the connection or failed to set it up (it refuses one when too many of its \
                 offers to this user, uid {uid}, are not taken yet: connections that never \
                 read theirs; its log says which)"
            ),
        ));
    }
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    if offer.len() != OFFER_LEN || offer[..8] != MAGIC {
        return Err(invalid(
            "the server's setup message is not a Lanner shared-memory offer".into(),
        ));
    }
    let word =
        |at: usize| u32::from_le_bytes([offer[at], offer[at + 1], offer[at + 2], offer[at + 3]]);
    let version = word(8);
    if version != VERSION {
        return Err(invalid(format!(
            "the server offers shared-memory layout version {version}; this build speaks {VERSION}"
        )));
    }
    let [memfd, space] = fds else {
        return Err(invalid(format!(
            "the shared-memory offer carried {} file descriptors instead of 2",
            fds.len()
        )));
    };
    check_doorbell_kind(space.as_fd())?;
    Region::open(memfd.as_fd(), word(12) as usize)
}

/// The space doorbell must be a Unix stream socket: our calls on it then never block
/// (`MSG_DONTWAIT`), whatever its owner does to its flags, and closing it does not linger
/// as a TCP socket's close can.
fn check_doorbell_kind(fd: BorrowedFd<'_>) -> io::Result<()> {
    let refused = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the shared-memory offer's doorbell is {why}"),
        )
    };
    match sys::socket_domain_and_type(fd) {
        Ok((libc::AF_UNIX, libc::SOCK_STREAM)) => Ok(()),
        Ok((domain, kind)) => Err(refused(format!(
            "not a Unix stream socket (socket domain {domain}, type {kind})"
        ))),
        Err(e) if e.raw_os_error() == Some(libc::ENOTSOCK) => Err(refused("not a socket".into())),
        Err(e) => Err(e),
    }
}

/// Has the kernel refuse descriptors on the client's two doorbell sockets (where it can),
/// then drains both once: a descriptor the server queued before that fails the setup.
/// Rings drained here are lost, which is harmless: the client has not slept yet.
fn refuse_descriptors_from_now_on(setup: BorrowedFd<'_>, space: BorrowedFd<'_>) -> io::Result<()> {
    for socket in [setup, space] {
        sys::refuse_passed_descriptors(socket)?;
        // End of file or a flood is for the connection to find out.
        let _: Drained = doorbell::drain(socket)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn an_offered_region_is_accepted_and_shared() {
        let (server, client) = UnixStream::pair().unwrap();
        let (offered, server_bell) = offer_region(server.as_fd(), 4096).unwrap();
        let (accepted, client_bell) = accept_region(client.as_fd()).unwrap();
        assert_eq!(accepted.capacity(), 4096);
        assert_eq!(offered.capacity(), 4096);
        // The space doorbell connects the two sides.
        sys::send_nonblocking(server_bell.as_fd(), b"x").unwrap();
        assert_eq!(
            sys::recv_nonblocking(client_bell.as_fd(), &mut [0; 4]).unwrap(),
            1
        );
    }

    #[test]
    fn bad_offers_are_refused_with_a_reason() {
        let cases: [(&[u8], &str); 3] = [
            (b"GET / HTTP/1.1\r\n", "not a Lanner"),
            (b"LNRSHM\0\0\x01\0\0\0\0\x10\0\0", "version 1"),
            (
                b"LNRSHM\0\0\x02\0\0\0\0\x10\0\0",
                "0 file descriptors instead of 2",
            ),
        ];
        for (offer, why) in cases {
            let (server, client) = UnixStream::pair().unwrap();
            sys::send_with_fds(server.as_fd(), offer, &[]).unwrap();
            let error = accept_region(client.as_fd()).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData);
            assert!(error.to_string().contains(why), "{error}");
        }
        let (server, client) = UnixStream::pair().unwrap();
        drop(server);
        let error = accept_region(client.as_fd()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::ConnectionReset);
        let message = error.to_string();
        assert!(
            message.contains("without a shared-memory offer"),
            "{message}"
        );
        assert!(message.contains("offers to this user"), "{message}");
    }

    #[test]
    fn a_region_whose_size_does_not_match_the_offer_is_refused() {
        let (server, client) = UnixStream::pair().unwrap();
        let memfd = sys::create_sealed_memfd("wrong", Region::len_for(4096)).unwrap();
        let (bell, _) = UnixStream::pair().unwrap();
        let offer = b"LNRSHM\0\0\x02\0\0\0\0\x20\0\0"; // claims 8 KiB rings
        sys::send_with_fds(server.as_fd(), offer, &[memfd.as_fd(), bell.as_fd()]).unwrap();
        let error = accept_region(client.as_fd()).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
    }

    #[test]
    fn a_doorbell_that_is_not_a_socket_is_refused() {
        let (server, client) = UnixStream::pair().unwrap();
        let memfd = sys::create_sealed_memfd("region", Region::len_for(4096)).unwrap();
        let not_a_socket = sys::create_sealed_memfd("bell", 4096).unwrap();
        let offer = b"LNRSHM\0\0\x02\0\0\0\0\x10\0\0";
        sys::send_with_fds(
            server.as_fd(),
            offer,
            &[memfd.as_fd(), not_a_socket.as_fd()],
        )
        .unwrap();
        let error = accept_region(client.as_fd()).unwrap_err();
        assert!(error.to_string().contains("not a socket"), "{error}");
    }

    /// An offer whose region is fine, with `doorbell` as its space doorbell.
    fn offer_with_doorbell(doorbell: BorrowedFd<'_>) -> io::Result<(Region, OwnedFd)> {
        let (server, client) = UnixStream::pair().unwrap();
        let (_region, memfd) = Region::create(4096).unwrap();
        let offer = b"LNRSHM\0\0\x02\0\0\0\0\x10\0\0";
        sys::send_with_fds(server.as_fd(), offer, &[memfd.as_fd(), doorbell]).unwrap();
        accept_region(client.as_fd())
    }

    #[test]
    fn a_doorbell_that_is_not_a_unix_stream_socket_is_refused() {
        // A TCP socket could be made to linger when closed; a datagram socket is not what
        // the doorbell's calls expect either.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (datagram, _) = std::os::unix::net::UnixDatagram::pair().unwrap();
        for (socket, kind) in [(tcp.as_fd(), "type 1"), (datagram.as_fd(), "type 2")] {
            let error = offer_with_doorbell(socket).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
            assert!(
                error.to_string().contains("not a Unix stream socket"),
                "{error}"
            );
            assert!(error.to_string().contains(kind), "{error}");
        }
        // A Unix stream socket is fine.
        let (bell, _) = UnixStream::pair().unwrap();
        offer_with_doorbell(bell.as_fd()).unwrap();
    }

    #[test]
    fn descriptors_of_a_refused_offer_are_closed_on_the_closer_thread() {
        let (server, client) = UnixStream::pair().unwrap();
        let memfd = sys::create_sealed_memfd("region", Region::len_for(4096)).unwrap();
        let (bell, _) = UnixStream::pair().unwrap();
        let (extra, witness) = UnixStream::pair().unwrap();
        let offer = b"LNRSHM\0\0\x02\0\0\0\0\x10\0\0";
        let fds = [memfd.as_fd(), bell.as_fd(), extra.as_fd()];
        sys::send_with_fds(server.as_fd(), offer, &fds).unwrap();
        drop(extra);
        let paused = closer::pause();
        let error = accept_region(client.as_fd()).unwrap_err();
        assert!(error.to_string().contains("3 file descriptors"), "{error}");
        assert!(
            !crate::tests::closed_soon_within(&witness, 20),
            "the extra descriptor was closed on the calling thread"
        );
        drop(paused);
        assert!(
            crate::tests::closed_soon(&witness),
            "the extra descriptor leaked"
        );
    }

    #[test]
    fn a_descriptor_queued_behind_the_offer_fails_the_setup() {
        for behind_on_setup_socket in [true, false] {
            let (server, client) = UnixStream::pair().unwrap();
            let (_region, memfd) = Region::create(4096).unwrap();
            let (bell, client_bell) = UnixStream::pair().unwrap();
            let offer = b"LNRSHM\0\0\x02\0\0\0\0\x10\0\0";
            sys::send_with_fds(server.as_fd(), offer, &[memfd.as_fd(), client_bell.as_fd()])
                .unwrap();
            drop(client_bell);
            let (passed, witness) = UnixStream::pair().unwrap();
            let behind = if behind_on_setup_socket {
                &server
            } else {
                &bell
            };
            sys::send_with_fds(behind.as_fd(), b"x", &[passed.as_fd()]).unwrap();
            drop(passed);
            let paused = closer::pause();
            let error = accept_region(client.as_fd()).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
            assert!(error.to_string().contains("file descriptor"), "{error}");
            assert!(!crate::tests::closed_soon_within(&witness, 20));
            drop(paused);
            assert!(
                crate::tests::closed_soon(&witness),
                "the passed descriptor leaked"
            );
        }
    }

    #[test]
    fn after_the_offer_neither_side_takes_descriptors_where_the_kernel_refuses_them() {
        let (server, client) = UnixStream::pair().unwrap();
        let (_offered, server_bell) = offer_region(server.as_fd(), 4096).unwrap();
        let (_accepted, client_bell) = accept_region(client.as_fd()).unwrap();
        // Probe: a kernel without SO_PASSRIGHTS (before 6.16) does not refuse them.
        let (probe, _) = UnixStream::pair().unwrap();
        if !sys::refuse_passed_descriptors(probe.as_fd()).unwrap() {
            return eprintln!("no SO_PASSRIGHTS on this kernel (before Linux 6.16)");
        }
        let (passed, _) = UnixStream::pair().unwrap();
        let senders = [
            (server.as_fd(), "to the client's setup socket"),
            (server_bell.as_fd(), "to the client's space doorbell"),
            (client_bell.as_fd(), "to the server's space doorbell"),
        ];
        for (sender, to) in senders {
            let error = sys::send_with_fds(sender, b"x", &[passed.as_fd()]).unwrap_err();
            assert_eq!(
                error.kind(),
                io::ErrorKind::PermissionDenied,
                "{to}: {error}"
            );
        }
    }
}
