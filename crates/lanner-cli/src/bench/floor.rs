//! `lanner bench floor --transport shm`: the floor under Lanner's null call over shared
//! memory, and how far above it Lanner's own call is. Null round trips three ways, in
//! alternating blocks of one run:
//!
//! - **raw**: a 4-byte record ping-ponged through `lanner-shm` rings, as `bench
//!   pingpong`'s raw side does;
//! - **core**: Lanner's protocol core alone (`lanner_proto::Connection`, sans-IO: call ids,
//!   credits, frame encoding and validation) on both ends of the same rings, and a
//!   one-entry table standing in for the export table. Its frames are the ones a null
//!   echo sends (plain: the header stamped on the stack and written into the ring with
//!   the empty bulk segment after it, see `lanner_proto::PlainRequest`). No runtime: no
//!   locks, futures, tasks, pending-call table, call context or stub;
//! - **lanner**: a null call through the public API to a `lanner serve` process, as `bench
//!   pingpong --sizes 0` makes it.
//!
//! The raw and core sides are two threads of this process (pinned as `--placement` says)
//! that poll without ever sleeping; the Lanner side waits as `--spin-us` or `--busy-poll`
//! say (a tight ping-pong never reaches a spin budget). `core - raw` is what the protocol
//! core costs a round trip, `lanner - core` what the runtime costs. Issue 3's size-0
//! target (Lanner ≤ 1.5 × raw) needs both together under half a raw round trip
//! (`docs/decisions.md`, "Seventeenth session").
//!
//! Also the protocol core's CPU cost per round trip on one thread, with no rings
//! (`core_cpu_ns`: frames passed by copy, as the ring's copy-out does): instructions, not
//! cache-line transfers, so it moves less with the host's state than the latencies do.
//! The polling sides need a CPU each: `--placement same` is refused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use lanner::transport::shm::{DEFAULT_RING_CAPACITY, IN_PLACE_MIN};
use lanner_proto::{Event, Limits, PlainHead, PlainRequest};
use lanner_shm::region::{Region, Side};
use lanner_shm::{Consumer, Producer};
use serde::Serialize;

use super::pingpong::{BlockResult, Sampler, alternate_all, null_calls};
use super::setup::ClientSide;
use super::stats::{percentiles, ratio, round2};
use super::{BenchArgs, DEFAULT_ITERS, RowsReport, print_report};
use crate::placement::{Placement, pin_current_thread};
use crate::transport_arg::TransportArg;

/// The object handle the core's requests name (the one entry of the stand-in table).
const HANDLE: u64 = 0x2a;

/// Round trips timed for `core_cpu_ns`, per try (the best of [`CPU_TRIES`] is reported).
const CPU_ROUND_TRIPS: usize = 200_000;
const CPU_TRIES: usize = 3;

/// The size of [`CopyArena`]'s buffers (the ring consumer's copy arena is as large).
const COPY_ARENA: usize = 64 * 1024;

/// The report's one row.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Payload size (always 0: null calls).
    pub size: usize,
    /// Median raw ring round trip.
    pub raw_p50_us: f64,
    /// Its 99th percentile.
    pub raw_p99_us: f64,
    /// Median round trip with the protocol core on both ends.
    pub core_p50_us: f64,
    /// Its 99th percentile.
    pub core_p99_us: f64,
    /// `core_p50_us / raw_p50_us`.
    pub core_ratio_p50: f64,
    /// Median round trip of Lanner's null call.
    pub lanner_p50_us: f64,
    /// Its 99th percentile.
    pub lanner_p99_us: f64,
    /// `lanner_p50_us / raw_p50_us`.
    pub lanner_ratio_p50: f64,
    /// The protocol core's CPU time per round trip (both ends, one thread, no rings), ns.
    pub core_cpu_ns: f64,
}

