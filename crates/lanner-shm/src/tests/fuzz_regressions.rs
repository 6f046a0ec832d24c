//! Inputs for the `ring_read` and `loan_returns` fuzz targets (`fuzz/` at the workspace
//! root), kept as regression tests.
//!
//! [`crate::fuzzing`] holds the fuzz targets' code, so an input pasted here replays
//! exactly what the fuzzer ran. Every file in `fuzz/seeds/ring_read/` and
//! `fuzz/seeds/loan_returns/` (the seeds the fuzzer starts from, and any crash it finds)
//! is replayed too. `loan_returns` takes two bytes per operation; see [`loan_returns`].
//!
//! `ring_read`'s input layout: byte 0 selects the capacity (`256 << (b % 8)`) and the
//! in-place threshold, the rest is the ring's data area, headers and all; see
//! [`ring_read`]. It changed when the ring lost its shared `tail` (the header word at a
//! record's start became its arrival flag): inputs used to be the selector, the
//! producer's tail (8 bytes) and the data area, with capacities from 128 bytes
//! (`128 << (b % 8)`), and headers had no `WRITTEN` flag. Each test below was converted:
//! the tail's 8 bytes are gone, every well-formed header sets `WRITTEN`, and a ring of
//! 128 bytes became one of 256; the records and headers each test is about are the same,
//! and where it was about the tail (past the ring, misaligned, going backwards) it is now
//! about records that lie more than a ring ahead. Old-layout seeds were replaced by seeds
//! of the same cases (see `fuzz/gen_seeds.py`).
//!
//! To date the fuzzer found no crash.

use std::path::Path;

use bytes::Bytes;

use super::{FLAG_MORE, FLAG_PADDING, FLAG_WRITTEN, record_bytes, word};
use crate::fuzzing::{loan_returns, ring_read};
use crate::ring::{Consumer, RingError, hostile_consumer};

const W: u32 = FLAG_WRITTEN;
const AHEAD: RingError = RingError("a record lies more than a ring ahead of the consumer");
const PAST_END: RingError = RingError("a record runs past the ring's end");

/// A driver input: capacity selector byte, then the ring's data area.
fn input(selector: u8, contents: &[u8]) -> Vec<u8> {
    [&[selector][..], contents].concat()
}

/// How receiving stopped.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// `Ok(None)`.
    Dry,
    Error(RingError),
    /// Records kept coming.
    Limit,
}

/// Receives up to 100 records of a hostile ring until it runs dry or breaks, holding
/// them (`hold`) or dropping each at once; their bytes, and how it stopped.
fn receive(capacity: usize, contents: &[u8], hold: bool) -> (Vec<Bytes>, End) {
    receive_from(&mut hostile_consumer(capacity, contents), hold)
}

/// [`receive`] from `consumer`.
fn receive_from(consumer: &mut Consumer, hold: bool) -> (Vec<Bytes>, End) {
    let mut records = Vec::new();
    let mut held = Vec::new();
    for _ in 0..100 {
        match consumer.try_recv() {
            Ok(Some(record)) => {
                records.push(Bytes::copy_from_slice(&record.bytes));
                if hold {
                    held.push(record.bytes);
                }
            }
            Ok(None) => return (records, End::Dry),
            Err(error) => return (records, End::Error(error)),
        }
    }
    (records, End::Limit)
}

/// Runs `driver` on every file in `fuzz/seeds/<target>/`; how many there were.
fn replay_seeds(target: &str, driver: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| driver(&data));
        assert!(outcome.is_ok(), "{} panicked", path.display());
        count += 1;
    }
    count
}

#[test]
fn every_seed_and_crash_file_replays() {
    let count = replay_seeds("ring_read", ring_read);
    assert!(count >= 10, "only {count} ring_read seeds");
}

#[test]
fn each_ring_read_seed_reaches_its_case() {
    // What the first pass (a hostile consumer over the seed's data area, each record
    // dropped at once) makes of each seed: records taken, and how it stopped.
    let err = |message| End::Error(RingError(message));
    let cases = [
        ("empty", 0, End::Dry),
        ("one_record", 1, End::Dry),
        ("many_records", 90, End::Dry),
        ("fragments", 4, End::Dry),
        ("full_record", 1, End::Dry),
        ("huge_len", 0, End::Error(PAST_END)),
        ("padding_to_end", 100, End::Limit),
        (
            "padding_at_zero",
            0,
            err("a padding record fills the whole ring"),
        ),
        ("unknown_flag", 0, err("a record has unknown flags")),
        (
            "no_written_flag",
            0,
            err("a record header lacks its written flag"),
        ),
        ("record_past_end", 1, End::Error(PAST_END)),
        ("lap_ahead", 0, End::Error(AHEAD)),
        ("mixed_sizes", 5, End::Dry),
        ("laps_offset", 2, End::Dry),
        ("prefixed", 2, err("a record's prefix does not fit in it")),
        ("empty_fragments", 0, err("a fragment record is empty")),
        ("every_line", 100, End::Limit),
    ];
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/ring_read");
    for (name, count, end) in cases {
        let data = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let capacity = 256 << (data[0] % 8);
        let (records, got) = receive(capacity, &data[1..], false);
        assert_eq!((records.len(), got), (count, end), "{name}");
    }
}

