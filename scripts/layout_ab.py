#!/usr/bin/env python3
"""Compare two builds of Lanner with the code layout randomised, so that a difference of a
few nanoseconds means the change, not where the linker happened to put the code.

    python3 scripts/layout_ab.py HEAD~1 HEAD
    python3 scripts/layout_ab.py HEAD WORKTREE --seeds 8 --rounds 3
    python3 scripts/layout_ab.py A B --bench "pingpong --transport shm --sizes 0 --busy-poll"

Why: a null call's median moves by 20-40 ns with the layout of the same code, more than
most changes to the call path are worth (docs/decisions.md, thirty-second and
thirty-third sessions). Aligning every function to 64 bytes (.cargo/config.toml) fixes
where functions start, not where the loops and branches inside them fall, and two
builds of different code still differ there: changes that did less work measured 20-30
ns slower that way, and within 7 ns of the old build once this script randomised both.

How: each revision (a git revision, or WORKTREE for the working tree) is built once, in
a worktree of its own under /tmp/lanner-layout-ab, with functions aligned to 16 bytes
only and linked by lld with a reproduce archive. The archive is then linked again once
per seed with lld's --shuffle-sections, which puts the functions in a random order: each
lands at a random 16-byte offset within its cache line, so each layout is a sample.
Then the benchmark runs, alternating the two revisions layout by layout, round after
round (the host's speed drifts over minutes), and the script prints each revision's
mean and the paired difference with its standard error. Adding eight locked
increments to the serving path measured +80 ns (SE 7 ns) over shuffled layouts.

A cold build takes about four minutes per revision on two cores; each run of the
benchmark a few seconds. Nothing else should run meanwhile.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = "/tmp/lanner-layout-ab"


def run(cmd, **kwargs):
    return subprocess.run(cmd, check=True, **kwargs)


def toolchain_bin():
    sysroot = subprocess.check_output(["rustc", "--print", "sysroot"], text=True).strip()
    host = next(
        line.split(": ", 1)[1]
        for line in subprocess.check_output(["rustc", "-vV"], text=True).splitlines()
        if line.startswith("host: ")
    )
    return os.path.join(sysroot, "lib", "rustlib", host, "bin")


def source_tree(rev, name):
    """A checkout of `rev` (the working tree itself for WORKTREE)."""
    if rev == "WORKTREE":
        return ROOT
    tree = os.path.join(WORK, name, "tree")
    if os.path.exists(tree):
        run(["git", "-C", ROOT, "worktree", "remove", "--force", tree])
    run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", tree, rev])
    return tree


def build(rev, name, bin_dir):
    """Builds `rev` once and returns the directory of its lld reproduce archive."""
    tree = source_tree(rev, name)
    target = os.path.join(WORK, name, "target")
    archive = os.path.join(WORK, name, "repro.tar")
    env = dict(os.environ)
    env["CARGO_TARGET_DIR"] = target
    # Replaces .cargo/config.toml's 64-byte alignment: 16 lets the shuffle move code
    # within cache lines too.
    env["RUSTFLAGS"] = "-C llvm-args=-align-all-functions=4"
    # A fresh archive each time: cargo skips the link if nothing changed.
    if os.path.exists(archive):
        os.remove(archive)
    main_rs = os.path.join(tree, "crates", "lanner-cli", "src", "main.rs")
    os.utime(main_rs)
    print(f"building {rev} ({name}) in {tree}", file=sys.stderr)
    run(
        [
            "cargo", "rustc", "--release", "-p", "lanner-cli", "--bin", "lanner", "--",
            "-C", "link-arg=-fuse-ld=lld",
            "-C", f"link-arg=-B{os.path.join(bin_dir, 'gcc-ld')}",
            "-C", f"link-arg=-Wl,--reproduce={archive}",
        ],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    unpacked = os.path.join(WORK, name, "repro")
    shutil.rmtree(unpacked, ignore_errors=True)
    os.makedirs(unpacked)
    run(["tar", "xf", archive], cwd=unpacked)
    (inner,) = os.listdir(unpacked)
    return os.path.join(unpacked, inner)


def relink(repro, name, seeds, bin_dir):
    """Links the archive once per seed, with its functions in a shuffled order."""
    with open(os.path.join(repro, "response.txt")) as response:
        args = [
            line.rstrip("\n")
            for line in response
            if not line.startswith(("-plugin", "--chroot", "-o "))
        ]
    with open(os.path.join(repro, "args.txt"), "w") as out:
        out.write("\n".join(args) + "\n")
    binaries = {}
    for seed in seeds:
        binary = os.path.join(WORK, name, f"lanner-s{seed}")
        run(
            [
                os.path.join(bin_dir, "rust-lld"), "-flavor", "gnu", "@args.txt",
                f"--shuffle-sections=.text*={seed}", "-o", binary,
            ],
            cwd=repro,
        )
        binaries[seed] = binary
    return binaries


def measure(binary, bench, iters):
    out = subprocess.run(
        [binary, "bench", *bench.split(), "--iters", str(iters), "--json"],
        check=True, capture_output=True, text=True,
    ).stdout.strip().splitlines()[-1]
    row = json.loads(out)["rows"][0]
    if "rpc_p50_us" not in row:
        sys.exit(f"`lanner bench {bench}` reports no rpc_p50_us (its first row: {row}); "
                 "this script compares latency workloads such as pingpong")
    return row["rpc_p50_us"], row.get("ratio_p50")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", help="git revision, or WORKTREE")
    parser.add_argument("b", help="git revision, or WORKTREE")
    parser.add_argument("--seeds", type=int, default=8, help="layouts per revision")
    parser.add_argument("--rounds", type=int, default=3, help="runs per layout")
    parser.add_argument("--iters", type=int, default=100_000)
    parser.add_argument("--bench", default="pingpong --transport shm --sizes 0",
                        help="a `lanner bench` workload reporting rpc_p50_us (pingpong)")
    args = parser.parse_args()
    if args.a == args.b:
        parser.error("compare two different revisions (or a revision and WORKTREE)")

    bin_dir = toolchain_bin()
    seeds = list(range(1, args.seeds + 1))
    builds = {}
    for label, rev in (("a", args.a), ("b", args.b)):
        repro = build(rev, label, bin_dir)
        builds[label] = relink(repro, label, seeds, bin_dir)

    samples = {"a": [], "b": []}
    for round_ in range(args.rounds):
        for seed in seeds:
            for label in ("a", "b"):
                samples[label].append(measure(builds[label][seed], args.bench, args.iters))
            a, b = samples["a"][-1], samples["b"][-1]
            print(f"round {round_ + 1} layout {seed}: {args.a} {a[0]} µs, {args.b} {b[0]} µs",
                  file=sys.stderr)

    for label, rev in (("a", args.a), ("b", args.b)):
        rpc = [s[0] for s in samples[label]]
        ratio = [s[1] for s in samples[label] if s[1] is not None]
        line = f"{rev}: rpc_p50_us mean {statistics.mean(rpc):.4f} (n={len(rpc)})"
        if ratio:
            line += f", ratio_p50 mean {statistics.mean(ratio):.4f}"
        print(line)
    diffs = [b[0] - a[0] for a, b in zip(samples["a"], samples["b"])]
    se = statistics.stdev(diffs) / len(diffs) ** 0.5 if len(diffs) > 1 else float("nan")
    print(f"{args.b} - {args.a}: {statistics.mean(diffs) * 1000:+.1f} ns (standard error "
          f"{se * 1000:.1f} ns, {len(diffs)} pairs)")


if __name__ == "__main__":
    main()
