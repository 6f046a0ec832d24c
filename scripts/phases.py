#!/usr/bin/env python3
"""Where a null call's time goes: the breakdown of `lanner bench pingpong` round trips
from the time stamps a `phase-marks` build records (see crates/lanner/src/phase_marks.rs).

    cargo build --release -p lanner-cli --features lanner/phase-marks
    mkdir -p /tmp/phases && rm -f /tmp/phases/*
    LANNER_PHASE_DIR=/tmp/phases target/release/lanner bench pingpong \\
        --transport shm --sizes 0 --iters 200000
    python3 scripts/phases.py /tmp/phases

A run of fewer calls (the benchmark makes 16,384 echoes of 64 KiB) needs a smaller
buffer of marks per thread: LANNER_PHASE_MARKS=90000.

Pairs each client call (the marks of the thread that made the proxy calls) with the
server's handling of its request (the thread that dispatched calls), and prints the p10,
p50 and p90 of every step, in nanoseconds. The first tenth of the calls (warm-up) is
left out. Shared memory only: a frame's publication is marked in the shm ring.
"""

import bisect
import os
import statistics
import sys

# The marks' numbers (crates/lanner/src/phase_marks.rs, `Mark`).
PROXY_METHOD, CALL_START, PUBLISHED, FRAME_TAKEN, FRAME_HANDLED = 0, 1, 2, 3, 4
DISPATCHED, METHOD_READY, ANSWER_STAMPED, REPLY_TAKEN = 5, 6, 7, 8

# One client call, and the next proxy method that closes its round trip.
CLIENT = [PROXY_METHOD, CALL_START, PUBLISHED, FRAME_TAKEN, FRAME_HANDLED, REPLY_TAKEN,
          PROXY_METHOD]
# The server's handling of one request.
SERVER = [FRAME_TAKEN, FRAME_HANDLED, DISPATCHED, METHOD_READY, ANSWER_STAMPED, PUBLISHED]

STEPS = [
    "client: proxy method -> call starts (request encoded)",
    "client: call starts -> request published",
    "medium: request published -> server took it",
    "server: took request -> decoded, object looked up",
    "server: -> stub ran, context made",
    "server: -> method's first poll returned",
    "server: -> answer stamped",
    "server: -> answer published",
    "medium: answer published -> client took it",
    "client: took answer -> decoded, delivered",
    "client: -> caller has its reply",
    "client: reply -> next proxy method (the benchmark's loop)",
    "round trip",
]


def load(path):
    """(ticks per ns, [(mark, ticks)]) of one thread's file."""
    with open(path) as file:
        header = file.readline().split()
        per_ns = float(header[2])
        marks = [tuple(map(int, line.split())) for line in file]
    return per_ns, marks


def runs(marks, pattern):
    """The time stamps of every run of consecutive marks that matches `pattern`."""
    found = []
    for i in range(len(marks) - len(pattern) + 1):
        if all(marks[i + k][0] == pattern[k] for k in range(len(pattern))):
            found.append([marks[i + k][1] for k in range(len(pattern))])
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    directory = sys.argv[1]
    threads = [load(os.path.join(directory, name)) for name in sorted(os.listdir(directory))]
    client = [t for t in threads if any(m == PROXY_METHOD for m, _ in t[1])]
    server = [t for t in threads if any(m == DISPATCHED for m, _ in t[1])]
    if len(client) != 1 or len(server) != 1:
        sys.exit(f"expected one client and one server thread's marks in {directory}, "
                 f"found {len(client)} and {len(server)} (did the run fill LANNER_PHASE_MARKS marks per thread, 400,000 by default?)")
    per_ns, client = client[0]
    _, server = server[0]
    calls = runs(client, CLIENT)
    handled = runs(server, SERVER)
    taken = [h[0] for h in handled]
    rows = []
    for call in calls:
        # The server's handling that starts after the request was published and ends
        # before the client took the answer.
        at = bisect.bisect_right(taken, call[2])
        if at == len(handled) or handled[at][-1] > call[3]:
            continue
        h = handled[at]
        points = call[:3] + h + call[3:]
        rows.append([b - a for a, b in zip(points, points[1:])] + [call[-1] - call[0]])
    rows = rows[len(rows) // 10:]
    if not rows:
        sys.exit("no call could be paired with its request's handling")
    print(f"{len(rows)} round trips, ns (time-stamp counter at {per_ns:.3f} ticks/ns)")
    print(f"{'step':58s} {'p10':>7s} {'p50':>7s} {'p90':>7s}")
    for index, step in enumerate(STEPS):
        values = sorted(row[index] / per_ns for row in rows)
        print(f"{step:58s} {values[len(values) // 10]:7.0f} "
              f"{statistics.median(values):7.0f} {values[9 * len(values) // 10]:7.0f}")


if __name__ == "__main__":
    main()
