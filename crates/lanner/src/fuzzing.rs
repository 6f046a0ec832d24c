//! Fuzz target code (run by `fuzz/`, kept here so that a crash input replays as a unit
//! test): the decoder of arguments and results, fed arbitrary bytes as several kinds of
//! values, including types that contain themselves; the shared-memory transport's
//! decoder of records that lend payloads; and the URL parser, which reads the endpoints
//! that references to a third party's objects carry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::marshal::decode_inline;

/// A type that can contain itself, through an enum, a box and a sequence.
#[derive(Debug, Serialize, Deserialize)]
enum Tree {
    Leaf(u64),
    Node(Box<Tree>, Vec<Tree>),
    Named(BTreeMap<String, Tree>),
}

/// A record with a bit of everything.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    id: u128,
    name: String,
    tags: Vec<String>,
    blob: Vec<u8>,
    next: Option<Box<Record>>,
    score: f64,
    error: Option<crate::Error>,
}

/// Decodes `data` as each of the kinds of value above. The decoder must return a value or
/// an error, never panic, never overflow the stack, and never allocate according to a
/// length the input merely claims.
pub fn value_decode(data: &[u8]) {
    let _ = decode_inline::<Tree>(data);
    let _ = decode_inline::<Record>(data);
    let _ = decode_inline::<(String, Vec<u64>, Option<bool>)>(data);
    let _ = decode_inline::<crate::Error>(data);
    let _ = decode_inline::<Vec<Vec<Vec<u8>>>>(data);
}

/// Bytes of the loan area the lent-record driver decodes against.
const LENT_AREA: usize = 64 * 1024;

/// A record of lent payloads (see `transport::shm::lent`) as a hostile peer could publish
/// it, decoded against a loan area, and the frame it carries handed to the protocol core
/// with its lent segments: neither panics, whatever either accepts stays inside the area,
/// and every lending taken is given back once the results are dropped.
pub fn lent_record(data: &[u8]) {
    let (area, receiver) = lanner_shm::loans::heap_loans(LENT_AREA);
    let record = bytes::Bytes::copy_from_slice(data);
    if let Ok((frame, external)) = crate::transport::shm::lent::decode(&record, &receiver) {
        for (_, segment) in &external {
            assert!(
                segment.len() <= LENT_AREA,
                "a lent segment larger than the area"
            );
        }
        // As the runtime decodes it: as memory the peer can still write.
        let decoded = lanner_proto::in_place::decode(frame, external);
        if let Ok(lanner_proto::Frame::Request(request)) = &decoded {
            let _ = request.payload.segments().count();
        }
    }
    assert_eq!(receiver.held(), 0, "a lending was not given back");
    // The returns name nothing this area lent: read and ignored.
    area.collect_returns();
}

