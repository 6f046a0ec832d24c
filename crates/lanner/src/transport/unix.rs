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
    let stream = UnixStream::connect(path)
        .await
        .map_err(|error| with_url_hint(path, error))?;
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

/// `error`, from connecting to `path`, with a hint when the path is not where a socket
/// could be: a directory (an object URL whose object name was left off, so that the
/// socket's file name was taken for it), or a path below a socket (an object URL given
/// where an endpoint was expected).
fn with_url_hint(path: &Path, error: io::Error) -> io::Error {
    use std::os::unix::fs::FileTypeExt;
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
