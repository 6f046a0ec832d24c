//! Model checks of the ring protocol: no lost wake-ups and no lost space, in every
//! interleaving loom can find. Run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p lanner-shm --release --test loom
//! ```
#![cfg(loom)]

use std::sync::Arc;

use bytes::Bytes;

use lanner_shm::ring::heap_ring;
use lanner_shm::{Consumer, Producer, Wake};
use loom::sync::Notify;
use loom::thread;

/// A doorbell: a ring is remembered until the sleeper waits (like a socket byte or an
/// eventfd count), so ringing before the sleeper waits is not lost.
struct Bell(Notify);

impl Default for Bell {
    fn default() -> Self {
        Bell(Notify::new())
    }
}

impl Wake for Bell {
    fn wake(&self) {
        self.0.notify();
    }
}

impl Bell {
    fn wait(&self) {
        self.0.wait();
    }
}

/// Explores interleavings with up to three preemptions (enough for every wake-up race
/// here), allowing the long paths that sleeping by spinning on a flag produces.
fn model(test: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.max_branches = 100_000;
    builder.check(test);
}

/// Receives `count` records, sleeping on `bell` whenever the ring is empty; returns their
/// payloads.
fn receive(consumer: &mut Consumer, bell: &Bell, count: usize) -> Vec<Bytes> {
    let mut received = Vec::new();
    while received.len() < count {
        match consumer.try_recv().unwrap() {
            Some(record) => received.push(record.bytes),
            None => {
                if consumer.prepare_sleep() {
                    bell.wait();
                }
            }
        }
    }
    received
}

/// Sends a record of each length in `lens` (the first byte of each its index), waiting on
/// `bell` for space. A record is published with its commit if `publish(index)`, else left
/// for a later commit, or for the publication before a wait.
fn send_all(producer: &mut Producer, bell: &Bell, lens: &[usize], publish: impl Fn(usize) -> bool) {
    let mut sent = 0;
    while sent < lens.len() {
        match producer.try_reserve(lens[sent]).unwrap() {
            Some(mut reservation) => {
                if lens[sent] > 0 {
                    reservation.write(0, &[sent as u8]);
                }
                if publish(sent) {
                    reservation.commit(false);
                } else {
                    reservation.commit_unpublished(false);
                }
                sent += 1;
            }
            None => {
                producer.publish_pending();
                if producer.prepare_wait(lens[sent]).unwrap() {
                    bell.wait();
                }
            }
        }
    }
}

/// A heap ring of `capacity` bytes whose records are all copied out, with a doorbell for
/// each side: (producer, consumer, the consumer's bell, the producer's bell).
fn ring(capacity: usize) -> (Producer, Consumer, Arc<Bell>, Arc<Bell>) {
    let consumer_bell = Arc::new(Bell::default());
    let producer_bell = Arc::new(Bell::default());
    let (producer, consumer) = heap_ring(
        capacity,
        consumer_bell.clone(),
        producer_bell.clone(),
        usize::MAX,
    );
    (producer, consumer, consumer_bell, producer_bell)
}

/// The first byte of each payload.
fn first_bytes(payloads: Vec<Bytes>) -> Vec<u8> {
    payloads.iter().map(|payload| payload[0]).collect()
}

#[test]
fn a_sleeping_consumer_is_always_woken() {
    model(|| {
        // Two records of a line each: both fit in the 256-byte ring at once.
        let (mut producer, mut consumer, consumer_bell, producer_bell) = ring(256);
        let sender = thread::spawn(move || {
            send_all(&mut producer, &producer_bell, &[1; 2], |_| true);
        });
        assert_eq!(
            first_bytes(receive(&mut consumer, &consumer_bell, 2)),
            [0, 1]
        );
        sender.join().unwrap();
    });
}

#[test]
fn a_producer_waiting_for_space_is_always_woken() {
    model(|| {
        // A 100-byte record (two lines) fills the 256-byte ring beside the line the
        // producer keeps free: the second and third must wait. A record consumed is two
        // lines, more than the quarter ring (64 bytes) the consumer may keep: its space is
        // given back at once.
        let (mut producer, mut consumer, consumer_bell, producer_bell) = ring(256);
        let sender = thread::spawn(move || {
            send_all(&mut producer, &producer_bell, &[100; 3], |_| true);
        });
        assert_eq!(
            first_bytes(receive(&mut consumer, &consumer_bell, 3)),
            [0, 1, 2]
        );
        sender.join().unwrap();
    });
}

#[test]
fn records_released_on_another_thread_free_their_space() {
    model(|| {
        let bell = Arc::new(Bell::default());
        // A 512-byte ring: the two records take 192 bytes, so the largest record (312
        // bytes, five lines with its header, and the line kept free after it) fits only
        // once both are given back.
        let (mut producer, mut consumer) = heap_ring(512, bell.clone(), bell.clone(), 16);
        for len in [120usize, 8] {
            // The first (two lines) is held in place, the second (a line) copied out and
            // released at once, behind the first.
            let mut reservation = producer.try_reserve(len).unwrap().unwrap();
            reservation.write(0, &[7]);
            reservation.commit(false);
        }
        let held = consumer.try_recv().unwrap().unwrap().bytes;
        let dropper = thread::spawn(move || drop(held));
        let copied = consumer.try_recv().unwrap().unwrap().bytes;
        assert_eq!(copied[0], 7);
        dropper.join().unwrap();
        // Everything is released: the largest record fits (after padding).
        let max = producer.max_record_len();
        if producer.try_reserve(max).unwrap().is_none() {
            assert!(consumer.try_recv().unwrap().is_none());
            assert!(producer.try_reserve(max).unwrap().is_some());
        }
    });
}

#[test]
fn a_producer_waiting_for_space_is_woken_by_lazily_released_records() {
    model(|| {
        // In a 512-byte ring the consumer gives space back once 128 bytes are consumed: an
        // empty record (a line, 64 bytes) is kept unreleased until the next one is
        // consumed. The first two take 384 bytes (the second is the largest record, five
        // lines), leaving the line kept free; the third (three lines) does not fit in the
        // last two: it waits for the space of the first two, then pads the rest.
        let (mut producer, mut consumer, consumer_bell, producer_bell) = ring(512);
        let lens = [0usize, 312, 150, 0];
        let sender = thread::spawn(move || {
            send_all(&mut producer, &producer_bell, &lens, |_| true);
        });
        let received = receive(&mut consumer, &consumer_bell, lens.len());
        let received: Vec<usize> = received.iter().map(Bytes::len).collect();
        assert_eq!(received, lens);
        sender.join().unwrap();
    });
}

#[test]
fn batches_across_laps_arrive_whole_and_once() {
    model(|| {
        // Five one-line records in a 256-byte ring that holds three beside the line kept
        // free: the fifth lands where the first was, a lap later, so a consumer that took
        // the first lap's header there for a record would receive a sixth (or a repeat).
        // They go in batches (two unpublished, then published with the third's commit), so
        // a consumer that took a batch's records before their publication would release
        // space the producer has not published, which the producer refuses.
        let (mut producer, mut consumer, consumer_bell, producer_bell) = ring(256);
        let sender = thread::spawn(move || {
            send_all(&mut producer, &producer_bell, &[1; 5], |index| {
                index % 3 == 2 || index == 4
            });
        });
        assert_eq!(
            first_bytes(receive(&mut consumer, &consumer_bell, 5)),
            [0, 1, 2, 3, 4]
        );
        assert!(consumer.try_recv().unwrap().is_none(), "no stale record");
        sender.join().unwrap();
    });
}