/// Parses `data` (as UTF-8, lossily) as an endpoint and as an object URL, as a reference
/// handed over by a peer is parsed. Neither parser panics; a refusal is `InvalidArgument`
/// with a message free of control characters (it goes to logs); what is accepted contains
/// no control characters either, prints as a URL that parses back to the same value, and
/// has one spelling: an absolute unix path without `.` or `..`, a tcp address with a host
/// and a port, a non-empty shm or mem name without `/`, a non-empty object name.
pub fn url_parse(data: &[u8]) {
    use crate::url::{Endpoint, ObjectUrl};
    let text = String::from_utf8_lossy(data);
    let refused = |error: crate::Error| {
        assert_eq!(error.kind(), crate::ErrorKind::InvalidArgument, "{error}");
        assert!(
            !error.message().chars().any(char::is_control),
            "a control character in {:?}",
            error.message()
        );
    };
    let check_endpoint = |endpoint: &Endpoint| {
        let printed = endpoint.to_string();
        assert!(!printed.chars().any(char::is_control), "{printed:?}");
        assert_eq!(
            Endpoint::parse(&printed).as_ref().ok(),
            Some(endpoint),
            "{printed:?} does not parse back"
        );
        match endpoint {
            Endpoint::Unix(path) => {
                assert!(path.is_absolute(), "{path:?}");
                let text = path.to_str().expect("parsed from a str");
                assert!(
                    !text.split('/').any(|part| part == "." || part == ".."),
                    "{text:?}"
                );
            }
            Endpoint::Tcp(address) => {
                let (host, port) = address.rsplit_once(':').expect("a port");
                assert!(
                    !host.is_empty() && port.parse::<u16>().is_ok(),
                    "{address:?}"
                );
            }
            Endpoint::Shm(name) | Endpoint::Mem(name) => {
                assert!(!name.is_empty() && !name.contains('/'), "{name:?}");
            }
        }
    };
    match Endpoint::parse(&text) {
        Ok(endpoint) => check_endpoint(&endpoint),
        Err(error) => refused(error),
    }
    match ObjectUrl::parse(&text) {
        Ok(url) => {
            check_endpoint(&url.endpoint);
            assert!(!url.name.is_empty());
            let printed = url.to_string();
            assert_eq!(
                ObjectUrl::parse(&printed).as_ref().ok(),
                Some(&url),
                "{printed:?} does not parse back"
            );
        }
        Err(error) => refused(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_back_or_are_refused_cleanly() {
        for url in [
            "tcp://127.0.0.1:7000/calc",
            "tcp://[::1]:7000/a/b",
            "unix:///tmp/s.sock/calc",
            "unix:////tmp//s.sock//calc",
            "shm://fast/calc",
            "mem://x",
            "tcp://host\n:80/calc",
            "unix:///tmp/\u{1b}[2J.sock/calc",
            "shm://a\rb/calc",
            "tcp://a:1/na\u{85}me",
            "\u{0}",
            "",
            "://",
        ] {
            url_parse(url.as_bytes());
        }
        url_parse(&[0xff, 0xfe, b':', b'/', b'/']);
    }

    #[test]
    fn deep_and_claimed_large_inputs_end_in_errors() {
        value_decode(&[1u8; 1 << 20]);
        value_decode(&[0xff; 64]);
        value_decode(&[]);
        // A sequence claiming u32::MAX elements, then nothing.
        value_decode(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    }

    /// A request lending its one segment (offset 100 of the area), as the sink writes it.
    fn lent_request() -> Vec<u8> {
        let mut builder = lanner_proto::MessageBuilder::request(1, 0, 0, 7);
        builder.push_segment(bytes::Bytes::from(vec![0u8; 2000]));
        let mut pair = lanner_proto::harness::Pair::connected();
        let (_, out) = pair.client.conn.send_request(builder).ok().unwrap();
        let (head, _) = out.parts();
        let lent = crate::transport::shm::lent::Lent {
            index: 0,
            len: 2000,
            offset: 100,
        };
        let mut record = crate::transport::shm::lent::encode_descriptors(&[lent]);
        record.extend_from_slice(head);
        record
    }

    #[test]
    fn lent_records_decode_or_fail_and_give_every_lending_back() {
        let valid = lent_request();
        // The valid record takes the whole path: decoded, then accepted as a request.
        let (area, receiver) = lanner_shm::loans::heap_loans(LENT_AREA);
        let (frame, external) =
            crate::transport::shm::lent::decode(&bytes::Bytes::from(valid.clone()), &receiver)
                .unwrap();
        let request = lanner_proto::Frame::decode_with(frame, external);
        assert!(matches!(request, Ok(lanner_proto::Frame::Request(_))));
        drop((request, area));
        lent_record(&valid);
        for cut in [0, 4, 8, 20, 24, valid.len() - 1] {
            lent_record(&valid[..cut]);
        }
        let mut flipped = valid.clone();
        for at in 0..flipped.len() {
            flipped[at] ^= 0x5a;
            lent_record(&flipped);
            flipped[at] ^= 0x5a;
        }
        lent_record(&[0xff; 64]);
    }
}
