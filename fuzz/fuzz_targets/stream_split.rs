//! See `lanner_proto::fuzzing::stream_split`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| lanner_proto::fuzzing::stream_split(input));
