//! The writer's batching: order, a lone frame written at once, corks and deferrals held
//! back and written in one batch, credits counted until written.

use std::io;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use lanner_proto::OutFrame;

use super::{Flushed, When, Writer};
use crate::transport::FrameSink;

/// What the fake transport saw: each write operation as the bytes it carried, and how
/// many frames it held.
#[derive(Default)]
struct Wire {
    writes: Vec<(usize, Vec<u8>)>,
    /// Bytes the transport takes before it is full (None: no limit).
    room: Option<usize>,
    /// Frames written with `try_defer_parts` and not shown yet: the next write or
    /// `publish_deferred` shows them, first, as one write.
    unshown: Vec<Vec<u8>>,
}

impl Wire {
    fn show_deferred(&mut self) {
        if !self.unshown.is_empty() {
            let frames = std::mem::take(&mut self.unshown);
            self.writes.push((frames.len(), frames.concat()));
        }
    }
}

struct FakeSink(Arc<Mutex<Wire>>);

impl FakeSink {
    /// Takes what fits of `frames` as one write operation.
    fn take(&mut self, frames: &mut [OutFrame]) -> Poll<io::Result<()>> {
        let mut wire = self.0.lock().unwrap();
        wire.show_deferred();
        let mut bytes = Vec::new();
        let mut count = 0;
        for frame in frames.iter_mut() {
            let fits = wire.room.map_or(usize::MAX, |room| room - bytes.len());
            let take = frame.remaining().min(fits);
            let mut slices = [io::IoSlice::new(&[]); 8];
            let (n, _) = frame.io_slices(&mut slices);
            let all: Vec<u8> = slices[..n].iter().flat_map(|s| s.iter().copied()).collect();
            bytes.extend_from_slice(&all[..take]);
            frame.advance(take);
            count += 1;
            if frame.remaining() > 0 {
                break;
            }
        }
        if let Some(room) = &mut wire.room {
            *room -= bytes.len();
        }
        if !bytes.is_empty() {
            wire.writes.push((count, bytes));
        }
        if frames.iter().any(|frame| frame.remaining() > 0) {
            Poll::Pending
        } else {
            Poll::Ready(Ok(()))
        }
    }
}

impl FrameSink for FakeSink {
    fn poll_send(&mut self, _cx: &mut Context<'_>, frame: &mut OutFrame) -> Poll<io::Result<()>> {
        self.take(std::slice::from_mut(frame))
    }

    fn poll_send_batch(
        &mut self,
        _cx: &mut Context<'_>,
        frames: &mut [OutFrame],
    ) -> Poll<io::Result<()>> {
        self.take(frames)
    }

    fn try_defer_parts(&mut self, head: &[u8], bulk: &[u8]) -> io::Result<bool> {
        self.0.lock().unwrap().unshown.push([head, bulk].concat());
        Ok(true)
    }

    fn publish_deferred(&mut self) {
        self.0.lock().unwrap().show_deferred();
    }
}

fn writer(room: Option<usize>) -> (Writer, Arc<Mutex<Wire>>) {
    writer_holding(room, 8)
}

/// A writer that holds back up to `credit_batch` returned credits.
fn writer_holding(room: Option<usize>, credit_batch: u32) -> (Writer, Arc<Mutex<Wire>>) {
    let wire = Arc::new(Mutex::new(Wire {
        writes: Vec::new(),
        room,
        unshown: Vec::new(),
    }));
    (
        Writer::new(Box::new(FakeSink(wire.clone())), credit_batch),
        wire,
    )
}

fn frame(text: &'static str) -> OutFrame {
    OutFrame::contiguous(Bytes::from_static(text.as_bytes()))
}

fn cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

fn writes(wire: &Arc<Mutex<Wire>>) -> Vec<(usize, String)> {
    let wire = wire.lock().unwrap();
    wire.writes
        .iter()
        .map(|(count, bytes)| (*count, String::from_utf8(bytes.clone()).unwrap()))
        .collect()
}

#[test]
fn a_lone_frame_is_written_at_once() {
    let (mut writer, wire) = writer(None);
    let sent = writer.send(frame("alone"), false, When::Now, &mut cx());
    assert_eq!(sent.unwrap(), Flushed::Done);
    assert_eq!(writes(&wire), [(1, "alone".to_owned())]);
}

