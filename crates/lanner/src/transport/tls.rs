//! TLS 1.3 over TCP (rustls), for TCP across networks that are not trusted.
//!
//! [`connect`] and [`accept`] run the handshake with a configuration the caller built (so
//! the caller decides the protocol versions, the roots it trusts, whether client
//! certificates are requested or required). On the server side, a client certificate that
//! the configuration's verifier accepted is read once, and the subject of its leaf
//! certificate becomes [`Transport::certificate_subject`] (see [`accept`] for the form).
//!
//! # Design
//!
//! After the handshake the TLS stream carries frames through the same [`StreamSource`] and
//! [`StreamSink`] as plain TCP, so framing, the spinning receive and the send path are
//! shared. The two halves share the TLS stream (one rustls connection) behind a mutex,
//! held only for the duration of one non-blocking step, never across a wait.
//!
//! The runtime tries a transport without the reactor while it spins
//! ([`StreamReadHalf::try_read`], [`StreamWriteHalf::try_write_vectored`]). For TLS the
//! try is the ordinary poll of the TLS stream with a waker that does nothing
//! ([`Waker::noop`]), Pending read as `WouldBlock`: rustls's record processing is reused
//! unchanged, and nothing needs waking because the caller falls back to the real poll
//! (with its own waker) before it sleeps. Underneath, the socket is read and written with
//! the same non-blocking system calls as plain TCP (`recv`/`send`/`sendmsg` with
//! `MSG_DONTWAIT`), so a spinning reader notices arriving records without waiting for the
//! reactor to turn; the reactor is asked (and the waker registered) only on the real poll
//! path, and only for the direction the half owns: the reading half never registers its
//! waker for writability nor the writing half for readability, so neither can displace the
//! other's registration.
//!
//! rustls buffers what it is given: a write hands plaintext to rustls, which encrypts it
//! into records and writes what the socket takes. [`StreamSink`] flushes after the last
//! byte of every frame, so a frame is on the socket when `poll_send` returns Ready; a flush
//! that cannot finish (the socket is full) is Pending with the waker registered, and the
//! next `poll_send` finishes it.
//!
//! # What is copied
//!
//! TLS cannot be zero-copy here: records are decrypted into rustls's buffer and the
//! plaintext is then copied into the receive buffer, and on the way out the frame's
//! segments (bulk payloads included) are encrypted into rustls's record buffer before
//! being written. So bulk `Bytes` payloads, which plain TCP, Unix sockets and shared
//! memory carry without a copy, are copied (and encrypted) on TLS connections. Received
//! frames and their payload slices are still cut from the receive buffer without a
//! further copy.
//!
//! # End of stream
//!
//! Dropping the writing half sends a TLS `close_notify` (as far as the socket takes it
//! without waiting) and shuts down the socket's sending side, as plain TCP does. A peer
//! that closes without `close_notify` is treated like a TCP close: between frames it is a
//! clean close, in the middle of a frame an error. Frames carry their own lengths, so a
//! truncation cannot pass for a complete frame. Once both halves are gone the socket is
//! read until the peer's end of stream before it is closed, as plain TCP's is (see
//! `lingering_close`).

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use rustls::server::ServerConnection;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsStream;
use tokio_util::io::poll_read_buf;

/// The rustls this module is built on: build the configurations handed to [`connect`] and
/// [`accept`] with it, so that their types match.
pub use rustls;

use super::Transport;
use super::lingering_close::close_lingering;
use super::stream::{StreamReadHalf, StreamSink, StreamSource, StreamWriteHalf};
use super::sys::{recv_slice_nonblocking, send_slices_nonblocking};

/// Connects to `address` (`host:port`) over TCP (with `TCP_NODELAY`) and runs the TLS
/// client handshake with `config`, checking that the server's certificate is valid for
/// `server_name` (a DNS name, or an IP address literal such as `127.0.0.1` or `::1`).
///
/// Fails with `InvalidInput` if `server_name` is neither, and with an error saying what
/// failed if the handshake fails (for example `TLS handshake with 127.0.0.1:4000 failed:
/// invalid peer certificate: UnknownIssuer`). Note that in TLS 1.3 the client finishes its
/// side of the handshake before the server has checked the client's certificate: a server
/// that refuses the client's certificate (or its lack of one) shows up as an error on the
/// first receive, not here.
pub async fn connect(
    address: &str,
    config: Arc<rustls::ClientConfig>,
    server_name: &str,
) -> io::Result<Transport> {
    let name = ServerName::try_from(server_name.to_owned()).map_err(|error| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid TLS server name {server_name:?}: {error}"),
        )
    })?;
    let stream = TcpStream::connect(address).await?;
    stream.set_nodelay(true)?;
    let remote = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| address.to_owned());
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, SocketIo::new(stream))
        .await
        .map_err(|error| handshake_failed(&remote, error))?;
    Ok(from_stream(stream.into(), format!("tls://{remote}"), None))
}

