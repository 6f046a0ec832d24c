//! The connection state machine: handshake, call accounting and flow-control credits.
//!
//! It does no I/O. The runtime hands it each received frame ([`Connection::handle_frame`])
//! and asks it to stamp each outgoing message ([`Connection::send_request`],
//! [`Connection::send_response`]); it answers with events and encoded frames.
//!
//! Credits: each side announces at connect how many requests the other may have
//! outstanding towards it. A sender spends one credit per request and never sends without
//! one; the receiver returns the credit on the response (piggybacked) or, when replies do
//! not flow, with an explicit CREDIT frame. A request that arrives without credit is a
//! protocol violation, so a peer cannot make the receiver hold more than
//! `credits × max_frame_size` bytes of requests.

use bytes::Bytes;

use crate::auth::{
    AuthError, ClientAuthenticator, Principal, ServerAuthenticator, ServerStep,
    TransportAuthentication,
};
use crate::builder::MessageBuilder;
use crate::error::{ProtocolError, SendError};
use crate::frame::{
    self, Frame, FrameKind, HELLO_LEN, Hello, Request, Response, WELCOME_LEN, Welcome,
};
use crate::limits::{Limits, MAX_FRAME_SIZE, MAX_SEND_CREDITS, MIN_FRAME_SIZE, PROTOCOL_VERSION};
use crate::out_frame::OutFrame;
use crate::payload::ExternalSegments;
use crate::plain::{PlainHead, PlainRequest};
use crate::status::Status;

/// The largest frame accepted before the handshake completes. Handshake frames are tiny;
/// this keeps an unauthenticated peer from making us reserve a large buffer.
pub const HANDSHAKE_MAX_FRAME_SIZE: u32 = 4096;
const _: () = assert!(HANDSHAKE_MAX_FRAME_SIZE as usize >= HELLO_LEN);
const _: () = assert!(HANDSHAKE_MAX_FRAME_SIZE as usize >= WELCOME_LEN);

/// Which side of the connection this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Opened the connection and sends HELLO.
    Client,
    /// Accepted the connection and answers with WELCOME.
    Server,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    AwaitingHello,
    AwaitingWelcome,
    AwaitingAuth,
    Open,
    Closed,
}

impl State {
    fn describe(self) -> &'static str {
        match self {
            State::AwaitingHello => "awaiting HELLO",
            State::AwaitingWelcome => "awaiting WELCOME",
            State::AwaitingAuth => "awaiting AUTH",
            State::Open => "open",
            State::Closed => "closed",
        }
    }
}

/// What a received frame means to the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// (Server) The client's HELLO was accepted; send this WELCOME frame. The connection is
    /// open unless the mechanism needs the client's AUTH frame first
    /// ([`Connection::is_open`] says which; [`Event::Authenticated`] follows then).
    Accepted {
        /// The WELCOME frame to send.
        welcome: Bytes,
    },
    /// (Server) The client's AUTH frame proved who it is; the connection is open.
    Authenticated,
    /// (Client) The server's WELCOME arrived and proved what the mechanism requires; the
    /// connection is open.
    Established {
        /// The AUTH frame to send before anything else, if the mechanism has one (requests
        /// may follow it at once, without waiting for an answer).
        auth: Option<Bytes>,
    },
    /// The peer calls us.
    Request(Request),
    /// The peer answers one of our calls.
    Response(Response),
    /// The peer granted this many more credits.
    Credit(u32),
    /// The peer no longer waits for its call with this id (it still expects the answer,
    /// which returns the credit; the call may be unknown if it was answered already).
    Cancel(u64),
    /// The peer asks whether we are alive: send the returned PONG frame.
    Ping {
        /// The PONG frame to send.
        pong: Bytes,
    },
    /// The peer answered our PING with this nonce.
    Pong(u64),
    /// The peer is shutting down: our calls in flight will be answered, new ones are
    /// refused with [`SendError::GoingAway`].
    GoingAway,
    /// The peer dropped references to these objects of ours (a handle once per
    /// reference).
    Released(crate::frame::Release),
    /// The client hands its reference to one of our objects on to a third party (server
    /// side only: a client receiving GRANT is a protocol error).
    Granted(crate::frame::Grant),
    /// The peer closed the connection; it is now closed.
    Closed(frame::Close),
}

