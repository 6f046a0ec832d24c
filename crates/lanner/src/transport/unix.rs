//! Unix domain stream socket transport.

use std::io;
use std::path::Path;

use tokio::net::UnixStream;

use super::stream::{StreamSink, StreamSource};
use super::watched_socket;
use super::{PeerCredentials, Transport};

/// Connects to the socket at `path`. The transport's credentials are the server's (who
/// listens there, as the kernel says), for the client to check.
pub async fn connect(path: &Path) -> io::Result<Transport> {
    // Descriptors refused before the server can send any.
    let socket = tokio::net::UnixSocket::new_stream()?;
    refuse_passed_descriptors(&socket);
    let stream = socket
        .connect(path)
        .await
        .map_err(|error| explained(path, error))?;
    let server = lanner_shm::sys::peer_credentials(std::os::fd::AsFd::as_fd(&stream))?;
    from_stream(stream, format!("unix://{}", path.display()), Some(server))
}

/// Wraps a connected Unix stream; `credentials` says who the peer process is (servers
/// read them with `lanner_shm::sys::peer_credentials`). The socket is in the reactor
/// only while the connection waits on it (see `watched_socket`).
pub fn from_stream(
    stream: UnixStream,
    peer: String,
    credentials: Option<PeerCredentials>,
) -> io::Result<Transport> {
    let (reader, writer) = watched_socket::split(stream.into_std()?.into());
    Ok(Transport {
        sink: Box::new(StreamSink::new(writer)),
        source: Box::new(StreamSource::new(reader)),
        peer,
        credentials,
        certificate_subject: None,
    })
}

/// Has the kernel refuse descriptors passed to `socket` (a listener's setting is inherited
/// by the sockets it accepts), where it can (`SO_PASSRIGHTS`, Linux 6.16).
///
/// Nothing but bytes travels over a Lanner connection, and a descriptor a peer passes
/// anyway is closed by the kernel on the thread whose read discards it: one whose close
/// blocks (a TCP socket lingering with unsent data) would hold a runtime worker for as
/// long as the peer likes. Refused, the peer's `sendmsg` fails instead (see
/// `lanner_shm::closer` for how `shm://` copes without the option). On an older kernel
/// this changes nothing, and the hazard stays (docs/decisions.md, twenty-sixth session).
pub(crate) fn refuse_passed_descriptors(socket: &impl std::os::fd::AsFd) {
    match lanner_shm::sys::refuse_passed_descriptors(socket.as_fd()) {
        Ok(true) => {}
        Ok(false) => tracing::debug!(
            "this kernel cannot refuse descriptors on unix:// sockets (SO_PASSRIGHTS, Linux 6.16)"
        ),
        Err(error) => tracing::debug!(%error, "could not refuse descriptors on a unix:// socket"),
    }
}

