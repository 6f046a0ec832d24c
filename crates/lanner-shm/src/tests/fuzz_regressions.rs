//! Inputs for the `ring_read` and `loan_returns` fuzz targets (`fuzz/` at the workspace
//! root), kept as regression tests.
//!
//! [`crate::fuzzing`] holds the fuzz targets' code, so an input pasted here replays
//! exactly what the fuzzer ran. Every file in `fuzz/seeds/ring_read/` and
//! `fuzz/seeds/loan_returns/` (the seeds the fuzzer starts from, and any crash it finds)
//! is replayed too. `ring_read`'s input layout: byte 0 selects the capacity
//! (`128 << (b % 8)`) and the in-place threshold, bytes 1–8 hold the producer's tail
//! (`tail / 64` for a tail of whole lines within a ring, or just past it: records take
//! whole cache lines, see [`RECORD_ALIGN`]), the rest is the ring's data area; see
//! [`ring_read`]. `loan_returns` takes two bytes per operation; see [`loan_returns`].
//!
//! To date the fuzzer found no crash.

use std::path::Path;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::fuzzing::{loan_returns, ring_read};
use crate::ring::{RECORD_ALIGN, RingError, hostile_consumer};

const FLAG_PADDING: u32 = 1;
const FLAG_MORE: u32 = 2;