/// One side of a Lanner connection, as a state machine.
#[derive(Debug)]
pub struct Connection {
    role: Role,
    state: State,
    authenticator: Authenticator,
    /// What the handshake said so far, for the authenticator's proofs (emptied once open).
    transcript: Vec<u8>,
    /// Who the peer proved to be.
    peer_principal: Option<Principal>,
    local: Limits,
    peer: Limits,
    send_credits: u32,
    in_flight: u32,
    /// Our one-way calls whose credit has not come back (in a CREDIT frame) yet.
    one_way_outstanding: u32,
    peer_in_flight: u32,
    peer_going_away: bool,
    peer_window: u32,
    next_call_id: u64,
}

#[derive(Debug)]
enum Authenticator {
    Client(Box<dyn ClientAuthenticator>),
    Server(Box<dyn ServerAuthenticator>),
}

impl Connection {
    /// A client connection without authentication (mechanism `none`) and the HELLO frame
    /// to send first.
    pub fn client(local: Limits) -> (Connection, Bytes) {
        Connection::client_with(local, Box::new(TransportAuthentication::none()))
    }

    /// A client connection authenticating with `authenticator`, and the HELLO frame to
    /// send first.
    pub fn client_with(
        local: Limits,
        authenticator: Box<dyn ClientAuthenticator>,
    ) -> (Connection, Bytes) {
        let local = local.clamped();
        let hello = frame::encode_hello(&Hello {
            version_min: PROTOCOL_VERSION,
            version_max: PROTOCOL_VERSION,
            limits: local,
            mechanism: authenticator.mechanism(),
            auth: Bytes::from(authenticator.hello_data()),
        });
        let mut connection =
            Connection::new(Role::Client, local, Authenticator::Client(authenticator));
        connection.transcript.extend_from_slice(&hello);
        (connection, hello)
    }

    /// A server connection awaiting the client's HELLO, accepting only clients without
    /// authentication (mechanism `none`).
    pub fn server(local: Limits) -> Connection {
        Connection::server_with(local, Box::new(TransportAuthentication::none()))
    }

    /// A server connection awaiting the client's HELLO, accepting what `authenticator`
    /// accepts.
    pub fn server_with(local: Limits, authenticator: Box<dyn ServerAuthenticator>) -> Connection {
        Connection::new(
            Role::Server,
            local.clamped(),
            Authenticator::Server(authenticator),
        )
    }

    fn new(role: Role, local: Limits, authenticator: Authenticator) -> Connection {
        Connection {
            role,
            state: match role {
                Role::Client => State::AwaitingWelcome,
                Role::Server => State::AwaitingHello,
            },
            authenticator,
            transcript: Vec::new(),
            peer_principal: None,
            local,
            peer: Limits {
                max_frame_size: HANDSHAKE_MAX_FRAME_SIZE,
                credits: 0,
            },
            send_credits: 0,
            in_flight: 0,
            one_way_outstanding: 0,
            peer_in_flight: 0,
            peer_going_away: false,
            peer_window: local.credits,
            next_call_id: 1,
        }
    }

    /// This side's role.
    pub fn role(&self) -> Role {
        self.role
    }

    /// True once the handshake is complete and until the connection closes.
    pub fn is_open(&self) -> bool {
        self.state == State::Open
    }

    /// Who the peer proved to be (once open; a client learns the server's identity only
    /// from mechanisms that authenticate both ways).
    pub fn peer_principal(&self) -> Option<&Principal> {
        self.peer_principal.as_ref()
    }

    /// The largest frame to accept from the peer now: small during the handshake, the
    /// local limit after.
    pub fn max_incoming_frame_size(&self) -> u32 {
        match self.state {
            // Not before authentication: an unauthenticated peer gets no large buffer
            // (a client's requests pipelined behind its AUTH frame are split after it).
            State::Open => self.local.max_frame_size,
            _ => HANDSHAKE_MAX_FRAME_SIZE,
        }
    }

    /// What the peer accepts from us (valid once open).
    pub fn peer_limits(&self) -> Limits {
        self.peer
    }

    /// What we accept from the peer.
    pub fn local_limits(&self) -> Limits {
        self.local
    }

    /// Requests we may send now.
    pub fn send_credits(&self) -> u32 {
        self.send_credits
    }

    /// Our requests awaiting a response.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The peer's requests we have not answered yet.
    pub fn peer_in_flight(&self) -> u32 {
        self.peer_in_flight
    }

