//! The server side as a separate process: this executable re-run as `peers serve`,
//! pinned to its CPU, reporting its endpoint on its first line of stdout and stopping when
//! its stdin closes.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::Framework;
use crate::endpoint::{Endpoint, Transport};
use crate::workload::BoxError;

/// A running server process; dropping it closes its stdin, which stops it.
pub struct ServerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
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
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout from the server")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        if line.is_empty() {
            drop(stdin);
            let status = child.wait()?;
            return Err(format!(
                "the {} server process exited ({status}) before listening; its error is above",
                framework.name()
            )
            .into());
        }
        let ready: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| format!("the server process did not start ({e}): {line:?}"))?;
        let endpoint = ready["endpoint"]
            .as_str()
            .ok_or("the server did not report its endpoint")?
            .parse()?;
        Ok(ServerProcess {
            child,
            stdin,
            endpoint,
        })
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
