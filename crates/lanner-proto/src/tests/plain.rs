//! Plain requests (no inline data, one bulk segment at most) stamped by the connection
//! instead of built: the same credits, limits and frames as built requests.

use bytes::Bytes;

use super::{all_ok, limits};
use crate::connection::Event;
use crate::error::SendError;
use crate::frame::REQUEST_FIXED_LEN;
use crate::harness::Pair;
use crate::limits::Limits;
use crate::plain::PlainRequest;

fn plain(bulk: Option<&[u8]>, one_way: bool) -> PlainRequest {
    PlainRequest {
        object: 1,
        slot: 0,
        method: 2,
        fingerprint: 0x1234,
        timeout: None,
        one_way,
        bulk: bulk.map(Bytes::copy_from_slice),
    }
}

/// The client stamps `request` and its bytes land in the server's inbox.
fn send_plain(pair: &mut Pair, request: PlainRequest) -> Result<u64, SendError> {
    let (call_id, head, bulk) = pair
        .client
        .conn
        .stamp_plain_request(request)
        .map_err(|(error, _)| error)?;
    let bytes = head.into_frame(bulk).into_contiguous();
    pair.server.inject(&bytes);
    pair.client_sent.push_back(bytes);
    Ok(call_id)
}

#[test]
fn plain_requests_arrive_as_requests_and_spend_credits_as_built_ones_do() {
    let mut pair = Pair::connected_with(Limits::default(), limits(1 << 20, 2));
    let first = send_plain(&mut pair, plain(Some(b"payload"), false)).unwrap();
    let second = send_plain(&mut pair, plain(None, true)).unwrap();
    assert_ne!(first, second);
    assert_eq!(pair.client.conn.send_credits(), 0);
    // The one-way call expects no answer.
    assert_eq!(pair.client.conn.in_flight(), 1);

    let (error, returned) = pair
        .client
        .conn
        .stamp_plain_request(plain(Some(b"later"), false))
        .unwrap_err();
    assert_eq!(error, SendError::NoCredits);
    assert_eq!(returned.bulk.as_deref(), Some(&b"later"[..]));

    let events = all_ok(pair.server.receive_all());
    let [Event::Request(with_bulk), Event::Request(null)] = &events[..] else {
        panic!("expected two requests, got {events:?}");
    };
    assert_eq!(with_bulk.call_id, first);
    assert!(!with_bulk.one_way);
    assert_eq!(
        with_bulk.payload.segments().collect::<Vec<_>>(),
        vec![Bytes::from_static(b"payload")]
    );
    assert_eq!(null.call_id, second);
    assert!(null.one_way);
    assert_eq!(null.payload.segments().count(), 0);
}

#[test]
fn a_plain_request_too_large_for_the_peer_is_handed_back_without_spending_credit() {
    let mut pair = Pair::connected_with(Limits::default(), limits(4096, 2));
    let exactly = vec![1u8; 4096 - REQUEST_FIXED_LEN - 4];
    let too_big = vec![1u8; exactly.len() + 1];
    let (error, returned) = pair
        .client
        .conn
        .stamp_plain_request(plain(Some(&too_big), false))
        .unwrap_err();
    assert_eq!(
        error,
        SendError::TooLarge {
            len: 4097,
            max: 4096
        }
    );
    assert_eq!(returned.frame_len(), 4097);
    assert_eq!(pair.client.conn.send_credits(), 2);
    assert_eq!(pair.client.conn.in_flight(), 0);

    send_plain(&mut pair, plain(Some(&exactly), false)).unwrap();
    assert_eq!(pair.client_sent.back().unwrap().len(), 4096);
    assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
}

#[test]
fn a_closed_connection_refuses_plain_requests() {
    let mut pair = Pair::connected();
    pair.client.conn.close(crate::status::Status::Ok, "done");
    let (error, _) = pair
        .client
        .conn
        .stamp_plain_request(plain(None, false))
        .unwrap_err();
    assert_eq!(error, SendError::NotOpen);
}