    /// How many requests the peer may have outstanding (the credits granted to it).
    pub fn peer_window(&self) -> u32 {
        self.peer_window
    }

    /// Processes one received frame. An error means the connection is broken: send
    /// [`ProtocolError::close_frame`] and drop it. Never panics.
    pub fn handle_frame(&mut self, bytes: Bytes) -> Result<Event, ProtocolError> {
        if self.state != State::Open {
            // Handshake frames are kept for the transcript (a cheap reference count).
            let raw = bytes.clone();
            let frame = Frame::decode(bytes)?;
            return self.handle_decoded(frame, &raw);
        }
        // Requests and responses, nearly every frame of an open connection, are decoded
        // straight into their events, without a `Frame` in between.
        let header = frame::checked_header(&bytes)?;
        match header.kind {
            FrameKind::Request => {
                let request = frame::decode_request(bytes, header, None)?;
                self.request_received(request)
            }
            FrameKind::Response => {
                let response = frame::decode_response(bytes, header, None)?;
                self.response_received(response)
            }
            _ => {
                let frame = Frame::decode_body(bytes, header)?;
                self.handle_decoded(frame, &Bytes::new())
            }
        }
    }

    /// [`Connection::handle_frame`] for a frame in memory its sender can still write
    /// (shared memory), some of whose bulk segments the transport may have delivered apart
    /// from it, by reference (see [`ExternalSegments`]; empty: none). Decoded with
    /// [`crate::in_place::decode`], which never reads a byte of it twice.
    pub fn handle_frame_with(
        &mut self,
        bytes: Bytes,
        external: ExternalSegments,
    ) -> Result<Event, ProtocolError> {
        // Only requests and responses are this large or carry segments apart, and only
        // on an open connection: nothing for the handshake's transcript. A handshake
        // frame handed in this way anyway is decoded from a copy (the peer may still write
        // the memory), which the transcript keeps, as `handle_frame` does.
        if self.state != State::Open {
            if !external.is_empty() {
                return Err(crate::error::FrameError::BadExternal(
                    "bulk segments apart during the handshake",
                )
                .into());
            }
            return self.handle_frame(Bytes::copy_from_slice(&bytes));
        }
        let frame = crate::in_place::decode(bytes, external)?;
        self.handle_decoded(frame, &Bytes::new())
    }

    /// The state machine's step for a decoded frame (`raw`: its bytes, for a handshake
    /// frame).
    #[inline(always)]
    fn handle_decoded(&mut self, frame: Frame, raw: &Bytes) -> Result<Event, ProtocolError> {
        match (self.state, frame) {
            (_, Frame::Close(close)) => {
                self.state = State::Closed;
                Ok(Event::Closed(close))
            }
            (State::AwaitingHello, Frame::Hello(hello)) => self.accept_hello(hello, raw),
            (State::AwaitingWelcome, Frame::Welcome(welcome)) => self.accept_welcome(welcome, raw),
            (State::AwaitingAuth, Frame::Auth(data)) => self.accept_auth(&data),
            (State::AwaitingAuth, Frame::Request(_)) => Err(ProtocolError::Unauthenticated(
                "a request arrived before authentication completed".to_owned(),
            )),
            (State::Open, Frame::Request(request)) => self.request_received(request),
            (State::Open, Frame::Response(response)) => self.response_received(response),
            (State::Open, Frame::Cancel(call_id)) => Ok(Event::Cancel(call_id)),
            (State::Open, Frame::Ping(nonce)) => Ok(Event::Ping {
                pong: frame::encode_pong(nonce),
            }),
            (State::Open, Frame::Pong(nonce)) => Ok(Event::Pong(nonce)),
            (State::Open, Frame::Release(release)) => Ok(Event::Released(release)),
            (State::Open, Frame::Grant(grant)) if self.role == Role::Server => {
                Ok(Event::Granted(grant))
            }
            (State::Open, Frame::GoAway) => {
                self.peer_going_away = true;
                Ok(Event::GoingAway)
            }
            (State::Open, Frame::Credit(credits)) => {
                // One-way calls' credits come back in CREDIT frames; what is beyond them
                // is a grant.
                self.one_way_outstanding -= credits.min(self.one_way_outstanding);
                self.add_send_credits(credits);
                Ok(Event::Credit(credits))
            }
            (state, frame) => Err(ProtocolError::UnexpectedFrame {
                kind: frame.kind(),
                state: state.describe(),
            }),
        }
    }

