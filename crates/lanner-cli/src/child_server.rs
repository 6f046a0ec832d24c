//! A server running as a child process that says where it listens in one JSON object on
//! its first line of stdout, and stops when its stdin closes (`lanner serve`, and the peer
//! comparison's servers).

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// A running server process; dropping it closes its stdin, which stops it (killed if it
/// has not stopped 3 s later).
pub struct ChildServer {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl ChildServer {
    /// Starts `command` and waits for its first line of output; returns the process and
    /// that line as JSON. `what` names the server in errors.
    pub fn start(
        mut command: Command,
        what: &str,
    ) -> Result<(ChildServer, serde_json::Value), Box<dyn std::error::Error + Send + Sync>> {
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
                "the {what} process exited ({status}) before listening; its error is above"
            )
            .into());
        }
        let ready = serde_json::from_str(&line)
            .map_err(|e| format!("the {what} process did not start ({e}): {line:?}"))?;
        Ok((ChildServer { child, stdin }, ready))
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

    /// Waits up to `limit` for the server to exit on its own; its exit status, or `None`
    /// if it is still running (or cannot be waited for).
    pub fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return Some(status),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => return None,
            }
        }
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.kill();
    }
}
