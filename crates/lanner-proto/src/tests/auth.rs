//! Authentication in the handshake: the pre-shared key challenge–response, transport
//! mechanisms, and every way a peer or a man in the middle might get in without the key.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::{assert_close_frame, raw_request, request};
use crate::auth::psk::{PskClient, PskServer};
use crate::auth::{AnyOf, Mechanism, Principal, TransportAuthentication};
use crate::connection::{Connection, Event};
use crate::error::ProtocolError;
use crate::frame::{self, Frame, Hello};
use crate::harness::{Pair, Peer};
use crate::limits::Limits;
use crate::status::Status;

const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

fn key(bytes: &[u8]) -> Arc<[u8]> {
    Arc::from(bytes)
}

fn psk_client(id: &str, secret: &[u8], nonce: u8) -> Box<PskClient> {
    Box::new(PskClient::new(id, key(secret), [nonce; 32]).unwrap())
}

fn psk_server(nonce: u8) -> Box<PskServer> {
    let keys = HashMap::from([("ops".to_owned(), key(KEY))]);
    Box::new(PskServer::new(Arc::new(keys), [nonce; 32]))
}

fn unauthenticated(result: Option<Result<(Bytes, Event), ProtocolError>>) -> String {
    match result {
        Some(Err(error @ ProtocolError::Unauthenticated(_))) => {
            assert_close_frame(&error, Status::Unauthenticated);
            error.to_string()
        }
        other => panic!("expected an authentication failure, got {other:?}"),
    }
}

/// Steps a pair to the point where the client has processed WELCOME; returns its event.
fn to_established(pair: &mut Pair) -> Result<Event, ProtocolError> {
    let (_, accepted) = pair.server.receive_next().unwrap()?;
    let Event::Accepted { welcome } = accepted else {
        panic!("expected Accepted, got {accepted:?}");
    };
    pair.client.inject(&welcome);
    pair.server_sent.push_back(welcome);
    pair.client.receive_next().unwrap().map(|(_, event)| event)
}

#[test]
fn psk_authenticates_both_sides_and_the_first_request_rides_behind_auth() {
    let mut pair = Pair::with_auth(psk_client("ops", KEY, 1), psk_server(2));
    let Event::Established { auth: Some(auth) } = to_established(&mut pair).unwrap() else {
        panic!("a pre-shared key client sends AUTH");
    };
    // The client is open at once and the server proved itself to it.
    assert!(pair.client.conn.is_open());
    assert_eq!(
        pair.client.conn.peer_principal(),
        Some(&Principal::Key("ops".into()))
    );
    // The server waits for AUTH; the client sends it and its first call without waiting.
    assert!(!pair.server.conn.is_open());
    pair.server.inject(&auth);
    let call_id = pair.client_call(request(7, 0, 1, 2, b"args", &[])).unwrap();
    let events: Vec<Event> = pair
        .server
        .receive_all()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(events[0], Event::Authenticated);
    assert!(matches!(&events[1], Event::Request(r) if r.call_id == call_id));
    assert_eq!(
        pair.server.conn.peer_principal(),
        Some(&Principal::Key("ops".into()))
    );
}

#[test]
fn a_client_with_the_wrong_key_finds_out_from_the_welcome_and_sends_nothing_more() {
    let mut pair = Pair::with_auth(psk_client("ops", b"not the right key!!", 1), psk_server(2));
    let error = match to_established(&mut pair) {
        Err(error) => error,
        Ok(event) => panic!("expected a failure, got {event:?}"),
    };
    assert_close_frame(&error, Status::Unauthenticated);
    assert!(error.to_string().contains("could not prove"), "{error}");
    assert!(!pair.client.conn.is_open());
}

#[test]
fn an_unknown_key_id_is_refused_at_hello() {
    let mut pair = Pair::with_auth(psk_client("intruder", KEY, 1), psk_server(2));
    let message = unauthenticated(pair.server.receive_next());
    assert!(message.contains("no key \"intruder\""), "{message}");
    assert!(!pair.server.conn.is_open());
}

#[test]
fn a_forged_client_proof_is_refused() {
    let mut pair = Pair::with_auth(psk_client("ops", KEY, 1), psk_server(2));
    to_established(&mut pair).unwrap();
    pair.server.inject(&frame::encode_auth(&[0x5a; 32]));
    let message = unauthenticated(pair.server.receive_next());
    assert!(message.contains("could not prove"), "{message}");
    // A truncated proof too.
    let mut pair = Pair::with_auth(psk_client("ops", KEY, 1), psk_server(2));
    to_established(&mut pair).unwrap();
    pair.server.inject(&frame::encode_auth(&[0x5a; 5]));
    unauthenticated(pair.server.receive_next());
}

