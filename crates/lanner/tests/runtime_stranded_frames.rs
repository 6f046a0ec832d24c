//! A frame that arrives together with the reply a lone caller spins for is not left unread
//! while the connection's reader sleeps.
//!
//! A caller alone on its connection receives its own reply (the private-socket path), and
//! one read may bring the frames behind that reply too. The caller takes only its reply.
//! If the reader task sleeps meanwhile, registered for the socket's readiness, nothing
//! wakes it for those frames: the socket has nothing more to read. A relay between client
//! and server writes a PING right behind one RESPONSE, in the same write, and waits for the
//! client's PONG.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use lanner::{Client, ConnectionOptions};
use lanner_proto::frame::FrameKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

mod common;
use common::*;

/// Rounds per test: each sends one PING behind one reply.
const ROUNDS: u64 = 10;

fn socket_path(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("lanner-stranded-{tag}-{}.sock", std::process::id()))
}

/// Takes every whole frame off the front of `buffer`.
fn whole_frames(buffer: &mut BytesMut) -> Vec<BytesMut> {
    let mut frames = Vec::new();
    while buffer.len() >= 4 {
        let len = u32::from_le_bytes(buffer[..4].try_into().unwrap()) as usize;
        if buffer.len() < len {
            break;
        }
        frames.push(buffer.split_to(len));
    }
    frames
}

fn kind(frame: &[u8]) -> u8 {
    frame[4]
}

/// Relays one client connection at `front` to the server at `back`. Once `armed` holds a
/// nonce, the next RESPONSE to the client goes out with a PING of that nonce behind it, in
/// one write. `ponged` hears the nonces of the client's PONGs (kept from the server).
async fn relay(
    front: UnixListener,
    back: std::path::PathBuf,
    armed: Arc<AtomicU64>,
    ponged: mpsc::UnboundedSender<u64>,
) {
    let (client, _) = front.accept().await.unwrap();
    let server = UnixStream::connect(back).await.unwrap();
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = tokio::spawn(async move {
        let mut buffer = BytesMut::new();
        loop {
            if client_read.read_buf(&mut buffer).await.unwrap_or(0) == 0 {
                return;
            }
            for frame in whole_frames(&mut buffer) {
                if kind(&frame) == FrameKind::Pong as u8 {
                    let _ = ponged.send((&frame[8..]).get_u64_le());
                    continue;
                }
                if server_write.write_all(&frame).await.is_err() {
                    return;
                }
            }
        }
    });
    let mut buffer = BytesMut::new();
    loop {
        if server_read.read_buf(&mut buffer).await.unwrap_or(0) == 0 {
            break;
        }
        for frame in whole_frames(&mut buffer) {
            let mut out = frame.to_vec();
            if kind(&frame) == FrameKind::Response as u8 {
                let nonce = armed.swap(0, Ordering::SeqCst);
                if nonce != 0 {
                    out.extend_from_slice(&lanner_proto::frame::encode_ping(nonce));
                }
            }
            if client_write.write_all(&out).await.is_err() {
                break;
            }
        }
    }
    upstream.abort();
}

/// Runs the server and the relay on a runtime of their own (its own thread: the reply
/// must arrive while the caller spins for it, not when the caller's thread lets the
/// server run), and the client on `client_runtime`.
fn frame_behind_a_lone_callers_reply_is_read(tag: &str, client_runtime: tokio::runtime::Runtime) {
    let back = socket_path(&format!("{tag}-server"));
    let front = socket_path(&format!("{tag}-relay"));
    let (elsewhere, _served, listener) = serve_elsewhere_behind_a_relay(&back, &front);
    let armed = Arc::new(AtomicU64::new(0));
    let (ponged, mut pongs) = mpsc::unbounded_channel();
    elsewhere.spawn(relay(listener, back.clone(), armed.clone(), ponged));
    let answered = client_runtime.block_on(async {
        // No keepalive: nothing else would come to wake a sleeping reader.
        let client = Client::with_options(ConnectionOptions::default().without_keepalive());
        let calc: CalculatorProxy = client
            .connect(&format!("unix://{}/obj", front.display()))
            .await
            .unwrap();
        // Sequential calls: the caller is alone and receives its own replies.
        for _ in 0..3 {
            calc.ping().await.unwrap();
        }
        for round in 1..=ROUNDS {
            // Past the spin budget: the reader sleeps.
            tokio::time::sleep(Duration::from_millis(10)).await;
            armed.store(round, Ordering::SeqCst);
            calc.ping().await.unwrap();
            let pong = tokio::time::timeout(Duration::from_secs(2), pongs.recv()).await;
            if pong != Ok(Some(round)) {
                return Err(format!("round {round}: {pong:?}"));
            }
        }
        Ok(())
    });
    drop(client_runtime);
    elsewhere.shutdown_background();
    // The server's listener goes with its accept task, which a runtime shut down in the
    // background may drop after this process has ended: its socket file would stay.
    let _ = std::fs::remove_file(&front);
    let _ = std::fs::remove_file(&back);
    if let Err(round) = answered {
        panic!("a PING that came with a lone caller's reply was never answered ({round})");
    }
}

#[test]
fn a_frame_behind_a_lone_callers_reply_is_read_on_a_current_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    frame_behind_a_lone_callers_reply_is_read("current", runtime);
}

#[test]
fn a_frame_behind_a_lone_callers_reply_is_read_on_a_multi_thread_runtime() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    frame_behind_a_lone_callers_reply_is_read("multi", runtime);
}