/// Runs the benchmark and prints the report.
pub fn run(args: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.transport != TransportArg::Shm {
        return Err(
            "the floor is measured on the shared-memory rings: use `--transport shm`".into(),
        );
    }
    if args.placement == Placement::Same {
        return Err(
            "both sides of the floor poll without ever sleeping: they need a CPU each \
                    (`--placement split` or `free`)"
                .into(),
        );
    }
    let row = measure(args)?;
    let report = RowsReport::new("floor", args, vec![row]);
    print_report(args, &report, || {
        println!(
            "{}",
            report
                .run
                .title("; null round trips: raw ring, protocol core alone (both polling), Lanner")
        );
        println!(
            "{:>9}  {:>9}  {:>6}  {:>11}  {:>6}  {:>12}",
            "raw p50", "core p50", "ratio", "lanner p50", "ratio", "core cpu/rt"
        );
        for row in &report.rows {
            println!(
                "{:>7.2}us  {:>7.2}us  {:>6.2}  {:>9.2}us  {:>6.2}  {:>10.0}ns",
                row.raw_p50_us,
                row.core_p50_us,
                row.core_ratio_p50,
                row.lanner_p50_us,
                row.lanner_ratio_p50,
                row.core_cpu_ns
            );
        }
    })?;
    Ok(())
}

fn measure(args: &BenchArgs) -> Result<Row, Box<dyn std::error::Error>> {
    let (client_cpu, _) = args.placement.cpus();
    let core_cpu_ns = core_cpu_ns(client_cpu)?;
    let side = ClientSide::start(args)?;
    let mut raw = Lane::start(side.server_cpu, serve_raw)?;
    let mut core = Lane::start(side.server_cpu, serve_core)?;
    let (mut client, hello) = lanner_proto::Connection::client(Limits::default());
    core.handshake(&mut client, hello)?;
    // Kept until the end: dropping it stops the server process.
    let (_server, echo) = side.echo_server(TransportArg::Shm)?;
    let runtime = &side.runtime;

    let mut raw_side =
        |count, samples: &mut Vec<Duration>| raw.block(count, samples, raw_round_trip);
    let mut core_side = |count, samples: &mut Vec<Duration>| {
        core.block(count, samples, |rings| core_round_trip(rings, &mut client))
    };
    let mut lanner_side =
        |count, samples: &mut Vec<Duration>| null_calls(runtime, &echo, count, samples);
    let mut discard = Vec::with_capacity(args.warmup);
    for side in [
        &mut raw_side as Sampler<'_>,
        &mut core_side,
        &mut lanner_side,
    ] {
        side(args.warmup, &mut discard)?;
        discard.clear();
    }
    let samples = alternate_all(
        args.iters_or(DEFAULT_ITERS).max(1),
        &mut [&mut raw_side, &mut core_side, &mut lanner_side],
    )?;
    let [mut raw_samples, mut core_samples, mut lanner_samples]: [Vec<Duration>; 3] = samples
        .try_into()
        .map_err(|_| "alternate_all returned another number of sides")?;
    raw.finish()?;
    core.finish()?;
    let raw = percentiles(&mut raw_samples);
    let core = percentiles(&mut core_samples);
    let lanner = percentiles(&mut lanner_samples);
    Ok(Row {
        size: 0,
        raw_p50_us: round2(raw.p50),
        raw_p99_us: round2(raw.p99),
        core_p50_us: round2(core.p50),
        core_p99_us: round2(core.p99),
        core_ratio_p50: ratio(core.p50, raw.p50),
        lanner_p50_us: round2(lanner.p50),
        lanner_p99_us: round2(lanner.p99),
        lanner_ratio_p50: ratio(lanner.p50, raw.p50),
        core_cpu_ns: (core_cpu_ns * 10.0).round() / 10.0,
    })
}

/// One end's two rings: the producer of its outgoing ring and the consumer of its
/// incoming one.
struct Rings {
    producer: Producer,
    consumer: Consumer,
    /// Set by the side that stops (done, or failed): the other stops waiting for it.
    gone: Arc<AtomicBool>,
}

