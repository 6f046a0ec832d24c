//! Inputs for the `ring_read` and `loan_returns` fuzz targets (`fuzz/` at the workspace
//! root), kept as regression tests.
//!
//! [`crate::fuzzing`] holds the fuzz targets' code, so an input pasted here replays
//! exactly what the fuzzer ran. Every file in `fuzz/seeds/ring_read/` and
//! `fuzz/seeds/loan_returns/` (the seeds the fuzzer starts from, and any crash it finds)
//! is replayed too. `ring_read`'s input layout: byte 0 selects the capacity
//! (`64 << (b % 8)`) and the in-place threshold, bytes 1–8 hold the producer's tail
//! (`tail / 8` for an aligned tail within a ring), the rest is the ring's data area; see
//! [`ring_read`]. `loan_returns` takes two bytes per operation; see [`loan_returns`].
//!
//! To date the fuzzer found no crash.

use std::path::Path;

use bytes::Bytes;

use crate::fuzzing::{loan_returns, ring_read};
use crate::ring::{RingError, hostile_consumer};

const FLAG_PADDING: u32 = 1;
const FLAG_MORE: u32 = 2;

fn record(payload: &[u8], flags: u32) -> Vec<u8> {
    let mut bytes = u32::try_from(payload.len()).unwrap().to_le_bytes().to_vec();
    bytes.extend_from_slice(&flags.to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes.resize(bytes.len().next_multiple_of(8), 0);
    bytes
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
            9,                     // capacity 64: tail 72, past the ring
            0x3fff_ffff_ffff_ffff, // an aligned tail within the larger rings
            (2 << 62) | 12,        // misaligned
            (2 << 62) | 64,        // aligned, not reduced by 8
            !7,                    // far out of range
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
    let tail = contents.len() as u64;
    let (records, error) = receive_all(256, &contents, tail);
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
    // Selector 2: capacity 256; in-place threshold from bits 3–4 (0: every record).
    ring_read(&input(2, tail / 8, &contents));
    ring_read(&input(2 | 3 << 3, tail / 8, &contents));
}

#[test]
fn padding_that_fills_the_ring_and_laps_replay() {
    // Padding over the whole ring, alone: no producer writes it (a record always fits in
    // an empty ring), and taking it would only send the consumer round the ring again.
    let whole = record(&[0; 56], FLAG_PADDING);
    let (records, error) = receive_all(64, &whole, 64);
    assert_eq!(records, vec![]);
    assert!(error.is_some(), "padding at offset 0 is refused");
    ring_read(&input(0, 8, &whole));

    // A record, then padding to the end: later laps start over at offset 0.
    let mut contents = record(b"wraps", 0);
    contents.extend(record(&[0; 40], FLAG_PADDING));
    assert_eq!(contents.len(), 64);
    let (records, error) = receive_all(64, &contents, 64);
    assert_eq!(error, None);
    assert_eq!(records, vec![(Bytes::from_static(b"wraps"), false)]);
    for selector in [0u8, 0x08, 0x10, 0x18] {
        ring_read(&input(selector, 8, &contents));
    }

    // The smallest padding (a header alone) in the last slot, flagged MORE as well.
    let mut contents = record(&[1; 48], 0);
    contents.extend(record(b"", FLAG_PADDING | FLAG_MORE));
    let (records, error) = receive_all(64, &contents, 64);
    assert_eq!((records.len(), error), (1, None));
    ring_read(&input(0, 8, &contents));
}

#[test]
fn laps_that_start_mid_record_replay() {
    // Tail 24 per lap over a ring of 64 holding one 56-byte record: the second lap starts
    // reading at offset 24, inside the first record's payload (all 0x10 bytes: a header
    // with len 0x10101010 and unknown flags).
    let contents = record(&[0x10; 48], 0);
    ring_read(&input(0, 3, &contents));
    // The same with payload bytes that form valid headers of empty records.
    let contents = record(&[0; 48], 0);
    ring_read(&input(0, 3, &contents));
    ring_read(&input(0, 7, &contents));
}

#[test]
fn held_records_overwritten_on_the_next_lap_replay() {
    // One record over the whole ring, republished every lap: while the previous record is
    // held in place, the consumer refuses the new lap (it is more than a ring ahead of
    // what was released); once it is released, the lap is accepted and the driver may
    // hold several views of the same bytes. Must not panic, and every release must still
    // bring head to the tail.
    let contents = record(&[0xab; 56], 0);
    for selector in [0u8, 0x08, 0x10, 0x18] {
        ring_read(&input(selector, 8, &contents));
    }
    let contents = [record(&[1; 24], 0), record(&[2; 24], 0)].concat();
    for raw_tail in 0..10 {
        ring_read(&input(0, raw_tail, &contents));
    }
}

#[test]
fn hostile_headers_are_errors() {
    let cases: [(Vec<u8>, u64, &str); 6] = [
        (record(b"abcd", 8), 16, "unknown flag"),
        (record(b"abcd", 0x8000_0000), 16, "unknown high flag"),
        (record(&[0; 40], 0), 16, "record past the published data"),
        (
            [&u32::MAX.to_le_bytes()[..], &[0; 4]].concat(),
            64,
            "huge length",
        ),
        (
            [&57u32.to_le_bytes()[..], &[0; 4]].concat(),
            64,
            "one byte past the end of the ring",
        ),
        (
            record(&[0; 56], FLAG_PADDING),
            16,
            "padding past the published data",
        ),
    ];
    for (contents, tail, why) in cases {
        let (records, error) = receive_all(64, &contents, tail);
        assert!(records.is_empty(), "{why}");
        assert!(error.is_some(), "{why}");
        ring_read(&input(0, tail / 8, &contents));
    }
}
