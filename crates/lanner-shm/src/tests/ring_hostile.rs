//! A hostile peer on either side of the ring: a producer writing any header words and
//! bytes into the data area, a consumer storing any `head`. Each is refused with an
//! error, never a panic, and never keeps the other side taking records that lead nowhere.

use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{FLAG_MORE, FLAG_PADDING, FLAG_PREFIXED, FLAG_WRITTEN, record_bytes, ring, send, word};
use crate::ring::{Consumer, Producer, RingError, hostile_consumer};

const W: u32 = FLAG_WRITTEN;
const AHEAD: RingError = RingError("a record lies more than a ring ahead of the consumer");
const PAST_END: RingError = RingError("a record runs past the ring's end");

/// A header alone, as bytes of the data area.
fn header(len: u32, flags: u32) -> Vec<u8> {
    word(len, flags).to_le_bytes().to_vec()
}

/// Takes records (dropping each at once) until the ring runs dry or breaks, at most
/// `limit` of them: how many, and the error.
fn take_all(consumer: &mut Consumer, limit: usize) -> (usize, Option<RingError>) {
    for taken in 0..limit {
        match consumer.try_recv() {
            Ok(Some(_)) => {}
            Ok(None) => return (taken, None),
            Err(error) => return (taken, Some(error)),
        }
    }
    (limit, None)
}

#[test]
fn hostile_headers_are_errors_not_panics() {
    const FLAGS: RingError = RingError("a record has unknown flags");
    const UNWRITTEN: RingError = RingError("a record header lacks its written flag");
    const WHOLE: RingError = RingError("a padding record fills the whole ring");
    const EMPTY_FRAGMENT: RingError = RingError("a fragment record is empty");
    const PREFIX: RingError = RingError("a record's prefix does not fit in it");
    // A record of 4,024 bytes fills the ring but for its last line (taken first when the
    // case is about the last line).
    let to_last_line = record_bytes(&[0; 4024], W);
    let cases: Vec<(Vec<u8>, RingError, &str)> = vec![
        (header(4, 0x10 | W), FLAGS, "an unknown flag"),
        (header(4, 0x8000 | W), FLAGS, "an unknown high flag"),
        (header(4, 0), UNWRITTEN, "a length without flags"),
        (
            header(0, FLAG_PADDING),
            UNWRITTEN,
            "padding without the flag",
        ),
        (header(5000, W), PAST_END, "a record longer than the ring"),
        (header(u32::MAX, W), PAST_END, "huge length"),
        (
            [to_last_line.clone(), header(57, W)].concat(),
            PAST_END,
            "two lines from the last line",
        ),
        (
            header(4089, W),
            PAST_END,
            "one byte past the end of the ring",
        ),
        (header(4088, W), AHEAD, "a record of the whole ring"),
        (
            header(4088, FLAG_PADDING | W),
            WHOLE,
            "padding over the ring",
        ),
        (
            header(0, FLAG_PADDING | W),
            WHOLE,
            "short padding at offset 0",
        ),
        (
            header(0, FLAG_MORE | W),
            EMPTY_FRAGMENT,
            "an empty fragment",
        ),
        (
            header(0, FLAG_PREFIXED | W),
            RingError("a prefixed record is empty"),
            "an empty prefixed record",
        ),
        (
            [header(4, FLAG_PREFIXED | W), vec![0, 1, 2, 3]].concat(),
            PREFIX,
            "a prefix of no bytes",
        ),
        (
            [header(4, FLAG_PREFIXED | W), vec![5, 1, 2, 3]].concat(),
            PREFIX,
            "a prefix longer than its record",
        ),
        (
            [header(4, FLAG_PREFIXED | FLAG_MORE | W), vec![4, 1, 2, 3]].concat(),
            EMPTY_FRAGMENT,
            "a fragment that is all prefix",
        ),
    ];
    for (contents, error, why) in cases {
        let mut consumer = hostile_consumer(4096, &contents);
        let taken = usize::from(contents.len() > 4000);
        assert_eq!(take_all(&mut consumer, 10), (taken, Some(error)), "{why}");
    }
}

#[test]
fn the_largest_records_a_producer_could_write_are_accepted() {
    // The bounds above are tight: a ring less a line from offset 0, and a record in the
    // last line once the space before it is released.
    let contents = [record_bytes(&[1; 4024], W), record_bytes(&[2; 56], W)].concat();
    let mut consumer = hostile_consumer(4096, &contents);
    let first = consumer.try_recv().unwrap().expect("a ring less a line");
    assert_eq!(first.bytes, Bytes::from(vec![1; 4024]));
    drop(first);
    let last = consumer.try_recv().unwrap().expect("the last line");
    assert_eq!(last.bytes, Bytes::from(vec![2; 56]));
    // Not while the first is held: the last line is the one kept free.
    let mut consumer = hostile_consumer(4096, &contents);
    let _first = consumer.try_recv().unwrap().expect("a ring less a line");
    assert_eq!(consumer.try_recv(), Err(AHEAD));
}