#[test]
fn frames_sent_while_corked_go_out_together_in_order() {
    let (mut writer, wire) = writer(None);
    writer.cork();
    for text in ["a", "b", "c"] {
        let sent = writer.send(frame(text), true, When::Now, &mut cx());
        assert_eq!(sent.unwrap(), Flushed::Queued);
    }
    assert!(writes(&wire).is_empty(), "nothing is written while corked");
    assert_eq!(writer.queued_credits(), 3);
    assert_eq!(writer.uncork(&mut cx()).unwrap(), Flushed::Done);
    assert_eq!(writes(&wire), [(3, "abc".to_owned())]);
    assert_eq!(writer.queued_credits(), 0);
    assert_eq!(writer.frames_sent(), 3);
}

#[test]
fn deferred_frames_wait_for_a_flush_and_keep_their_order_with_later_ones() {
    let (mut writer, wire) = writer(None);
    let sent = writer.send(frame("1"), false, When::Deferred, &mut cx());
    assert_eq!(sent.unwrap(), Flushed::Queued);
    let sent = writer.send(frame("2"), false, When::Deferred, &mut cx());
    assert_eq!(sent.unwrap(), Flushed::Queued);
    assert!(writes(&wire).is_empty());
    // A frame that must go now takes the deferred ones with it, behind them.
    let sent = writer.send(frame("3"), false, When::Now, &mut cx());
    assert_eq!(sent.unwrap(), Flushed::Done);
    assert_eq!(writes(&wire), [(3, "123".to_owned())]);
    assert_eq!(writer.flush(&mut cx()).unwrap(), Flushed::Done);
    assert_eq!(writes(&wire).len(), 1, "nothing left to write");
}

#[test]
fn a_full_transport_hands_the_rest_to_the_flusher_and_credits_count_until_written() {
    let (mut writer, wire) = writer(Some(3));
    writer.cork();
    writer
        .send(frame("ab"), true, When::Now, &mut cx())
        .unwrap();
    writer
        .send(frame("cd"), true, When::Now, &mut cx())
        .unwrap();
    writer
        .send(frame("ef"), false, When::Now, &mut cx())
        .unwrap();
    assert_eq!(writer.uncork(&mut cx()).unwrap(), Flushed::StartFlusher);
    assert_eq!(writes(&wire), [(2, "abc".to_owned())]);
    // "ab" is out; "cd" is half out: its credit is still queued.
    assert_eq!(writer.queued_credits(), 1);
    // While the flusher runs, senders only queue, behind what waits.
    let sent = writer.send(frame("gh"), true, When::Now, &mut cx());
    assert_eq!(sent.unwrap(), Flushed::FlusherRunning);
    assert_eq!(writer.queued_credits(), 2);
    wire.lock().unwrap().room = None;
    let mut progressed = false;
    let flushed = writer.poll_flusher(&mut cx(), || progressed = true);
    assert!(matches!(flushed, Poll::Ready(Ok(()))));
    assert!(progressed);
    assert_eq!(writes(&wire)[1], (3, "defgh".to_owned()));
    assert_eq!(writer.queued_credits(), 0);
    // The flusher is done: the next lone frame is written at once again.
    let sent = writer.send(frame("i"), false, When::Now, &mut cx());
    assert_eq!(sent.unwrap(), Flushed::Done);
}

#[test]
fn an_aborted_writer_drops_its_queue_and_refuses_frames() {
    let (mut writer, wire) = writer(None);
    writer
        .send(frame("x"), true, When::Deferred, &mut cx())
        .unwrap();
    writer.abort();
    assert_eq!(writer.queued_credits(), 0);
    assert!(
        writer
            .send(frame("y"), false, When::Now, &mut cx())
            .is_err()
    );
    assert_eq!(writer.flush(&mut cx()).unwrap(), Flushed::Done);
    assert!(writes(&wire).is_empty());
}

/// The frames of one write, decoded.
fn decoded_frames(wire: &Arc<Mutex<Wire>>, write: usize) -> Vec<lanner_proto::Frame> {
    let mut bytes = bytes::BytesMut::from(&wire.lock().unwrap().writes[write].1[..]);
    let splitter = lanner_proto::FrameSplitter::new(1 << 20);
    std::iter::from_fn(|| splitter.split(&mut bytes).unwrap())
        .map(|frame| lanner_proto::Frame::decode(frame).unwrap())
        .collect()
}

