//! Flow-control credits: spending, piggybacked returns, explicit grants and violations.

use super::{all_ok, assert_close_frame, limits, raw_request, raw_response, request, response};
use crate::connection::Event;
use crate::error::{ProtocolError, SendError};
use crate::frame::{self, Frame, FrameKind};
use crate::harness::Pair;
use crate::limits::Limits;
use crate::status::Status;

fn small_request(tag: u8) -> crate::MessageBuilder {
    request(1, 0, 2, 0x1234, &[tag], &[])
}

/// A pair whose server allows the client `credits` outstanding requests.
fn pair_with_server_credits(credits: u32) -> Pair {
    Pair::connected_with(Limits::default(), limits(1 << 20, credits))
}

/// A misbehaving client sends request `call_id` while its whole window of `window`
/// requests is in use: the server rejects it as a credit violation.
fn assert_over_window(pair: &mut Pair, call_id: u64, window: u32) {
    pair.server.inject(&raw_request(call_id, b"", &[]));
    assert_eq!(
        pair.server.receive_all(),
        vec![Err(ProtocolError::CreditViolation {
            in_flight: window,
            window,
        })]
    );
}

#[test]
fn a_client_spends_one_credit_per_request_and_stops_at_zero() {
    let mut pair = pair_with_server_credits(2);
    assert_eq!(pair.client.conn.send_credits(), 2);
    let first = pair.client_call(small_request(1)).unwrap();
    assert_eq!(pair.client.conn.send_credits(), 1);
    let second = pair.client_call(small_request(2)).unwrap();
    assert_ne!(first, second);
    assert_eq!(pair.client.conn.send_credits(), 0);
    assert_eq!(pair.client.conn.in_flight(), 2);

    assert_eq!(
        pair.client_call(small_request(3)),
        Err(SendError::NoCredits)
    );
    // The refused request is handed back intact so it can be retried, and nothing was sent.
    let (error, builder) = pair.client.conn.send_request(small_request(4)).unwrap_err();
    assert_eq!(error, SendError::NoCredits);
    assert_eq!(builder.kind(), FrameKind::Request);
    assert_eq!(builder.inline_len(), 1);
    assert_eq!(pair.client.conn.in_flight(), 2);
    assert_eq!(pair.client_sent.len(), 3, "HELLO and two requests");
}

#[test]
fn a_response_returns_one_credit() {
    let mut pair = pair_with_server_credits(2);
    let first = pair.client_call(small_request(1)).unwrap();
    let second = pair.client_call(small_request(2)).unwrap();
    let events = all_ok(pair.server.receive_all());
    assert_eq!(events.len(), 2);
    assert_eq!(pair.server.conn.peer_in_flight(), 2);

    pair.server_respond(first, response(Status::Ok, b"one", &[]))
        .unwrap();
    assert_eq!(pair.server.conn.peer_in_flight(), 1);
    // The credit is piggybacked on the response frame.
    let Ok(Frame::Response(wire)) = Frame::decode(pair.server_sent.back().unwrap().clone()) else {
        panic!("the server's last frame is not a response");
    };
    assert_eq!(wire.credits, 1);
    assert_eq!(wire.call_id, first);

    let events = all_ok(pair.client.receive_all());
    assert_eq!(events.len(), 1);
    assert!(matches!(&events[0], Event::Response(r) if r.call_id == first && r.credits == 1));
    assert_eq!(pair.client.conn.send_credits(), 1);
    assert_eq!(pair.client.conn.in_flight(), 1);

    // The returned credit is good for exactly one more request.
    let third = pair.client_call(small_request(3)).unwrap();
    assert_eq!(
        pair.client_call(small_request(4)),
        Err(SendError::NoCredits)
    );
    assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
    pair.server_respond(second, response(Status::Ok, b"", &[]))
        .unwrap();
    pair.server_respond(third, response(Status::Ok, b"", &[]))
        .unwrap();
    assert_eq!(all_ok(pair.client.receive_all()).len(), 2);
    assert_eq!(pair.client.conn.send_credits(), 2);
    assert_eq!(pair.client.conn.in_flight(), 0);
    assert_eq!(pair.server.conn.peer_in_flight(), 0);
}

