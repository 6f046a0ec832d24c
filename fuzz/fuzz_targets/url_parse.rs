//! See `lanner::fuzzing::url_parse`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lanner::fuzzing::url_parse(data));
