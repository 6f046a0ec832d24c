#!/usr/bin/env python3
"""Lanner against its peers (tonic/gRPC, tarpc, capnp-rpc), in one run, on this machine.

Builds Lanner's CLI and the `peers` crate in release, runs `lanner bench pingpong` and
`lanner bench throughput` (when that workload exists) over tcp, unix and shm, runs the
same workloads with each peer over tcp and unix, and writes `docs/benchmarks.md`, PNG
plots in `docs/benchmarks/` and the raw JSON lines in `docs/benchmarks/results.jsonl`.

Prerequisites (Debian): `apt-get install -y protobuf-compiler capnproto` (protoc for tonic,
capnp for capnp-rpc), a Rust toolchain, python3 with venv; matplotlib is installed by this
script into a virtual environment under `peers/target/venv` (from PyPI). Without
matplotlib the report is written without plots.

Run from anywhere:  python3 peers/compare.py            (about 3-5 minutes after building)
                    python3 peers/compare.py --quick    (a smoke run: few calls, short)
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

PEERS = Path(__file__).resolve().parent
ROOT = PEERS.parent
VENV = PEERS / "target" / "venv"
LANNER = ROOT / "target" / "release" / "lanner"
PEERS_BIN = PEERS / "target" / "release" / "peers"
DOC = ROOT / "docs" / "benchmarks.md"
ASSETS = ROOT / "docs" / "benchmarks"

SIZES = [0, 4096, 65536, 1048576]
CONCURRENCY = 32
LANNER_TRANSPORTS = ["tcp", "unix", "shm"]
PEER_TRANSPORTS = ["tcp", "unix"]
FRAMEWORKS = ["tonic", "tarpc", "capnp"]
# Every benchmark command is bounded in time.
COMMAND_TIMEOUT_S = 600
REPRODUCE = "python3 peers/compare.py"
FRAMEWORK_LABEL = {
    "lanner": "Lanner",
    "raw": "raw socket (Lanner's baseline)",
    "tonic": "tonic (gRPC)",
    "tarpc": "tarpc",
    "capnp": "capnp-rpc",
}


def log(message):
    print(f"[compare] {message}", file=sys.stderr, flush=True)


def ensure_matplotlib(skip):
    """Re-executes this script in peers/target/venv with matplotlib, creating it if needed.

    Returns normally (without plots available) if that cannot be done."""
    if skip or os.environ.get("LANNER_COMPARE_IN_VENV"):
        return
    python = VENV / "bin" / "python"
    try:
        if not python.exists():
            log(f"creating a virtual environment for matplotlib in {VENV}")
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=300)
        probe = subprocess.run([str(python), "-c", "import matplotlib"], capture_output=True)
        if probe.returncode != 0:
            log("installing matplotlib into the virtual environment (PyPI)")
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "matplotlib"],
                check=True,
                timeout=600,
            )
    except (subprocess.SubprocessError, OSError) as error:
        log(f"no matplotlib ({error}); the report will have no plots")
        return
    env = dict(os.environ, LANNER_COMPARE_IN_VENV="1")
    os.execve(str(python), [str(python), str(Path(__file__).resolve()), *sys.argv[1:]], env)


def build(args):
    """Builds Lanner's CLI and the peers crate in release."""
    missing = [tool for tool in ("protoc", "capnp") if shutil.which(tool) is None]
    if missing:
        sys.exit(
            f"compare: {' and '.join(missing)} not found on PATH; the peers crate needs them "
            "to generate code. On Debian: apt-get install -y protobuf-compiler capnproto"
        )
    for command in (
        ["cargo", "build", "--release", "-p", "lanner-cli"],
        ["cargo", "build", "--release", "--manifest-path", str(PEERS / "Cargo.toml")],
    ):
        log("$ " + " ".join(command))
        subprocess.run(command, cwd=ROOT, check=True)


