//! The interface shared by `store_server` and `store_client`: bulk payloads put into a
//! store, built by the client in memory the server reads in place (loans).

use serde::{Deserialize, Serialize};

/// What the store made of a payload it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Summary {
    /// Bytes received.
    pub(crate) len: u64,
    /// FNV-1a of the bytes, to check that they arrived intact.
    pub(crate) checksum: u64,
}

/// Takes payloads.
#[lanner::interface(name = "lanner.examples.Store")]
pub(crate) trait Store {
    /// Receives `data` under `name` and says what arrived.
    async fn put(&self, name: String, data: bytes::Bytes) -> Result<Summary, lanner::Error>;
}

/// FNV-1a, 64 bits.
pub(crate) fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
