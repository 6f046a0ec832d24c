//! See `lanner_shm::fuzzing::loan_returns`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lanner_shm::fuzzing::loan_returns(data));
