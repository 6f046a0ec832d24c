//! Builds payloads in loans and puts them into `store_server`: over `shm://` each payload
//! is written once, by this process, where the server reads it (sent by reference); over
//! other transports the same code sends ordinary copies.

use lanner::{Client, Proxy};

#[path = "shared/store.rs"]
mod store;

use store::{Store, StoreProxy, checksum};

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

#[tokio::main]
async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "shm://lanner-store".to_owned());
    let store: StoreProxy = Client::new().connect(&format!("{endpoint}/store")).await?;
    for part in 0..8u8 {
        // A buffer in memory the server can read (when the connection allows it).
        let mut loan = store.object().loan(1 << 20);
        // Build the payload in place: here a pattern; a file read or a serializer
        // writing into `&mut loan[..]` works the same.
        for (i, byte) in loan.iter_mut().enumerate() {
            *byte = (i as u8).wrapping_mul(31).wrapping_add(part);
        }
        let shared = loan.is_shared();
        let payload = loan.freeze();
        let expected = checksum(&payload);
        let summary = store.put(format!("part {part}"), payload).await?;
        assert_eq!(summary.checksum, expected, "the server read other bytes");
        println!(
            "part {part}: {} bytes, in shared memory: {shared}, checksum ok",
            summary.len
        );
    }
    println!(
        "payloads sent by reference: {}",
        store.object().traffic().payloads_lent
    );
    Ok(())
}