#[test]
fn credits_returned_while_corked_go_out_in_one_frame_after_the_rest() {
    let (mut writer, wire) = writer(Some(0));
    writer.cork();
    for _ in 0..3 {
        assert_eq!(writer.return_credit(&mut cx()).unwrap(), Flushed::Queued);
    }
    let other = OutFrame::contiguous(lanner_proto::frame::encode_ping(7));
    writer.send(other, true, When::Now, &mut cx()).unwrap();
    assert_eq!(writer.return_credit(&mut cx()).unwrap(), Flushed::Queued);
    // Counted until written, though not in a frame yet.
    assert_eq!(writer.queued_credits(), 5);
    // Something goes out when the cork ends: the held credits go with it.
    assert_eq!(writer.uncork(&mut cx()).unwrap(), Flushed::StartFlusher);
    assert_eq!(writer.queued_credits(), 5);
    assert_eq!(writer.frames_sent(), 2);
    wire.lock().unwrap().room = None;
    let flushed = writer.poll_flusher(&mut cx(), || {});
    assert!(matches!(flushed, Poll::Ready(Ok(()))));
    assert_eq!(writer.queued_credits(), 0);
    assert_eq!(wire.lock().unwrap().writes[0].0, 2);
    let frames = decoded_frames(&wire, 0);
    assert!(
        matches!(
            frames[..],
            [lanner_proto::Frame::Ping(7), lanner_proto::Frame::Credit(4)]
        ),
        "{frames:?}"
    );
}

#[test]
fn held_credits_go_out_with_a_full_batch_or_ahead_of_the_next_frame() {
    let (mut writer, wire) = writer_holding(None, 3);
    for _ in 0..2 {
        assert_eq!(writer.return_credit(&mut cx()).unwrap(), Flushed::Queued);
    }
    assert!(writes(&wire).is_empty(), "held: fewer than a batch");
    assert_eq!(writer.queued_credits(), 2);
    assert_eq!(writer.return_credit(&mut cx()).unwrap(), Flushed::Done);
    assert!(matches!(
        decoded_frames(&wire, 0)[..],
        [lanner_proto::Frame::Credit(3)]
    ));
    assert_eq!(writer.queued_credits(), 0);

    // Fewer than a batch, then a frame to send: the credits go first, in the same write.
    assert_eq!(writer.return_credit(&mut cx()).unwrap(), Flushed::Queued);
    let ping = OutFrame::contiguous(lanner_proto::frame::encode_ping(9));
    assert_eq!(
        writer.send(ping, false, When::Now, &mut cx()).unwrap(),
        Flushed::Done
    );
    assert!(matches!(
        decoded_frames(&wire, 1)[..],
        [lanner_proto::Frame::Credit(1), lanner_proto::Frame::Ping(9)]
    ));
    assert_eq!(writer.queued_credits(), 0);

    // A batch of one: each credit at once, in a frame of its own.
    let (mut writer, wire) = writer_holding(None, 1);
    assert_eq!(writer.return_credit(&mut cx()).unwrap(), Flushed::Done);
    assert!(matches!(
        decoded_frames(&wire, 0)[..],
        [lanner_proto::Frame::Credit(1)]
    ));
}

#[test]
fn held_credits_wait_past_an_empty_uncork_and_go_when_the_receiver_runs_out_of_work() {
    let (mut writer, wire) = writer_holding(None, 4);
    assert_eq!(
        writer.return_held_credits(&mut cx()).unwrap(),
        Flushed::Done
    );
    assert!(!writer.holds_credits());
    writer.cork();
    for _ in 0..2 {
        writer.return_credit(&mut cx()).unwrap();
    }
    // Nothing else to write and fewer than a batch: still held.
    assert_eq!(writer.uncork(&mut cx()).unwrap(), Flushed::Done);
    assert!(writes(&wire).is_empty());
    assert!(writer.holds_credits());
    assert_eq!(writer.queued_credits(), 2);
    assert_eq!(
        writer.return_held_credits(&mut cx()).unwrap(),
        Flushed::Done
    );
    assert!(matches!(
        decoded_frames(&wire, 0)[..],
        [lanner_proto::Frame::Credit(2)]
    ));
    assert!(!writer.holds_credits());
    assert_eq!(writer.queued_credits(), 0);

    // A batch's worth held through a cork goes when it ends, with nothing else.
    writer.cork();
    for _ in 0..4 {
        writer.return_credit(&mut cx()).unwrap();
    }
    assert_eq!(writer.uncork(&mut cx()).unwrap(), Flushed::Done);
    assert!(matches!(
        decoded_frames(&wire, 1)[..],
        [lanner_proto::Frame::Credit(4)]
    ));
}

