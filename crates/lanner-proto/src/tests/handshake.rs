//! The handshake: HELLO, WELCOME, version and limit negotiation, and what may not arrive
//! before it completes.

use bytes::Bytes;

use super::{all_ok, assert_close_frame, limits, raw_request, raw_response, request, response};
use crate::auth::Mechanism;
use crate::connection::{Connection, Event, HANDSHAKE_MAX_FRAME_SIZE, Role};
use crate::error::{FrameError, ProtocolError, SendError};
use crate::frame::{self, Close, Frame, FrameKind, Hello, Welcome};
use crate::harness::Pair;
use crate::limits::{Limits, MAX_FRAME_SIZE, MIN_FRAME_SIZE, PROTOCOL_VERSION};
use crate::status::Status;

fn hello(version_min: u16, version_max: u16, limits: Limits) -> Bytes {
    frame::encode_hello(&Hello {
        version_min,
        version_max,
        limits,
        mechanism: Mechanism::None,
        auth: Bytes::new(),
    })
}

fn welcome(version: u16, limits: Limits) -> Bytes {
    frame::encode_welcome(&Welcome {
        version,
        limits,
        mechanism: Mechanism::None,
        auth: Bytes::new(),
    })
}

#[test]
fn handshake_opens_both_sides_and_exchanges_limits() {
    let client_limits = limits(64 * 1024, 7);
    let server_limits = limits(128 * 1024, 3);
    let mut pair = Pair::new(client_limits, server_limits);
    assert_eq!(pair.client.conn.role(), Role::Client);
    assert_eq!(pair.server.conn.role(), Role::Server);
    assert!(!pair.client.conn.is_open());
    assert!(!pair.server.conn.is_open());
    assert_eq!(pair.client.conn.send_credits(), 0);

    // The HELLO on the wire announces the client's limits and version.
    assert_eq!(pair.client_sent.len(), 1);
    assert_eq!(
        Frame::decode(pair.client_sent[0].clone()),
        Ok(Frame::Hello(Hello {
            version_min: PROTOCOL_VERSION,
            version_max: PROTOCOL_VERSION,
            limits: client_limits,
            mechanism: Mechanism::None,
            auth: Bytes::new(),
        }))
    );

    // Step the server by hand: it accepts and answers with a WELCOME.
    let events = all_ok(pair.server.receive_all());
    assert_eq!(events.len(), 1);
    let Event::Accepted { welcome } = &events[0] else {
        panic!("expected Accepted, got {:?}", events[0]);
    };
    assert_eq!(
        Frame::decode(welcome.clone()),
        Ok(Frame::Welcome(Welcome {
            version: PROTOCOL_VERSION,
            limits: server_limits,
            mechanism: Mechanism::None,
            auth: Bytes::new(),
        }))
    );
    assert!(pair.server.conn.is_open());
    assert!(!pair.client.conn.is_open());

    pair.client.inject(welcome);
    assert_eq!(
        all_ok(pair.client.receive_all()),
        vec![Event::Established { auth: None }]
    );
    assert!(pair.client.conn.is_open());
    assert_eq!(pair.client.pending_bytes(), 0);
    assert_eq!(pair.server.pending_bytes(), 0);

    // Each side knows the other's limits and may send as many requests as the other allows.
    assert_eq!(pair.client.conn.peer_limits(), server_limits);
    assert_eq!(pair.server.conn.peer_limits(), client_limits);
    assert_eq!(pair.client.conn.local_limits(), client_limits);
    assert_eq!(pair.server.conn.local_limits(), server_limits);
    assert_eq!(pair.client.conn.send_credits(), 3);
    assert_eq!(pair.server.conn.send_credits(), 7);
    assert_eq!(pair.client.conn.in_flight(), 0);
    assert_eq!(pair.server.conn.peer_in_flight(), 0);
    // Once open, each side accepts frames up to its own limit.
    assert_eq!(pair.client.conn.max_incoming_frame_size(), 64 * 1024);
    assert_eq!(pair.server.conn.max_incoming_frame_size(), 128 * 1024);
}

