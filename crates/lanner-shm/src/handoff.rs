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

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::region::Region;
use crate::sys;

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
pub fn accept_region(socket: BorrowedFd<'_>) -> io::Result<(Region, OwnedFd)> {
    let mut offer = [0u8; OFFER_LEN];
    let (len, fds) = sys::recv_with_fds(socket, &mut offer)?;
    if len == 0 {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "the server closed the connection during shared-memory setup",
        ));
    }
    let invalid = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    if len != OFFER_LEN || offer[..8] != MAGIC {
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
    let [memfd, space] = <[_; 2]>::try_from(fds).map_err(|fds: Vec<_>| {
        invalid(format!(
            "the shared-memory offer carried {} file descriptors instead of 2",
            fds.len()
        ))
    })?;
    check_is_socket(space.as_fd())?;
    Ok((Region::open(memfd.as_fd(), word(12) as usize)?, space))
}

/// The space doorbell must be a stream socket: our calls on it then never block
/// (`MSG_DONTWAIT`), whatever its owner does to its flags.
fn check_is_socket(fd: BorrowedFd<'_>) -> io::Result<()> {
    if sys::file_type(fd)? == libc::S_IFSOCK {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the shared-memory offer's doorbell is not a socket",
        ))
    }
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
}
