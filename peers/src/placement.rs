//! Pinning processes to CPUs, exactly as `lanner bench --placement` does.

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

/// Pins the calling thread (and the threads it creates later) to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: `set` is a plain bitmask initialised by CPU_ZERO before use, and
    // sched_setaffinity only reads `size_of::<cpu_set_t>()` bytes from it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