/// A pair of rings set up as a connection's are (same capacity, faulted in), both ends in
/// this process. Nobody sleeps, so the doorbells ring nothing.
fn ring_pair() -> std::io::Result<(Rings, Rings)> {
    struct Nobody;
    impl lanner_shm::ring::Wake for Nobody {
        fn wake(&self) {}
    }
    let (client, fd) = Region::create(DEFAULT_RING_CAPACITY)?;
    let server = Region::open(std::os::fd::AsFd::as_fd(&fd), DEFAULT_RING_CAPACITY)?;
    let gone = Arc::new(AtomicBool::new(false));
    let ends = |region: Region, side| {
        let _ = region.populator().populate();
        let nobody = || Arc::new(Nobody) as Arc<dyn lanner_shm::ring::Wake>;
        let (producer, consumer) = region.split(side, nobody(), nobody(), IN_PLACE_MIN);
        Rings {
            producer,
            consumer,
            gone: gone.clone(),
        }
    };
    Ok((ends(client, Side::Client), ends(server, Side::Server)))
}

/// The client's end of one way of driving the rings, and the server thread serving it
/// blocks of round trips on demand (it waits on a channel between blocks, off the CPU).
struct Lane {
    rings: Rings,
    blocks: Option<mpsc::Sender<Block>>,
    server: Option<JoinHandle<Result<(), String>>>,
}

/// What the server thread is asked to do next.
enum Block {
    /// Answer this many requests.
    Serve(usize),
    /// Process this handshake frame and send the answer back.
    Handshake(Bytes),
}

/// A server thread's body: its rings and the blocks it is asked for.
type Serve = fn(Rings, mpsc::Receiver<Block>) -> Result<(), String>;

impl Lane {
    fn start(server_cpu: Option<usize>, serve: Serve) -> std::io::Result<Lane> {
        let (client, server) = ring_pair()?;
        let (blocks, requests) = mpsc::channel();
        let server = std::thread::Builder::new()
            .name("floor-server".to_owned())
            .spawn(move || {
                let _leaving = Leaving(server.gone.clone());
                if let Some(cpu) = server_cpu {
                    pin_current_thread(cpu).map_err(|e| e.to_string())?;
                }
                serve(server, requests)
            })?;
        Ok(Lane {
            rings: client,
            blocks: Some(blocks),
            server: Some(server),
        })
    }

    fn ask(&self, block: Block) -> BlockResult {
        self.blocks
            .as_ref()
            .and_then(|blocks| blocks.send(block).ok())
            .ok_or_else(|| "the floor's server thread stopped".into())
    }

    /// Opens `client`'s protocol connection with the server thread's (over the rings).
    fn handshake(&mut self, client: &mut lanner_proto::Connection, hello: Bytes) -> BlockResult {
        self.ask(Block::Handshake(hello.clone()))?;
        send(&mut self.rings, &[&hello])?;
        match client.handle_frame(receive(&mut self.rings)?)? {
            Event::Established { auth: None } => Ok(()),
            other => Err(format!("unexpected handshake step {other:?}").into()),
        }
    }

    /// `count` round trips by `round_trip`, each one's time pushed to `samples`.
    fn block(
        &mut self,
        count: usize,
        samples: &mut Vec<Duration>,
        mut round_trip: impl FnMut(&mut Rings) -> BlockResult,
    ) -> BlockResult {
        self.ask(Block::Serve(count))?;
        for _ in 0..count {
            let start = Instant::now();
            round_trip(&mut self.rings)?;
            samples.push(start.elapsed());
        }
        Ok(())
    }

