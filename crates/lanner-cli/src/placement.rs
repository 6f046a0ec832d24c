//! Pinning processes to CPUs, as the benchmark contract's `--placement` asks.

use clap::ValueEnum;

/// Where the client and server processes run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Placement {
    /// Client on CPU 0, server on CPU 1.
    Split,
    /// Both on CPU 0.
    Same,
    /// Wherever the OS puts them.
    Free,
}

impl Placement {
    /// The CPUs for (client, server).
    pub fn cpus(self) -> (Option<usize>, Option<usize>) {
        match self {
            Placement::Split => (Some(0), Some(1)),
            Placement::Same => (Some(0), Some(0)),
            Placement::Free => (None, None),
        }
    }

    /// The name used in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Placement::Split => "split",
            Placement::Same => "same",
            Placement::Free => "free",
        }
    }
}

/// Pins the calling thread (and the threads it creates later) to `cpu`. Fails with a
/// message naming the CPU (and how many this process may use) when it cannot be.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    let unusable = |why: String| {
        let usable = std::thread::available_parallelism().map_or(0, usize::from);
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "cannot pin to CPU {cpu}: {why} (this process may use {usable} CPUs; see \
                 `taskset -pc $$` or /sys/devices/system/cpu/online)"
            ),
        )
    };
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(unusable(format!(
            "CPU numbers go up to {}",
            libc::CPU_SETSIZE - 1
        )));
    }
    // SAFETY: `set` is a plain bitmask initialised by CPU_ZERO before use, `cpu` is below
    // CPU_SETSIZE (checked above), and sched_setaffinity only reads
    // `size_of::<cpu_set_t>()` bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(unusable(std::io::Error::last_os_error().to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_that_does_not_exist_is_named_in_the_error() {
        for cpu in [1000, 1 << 20] {
            let error = std::thread::spawn(move || pin_current_thread(cpu))
                .join()
                .unwrap()
                .unwrap_err();
            assert_eq!(error.kind(), std::io::ErrorKind::InvalidInput);
            assert!(error.to_string().contains(&format!("CPU {cpu}")), "{error}");
        }
    }
}
