//! The fuzz drivers, shared by the fuzz targets in `fuzz/` and by the regression tests
//! that replay what the fuzzers found: a crash input pasted into a test runs exactly the
//! code the fuzzer ran. Available to tests and, with the `harness` feature, to other
//! crates. The drivers assert the properties the fuzzers check; they panic on a violation,
//! which is how a fuzzer reports one.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::auth::Mechanism;
use crate::auth::psk::{PskClient, PskServer};
use crate::builder::MessageBuilder;
use crate::connection::{Connection, Event};
use crate::error::{ProtocolError, SendError};
use crate::frame::{self, Frame, Hello, REQUEST_FIXED_LEN, RESPONSE_FIXED_LEN, Welcome};
use crate::harness::{Pair, Peer};
use crate::limits::{Limits, MAX_REASON_LEN, PROTOCOL_VERSION};
use crate::payload::Payload;
use crate::status::Status;

/// `Frame::decode` on arbitrary bytes: never panics, and whatever it accepts is
/// self-consistent (the length field is the frame's length, a payload accounts for every
/// byte of its frame, a close reason is within the limit). The same bytes taken as a frame
/// read in place decode to an equal frame, or fail alike, whether decided there
/// ([`crate::in_place::decode`]) or from a copy of its structure
/// ([`crate::in_place::copy_structure`]). A request's object, looked ahead at
/// ([`frame::peek_request_object`]), is the one the decoder finds.
pub fn frame_decode(data: &[u8]) {
    let header = frame::read_header(data);
    let whole = Bytes::copy_from_slice(data);
    let (structure, apart) = crate::in_place::copy_structure(&whole, Vec::new());
    let copied = Frame::decode_with(structure, apart);
    let in_place = crate::in_place::decode(whole.clone(), Vec::new());
    let decoded = Frame::decode(whole);
    assert_eq!(
        decoded.as_ref().ok().map(in_parts),
        copied.as_ref().ok().map(in_parts),
        "a frame decoded from a copy of its structure differs"
    );
    assert_eq!(decoded.is_err(), copied.is_err());
    assert_eq!(
        decoded.as_ref().ok().map(in_parts),
        in_place.as_ref().ok().map(in_parts),
        "a frame read in place decodes differently"
    );
    assert_eq!(decoded.is_err(), in_place.is_err());
    let Ok(decoded) = decoded else {
        return;
    };
    let header = header.expect("a decodable frame has a valid header");
    assert_eq!(header.len as usize, data.len());
    assert_eq!(header.kind, decoded.kind());
    // The look ahead at a request's object (taken before the frame is decoded) agrees.
    let object = match &decoded {
        Frame::Request(request) => Some(request.object),
        _ => None,
    };
    assert_eq!(frame::peek_request_object(data), object);
    match &decoded {
        Frame::Request(request) => check_payload(&request.payload, REQUEST_FIXED_LEN, data.len()),
        Frame::Response(response) => {
            check_payload(&response.payload, RESPONSE_FIXED_LEN, data.len())
        }
        Frame::Close(close) => {
            assert_eq!(header.segments, 0);
            assert!(close.reason.len() <= MAX_REASON_LEN);
        }
        _ => assert_eq!(header.segments, 0),
    }
}

/// Arbitrary bytes, cut into arbitrary chunks, fed through `FrameSplitter` and
/// `Connection::handle_frame` on server-role and client-role connections: fresh, right
/// after a valid handshake frame in the same stream, and fully open with calls in flight
/// (through the two-peer harness). Accepted requests are answered (echoing their payload,
/// which exercises the too-large substitution), and every protocol error's close frame
/// must decode. Input layout: byte 0 seeds the chunk sizes, the rest is the stream.
pub fn stream_split(input: &[u8]) {
    let Some((&seed, data)) = input.split_first() else {
        return;
    };
    let mut chunks = Chunks::new(seed);

    // Fresh connections.
    drive(
        &mut Peer::new(Connection::server(SMALL)),
        chunks.reads(data),
    );
    drive(
        &mut Peer::new(Connection::client(SMALL).0),
        chunks.reads(data),
    );

    // Right after a valid handshake frame in the same stream.
    let hello = frame::encode_hello(&Hello {
        version_min: PROTOCOL_VERSION,
        version_max: PROTOCOL_VERSION,
        limits: SMALL,
        mechanism: Mechanism::None,
        auth: Bytes::new(),
    });
    drive(
        &mut Peer::new(Connection::server(SMALL)),
        chunks.reads(&with_prefix(&hello, data)),
    );
    let welcome = frame::encode_welcome(&Welcome {
        version: PROTOCOL_VERSION,
        limits: SMALL,
        mechanism: Mechanism::None,
        auth: Bytes::new(),
    });
    drive(
        &mut Peer::new(Connection::client(SMALL).0),
        chunks.reads(&with_prefix(&welcome, data)),
    );

    // Pre-shared key authentication: a fresh server and client, and a server that has
    // answered a genuine HELLO and now waits for AUTH (the input may forge it, skip it,
    // or call before it).
    drive(&mut Peer::new(psk_server()), chunks.reads(data));
    drive(&mut Peer::new(psk_client().0), chunks.reads(data));
    let mut waiting = Peer::new(psk_server());
    waiting.inject(&psk_client().1);
    let _ = waiting.receive_all();
    drive(&mut waiting, chunks.reads(data));

    // Both ends of an open pair, each with a call outstanding towards the other.
    let mut pair = busy_pair();
    drive_per_read(&mut pair.server, chunks.reads(data));
    drive_per_read(&mut pair.client, chunks.reads(data));
}