def run_json(command, what):
    """Runs a bench command that prints one JSON object; returns it, or an error string."""
    log(f"{what}: $ {' '.join(str(c) for c in command)}")
    started = time.monotonic()
    try:
        done = subprocess.run(
            [str(c) for c in command],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None, f"timed out after {COMMAND_TIMEOUT_S} s"
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        log(f"  failed ({done.returncode}): {detail}")
        return None, f"exit {done.returncode}: {detail}"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    try:
        report = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as error:
        return None, f"no JSON on stdout ({error})"
    log(f"  done in {time.monotonic() - started:.1f} s")
    return report, None


def lanner_has_throughput():
    """Whether this build of `lanner bench` knows the throughput workload."""
    done = subprocess.run(
        [str(LANNER), "bench", "throughput", "--help"], capture_output=True, text=True
    )
    return done.returncode == 0


def collect(args):
    """Runs every benchmark; returns (results, notes)."""
    results = []
    notes = []
    sizes = ",".join(str(s) for s in SIZES)
    timing = []
    if args.iters:
        timing += ["--iters", str(args.iters)]
    if args.warmup is not None:
        timing += ["--warmup", str(args.warmup)]
    secs = ["--secs", str(args.secs)]

    def record(framework, workload, transport, report, error):
        results.append(
            {
                "framework": framework,
                "workload": workload,
                "transport": transport,
                "report": report,
                "error": error,
            }
        )
        if error:
            notes.append(f"{framework} {workload} over {transport}: {error}")

    throughput = lanner_has_throughput()
    if not throughput:
        notes.append(
            "`lanner bench throughput` does not exist in this build of Lanner (the workload "
            "is being written on another branch): Lanner's throughput cells are n/a."
        )
        log("lanner bench throughput is not available: its cells will be n/a")
    for transport in LANNER_TRANSPORTS:
        report, error = run_json(
            [LANNER, "bench", "pingpong", "--transport", transport, "--sizes", sizes, "--json"]
            + timing,
            f"lanner pingpong {transport}",
        )
        record("lanner", "pingpong", transport, report, error)
        if throughput:
            report, error = run_json(
                [LANNER, "bench", "throughput", "--concurrency", str(CONCURRENCY),
                 "--transport", transport, "--json"] + secs,
                f"lanner throughput {transport}",
            )
            record("lanner", "throughput", transport, report, error)
    for framework in FRAMEWORKS:
        for transport in PEER_TRANSPORTS:
            common = ["--framework", framework, "--transport", transport, "--json"]
            report, error = run_json(
                [PEERS_BIN, "bench", "pingpong", "--sizes", sizes] + common + timing,
                f"{framework} pingpong {transport}",
            )
            record(framework, "pingpong", transport, report, error)
            report, error = run_json(
                [PEERS_BIN, "bench", "throughput", "--concurrency", str(CONCURRENCY)]
                + common + secs,
                f"{framework} throughput {transport}",
            )
            record(framework, "throughput", transport, report, error)
    return results, notes


# ---------------------------------------------------------------------------- the report


def table_data(results):
    """{(framework, transport): {"lat": {size: (p50, p99)}, "calls_s": x, "wait": w}}."""
    cells = {}

    def cell(framework, transport):
        return cells.setdefault(
            (framework, transport), {"lat": {}, "calls_s": None, "wait": None}
        )

    for result in results:
        report = result["report"]
        framework, transport = result["framework"], result["transport"]
        if report is None:
            cell(framework, transport)
            continue
        if result["workload"] == "pingpong":
            for row in report.get("rows", []):
                if framework == "lanner":
                    cell("lanner", transport)["lat"][row["size"]] = (
                        row["rpc_p50_us"], row["rpc_p99_us"])
                    cell("raw", transport)["lat"][row["size"]] = (
                        row["raw_p50_us"], row["raw_p99_us"])
                else:
                    cell(framework, transport)["lat"][row["size"]] = (
                        row["p50_us"], row["p99_us"])
            if framework == "lanner":
                cell("lanner", transport)["wait"] = report.get("wait")
                cell("raw", transport)["wait"] = report.get("wait")
            else:
                cell(framework, transport)["wait"] = report.get("wait")
        else:
            rows = report.get("rows", [])
            row = next((r for r in rows if r.get("concurrency") == CONCURRENCY),
                       rows[0] if rows else None)
            if row is None:
                continue
            if framework == "lanner":
                cell("lanner", transport)["calls_s"] = row.get("rpc_calls_s")
                cell("raw", transport)["calls_s"] = row.get("raw_msgs_s")
            else:
                cell(framework, transport)["calls_s"] = row.get("calls_s")
    return cells


def fmt_us(value):
    if value is None:
        return "n/a"
    return f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def fmt_rate(value):
    return "n/a" if value is None else f"{value:,.0f}"


def size_label(size):
    if size == 0:
        return "null"
    if size >= 1 << 20:
        return f"{size >> 20} MiB"
    if size >= 1 << 10:
        return f"{size >> 10} KiB"
    return f"{size} B"


def order(cells):
    frameworks = ["lanner", "raw"] + FRAMEWORKS
    transports = LANNER_TRANSPORTS
    return [(f, t) for t in transports for f in frameworks if (f, t) in cells]


def ratios(cells):
    """The issue's goals, as (description, value text, goal text, met?)."""
    def p50(framework, transport, size=0):
        lat = cells.get((framework, transport), {}).get("lat", {})
        return lat.get(size, (None, None))[0]

    def fastest(transports, key):
        best = None
        for framework in FRAMEWORKS:
            for transport in transports:
                value = key(framework, transport)
                if value is None:
                    continue
                if best is None or value[0] < best[0]:
                    best = (value[0], framework, transport)
        return best

    lines = []
    # 1. Lanner null-call p50 over tcp vs the fastest peer's over tcp.
    lanner_tcp = p50("lanner", "tcp")
    best_tcp = fastest(["tcp"], lambda f, t: (p50(f, t),) if p50(f, t) is not None else None)
    lines.append(ratio_line(
        "Lanner null-call p50 over tcp / fastest peer's null-call p50 over tcp",
        lanner_tcp, best_tcp, "≤ 0.33 (1/3)", lambda r: r <= 1 / 3, unit="µs"))
    # 2. Lanner shm vs the fastest peer's tcp or unix.
    lanner_shm = p50("lanner", "shm")
    best_any = fastest(PEER_TRANSPORTS,
                       lambda f, t: (p50(f, t),) if p50(f, t) is not None else None)
    lines.append(ratio_line(
        "Lanner null-call p50 over shm / fastest peer's null-call p50 over tcp or unix",
        lanner_shm, best_any, "≤ 0.033 (1/30)", lambda r: r <= 1 / 30, unit="µs"))
    # 3. Throughput at c=32: Lanner tcp vs the fastest peer's (per transport, and shm vs any).
    for transport, peer_transports in (("tcp", ["tcp"]), ("unix", ["unix"]),
                                       ("shm", PEER_TRANSPORTS)):
        mine = cells.get(("lanner", transport), {}).get("calls_s")
        best = fastest(peer_transports, lambda f, t: (
            -cells[(f, t)]["calls_s"],) if cells.get((f, t), {}).get("calls_s") else None)
        if best is not None:
            best = (-best[0], best[1], best[2])
        where = "tcp or unix" if transport == "shm" else transport
        lines.append(ratio_line(
            f"Lanner calls/s at c={CONCURRENCY} over {transport} / fastest peer's over {where}",
            mine, best, "≥ 3", lambda r: r >= 3, unit="calls/s"))
    return lines


def ratio_line(what, mine, best, goal, met, unit):
    if mine is None or best is None:
        missing = "Lanner's figure" if mine is None else "a peer figure"
        return f"| {what} | n/a ({missing} missing) | {goal} | n/a |"
    value, framework, transport = best
    ratio = mine / value
    fmt = fmt_us if unit == "µs" else fmt_rate
    detail = (f"{ratio:.2f} ({fmt(mine)} vs {fmt(value)} {unit}, "
              f"{FRAMEWORK_LABEL[framework]} over {transport})")
    return f"| {what} | {detail} | {goal} | {'yes' if met(ratio) else '**no**'} |"


def machine():
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / (1 << 20):.0f} GiB"
    except OSError:
        pass
    rustc = subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory": mem,
        "kernel": platform.release(),
        "rustc": rustc or "unknown",
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def plots(cells):
    """Writes the PNGs; returns their file names (empty without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    ASSETS.mkdir(parents=True, exist_ok=True)
    colors = {"lanner": "tab:red", "raw": "tab:gray", "tonic": "tab:blue",
              "tarpc": "tab:green", "capnp": "tab:purple"}
    written = []
    transports = [t for t in LANNER_TRANSPORTS if any(k[1] == t for k in cells)]
    fig, axes = plt.subplots(1, len(transports), figsize=(5.2 * len(transports), 4.6),
                             sharey=True, squeeze=False)
    for ax, transport in zip(axes[0], transports):
        for framework in ["lanner", "raw"] + FRAMEWORKS:
            lat = cells.get((framework, transport), {}).get("lat", {})
            points = [(i, lat[s]) for i, s in enumerate(SIZES) if s in lat]
            if not points:
                continue
            xs = [i for i, _ in points]
            ax.plot(xs, [v[0] for _, v in points], marker="o", color=colors[framework],
                    label=f"{FRAMEWORK_LABEL[framework]} p50")
            ax.plot(xs, [v[1] for _, v in points], linestyle="--", marker=".",
                    color=colors[framework], alpha=0.6, label=f"{FRAMEWORK_LABEL[framework]} p99")
        ax.set_yscale("log")
        ax.set_xticks(range(len(SIZES)), [size_label(s) for s in SIZES])
        ax.set_title(f"over {transport}")
        ax.set_xlabel("payload (echoed both ways)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("round trip (µs, log scale)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    for ax in axes[0][1:]:
        for h, l in zip(*ax.get_legend_handles_labels()):
            if l not in labels:
                handles.append(h)
                labels.append(l)
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8)
    fig.suptitle("Sequential echo calls: latency vs payload size (client CPU 0, server CPU 1)")
    fig.tight_layout(rect=(0, 0.14, 1, 1))
    fig.savefig(ASSETS / "latency.png", dpi=110)
    plt.close(fig)
    written.append("latency.png")

    fig, ax = plt.subplots(figsize=(9, 4.6))
    frameworks = ["lanner", "raw"] + FRAMEWORKS
    width = 0.8 / len(frameworks)
    for i, framework in enumerate(frameworks):
        xs, ys = [], []
        for j, transport in enumerate(transports):
            value = cells.get((framework, transport), {}).get("calls_s")
            if value:
                xs.append(j + (i - (len(frameworks) - 1) / 2) * width)
                ys.append(value)
        if xs:
            label = FRAMEWORK_LABEL[framework]
            if framework == "raw":
                label = "raw pipelined echo (Lanner's baseline)"
            ax.bar(xs, ys, width, color=colors[framework], label=label)
    ax.set_xticks(range(len(transports)), transports)
    ax.set_yscale("log")
    ax.set_ylabel("null calls per second (log scale)")
    ax.set_title(f"Throughput: null calls, {CONCURRENCY} outstanding on one connection")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ASSETS / "throughput.png", dpi=110)
    plt.close(fig)
    written.append("throughput.png")
    return written


def write_doc(results, notes, started, args, images):
    cells = table_data(results)
    info = machine()
    out = []
    w = out.append
    w("# Benchmarks: Lanner and its peers")
    w("")
    w(f"Generated by `{REPRODUCE}` on {started:%Y-%m-%d %H:%M} UTC"
      + (" (a **quick** smoke run: few calls, not for comparison)" if args.quick else "")
      + ". Every number below comes from that one run, on this machine, with every")
    w("framework measured the same way: the server in a separate process, the client pinned")
    w("to CPU 0 and the server to CPU 1 (`--placement split`), a current-thread Tokio runtime")
    w("in the client, release builds, servers on loopback (127.0.0.1 or a Unix socket in")
    w("/tmp). Latency is the p50/p99 of sequential echo calls after a warm-up (10 000 calls")
    w("per size, 1 000 warm-up, fewer for 1 MiB so that no size moves more than 1 GiB);")
    w(f"throughput is null calls with {CONCURRENCY} outstanding on one connection, counted")
    w(f"over {args.secs:g} s after a warm-up.")
    w("")
    w("## Machine")
    w("")
    w(f"- {info['cores']} cores: {info['cpu']}; {info['memory']} of memory")
    w(f"- Linux {info['kernel']}; {info['rustc']}")
    w(f"- load average when the run started: {info['load']}")
    w("")
    w("**Noise.** This is a shared 2-vCPU virtual machine and other builds were running")
    w("during the run, so absolute numbers move by tens of percent between runs, and p99s")
    w("more than that. Compare frameworks within one run (this page), not across runs.")
    w("")
    w("## Side by side")
    w("")
    w("Round trip in µs (p50 / p99) of an echo of the given payload, and null calls per")
    w(f"second with {CONCURRENCY} outstanding on one connection.")
    w("")
    header = "| framework | transport | " + " | ".join(
        f"{size_label(s)} p50 / p99" for s in SIZES) + f" | calls/s (c={CONCURRENCY}) |"
    w(header)
    w("|" + "---|" * (3 + len(SIZES)))
    for framework, transport in order(cells):
        cell = cells[(framework, transport)]
        lat = cell["lat"]
        cols = []
        for s in SIZES:
            if s in lat:
                cols.append(f"{fmt_us(lat[s][0])} / {fmt_us(lat[s][1])}")
            else:
                cols.append("n/a")
        name = FRAMEWORK_LABEL[framework]
        if framework == "lanner":
            name = "**Lanner**"
        w(f"| {name} | {transport} | " + " | ".join(cols)
          + f" | {fmt_rate(cell['calls_s'])} |")
    w("")
    w("The raw socket rows are Lanner's own baseline from the same `lanner bench` run: the")
    w("same payload ping-ponged (or, for throughput, a pipelined echo) on the same medium with")
    w("no RPC code, and the same wait strategy as Lanner.")
    w("")
    waits = {(f, t): c["wait"] for (f, t), c in cells.items() if c["wait"]}
    lanner_wait = next((v for (f, _), v in waits.items() if f == "lanner"), None)
    w("**Wait strategies.** "
      + (f"Lanner (and its raw baseline): {lanner_wait}. " if lanner_wait else "")
      + "The peers: their defaults, i.e. Tokio's epoll, which sleeps as soon as there is")
    w("nothing to read. On this VM waking a sleeping thread on the other vCPU costs tens of")
    w("microseconds, so part of Lanner's lead at small sizes is its spin-then-sleep wait,")
    w("not only its protocol. Servers: tonic and tarpc on a multi-thread Tokio runtime;")
    w("capnp-rpc on a current-thread runtime with a `LocalSet` (it is single-threaded by")
    w("design); Lanner on its own server loop.")
    w("")
    w("## Goals of the issue")
    w("")
    w("| ratio | this run | goal | met |")
    w("|---|---|---|---|")
    for line in ratios(cells):
        w(line)
    w("")
    if images:
        w("## Plots")
        w("")
        if "latency.png" in images:
            w("Latency vs payload size, per transport (log scale; solid p50, dashed p99):")
            w("")
            w("![latency vs payload size](benchmarks/latency.png)")
            w("")
        if "throughput.png" in images:
            w(f"Null calls per second with {CONCURRENCY} outstanding on one connection (log scale):")
            w("")
            w("![throughput](benchmarks/throughput.png)")
            w("")
    else:
        w("_No plots: matplotlib was not available in this run._")
        w("")
    w("## What each peer runs")
    w("")
    w("- **tonic (gRPC)** 0.14 over HTTP/2 with prost messages (`bytes` fields as `Bytes`);")
    w("  `TCP_NODELAY`; HTTP/2 windows of 4 MiB per stream and 8 MiB per connection (the 64 KiB")
    w("  defaults throttle 1 MiB messages); message size limits raised to 64 MiB. Over Unix")
    w("  sockets it serves with `serve_with_incoming` and connects with a custom connector.")
    w("- **tarpc** 0.38 with its serde transport: bincode in length-delimited frames (limit")
    w("  raised to 64 MiB), default client and server configuration, each request in its own")
    w("  task.")
    w("- **capnp-rpc** 0.27, two-party RPC over buffered streams, default reader limits.")
    w("")
    w("Source: `peers/` (not a member of the Lanner workspace; see `peers/README.md`).")
    w("")
    if notes:
        w("## Notes from this run")
        w("")
        for note in notes:
            w(f"- {note}")
        w("")
    w("## Reproduce")
    w("")
    w("```sh")
    w("apt-get install -y protobuf-compiler capnproto   # protoc (tonic), capnp (capnp-rpc)")
    w(REPRODUCE + "   # builds both in release, runs everything, rewrites this page")
    w("```")
    w("")
    w("It runs, for each transport: `target/release/lanner bench pingpong --transport T "
      f"--sizes {','.join(map(str, SIZES))} --json`,")
    w(f"`target/release/lanner bench throughput --concurrency {CONCURRENCY} --transport T "
      "--json` (when the workload exists),")
    w("and `peers/target/release/peers bench pingpong|throughput --framework F --transport T "
      "--json`. The raw JSON of this run is in")
    w("[`benchmarks/results.jsonl`](benchmarks/results.jsonl).")
    w("")
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text("\n".join(out))
    log(f"wrote {DOC.relative_to(ROOT)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 500 calls per size, 0.5 s of throughput")
    parser.add_argument("--iters", type=int, help="measured calls per size (default: the benches')")
    parser.add_argument("--warmup", type=int, help="warm-up calls per size")
    parser.add_argument("--secs", type=float, default=2.0, help="seconds of throughput")
    parser.add_argument("--skip-build", action="store_true", help="use the binaries as built")
    parser.add_argument("--no-plots", action="store_true", help="skip matplotlib")
    args = parser.parse_args()
    if args.quick:
        args.iters = args.iters or 500
        args.warmup = 100 if args.warmup is None else args.warmup
        args.secs = 0.5
    ensure_matplotlib(args.no_plots)
    started = datetime.datetime.now(datetime.timezone.utc)
    if not args.skip_build:
        build(args)
    for binary in (LANNER, PEERS_BIN):
        if not binary.exists():
            sys.exit(f"compare: {binary} is missing; run without --skip-build")
    results, notes = collect(args)
    ASSETS.mkdir(parents=True, exist_ok=True)
    with open(ASSETS / "results.jsonl", "w") as out:
        for result in results:
            out.write(json.dumps(result) + "\n")
    images = [] if args.no_plots else plots(table_data(results))
    write_doc(results, notes, started, args, images)
    failed = [r for r in results if r["error"]]
    if failed:
        log(f"{len(failed)} benchmark(s) failed; see the notes in {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