/// Runs the TLS server handshake with `config` on an accepted TCP connection (setting
/// `TCP_NODELAY`).
///
/// If the client presented a certificate and `config`'s client certificate verifier
/// accepted it, the subject of the client's leaf certificate becomes
/// [`Transport::certificate_subject`], rendered as x509-parser renders a name: its
/// relative distinguished names in certificate order, joined with `", "` (attributes of a
/// multi-valued one with `" + "`), each attribute as its short name and value, for example
/// `CN=alice, O=Acme`, the same string as x509-parser's `to_string` for ordinary names.
/// Unlike `to_string`, the characters RFC 4514 escapes are escaped in values
/// (`CN=Smith\, John`), and a value that is not a string is written as `#` and its bytes in
/// hex, so that no value can read as further attributes: a certificate for
/// `CN=alice\, O=Acme` does not pass for `CN=alice, O=Acme`. (Values are compared as
/// text: the string type and case are not normalised.) A certificate whose subject is
/// empty (it names its holder only in its subject alternative names) gives `Some("")`: an
/// authentication layer should refuse an empty principal. A certificate whose subject
/// cannot be read fails the connection.
///
/// Handshake failures are errors saying what failed (for example `TLS handshake with
/// 127.0.0.1:51324 failed: peer sent no certificates`).
pub async fn accept(stream: TcpStream, config: Arc<rustls::ServerConfig>) -> io::Result<Transport> {
    stream.set_nodelay(true)?;
    let remote = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let stream = tokio_rustls::TlsAcceptor::from(config)
        .accept(SocketIo::new(stream))
        .await
        .map_err(|error| handshake_failed(&remote, error))?;
    let subject = client_certificate_subject(stream.get_ref().1).map_err(|error| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("TLS connection from {remote} refused: {error}"),
        )
    })?;
    Ok(from_stream(
        stream.into(),
        format!("tls://{remote}"),
        subject,
    ))
}

fn handshake_failed(remote: &str, error: io::Error) -> io::Error {
    // The first thing a server that does not speak TLS sends (a Lanner WELCOME, say) is
    // no TLS record at all.
    let hint = if matches!(
        error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>()),
        Some(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType
        ))
    ) {
        " (does the peer speak TLS there?)"
    } else {
        ""
    };
    io::Error::new(
        refusal_kind(&error),
        format!("TLS handshake with {remote} failed: {error}{hint}"),
    )
}

/// rustls reports a refused certificate (ours or the peer's, or an alert saying so) as
/// `InvalidData`; callers see it as `PermissionDenied`, which the runtime reports as
/// `Unauthenticated`. rustls reports every other TLS failure as `InvalidData` too (a
/// record damaged on the way that cannot be decrypted, a peer that does not speak TLS, no
/// version or cipher suite in common): those keep `InvalidData`, a broken connection
/// (`Unavailable`), not a refusal of anyone's credentials.
fn refusal_kind(error: &io::Error) -> io::ErrorKind {
    match error.kind() {
        io::ErrorKind::InvalidData if is_certificate_refusal(error) => {
            io::ErrorKind::PermissionDenied
        }
        kind => kind,
    }
}

/// Whether rustls's error says that a certificate was refused (by our verifier, or by the
/// peer's, which said so in an alert) or missing where one was required.
fn is_certificate_refusal(error: &io::Error) -> bool {
    use rustls::AlertDescription as Alert;
    let Some(error) = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return false;
    };
    matches!(
        error,
        rustls::Error::InvalidCertificate(_)
            | rustls::Error::NoCertificatesPresented
            | rustls::Error::InvalidCertRevocationList(_)
            | rustls::Error::AlertReceived(
                Alert::NoCertificate
                    | Alert::BadCertificate
                    | Alert::UnsupportedCertificate
                    | Alert::CertificateRevoked
                    | Alert::CertificateExpired
                    | Alert::CertificateUnknown
                    | Alert::UnknownCA
                    | Alert::AccessDenied
                    | Alert::CertificateUnobtainable
                    | Alert::BadCertificateStatusResponse
                    | Alert::BadCertificateHashValue
                    | Alert::UnknownPSKIdentity
                    | Alert::CertificateRequired
            )
    )
}

/// See [`refusal_kind`].
fn refused(error: io::Error) -> io::Error {
    match refusal_kind(&error) {
        io::ErrorKind::PermissionDenied => io::Error::new(io::ErrorKind::PermissionDenied, error),
        _ => error,
    }
}

/// The subject of the client's leaf certificate, if it presented one (the verifier has
/// accepted it by the time the handshake completes).
fn client_certificate_subject(connection: &ServerConnection) -> Result<Option<String>, String> {
    let Some(leaf) = connection
        .peer_certificates()
        .and_then(|chain| chain.first())
    else {
        return Ok(None);
    };
    let (_, certificate) = x509_parser::parse_x509_certificate(leaf)
        .map_err(|error| format!("its client certificate cannot be read: {error}"))?;
    render_name(certificate.subject())
        .map(Some)
        .map_err(|error| format!("the subject of its client certificate cannot be read: {error}"))
}

/// Renders a distinguished name as x509-parser's `Display` does, with values escaped (see
/// [`accept`]).
fn render_name(name: &x509_parser::x509::X509Name<'_>) -> Result<String, String> {
    let registry = x509_parser::objects::oid_registry();
    let mut rendered = String::new();
    for (i, rdn) in name.iter_rdn().enumerate() {
        if i > 0 {
            rendered.push_str(", ");
        }
        for (j, attribute) in rdn.iter().enumerate() {
            if j > 0 {
                rendered.push_str(" + ");
            }
            match x509_parser::objects::oid2abbrev(attribute.attr_type(), registry) {
                Ok(abbreviation) => rendered.push_str(abbreviation),
                Err(_) => rendered.push_str(&format!("{:?}", attribute.attr_type())),
            }
            rendered.push('=');
            match attribute_text(attribute.attr_value())? {
                Some(text) => escape_value(&text, &mut rendered),
                None => {
                    rendered.push('#');
                    for byte in attribute.attr_value().as_bytes() {
                        rendered.push_str(&format!("{byte:02X}"));
                    }
                }
            }
        }
    }
    Ok(rendered)
}