#[test]
fn every_loan_returns_seed_and_crash_file_replays() {
    let count = replay_seeds("loan_returns", loan_returns);
    assert!(count >= 3, "only {count} loan_returns seeds");
}

#[test]
fn short_and_empty_inputs_replay() {
    // Missing bytes read as zero: an empty ring of each capacity, or a header cut short
    // (`00 00 00 00 08`: an empty record, its flags' upper bytes missing).
    for len in 0..=17 {
        for selector in [0u8, 7, 0x1f, 0xff] {
            for fill in [0x08u8, 0x00] {
                let mut data = vec![fill; len];
                if let Some(first) = data.first_mut() {
                    *first = selector;
                }
                ring_read(&data);
            }
        }
    }
    ring_read(&[0, 0, 0, 0, 0, 8]);
}

#[test]
fn garbage_of_every_capacity_replays() {
    for selector in 0..=255u8 {
        for fill in [0x00u8, 0x01, 0x02, 0x03, 0x08, 0xff] {
            ring_read(&input(selector, &[fill; 32768]));
        }
    }
}

#[test]
fn endless_streams_end_at_the_drain_limit() {
    // No tail bounds a drain: a header on every line is a stream without end (copied or
    // released records), or one that a held record stops a ring later. Every capacity and
    // in-place threshold; records of a line, of two, and padding that leads back to 0.
    let line_records = record_bytes(&[7; 56], W).repeat(512);
    let two_lines = record_bytes(&[9; 100], W).repeat(256);
    let padded = [
        record_bytes(b"wraps", W),
        record_bytes(&[0; 56], FLAG_PADDING | W),
    ]
    .concat();
    for selector in 0..32u8 {
        for contents in [&line_records, &two_lines, &padded] {
            ring_read(&input(selector, contents));
        }
    }
}

#[test]
fn a_valid_ring_reads_back_its_records() {
    let contents = [
        record_bytes(b"", W),
        record_bytes(b"first piece", FLAG_MORE | W),
        record_bytes(b"last piece", W),
        record_bytes(&[7; 64], W),
    ]
    .concat();
    // Five lines: the last record takes two. The sixth is zero: nothing more.
    assert_eq!(contents.len(), 320);
    let (records, end) = receive(512, &contents, true);
    assert_eq!(end, End::Dry);
    let expected: [&[u8]; 4] = [b"", b"first piece", b"last piece", &[7; 64]];
    assert_eq!(records, expected.map(Bytes::copy_from_slice));
    // Selector 1: capacity 512; in-place threshold from bits 3–4 (0: every record).
    ring_read(&input(1, &contents));
    ring_read(&input(1 | 3 << 3, &contents));
}

#[test]
fn padding_that_fills_the_ring_and_laps_replay() {
    // Padding over the whole ring, alone: no producer writes it (a record always fits in
    // an empty ring), and taking it would only send the consumer round the ring again.
    // Selector 0: a ring of 256 bytes, four lines.
    let whole = record_bytes(&[0; 248], FLAG_PADDING | W);
    assert_eq!(whole.len(), 256);
    let (records, end) = receive(256, &whole, false);
    assert_eq!(records, Vec::<Bytes>::new());
    let whole_ring = RingError("a padding record fills the whole ring");
    assert_eq!(
        end,
        End::Error(whole_ring),
        "padding at offset 0 is refused"
    );
    ring_read(&input(0, &whole));

    // A record, then padding to the end: the consumer goes back to offset 0, where the
    // same record's header is the next lap's. Held, it stops that lap (the padding ends
    // a ring past it); released, the laps go on.
    let contents = [
        record_bytes(b"wraps", W),
        record_bytes(&[0; 184], FLAG_PADDING | W),
    ]
    .concat();
    assert_eq!(contents.len(), 256);
    let (records, end) = receive(256, &contents, true);
    assert_eq!(
        (records, end),
        (vec![Bytes::from("wraps")], End::Error(AHEAD))
    );
    let (records, end) = receive(256, &contents, false);
    assert_eq!((records.len(), end), (100, End::Limit));
    assert!(records.iter().all(|record| record == "wraps"));
    for selector in [0u8, 0x08, 0x10, 0x18] {
        ring_read(&input(selector, &contents));
    }

    // The smallest padding (a header alone, its length short of the line it fills) in
    // the last line, flagged MORE as well: still padding.
    let mut contents = record_bytes(&[1; 56], W).repeat(3);
    contents.extend(word(0, FLAG_PADDING | FLAG_MORE | W).to_le_bytes());
    let (records, end) = receive(256, &contents, true);
    assert_eq!((records.len(), end), (3, End::Error(AHEAD)));
    let (records, end) = receive(256, &contents, false);
    assert_eq!((records.len(), end), (100, End::Limit));
    ring_read(&input(0, &contents));
}