#[test]
fn an_aborted_writer_forgets_the_credits_it_held_back() {
    let (mut writer, wire) = writer(None);
    writer.cork();
    writer.return_credit(&mut cx()).unwrap();
    writer.abort();
    assert_eq!(writer.queued_credits(), 0);
    assert!(!writer.holds_credits());
    assert!(writer.return_credit(&mut cx()).is_err());
    assert_eq!(writer.uncork(&mut cx()).unwrap(), Flushed::Done);
    assert!(writes(&wire).is_empty());
}

#[test]
fn credits_held_while_the_queue_drains_stay_counted() {
    let (mut writer, wire) = writer(Some(0));
    assert_eq!(
        writer
            .send(frame("answer"), true, When::Now, &mut cx())
            .unwrap(),
        Flushed::StartFlusher
    );
    for _ in 0..2 {
        assert_eq!(writer.return_credit(&mut cx()).unwrap(), Flushed::Queued);
    }
    assert_eq!(writer.queued_credits(), 3);
    wire.lock().unwrap().room = None;
    let flushed = writer.poll_flusher(&mut cx(), || {});
    assert!(matches!(flushed, Poll::Ready(Ok(()))));
    assert_eq!(writes(&wire), [(1, "answer".to_owned())]);
    // The answer's credit reached the peer; the held ones did not.
    assert_eq!(writer.queued_credits(), 2);
    assert!(writer.holds_credits());
}

#[test]
fn a_writer_is_idle_only_with_nothing_corked_queued_or_waiting_for_room() {
    let (mut corked, _wire) = writer(None);
    assert!(corked.is_idle());
    // Corked: queued without a flusher (a lingering close must wait for it).
    corked.cork();
    corked
        .send(frame("held"), false, When::Now, &mut cx())
        .unwrap();
    assert!(!corked.is_idle());
    corked.uncork(&mut cx()).unwrap();
    assert!(corked.is_idle());
    // A transport with no room: the frame waits for a flusher.
    let (mut full, _wire) = writer(Some(0));
    full.send(frame("stuck"), false, When::Now, &mut cx())
        .unwrap();
    assert!(!full.is_idle());
}

#[test]
fn deferred_parts_are_shown_to_the_peer_by_the_next_flush() {
    let (mut writer, wire) = writer(None);
    for (head, bulk) in [("h1", "b1"), ("h2", "")] {
        assert!(
            writer
                .try_defer_parts(head.as_bytes(), bulk.as_bytes())
                .unwrap()
        );
    }
    assert!(writes(&wire).is_empty(), "written, not shown");
    assert!(
        !writer.is_idle(),
        "frames not shown yet keep the writer busy"
    );
    assert_eq!(writer.flush(&mut cx()).unwrap(), Flushed::Done);
    assert_eq!(writes(&wire), [(2, "h1b1h2".to_owned())]);
    assert!(writer.is_idle());
    assert_eq!(writer.frames_sent(), 2);
}

#[test]
fn deferred_parts_keep_their_place_among_frames() {
    let (mut writer, wire) = writer(None);
    // Behind a queued frame: refused, so that the caller queues it behind.
    writer.cork();
    writer.send(frame("a"), true, When::Now, &mut cx()).unwrap();
    assert!(!writer.try_defer_parts(b"late", b"").unwrap());
    writer.uncork(&mut cx()).unwrap();
    assert_eq!(writes(&wire), [(1, "a".to_owned())]);

    // Before the frames a cork holds back: shown first, at the uncork.
    writer.cork();
    assert!(writer.try_defer_parts(b"d", b"").unwrap());
    writer.send(frame("b"), true, When::Now, &mut cx()).unwrap();
    assert_eq!(writer.uncork(&mut cx()).unwrap(), Flushed::Done);
    assert_eq!(
        writes(&wire)[1..],
        [(1, "d".to_owned()), (1, "b".to_owned())]
    );

    // Before a frame sent now.
    assert!(writer.try_defer_parts(b"e", b"").unwrap());
    writer
        .send(frame("c"), false, When::Now, &mut cx())
        .unwrap();
    assert_eq!(
        writes(&wire)[3..],
        [(1, "e".to_owned()), (1, "c".to_owned())]
    );
    assert!(writer.is_idle());
}

