//! Records that carry a frame whose bulk segments stay in the sender's loan area (see
//! [`lanner_shm::loans`]): the segments travel as offsets, not bytes.
//!
//! ```text
//! 0u32 | count u32                              (count: 1 ..= MAX_BULK_SEGMENTS)
//! count × ( index u16 | reserved u16 | len u32 | offset u64 )
//! the frame, without the bytes of the segments listed
//! ```
//!
//! The leading zero tells such a record from a frame, whose first word (its length) is at
//! least 8: the ring and every other record stay as they were, and telling the two apart
//! costs one comparison of a word the decoder reads anyway. The receiver turns each offset
//! back into bytes over the sender's area and hands the frame to the protocol core with
//! those segments apart ([`lanner_proto::ExternalSegments`]), which checks them against
//! the frame's segment table.

use bytes::Bytes;
use lanner_proto::ExternalSegments;
use lanner_proto::limits::MAX_BULK_SEGMENTS;
use lanner_shm::{Loan, LoanArea, LoanReceiver, Reservation, RingError};
use smallvec::SmallVec;

/// Bulk segments from a loan smaller than this are copied into the ring like any other:
/// copying a kilobyte costs less than lending it (a descriptor here, an allocation and a
/// return on the receiving side, the return read back here).
pub(crate) const LEND_MIN: usize = 1024;

/// Bulk segments at least this large that are not from a loan are copied into a block of
/// the loan area and lent from there, rather than copied into the ring: the same one copy,
/// but a receiver that keeps the payload holds that block only, where a payload held in
/// the ring would stop the ring once it came round. Not smaller ones: lending costs both
/// sides bookkeeping that a 64 KiB payload feels (`bench bandwidth --sizes 65536`, eight
/// calls in flight: 0.45 of raw instead of 0.60 with a 16 KiB threshold) and a 256 KiB
/// one does not (1 MiB: 0.87 either way).
pub(crate) const COPY_TO_AREA_MIN: usize = 256 * 1024;

/// Whether a frame lends `segment` when it can ([`Plan::new`]): a segment from a loan of
/// `area`, or one large enough to be copied into a block of it.
pub(crate) fn lendable(area: &LoanArea, segment: &[u8]) -> bool {
    segment.len() >= LEND_MIN && (segment.len() >= COPY_TO_AREA_MIN || area.contains(segment))
}

/// Bytes before the descriptors.
pub(crate) const PREFIX_LEN: usize = 8;

/// Bytes per descriptor.
pub(crate) const DESCRIPTOR_LEN: usize = 16;

/// One lent segment: its index in the frame, its length and its offset in the area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lent {
    pub(crate) index: u16,
    pub(crate) len: u32,
    pub(crate) offset: u64,
}

/// Whether a received record lends payloads (see the module docs).
#[inline]
pub(crate) fn is_lent(record: &[u8]) -> bool {
    record.first_chunk::<4>() == Some(&[0; 4])
}

/// How one frame goes out lending: which bulk segments are lent (from a loan, or copied
/// into a block of the loan area first) and how many bytes the record copies.
pub(crate) struct Plan {
    lent: SmallVec<[Lent; 2]>,
    /// Bytes of the frame that go into the ring: the head and the segments not lent.
    copied: usize,
    /// Blocks lent for segments that were not built in a loan, with those segments'
    /// indexes: filled only once the record has room in the ring (a plan given up costs
    /// no copy), and held until then.
    to_fill: SmallVec<[(Loan, usize); 1]>,
}

impl Plan {
    /// Lends what it can of `bulk` (the frame's bulk segments, none written yet) from
    /// `area`; `None`, with nothing lent, if nothing can be.
    pub(crate) fn new(area: &LoanArea, bulk: &[Bytes]) -> Option<Plan> {
        let mut plan = Plan {
            lent: SmallVec::new(),
            copied: 0,
            to_fill: SmallVec::new(),
        };
        for (index, segment) in bulk.iter().enumerate() {
            match plan.lend(area, index, segment) {
                Some(lent) => plan.lent.push(lent),
                None => plan.copied += segment.len(),
            }
        }
        if plan.lent.is_empty() {
            return None;
        }
        Some(plan)
    }

