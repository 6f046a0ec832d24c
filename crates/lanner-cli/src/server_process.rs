//! Starting `lanner serve` as a child process and reading where it listens.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use crate::transport_arg::TransportArg;

/// A running server process; dropping it closes its stdin, which stops it.
pub struct ServerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Lanner's endpoint.
    pub lanner: String,
    /// The raw baseline's endpoint.
    pub raw: String,
}

impl ServerProcess {
    /// Starts this executable's `serve` on `transport`, pinned to `cpu`, with the given
    /// spin budget.
    pub fn spawn(
        transport: TransportArg,
        cpu: Option<usize>,
        spin: Duration,
    ) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        ServerProcess::spawn_program(&std::env::current_exe()?, transport, cpu, spin)
    }

    /// Starts `program serve` (a `lanner` executable) on `transport`.
    pub fn spawn_program(
        program: &std::path::Path,
        transport: TransportArg,
        cpu: Option<usize>,
        spin: Duration,
    ) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        ServerProcess::spawn_listening(program, transport, cpu, spin, None)
    }

    /// Starts `program serve` on `transport`, listening at `listen` if given (a server
    /// restarted with the same `listen` keeps its address).
    pub fn spawn_listening(
        program: &std::path::Path,
        transport: TransportArg,
        cpu: Option<usize>,
        spin: Duration,
        listen: Option<&str>,
    ) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        let mut command = Command::new(program);
        command
            .arg("serve")
            .args(["--transport", transport.name()])
            .args(["--spin-us", &spin.as_micros().to_string()]);
        if let Some(cpu) = cpu {
            command.args(["--cpu", &cpu.to_string()]);
        }
        if let Some(listen) = listen {
            command.args(["--listen", listen]);
        }
        ServerProcess::start(command)
    }

    /// Starts a prepared `lanner serve` command (for instance wrapped in
    /// `ip netns exec`) and waits until it says where it listens.
    pub fn start(mut command: Command) -> Result<ServerProcess, Box<dyn std::error::Error>> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn()?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().ok_or("no stdout from the server")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let ready: serde_json::Value = serde_json::from_str(&line)
            .map_err(|e| format!("the server process did not start ({e}): {line:?}"))?;
        let field = |name: &str| {
            ready[name]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("the server did not report its {name} endpoint"))
        };
        Ok(ServerProcess {
            lanner: field("lanner")?,
            raw: field("raw")?,
            child,
            stdin,
        })
    }

    /// Kills the server abruptly (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
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