/// The text of a string-typed attribute value (None if the value is not a string), as
/// x509-parser reads it.
fn attribute_text(
    value: &x509_parser::der_parser::asn1_rs::Any<'_>,
) -> Result<Option<String>, String> {
    use x509_parser::der_parser::asn1_rs::Tag;
    let bytes = value.as_bytes();
    match value.tag() {
        Tag::NumericString
        | Tag::VisibleString
        | Tag::PrintableString
        | Tag::GeneralString
        | Tag::ObjectDescriptor
        | Tag::GraphicString
        | Tag::T61String
        | Tag::VideotexString
        | Tag::Utf8String
        | Tag::Ia5String => std::str::from_utf8(bytes)
            .map(|text| Some(text.to_owned()))
            .map_err(|_| "an attribute is not valid UTF-8".to_owned()),
        Tag::BmpString => {
            if bytes.len() % 2 != 0 {
                return Err("a BMPString attribute has an odd length".to_owned());
            }
            let units: Vec<u16> = bytes
                .chunks_exact(2)
                .map(|pair| u16::from_be_bytes([pair[0], pair[1]]))
                .collect();
            String::from_utf16(&units)
                .map(Some)
                .map_err(|_| "a BMPString attribute is not valid UTF-16".to_owned())
        }
        _ => Ok(None),
    }
}

/// Appends `value` with the characters RFC 4514 escapes escaped: `"+,;<>\` anywhere, `#` or
/// a space at the start, a space at the end; and every control character (NUL, line
/// breaks, escape sequences: the principal goes into logs and error messages) as the hex
/// of its UTF-8 bytes (`\0A`).
fn escape_value(value: &str, out: &mut String) {
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        match c {
            '"' | '+' | ',' | ';' | '<' | '>' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '#' if i == 0 => out.push_str("\\#"),
            ' ' if i == 0 || i == last => out.push_str("\\ "),
            c if c.is_control() => {
                let mut bytes = [0u8; 4];
                for byte in c.encode_utf8(&mut bytes).bytes() {
                    out.push_str(&format!("\\{byte:02X}"));
                }
            }
            c => out.push(c),
        }
    }
}

/// Splits an established TLS stream into the transport's halves.
fn from_stream(
    stream: TlsStream<SocketIo>,
    peer: String,
    certificate_subject: Option<String>,
) -> Transport {
    let shared = Arc::new(Mutex::new(stream));
    Transport {
        sink: Box::new(StreamSink::new(TlsWriteHalf {
            stream: shared.clone(),
        })),
        source: Box::new(StreamSource::new(TlsReadHalf { stream: shared })),
        peer,
        credentials: None,
        certificate_subject,
    }
}

/// The TCP socket under rustls. Reads and writes try the socket with a non-blocking
/// system call; only when it would block, and only if the current operation may register
/// for that direction, does the call go through tokio (which registers the waker).
/// Otherwise it is Pending without registering anything (the caller is trying, or the
/// direction belongs to the other half).
///
/// Reads are counted per step ([`lock`]): rustls reads the socket 4 KiB at a time for as
/// long as no application data comes out, so a peer sending records without any (TLS 1.3
/// session tickets, say, which a server may send at any time and without end) would keep
/// one receive reading, and the stream's lock held against the writing half, for as long
/// as it kept sending. After [`MAX_READS_PER_STEP`] reads a step stops as if the socket
/// were empty, waking its task if it was waiting, so it is polled again after the others.
///
/// Dropped (with the TLS stream, once both halves are gone), it hands the socket to
/// [`close_lingering`]: closing a socket with input unread would reset the connection and
/// throw away what the peer has not received yet (the tail of an answer, the CLOSE and
/// the `close_notify`), and the peer may have sent records nobody reads any more.
#[derive(Debug)]
struct SocketIo {
    /// The socket; always there until `Drop` takes it.
    stream: Option<TcpStream>,
    /// Its descriptor's number.
    raw: RawFd,
    /// The runtime that drains the socket once it is dropped.
    runtime: tokio::runtime::Handle,
    register_reads: bool,
    register_writes: bool,
    reads_left: u32,
}

/// Socket reads one step of a half may make. rustls reads 4 KiB at a time (more once part
/// of a record is buffered), so a step still completes at least one whole record of the
/// largest size, 16 KiB.
const MAX_READS_PER_STEP: u32 = 8;

impl SocketIo {
    /// Both directions register, and reads are not counted (for the handshake, which one
    /// task drives, under the handshake's deadline). Must be called within a tokio
    /// runtime (the one `stream` is registered with).
    fn new(stream: TcpStream) -> SocketIo {
        SocketIo {
            raw: stream.as_raw_fd(),
            stream: Some(stream),
            runtime: tokio::runtime::Handle::current(),
            register_reads: true,
            register_writes: true,
            reads_left: u32::MAX,
        }
    }

    /// The socket, through tokio (for waits that register with the reactor).
    fn tcp(&mut self) -> Pin<&mut TcpStream> {
        Pin::new(self.stream.as_mut().expect("open until dropped"))
    }
}

impl Drop for SocketIo {
    fn drop(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        // Out of the reactor first. If that fails (its runtime has shut down), the
        // descriptor is closed at once.
        if let Ok(stream) = stream.into_std() {
            close_lingering(&self.runtime, stream.into());
        }
    }
}