    /// Lends `segment` (number `index`): itself if it is from a loan of `area`, else, if
    /// it is large and there is room, a block of `area` to copy it into (see `to_fill`).
    fn lend(&mut self, area: &LoanArea, index: usize, segment: &Bytes) -> Option<Lent> {
        let position = index;
        let index = u16::try_from(index).ok()?;
        let len = u32::try_from(segment.len()).ok()?;
        if segment.len() < LEND_MIN {
            return None;
        }
        if area.contains(segment) {
            let offset = area.lend(segment)?;
            return Some(Lent { index, len, offset });
        }
        if segment.len() < COPY_TO_AREA_MIN {
            return None;
        }
        let (block, offset) = area.loan_lent(segment.len())?;
        self.to_fill.push((block, position));
        Some(Lent { index, len, offset })
    }

    /// The record's length, with a head of `head_len` bytes.
    pub(crate) fn record_len(&self, head_len: usize) -> usize {
        PREFIX_LEN + self.lent.len() * DESCRIPTOR_LEN + head_len + self.copied
    }

    /// Takes the lendings back: the record was not written. (Blocks lent for copies are
    /// free once their loans are dropped, with the plan.)
    pub(crate) fn undo(self, area: &LoanArea) {
        for lent in &self.lent {
            area.unlend(lent.offset);
        }
    }

    /// Fills the blocks lent for copies, then writes the record: the descriptors, `head`,
    /// and the segments of `bulk` not lent. Dropping the plan afterwards lets go of the
    /// filled blocks: from then on only the peer's lendings hold them.
    pub(crate) fn write(&mut self, reservation: &mut Reservation<'_>, head: &[u8], bulk: &[Bytes]) {
        for (block, index) in &mut self.to_fill {
            block.as_mut_slice().copy_from_slice(&bulk[*index]);
        }
        reservation.write(0, &prefix(self.lent.len()));
        let mut at = PREFIX_LEN;
        for lent in &self.lent {
            reservation.write(at, &descriptor(lent));
            at += DESCRIPTOR_LEN;
        }
        reservation.write(at, head);
        at += head.len();
        let mut lent = self.lent.iter().peekable();
        for (index, segment) in bulk.iter().enumerate() {
            if lent.next_if(|l| usize::from(l.index) == index).is_some() {
                continue;
            }
            reservation.write(at, segment);
            at += segment.len();
        }
    }
}

/// The prefix of a record lending `count` segments: the zero word, then the count.
fn prefix(count: usize) -> [u8; PREFIX_LEN] {
    let count = u32::try_from(count).expect("at most MAX_BULK_SEGMENTS");
    let mut prefix = [0; PREFIX_LEN];
    prefix[4..].copy_from_slice(&count.to_le_bytes());
    prefix
}

/// One segment's descriptor.
fn descriptor(lent: &Lent) -> [u8; DESCRIPTOR_LEN] {
    let mut descriptor = [0; DESCRIPTOR_LEN];
    descriptor[..2].copy_from_slice(&lent.index.to_le_bytes());
    descriptor[4..8].copy_from_slice(&lent.len.to_le_bytes());
    descriptor[8..].copy_from_slice(&lent.offset.to_le_bytes());
    descriptor
}

/// The prefix and descriptors of a record lending `lent`, as [`Plan::write`] writes them
/// (for tests, which make such records by hand).
#[cfg(test)]
pub(crate) fn encode_descriptors(lent: &[Lent]) -> Vec<u8> {
    let mut out = prefix(lent.len()).to_vec();
    for segment in lent {
        out.extend_from_slice(&descriptor(segment));
    }
    out
}

