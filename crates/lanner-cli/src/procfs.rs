//! Reading a process's memory figures from `/proc`.

use std::io;

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

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_a_resident_size_and_a_peak() {
        let now = super::status_kib("self", "VmRSS").unwrap();
        let peak = super::status_kib("self", "VmHWM").unwrap();
        assert!(now > 0 && peak >= now, "{now} {peak}");
        assert!(super::status_kib("self", "NoSuchField").is_err());
    }
}
