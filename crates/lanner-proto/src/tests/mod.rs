//! Protocol tests on the deterministic two-peer harness.
