//! See `lanner::fuzzing::lent_record`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lanner::fuzzing::lent_record(data));