/// `error`, from connecting to `path`, with what it means where the system's words do not
/// say: a full backlog (the kernel's "Resource temporarily unavailable"), or a path where
/// no socket can be: a directory (an object URL whose object name was left off, so that
/// the socket's file name was taken for it), or a path below a socket (an object URL
/// given where an endpoint was expected).
fn explained(path: &Path, error: io::Error) -> io::Error {
    use std::os::unix::fs::FileTypeExt;
    if error.kind() == io::ErrorKind::WouldBlock {
        return io::Error::new(
            error.kind(),
            format!(
                "{error} (the server's backlog of connections is full: it accepts too \
                 slowly; try again later)"
            ),
        );
    }
    let is_socket = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|metadata| metadata.file_type().is_socket())
    };
    let hint = if path.is_dir() {
        format!(
            "{} is a directory; an object's URL is unix://<socket path>/<object name>",
            path.display()
        )
    } else if let Some(socket) = path.ancestors().skip(1).find(|parent| is_socket(parent)) {
        format!(
            "{} is the socket; an endpoint is unix://<socket path>, without an object name",
            socket.display()
        )
    } else {
        return error;
    };
    io::Error::new(error.kind(), format!("{error} ({hint})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn neither_end_of_a_unix_connection_takes_descriptors() {
        use std::os::fd::AsFd;
        let (probe, _) = std::os::unix::net::UnixStream::pair().unwrap();
        if !lanner_shm::sys::refuse_passed_descriptors(probe.as_fd()).unwrap() {
            eprintln!("skipped: this kernel has no SO_PASSRIGHTS (Linux 6.16)");
            return;
        }
        let path =
            std::env::temp_dir().join(format!("lanner-norights-{}.sock", std::process::id()));
        let mut listener = crate::transport::Listener::bind(&crate::Endpoint::Unix(path.clone()))
            .await
            .unwrap();
        let (client, accepted) =
            tokio::join!(tokio::net::UnixStream::connect(&path), listener.accept());
        let (client, _accepted) = (client.unwrap(), accepted.unwrap());
        // A client of a Lanner server: its descriptors are refused, its bytes go through.
        let passed = std::fs::File::open("/dev/null").unwrap();
        let error =
            lanner_shm::sys::send_with_fds(client.as_fd(), b"x", &[passed.as_fd()]).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::PermissionDenied, "{error}");
        assert_eq!(
            lanner_shm::sys::send_nonblocking(client.as_fd(), b"x").unwrap(),
            1
        );

        // A server a Lanner client connected to: the same.
        let raw_path = path.with_extension("raw");
        let _ = std::fs::remove_file(&raw_path);
        let raw_server = std::os::unix::net::UnixListener::bind(&raw_path).unwrap();
        let transport = connect(&raw_path).await.unwrap();
        let (server_end, _) = raw_server.accept().unwrap();
        let error = lanner_shm::sys::send_with_fds(server_end.as_fd(), b"x", &[passed.as_fd()])
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::PermissionDenied, "{error}");
        drop(transport);
        std::fs::remove_file(&raw_path).unwrap();
    }

    #[tokio::test]
    async fn a_full_backlog_is_named() {
        let path = std::env::temp_dir().join(format!("lanner-backlog-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        // A server that accepts nothing: connections pile up until its backlog (of 4) is
        // full.
        let socket = tokio::net::UnixSocket::new_stream().unwrap();
        socket.bind(&path).unwrap();
        let _listener = socket.listen(4).unwrap();
        let mut queued = Vec::new();
        let error = loop {
            match connect(&path).await {
                Ok(transport) => queued.push(transport),
                Err(error) => break error,
            }
            assert!(queued.len() < 100, "the backlog never filled");
        };
        assert_eq!(error.kind(), io::ErrorKind::WouldBlock, "{error}");
        assert!(
            error.to_string().contains("backlog of connections is full"),
            "{error}"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[tokio::test]
    async fn connecting_where_no_socket_can_be_says_how_urls_name_sockets() {
        let socket = std::env::temp_dir().join(format!("lanner-hint-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&socket);
        let _listener = tokio::net::UnixListener::bind(&socket).unwrap();

        // The socket's directory, as when the object name is left off an object URL.
        let Err(error) = connect(socket.parent().unwrap()).await else {
            panic!("connected to a directory");
        };
        assert!(
            error
                .to_string()
                .contains("is a directory; an object's URL is"),
            "{error}"
        );
        // A path below the socket, as when an object URL is given for an endpoint.
        let Err(error) = connect(&socket.join("calculator")).await else {
            panic!("connected below a socket");
        };
        assert!(
            error.to_string().contains("is the socket; an endpoint is"),
            "{error}"
        );
        // A path with nothing there keeps the plain error.
        let missing = socket.with_extension("missing");
        let Err(error) = connect(&missing).await else {
            panic!("connected to nothing");
        };
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
        assert!(!error.to_string().contains("unix://"), "{error}");
        std::fs::remove_file(&socket).unwrap();
    }
}