impl AsyncRead for SocketIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.reads_left == 0 {
            if this.register_reads {
                cx.waker().wake_by_ref();
            }
            return Poll::Pending;
        }
        if this.register_reads {
            // Waiting: tokio reads (and registers the waker when the socket is empty).
            let read = this.tcp().poll_read(cx, buf);
            if read.is_ready() {
                this.reads_left -= 1;
            }
            return read;
        }
        loop {
            // rustls reads into its own (initialised) buffer, so this initialises nothing.
            match recv_slice_nonblocking(this.raw, buf.initialize_unfilled()) {
                Ok(received) => {
                    this.reads_left -= 1;
                    buf.advance(received);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for SocketIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match send_slices_nonblocking(this.raw, bufs) {
                Ok(sent) => return Poll::Ready(Ok(sent)),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        if this.register_writes {
            this.tcp().poll_write_vectored(cx, bufs)
        } else {
            Poll::Pending
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().tcp().poll_shutdown(cx)
    }
}

type Shared = Arc<Mutex<TlsStream<SocketIo>>>;

/// Locks the shared stream for one step, saying which directions that step may register.
fn lock(
    shared: &Shared,
    register_reads: bool,
    register_writes: bool,
) -> io::Result<MutexGuard<'_, TlsStream<SocketIo>>> {
    let mut stream = shared.lock().map_err(|_| {
        io::Error::other("the TLS stream is unusable: a panic interrupted an operation on it")
    })?;
    let (socket, _) = stream.get_mut();
    socket.register_reads = register_reads;
    socket.register_writes = register_writes;
    socket.reads_left = MAX_READS_PER_STEP;
    Ok(stream)
}

/// A context whose waker does nothing, for tries.
fn try_context() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// The peer closed the TCP connection without a TLS `close_notify`: treated as a close
/// (see the module documentation), so the frame layer decides whether it cut a frame.
fn is_unannounced_close(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::UnexpectedEof
}

/// The reading half of a TLS connection.
#[derive(Debug)]
struct TlsReadHalf {
    stream: Shared,
}

impl AsyncRead for TlsReadHalf {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut stream = lock(&self.stream, true, false)?;
        match Pin::new(&mut *stream).poll_read(cx, buf) {
            Poll::Ready(Err(e)) if is_unannounced_close(&e) => Poll::Ready(Ok(())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(refused(e))),
            other => other,
        }
    }
}

impl StreamReadHalf for TlsReadHalf {
    /// Plaintext rustls decrypted and has not handed out yet (rustls stops wanting to
    /// read while it has some; it also stops after the peer's close_notify, which the next
    /// read reports, so that counts too). A half busy with the writer counts as holding
    /// input: a wrong "yes" costs a wake-up, a wrong "no" a stranded frame.
    fn holds_input(&self) -> bool {
        match self.stream.try_lock() {
            Ok(stream) => !stream.get_ref().1.wants_read(),
            Err(_) => true,
        }
    }

    fn try_read(&mut self, buffer: &mut BytesMut) -> io::Result<usize> {
        let mut stream = lock(&self.stream, false, false)?;
        match poll_read_buf(Pin::new(&mut *stream), &mut try_context(), buffer) {
            Poll::Ready(Ok(read)) => Ok(read),
            Poll::Ready(Err(e)) if is_unannounced_close(&e) => Ok(0),
            Poll::Ready(Err(e)) => Err(refused(e)),
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

/// The writing half of a TLS connection.
#[derive(Debug)]
struct TlsWriteHalf {
    stream: Shared,
}

impl AsyncWrite for TlsWriteHalf {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut stream = lock(&self.stream, false, true)?;
        Pin::new(&mut *stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut stream = lock(&self.stream, false, true)?;
        Pin::new(&mut *stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut stream = lock(&self.stream, false, true)?;
        Pin::new(&mut *stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut stream = lock(&self.stream, false, true)?;
        Pin::new(&mut *stream).poll_shutdown(cx)
    }
}

impl StreamWriteHalf for TlsWriteHalf {
    fn try_write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut stream = lock(&self.stream, false, false)?;
        match Pin::new(&mut *stream).poll_write_vectored(&mut try_context(), slices) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    /// The socket's send queue (records rustls still holds are the flusher's progress).
    fn unsent(&self) -> Option<usize> {
        let stream = self.stream.lock().ok()?;
        super::sys::unsent_bytes(stream.get_ref().0.raw)
    }
}

impl Drop for TlsWriteHalf {
    /// Sends `close_notify` as far as the socket takes it now, then shuts down the
    /// socket's sending side (as dropping a plain TCP writing half does), so the peer sees
    /// the end of the stream even while our reading half lives on.
    fn drop(&mut self) {
        let Ok(mut stream) = lock(&self.stream, false, false) else {
            return;
        };
        let mut cx = try_context();
        if Pin::new(&mut *stream).poll_shutdown(&mut cx).is_pending() {
            // close_notify did not fit: shut down the socket anyway. Shutting down a TCP
            // socket never waits.
            let (socket, _) = stream.get_mut();
            let _ = socket.tcp().poll_shutdown(&mut cx);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::time::Duration;

    use bytes::Bytes;
    use lanner_proto::harness::Pair;
    use lanner_proto::{MessageBuilder, OutFrame};
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa,
        KeyPair,
    };
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use rustls::server::WebPkiClientVerifier;
    use rustls::{ClientConfig, RootCertStore, ServerConfig};
    use tokio::net::TcpListener;

    use super::*;
    use crate::transport::{FrameSink, FrameSource, Listener, Received, connect_tls};
    use crate::url::Endpoint;

    const LIMIT: Duration = Duration::from_secs(20);

    /// A certificate authority generated for one test (keys live in memory only).
    struct Authority {
        issuer: CertifiedIssuer<'static, KeyPair>,
    }

    /// A certificate chain and its private key.
    struct Identity {
        chain: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    }

    impl Authority {
        fn new(name: &str) -> Authority {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            params.distinguished_name = DistinguishedName::new();
            params.distinguished_name.push(DnType::CommonName, name);
            let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap());
            Authority {
                issuer: issuer.unwrap(),
            }
        }

        fn roots(&self) -> Arc<RootCertStore> {
            let mut roots = RootCertStore::empty();
            roots.add(self.issuer.der().clone()).unwrap();
            Arc::new(roots)
        }

        /// A leaf certificate for `names` (DNS names or IP addresses) whose subject has
        /// these attributes.
        fn issue(&self, names: &[&str], subject: &[(DnType, &str)]) -> Identity {
            let names: Vec<String> = names.iter().map(|&n| n.to_owned()).collect();
            let mut params = CertificateParams::new(names).unwrap();
            params.distinguished_name = DistinguishedName::new();
            for (kind, value) in subject {
                params.distinguished_name.push(kind.clone(), *value);
            }
            let key = KeyPair::generate().unwrap();
            let certificate = params.signed_by(&key, &self.issuer).unwrap();
            Identity {
                chain: vec![certificate.der().clone(), self.issuer.der().clone()],
                key: key.into(),
            }
        }
    }

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// Client certificates: not asked for, optional, or required.
    enum ClientCerts<'a> {
        None,
        Optional(&'a Authority),
        Required(&'a Authority),
    }

    fn server_config(identity: Identity, client_certs: ClientCerts<'_>) -> Arc<ServerConfig> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap();
        let builder = match client_certs {
            ClientCerts::None => builder.with_no_client_auth(),
            ClientCerts::Optional(ca) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(ca.roots(), provider())
                    .allow_unauthenticated()
                    .build()
                    .unwrap(),
            ),
            ClientCerts::Required(ca) => builder.with_client_cert_verifier(
                WebPkiClientVerifier::builder_with_provider(ca.roots(), provider())
                    .build()
                    .unwrap(),
            ),
        };
        Arc::new(
            builder
                .with_single_cert(identity.chain, identity.key)
                .unwrap(),
        )
    }

    fn client_config(trusted: &Authority, identity: Option<Identity>) -> Arc<ClientConfig> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_root_certificates(trusted.roots());
        Arc::new(match identity {
            Some(identity) => builder
                .with_client_auth_cert(identity.chain, identity.key)
                .unwrap(),
            None => builder.with_no_client_auth(),
        })
    }

    fn server_identity(ca: &Authority) -> Identity {
        ca.issue(
            &["localhost", "127.0.0.1"],
            &[(DnType::CommonName, "server")],
        )
    }

    /// Connects a client to a server on loopback; returns both ends' results.
    async fn handshake(
        server: Arc<ServerConfig>,
        client: Arc<ClientConfig>,
        server_name: &str,
    ) -> (io::Result<Transport>, io::Result<Transport>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let accepting = async {
            let (stream, _) = listener.accept().await.unwrap();
            accept(stream, server).await
        };
        let connecting = connect(&address, client, server_name);
        let (server, client) =
            tokio::time::timeout(LIMIT, async { tokio::join!(accepting, connecting) })
                .await
                .expect("the handshake finishes");
        (server, client)
    }

    async fn connected_pair(
        server: Arc<ServerConfig>,
        client: Arc<ClientConfig>,
    ) -> (Transport, Transport) {
        let (server, client) = handshake(server, client, "localhost").await;
        let (mut server, mut client) = (server.unwrap(), client.unwrap());
        server.source.set_max_frame_size(64 << 20);
        client.source.set_max_frame_size(64 << 20);
        (server, client)
    }

    /// A connected pair whose client presents no certificate.
    async fn anonymous_pair() -> (Transport, Transport) {
        let ca = Authority::new("Test CA");
        connected_pair(
            server_config(server_identity(&ca), ClientCerts::None),
            client_config(&ca, None),
        )
        .await
    }

    /// Sends a frame, waiting for room.
    async fn send(sink: &mut dyn FrameSink, frame: OutFrame) {
        let mut frame = frame;
        poll_fn(|cx| sink.poll_send(cx, &mut frame)).await.unwrap();
        assert_eq!(frame.remaining(), 0);
    }

    /// How a test receives.
    #[derive(Clone, Copy, Debug)]
    enum Receive {
        /// `try_recv` in a loop, yielding in between (the runtime's spinning).
        Spinning,
        /// `poll_recv` with the task's waker (the runtime's sleeping).
        Polling,
    }

    async fn receive(source: &mut dyn FrameSource, how: Receive) -> Received {
        match how {
            Receive::Spinning => loop {
                match source.try_recv().unwrap() {
                    Received::Partial | Received::Empty => tokio::task::yield_now().await,
                    received => return received,
                }
            },
            Receive::Polling => {
                poll_fn(|cx| {
                    loop {
                        match source.poll_recv(cx) {
                            Poll::Ready(Ok(Received::Partial)) => continue,
                            Poll::Ready(received) => return Poll::Ready(received.unwrap()),
                            Poll::Pending => return Poll::Pending,
                        }
                    }
                })
                .await
            }
        }
    }

    async fn receive_frame(source: &mut dyn FrameSource, how: Receive) -> Bytes {
        match receive(source, how).await {
            Received::Frame(frame) => frame,
            other => panic!("expected a frame, got {other:?}"),
        }
    }

    /// Frames of several kinds: small contiguous ones, a request with a few KiB inline,
    /// and requests of several MiB in bulk segments.
    fn frames() -> Vec<OutFrame> {
        let mut pair = Pair::connected();
        let mut request = |inline: usize, segments: &[usize]| {
            let mut message = MessageBuilder::request(7, 0, 1, 0xfeed);
            let pattern: Vec<u8> = (0..inline).map(|i| i as u8).collect();
            message.inline().put_slice(&pattern);
            for (n, &len) in segments.iter().enumerate() {
                let segment: Vec<u8> = (0..len).map(|i| (i * 31 + n) as u8).collect();
                message.push_segment(Bytes::from(segment));
            }
            let (_, frame) = pair.client.conn.send_request(message).unwrap();
            frame
        };
        vec![
            OutFrame::contiguous(lanner_proto::frame::encode_ping(1)),
            request(4096, &[]),
            request(100, &[3 << 20, 1, 2 << 20]),
            OutFrame::contiguous(lanner_proto::frame::encode_ping(2)),
            request(10, &[5 << 20]),
            OutFrame::contiguous(lanner_proto::frame::encode_ping(3)),
        ]
    }

    /// Sends every frame from `from` while `to` receives them `how`; checks each arrives
    /// byte for byte.
    async fn exchange(from: &mut Transport, to: &mut Transport, how: Receive) {
        let frames = frames();
        let expected: Vec<Bytes> = frames.iter().map(|f| f.clone().into_contiguous()).collect();
        let sending = async {
            for frame in frames {
                send(from.sink.as_mut(), frame).await;
            }
        };
        let receiving = async {
            for (i, expected) in expected.iter().enumerate() {
                let frame = receive_frame(to.source.as_mut(), how).await;
                assert!(frame == expected, "frame {i} ({how:?}) arrived altered");
            }
        };
        tokio::time::timeout(LIMIT, async { tokio::join!(sending, receiving) })
            .await
            .expect("the frames arrive");
    }

    #[tokio::test]
    async fn a_flood_of_session_tickets_is_read_a_few_records_per_receive() {
        // A server that sends 600 session tickets after its handshake (about 48 KiB of
        // records carrying no application data; rustls refuses a flight over 64 KiB),
        // then a frame.
        let ca = Authority::new("Test CA");
        let mut config = (*server_config(server_identity(&ca), ClientCerts::None)).clone();
        config.send_tls13_tickets = 600;
        let (mut server, mut client) =
            connected_pair(Arc::new(config), client_config(&ca, None)).await;
        let ping = lanner_proto::frame::encode_ping(9);
        send(server.sink.as_mut(), OutFrame::contiguous(ping.clone())).await;

        // All of it is in the client's socket by now (loopback delivers as it sends). A
        // receive reads a few records and stops, rather than reading every ticket there
        // is; receives that follow get through them to the frame.
        assert!(matches!(client.source.try_recv().unwrap(), Received::Empty));
        let frame = receive_frame(client.source.as_mut(), Receive::Spinning);
        let frame = tokio::time::timeout(LIMIT, frame)
            .await
            .expect("the frame arrives");
        assert_eq!(frame, ping);
    }

    /// Frames that came in one read are all in the source's buffer once a receive took
    /// the first: none stays decrypted inside rustls, where the receiver could not see it
    /// (`frame_ready`) and no socket readiness would come for it.
    #[tokio::test]
    async fn frames_read_together_are_all_seen_after_the_first_is_taken() {
        let (mut server, mut client) = anonymous_pair().await;
        // A frame of several records (rustls reads 4 KiB at a time), then two small ones.
        let large = frames().swap_remove(1);
        let expected = large.clone().into_contiguous();
        send(server.sink.as_mut(), large).await;
        for nonce in 2..=3 {
            let ping = lanner_proto::frame::encode_ping(nonce);
            send(server.sink.as_mut(), OutFrame::contiguous(ping)).await;
        }
        // All of it is in the client's socket by now (loopback delivers as it sends).
        tokio::time::sleep(Duration::from_millis(20)).await;
        let first = receive_frame(client.source.as_mut(), Receive::Spinning).await;
        assert!(first == expected, "the first frame arrived altered");
        assert!(
            client.source.frame_ready(),
            "the next frame is not in sight"
        );
        for nonce in 2..=3 {
            match client.source.try_recv().unwrap() {
                Received::Frame(frame) => {
                    assert_eq!(frame, lanner_proto::frame::encode_ping(nonce));
                }
                other => panic!("frame {nonce}: {other:?}"),
            }
        }
    }

    #[test]
    fn control_characters_in_a_subject_are_escaped() {
        let mut out = String::new();
        escape_value("alice\nINFO forged\u{1b}[31m\0 x\u{85}", &mut out);
        assert_eq!(out, "alice\\0AINFO forged\\1B[31m\\00 x\\C2\\85");
    }

    /// A request of about `len` bytes in all (inline data).
    fn request_of(len: usize) -> OutFrame {
        let mut pair = Pair::connected();
        let mut message = MessageBuilder::request(7, 0, 1, 0xfeed);
        message.inline().put_slice(&vec![5u8; len - 64]);
        let (_, frame) = pair.client.conn.send_request(message).unwrap();
        frame
    }

    /// When the receive buffer has less room than rustls has plaintext, the rest stays in
    /// rustls: a receiver that takes the frame it wants and stops must still see that
    /// input is there (`frame_ready`), since the socket, read empty, will not say so.
    #[tokio::test]
    async fn plaintext_left_inside_rustls_counts_as_ready() {
        let (mut server, mut client) = anonymous_pair().await;
        // Most of the receive buffer's 64 KiB taken by one frame, then two frames at once
        // that do not fit the rest.
        let first = request_of(56 << 10);
        send(server.sink.as_mut(), first.clone()).await;
        let first = first.into_contiguous();
        let mut pair = [request_of(4 << 10), request_of(7 << 10)];
        let expected: Vec<Bytes> = pair.iter().map(|f| f.clone().into_contiguous()).collect();
        poll_fn(|cx| server.sink.poll_send_batch(cx, &mut pair))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        let received = receive_frame(client.source.as_mut(), Receive::Spinning).await;
        assert!(received == first, "the first frame arrived altered");
        let received = receive_frame(client.source.as_mut(), Receive::Spinning).await;
        assert!(received == expected[0], "the second frame arrived altered");
        assert!(
            client.source.frame_ready(),
            "the third frame is out of sight"
        );
        let received = receive_frame(client.source.as_mut(), Receive::Spinning).await;
        assert!(received == expected[1], "the third frame arrived altered");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_round_trip_both_ways_spinning_and_polling() {
        let (mut server, mut client) = anonymous_pair().await;
        assert!(
            client.peer.starts_with("tls://127.0.0.1:"),
            "{}",
            client.peer
        );
        assert!(
            server.peer.starts_with("tls://127.0.0.1:"),
            "{}",
            server.peer
        );
        assert_eq!(server.certificate_subject, None);
        assert_eq!(client.certificate_subject, None);

        for how in [Receive::Spinning, Receive::Polling] {
            exchange(&mut client, &mut server, how).await;
            exchange(&mut server, &mut client, how).await;
        }

        // Nothing more is there.
        assert!(matches!(server.source.try_recv().unwrap(), Received::Empty));

        // Dropping the client's sending half ends the stream cleanly (close_notify and a
        // TCP shutdown) while its receiving half lives on.
        drop(client.sink);
        for how in [Receive::Spinning, Receive::Polling] {
            let received = tokio::time::timeout(LIMIT, receive(server.source.as_mut(), how))
                .await
                .unwrap();
            assert!(matches!(received, Received::Closed), "{received:?}");
        }
        // The server can still send to the client's receiving half.
        let ping = lanner_proto::frame::encode_ping(9);
        send(server.sink.as_mut(), OutFrame::contiguous(ping.clone())).await;
        let frame = tokio::time::timeout(
            LIMIT,
            receive_frame(client.source.as_mut(), Receive::Polling),
        )
        .await
        .unwrap();
        assert_eq!(frame, ping);
    }

    #[tokio::test]
    async fn a_frame_is_sent_only_once_rustls_has_flushed_it() {
        let (mut server, mut client) = anonymous_pair().await;
        // Frames of 1 KiB while nobody reads, sent as the connection does (without a waker),
        // until the socket is full. rustls takes the whole of the last frame into its
        // buffer but cannot write it out: the send is Pending although no byte of the
        // frame is left to hand over.
        let mut cx = try_context();
        let mut sent = Vec::new();
        let mut stuck = loop {
            assert!(sent.len() < 10_000_000, "the socket never filled up");
            let reason = format!("{:1000}", sent.len());
            let close = lanner_proto::frame::encode_close(lanner_proto::Status::Internal, &reason);
            let mut frame = OutFrame::contiguous(close.clone());
            sent.push(close);
            match client.sink.poll_send(&mut cx, &mut frame) {
                Poll::Ready(result) => result.unwrap(),
                Poll::Pending => break frame,
            }
        };
        assert_eq!(stuck.remaining(), 0);
        // Sending the same frame again finishes the flush once the server reads.
        let finishing = async {
            poll_fn(|cx| client.sink.poll_send(cx, &mut stuck))
                .await
                .unwrap()
        };
        let receiving = async {
            for (i, expected) in sent.iter().enumerate() {
                let how = if i % 2 == 0 {
                    Receive::Spinning
                } else {
                    Receive::Polling
                };
                let frame = receive_frame(server.source.as_mut(), how).await;
                assert_eq!(&frame, expected, "frame {i}");
            }
        };
        tokio::time::timeout(LIMIT, async { tokio::join!(finishing, receiving) })
            .await
            .expect("every frame arrives");
    }

    #[tokio::test]
    async fn a_peer_that_closes_without_close_notify_is_a_close_between_frames() {
        let ca = Authority::new("Test CA");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let server = server_config(server_identity(&ca), ClientCerts::None);
        let accepting = async {
            let (stream, _) = listener.accept().await.unwrap();
            accept(stream, server).await.unwrap()
        };
        let connecting = async {
            // A raw rustls client over a plain socket, which the test closes abruptly.
            let stream = TcpStream::connect(&address).await.unwrap();
            tokio_rustls::TlsConnector::from(client_config(&ca, None))
                .connect(ServerName::try_from("localhost").unwrap(), stream)
                .await
                .unwrap()
        };
        let (mut server, client) = tokio::join!(accepting, connecting);
        // End the TCP stream (FIN) without a close_notify. (Dropping the socket could
        // reset the connection instead, as the server's session tickets are unread.)
        let (mut socket, _) = client.into_inner();
        tokio::io::AsyncWriteExt::shutdown(&mut socket)
            .await
            .unwrap();
        let received =
            tokio::time::timeout(LIMIT, receive(server.source.as_mut(), Receive::Polling))
                .await
                .unwrap();
        assert!(matches!(received, Received::Closed), "{received:?}");
    }

    #[tokio::test]
    async fn the_client_certificate_subject_reaches_the_server() {
        let ca = Authority::new("Test CA");
        let alice = ca.issue(
            &["alice.example"],
            &[
                (DnType::CommonName, "alice"),
                (DnType::OrganizationName, "Acme"),
            ],
        );
        let leaf = alice.chain[0].clone();
        let (mut server, mut client) = connected_pair(
            server_config(server_identity(&ca), ClientCerts::Required(&ca)),
            client_config(&ca, Some(alice)),
        )
        .await;
        assert_eq!(
            server.certificate_subject.as_deref(),
            Some("CN=alice, O=Acme")
        );
        // The same as x509-parser's rendering for an ordinary name.
        let (_, parsed) = x509_parser::parse_x509_certificate(&leaf).unwrap();
        assert_eq!(
            server.certificate_subject.as_deref(),
            Some(parsed.subject().to_string().as_str())
        );
        assert_eq!(client.certificate_subject, None);

        // The connection works.
        let ping = lanner_proto::frame::encode_ping(5);
        send(client.sink.as_mut(), OutFrame::contiguous(ping.clone())).await;
        let frame = receive_frame(server.source.as_mut(), Receive::Polling).await;
        assert_eq!(frame, ping);
    }

    #[tokio::test]
    async fn a_subject_that_would_read_as_another_is_escaped() {
        let ca = Authority::new("Test CA");
        let mallory = ca.issue(
            &["mallory.example"],
            &[
                (DnType::CommonName, "alice, O=Acme"),
                (DnType::OrganizationName, "#1 + Co "),
            ],
        );
        let (server, _client) = connected_pair(
            server_config(server_identity(&ca), ClientCerts::Required(&ca)),
            client_config(&ca, Some(mallory)),
        )
        .await;
        assert_eq!(
            server.certificate_subject.as_deref(),
            Some(r"CN=alice\, O=Acme, O=\#1 \+ Co\ ")
        );
    }

    #[tokio::test]
    async fn optional_client_certificates_may_be_left_out() {
        let ca = Authority::new("Test CA");
        let (server, _client) = connected_pair(
            server_config(server_identity(&ca), ClientCerts::Optional(&ca)),
            client_config(&ca, None),
        )
        .await;
        assert_eq!(server.certificate_subject, None);
    }

    #[tokio::test]
    async fn a_client_that_does_not_trust_the_server_fails_the_handshake() {
        let ca = Authority::new("Test CA");
        let other = Authority::new("Other CA");
        let (server, client) = handshake(
            server_config(server_identity(&ca), ClientCerts::None),
            client_config(&other, None),
            "localhost",
        )
        .await;
        let error = client.unwrap_err().to_string();
        assert!(
            error.starts_with("TLS handshake with 127.0.0.1:"),
            "{error}"
        );
        assert!(
            error.contains("invalid peer certificate: UnknownIssuer"),
            "{error}"
        );
        let error = server.unwrap_err().to_string();
        assert!(
            error.starts_with("TLS handshake with 127.0.0.1:"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn the_server_name_must_match_the_certificate() {
        let ca = Authority::new("Test CA");
        let config = || server_config(server_identity(&ca), ClientCerts::None);
        // An IP address literal the certificate names.
        let (server, client) = handshake(config(), client_config(&ca, None), "127.0.0.1").await;
        server.unwrap();
        client.unwrap();
        // A name it does not.
        let (_, client) = handshake(config(), client_config(&ca, None), "elsewhere.example").await;
        let error = client.unwrap_err().to_string();
        assert!(error.contains("invalid peer certificate"), "{error}");
        // Not a name at all.
        let error = connect("127.0.0.1:1", client_config(&ca, None), "not a name!")
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert!(
            error.to_string().contains("invalid TLS server name"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_server_requiring_client_certificates_rejects_a_client_without_one() {
        let ca = Authority::new("Test CA");
        let (server, client) = handshake(
            server_config(server_identity(&ca), ClientCerts::Required(&ca)),
            client_config(&ca, None),
            "localhost",
        )
        .await;
        let error = server.unwrap_err().to_string();
        assert!(
            error.starts_with("TLS handshake with 127.0.0.1:"),
            "{error}"
        );
        assert!(error.contains("no certificates"), "{error}");
        // In TLS 1.3 the client's side of the handshake is over before the server checks
        // the client's certificate: the refusal reaches the client as an error on its first
        // receive (or already in the handshake, if the alert came in time).
        if let Ok(mut client) = client {
            let received = tokio::time::timeout(LIMIT, async {
                poll_fn(|cx| client.source.poll_recv(cx)).await
            })
            .await
            .unwrap();
            let error = received.unwrap_err().to_string();
            assert!(error.contains("CertificateRequired"), "{error}");
        }
    }

    #[tokio::test]
    async fn a_tls_listener_accepts_without_waiting_for_handshakes() {
        let ca = Authority::new("Test CA");
        let mut listener = Listener::bind(&Endpoint::Tcp("127.0.0.1:0".into()))
            .await
            .unwrap();
        listener
            .set_tls(server_config(
                server_identity(&ca),
                ClientCerts::Optional(&ca),
            ))
            .unwrap();
        let endpoint = listener.local_endpoint().unwrap();
        let Endpoint::Tcp(address) = &endpoint else {
            panic!("{endpoint:?}")
        };

        // A client that connects and never says a word: accepting it does not wait.
        let _silent = TcpStream::connect(address).await.unwrap();
        let silent = tokio::time::timeout(LIMIT, listener.accept())
            .await
            .unwrap()
            .unwrap();
        assert!(silent.peer().starts_with("tls://127.0.0.1:"), "{silent:?}");

        // A real client behind it is accepted and established meanwhile.
        let bob = ca.issue(&["bob.example"], &[(DnType::CommonName, "bob")]);
        let connecting = connect_tls(&endpoint, client_config(&ca, Some(bob)), "localhost");
        let accepting = async {
            let incoming = listener.accept().await.unwrap();
            let peer = incoming.peer().to_owned();
            let transport = incoming.establish().await.unwrap();
            assert_eq!(transport.peer, peer);
            transport
        };
        let (mut server, client) =
            tokio::time::timeout(LIMIT, async { tokio::join!(accepting, connecting) })
                .await
                .unwrap();
        let mut client = client.unwrap();
        assert_eq!(server.certificate_subject.as_deref(), Some("CN=bob"));
        let ping = lanner_proto::frame::encode_ping(3);
        send(client.sink.as_mut(), OutFrame::contiguous(ping.clone())).await;
        let frame = receive_frame(server.source.as_mut(), Receive::Spinning).await;
        assert_eq!(frame, ping);
        let pong = lanner_proto::frame::encode_pong(3);
        send(server.sink.as_mut(), OutFrame::contiguous(pong.clone())).await;
        let frame = receive_frame(client.source.as_mut(), Receive::Polling).await;
        assert_eq!(frame, pong);

        // The silent client's handshake is still waiting.
        let waiting = tokio::time::timeout(Duration::from_millis(100), silent.establish()).await;
        assert!(waiting.is_err());
    }

    #[tokio::test]
    async fn tls_is_for_tcp_only() {
        let ca = Authority::new("Test CA");
        let endpoint = Endpoint::Mem("tls-is-for-tcp-only".into());
        let mut listener = Listener::bind(&endpoint).await.unwrap();
        let error = listener
            .set_tls(server_config(server_identity(&ca), ClientCerts::None))
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        let error = connect_tls(&endpoint, client_config(&ca, None), "localhost")
            .await
            .unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(
            error.to_string(),
            "TLS is available on tcp:// endpoints only"
        );

        // A listener without TLS hands out transports at once.
        let connecting = async { crate::transport::connect(&endpoint).await.unwrap() };
        let accepting = async { listener.accept().await.unwrap().establish().await.unwrap() };
        let (client, server) = tokio::join!(connecting, accepting);
        assert_eq!(server.peer, "mem://client");
        assert_eq!(client.certificate_subject, None);
    }
}
