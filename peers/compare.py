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
import textwrap
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
# The table and the goals use c=32; the sweep feeds the throughput-vs-concurrency plot.
CONCURRENCY = 32
SWEEP = [1, 8, 32, 128]
LANNER_TRANSPORTS = ["tcp", "unix", "shm"]
PEER_TRANSPORTS = ["tcp", "unix"]
FRAMEWORKS = ["tonic", "tarpc", "capnp"]
# Every benchmark command is bounded in time.
COMMAND_TIMEOUT_S = 600
REPRODUCE = "python3 peers/compare.py"
# Lanner runs twice over tcp and unix: with its default wait (spin, then sleep) and with
# --spin-us 0 (sleep at once, like the peers' Tokio/epoll), each with its raw baseline.
LANNER_VARIANTS = [("lanner", [], LANNER_TRANSPORTS), ("lanner-block", ["--spin-us", "0"], PEER_TRANSPORTS)]
ROW_ORDER = ["lanner", "raw", "lanner-block", "raw-block"] + FRAMEWORKS
FRAMEWORK_LABEL = {
    "lanner": "Lanner",
    "raw": "raw socket (Lanner's baseline)",
    "lanner-block": "Lanner, blocking wait",
    "raw-block": "raw socket, blocking wait",
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
    commands = [["cargo", "build", "--release", "--manifest-path", str(PEERS / "Cargo.toml")]]
    if args.lanner == LANNER:
        commands.insert(0, ["cargo", "build", "--release", "-p", "lanner-cli"])
    for command in commands:
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


def lanner_has_throughput(lanner):
    """Whether this build of `lanner bench` knows the throughput workload."""
    done = subprocess.run(
        [str(lanner), "bench", "throughput", "--help"], capture_output=True, text=True
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

    lanner = args.lanner
    throughput = lanner_has_throughput(lanner)
    if not throughput:
        notes.append(
            "`lanner bench throughput` does not exist in this build of Lanner (the workload "
            "is being written on another branch): Lanner's throughput cells are n/a."
        )
        log("lanner bench throughput is not available: its cells will be n/a")
    sweep = ",".join(str(c) for c in args.concurrency)
    for framework, options, transports in LANNER_VARIANTS:
        for transport in transports:
            report, error = run_json(
                [lanner, "bench", "pingpong", "--transport", transport, "--sizes", sizes,
                 "--json"] + options + timing,
                f"{framework} pingpong {transport}",
            )
            record(framework, "pingpong", transport, report, error)
            if throughput:
                command = [lanner, "bench", "throughput", "--transport", transport,
                           "--json"] + options + secs
                report, error = run_json(command + ["--concurrency", sweep],
                                         f"{framework} throughput {transport}")
                if error and sweep != str(CONCURRENCY):
                    # Perhaps this build takes one concurrency only.
                    report, error = run_json(command + ["--concurrency", str(CONCURRENCY)],
                                             f"{framework} throughput {transport}, c=32 only")
                record(framework, "throughput", transport, report, error)
    for framework in FRAMEWORKS:
        for transport in PEER_TRANSPORTS:
            common = ["--framework", framework, "--transport", transport, "--json"]
            report, error = run_json(
                [PEERS_BIN, "bench", "pingpong", "--sizes", sizes] + common + timing,
                f"{framework} pingpong {transport}",
            )
            record(framework, "pingpong", transport, report, error)
            report, error = run_json(
                [PEERS_BIN, "bench", "throughput", "--concurrency", sweep]
                + common + secs,
                f"{framework} throughput {transport}",
            )
            record(framework, "throughput", transport, report, error)
    return results, notes


# ---------------------------------------------------------------------------- the report


def table_data(results):
    """{(framework, transport): {"lat": {size: (p50, p99)}, "tput": {c: calls/s},
    "calls_s": calls/s at CONCURRENCY or None, "wait": w}}; Lanner's rows also give their
    raw baseline's ("raw" or "raw-block")."""
    cells = {}

    def cell(framework, transport):
        return cells.setdefault(
            (framework, transport), {"lat": {}, "tput": {}, "calls_s": None, "wait": None}
        )

    for result in results:
        report = result["report"]
        framework, transport = result["framework"], result["transport"]
        lanner = framework.startswith("lanner")
        raw = framework.replace("lanner", "raw")
        cell(framework, transport)
        if report is None:
            continue
        if lanner:
            cell(raw, transport)["wait"] = report.get("wait")
        cell(framework, transport)["wait"] = report.get("wait")
        for row in report.get("rows", []):
            if result["workload"] == "pingpong":
                if lanner:
                    cell(framework, transport)["lat"][row["size"]] = (
                        row["rpc_p50_us"], row["rpc_p99_us"])
                    cell(raw, transport)["lat"][row["size"]] = (
                        row["raw_p50_us"], row["raw_p99_us"])
                else:
                    cell(framework, transport)["lat"][row["size"]] = (
                        row["p50_us"], row["p99_us"])
            elif "concurrency" in row:
                c = row["concurrency"]
                if lanner:
                    cell(framework, transport)["tput"][c] = row.get("rpc_calls_s")
                    cell(raw, transport)["tput"][c] = row.get("raw_msgs_s")
                else:
                    cell(framework, transport)["tput"][c] = row.get("calls_s")
    for value in cells.values():
        value["calls_s"] = value["tput"].get(CONCURRENCY)
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
    return [(f, t) for t in LANNER_TRANSPORTS for f in ROW_ORDER if (f, t) in cells]


def ratios(cells):
    """The issue's goals as table lines: | ratio | this run | goal | met |."""
    def p50(framework, transport):
        return cells.get((framework, transport), {}).get("lat", {}).get(0, (None, None))[0]

    def calls(framework, transport):
        return cells.get((framework, transport), {}).get("calls_s")

    def best(value, transports, pick):
        """The peers' best (value, framework, transport) over `transports`, or None."""
        found = [(value(f, t), f, t) for f in FRAMEWORKS for t in transports
                 if value(f, t) is not None]
        return pick(found) if found else None

    lines = []
    for lanner, label in (("lanner", "Lanner"), ("lanner-block", "Lanner (blocking wait)")):
        lines.append(ratio_line(
            f"{label} null-call p50 over tcp / fastest peer's over tcp",
            p50(lanner, "tcp"), best(p50, ["tcp"], min), 1 / 3, "≤ 1/3", less=True,
            unit="µs"))
    lines.append(ratio_line(
        "Lanner null-call p50 over shm / fastest peer's over tcp or unix",
        p50("lanner", "shm"), best(p50, PEER_TRANSPORTS, min), 1 / 30, "≤ 1/30", less=True,
        unit="µs"))
    for transport, peer_transports in (("tcp", ["tcp"]), ("unix", ["unix"]),
                                       ("shm", PEER_TRANSPORTS)):
        where = "tcp or unix" if transport == "shm" else transport
        lines.append(ratio_line(
            f"Lanner calls/s at c={CONCURRENCY} over {transport} / fastest peer's over {where}",
            calls("lanner", transport), best(calls, peer_transports, max), 3, "≥ 3",
            less=False, unit="calls/s"))
    return lines


def ratio_line(what, mine, best, goal, goal_text, less, unit):
    if mine is None or best is None:
        missing = "Lanner's figure" if mine is None else "the peers' figures"
        return f"| {what} | n/a ({missing} missing) | {goal_text} | n/a |"
    value, framework, transport = best
    ratio = mine / value
    met = ratio <= goal if less else ratio >= goal
    fmt = fmt_us if unit == "µs" else fmt_rate
    shown = f"{ratio:.3f}" if ratio < 1 else f"{ratio:.2f}"
    if ratio < 1:
        shown += f" (1/{1 / ratio:.1f})"
    detail = (f"{shown}: {fmt(mine)} vs {fmt(value)} {unit} "
              f"({FRAMEWORK_LABEL[framework]} over {transport})")
    return f"| {what} | {detail} | {goal_text} | {'yes' if met else '**no**'} |"


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


COLORS = {"lanner": "tab:red", "raw": "tab:gray", "lanner-block": "tab:orange",
          "raw-block": "black", "tonic": "tab:blue", "tarpc": "tab:green",
          "capnp": "tab:purple"}


def plots(cells):
    """Writes the PNGs; returns their file names (empty without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    ASSETS.mkdir(parents=True, exist_ok=True)
    written = []
    transports = [t for t in LANNER_TRANSPORTS if any(k[1] == t for k in cells)]

    for index, name in ((0, "p50"), (1, "p99")):
        fig, axes = plt.subplots(1, len(transports), figsize=(5.2 * len(transports), 4.8),
                                 sharey=True, squeeze=False)
        for ax, transport in zip(axes[0], transports):
            for framework in ROW_ORDER:
                lat = cells.get((framework, transport), {}).get("lat", {})
                points = [(i, lat[s][index]) for i, s in enumerate(SIZES) if s in lat]
                if not points:
                    continue
                dashed = framework.startswith("raw")
                ax.plot([i for i, _ in points], [v for _, v in points], marker="o",
                        linestyle="--" if dashed else "-", color=COLORS[framework],
                        label=FRAMEWORK_LABEL[framework])
            ax.set_yscale("log")
            ax.set_xticks(range(len(SIZES)), [size_label(s) for s in SIZES])
            ax.set_title(f"over {transport}")
            ax.set_xlabel("payload (echoed both ways)")
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].set_ylabel(f"{name} round trip (µs, log scale)")
        seen = {}
        for ax in axes[0]:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                seen.setdefault(label, handle)
        fig.legend(list(seen.values()), list(seen.keys()), loc="lower center", ncol=4,
                   fontsize=8)
        fig.suptitle(f"Sequential echo calls, {name}: latency vs payload size "
                     "(client on CPU 0, server on CPU 1)")
        fig.tight_layout(rect=(0, 0.12, 1, 1))
        fig.savefig(ASSETS / f"latency_{name}.png", dpi=100)
        plt.close(fig)
        written.append(f"latency_{name}.png")

    # Throughput at c=32: bars per framework, grouped by transport.
    fig, ax = plt.subplots(figsize=(10, 4.8))
    frameworks = [f for f in ROW_ORDER if any(cells.get((f, t), {}).get("calls_s")
                                              for t in transports)]
    width = 0.8 / max(len(frameworks), 1)
    for i, framework in enumerate(frameworks):
        for j, transport in enumerate(transports):
            value = cells.get((framework, transport), {}).get("calls_s")
            if not value:
                continue
            x = j + (i - (len(frameworks) - 1) / 2) * width
            ax.bar(x, value, width, color=COLORS[framework],
                   label=FRAMEWORK_LABEL[framework] if j == transports.index(
                       next(t for t in transports
                            if cells.get((framework, t), {}).get("calls_s"))) else None)
            ax.annotate(f"{value / 1000:.0f}k", (x, value), ha="center", va="bottom",
                        fontsize=7)
    values = [cells[k]["calls_s"] for k in cells if cells[k]["calls_s"]]
    if values:
        ax.set_ylim(min(values) / 1.5, max(values) * 3)
    if not any(cells.get(("lanner", t), {}).get("calls_s") for t in transports):
        ax.text(0.5, 0.93, "Lanner: n/a (no `lanner bench throughput` in this build)",
                transform=ax.transAxes, ha="center", fontsize=9, color=COLORS["lanner"])
    ax.set_xticks(range(len(transports)), transports)
    ax.set_yscale("log")
    ax.set_ylabel("null calls per second (log scale)")
    ax.set_title(f"Throughput: null calls, {CONCURRENCY} outstanding on one connection")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(ASSETS / "throughput.png", dpi=100)
    plt.close(fig)
    written.append("throughput.png")

    # Throughput vs concurrency: one line per framework and transport.
    fig, ax = plt.subplots(figsize=(10, 4.8))
    styles = {"tcp": "-", "unix": "--", "shm": ":"}
    plotted = False
    for framework in ROW_ORDER:
        for transport in transports:
            tput = cells.get((framework, transport), {}).get("tput", {})
            points = sorted((c, v) for c, v in tput.items() if v)
            if len(points) < 2:
                continue
            plotted = True
            ax.plot([c for c, _ in points], [v for _, v in points], marker="o",
                    linestyle=styles[transport], color=COLORS[framework],
                    label=f"{FRAMEWORK_LABEL[framework]}, {transport}")
    if plotted:
        ax.set_xscale("log", base=2)
        ticks = sorted({c for k in cells for c in cells[k]["tput"]})
        ax.set_xticks(ticks, [str(c) for c in ticks])
        ax.set_yscale("log")
        ax.set_xlabel("calls outstanding on one connection")
        ax.set_ylabel("null calls per second (log scale)")
        ax.set_title("Throughput vs concurrency")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(ASSETS / "throughput_vs_concurrency.png", dpi=100)
        written.append("throughput_vs_concurrency.png")
    plt.close(fig)
    return written


def verdict(ratio, raw_ratio, peer):
    """What Lanner's blocking-wait null call says, as a ratio to the fastest peer's
    (`ratio`), given the raw blocking ping-pong's ratio to it (`raw_ratio`)."""
    if ratio < 2 / 3:
        return (f"Waiting the peers' way, Lanner is still {1 / ratio:.1f}× faster than the "
                "fastest peer, so its protocol, not only its wait, accounts for its lead.")
    if ratio <= 1.5:
        return (f"Waiting the peers' way, Lanner lands in their range ({ratio:.2f}× the "
                "fastest peer): its lead at small sizes comes mostly from spinning briefly "
                "before it sleeps, which the peers (Tokio's epoll) do not do.")
    if raw_ratio > 1.5 and ratio <= 1.25 * raw_ratio:
        # The raw ping-pong does no RPC work at all: a peer faster than it is faster at
        # waking up, not at the work Lanner adds. (Within a quarter of the raw figure:
        # blocking round trips on these VMs move by about that much between runs.)
        return (f"Waiting the peers' way, Lanner is {ratio:.1f}× slower than {peer}, and so "
                f"is the raw blocking ping-pong ({raw_ratio:.1f}×), which does no RPC work "
                f"at all: Lanner's blocking path costs what a plain blocking read costs "
                f"({ratio / raw_ratio:.2f}× it), and {peer} is faster than either at getting "
                "a sleeping thread to the next message on this VM, not at the work of a "
                "call. Lanner's lead at small sizes comes from spinning before it sleeps.")
    return (f"Waiting the peers' way, Lanner is {ratio:.1f}× slower than the fastest peer, "
            f"where the raw blocking ping-pong is {raw_ratio:.1f}×: its lead at small sizes "
            "comes from spinning before it sleeps, and its blocking path has overhead to "
            "find.")


def observations(cells):
    """Paragraphs, from this run's figures, on where Lanner's lead comes from."""
    def p50(framework, transport, size=0):
        return cells.get((framework, transport), {}).get("lat", {}).get(size, (None,))[0]

    lines = []
    for transport in PEER_TRANSPORTS:
        peers = [(p50(f, transport), f) for f in FRAMEWORKS if p50(f, transport) is not None]
        figures = [p50(f, transport) for f in ("lanner", "lanner-block", "raw-block")]
        if not peers or None in figures:
            continue
        best, name = min(peers)
        lanner, block, raw_block = figures
        lines.append(
            f"- **Null call over {transport}:** {fmt_us(lanner)} µs for Lanner with its default "
            f"wait, {fmt_us(block)} µs with a blocking wait, {fmt_us(raw_block)} µs for a raw "
            f"blocking ping-pong, {fmt_us(best)} µs for the fastest peer "
            f"({FRAMEWORK_LABEL[name]}). A thread that sleeps on every message pays the "
            "cross-vCPU wake-up on each hop. "
            + verdict(block / best, raw_block / best, FRAMEWORK_LABEL[name]))
    big = 1 << 20
    peers_big = [(p50(f, t, big), f, t) for f in FRAMEWORKS for t in PEER_TRANSPORTS
                 if p50(f, t, big) is not None]
    lanner_big = [(p50(f, t, big), f, t) for f in ("lanner", "lanner-block")
                  for t in PEER_TRANSPORTS if p50(f, t, big) is not None]
    if peers_big and lanner_big:
        lines.append(
            f"- **1 MiB:** the peers take {fmt_us(min(peers_big)[0])}–"
            f"{fmt_us(max(peers_big)[0])} µs, Lanner {fmt_us(min(lanner_big)[0])}–"
            f"{fmt_us(max(lanner_big)[0])} µs. With default socket buffers a 1 MiB message "
            "crosses in many partial writes, and an epoll-based runtime sleeps between "
            "them: strace of the capnp-rpc client over unix shows about 10 `sendto`, 13 "
            "`recvfrom` and 22 `epoll_wait` per 1 MiB call, and every sleep is a "
            "cross-vCPU wake-up (slower still while compilers share the CPUs). Lanner writes "
            "the payload with one vectored write from the caller's buffer and waits by "
            "spinning first.")
    if not any(cells.get(("lanner", t), {}).get("calls_s") for t in LANNER_TRANSPORTS):
        lines.append(
            "- **Throughput:** Lanner's figures are missing from this run (no `lanner bench "
            "throughput` in the build that ran); the peers' are the reference for the goal.")
    return lines


def wrap(text, bullet=False):
    """`text` as Markdown lines of at most 90 columns (a bullet's continuation indented)."""
    return textwrap.fill(text, 90, subsequent_indent="  " if bullet else "",
                         break_long_words=False, break_on_hyphens=False)


def write_doc(results, run, images):
    """Writes docs/benchmarks.md from one run's results and its description `run`."""
    cells = table_data(results)
    info = run["machine"]
    started = datetime.datetime.fromisoformat(run["started"])
    out = []
    w = out.append
    iters = f"{run['iters']:,}" if run["iters"] else "10,000"
    warmup = f"{run['warmup']:,}" if run["warmup"] is not None else "1,000"
    w("# Benchmarks: Lanner and its peers")
    w("")
    w(f"Generated by `{REPRODUCE}` on {started:%Y-%m-%d %H:%M} UTC"
      + (" — a **quick** smoke run (few calls): not for comparison" if run["quick"] else "")
      + ".")
    w("")
    w(wrap(
        "Every number below comes from that one run on this machine, every framework "
        "measured the same way: the server in a separate process, the client pinned to CPU 0 "
        "and the server to CPU 1 (`--placement split`), a current-thread Tokio runtime in the "
        "client, release builds (fat LTO, one codegen unit, for Lanner and the peers alike), "
        "servers on loopback (127.0.0.1 or a Unix socket in /tmp). "
        f"Latency is the nearest-rank p50/p99 of {iters} sequential echo calls per size after "
        f"{warmup} warm-up calls (fewer for 1 MiB, so that no size moves more than 1 GiB). "
        f"Throughput is null calls with {CONCURRENCY} outstanding on one connection, counted "
        f"over {run['secs']:g} s after a warm-up."))
    w("")
    w("## Machine")
    w("")
    w(f"- {info['cores']} cores: {info['cpu']}; {info['memory']} of memory")
    w(f"- Linux {info['kernel']}; {info['rustc']}")
    w(f"- load average when the run started: {info['load']}")
    w("")
    busy = float(info["load"].split()[0]) >= 1.0
    w(wrap(
        "**Noise.** This is a shared 2-vCPU virtual machine"
        + (", and other jobs were running when the run started (see the load average): "
           if busy else
           "; nothing else of ours was running, but the host can still take time from it: ")
        + "absolute numbers move by tens of percent between runs, and p99s far more. A "
        "thread that sleeps while another process holds its CPU waits for the scheduler "
        "(milliseconds), which is where p99s of several ms come from; a side that spins "
        "keeps its CPU and escapes most of that. Compare frameworks within one run (this "
        "page), not across runs."))
    w("")
    w("## Side by side")
    w("")
    w(wrap("Round trip in µs (p50 / p99) of an echo of the given payload, and null calls per "
           f"second with {CONCURRENCY} outstanding on one connection."))
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
        if framework.startswith("lanner"):
            name = f"**{name}**"
        w(f"| {name} | {transport} | " + " | ".join(cols)
          + f" | {fmt_rate(cell['calls_s'])} |")
    w("")
    w(wrap(
        "The raw socket rows are Lanner's own baseline from the same `lanner bench` run: the "
        "same payload ping-ponged (for throughput, a pipelined echo) on the same medium with "
        "no RPC code and the same wait strategy as the Lanner row above it."))
    w("")
    waits = {f: c["wait"] for (f, _), c in cells.items() if c["wait"]}
    w(wrap(
        "**Wait strategies.** The peers wait as Tokio does by default: epoll, sleeping as soon "
        "as there is nothing to read. "
        + (f"Lanner by default: {waits['lanner']}. " if "lanner" in waits else "")
        + "On this VM waking a sleeping thread on the other vCPU costs tens of microseconds, "
        "so part of Lanner's lead at small sizes is its wait, not only its protocol. The "
        "*blocking wait* rows run Lanner and its raw baseline with `--spin-us 0` ("
        + (waits.get("lanner-block") or "sleep at once")
        + "), the same wait as the peers: that is the like-for-like comparison of the RPC "
        "machinery itself. Servers: tonic and tarpc on a multi-thread Tokio runtime; "
        "capnp-rpc on a current-thread runtime with a `LocalSet` (it is single-threaded by "
        "design); Lanner on its own server loop."))
    w("")
    w("## Goals of the issue")
    w("")
    w("| ratio | this run | goal | met |")
    w("|---|---|---|---|")
    for line in ratios(cells):
        w(line)
    w("")
    w("## Reading the numbers")
    w("")
    for line in observations(cells):
        w(wrap(line, bullet=True))
    w("")
    if images:
        w("## Plots")
        w("")
        if "latency_p50.png" in images:
            w("Latency vs payload size, per transport (log scale), median and 99th percentile:")
            w("")
            w("![p50 latency vs payload size](benchmarks/latency_p50.png)")
            w("")
            w("![p99 latency vs payload size](benchmarks/latency_p99.png)")
            w("")
        if "throughput.png" in images:
            w(f"Null calls per second with {CONCURRENCY} outstanding on one connection "
              "(log scale):")
            w("")
            w("![throughput](benchmarks/throughput.png)")
            w("")
        if "throughput_vs_concurrency.png" in images:
            w("Null calls per second vs calls outstanding on one connection (log scales):")
            w("")
            w("![throughput vs concurrency](benchmarks/throughput_vs_concurrency.png)")
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
    if run["notes"]:
        w("## Notes from this run")
        w("")
        for note in run["notes"]:
            w(wrap(f"- {note}", bullet=True))
        w("")
    w("## Reproduce")
    w("")
    w("```sh")
    w("apt-get update && apt-get install -y protobuf-compiler capnproto   # protoc, capnp")
    w(REPRODUCE + "   # builds both in release, runs everything, rewrites this page")
    w("```")
    w("")
    sweep = ",".join(map(str, run["concurrency"]))
    w(wrap("For each transport T (tcp, unix, shm for Lanner; tcp, unix for the peers and for "
           "Lanner's `--spin-us 0` rows) and framework F it runs:"))
    w("")
    w("```sh")
    w(f"target/release/lanner bench pingpong --transport T --sizes {','.join(map(str, SIZES))}"
      " --json [--spin-us 0]")
    w(f"target/release/lanner bench throughput --concurrency {sweep} --transport T --json"
      " [--spin-us 0]   # if it exists")
    w(f"peers/target/release/peers bench pingpong --framework F --transport T "
      f"--sizes {','.join(map(str, SIZES))} --json")
    w(f"peers/target/release/peers bench throughput --framework F --transport T "
      f"--concurrency {sweep} --json")
    w("```")
    w("")
    w("The raw JSON of this run is in [`benchmarks/results.jsonl`](benchmarks/results.jsonl);")
    w("the peers' code and settings are described in [`peers/README.md`](../peers/README.md).")
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
    parser.add_argument("--concurrency", type=lambda v: [int(c) for c in v.split(",")],
                        default=SWEEP, help="throughput sweep (must include 32)")
    parser.add_argument("--skip-build", action="store_true", help="use the binaries as built")
    parser.add_argument("--lanner", type=Path, default=LANNER,
                        help="the lanner binary to measure (default: target/release/lanner, "
                        "built by this script)")
    parser.add_argument("--report-only", action="store_true",
                        help="rewrite the page and plots from the last run's saved results "
                        "(docs/benchmarks/results.jsonl and run.json), measuring nothing")
    parser.add_argument("--no-plots", action="store_true", help="skip matplotlib")
    args = parser.parse_args()
    if CONCURRENCY not in args.concurrency:
        args.concurrency.append(CONCURRENCY)
    if args.quick:
        args.iters = args.iters or 500
        args.warmup = 100 if args.warmup is None else args.warmup
        args.secs = 0.5
    ensure_matplotlib(args.no_plots)
    if args.report_only:
        try:
            run = json.loads((ASSETS / "run.json").read_text())
            results = [json.loads(line) for line in
                       (ASSETS / "results.jsonl").read_text().splitlines() if line.strip()]
        except (OSError, json.JSONDecodeError) as error:
            sys.exit(f"compare: no complete earlier run in {ASSETS} ({error})")
    else:
        run = {
            "started": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "machine": machine(),
            "quick": args.quick,
            "iters": args.iters,
            "warmup": args.warmup,
            "secs": args.secs,
            "concurrency": args.concurrency,
        }
        if not args.skip_build:
            build(args)
        for binary in (args.lanner, PEERS_BIN):
            if not binary.exists():
                sys.exit(f"compare: {binary} is missing; run without --skip-build")
        results, run["notes"] = collect(args)
        ASSETS.mkdir(parents=True, exist_ok=True)
        with open(ASSETS / "results.jsonl", "w") as out:
            for result in results:
                out.write(json.dumps(result) + "\n")
        (ASSETS / "run.json").write_text(json.dumps(run, indent=1) + "\n")
    images = [] if args.no_plots else plots(table_data(results))
    write_doc(results, run, images)
    failed = [r for r in results if r["error"]]
    if failed:
        log(f"{len(failed)} benchmark(s) failed; see the notes in {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
