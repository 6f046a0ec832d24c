#!/usr/bin/env bash
# Builds the `lanner` command (demo, bench, serve) with profile-guided optimisation and
# prints the binary's path. An instrumented build first runs a short training set of
# `lanner bench` workloads (server and client alike: the bench starts `lanner serve` from
# the same binary), then the release build uses the branch and call counts they recorded.
# See README.md, "Performance", for what it gains and how to do the same for an
# application (cargo-pgo).
#
# Needs llvm-profdata from the LLVM that rustc uses (`rustc -vV` names its version): the
# toolchain's own (`rustup component add llvm-tools`) or a distribution's (Debian:
# `apt-get install llvm-N`, which installs llvm-profdata-N). Everything is built in
# target/pgo (PGO_DIR to change it); takes a few minutes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${PGO_DIR:-$root/target/pgo}

llvm_major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=""
for candidate in "$(rustc --print sysroot)"/lib/rustlib/*/bin/llvm-profdata \
    "$(command -v "llvm-profdata-$llvm_major" || true)" \
    "$(command -v llvm-profdata || true)"; do
    if [ -x "$candidate" ] && "$candidate" --version 2>/dev/null | grep -q "version $llvm_major\."; then
        profdata=$candidate
        break
    fi
done
if [ -z "$profdata" ]; then
    echo "pgo-build: no llvm-profdata of LLVM $llvm_major (rustc's) found; install one:" >&2
    echo "  rustup component add llvm-tools   or   apt-get install llvm-$llvm_major" >&2
    exit 1
fi

echo "== instrumented build (target dir $out/gen)" >&2
rm -rf "$out/data"
mkdir -p "$out/data"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$out/data" \
    cargo build --release -p lanner-cli --target-dir "$out/gen" --manifest-path "$root/Cargo.toml" >&2

echo "== training runs" >&2
lanner=$out/gen/release/lanner
for transport in shm unix tcp; do
    "$lanner" bench pingpong --transport "$transport" --sizes 0,4096,65536 --iters 3000 --json >/dev/null
    "$lanner" bench throughput --transport "$transport" --concurrency 1,32 --secs 0.5 --json >/dev/null
done
"$lanner" bench bandwidth --transport shm --sizes 65536 --secs 0.5 --json >/dev/null
"$lanner" bench scale --objects 10000 --methods 200 --iters 3000 --json >/dev/null
"$lanner" bench firstcall --iters 50 --json >/dev/null
"$lanner" bench apartment --iters 3000 --json >/dev/null

"$profdata" merge -o "$out/merged.profdata" "$out/data"

echo "== optimised build (target dir $out/use)" >&2
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$out/merged.profdata" \
    cargo build --release -p lanner-cli --target-dir "$out/use" --manifest-path "$root/Cargo.toml" >&2
echo "$out/use/release/lanner"
