//! See `lanner_proto::fuzzing::frame_decode`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| lanner_proto::fuzzing::frame_decode(data));