    /// The peer's request, on an open connection: it spends one of the credits we gave.
    #[inline(always)]
    fn request_received(&mut self, request: Request) -> Result<Event, ProtocolError> {
        if self.peer_in_flight >= self.peer_window {
            return Err(ProtocolError::CreditViolation {
                in_flight: self.peer_in_flight,
                window: self.peer_window,
            });
        }
        self.peer_in_flight += 1;
        Ok(Event::Request(request))
    }

    /// The answer to one of our calls, on an open connection: it returns the call's
    /// credit, and may grant more.
    #[inline(always)]
    fn response_received(&mut self, response: Response) -> Result<Event, ProtocolError> {
        if self.in_flight == 0 {
            return Err(ProtocolError::UnsolicitedResponse {
                call_id: response.call_id,
            });
        }
        self.in_flight -= 1;
        self.add_send_credits(response.credits);
        Ok(Event::Response(response))
    }

    fn accept_hello(&mut self, hello: Hello, raw: &[u8]) -> Result<Event, ProtocolError> {
        if !(hello.version_min..=hello.version_max).contains(&PROTOCOL_VERSION) {
            return Err(ProtocolError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs_min: hello.version_min,
                theirs_max: hello.version_max,
            });
        }
        check_limits(hello.limits)?;
        let Authenticator::Server(authenticator) = &mut self.authenticator else {
            return Err(ProtocolError::UnexpectedFrame {
                kind: FrameKind::Hello,
                state: "a client",
            });
        };
        if !authenticator.accepts(hello.mechanism) {
            let accepted: Vec<&str> = authenticator.accepted().iter().map(|m| m.name()).collect();
            return Err(ProtocolError::Unauthenticated(format!(
                "this server does not accept {} authentication (it accepts: {})",
                hello.mechanism,
                accepted.join(", ")
            )));
        }
        let mut welcome = Welcome {
            version: PROTOCOL_VERSION,
            limits: self.local,
            mechanism: hello.mechanism,
            auth: Bytes::new(),
        };
        self.transcript.extend_from_slice(raw);
        self.transcript
            .extend_from_slice(fixed_fields(&frame::encode_welcome(&welcome)));
        let step = authenticator
            .hello(hello.mechanism, &self.transcript, &hello.auth)
            .map_err(unauthenticated)?;
        self.peer = hello.limits;
        self.send_credits = 0;
        self.add_send_credits(hello.limits.credits);
        match step {
            ServerStep::Done {
                welcome_data,
                principal,
            } => {
                welcome.auth = Bytes::from(welcome_data);
                self.open(principal);
            }
            ServerStep::NeedAuth { welcome_data } => {
                self.transcript.extend_from_slice(&welcome_data);
                welcome.auth = Bytes::from(welcome_data);
                self.state = State::AwaitingAuth;
            }
        }
        Ok(Event::Accepted {
            welcome: frame::encode_welcome(&welcome),
        })
    }

    fn accept_auth(&mut self, data: &[u8]) -> Result<Event, ProtocolError> {
        let Authenticator::Server(authenticator) = &mut self.authenticator else {
            return Err(ProtocolError::UnexpectedFrame {
                kind: FrameKind::Auth,
                state: "a client",
            });
        };
        let principal = authenticator
            .auth(&self.transcript, data)
            .map_err(unauthenticated)?;
        self.open(principal);
        Ok(Event::Authenticated)
    }

    fn accept_welcome(&mut self, welcome: Welcome, raw: &[u8]) -> Result<Event, ProtocolError> {
        if welcome.version != PROTOCOL_VERSION {
            return Err(ProtocolError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs_min: welcome.version,
                theirs_max: welcome.version,
            });
        }
        check_limits(welcome.limits)?;
        let Authenticator::Client(authenticator) = &mut self.authenticator else {
            return Err(ProtocolError::UnexpectedFrame {
                kind: FrameKind::Welcome,
                state: "a server",
            });
        };
        if welcome.mechanism != authenticator.mechanism() {
            return Err(ProtocolError::Unauthenticated(format!(
                "this client asked for {} authentication but the server answered with {}: refused (a server, or someone in between, tried another mechanism)",
                authenticator.mechanism(),
                welcome.mechanism
            )));
        }
        self.transcript.extend_from_slice(fixed_fields(raw));
        let finish = authenticator
            .welcome(&self.transcript, &welcome.auth)
            .map_err(unauthenticated)?;
        self.peer = welcome.limits;
        self.send_credits = 0;
        self.add_send_credits(welcome.limits.credits);
        self.open(finish.server);
        Ok(Event::Established {
            auth: finish.auth_data.map(|data| frame::encode_auth(&data)),
        })
    }

    fn open(&mut self, peer: Principal) {
        self.peer_principal = Some(peer);
        self.transcript = Vec::new();
        self.state = State::Open;
    }

    /// Stamps a request with a fresh call id and spends a credit. Without credit the
    /// builder is handed back with [`SendError::NoCredits`] so the caller can wait and retry.
    // The builder is handed back by value on the (rare) refusal path; boxing it would cost
    // an allocation on every call instead.
    #[allow(clippy::result_large_err)]
    pub fn send_request(
        &mut self,
        mut request: MessageBuilder,
    ) -> Result<(u64, OutFrame), (SendError, MessageBuilder)> {
        debug_assert_eq!(request.kind(), FrameKind::Request);
        if let Err(error) = self.may_send_request() {
            return Err((error, request));
        }
        if let Err(error) = request.check(self.peer.max_frame_size) {
            return Err((error, request));
        }
        let call_id = self.take_call(request.is_one_way());
        request.set_call_id(call_id);
        Ok((call_id, request.finish()))
    }

    /// [`Connection::send_request`] for a [`PlainRequest`]: stamps it with a fresh call id
    /// and spends a credit; returns the call id, the encoded header and the bulk segment.
    /// Without credit the request is handed back with [`SendError::NoCredits`].
    #[allow(clippy::result_large_err)]
    pub fn stamp_plain_request(
        &mut self,
        request: PlainRequest,
    ) -> Result<(u64, PlainHead, Option<Bytes>), (SendError, PlainRequest)> {
        if let Err(error) = self.may_send_request() {
            return Err((error, request));
        }
        let len = request.frame_len();
        if len > u64::from(self.peer.max_frame_size) {
            let max = self.peer.max_frame_size;
            return Err((SendError::TooLarge { len, max }, request));
        }
        let one_way = request.one_way;
        let call_id = self.take_call(one_way);
        let (head, bulk) = request.stamped(call_id);
        Ok((call_id, head, bulk))
    }

    /// Whether a request may be sent now: the connection is open, the peer is not going
    /// away, and a credit is at hand.
    fn may_send_request(&self) -> Result<(), SendError> {
        if self.state != State::Open {
            return Err(SendError::NotOpen);
        }
        if self.peer_going_away {
            return Err(SendError::GoingAway);
        }
        if self.send_credits == 0 {
            return Err(SendError::NoCredits);
        }
        Ok(())
    }

    /// A fresh call id for a request about to be sent, whose credit this spends.
    fn take_call(&mut self, one_way: bool) -> u64 {
        let call_id = self.next_call_id;
        self.next_call_id = self.next_call_id.wrapping_add(1).max(1);
        self.send_credits -= 1;
        // A one-way call expects no answer; its credit comes back in a CREDIT frame.
        if one_way {
            self.one_way_outstanding += 1;
        } else {
            self.in_flight += 1;
        }
        call_id
    }

    /// Stamps the response to the peer's call `call_id` and piggybacks the returned credit.
    /// If the response is larger than the peer accepts, an `Internal` error response takes
    /// its place (the call still ends, the credit still returns).
    pub fn send_response(
        &mut self,
        call_id: u64,
        response: MessageBuilder,
    ) -> Result<OutFrame, SendError> {
        debug_assert_eq!(response.kind(), FrameKind::Response);
        if self.state != State::Open {
            return Err(SendError::NotOpen);
        }
        if self.peer_in_flight == 0 {
            return Err(SendError::NoRequestPending);
        }
        self.peer_in_flight -= 1;
        Ok(stamp_response(call_id, response, self.peer.max_frame_size))
    }

    /// Counts `count` responses to the peer's calls that were stamped with
    /// [`stamp_response`] instead of [`Connection::send_response`] (by a receiver that
    /// answers the calls it received without taking the lock around this state each
    /// time). Fails, counting none, if that is more than the peer has outstanding.
    pub fn responses_sent(&mut self, count: u32) -> Result<(), SendError> {
        self.peer_in_flight = self
            .peer_in_flight
            .checked_sub(count)
            .ok_or(SendError::NoRequestPending)?;
        Ok(())
    }

    /// Finishes one of the peer's one-way calls: returns the CREDIT frame that gives its
    /// credit back (a one-way call has no answer to carry it).
    pub fn finish_one_way(&mut self) -> Result<Bytes, SendError> {
        self.finish_one_way_unsent()?;
        Ok(frame::encode_credit(1))
    }

    /// [`Connection::finish_one_way`] without its CREDIT frame: the caller sends the
    /// credit back itself, in one frame with others ([`frame::encode_credit`]).
    pub fn finish_one_way_unsent(&mut self) -> Result<(), SendError> {
        if self.state != State::Open {
            return Err(SendError::NotOpen);
        }
        if self.peer_in_flight == 0 {
            return Err(SendError::NoRequestPending);
        }
        self.peer_in_flight -= 1;
        Ok(())
    }

    /// The GOAWAY frame telling the peer we are shutting down (None if not open). We still
    /// answer its calls; [`Connection::peer_in_flight`] says how many remain.
    pub fn go_away(&self) -> Option<Bytes> {
        (self.state == State::Open).then(frame::encode_go_away)
    }

    /// Whether the peer said it is shutting down (we may send no new requests).
    pub fn peer_going_away(&self) -> bool {
        self.peer_going_away
    }

    /// The CANCEL frame saying we no longer wait for our call `call_id`, or None if the
    /// connection is not open. The call stays in flight (holding its credit) until its
    /// answer arrives.
    pub fn cancel(&self, call_id: u64) -> Option<Bytes> {
        (self.state == State::Open).then(|| frame::encode_cancel(call_id))
    }

    /// Grants the peer `credits` more outstanding requests; send the returned CREDIT frame.
    pub fn grant_credits(&mut self, credits: u32) -> Bytes {
        self.peer_window = self.peer_window.saturating_add(credits);
        frame::encode_credit(credits)
    }

    /// Marks the connection closed and returns the CLOSE frame to send.
    pub fn close(&mut self, status: Status, reason: &str) -> Bytes {
        self.state = State::Closed;
        frame::encode_close(status, reason)
    }
}