    /// Stops the server thread; its error, if it had one.
    fn finish(&mut self) -> BlockResult {
        drop(self.blocks.take());
        // A server thread waiting for a request that will not come stops waiting.
        self.rings.gone.store(true, Ordering::Relaxed);
        match self.server.take().map(JoinHandle::join) {
            Some(Ok(Err(error))) => Err(error.into()),
            Some(Err(_)) => Err("the floor's server thread panicked".into()),
            _ => Ok(()),
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// Writes `parts` as one record into `rings`, polling for room until the other side is
/// gone.
fn send(rings: &mut Rings, parts: &[&[u8]]) -> Result<(), String> {
    let len = parts.iter().map(|part| part.len()).sum();
    let mut polls = 0u32;
    loop {
        match rings.producer.try_reserve(len) {
            Ok(Some(mut reservation)) => {
                let mut at = 0;
                for part in parts {
                    reservation.write(at, part);
                    at += part.len();
                }
                reservation.commit(false);
                return Ok(());
            }
            Ok(None) => std::hint::spin_loop(),
            Err(error) => return Err(error.to_string()),
        }
        polls = polls.wrapping_add(1);
        if polls % 1024 == 0 && rings.gone.load(Ordering::Relaxed) {
            return Err("the other side of the floor stopped".to_owned());
        }
    }
}

/// Sets its flag when dropped: the thread holding it is gone, however it left.
struct Leaving(Arc<AtomicBool>);

impl Drop for Leaving {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Polls `rings` for the next record, until the other side is gone.
fn receive(rings: &mut Rings) -> Result<Bytes, String> {
    let mut polls = 0u32;
    loop {
        match rings.consumer.try_recv() {
            Ok(Some(record)) => return Ok(record.bytes),
            Ok(None) => std::hint::spin_loop(),
            Err(error) => return Err(error.to_string()),
        }
        polls = polls.wrapping_add(1);
        if polls % 1024 == 0 && rings.gone.load(Ordering::Relaxed) {
            return Err("the other side of the floor stopped".to_owned());
        }
    }
}

fn raw_round_trip(rings: &mut Rings) -> BlockResult {
    send(rings, &[&[0; 4]])?;
    match receive(rings)?.len() {
        4 => Ok(()),
        other => Err(format!("the raw echo has {other} bytes, not 4").into()),
    }
}

fn serve_raw(mut rings: Rings, blocks: mpsc::Receiver<Block>) -> Result<(), String> {
    while let Ok(block) = blocks.recv() {
        let Block::Serve(count) = block else {
            return Err("the raw side has no handshake".to_owned());
        };
        for _ in 0..count {
            let record = receive(&mut rings)?;
            send(&mut rings, &[&record])?;
        }
    }
    Ok(())
}

fn core_round_trip(rings: &mut Rings, client: &mut lanner_proto::Connection) -> BlockResult {
    let (call_id, head) = stamp_request(client)?;
    send(rings, &[head.as_bytes()])?;
    match client.handle_frame(receive(rings)?)? {
        Event::Response(response) if response.call_id == call_id => Ok(()),
        other => Err(format!("expected the answer to call {call_id}, got {other:?}").into()),
    }
}

fn serve_core(mut rings: Rings, blocks: mpsc::Receiver<Block>) -> Result<(), String> {
    let mut server = lanner_proto::Connection::server(Limits::default());
    // The stand-in for the export table: the handles this connection may call.
    let table = [HANDLE];
    while let Ok(block) = blocks.recv() {
        match block {
            Block::Handshake(hello) => {
                let received = receive(&mut rings)?;
                if received != hello {
                    return Err("the HELLO arrived changed".to_owned());
                }
                match server.handle_frame(received).map_err(|e| e.to_string())? {
                    Event::Accepted { welcome } => send(&mut rings, &[&welcome])?,
                    other => return Err(format!("unexpected handshake step {other:?}")),
                }
            }
            Block::Serve(count) => {
                for _ in 0..count {
                    let frame = receive(&mut rings)?;
                    let answer = serve_one(&mut server, frame, &table)?;
                    send(&mut rings, &[answer.as_bytes()])?;
                }
            }
        }
    }
    Ok(())
}

/// A null echo's request (an empty bulk payload, no inline arguments), stamped with a
/// fresh call id and a credit spent, as a proxy's call stamps it. Its bulk segment is
/// empty: the header is the whole frame.
fn stamp_request(client: &mut lanner_proto::Connection) -> Result<(u64, PlainHead), String> {
    let request = PlainRequest {
        object: HANDLE,
        slot: 0,
        method: 0,
        fingerprint: 0,
        timeout: None,
        one_way: false,
        bulk: Some(Bytes::new()),
    };
    let (call_id, head, _empty) = client
        .stamp_plain_request(request)
        .map_err(|(error, _)| error.to_string())?;
    Ok((call_id, head))
}

/// Decodes one request and stamps its answer (the empty payload echoed), as the server's
/// reader does before and after its dispatch: a request for an object not in `table`
/// is a protocol error here, where the server would answer NOT_FOUND.
fn serve_one(
    server: &mut lanner_proto::Connection,
    frame: Bytes,
    table: &[u64],
) -> Result<PlainHead, String> {
    let Event::Request(request) = server.handle_frame(frame).map_err(|e| e.to_string())? else {
        return Err("expected a request".to_owned());
    };
    if !table.contains(&request.object) {
        return Err(format!("no object {:#x} in the table", request.object));
    }
    let max = server.peer_limits().max_frame_size;
    let head = lanner_proto::stamp_plain_response(request.call_id, Some(&[]), max)
        .ok_or("an empty answer is larger than the peer's frame limit")?;
    // The answer is counted as the server's receiver counts one it stamped itself.
    server.responses_sent(1).map_err(|e| e.to_string())?;
    Ok(head)
}

/// The protocol core's round trip on one thread: both ends' work, frames handed over as
/// the ring's copy-out hands them (a fresh buffer). The best of [`CPU_TRIES`] runs, in ns.
fn core_cpu_ns(cpu: Option<usize>) -> Result<f64, Box<dyn std::error::Error>> {
    // On the client's CPU, from a thread of its own (this one is pinned later).
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                if let Some(cpu) = cpu {
                    pin_current_thread(cpu).map_err(|e| e.to_string())?;
                }
                let (mut client, hello) = lanner_proto::Connection::client(Limits::default());
                let mut server = lanner_proto::Connection::server(Limits::default());
                let Event::Accepted { welcome } =
                    server.handle_frame(hello).map_err(|e| e.to_string())?
                else {
                    return Err("the server did not accept the HELLO".to_owned());
                };
                client.handle_frame(welcome).map_err(|e| e.to_string())?;
                let table = [HANDLE];
                let mut arena = CopyArena(BytesMut::new());
                let mut best = f64::INFINITY;
                for _ in 0..CPU_TRIES {
                    let start = Instant::now();
                    round_trips(&mut client, &mut server, &table, &mut arena)?;
                    let per = start.elapsed().as_secs_f64() * 1e9 / CPU_ROUND_TRIPS as f64;
                    best = best.min(per);
                }
                Ok(best)
            })
            .join()
            .map_err(|_| "the floor's CPU measurement panicked".to_owned())?
    })
    .map_err(Into::into)
}