#[test]
fn handshake_helper_succeeds_with_defaults() {
    let pair = Pair::connected();
    assert!(pair.client.conn.is_open());
    assert!(pair.server.conn.is_open());
    assert_eq!(pair.client.conn.peer_limits(), Limits::default());
    assert_eq!(pair.server_sent.len(), 1);
    assert_eq!(
        frame::read_header(&pair.server_sent[0]).unwrap().kind,
        FrameKind::Welcome
    );
}

#[test]
fn local_limits_are_clamped_before_they_are_announced() {
    let pair = Pair::connected_with(limits(100, 0), limits(u32::MAX, 0));
    let client = limits(MIN_FRAME_SIZE, 1);
    let server = limits(MAX_FRAME_SIZE, 1);
    assert_eq!(pair.client.conn.local_limits(), client);
    assert_eq!(pair.server.conn.peer_limits(), client);
    assert_eq!(pair.server.conn.local_limits(), server);
    assert_eq!(pair.client.conn.peer_limits(), server);
    assert_eq!(pair.client.conn.send_credits(), 1);
}

#[test]
fn the_handshake_frame_limit_applies_until_open() {
    let server = Connection::server(limits(1 << 20, 4));
    assert_eq!(server.max_incoming_frame_size(), HANDSHAKE_MAX_FRAME_SIZE);
    let (client, _) = Connection::client(limits(1 << 20, 4));
    assert_eq!(client.max_incoming_frame_size(), HANDSHAKE_MAX_FRAME_SIZE);
}

#[test]
fn a_hello_whose_version_range_includes_ours_is_accepted() {
    let mut server = Connection::server(Limits::default());
    let event = server
        .handle_frame(hello(0, PROTOCOL_VERSION + 5, limits(8192, 2)))
        .unwrap();
    let Event::Accepted { welcome } = event else {
        panic!("expected Accepted, got {event:?}");
    };
    // The server answers with the one version it speaks.
    let Ok(Frame::Welcome(welcome)) = Frame::decode(welcome) else {
        panic!("WELCOME does not decode");
    };
    assert_eq!(welcome.version, PROTOCOL_VERSION);
    assert_eq!(server.peer_limits(), limits(8192, 2));
}

#[test]
fn version_mismatch_in_hello_is_a_protocol_error() {
    for (min, max) in [
        (PROTOCOL_VERSION + 1, PROTOCOL_VERSION + 4),
        (0, PROTOCOL_VERSION - 1),
        (u16::MAX, u16::MAX),
        // An empty range, even if its ends straddle our version.
        (PROTOCOL_VERSION + 1, PROTOCOL_VERSION - 1),
    ] {
        let mut server = Connection::server(Limits::default());
        let error = server
            .handle_frame(hello(min, max, Limits::default()))
            .unwrap_err();
        assert_eq!(
            error,
            ProtocolError::VersionMismatch {
                ours: PROTOCOL_VERSION,
                theirs_min: min,
                theirs_max: max,
            }
        );
        assert!(!server.is_open());
        assert_eq!(error.status(), Status::Protocol);
        assert_close_frame(&error, Status::Protocol);
        let Ok(Frame::Close(Close { status, reason })) = Frame::decode(error.close_frame()) else {
            panic!("close frame does not decode");
        };
        assert_eq!(status, Status::Protocol);
        assert!(reason.contains("version mismatch"), "{reason}");
        assert!(reason.contains(&format!("{min}..={max}")), "{reason}");
    }
}

#[test]
fn version_mismatch_through_the_harness() {
    let mut pair = Pair::new(Limits::default(), Limits::default());
    // Consume the client's real HELLO, then put a fresh server state machine in place so
    // that the inbox is empty and the server awaits a HELLO again.
    assert_eq!(pair.server.receive_all().len(), 1);
    pair.server.conn = Connection::server(Limits::default());
    let (min, max) = (PROTOCOL_VERSION + 1, PROTOCOL_VERSION + 2);
    pair.server.inject(&hello(min, max, Limits::default()));
    assert_eq!(
        pair.server.receive_all(),
        vec![Err(ProtocolError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs_min: min,
            theirs_max: max,
        })]
    );
    assert!(!pair.server.conn.is_open());
}

