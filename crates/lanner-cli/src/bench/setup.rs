//! What every benchmark starts with: a pinned client, a server process, a Lanner connection
//! to its echo object and a raw connection beside it.

use crate::auth_arg::plain_client_auth;
use crate::placement::pin_current_thread;
use crate::server_process::ServerProcess;
use crate::services::EchoProxy;
use crate::transport_arg::TransportArg;

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
        let client = ClientSide::start(args)?;
        let (server, echo) = client.echo_server(args.transport)?;
        let raw = RawClient::connect(&server.raw, client.spin)?;
        Ok(Setup {
            server,
            runtime: client.runtime,
            echo,
            raw,
        })
    }
}

/// The client half every benchmark starts with: this process pinned as the placement says,
/// a current-thread runtime (like a latency-critical caller's), and connection options with
/// the run's spin budget; plus where the server process goes.
pub struct ClientSide {
    /// The CPU to pin the server process to, if any.
    pub server_cpu: Option<usize>,
    /// The spin budget of both sides.
    pub spin: std::time::Duration,
    /// The client's runtime.
    pub runtime: tokio::runtime::Runtime,
    /// Options for the client's connections.
    pub options: lanner::ConnectionOptions,
}

impl ClientSide {
    /// Pins this process and builds its runtime.
    pub fn start(args: &BenchArgs) -> Result<ClientSide, Box<dyn std::error::Error>> {
        let (client_cpu, server_cpu) = args.placement.cpus();
        if let Some(cpu) = client_cpu {
            pin_current_thread(cpu)?;
        }
        let spin = args.spin();
        Ok(ClientSide {
            server_cpu,
            spin,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            options: lanner::ConnectionOptions::default().with_spin(spin),
        })
    }

    /// Starts the server process on `transport`, placed and waiting as this client says,
    /// and connects to its echo object (authentication as [`plain_client_auth`] says:
    /// `none` over TCP, explicitly on both sides).
    pub fn echo_server(
        &self,
        transport: TransportArg,
    ) -> Result<(ServerProcess, EchoProxy), Box<dyn std::error::Error>> {
        let server = ServerProcess::spawn(transport, self.server_cpu, self.spin)?;
        let client = lanner::Client::with_options(self.options.clone())
            .with_auth(plain_client_auth(transport));
        let url = format!("{}/echo", server.lanner);
        let echo = self.runtime.block_on(client.connect::<EchoProxy>(&url))?;
        Ok((server, echo))
    }
}
