//! `Frame::decode` on arbitrary bytes: never panics, and whatever it accepts is
//! self-consistent (the length field is the frame's length, a payload accounts for every
//! byte of its frame, a close reason is within the limit).

#![no_main]

use bytes::Bytes;
use lanner_proto::frame::{self, REQUEST_FIXED_LEN, RESPONSE_FIXED_LEN};
use lanner_proto::{Frame, Payload};
use libfuzzer_sys::fuzz_target;

fn check_payload(payload: &Payload, fixed_len: usize, frame_len: usize) {
    let bulk: usize = payload.segments().map(|s| s.len()).sum();
    assert_eq!(payload.inline().len(), payload.inline_slice().len());
    assert_eq!(
        fixed_len + payload.inline_slice().len() + 4 * payload.segment_count() + bulk,
        frame_len,
        "payload parts do not add up to the frame"
    );
    assert!(payload.segment(payload.segment_count()).is_none());
}

fuzz_target!(|data: &[u8]| {
    let header = frame::read_header(data);
    let Ok(decoded) = Frame::decode(Bytes::copy_from_slice(data)) else {
        return;
    };
    let header = header.expect("a decodable frame has a valid header");
    assert_eq!(header.len as usize, data.len());
    assert_eq!(header.kind, decoded.kind());
    match &decoded {
        Frame::Request(request) => check_payload(&request.payload, REQUEST_FIXED_LEN, data.len()),
        Frame::Response(response) => {
            check_payload(&response.payload, RESPONSE_FIXED_LEN, data.len())
        }
        Frame::Close(close) => {
            assert_eq!(header.segments, 0);
            assert!(close.reason.len() <= 1024);
        }
        _ => assert_eq!(header.segments, 0),
    }
});