/// The key the fuzzed pre-shared key peers hold (the fuzzer cannot know it).
const FUZZ_KEY: &[u8] = b"fuzzing key, 32 bytes long......";

fn psk_server() -> Connection {
    let keys = HashMap::from([("fuzz".to_owned(), Arc::<[u8]>::from(FUZZ_KEY))]);
    Connection::server_with(SMALL, Box::new(PskServer::new(Arc::new(keys), [1; 32])))
}

fn psk_client() -> (Connection, Bytes) {
    let client = PskClient::new("fuzz", Arc::from(FUZZ_KEY), [2; 32]).expect("a valid key id");
    Connection::client_with(SMALL, Box::new(client))
}

/// An open pair with small limits and one call outstanding in each direction.
pub(crate) fn busy_pair() -> Pair {
    let mut pair = Pair::connected_with(SMALL, SMALL);
    pair.client_call(MessageBuilder::request(1, 0, 0, 0))
        .expect("a fresh pair has credit");
    let _ = pair.server.receive_all();
    let (_, out) = pair
        .server
        .conn
        .send_request(MessageBuilder::request(2, 0, 0, 0))
        .map_err(|(error, _)| error)
        .expect("a fresh pair has credit");
    pair.client.inject(&out.into_contiguous());
    let _ = pair.client.receive_all();
    pair
}

/// A frame without its payload, and its payload's inline part, reference table and
/// segments: equal for equal frames, however their bytes were delivered.
fn in_parts(frame: &Frame) -> (Frame, Vec<u8>, Vec<u64>, Vec<Bytes>) {
    let mut frame = frame.clone();
    let payload = match &mut frame {
        Frame::Request(request) => std::mem::take(&mut request.payload),
        Frame::Response(response) => std::mem::take(&mut response.payload),
        _ => Payload::default(),
    };
    let inline = payload.inline_slice().to_vec();
    let references = payload.references().collect();
    (frame, inline, references, payload.segments().collect())
}

/// Asserts that a decoded payload accounts for every byte of its frame of `frame_len`
/// bytes, whose fixed part is `fixed_len` bytes, and that its accessors agree.
pub(crate) fn check_payload(payload: &Payload, fixed_len: usize, frame_len: usize) {
    let bulk: usize = payload.segments().map(|s| s.len()).sum();
    assert_eq!(payload.inline().len(), payload.inline_slice().len());
    assert_eq!(
        fixed_len
            + payload.inline_slice().len()
            + payload.references_len()
            + 4 * payload.segment_count()
            + bulk,
        frame_len,
        "payload parts do not add up to the frame"
    );
    assert!(
        payload
            .segments()
            .enumerate()
            .all(|(i, segment)| payload.segment(i) == Some(segment))
    );
    assert!(payload.segment(payload.segment_count()).is_none());
    // A table, if any, is its handles and their count.
    assert_eq!(
        payload.references_len(),
        match payload.references().len() {
            0 if payload.references_len() == 0 => 0,
            count => 8 * count + 4,
        }
    );
}

const SMALL: Limits = Limits {
    max_frame_size: 4096,
    credits: 2,
};

/// Deterministic chunk sizes from a one-byte seed.
struct Chunks {
    state: u32,
    max: usize,
}

impl Chunks {
    fn new(seed: u8) -> Chunks {
        let max = [1, 3, 16, 64, 512, 4096, 70_000, usize::MAX][usize::from(seed & 7)];
        Chunks {
            state: u32::from(seed).wrapping_mul(0x9e37_79b9) | 1,
            max,
        }
    }