#[test]
fn version_mismatch_in_welcome_is_a_protocol_error() {
    let (mut client, _) = Connection::client(Limits::default());
    let error = client
        .handle_frame(welcome(PROTOCOL_VERSION + 1, Limits::default()))
        .unwrap_err();
    assert_eq!(
        error,
        ProtocolError::VersionMismatch {
            ours: PROTOCOL_VERSION,
            theirs_min: PROTOCOL_VERSION + 1,
            theirs_max: PROTOCOL_VERSION + 1,
        }
    );
    assert!(!client.is_open());
    assert_close_frame(&error, Status::Protocol);
}

#[test]
fn bad_magic_is_rejected_in_hello_and_welcome() {
    let mut bytes = hello(PROTOCOL_VERSION, PROTOCOL_VERSION, Limits::default()).to_vec();
    bytes[8..12].copy_from_slice(b"HTTP");
    let mut server = Connection::server(Limits::default());
    let error = server.handle_frame(Bytes::from(bytes)).unwrap_err();
    assert_eq!(error, ProtocolError::Frame(FrameError::BadMagic(*b"HTTP")));
    assert!(!server.is_open());
    assert_close_frame(&error, Status::Protocol);

    let mut bytes = welcome(PROTOCOL_VERSION, Limits::default()).to_vec();
    bytes[11] ^= 0x20;
    let (mut client, _) = Connection::client(Limits::default());
    assert_eq!(
        client.handle_frame(Bytes::from(bytes)),
        Err(ProtocolError::Frame(FrameError::BadMagic(*b"LNRp")))
    );
    assert!(!client.is_open());
}

#[test]
fn invalid_limits_in_hello_are_rejected() {
    let cases = [
        (limits(MIN_FRAME_SIZE - 1, 10), "maximum frame size"),
        (limits(0, 10), "maximum frame size"),
        (limits(MAX_FRAME_SIZE + 1, 10), "maximum frame size"),
        (limits(u32::MAX, 10), "maximum frame size"),
        (limits(MIN_FRAME_SIZE, 0), "zero request credits"),
    ];
    for (announced, what) in cases {
        let mut server = Connection::server(Limits::default());
        let error = server
            .handle_frame(hello(PROTOCOL_VERSION, PROTOCOL_VERSION, announced))
            .unwrap_err();
        let ProtocolError::InvalidLimits(message) = &error else {
            panic!("{announced:?}: expected InvalidLimits, got {error:?}");
        };
        assert!(message.contains(what), "{announced:?}: {message}");
        assert!(!server.is_open());
        assert_eq!(server.send_credits(), 0);
        assert_close_frame(&error, Status::Protocol);
    }
}

#[test]
fn boundary_limits_in_hello_are_accepted() {
    for announced in [limits(MIN_FRAME_SIZE, 1), limits(MAX_FRAME_SIZE, u32::MAX)] {
        let mut server = Connection::server(Limits::default());
        let event = server
            .handle_frame(hello(PROTOCOL_VERSION, PROTOCOL_VERSION, announced))
            .unwrap();
        assert!(matches!(event, Event::Accepted { .. }));
        assert_eq!(server.peer_limits(), announced);
        assert_eq!(
            server.send_credits(),
            announced.credits.min(crate::limits::MAX_SEND_CREDITS)
        );
    }
}

#[test]
fn invalid_limits_in_welcome_are_rejected() {
    for announced in [limits(MIN_FRAME_SIZE - 1, 1), limits(MIN_FRAME_SIZE, 0)] {
        let (mut client, _) = Connection::client(Limits::default());
        let error = client
            .handle_frame(welcome(PROTOCOL_VERSION, announced))
            .unwrap_err();
        assert!(
            matches!(error, ProtocolError::InvalidLimits(_)),
            "{announced:?}: {error:?}"
        );
        assert!(!client.is_open());
    }
}

