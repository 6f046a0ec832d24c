//! Starting `lanner serve` as a child process and reading where it listens.

use std::fmt;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::auth_arg::{AuthArg, PSK_ENV, psk_env_value};
use crate::child_server::ChildServer;
use crate::transport_arg::TransportArg;

/// How a `lanner serve` child authenticates its clients: its `--auth` and what goes with
/// it.
#[derive(Clone)]
pub enum ServeAuth {
    /// `--auth none`.
    None,
    /// `--auth peercred`.
    PeerCredentials,
    /// `--auth psk`, the key passed in the child's environment ([`PSK_ENV`]).
    Psk {
        /// The key's id.
        id: String,
        /// The secret (at least 16 bytes).
        secret: Vec<u8>,
    },
    /// `--auth tls` with these PEM files.
    Tls {
        /// `--tls-cert`.
        cert: PathBuf,
        /// `--tls-key`.
        key: PathBuf,
        /// `--tls-client-ca`, if client certificates are required.
        client_ca: Option<PathBuf>,
    },
}

impl fmt::Debug for ServeAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeAuth::Psk { id, .. } => write!(f, "Psk({id:?})"),
            ServeAuth::Tls {
                cert,
                key,
                client_ca,
            } => f
                .debug_struct("Tls")
                .field("cert", cert)
                .field("key", key)
                .field("client_ca", client_ca)
                .finish(),
            other => f.write_str(other.arg().name()),
        }
    }
}

impl ServeAuth {
    /// What benchmarks, the demo and tests use when authentication is not their subject:
    /// `none` over TCP (said explicitly, as TCP requires), peer credentials (the default)
    /// on local transports. Clients use [`crate::auth_arg::plain_client_auth`].
    pub fn plain(transport: TransportArg) -> ServeAuth {
        match transport {
            TransportArg::Tcp => ServeAuth::None,
            TransportArg::Unix | TransportArg::Shm => ServeAuth::PeerCredentials,
        }
    }

    /// The `--auth` value.
    pub fn arg(&self) -> AuthArg {
        match self {
            ServeAuth::None => AuthArg::None,
            ServeAuth::PeerCredentials => AuthArg::Peercred,
            ServeAuth::Psk { .. } => AuthArg::Psk,
            ServeAuth::Tls { .. } => AuthArg::Tls,
        }
    }

    /// Adds `--auth` and what it needs (options, or the key in the environment) to a
    /// `lanner serve` command.
    pub fn apply(&self, command: &mut Command) {
        command.args(["--auth", self.arg().name()]);
        match self {
            ServeAuth::Psk { id, secret } => {
                command.env(PSK_ENV, psk_env_value(id, secret));
            }
            ServeAuth::Tls {
                cert,
                key,
                client_ca,
            } => {
                command.arg("--tls-cert").arg(cert);
                command.arg("--tls-key").arg(key);
                if let Some(ca) = client_ca {
                    command.arg("--tls-client-ca").arg(ca);
                }
            }
            ServeAuth::None | ServeAuth::PeerCredentials => {}
        }
    }
}

/// A running server process; dropping it closes its stdin, which stops it.
pub struct ServerProcess {
    process: ChildServer,
    /// Lanner's endpoint.
    pub lanner: String,
    /// The raw baseline's endpoint.
    pub raw: String,
}

impl ServerProcess {
    /// Starts this executable's `serve` on `transport`, pinned to `cpu`, with the given
    /// spin budget, authenticating as [`ServeAuth::plain`] says.
    pub fn spawn(
        transport: TransportArg,
        cpu: Option<usize>,
        spin: Duration,
    ) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        ServerProcess::spawn_program(&std::env::current_exe()?, transport, cpu, spin)
    }

    /// Starts `program serve` (a `lanner` executable) on `transport`, authenticating as
    /// [`ServeAuth::plain`] says.
    pub fn spawn_program(
        program: &std::path::Path,
        transport: TransportArg,
        cpu: Option<usize>,
        spin: Duration,
    ) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        let auth = ServeAuth::plain(transport);
        ServerProcess::spawn_listening(program, transport, cpu, spin, None, &auth)
    }

    /// Starts this executable's `serve` on `transport` with `workers` runtime worker
    /// threads (see `lanner serve --workers`), pinned to `cpu`, authenticating as
    /// [`ServeAuth::plain`] says.
    pub fn spawn_workers(
        transport: TransportArg,
        cpu: Option<usize>,
        spin: Duration,
        workers: usize,
    ) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        let program = std::env::current_exe()?;
        let auth = ServeAuth::plain(transport);
        let mut command = ServerProcess::command(&program, transport, cpu, spin, &auth);
        command.args(["--workers", &workers.to_string()]);
        ServerProcess::start(command)
    }

    /// Starts `program serve` on `transport`, authenticating clients with `auth`.
    pub fn spawn_with_auth(
        program: &std::path::Path,
        transport: TransportArg,
        cpu: Option<usize>,
        spin: Duration,
        auth: &ServeAuth,
    ) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        ServerProcess::spawn_listening(program, transport, cpu, spin, None, auth)
    }

    /// Starts `program serve` on `transport`, listening at `listen` if given (a server
    /// restarted with the same `listen` keeps its address), authenticating with `auth`.
    pub fn spawn_listening(
        program: &std::path::Path,
        transport: TransportArg,
        cpu: Option<usize>,
        spin: Duration,
        listen: Option<&str>,
        auth: &ServeAuth,
    ) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        let mut command = ServerProcess::command(program, transport, cpu, spin, auth);
        if let Some(listen) = listen {
            command.args(["--listen", listen]);
        }
        ServerProcess::start(command)
    }

    /// The command line of `program serve` on `transport`, pinned to `cpu`, with the given
    /// spin budget, authenticating with `auth`: add options, then [`ServerProcess::start`].
    pub fn command(
        program: &std::path::Path,
        transport: TransportArg,
        cpu: Option<usize>,
        spin: Duration,
        auth: &ServeAuth,
    ) -> Command {
        let mut command = Command::new(program);
        command
            .arg("serve")
            .args(["--transport", transport.name()])
            .args(["--spin-us", &spin.as_micros().to_string()]);
        auth.apply(&mut command);
        if let Some(cpu) = cpu {
            command.args(["--cpu", &cpu.to_string()]);
        }
        command
    }

    /// Starts a prepared `lanner serve` command (for instance wrapped in
    /// `ip netns exec`) and waits until it says where it listens.
    pub fn start(command: Command) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        let (process, ready) =
            ChildServer::start(command, "server").map_err(|e| e as Box<dyn std::error::Error>)?;
        let field = |name: &str| {
            ready[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("the server did not report its {name} endpoint"))
        };
        Ok(ServerProcess {
            lanner: field("lanner")?,
            raw: field("raw")?,
            process,
        })
    }

    /// Kills the server abruptly (SIGKILL) and reaps it. The socket files of its Unix
    /// endpoints, which a killed server cannot remove, are removed here (a server that
    /// stops normally removes its own).
    pub fn kill(&mut self) {
        self.process.kill();
        for endpoint in [&self.lanner, &self.raw] {
            if let Some(path) = endpoint.strip_prefix("unix://") {
                let _ = std::fs::remove_file(path);
            }
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// Waits up to `limit` for the server to exit on its own (after a signal, say); its
    /// exit status, or `None` if it is still running.
    pub fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        self.process.exit_within(limit)
    }
}
