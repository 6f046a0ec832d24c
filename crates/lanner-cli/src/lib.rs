//! The library behind the `lanner` command: the demo and benchmark services, the raw
//! socket and shared-memory baselines, the benchmark drivers and the server process. Integration tests use it
//! to talk to a real `lanner serve` process.

pub mod auth_arg;
pub mod bench;
pub mod child_server;
pub mod demo;
pub mod pki;
pub mod placement;
pub mod procfs;
pub mod raw;
pub mod raw_pipeline;
pub mod raw_shm;
pub mod serve;
pub mod server_process;
pub mod services;
pub mod soak;
pub mod transport_arg;