impl Connection {
    /// The peer granted `credits` more: usable up to [`MAX_SEND_CREDITS`] requests
    /// outstanding in all (credits at hand, calls in flight and one-way calls whose credit
    /// has not come back), however often the peer grants.
    fn add_send_credits(&mut self, credits: u32) {
        let outstanding = self.in_flight.saturating_add(self.one_way_outstanding);
        self.send_credits = self
            .send_credits
            .saturating_add(credits)
            .min(MAX_SEND_CREDITS.saturating_sub(outstanding));
    }
}

/// The peer's limits must be within the protocol's ranges.
fn check_limits(peer: Limits) -> Result<(), ProtocolError> {
    if !(MIN_FRAME_SIZE..=MAX_FRAME_SIZE).contains(&peer.max_frame_size) {
        return Err(ProtocolError::InvalidLimits(
            "maximum frame size outside 4 KiB..=1 GiB",
        ));
    }
    if peer.credits == 0 {
        return Err(ProtocolError::InvalidLimits("zero request credits"));
    }
    Ok(())
}

/// A WELCOME frame's fixed fields (after the header, before the auth data): what the
/// transcript records of it before its auth data is known.
fn fixed_fields(welcome: &[u8]) -> &[u8] {
    &welcome[frame::HEADER_LEN..WELCOME_LEN]
}

fn unauthenticated(error: AuthError) -> ProtocolError {
    ProtocolError::Unauthenticated(error.0)
}

/// The response to the peer's call `call_id`, returning its credit, as
/// [`Connection::send_response`] stamps it, without the state: for a receiver that counts
/// the responses it sends itself ([`Connection::responses_sent`]). A response larger than
/// the peer accepts (`peer_max_frame_size`, [`Limits::max_frame_size`] of
/// [`Connection::peer_limits`]) is replaced by an `Internal` error response.
pub fn stamp_response(
    call_id: u64,
    mut response: MessageBuilder,
    peer_max_frame_size: u32,
) -> OutFrame {
    debug_assert_eq!(response.kind(), FrameKind::Response);
    if let Err(error) = response.check(peer_max_frame_size) {
        response = MessageBuilder::error_response(
            Status::Internal,
            &format!("the result could not be sent: {error}"),
        );
    }
    response.set_call_id(call_id);
    response.set_credits(1);
    response.finish()
}
