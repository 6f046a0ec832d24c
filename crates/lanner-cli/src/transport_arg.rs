//! The `--transport` argument.

use clap::ValueEnum;

/// Transports that work between two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TransportArg {
    /// TCP on 127.0.0.1.
    Tcp,
    /// A Unix domain socket in the temporary directory.
    Unix,
    /// Shared memory (rings in a mapping shared by the two processes).
    Shm,
}

impl TransportArg {
    /// The name used on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            TransportArg::Tcp => "tcp",
            TransportArg::Unix => "unix",
            TransportArg::Shm => "shm",
        }
    }
}