/// [`CPU_ROUND_TRIPS`] round trips of the protocol core between `client` and `server` on
/// this thread. Out of line, so that callgrind can count its instructions alone:
/// `valgrind --tool=callgrind --toggle-collect='*floor::round_trips' lanner bench floor
/// --transport shm --iters 16` (each of the [`CPU_TRIES`] calls is one `CPU_ROUND_TRIPS`).
#[inline(never)]
fn round_trips(
    client: &mut lanner_proto::Connection,
    server: &mut lanner_proto::Connection,
    table: &[u64],
    arena: &mut CopyArena,
) -> Result<(), String> {
    for _ in 0..CPU_ROUND_TRIPS {
        let (call_id, request) = stamp_request(client)?;
        let answer = serve_one(server, arena.copied(request.as_bytes()), table)?;
        match client.handle_frame(arena.copied(answer.as_bytes())) {
            Ok(Event::Response(r)) if r.call_id == call_id => {}
            other => return Err(format!("unexpected answer {other:?}")),
        }
    }
    Ok(())
}

/// Where `core_cpu_ns` copies frames, as the ring's consumer copies small records out: into
/// a shared buffer, split off (no allocation per frame).
struct CopyArena(BytesMut);

impl CopyArena {
    /// `frame` as a receiver gets it from the ring.
    fn copied(&mut self, frame: &[u8]) -> Bytes {
        if self.0.capacity() < frame.len() {
            self.0 = BytesMut::with_capacity(COPY_ARENA.max(frame.len()));
        }
        self.0.extend_from_slice(frame);
        self.0.split().freeze()
    }
}
