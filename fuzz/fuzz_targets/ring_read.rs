//! See `lanner_shm::fuzzing::ring_read`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lanner_shm::fuzzing::ring_read(data));