#[test]
fn a_credit_frame_adds_credits() {
    let mut pair = pair_with_server_credits(1);
    pair.client_call(small_request(1)).unwrap();
    assert_eq!(
        pair.client_call(small_request(2)),
        Err(SendError::NoCredits)
    );

    let grant = pair.server.conn.grant_credits(3);
    assert_eq!(Frame::decode(grant.clone()), Ok(Frame::Credit(3)));
    pair.client.inject(&grant);
    assert_eq!(all_ok(pair.client.receive_all()), vec![Event::Credit(3)]);
    assert_eq!(pair.client.conn.send_credits(), 3);

    // The server honours its grant: four requests outstanding are now within its window.
    for tag in 2..=4 {
        pair.client_call(small_request(tag)).unwrap();
    }
    assert_eq!(
        pair.client_call(small_request(5)),
        Err(SendError::NoCredits)
    );
    let events = all_ok(pair.server.receive_all());
    assert_eq!(events.len(), 4);
    assert_eq!(pair.server.conn.peer_in_flight(), 4);
}

#[test]
fn credits_saturate_instead_of_overflowing() {
    let mut pair = pair_with_server_credits(5);
    pair.client.inject(&frame::encode_credit(u32::MAX));
    pair.client.inject(&frame::encode_credit(u32::MAX));
    let events = all_ok(pair.client.receive_all());
    assert_eq!(
        events,
        vec![Event::Credit(u32::MAX), Event::Credit(u32::MAX)]
    );
    assert_eq!(
        pair.client.conn.send_credits(),
        crate::limits::MAX_SEND_CREDITS
    );
}

#[test]
fn a_request_beyond_the_window_is_a_credit_violation() {
    let mut pair = pair_with_server_credits(2);
    let first = pair.client_call(small_request(1)).unwrap();
    let second = pair.client_call(small_request(2)).unwrap();
    // A misbehaving client sends a third request without credit.
    pair.server.inject(&raw_request(second + 1, b"greedy", &[]));
    let events = pair.server.receive_all();
    assert_eq!(events.len(), 3);
    assert!(matches!(&events[0], Ok(Event::Request(r)) if r.call_id == first));
    assert!(matches!(&events[1], Ok(Event::Request(r)) if r.call_id == second));
    let error = events[2].clone().unwrap_err();
    assert_eq!(
        error,
        ProtocolError::CreditViolation {
            in_flight: 2,
            window: 2,
        }
    );
    // The violation is not counted, and the close frame says "overloaded".
    assert_eq!(pair.server.conn.peer_in_flight(), 2);
    assert_eq!(error.status(), Status::Overloaded);
    assert_close_frame(&error, Status::Overloaded);
}

#[test]
fn an_answered_request_frees_its_slot_in_the_window() {
    let mut pair = pair_with_server_credits(1);
    let first = pair.client_call(small_request(1)).unwrap();
    assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
    pair.server_respond(first, response(Status::Ok, b"", &[]))
        .unwrap();
    // The client has not even read the response yet, but the slot is free on the server.
    pair.server.inject(&raw_request(first + 1, b"", &[]));
    let events = all_ok(pair.server.receive_all());
    assert!(matches!(&events[..], [Event::Request(r)] if r.call_id == first + 1));
    // And a second unanswered one is over the window again.
    assert_over_window(&mut pair, first + 2, 1);
}

#[test]
fn a_granted_credit_widens_the_receivers_window() {
    let mut pair = pair_with_server_credits(1);
    pair.server.inject(&raw_request(10, b"", &[]));
    let _grant = pair.server.conn.grant_credits(1);
    pair.server.inject(&raw_request(11, b"", &[]));
    let events = all_ok(pair.server.receive_all());
    assert_eq!(events.len(), 2);
    assert_over_window(&mut pair, 12, 2);
}