#[test]
fn a_recorded_handshake_replayed_to_a_new_connection_fails() {
    // A genuine connection, recorded.
    let mut recorded = Pair::with_auth(psk_client("ops", KEY, 1), psk_server(2));
    recorded.handshake().unwrap();
    assert!(recorded.server.conn.is_open());
    let hello = recorded.client_sent[0].clone();
    let auth = recorded.client_sent[1].clone();

    // The attacker replays HELLO and AUTH to a server that picks a fresh nonce.
    let mut server = Peer::new(Connection::server_with(Limits::default(), psk_server(3)));
    server.inject(&hello);
    assert!(matches!(
        server.receive_next(),
        Some(Ok((_, Event::Accepted { .. })))
    ));
    server.inject(&auth);
    unauthenticated(server.receive_next());
}

#[test]
fn the_servers_own_proof_reflected_back_is_refused() {
    let mut pair = Pair::with_auth(psk_client("ops", KEY, 1), psk_server(2));
    let (_, accepted) = pair.server.receive_next().unwrap().unwrap();
    let Event::Accepted { welcome } = accepted else {
        panic!("expected Accepted");
    };
    let Ok(Frame::Welcome(welcome)) = Frame::decode(welcome) else {
        panic!("a WELCOME");
    };
    // Its data is server nonce ‖ server proof: send the proof back as the client's.
    pair.server.inject(&frame::encode_auth(&welcome.auth[32..]));
    unauthenticated(pair.server.receive_next());
}

#[test]
fn tampering_with_the_hello_in_flight_breaks_the_servers_proof() {
    let (client, hello) = Connection::client_with(Limits::default(), psk_client("ops", KEY, 1));
    let Ok(Frame::Hello(mut fields)) = Frame::decode(hello) else {
        panic!("a HELLO");
    };
    // A man in the middle lowers the credits the client asked for.
    fields.limits.credits = 1;
    let mut server = Peer::new(Connection::server_with(Limits::default(), psk_server(2)));
    server.inject(&frame::encode_hello(&fields));
    let Some(Ok((_, Event::Accepted { welcome }))) = server.receive_next() else {
        panic!("the server cannot tell");
    };
    let mut client = Peer::new(client);
    client.inject(&welcome);
    match client.receive_next() {
        Some(Err(ProtocolError::Unauthenticated(message))) => {
            assert!(message.contains("could not prove"), "{message}");
        }
        other => panic!("expected the client to refuse, got {other:?}"),
    }
}

#[test]
fn a_downgrade_to_no_authentication_is_refused_by_either_side() {
    // The server accepts only psk: a HELLO rewritten to `none` is refused.
    let (_, hello) = Connection::client_with(Limits::default(), psk_client("ops", KEY, 1));
    let Ok(Frame::Hello(fields)) = Frame::decode(hello) else {
        panic!("a HELLO");
    };
    let downgraded = frame::encode_hello(&Hello {
        mechanism: Mechanism::None,
        auth: Bytes::new(),
        ..fields
    });
    let mut server = Peer::new(Connection::server_with(Limits::default(), psk_server(2)));
    server.inject(&downgraded);
    let message = unauthenticated(server.receive_next());
    assert!(message.contains("does not accept none"), "{message}");
    assert!(message.contains("psk"), "{message}");

    // A server that also accepts `none` answers the rewritten HELLO, but the client that
    // asked for psk refuses a `none` WELCOME.
    let both = AnyOf::new()
        .or(TransportAuthentication::none())
        .or_boxed(psk_server(2));
    let mut server = Peer::new(Connection::server_with(Limits::default(), Box::new(both)));
    server.inject(&downgraded);
    let Some(Ok((_, Event::Accepted { welcome }))) = server.receive_next() else {
        panic!("the server accepts none");
    };
    let (client, _) = Connection::client_with(Limits::default(), psk_client("ops", KEY, 1));
    let mut client = Peer::new(client);
    client.inject(&welcome);
    match client.receive_next() {
        Some(Err(ProtocolError::Unauthenticated(message))) => {
            assert!(message.contains("asked for psk"), "{message}");
        }
        other => panic!("expected the client to refuse, got {other:?}"),
    }
}

#[test]
fn a_request_before_auth_is_refused() {
    let mut pair = Pair::with_auth(psk_client("ops", KEY, 1), psk_server(2));
    to_established(&mut pair).unwrap();
    // The client skips AUTH and calls.
    pair.server.inject(&raw_request(1, b"x", &[]));
    let message = unauthenticated(pair.server.receive_next());
    assert!(message.contains("before authentication"), "{message}");
    // And before a HELLO, a request is simply out of place.
    let mut server = Peer::new(Connection::server_with(Limits::default(), psk_server(2)));
    server.inject(&raw_request(1, b"x", &[]));
    assert!(matches!(
        server.receive_next(),
        Some(Err(ProtocolError::UnexpectedFrame { .. }))
    ));
}

