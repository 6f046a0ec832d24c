//! Fuzz target code (run by `fuzz/`, kept here so that a crash input replays as a unit
//! test): the decoder of arguments and results, fed arbitrary bytes as several kinds of
//! values, including types that contain themselves.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_and_claimed_large_inputs_end_in_errors() {
        value_decode(&[1u8; 1 << 20]);
        value_decode(&[0xff; 64]);
        value_decode(&[]);
        // A sequence claiming u32::MAX elements, then nothing.
        value_decode(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    }
}
