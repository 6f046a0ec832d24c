//! CPU use of connected but silent processes: once the spin budget has passed, a waiting
//! side must sleep, so idle connections cost (almost) nothing.

use std::time::{Duration, Instant};

use serde::Serialize;

use super::stats::round1;

/// CPU use of both processes while their connections were open and silent.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct IdleCpu {
    /// How long the connections were silent.
    pub secs: f64,
    /// CPU time of the client process over that time, in percent of one core.
    pub client_percent: f64,
    /// CPU time of the server process over that time, in percent of one core.
    pub server_percent: f64,
}

/// Waits `secs` without sending anything and reports the CPU both processes used. The
/// waiting is done inside `runtime` (the client's), so that its connections' readers and
/// timers run as they would in an idle program: waiting outside it would freeze them and
/// report the client's idle CPU as zero whatever they do.
pub fn measure(
    runtime: &tokio::runtime::Runtime,
    server_pid: u32,
    secs: f64,
) -> std::io::Result<IdleCpu> {
    let sleep = |duration: Duration| runtime.block_on(async { tokio::time::sleep(duration).await });
    // Let the spin budgets run out first; they are microseconds, this is plenty.
    sleep(Duration::from_millis(50));
    let client_before = cpu_ticks("self")?;
    let server_before = cpu_ticks(&server_pid.to_string())?;
    let start = Instant::now();
    sleep(Duration::from_secs_f64(secs));
    let elapsed = start.elapsed().as_secs_f64();
    let client = cpu_ticks("self")? - client_before;
    let server = cpu_ticks(&server_pid.to_string())? - server_before;
    let percent = |ticks: u64| round1(ticks as f64 / ticks_per_second() / elapsed * 100.0);
    Ok(IdleCpu {
        secs: round1(elapsed),
        client_percent: percent(client),
        server_percent: percent(server),
    })
}

/// User plus system time of a process, in clock ticks (`/proc/<pid>/stat`).
pub(crate) fn cpu_ticks(pid: &str) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may contain spaces) end with ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |index: usize| fields.get(index).and_then(|f| f.parse::<u64>().ok());
    // utime and stime are fields 14 and 15 of the line; 12 and 13 after the name.
    match (field(11), field(12)) {
        (Some(user), Some(system)) => Ok(user + system),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("cannot read CPU times from /proc/{pid}/stat"),
        )),
    }
}

pub(crate) fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 { ticks as f64 } else { 100.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_cpu_times() {
        let before = cpu_ticks("self").unwrap();
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(100) {
            x = x.wrapping_add(std::hint::black_box(1));
        }
        assert!(x > 0);
        assert!(cpu_ticks("self").unwrap() >= before);
        assert!(cpu_ticks("0").is_err(), "no process 0 in /proc");
    }
}