    fn next(&mut self) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 17;
        self.state ^= self.state << 5;
        1 + (self.state as usize) % self.max.min(1 << 20)
    }

    /// `stream` cut into reads of the next chunk sizes.
    fn reads<'a>(&'a mut self, stream: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut rest = stream;
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let (read, tail) = rest.split_at(self.next().min(rest.len()));
            rest = tail;
            Some(read)
        })
    }
}

fn check_error(error: &ProtocolError) {
    let _ = error.to_string();
    match Frame::decode(error.close_frame()) {
        Ok(Frame::Close(close)) => assert_eq!(close.status, error.status()),
        other => panic!("close frame for {error:?} decodes to {other:?}"),
    }
}

/// What a runtime would do with an event: answer requests and sometimes grant more credit.
/// The answer echoes the request's payload with its inline part doubled, so that large
/// requests get answers too large for the peer, which must be replaced by an `Internal`
/// error response that still fits.
fn react(conn: &mut Connection, event: Event) {
    if let Event::Ping { pong } = &event {
        // The runtime sends it back as is.
        assert!(matches!(Frame::decode(pong.clone()), Ok(Frame::Pong(_))));
        return;
    }
    if let Event::Request(request) = event {
        if request.one_way {
            // No answer: only the credit goes back (refused once a CLOSE in the same read
            // has closed the connection).
            match conn.finish_one_way() {
                Ok(grant) => assert_eq!(Frame::decode(grant), Ok(Frame::Credit(1))),
                Err(error) => assert_eq!(error, SendError::NotOpen),
            }
            return;
        }
        let inline = request.payload.inline_slice();
        if inline.first().is_some_and(|b| b & 1 == 1) {
            let grant = conn.grant_credits(1);
            assert_eq!(Frame::decode(grant), Ok(Frame::Credit(1)));
        }
        let mut reply = MessageBuilder::response(Status::Ok);
        reply.inline().put_slice(inline);
        reply.inline().put_slice(inline);
        for segment in request.payload.segments() {
            reply.push_segment(segment);
        }
        let max = conn.peer_limits().max_frame_size;
        let fits = reply.check(max).is_ok();
        if !conn.is_open() {
            // The harness processes a whole read before reacting, so a CLOSE later in the
            // same read may already have closed the connection: answering is refused.
            let result = conn.send_response(request.call_id, reply);
            assert_eq!(result.map(|_| ()), Err(SendError::NotOpen));
            return;
        }
        let out = conn
            .send_response(request.call_id, reply)
            .expect("answering an accepted request on an open connection succeeds");
        let bytes = out.into_contiguous();
        assert!(bytes.len() <= max as usize);
        let Ok(Frame::Response(response)) = Frame::decode(bytes) else {
            panic!("the answer does not decode as a response");
        };
        assert_eq!(response.call_id, request.call_id);
        assert_eq!(response.credits, 1);
        if fits {
            assert_eq!(response.status, Status::Ok);
            assert_eq!(response.payload.inline_slice().len(), 2 * inline.len());
            assert!(response.payload.segments().eq(request.payload.segments()));
        } else {
            assert_eq!(response.status, Status::Internal);
            assert_eq!(response.payload.segment_count(), 0);
        }
    }
}

/// Feeds `reads` to `peer` as a runtime's read loop would, reacting to each frame's event
/// before the next frame is split off. Stops at the first protocol error.
pub(crate) fn drive<'a>(peer: &mut Peer, reads: impl IntoIterator<Item = &'a [u8]>) {
    for read in reads {
        peer.inject(read);
        while let Some(result) = peer.receive_next() {
            match result {
                Ok((_, event)) => react(&mut peer.conn, event),
                Err(error) => return check_error(&error),
            }
        }
    }
}

/// Like [`drive`], but each read is processed whole before its events are reacted to (as
/// [`Peer::receive_all`] does), so a reaction may find a later frame of the same read
/// already applied.
fn drive_per_read<'a>(peer: &mut Peer, reads: impl IntoIterator<Item = &'a [u8]>) {
    for read in reads {
        peer.inject(read);
        for event in peer.receive_all() {
            match event {
                Ok(event) => react(&mut peer.conn, event),
                Err(error) => return check_error(&error),
            }
        }
    }
}

fn with_prefix(prefix: &Bytes, data: &[u8]) -> Vec<u8> {
    let mut stream = prefix.to_vec();
    stream.extend_from_slice(data);
    stream
}
