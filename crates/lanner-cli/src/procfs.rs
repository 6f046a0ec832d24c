//! Reading a process's memory figures and the machine's CPU pressure from `/proc`.

use std::io;

use serde::Serialize;

/// A `kB` field of `/proc/<process>/status` (`process` is a pid or `self`), in KiB; for
/// instance `VmRSS` (resident now) or `VmHWM` (peak resident).
pub fn status_kib(process: &str, field: &str) -> io::Result<u64> {
    let path = format!("/proc/{process}/status");
    let status = std::fs::read_to_string(&path)?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("no {field} in {path}")))
}

/// How much tasks on this machine recently waited for a CPU (Linux pressure stall
/// information, `/proc/pressure/cpu`): the share of time, in percent, during which at
/// least one runnable task was not running. On a quiet machine it is near 0 while a
/// benchmark's two processes spin on their own cores; a few percent means something else
/// competed for the CPUs and the figures of that run are noisier.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CpuPressure {
    /// Over the last 10 seconds.
    pub some_avg10: f64,
    /// Over the last 60 seconds.
    pub some_avg60: f64,
}

/// Reads [`CpuPressure`] now.
pub fn cpu_pressure() -> io::Result<CpuPressure> {
    parse_cpu_pressure(&std::fs::read_to_string("/proc/pressure/cpu")?)
}

fn parse_cpu_pressure(text: &str) -> io::Result<CpuPressure> {
    let some = text
        .lines()
        .find_map(|line| line.strip_prefix("some "))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no `some` line"))?;
    let field = |name: &str| {
        some.split_whitespace()
            .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
            .and_then(|value| value.parse().ok())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("no {name}")))
    };
    Ok(CpuPressure {
        some_avg10: field("avg10")?,
        some_avg60: field("avg60")?,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn cpu_pressure_is_read_from_the_some_line() {
        let text = "some avg10=0.28 avg60=3.95 avg300=7.93 total=13375957136\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        let pressure = super::parse_cpu_pressure(text).unwrap();
        assert_eq!(pressure.some_avg10, 0.28);
        assert_eq!(pressure.some_avg60, 3.95);
        assert!(super::parse_cpu_pressure("full avg10=0.00\n").is_err());
        assert!(super::parse_cpu_pressure("some avg60=1.0\n").is_err());
    }

    #[test]
    fn this_process_has_a_resident_size_and_a_peak() {
        let now = super::status_kib("self", "VmRSS").unwrap();
        let peak = super::status_kib("self", "VmHWM").unwrap();
        assert!(now > 0 && peak >= now, "{now} {peak}");
        assert!(super::status_kib("self", "NoSuchField").is_err());
    }
}
