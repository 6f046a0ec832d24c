//! The server side as a separate process: this executable re-run as `peers serve`,
//! pinned to its CPU, reporting its endpoint on its first line of stdout and stopping when
//! its stdin closes.

use std::process::Command;

use lanner_cli::child_server::ChildServer;

use crate::Framework;
use crate::endpoint::{Endpoint, Transport};
use crate::workload::BoxError;

/// A running server process; dropping it closes its stdin, which stops it.
pub struct ServerProcess {
    /// Held: dropping it stops the server (lanner-cli's child-server plumbing, shared with
    /// `lanner bench`).
    _process: ChildServer,
    /// Where it listens.
    pub endpoint: Endpoint,
}

impl ServerProcess {
    /// Starts `peers serve` for `framework` on `transport`, pinned to `cpu` if given, and
    /// waits until it says where it listens.
    pub fn spawn(
        framework: Framework,
        transport: Transport,
        cpu: Option<usize>,
    ) -> Result<ServerProcess, BoxError> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .arg("serve")
            .args(["--framework", framework.name()])
            .args(["--transport", transport.name()]);
        if let Some(cpu) = cpu {
            command.args(["--cpu", &cpu.to_string()]);
        }
        let (process, ready) =
            ChildServer::start(command, &format!("{} server", framework.name()))?;
        let endpoint = ready["endpoint"]
            .as_str()
            .ok_or("the server did not report its endpoint")?
            .parse()?;
        Ok(ServerProcess {
            _process: process,
            endpoint,
        })
    }
}
