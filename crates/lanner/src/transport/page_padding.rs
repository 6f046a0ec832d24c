//! Padding that keeps a large payload's copy into a TCP socket clear of 4 KiB aliasing.
//!
//! Linux copies what a TCP socket sends into page fragments of the sending thread, with
//! `rep movsb`. On some CPUs that copy slows down when each store lands a little ahead of
//! the load that comes next at the same offset in another 4 KiB page. That happens when
//! the destination is 1 to about 100 bytes ahead of the source, modulo 4 KiB. On the AMD
//! EPYC host of 2026-12-06, in one of its two states, a user-space `rep movsb` of 1 MiB ran
//! at 55 GB/s in that window and at 64–69 GB/s outside it. A 1 MiB echo over TCP took
//! 1.53–1.55 times its raw baseline instead of 1.00–1.02.
//!
//! A message sent alone usually starts a fresh page fragment. Its payload is then copied
//! to the head's length past a page boundary, while the payload's source is wherever its
//! buffer lies: a 1 MiB `Vec` lies 16 bytes into a page (`mmap`). Lanner's 44-byte request
//! head therefore put the destination 28 bytes ahead. So before a frame whose first bulk
//! segment is large, a TCP sink sends as many PONG frames as move that destination out of
//! the window: at most [`ALIASING_WINDOW`] bytes, on frames of [`PADDED_BULK_MIN`] or
//! more. A peer ignores a PONG that answers no PING (see `lanner_proto::frame`). The
//! measurements are in `docs/decisions.md` ("Twenty-second session"); `lanner bench
//! pingpong --payload-offset` reproduces them. Where the fragment starts is the kernel's
//! affair: when it does not start a page, the padding moves the destination by an amount
//! that may help or hurt, so a frame in a batch, behind others, is never padded.

use std::sync::LazyLock;

use bytes::{Bytes, BytesMut};
use lanner_proto::OutFrame;
use lanner_proto::frame::{PING_LEN, encode_pong};

/// Bulk segments smaller than this are left alone: up to 128 KiB the offset made no
/// difference (1 MiB and 256 KiB echoes did: 1.50–1.73 against 1.00–1.03).
pub(super) const PADDED_BULK_MIN: usize = 256 * 1024;

/// The aliasing distance: a destination this many bytes ahead of its source (modulo
/// [`PAGE`]) or more, or not ahead at all, copies at full speed. Measured slow at 4 to 48
/// bytes ahead, fast at 84 and beyond; padding moves a destination to at least this.
pub(super) const ALIASING_WINDOW: usize = 128;

/// The aliasing period.
const PAGE: usize = 4096;

/// The PONGs' nonce ("PADDING!" in ASCII), told apart from keepalive answers in a capture.
const PADDING_NONCE: u64 = u64::from_be_bytes(*b"PADDING!");

/// Enough PONG frames to move any destination out of the window.
static PONGS: LazyLock<Bytes> = LazyLock::new(|| {
    let pong = encode_pong(PADDING_NONCE);
    let mut pongs = BytesMut::with_capacity(ALIASING_WINDOW);
    while pongs.len() < ALIASING_WINDOW {
        pongs.extend_from_slice(&pong);
    }
    pongs.freeze()
});

/// Puts PONG frames before `frame` if its payload's copy would alias (see the module
/// docs). Only a frame none of which is written yet, whose first bulk segment is large.
pub(super) fn pad(frame: &mut OutFrame) {
    if !frame.is_unwritten() {
        return;
    }
    let (head, [first, ..]) = frame.parts() else {
        return;
    };
    if first.len() < PADDED_BULK_MIN {
        return;
    }
    let pongs = pongs_needed(head.len(), first.as_ptr() as usize);
    if pongs > 0 {
        frame.prepend(&PONGS[..pongs * PING_LEN]);
    }
}

/// How many PONGs take a payload whose source is at `source` out of the window, its
/// destination being `head_len` bytes past a page boundary.
fn pongs_needed(head_len: usize, source: usize) -> usize {
    let ahead = (head_len % PAGE + PAGE - source % PAGE) % PAGE;
    if ahead == 0 || ahead >= ALIASING_WINDOW {
        return 0;
    }
    (ALIASING_WINDOW - ahead).div_ceil(PING_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_destination_a_little_ahead_of_its_source_is_padded_out_of_the_window() {
        // A 1 MiB `Vec` 16 bytes into a page, behind a 44-byte request head: 28 ahead.
        assert_eq!(pongs_needed(44, 4096 * 7 + 16), 7);
        assert_eq!(28 + 7 * PING_LEN, 140);
        // Behind, level, or far enough ahead: nothing.
        for source in [44, 60, 4096 * 3 + 48, 4096 * 2 + 44] {
            assert_eq!(pongs_needed(44, source), 0, "{source}");
        }
        assert_eq!(pongs_needed(200, 16), 0);
        // Just inside the window: one PONG crosses its end.
        assert_eq!(pongs_needed(44, 4096 - 83), 1);
        // Every source: at most the window's worth, and never left inside it (so padding
        // a padded frame again adds nothing).
        for source in 0..PAGE {
            let pongs = pongs_needed(44, source);
            assert!(pongs * PING_LEN <= ALIASING_WINDOW);
            let padded = (44 + pongs * PING_LEN + PAGE - source) % PAGE;
            assert!(!(1..ALIASING_WINDOW).contains(&padded), "{source}");
            assert_eq!(pongs_needed(44 + pongs * PING_LEN, source), 0, "{source}");
        }
    }

    #[test]
    fn the_padding_is_whole_pongs() {
        assert_eq!(PONGS.len(), ALIASING_WINDOW);
        assert_eq!(ALIASING_WINDOW % PING_LEN, 0);
        assert_eq!(&PONGS[..PING_LEN], &encode_pong(PADDING_NONCE)[..]);
    }
}
