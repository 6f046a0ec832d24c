#!/usr/bin/env bash
# Runs every cargo-fuzz target (lanner-proto's and lanner-shm's) for the given number of
# seconds each (default 60). Needs a nightly toolchain and cargo-fuzz
# (`cargo install cargo-fuzz`).
# Starts from the committed seeds in fuzz/seeds/<target>/ (regenerate with gen_seeds.py)
# plus whatever corpus earlier runs left. Crashes land in fuzz/artifacts/<target>/; the
# corpus grows in fuzz/corpus/<target>/. Neither of those two is committed.
# Extra arguments go to libFuzzer, e.g. `./run.sh 300 -max_len=8192`.
set -euo pipefail

seconds="${1:-60}"
shift || true
cd "$(dirname "$0")"

if ! [[ "$seconds" =~ ^[0-9]+$ ]]; then
    echo "usage: $0 [SECONDS] [LIBFUZZER ARGS...]" >&2
    exit 2
fi

targets=$(cargo +nightly fuzz list)
status=0
for target in $targets; do
    echo "=== fuzzing $target for ${seconds}s"
    mkdir -p "corpus/$target"
    seeds=()
    if [[ -d "seeds/$target" ]]; then
        seeds=("seeds/$target")
    fi
    if ! cargo +nightly fuzz run "$target" "corpus/$target" "${seeds[@]}" -- \
        -max_total_time="$seconds" "$@"; then
        echo "=== $target FAILED: see fuzz/artifacts/$target/" >&2
        status=1
    fi
done
exit "$status"