#[test]
fn a_request_before_hello_is_an_unexpected_frame() {
    let mut server = Connection::server(Limits::default());
    let error = server
        .handle_frame(raw_request(1, b"early", &[]))
        .unwrap_err();
    assert_eq!(
        error,
        ProtocolError::UnexpectedFrame {
            kind: FrameKind::Request,
            state: "awaiting HELLO",
        }
    );
    assert!(!server.is_open());
    assert_eq!(server.peer_in_flight(), 0);
    assert_close_frame(&error, Status::Protocol);
}

#[test]
fn every_other_frame_before_hello_is_unexpected() {
    let frames = [
        (
            FrameKind::Welcome,
            welcome(PROTOCOL_VERSION, Limits::default()),
        ),
        (FrameKind::Response, raw_response(1, Status::Ok, b"")),
        (FrameKind::Credit, frame::encode_credit(5)),
    ];
    for (kind, bytes) in frames {
        let mut server = Connection::server(Limits::default());
        assert_eq!(
            server.handle_frame(bytes),
            Err(ProtocolError::UnexpectedFrame {
                kind,
                state: "awaiting HELLO",
            })
        );
        assert_eq!(server.send_credits(), 0);
    }
}

#[test]
fn every_other_frame_before_welcome_is_unexpected() {
    let frames = [
        (
            FrameKind::Hello,
            hello(PROTOCOL_VERSION, PROTOCOL_VERSION, Limits::default()),
        ),
        (FrameKind::Request, raw_request(1, b"", &[])),
        (FrameKind::Response, raw_response(1, Status::Ok, b"")),
        (FrameKind::Credit, frame::encode_credit(5)),
    ];
    for (kind, bytes) in frames {
        let (mut client, _) = Connection::client(Limits::default());
        assert_eq!(
            client.handle_frame(bytes),
            Err(ProtocolError::UnexpectedFrame {
                kind,
                state: "awaiting WELCOME",
            })
        );
        assert_eq!(client.send_credits(), 0);
    }
}

#[test]
fn a_second_handshake_frame_once_open_is_unexpected() {
    let mut pair = Pair::connected();
    pair.server.inject(&hello(
        PROTOCOL_VERSION,
        PROTOCOL_VERSION,
        Limits::default(),
    ));
    assert_eq!(
        pair.server.receive_all(),
        vec![Err(ProtocolError::UnexpectedFrame {
            kind: FrameKind::Hello,
            state: "open",
        })]
    );
    pair.client
        .inject(&welcome(PROTOCOL_VERSION, Limits::default()));
    assert_eq!(
        pair.client.receive_all(),
        vec![Err(ProtocolError::UnexpectedFrame {
            kind: FrameKind::Welcome,
            state: "open",
        })]
    );
}

#[test]
fn close_is_accepted_in_any_state_and_closes() {
    let mut server = Connection::server(Limits::default());
    assert_eq!(
        server.handle_frame(frame::encode_close(Status::Unauthenticated, "who are you")),
        Ok(Event::Closed(Close {
            status: Status::Unauthenticated,
            reason: "who are you".to_owned(),
        }))
    );
    assert!(!server.is_open());
    // A HELLO after the close is no longer acceptable.
    assert_eq!(
        server.handle_frame(hello(PROTOCOL_VERSION, PROTOCOL_VERSION, Limits::default())),
        Err(ProtocolError::UnexpectedFrame {
            kind: FrameKind::Hello,
            state: "closed",
        })
    );
}

#[test]
fn nothing_can_be_sent_before_the_handshake() {
    let (mut client, _) = Connection::client(Limits::default());
    let (error, builder) = client
        .send_request(request(1, 0, 0, 0, b"x", &[]))
        .unwrap_err();
    assert_eq!(error, SendError::NotOpen);
    assert_eq!(builder.inline_len(), 1);
    let mut server = Connection::server(Limits::default());
    assert_eq!(
        server
            .send_response(1, response(Status::Ok, b"", &[]))
            .unwrap_err(),
        SendError::NotOpen
    );
}
