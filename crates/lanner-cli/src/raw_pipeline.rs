//! The raw baseline of the throughput benchmark: null messages pipelined over the same
//! socket or rings, batched as carefully as Lanner batches.
//!
//! The client keeps `concurrency` empty messages (header word only) outstanding: it writes
//! them all with one write, then, each time echoes arrive, takes every echo that one read
//! brought in and writes that many new messages with one write. The echo server answers
//! requests that arrived together with one write of the very bytes it received (see
//! `RawStream::echo_batch`). Over shared memory every message is one ring record, as
//! each Lanner frame is: the client publishes a burst of records with one store of the
//! ring's position (as Lanner publishes a batch), and the server drains every record that
//! has arrived before it echoes them, published together too.

use std::io;
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::raw::{HEADER_LEN, RawStream, header};
use crate::raw_shm::RawShm;

/// `count` requests (empty payloads), back to back, as one buffer.
fn requests(count: usize) -> Vec<u8> {
    header(0, 0).repeat(count.max(1))
}

impl RawStream {
    /// After taking a request that starts (header word included) at `first` in the
    /// inbox, takes the requests that arrived with it and are already complete, stopping
    /// before a one-way message. If there were any, returns the range of the inbox holding
    /// all of them, the first included: they are back to back, so their echo is that range
    /// written once. None if the first request came alone.
    pub(crate) fn echo_batch(&mut self, first: usize) -> io::Result<Option<Range<usize>>> {
        let mut end = None;
        while self.inbox.next_is_request() {
            match self.inbox.take_complete() {
                Ok((_, request)) => end = Some(request.end),
                Err(_) => break,
            }
        }
        Ok(end.map(|end| first..end))
    }

    /// Keeps `concurrency` null messages outstanding for `duration` (then lets the last
    /// ones come back); returns how many were echoed.
    pub fn pipeline(&mut self, concurrency: usize, duration: Duration) -> io::Result<u64> {
        let requests = requests(concurrency);
        self.socket.write_all(&requests)?;
        let start = Instant::now();
        let mut outstanding = concurrency.max(1);
        let mut echoed = 0u64;
        let mut sending = true;
        while outstanding > 0 {
            self.receive()?;
            let mut arrived = 1;
            while self.inbox.take_complete().is_ok() {
                arrived += 1;
            }
            echoed += arrived as u64;
            sending = sending && start.elapsed() < duration;
            if sending {
                self.socket.write_all(&requests[..arrived * HEADER_LEN])?;
            } else {
                outstanding -= arrived;
            }
        }
        Ok(echoed)
    }
}

impl RawShm {
    /// [`RawStream::pipeline`] over the rings: one record per message, every record that
    /// has arrived taken before the next burst is published.
    pub fn pipeline(&mut self, concurrency: usize, duration: Duration) -> io::Result<u64> {
        let request = header(0, 0);
        let concurrency = concurrency.max(1);
        for _ in 0..concurrency {
            self.send_record(&request, &[], false)?;
        }
        self.publish();
        let start = Instant::now();
        let mut outstanding = concurrency;
        let mut echoed = 0u64;
        let mut sending = true;
        while outstanding > 0 {
            self.receive()?;
            let mut arrived = 1;
            while self.try_receive()?.is_some() {
                arrived += 1;
            }
            echoed += arrived as u64;
            sending = sending && start.elapsed() < duration;
            if sending {
                for _ in 0..arrived {
                    self.send_record(&request, &[], false)?;
                }
                self.publish();
            } else {
                outstanding -= arrived;
            }
        }
        Ok(echoed)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn requests_that_arrive_together_are_echoed_together() {
        let (client, server) = UnixStream::pair().unwrap();
        let spin = Duration::from_micros(50);
        let mut client = RawStream::from_unix(client, spin).unwrap();
        let server = RawStream::from_unix(server, spin).unwrap();
        std::thread::spawn(move || server.serve_echo());
        // Three requests in one write, the middle one with a payload.
        let mut burst = header(0, 0).to_vec();
        burst.extend_from_slice(&header(3, 0));
        burst.extend_from_slice(b"abc");
        burst.extend_from_slice(&header(0, 0));
        client.socket.write_all(&burst).unwrap();
        let mut echoed = Vec::new();
        while echoed.len() < 3 {
            let (one_way, payload) = client.receive().unwrap();
            assert!(!one_way);
            echoed.push(client.inbox.buffer[payload].to_vec());
        }
        assert_eq!(echoed, [b"".to_vec(), b"abc".to_vec(), b"".to_vec()]);
        let echoed = client.pipeline(8, Duration::from_millis(20)).unwrap();
        assert!(echoed >= 8, "{echoed}");
        assert_eq!(client.round_trip(b"after").unwrap(), 5, "nothing left over");
    }
}
