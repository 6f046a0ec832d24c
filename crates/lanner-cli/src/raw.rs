//! The raw baseline: the same payload ping-ponged over the same socket with no Lanner code.
//!
//! Written with the same care as Lanner: `TCP_NODELAY`, one vectored write per message
//! (4-byte length + payload), a receive buffer sized once, and the same wait strategy
//! (poll the non-blocking socket for the spin budget, then sleep in `poll(2)`).
//!
//! A message whose length word has [`ONE_WAY`] set is taken without an answer (the
//! bandwidth benchmark streams those, then one ordinary message to learn that all arrived).

use std::io::{self, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Length-word flag of a message the echo server takes without answering.
pub const ONE_WAY: u32 = 1 << 31;

/// A connected raw stream, either kind.
pub enum RawStream {
    /// TCP with `TCP_NODELAY`.
    Tcp(TcpStream),
    /// Unix stream socket.
    Unix(UnixStream),
}

impl RawStream {
    /// Connects to a `tcp://host:port` or `unix:///path` endpoint.
    pub fn connect(endpoint: &str) -> io::Result<RawStream> {
        let stream = if let Some(address) = endpoint.strip_prefix("tcp://") {
            let stream = TcpStream::connect(address)?;
            stream.set_nodelay(true)?;
            RawStream::Tcp(stream)
        } else if let Some(path) = endpoint.strip_prefix("unix://") {
            RawStream::Unix(UnixStream::connect(path)?)
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("raw baseline cannot use {endpoint}"),
            ));
        };
        stream.set_nonblocking(true)?;
        Ok(stream)
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            RawStream::Tcp(s) => s.set_nonblocking(on),
            RawStream::Unix(s) => s.set_nonblocking(on),
        }
    }

    fn fd(&self) -> i32 {
        match self {
            RawStream::Tcp(s) => s.as_raw_fd(),
            RawStream::Unix(s) => s.as_raw_fd(),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            RawStream::Tcp(s) => s.read(buf),
            RawStream::Unix(s) => s.read(buf),
        }
    }

    fn write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        match self {
            RawStream::Tcp(s) => s.write_vectored(slices),
            RawStream::Unix(s) => s.write_vectored(slices),
        }
    }

    /// Reads exactly `buf.len()` bytes: spin on the non-blocking socket for `spin` after
    /// the last progress, then sleep in poll(2).
    pub fn read_exact_spin(&mut self, buf: &mut [u8], spin: Duration) -> io::Result<()> {
        let mut filled = 0;
        let mut spin_until = Instant::now() + spin;
        while filled < buf.len() {
            match self.read(&mut buf[filled..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    filled += n;
                    spin_until = Instant::now() + spin;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() < spin_until {
                        std::hint::spin_loop();
                    } else {
                        poll_fd(self.fd(), libc::POLLIN)?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes a length-prefixed message with vectored writes, waiting in poll(2) when the
    /// socket is full.
    pub fn write_message(&mut self, payload: &[u8]) -> io::Result<()> {
        self.write_flagged(payload, 0)
    }

    /// Writes a message the server takes without answering.
    pub fn write_one_way(&mut self, payload: &[u8]) -> io::Result<()> {
        self.write_flagged(payload, ONE_WAY)
    }

    fn write_flagged(&mut self, payload: &[u8], flags: u32) -> io::Result<()> {
        let header = (payload.len() as u32 | flags).to_le_bytes();
        let total = header.len() + payload.len();
        let mut written = 0;
        while written < total {
            let slices = if written < header.len() {
                [IoSlice::new(&header[written..]), IoSlice::new(payload)]
            } else {
                [
                    IoSlice::new(&payload[written - header.len()..]),
                    IoSlice::new(&[]),
                ]
            };
            match self.write_vectored(&slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    poll_fd(self.fd(), libc::POLLOUT)?
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One round trip: send `payload`, receive the echo into `reply` (resized to fit).
    pub fn round_trip(
        &mut self,
        payload: &[u8],
        reply: &mut Vec<u8>,
        spin: Duration,
    ) -> io::Result<()> {
        self.write_message(payload)?;
        let mut header = [0u8; 4];
        self.read_exact_spin(&mut header, spin)?;
        let len = u32::from_le_bytes(header) as usize;
        reply.resize(len, 0);
        self.read_exact_spin(reply, spin)
    }
}

/// Waits in poll(2) until `fd` has one of `events`.
pub(crate) fn poll_fd(fd: i32, events: i16) -> io::Result<()> {
    let mut pollfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: `pollfd` is a valid, initialised pollfd and we pass a count of 1.
        let rc = unsafe { libc::poll(&mut pollfd, 1, -1) };
        if rc >= 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// A raw echo server listening on a TCP port or a Unix socket.
pub enum RawListener {
    /// TCP.
    Tcp(TcpListener),
    /// Unix socket (file removed on drop).
    Unix(UnixListener, PathBuf),
}

impl RawListener {
    /// Binds a free TCP port on 127.0.0.1, or a Unix socket at `path`.
    pub fn bind(tcp: bool, path: PathBuf) -> io::Result<RawListener> {
        if tcp {
            Ok(RawListener::Tcp(TcpListener::bind("127.0.0.1:0")?))
        } else {
            let _ = std::fs::remove_file(&path);
            Ok(RawListener::Unix(UnixListener::bind(&path)?, path))
        }
    }

    /// The endpoint URL.
    pub fn endpoint(&self) -> io::Result<String> {
        Ok(match self {
            RawListener::Tcp(l) => format!("tcp://{}", l.local_addr()?),
            RawListener::Unix(_, path) => format!("unix://{}", path.display()),
        })
    }

    /// Serves echo connections forever, one thread each.
    pub fn serve(self, spin: Duration) {
        loop {
            let stream = match &self {
                RawListener::Tcp(l) => l.accept().map(|(s, _)| {
                    let _ = s.set_nodelay(true);
                    RawStream::Tcp(s)
                }),
                RawListener::Unix(l, _) => l.accept().map(|(s, _)| RawStream::Unix(s)),
            };
            match stream {
                Ok(stream) => {
                    std::thread::spawn(move || {
                        let _ = echo_connection(stream, spin);
                    });
                }
                Err(error) => {
                    eprintln!("raw accept failed: {error}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}

impl Drop for RawListener {
    fn drop(&mut self) {
        if let RawListener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn echo_connection(mut stream: RawStream, spin: Duration) -> io::Result<()> {
    stream.set_nonblocking(true)?;
    let mut buffer = Vec::new();
    loop {
        let mut header = [0u8; 4];
        stream.read_exact_spin(&mut header, spin)?;
        let word = u32::from_le_bytes(header);
        buffer.resize((word & !ONE_WAY) as usize, 0);
        stream.read_exact_spin(&mut buffer, spin)?;
        if word & ONE_WAY == 0 {
            stream.write_message(&buffer)?;
        }
    }
}
