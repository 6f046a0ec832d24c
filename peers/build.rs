//! Generates the gRPC (tonic/prost) and Cap'n Proto code of the echo service.
//!
//! Needs `protoc` (Debian: `protobuf-compiler`) and `capnp` (Debian: `capnproto`) on the
//! PATH; see `README.md`.

fn main() {
    println!("cargo:rerun-if-changed=proto/bench.proto");
    println!("cargo:rerun-if-changed=schema/bench.capnp");
    if let Err(error) = tonic_prost_build::configure()
        .bytes(".")
        .compile_protos(&["proto/bench.proto"], &["proto"])
    {
        panic!(
            "could not generate the gRPC code from proto/bench.proto ({error}); \
             is protoc installed? (Debian: apt-get install -y protobuf-compiler)"
        );
    }
    if let Err(error) = capnpc::CompilerCommand::new()
        .src_prefix("schema")
        // Included as `crate::capnp_bench::bench_capnp`.
        .default_parent_module(vec!["capnp_bench".into()])
        .file("schema/bench.capnp")
        .run()
    {
        panic!(
            "could not generate the Cap'n Proto code from schema/bench.capnp ({error}); \
             is capnp installed? (Debian: apt-get install -y capnproto)"
        );
    }
}
