//! The raw baseline's client on any medium.

use std::io;
use std::time::Duration;

use crate::raw::RawStream;
use crate::raw_shm::RawShm;

/// A connection to the raw echo server: a socket or shared-memory rings.
pub enum RawClient {
    /// TCP or Unix socket.
    Stream(RawStream),
    /// Shared-memory rings.
    Shm(RawShm),
}

impl RawClient {
    /// Connects to the raw server at `endpoint` (`tcp://`, `unix://` or `shm://`); waits
    /// poll for `spin` before sleeping.
    pub fn connect(endpoint: &str, spin: Duration) -> io::Result<RawClient> {
        Ok(if endpoint.starts_with("shm://") {
            RawClient::Shm(RawShm::connect(endpoint, spin)?)
        } else {
            RawClient::Stream(RawStream::connect(endpoint, spin)?)
        })
    }

    /// One round trip; returns the echo's length.
    pub fn round_trip(&mut self, payload: &[u8]) -> io::Result<usize> {
        match self {
            RawClient::Stream(stream) => stream.round_trip(payload),
            RawClient::Shm(shm) => shm.round_trip(payload),
        }
    }

    /// Keeps `concurrency` null messages outstanding for `duration`, batched (see
    /// [`crate::raw_pipeline`]); returns how many were echoed.
    pub fn pipeline(&mut self, concurrency: usize, duration: Duration) -> io::Result<u64> {
        match self {
            RawClient::Stream(stream) => stream.pipeline(concurrency, duration),
            RawClient::Shm(shm) => shm.pipeline(concurrency, duration),
        }
    }

    /// Sends `count` messages of `payload` for the server to take without answering,
    /// batched as Lanner batches a stream of one-way calls.
    pub fn send_one_way_burst(&mut self, payload: &[u8], count: usize) -> io::Result<()> {
        match self {
            RawClient::Stream(stream) => stream.write_one_way_burst(payload, count),
            RawClient::Shm(shm) => shm.send_one_way_burst(payload, count),
        }
    }
}
