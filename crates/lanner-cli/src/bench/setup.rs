//! What every benchmark starts with: a pinned client, a server process, a Lanner connection
//! to its echo object and a raw connection beside it.

use crate::auth_arg::plain_client_auth;
use crate::placement::pin_current_thread;
use crate::server_process::ServerProcess;
use crate::services::EchoProxy;

use super::BenchArgs;
use super::raw_client::RawClient;

/// Both sides of a benchmark, connected.
pub struct Setup {
    /// The server process (stopped when dropped).
    pub server: ServerProcess,
    /// The client's runtime (current-thread, like a latency-critical caller's).
    pub runtime: tokio::runtime::Runtime,
    /// Lanner's connection to the echo object.
    pub echo: EchoProxy,
    /// The raw baseline's connection.
    pub raw: RawClient,
}

impl Setup {
    /// Pins this process, starts the server with the same placement and wait strategy,
    /// and connects both ways (authentication as [`plain_client_auth`] says: `none` over
    /// TCP, explicitly on both sides).
    pub fn start(args: &BenchArgs) -> Result<Setup, Box<dyn std::error::Error>> {
        let (client_cpu, server_cpu) = args.placement.cpus();
        if let Some(cpu) = client_cpu {
            pin_current_thread(cpu)?;
        }
        let spin = args.spin();
        let server = ServerProcess::spawn(args.transport, server_cpu, spin)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let options = lanner::ConnectionOptions::default().with_spin(spin);
        let client =
            lanner::Client::with_options(options).with_auth(plain_client_auth(args.transport));
        let url = format!("{}/echo", server.lanner);
        let echo: EchoProxy = runtime.block_on(client.connect::<EchoProxy>(&url))?;
        let raw = RawClient::connect(&server.raw, spin)?;
        Ok(Setup {
            server,
            runtime,
            echo,
            raw,
        })
    }
}