#[test]
fn laps_that_start_mid_record_replay() {
    // A record of a line, then one of two whose second line holds a well-formed header
    // (a decoy: never read, the consumer skips whole records). The driver rewrites these
    // 192 bytes of a ring of 256 lap after lap where the consumer stopped: at 0, at 192
    // (the two-line record wraps to 0), at 128, inside where the first lap's two-line
    // record was, where the two-line record then runs past the end.
    let mut second = vec![0x10; 120];
    second[56..64].copy_from_slice(&word(0, W).to_le_bytes());
    let contents = [record_bytes(b"a", W), record_bytes(&second, W)].concat();
    assert_eq!(contents.len(), 192);
    let memory = std::sync::Arc::new(crate::memory::RingMemory::heap(256));
    let mut consumer = Consumer::new(memory.clone(), std::sync::Arc::new(Nobody), 1_000);
    let mut lap = |at: usize| {
        memory.write(0, &[0; 256]);
        let first = contents.len().min(256 - at);
        memory.write(at, &contents[..first]);
        memory.write(0, &contents[first..]);
        let (records, end) = receive_from(&mut consumer, false);
        (records.iter().map(Bytes::len).collect::<Vec<_>>(), end)
    };
    assert_eq!(lap(0), (vec![1, 120], End::Dry));
    assert_eq!(lap(192), (vec![1, 120], End::Dry));
    assert_eq!(lap(128), (vec![1], End::Error(PAST_END)));
    // Selector 0: that ring. Its in-place threshold (bits 3–4) 1: the driver holds
    // records, and a lap over them is refused while it does; 512: every record is copied
    // and released at once, and the laps run as above.
    for selector in [0, 1 << 3, 2 << 3, 3 << 3] {
        ring_read(&input(selector, &contents));
    }
}

#[test]
fn held_records_overwritten_on_the_next_lap_replay() {
    // One record of two lines, rewritten every lap where the consumer stopped: at 0, 128,
    // 0, 128. While the previous lap's record is held in place, the next is refused (it
    // ends, with its free line, more than a ring past the space released); once it is
    // released, the lap is accepted and the driver may hold views of bytes the peer
    // rewrote. Must not panic, and every release must still bring `head` near the
    // consumer.
    let contents = record_bytes(&[0xab; 120], W);
    for selector in [0u8, 0x08, 0x10, 0x18] {
        ring_read(&input(selector, &contents));
    }
    // Two records of a line each.
    let contents = [record_bytes(&[1; 56], W), record_bytes(&[2; 56], W)].concat();
    for selector in [0u8, 0x08, 0x10] {
        ring_read(&input(selector, &contents));
    }
}

#[test]
fn hostile_headers_are_errors() {
    const FLAGS: RingError = RingError("a record has unknown flags");
    const UNWRITTEN: RingError = RingError("a record header lacks its written flag");
    // A ring of 256 bytes (selector 0): each case is refused for the reason it names.
    let header = |len: u32, flags: u32| word(len, flags).to_le_bytes().to_vec();
    let cases: [(Vec<u8>, RingError, &str); 7] = [
        (record_bytes(b"abcd", 0x10 | W), FLAGS, "unknown flag"),
        (
            record_bytes(b"abcd", 0x8000 | W),
            FLAGS,
            "unknown high flag",
        ),
        (record_bytes(b"abcd", 0), UNWRITTEN, "no written flag"),
        (header(u32::MAX, W), PAST_END, "huge length"),
        (
            header(249, W),
            PAST_END,
            "one byte past the end of the ring",
        ),
        (header(248, W), AHEAD, "a record of the whole ring"),
        (
            header(56, FLAG_PADDING | W),
            RingError("a padding record fills the whole ring"),
            "padding at offset 0",
        ),
    ];
    for (contents, expected, why) in cases {
        let (records, end) = receive(256, &contents, false);
        assert!(records.is_empty(), "{why}");
        assert_eq!(end, End::Error(expected), "{why}");
        ring_read(&input(0, &contents));
    }
}

/// Doorbells for a consumer made here: nobody sleeps.
struct Nobody;

impl crate::ring::Wake for Nobody {
    fn wake(&self) {}
}