#[test]
fn large_frames_are_refused_until_authentication_completes() {
    let mut pair = Pair::with_auth(psk_client("ops", KEY, 1), psk_server(2));
    to_established(&mut pair).unwrap();
    assert_eq!(
        pair.server.conn.max_incoming_frame_size(),
        crate::HANDSHAKE_MAX_FRAME_SIZE
    );
}

#[test]
fn transport_mechanisms_name_the_principal_the_transport_established() {
    let peer = Principal::Process {
        uid: 1000,
        gid: 100,
        pid: 42,
    };
    let mut pair = Pair::with_auth(
        Box::new(TransportAuthentication::client(Mechanism::PeerCredentials)),
        Box::new(TransportAuthentication::new(
            Mechanism::PeerCredentials,
            Some(peer.clone()),
        )),
    );
    pair.handshake().unwrap();
    assert!(pair.client.conn.is_open() && pair.server.conn.is_open());
    assert_eq!(pair.server.conn.peer_principal(), Some(&peer));
    assert_eq!(
        pair.client.conn.peer_principal(),
        Some(&Principal::Anonymous)
    );

    // A transport that could not establish the peer (TCP has no peer credentials).
    let mut pair = Pair::with_auth(
        Box::new(TransportAuthentication::client(Mechanism::PeerCredentials)),
        Box::new(TransportAuthentication::new(
            Mechanism::PeerCredentials,
            None,
        )),
    );
    let message = unauthenticated(pair.server.receive_next());
    assert!(
        message.contains("did not establish who the client is"),
        "{message}"
    );

    // A client without authentication at a peer-credentials server.
    let mut pair = Pair::with_auth(
        Box::new(TransportAuthentication::none()),
        Box::new(TransportAuthentication::new(
            Mechanism::PeerCredentials,
            Some(peer),
        )),
    );
    let message = unauthenticated(pair.server.receive_next());
    assert!(message.contains("does not accept none"), "{message}");
}

#[test]
fn principals_are_matched_by_name() {
    let process = Principal::Process {
        uid: 1000,
        gid: 100,
        pid: 7,
    };
    assert!(process.is_named("uid:1000") && process.is_named("gid:100"));
    assert!(!process.is_named("uid:100") && !process.is_named("uid:01000x"));
    // Numbers are written plainly, as `names` writes them (and as access policies must).
    assert!(!process.is_named("uid:01000") && !process.is_named("uid:+1000"));
    assert_eq!(process.names(), vec!["uid:1000", "gid:100"]);
    let key = Principal::Key("ops".into());
    assert!(key.is_named("psk:ops") && !key.is_named("psk:op") && !key.is_named("ops"));
    let cert = Principal::Certificate("CN=alice".into());
    assert!(cert.is_named("cert:CN=alice") && !cert.is_named("cert:CN=bob"));
    assert!(Principal::Anonymous.is_named("anonymous"));
}

/// Review finding: `handle_frame_with` (the shared-memory entry point, public) during the
/// handshake: a WELCOME panics (the transcript slices the frame's bytes, which this path
/// does not pass), and a HELLO is left out of the transcript the proofs cover.
#[test]
fn handshake_frames_through_the_in_place_entry_point_neither_panic_nor_escape_the_transcript() {
    use crate::payload::ExternalSegments;
    // Client side: a genuine WELCOME handed in through `handle_frame_with`.
    let (client, hello) = Connection::client_with(Limits::default(), psk_client("ops", KEY, 1));
    let mut server = Connection::server_with(Limits::default(), psk_server(2));
    let Ok(Event::Accepted { welcome }) = server.handle_frame(hello.clone()) else {
        panic!("the server accepts the HELLO");
    };
    let mut client = client;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        client.handle_frame_with(welcome, ExternalSegments::new())
    }));
    let Ok(result) = outcome else {
        panic!("handle_frame_with panicked on a WELCOME");
    };
    // Either way of handing in the frame gives the same answer.
    assert!(
        matches!(result, Ok(Event::Established { auth: Some(_) })),
        "{result:?}"
    );

    // Server side: a HELLO through `handle_frame_with` must still be in the transcript,
    // or the honest client's check of the server's proof fails.
    let (client, hello) = Connection::client_with(Limits::default(), psk_client("ops", KEY, 1));
    let mut server = Connection::server_with(Limits::default(), psk_server(2));
    let Ok(Event::Accepted { welcome }) = server.handle_frame_with(hello, ExternalSegments::new())
    else {
        panic!("the server accepts the HELLO");
    };
    let mut client = client;
    let result = client.handle_frame(welcome);
    assert!(
        matches!(result, Ok(Event::Established { auth: Some(_) })),
        "{result:?}"
    );
}
