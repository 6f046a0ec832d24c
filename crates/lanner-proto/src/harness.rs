//! A deterministic in-memory two-peer harness: a client and a server [`Connection`] joined
//! by byte queues, stepped by hand. Frames travel as a byte stream through a
//! [`FrameSplitter`], exactly as over a socket, so tests exercise the stream framing too.
//! Available to this crate's tests and, with the `harness` feature, to other crates.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::auth::{ClientAuthenticator, ServerAuthenticator};
use crate::builder::MessageBuilder;
use crate::connection::{Connection, Event};
use crate::error::{ProtocolError, SendError};
use crate::limits::Limits;
use crate::splitter::FrameSplitter;

/// One end of the pair: its state machine plus the bytes in flight towards it.
#[derive(Debug)]
pub struct Peer {
    /// The state machine.
    pub conn: Connection,
    inbox: BytesMut,
    splitter: FrameSplitter,
}

impl Peer {
    /// A peer around `conn` with an empty inbox.
    pub fn new(conn: Connection) -> Peer {
        let splitter = FrameSplitter::new(conn.max_incoming_frame_size());
        Peer {
            conn,
            inbox: BytesMut::new(),
            splitter,
        }
    }

    /// Appends raw bytes to this peer's inbox (as if they arrived on the wire).
    pub fn inject(&mut self, bytes: &[u8]) {
        self.inbox.extend_from_slice(bytes);
    }

    /// Bytes waiting in the inbox.
    pub fn pending_bytes(&self) -> usize {
        self.inbox.len()
    }

    /// Splits the next complete frame off the inbox and processes it; `None` if no complete
    /// frame is waiting. The event comes with the frame it was decoded from (its payload
    /// is a slice of that frame). After an error, stop: the connection is broken.
    pub fn receive_next(&mut self) -> Option<Result<(Bytes, Event), ProtocolError>> {
        self.splitter
            .set_max_frame_size(self.conn.max_incoming_frame_size());
        match self.splitter.split(&mut self.inbox) {
            Ok(Some(frame)) => Some(
                self.conn
                    .handle_frame(frame.clone())
                    .map(|event| (frame, event)),
            ),
            Ok(None) => None,
            Err(error) => Some(Err(error.into())),
        }
    }

    /// Processes every complete frame in the inbox, in order, stopping at the first error.
    pub fn receive_all(&mut self) -> Vec<Result<Event, ProtocolError>> {
        let mut events = Vec::new();
        while let Some(result) = self.receive_next() {
            let failed = result.is_err();
            events.push(result.map(|(_, event)| event));
            if failed {
                break;
            }
        }
        events
    }
}

/// A connected client and server.
#[derive(Debug)]
pub struct Pair {
    /// The client side.
    pub client: Peer,
    /// The server side.
    pub server: Peer,
    /// Frames the client sent, for inspection (as written to the wire).
    pub client_sent: VecDeque<Bytes>,
    /// Frames the server sent.
    pub server_sent: VecDeque<Bytes>,
}

impl Pair {
    /// A pair whose handshake has not run yet; the client's HELLO is already in the
    /// server's inbox.
    pub fn new(client_limits: Limits, server_limits: Limits) -> Pair {
        let (client, hello) = Connection::client(client_limits);
        Pair::from_parts(client, hello, Connection::server(server_limits))
    }

    /// A pair whose handshake has not run yet, authenticating with these mechanisms.
    pub fn with_auth(
        client: Box<dyn ClientAuthenticator>,
        server: Box<dyn ServerAuthenticator>,
    ) -> Pair {
        let (client, hello) = Connection::client_with(Limits::default(), client);
        Pair::from_parts(
            client,
            hello,
            Connection::server_with(Limits::default(), server),
        )
    }

    fn from_parts(client: Connection, hello: Bytes, server: Connection) -> Pair {
        let mut pair = Pair {
            client: Peer::new(client),
            server: Peer::new(server),
            client_sent: VecDeque::new(),
            server_sent: VecDeque::new(),
        };
        pair.server.inject(&hello);
        pair.client_sent.push_back(hello);
        pair
    }

    /// A pair with the handshake completed, using the given limits.
    pub fn connected_with(client_limits: Limits, server_limits: Limits) -> Pair {
        let mut pair = Pair::new(client_limits, server_limits);
        pair.handshake()
            .expect("handshake between two fresh peers succeeds");
        pair
    }

    /// A pair with default limits and the handshake completed.
    pub fn connected() -> Pair {
        Pair::connected_with(Limits::default(), Limits::default())
    }

    /// Runs the handshake: the server processes HELLO, the client processes WELCOME (and
    /// sends AUTH if its mechanism has one), the server processes AUTH.
    pub fn handshake(&mut self) -> Result<(), ProtocolError> {
        for event in self.server.receive_all() {
            if let Event::Accepted { welcome } = event? {
                self.client.inject(&welcome);
                self.server_sent.push_back(welcome);
            }
        }
        let mut authenticating = false;
        for event in self.client.receive_all() {
            if let Event::Established { auth: Some(auth) } = event? {
                self.server.inject(&auth);
                self.client_sent.push_back(auth);
                authenticating = true;
            }
        }
        if authenticating {
            for event in self.server.receive_all() {
                event?;
            }
        }
        Ok(())
    }

    /// The client sends a request; its bytes land in the server's inbox.
    pub fn client_call(&mut self, request: MessageBuilder) -> Result<u64, SendError> {
        let (call_id, frame) = self.client.conn.send_request(request).map_err(|(e, _)| e)?;
        let bytes = frame.into_contiguous();
        self.server.inject(&bytes);
        self.client_sent.push_back(bytes);
        Ok(call_id)
    }

    /// The server answers `call_id`; the bytes land in the client's inbox.
    pub fn server_respond(
        &mut self,
        call_id: u64,
        response: MessageBuilder,
    ) -> Result<(), SendError> {
        let bytes = self
            .server
            .conn
            .send_response(call_id, response)?
            .into_contiguous();
        self.client.inject(&bytes);
        self.server_sent.push_back(bytes);
        Ok(())
    }
}