/// Splits a lent record into its frame and the segments apart, taken from the peer's area
/// through `receiver` (each given back when its bytes are dropped). An error if the record
/// is malformed or names bytes outside the area: the peer broke the protocol.
pub(crate) fn decode(
    record: &Bytes,
    receiver: &LoanReceiver,
) -> Result<(Bytes, ExternalSegments), RingError> {
    let word = |at: usize| -> Option<[u8; 4]> { record.get(at..at + 4)?.try_into().ok() };
    let count = word(4).map(u32::from_le_bytes).ok_or(RingError(
        "a record of lent payloads is shorter than its prefix",
    ))? as usize;
    if count == 0 || count > usize::from(MAX_BULK_SEGMENTS) {
        return Err(RingError(
            "a record of lent payloads lends no segment, or too many",
        ));
    }
    let frame_start = PREFIX_LEN + count * DESCRIPTOR_LEN;
    if record.len() < frame_start {
        return Err(RingError(
            "a record of lent payloads is shorter than its descriptors",
        ));
    }
    let mut external = ExternalSegments::with_capacity(count);
    for descriptor in record[PREFIX_LEN..frame_start].chunks_exact(DESCRIPTOR_LEN) {
        let index = u16::from_le_bytes([descriptor[0], descriptor[1]]);
        let len = u32::from_le_bytes(descriptor[4..8].try_into().expect("4 bytes"));
        let offset = u64::from_le_bytes(descriptor[8..16].try_into().expect("8 bytes"));
        // Taken before it is checked against the frame: dropped with `external` on any
        // error, each is given back.
        external.push((index, receiver.take(offset, u64::from(len))?));
    }
    Ok((record.slice(frame_start..), external))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanner_shm::loans::heap_loans;

    #[test]
    fn descriptors_round_trip_and_segments_read_in_place() {
        let (area, receiver) = heap_loans(64 * 1024);
        let mut loan = area.loan(300).unwrap();
        loan.as_mut_slice().fill(9);
        let payload = loan.freeze();
        let offset = area.lend(&payload).unwrap();
        let lent = [Lent {
            index: 2,
            len: 300,
            offset,
        }];
        let mut record = encode_descriptors(&lent);
        record.extend_from_slice(b"the frame");
        let (frame, external) = decode(&Bytes::from(record), &receiver).unwrap();
        assert_eq!(&frame[..], b"the frame");
        assert_eq!(external.len(), 1);
        assert_eq!(external[0].0, 2);
        assert_eq!(external[0].1.as_ptr(), payload.as_ptr());
        assert_eq!(receiver.held(), 1);
    }

    #[test]
    fn a_plan_lends_loans_and_large_copies_and_undoes_cleanly() {
        let (area, _receiver) = heap_loans(1 << 20);
        let mut loan = area.loan(2000).unwrap();
        loan.as_mut_slice().fill(1);
        let bulk = [
            loan.freeze(),                            // from a loan: lent as it is
            Bytes::from(vec![2u8; COPY_TO_AREA_MIN]), // large: copied into a block, lent
            Bytes::from(vec![3u8; LEND_MIN]),         // not from a loan, not large: copied
            Bytes::new(),
        ];
        let plan = Plan::new(&area, &bulk).unwrap();
        assert_eq!(plan.lent.len(), 2);
        assert_eq!(plan.lent[0].index, 0);
        assert_eq!(plan.lent[1].index, 1);
        assert_eq!(plan.copied, LEND_MIN);
        assert_eq!(
            plan.record_len(40),
            PREFIX_LEN + 2 * DESCRIPTOR_LEN + 40 + LEND_MIN
        );
        assert_eq!(area.lent(), 2);
        plan.undo(&area);
        assert_eq!(area.lent(), 0);
        drop(bulk);
        assert!(area.loan(1 << 20).is_some(), "every block is free again");
    }

    #[test]
    fn nothing_to_lend_makes_no_plan() {
        let (area, _receiver) = heap_loans(64 * 1024);
        let small = [Bytes::from(vec![0u8; 100]), Bytes::from(vec![0u8; 50_000])];
        assert!(Plan::new(&area, &small).is_none());
        assert_eq!(area.lent(), 0);
    }

    #[test]
    fn malformed_records_are_errors_and_take_nothing() {
        let (_area, receiver) = heap_loans(64 * 1024);
        let outside = encode_descriptors(&[Lent {
            index: 0,
            len: 10,
            offset: 1 << 40,
        }]);
        let mut too_many = encode_descriptors(&[]);
        too_many[4..8].copy_from_slice(&u32::from(MAX_BULK_SEGMENTS + 1).to_le_bytes());
        let cases: [&[u8]; 5] = [
            b"",
            b"\0\0\0\0\x01\0\0",
            &encode_descriptors(&[]),
            &too_many,
            &outside,
        ];
        for record in cases {
            assert!(decode(&Bytes::copy_from_slice(record), &receiver).is_err());
        }
        let mut short = encode_descriptors(&[Lent {
            index: 0,
            len: 1,
            offset: 0,
        }]);
        short.truncate(PREFIX_LEN + 3);
        assert!(decode(&Bytes::from(short), &receiver).is_err());
        assert_eq!(receiver.held(), 0);
    }
}