#[test]
fn a_lap_published_over_a_held_record_is_an_error() {
    // The producer may write up to a ring past what the consumer released, less the line
    // it keeps free: a record held in place keeps its space, and every record consumed
    // while it is held waits behind it (bookkeeping that would otherwise grow without
    // bound). The held record takes the line at 0; the peer writes what follows.
    let held_then = |follow: &dyn Fn(&Consumer)| {
        let (mut producer, mut consumer, _, _) = ring(4096, 8);
        send(&mut producer, b"12345678", false);
        let held = consumer.try_recv().unwrap().expect("published").bytes;
        follow(&consumer);
        (consumer, held)
    };
    let store = |consumer: &Consumer, offset: usize, word: u64| {
        consumer
            .shared()
            .header(offset)
            .store(word, Ordering::Release);
    };

    // A record from 64 to the end: its free line would be the held one.
    let to_end = |consumer: &Consumer| store(consumer, 64, word(4096 - 64 - 8, W));
    let (mut consumer, held) = held_then(&to_end);
    assert_eq!(consumer.try_recv(), Err(AHEAD));
    drop(held);
    let (mut consumer, held) = held_then(&to_end);
    drop(held);
    assert!(
        consumer.try_recv().unwrap().is_some(),
        "released: a ring past it"
    );

    // A line shorter is what an honest producer may write; padding after it is not.
    let short = |consumer: &Consumer| store(consumer, 64, word(4096 - 128 - 8, W));
    let (mut consumer, held) = held_then(&short);
    assert!(
        consumer.try_recv().unwrap().is_some(),
        "the free line is kept"
    );
    store(&consumer, 4096 - 64, word(0, FLAG_PADDING | W));
    assert_eq!(
        consumer.try_recv(),
        Err(AHEAD),
        "padding over the free line"
    );
    drop(held);
    store(&consumer, 0, 0);
    assert_eq!(
        consumer.try_recv(),
        Ok(None),
        "released: padding, then nothing"
    );
}

#[test]
fn records_on_every_line_are_taken_only_as_their_space_is_released() {
    // One-line records everywhere: a stream without end, as from a producer that keeps
    // publishing. Held, they stop the consumer a ring past the first (less the free
    // line); dropped, they keep coming lap after lap.
    let contents = record_bytes(&[7], W).repeat(64);
    let mut consumer = hostile_consumer(4096, &contents);
    let mut held = Vec::new();
    let error = loop {
        match consumer.try_recv() {
            Ok(Some(record)) => held.push(record.bytes),
            Ok(None) => panic!("a ring full of records ran dry"),
            Err(error) => break error,
        }
    };
    assert_eq!((held.len(), error), (63, AHEAD));
    drop(held);
    let mut consumer = hostile_consumer(4096, &contents);
    assert_eq!(take_all(&mut consumer, 3 * 64), (3 * 64, None));
}

#[test]
fn an_empty_fragment_is_an_error_even_in_a_stream_of_them() {
    // A ring full of empty fragments, which add nothing to their message: without the
    // check a consumer would take them lap after lap. One per line, where records start.
    let contents = record_bytes(b"", FLAG_MORE | W).repeat(64);
    let mut consumer = hostile_consumer(4096, &contents);
    assert_eq!(
        consumer.try_recv(),
        Err(RingError("a fragment record is empty"))
    );
}

#[test]
fn a_head_out_of_range_is_an_error_for_the_producer() {
    let (mut producer, consumer, _, _) = ring(1024, 64);
    send(&mut producer, b"12345678", false);
    for (head, why) in [
        (128, "past the tail (64)"),
        (3, "misaligned"),
        (8, "misaligned: 8 bytes, not a whole line"),
    ] {
        consumer.shared().head().store(head, Ordering::Relaxed);
        assert!(producer.prepare_wait(8).is_err(), "{why}");
    }
}

#[test]
fn a_head_past_what_was_published_is_an_error_for_the_producer() {
    // The consumer cannot have released records it never saw: believing it would let
    // the producer overwrite records committed but not published yet.
    let (mut producer, consumer, _, _) = ring(1024, 64);
    send(&mut producer, b"12345678", false);
    let mut reservation = producer.try_reserve(8).unwrap().unwrap();
    reservation.write(0, b"unpublis");
    reservation.commit_unpublished(false);
    // Published up to 64, committed up to 128: a head of 128 (aligned, within the ring)
    // names the unpublished record.
    consumer.shared().head().store(128, Ordering::Relaxed);
    assert!(producer.prepare_wait(8).is_err());
}

#[test]
fn a_head_stored_early_does_not_let_the_producer_zero_a_pending_batch() {
    // The consumer stores `head` lazily (a quarter of the ring at a time), but may store
    // it at once, and a hostile one at any value it could have reached: here all it read.
    // The producer then zeroes header words ahead up to a ring past that head, while a
    // batch committed before the store is still unpublished: none of the batch's headers
    // may be among them, or its records would never arrive.
    let (mut producer, mut consumer, _, _) = ring(1024, 1024);
    send(&mut producer, b"first", false);
    assert_eq!(&consumer.try_recv().unwrap().unwrap().bytes[..], b"first");
    let mut pending: Vec<Vec<u8>> = Vec::new();
    // Commits one more record to the batch if it fits.
    fn commit(producer: &mut Producer, pending: &mut Vec<Vec<u8>>) -> bool {
        let bytes = format!("pending {}", pending.len()).into_bytes();
        match producer.try_reserve(bytes.len()).unwrap() {
            Some(mut reservation) => {
                reservation.write(0, &bytes);
                reservation.commit_unpublished(false);
                pending.push(bytes);
                true
            }
            None => false,
        }
    }
    assert!(commit(&mut producer, &mut pending) && commit(&mut producer, &mut pending));
    consumer.shared().head().store(64, Ordering::Relaxed);
    // As many more as fit: every header placed zeroes ahead as far as the head allows.
    while commit(&mut producer, &mut pending) {}
    assert!(pending.len() > 10, "only {} records fit", pending.len());
    producer.publish_pending();
    for expected in &pending {
        let record = consumer.try_recv().unwrap().expect("a record of the batch");
        assert_eq!(&record.bytes[..], &expected[..]);
    }
    assert_eq!(consumer.try_recv().unwrap(), None);
}