#[test]
fn a_response_without_a_pending_request_cannot_be_sent() {
    let mut pair = Pair::connected();
    assert_eq!(
        pair.server_respond(1, response(Status::Ok, b"", &[])),
        Err(SendError::NoRequestPending)
    );
    assert_eq!(pair.server_sent.len(), 1, "only the WELCOME was sent");
}

#[test]
fn the_server_can_call_the_client_within_the_clients_window() {
    let mut pair = Pair::connected_with(limits(1 << 20, 1), Limits::default());
    assert_eq!(pair.server.conn.send_credits(), 1);
    let (call_id, frame) = pair
        .server
        .conn
        .send_request(small_request(9))
        .map_err(|(e, _)| e)
        .unwrap();
    assert!(matches!(
        pair.server.conn.send_request(small_request(10)),
        Err((SendError::NoCredits, _))
    ));
    pair.client.inject(&frame.into_contiguous());
    let events = all_ok(pair.client.receive_all());
    assert!(matches!(&events[..], [Event::Request(r)] if r.call_id == call_id));
    let reply = pair
        .client
        .conn
        .send_response(call_id, response(Status::Ok, b"pong", &[]))
        .unwrap();
    pair.server.inject(&reply.into_contiguous());
    let events = all_ok(pair.server.receive_all());
    assert!(matches!(&events[..], [Event::Response(r)] if r.call_id == call_id));
    assert_eq!(pair.server.conn.send_credits(), 1);
    // A raw response to the client, which has nothing in flight, is unsolicited.
    pair.client.inject(&raw_response(77, Status::Ok, b""));
    assert_eq!(
        pair.client.receive_all(),
        vec![Err(ProtocolError::UnsolicitedResponse { call_id: 77 })]
    );
}

#[test]
fn a_response_stamped_apart_carries_its_credit_and_frees_it_once_counted() {
    let mut pair = pair_with_server_credits(1);
    let call_id = pair.client_call(small_request(1)).unwrap();
    assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
    let limit = pair.server.conn.peer_limits().max_frame_size;
    let apart =
        crate::connection::stamp_response(call_id, response(Status::Ok, b"one", &[]), limit);
    let Ok(Frame::Response(wire)) = Frame::decode(apart.into_contiguous()) else {
        panic!("not a response");
    };
    assert_eq!((wire.call_id, wire.credits), (call_id, 1));
    // Not counted yet: the peer's window is still spent.
    assert_eq!(pair.server.conn.peer_in_flight(), 1);
    assert_over_window(&mut pair, 2, 1);

    let mut pair = pair_with_server_credits(1);
    let call_id = pair.client_call(small_request(1)).unwrap();
    assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
    // Counting more than is outstanding fails and counts none.
    assert_eq!(
        pair.server.conn.responses_sent(2),
        Err(SendError::NoRequestPending)
    );
    assert_eq!(pair.server.conn.peer_in_flight(), 1);
    pair.server.conn.responses_sent(1).unwrap();
    assert_eq!(pair.server.conn.peer_in_flight(), 0);
    // The credit is free for the next request.
    pair.server.inject(&raw_request(call_id + 1, b"", &[]));
    let events = all_ok(pair.server.receive_all());
    assert!(matches!(&events[..], [Event::Request(r)] if r.call_id == call_id + 1));
}

#[test]
fn an_oversized_response_stamped_apart_becomes_an_internal_error() {
    let mut pair = Pair::connected_with(limits(4096, 8), Limits::default());
    let call_id = pair.client_call(small_request(1)).unwrap();
    assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
    let limit = pair.server.conn.peer_limits().max_frame_size;
    let big = vec![7u8; 8192];
    let apart = crate::connection::stamp_response(call_id, response(Status::Ok, &big, &[]), limit);
    let Ok(Frame::Response(wire)) = Frame::decode(apart.into_contiguous()) else {
        panic!("not a response");
    };
    assert_eq!((wire.call_id, wire.status), (call_id, Status::Internal));
}
