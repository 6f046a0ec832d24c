//! The byte payloads that `pingpong` and `bandwidth` send, placed where `--payload-offset`
//! asks.
//!
//! Where a payload lies relative to a cache line can decide how fast the kernel copies it
//! into a socket's buffers. On the AMD EPYC host of 2026-12-06, in one of its two states,
//! a 1 MiB echo over TCP took 1.02 of its raw baseline at four of the eight 8-byte offsets
//! and 1.52–1.55 at the other four, until the TCP transport learnt to pad such frames (see
//! `docs/decisions.md`, "Twenty-second session"). The allocator's placement is one of
//! those offsets, fixed for a given build and size; the option makes the others
//! measurable.

use bytes::Bytes;

use super::BenchArgs;

/// The line size the offset is counted within.
pub const LINE: usize = 64;

/// `size` bytes of `fill`, starting `--payload-offset` bytes past a 64-byte boundary if
/// the option was given, otherwise wherever the allocator puts them.
pub fn payload(args: &BenchArgs, size: usize, fill: u8) -> Bytes {
    match args.payload_offset {
        Some(offset) => payload_at(size, fill, usize::from(offset)),
        None => Bytes::from(vec![fill; size]),
    }
}

/// `size` bytes of `fill` starting `offset` (less than [`LINE`]) bytes past a line.
fn payload_at(size: usize, fill: u8, offset: usize) -> Bytes {
    debug_assert!(offset < LINE);
    let buffer = vec![fill; size + 2 * LINE];
    let base = buffer.as_ptr() as usize;
    // From the buffer's start to the first byte that is `offset` past a line.
    let start = (offset + LINE - base % LINE) % LINE;
    Bytes::from(buffer).slice(start..start + size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_starts_the_asked_offset_past_a_line_and_holds_only_the_fill() {
        for offset in [0, 1, 8, 44, 63] {
            for size in [0, 1, 4096, 65536 + 3] {
                let payload = payload_at(size, 0x5a, offset);
                assert_eq!(payload.len(), size);
                if size > 0 {
                    assert_eq!(payload.as_ptr() as usize % LINE, offset);
                }
                assert!(payload.iter().all(|&byte| byte == 0x5a));
            }
        }
    }
}