#[test]
fn no_deferred_parts_while_credits_wait_or_a_flusher_runs_and_none_once_aborted() {
    let (mut writer, _wire) = writer_holding(Some(1), 8);
    writer.return_credit(&mut cx()).unwrap();
    assert!(
        !writer.try_defer_parts(b"x", b"").unwrap(),
        "held credits go first"
    );
    writer.return_held_credits(&mut cx()).unwrap();
    assert!(
        !writer.try_defer_parts(b"y", b"").unwrap(),
        "the transport is full: the flusher keeps the order"
    );
    writer.abort();
    assert!(writer.try_defer_parts(b"z", b"").is_err());

    // Frames written but not shown keep no aborted writer busy: nothing more is shown.
    let (mut writer, wire) = writer_holding(None, 8);
    assert!(writer.try_defer_parts(b"w", b"").unwrap());
    writer.abort();
    assert!(writer.is_idle());
    assert!(writes(&wire).is_empty());
}

#[test]
fn parts_sent_while_corked_are_shown_at_the_uncork_before_what_follows() {
    let (mut writer, wire) = writer(None);
    writer.cork();
    assert!(writer.try_send_parts(b"answer1", b"").unwrap());
    assert!(writer.try_send_parts(b"answer2", b"!").unwrap());
    writer
        .send(frame("built"), true, When::Now, &mut cx())
        .unwrap();
    assert!(
        !writer.try_send_parts(b"answer3", b"").unwrap(),
        "behind a queued frame: queued too"
    );
    assert!(writes(&wire).is_empty(), "nothing is shown while corked");
    assert!(!writer.is_idle());
    assert_eq!(writer.uncork(&mut cx()).unwrap(), Flushed::Done);
    assert_eq!(
        writes(&wire),
        [(2, "answer1answer2!".to_owned()), (1, "built".to_owned())]
    );
    assert!(writer.is_idle());
}

#[test]
fn a_ping_answered_while_the_flusher_waits_is_answered_after_what_it_writes() {
    let (mut writer, wire) = writer(Some(2));
    let sent = writer.send(frame("abcd"), false, When::Now, &mut cx());
    assert_eq!(sent.unwrap(), Flushed::StartFlusher);
    // Owed, one at most: the latest, unless the GOAWAY's probe is owed already.
    for (pong, probe) in [("P1", false), ("P2", true), ("P3", false)] {
        let answered = writer.answer_ping(Bytes::from_static(pong.as_bytes()), probe, &mut cx());
        assert_eq!(answered.unwrap(), Flushed::FlusherRunning);
    }
    assert_eq!(writes(&wire), [(1, "ab".to_owned())]);
    // A flusher step that cannot finish keeps the PONG owed.
    let flushed = writer.poll_flusher(&mut cx(), || {});
    assert!(flushed.is_pending());
    wire.lock().unwrap().room = None;
    let flushed = writer.poll_flusher(&mut cx(), || {});
    assert!(matches!(flushed, Poll::Ready(Ok(()))));
    assert_eq!(
        writes(&wire),
        [
            (1, "ab".to_owned()),
            (1, "cd".to_owned()),
            (1, "P2".to_owned())
        ]
    );
    // No flusher: a PING is answered at once.
    let answered = writer.answer_ping(Bytes::from_static(b"P4"), false, &mut cx());
    assert_eq!(answered.unwrap(), Flushed::Done);
    assert_eq!(writes(&wire)[3], (1, "P4".to_owned()));
}

#[test]
fn credits_held_during_a_cork_follow_the_answers_it_held_back_unshown() {
    let (mut writer, wire) = writer_holding(None, 8);
    writer.cork();
    assert!(writer.try_send_parts(b"answer", b"").unwrap());
    // A one-way call of the peer finished during the burst: its credit is held.
    assert_eq!(writer.return_credit(&mut cx()).unwrap(), Flushed::Queued);
    assert_eq!(writer.uncork(&mut cx()).unwrap(), Flushed::Done);
    let written = writes(&wire);
    assert_eq!(written.len(), 2, "{written:?}");
    assert_eq!(written[0], (1, "answer".to_owned()));
    assert!(!writer.holds_credits(), "the credit went with the answer");
    assert_eq!(writer.queued_credits(), 0);
}