/// A record as a producer lays it out: header, payload, zeros to the end of its last line
/// (the next record starts on a line of its own).
fn record(payload: &[u8], flags: u32) -> Vec<u8> {
    let mut bytes = u32::try_from(payload.len()).unwrap().to_le_bytes().to_vec();
    bytes.extend_from_slice(&flags.to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes.resize(bytes.len().next_multiple_of(RECORD_ALIGN), 0);
    bytes
}

/// The raw tail of a driver input that `ring_read` reduces to `tail`, a whole number of
/// lines within the ring or one line past it.
fn raw_tail(tail: u64) -> u64 {
    assert_eq!(tail % RECORD_ALIGN as u64, 0, "a tail of whole lines");
    tail / RECORD_ALIGN as u64
}

/// A driver input: capacity selector byte, raw tail, ring contents.
fn input(selector: u8, raw_tail: u64, contents: &[u8]) -> Vec<u8> {
    let mut bytes = vec![selector];
    bytes.extend_from_slice(&raw_tail.to_le_bytes());
    bytes.extend_from_slice(contents);
    bytes
}

/// Receives every record of a hostile ring until it runs dry or breaks.
fn receive_all(
    capacity: usize,
    contents: &[u8],
    tail: u64,
) -> (Vec<(Bytes, bool)>, Option<RingError>) {
    let mut consumer = hostile_consumer(capacity, contents, tail);
    let mut records = Vec::new();
    loop {
        match consumer.try_recv() {
            Ok(Some(record)) => records.push((record.bytes, record.more)),
            Ok(None) => return (records, None),
            Err(error) => return (records, Some(error)),
        }
    }
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
fn every_loan_returns_seed_and_crash_file_replays() {
    let count = replay_seeds("loan_returns", loan_returns);
    assert!(count >= 3, "only {count} loan_returns seeds");
}

#[test]
fn short_and_empty_inputs_replay() {
    // Missing tail and contents bytes read as zero: an empty ring of each capacity.
    for len in 0..=9 {
        for selector in [0u8, 7, 0x1f, 0xff] {
            let mut data = vec![0x08u8; len];
            if let Some(first) = data.first_mut() {
                *first = selector;
            }
            ring_read(&data);
        }
    }
}

#[test]
fn garbage_of_every_capacity_and_tail_kind_replays() {
    for selector in 0..=255u8 {
        for raw_tail in [
            0,
            1,
            3,                     // capacity 128: tail 192, past the ring
            0x3fff_ffff_ffff_ffff, // an aligned tail within the larger rings
            (2 << 62) | 12,        // misaligned
            (2 << 62) | 8,         // a multiple of 8, not of a line: misaligned
            (2 << 62) | 64,        // aligned, taken modulo twice the ring (not in lines)
            !63,                   // far out of range
        ] {
            for fill in [0x00u8, 0x01, 0x02, 0x03, 0x08, 0xff] {
                ring_read(&input(selector, raw_tail, &[fill; 8192]));
            }
        }
    }
}

#[test]
fn a_valid_ring_reads_back_its_records() {
    let contents = [
        record(b"", 0),
        record(b"first piece", FLAG_MORE),
        record(b"last piece", 0),
        record(&[7; 64], 0),
    ]
    .concat();
    // Five lines: the last record takes two.
    let tail = contents.len() as u64;
    assert_eq!(tail, 320);
    let (records, error) = receive_all(512, &contents, tail);
    assert_eq!(error, None);
    let expected: [(&[u8], bool); 4] = [
        (b"", false),
        (b"first piece", true),
        (b"last piece", false),
        (&[7; 64], false),
    ];
    assert_eq!(records.len(), expected.len());
    for ((bytes, more), (want, want_more)) in records.iter().zip(expected) {
        assert_eq!((&bytes[..], *more), (want, want_more));
    }
    // Selector 2: capacity 512; in-place threshold from bits 3–4 (0: every record).
    ring_read(&input(2, raw_tail(tail), &contents));
    ring_read(&input(2 | 3 << 3, raw_tail(tail), &contents));
}

#[test]
fn padding_that_fills_the_ring_and_laps_replay() {
    // Padding over the whole ring, alone: no producer writes it (a record always fits in
    // an empty ring), and taking it would only send the consumer round the ring again.
    // Selector 0: a ring of 128 bytes, two lines.
    let whole = record(&[0; 120], FLAG_PADDING);
    assert_eq!(whole.len(), 128);
    let (records, error) = receive_all(128, &whole, 128);
    assert_eq!(records, vec![]);
    assert_eq!(
        error,
        Some(RingError("a padding record fills the whole ring")),
        "padding at offset 0 is refused"
    );
    ring_read(&input(0, raw_tail(128), &whole));

    // A record, then padding to the end: later laps start over at offset 0.
    let mut contents = record(b"wraps", 0);
    contents.extend(record(&[0; 56], FLAG_PADDING));
    assert_eq!(contents.len(), 128);
    let (records, error) = receive_all(128, &contents, 128);
    assert_eq!(error, None);
    assert_eq!(records, vec![(Bytes::from_static(b"wraps"), false)]);
    for selector in [0u8, 0x08, 0x10, 0x18] {
        ring_read(&input(selector, raw_tail(128), &contents));
    }

    // The smallest padding (a header alone, its length short of the line it fills) in
    // the last line, flagged MORE as well.
    let mut contents = record(&[1; 56], 0);
    contents.extend(record(b"", FLAG_PADDING | FLAG_MORE));
    assert_eq!(contents.len(), 128);
    let (records, error) = receive_all(128, &contents, 128);
    assert_eq!((records.len(), error), (1, None));
    ring_read(&input(0, raw_tail(128), &contents));
}

#[test]
fn laps_that_start_mid_record_replay() {
    // A ring of 256 bytes holding one record of two lines, then zeros (empty records of a
    // line each). A tail of three lines per lap: the second lap starts at offset 192, the
    // third at 128, and the third's tail (576, offset 64) falls inside the record, which
    // the consumer then refuses as running past the published data. The payload is all
    // 0x10 bytes: were a header read inside it, it would have len 0x10101010 and unknown
    // flags.
    let contents = record(&[0x10; 120], 0);
    assert_eq!(contents.len(), 128);
    let mut consumer = hostile_consumer(256, &contents, 192);
    let mut lap = |published: u64| {
        consumer.shared().tail().store(published, Ordering::Release);
        let mut lens = Vec::new();
        loop {
            match consumer.try_recv() {
                Ok(Some(record)) => lens.push(record.bytes.len()),
                Ok(None) => return (lens, None),
                Err(error) => return (lens, Some(error)),
            }
        }
    };
    assert_eq!(lap(192), (vec![120, 0], None));
    assert_eq!(lap(384), (vec![0, 120], None));
    assert_eq!(
        lap(576),
        (
            vec![0, 0],
            Some(RingError("a record runs past the published data"))
        )
    );
    // Selector 1: that ring. Its in-place threshold (bits 3–4) 1: the driver holds the
    // record, and the next lap is refused while it does; 512: the record is copied and
    // released at once, and the laps run as above. Every tail from none to a line past
    // the ring too.
    for selector in [1, 1 | 3 << 3] {
        for raw_tail in 0..6 {
            ring_read(&input(selector, raw_tail, &contents));
        }
    }
    // The same with payload bytes that form valid headers of empty records.
    let contents = record(&[0; 120], 0);
    for selector in [1, 1 | 3 << 3] {
        for raw_tail in 0..6 {
            ring_read(&input(selector, raw_tail, &contents));
        }
    }
}

#[test]
fn held_records_overwritten_on_the_next_lap_replay() {
    // One record over the whole ring, republished every lap: while the previous record is
    // held in place, the consumer refuses the new lap (it is more than a ring ahead of
    // what was released); once it is released, the lap is accepted and the driver may
    // hold several views of the same bytes. Must not panic, and every release must still
    // bring head to the tail.
    // Selector 0: a ring of 128 bytes (two lines).
    let contents = record(&[0xab; 120], 0);
    assert_eq!(contents.len(), 128);
    for selector in [0u8, 0x08, 0x10, 0x18] {
        ring_read(&input(selector, raw_tail(128), &contents));
    }
    // Two records of a line each, with every tail from none to a line past the ring.
    let contents = [record(&[1; 56], 0), record(&[2; 56], 0)].concat();
    assert_eq!(contents.len(), 128);
    for raw_tail in 0..4 {
        for selector in [0u8, 0x08, 0x10] {
            ring_read(&input(selector, raw_tail, &contents));
        }
    }
}

#[test]
fn hostile_headers_are_errors() {
    const FLAGS: RingError = RingError("a record has unknown flags");
    const PAST: RingError = RingError("a record runs past the published data");
    // A ring of 128 bytes (selector 0), tails of whole lines: each case is refused for
    // the reason it names.
    let cases: [(Vec<u8>, u64, RingError, &str); 6] = [
        (record(b"abcd", 8), 64, FLAGS, "unknown flag"),
        (record(b"abcd", 0x8000_0000), 64, FLAGS, "unknown high flag"),
        (
            record(&[0; 100], 0),
            64,
            PAST,
            "record past the published data",
        ),
        (
            [&u32::MAX.to_le_bytes()[..], &[0; 4]].concat(),
            128,
            PAST,
            "huge length",
        ),
        (
            [&121u32.to_le_bytes()[..], &[0; 4]].concat(),
            128,
            PAST,
            "one byte past the end of the ring",
        ),
        (
            record(&[0; 120], FLAG_PADDING),
            64,
            RingError("a padding record runs past the published data"),
            "padding past the published data",
        ),
    ];
    for (contents, tail, expected, why) in cases {
        let (records, error) = receive_all(128, &contents, tail);
        assert!(records.is_empty(), "{why}");
        assert_eq!(error, Some(expected), "{why}");
        ring_read(&input(0, raw_tail(tail), &contents));
    }
}
