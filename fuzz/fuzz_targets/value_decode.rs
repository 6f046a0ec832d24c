//! See `lanner::fuzzing::value_decode`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lanner::fuzzing::value_decode(data));
