#!/usr/bin/env python3
"""Writes the seed inputs in fuzz/seeds/<target>/: valid frames of every kind, alone and
as streams, records lending payloads, encoded values, and shared-memory rings, so the
fuzzer starts from inputs that get past the length checks. run.sh passes these
directories to libFuzzer read-only; new inputs go to fuzz/corpus/."""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = b"LNRP"


def header(length, kind, segments=0, flags=0):
    return struct.pack("<IBBH", length, kind, flags, segments)


# The protocol version the seeds speak.
VERSION = 4


# Authentication mechanisms.
NONE, PEERCRED, PSK, TLS = 0, 1, 2, 3


def hello(vmin=VERSION, vmax=VERSION, max_frame=4096, credits=2, mechanism=NONE, auth=b""):
    body = MAGIC + struct.pack("<HHIIB3x", vmin, vmax, max_frame, credits, mechanism) + auth
    return header(8 + len(body), 1) + body


def welcome(version=VERSION, max_frame=4096, credits=2, mechanism=NONE, auth=b""):
    body = MAGIC + struct.pack("<HHIIB3x", version, 0, max_frame, credits, mechanism) + auth
    return header(8 + len(body), 2) + body


def auth(data):
    return header(8 + len(data), 11) + data


def payload(inline, bulk):
    return inline + b"".join(struct.pack("<I", len(s)) for s in bulk) + b"".join(bulk)


def request(
    call_id,
    inline=b"",
    bulk=(),
    obj=2,
    slot=0,
    method=1,
    fingerprint=0xDEADBEEF,
    timeout_us=0,
    one_way=False,
):
    fixed = struct.pack(
        "<QQHHIII", call_id, obj, slot, method, fingerprint, timeout_us, len(inline)
    )
    body = fixed + payload(inline, bulk)
    return header(8 + len(body), 3, len(bulk), 1 if one_way else 0) + body


def response(call_id, status=0, credits=1, inline=b"", bulk=()):
    fixed = struct.pack("<QB3xII", call_id, status, credits, len(inline))
    body = fixed + payload(inline, bulk)
    return header(8 + len(body), 4, len(bulk)) + body


def credit(n):
    return header(12, 5) + struct.pack("<I", n)


def word(kind, value):
    """CANCEL (7), PING (8) and PONG (9): one u64."""
    return header(16, kind) + struct.pack("<Q", value)


def close(status=6, reason=b"bye"):
    body = struct.pack("<B3x", status) + reason
    return header(8 + len(body), 6) + body


FRAMES = {
    "hello": hello(),
    "hello_range": hello(0, 7, 1 << 20, 256),
    "welcome": welcome(),
    "hello_psk": hello(mechanism=PSK, auth=b"\x02" * 32 + b"fuzz"),
    "welcome_psk": welcome(mechanism=PSK, auth=b"\x01" * 64),
    "auth": auth(b"\x5a" * 32),
    "release": header(8 + 24, 12) + struct.pack("<QQQ", 1, 2, 1),
    "grant": header(8 + 24, 13) + struct.pack("<Q", 5) + bytes(range(16)),
    "request_inline": request(1, b"\x01args"),
    "request_bulk": request(2, b"\x00ab", [b"one", b"", b"three"]),
    "response_ok": response(1, 0, 1, b"result"),
    "response_bulk": response(1, 1, 1, b"err", [b"x" * 40, b"yz"]),
    "request_timeout": request(3, b"\x00", timeout_us=250_000),
    "request_one_way": request(4, b"\x01", one_way=True),
    "cancel": word(7, 3),
    "ping": word(8, 0xFEED),
    "pong": word(9, 0xFEED),
    "credit": credit(3),
    "close": close(),
    "close_utf8": close(8, "déjà vu".encode()),
}

STREAMS = {
    "requests": request(1, b"\x01a") + request(2, b"\x02", [b"bulk"]) + request(3),
    "calls_and_credit": request(5, b"\x03x", [b"s" * 100]) + credit(2) + request(6, b"\x00"),
    "responses": response(1, 0, 1, b"ok") + credit(1) + response(1, 5, 1, b"again"),
    # Fits the 4096-byte limit, but its echoed answer (inline doubled) does not.
    "big_request": request(9, b"\x00" + b"i" * 1800, [b"b" * 1000]),
    "close_after_request": request(1, b"\x01") + close(),
    "handshake_then_calls": hello() + request(1, b"\x01") + request(2),
    "release_then_call": header(8 + 16, 12) + struct.pack("<QQ", 7, 7) + request(1),
    "grant_then_call": header(8 + 24, 13) + struct.pack("<Q", 7) + b"\x11" * 16 + request(1),
    "psk_auth_then_calls": auth(b"\x5a" * 32) + request(1, b"\x01"),
    "psk_hello_then_calls": hello(mechanism=PSK, auth=b"\x02" * 32 + b"fuzz") + request(1),
    "welcome_then_calls": welcome() + response(1) + request(1, b"\x00"),
    "call_cancel_ping": request(7, b"\x00", timeout_us=10) + word(7, 7) + word(8, 1),
    "one_way_then_credit": request(8, b"\x02", one_way=True) + credit(1) + word(9, 1),
}


def write(target, name, data):
    path = os.path.join(HERE, "seeds", target)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)


for name, frame in FRAMES.items():
    write("frame_decode", name, frame)
for name, frame in list(FRAMES.items()) + list(STREAMS.items()):
    # The stream target's first byte seeds the chunk sizes.
    for seed in (0x00, 0x05, 0x07):
        write("stream_split", f"{name}_{seed:02x}", bytes([seed]) + frame)


def lent(descriptors, frame_without_lent):
    """A shared-memory record lending segments: (index, len, offset) each, then the frame
    without their bytes (see lanner's transport/shm/lent.rs)."""
    out = struct.pack("<4xI", len(descriptors))
    for index, length, offset in descriptors:
        out += struct.pack("<H2xIQ", index, length, offset)
    return out + frame_without_lent


def without_bulk(frame, bulk):
    return frame[: len(frame) - sum(len(b) for b in bulk)]


LENT = {
    "one_lent": lent([(0, 2000, 100)], without_bulk(request(3, b"\x01", [b"\0" * 2000]), [b"\0" * 2000])),
    "lent_and_copied": lent(
        [(1, 4096, 8192)],
        request(4, b"", [b"copied", b"\0" * 4096])[: -4096],
    ),
    "lent_response": lent([(0, 1500, 0)], without_bulk(response(5, bulk=[b"\0" * 1500]), [b"\0" * 1500])),
}
for name, record in LENT.items():
    write("lent_record", name, record)


def varint(n):
    out = b""
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out += bytes([byte | 0x80])
        else:
            return out + bytes([byte])


def text(s):
    return varint(len(s)) + s.encode()


# Postcard encodings of values lanner::fuzzing::value_decode decodes: enum variants and
# sequences are varint-prefixed, so the fuzzer starts past the first tag and length.
VALUES = {
    "tree_leaf": varint(0) + varint(5),
    "tree_node": varint(1) + varint(0) + varint(1) + varint(1) + varint(0) + varint(2),
    "tree_named": varint(2) + varint(1) + text("a") + varint(0) + varint(1),
    "tuple": text("hi") + varint(2) + varint(1) + varint(300) + b"\x01\x01",
    "nested_bytes": varint(2) + varint(1) + varint(2) + b"\x01\x02" + varint(0),
}
for name, value in VALUES.items():
    write("value_decode", name, value)


# Operation scripts for lanner_shm::fuzzing::loan_returns (two bytes each: operation
# modulo 10, argument): loan, loan lent at once, freeze, lend, take, give back, hostile
# return, drop, unlend, collect.
LOAN, LOAN_LENT, FREEZE, LEND, TAKE, GIVE_BACK, HOSTILE, DROP, UNLEND, COLLECT = range(10)
LOAN_SCRIPTS = {
    "lend_and_return": [(LOAN, 63), (FREEZE, 0), (LEND, 0), (TAKE, 0), (GIVE_BACK, 0),
                        (DROP, 0), (COLLECT, 0), (LOAN, 255)],
    "early_returns": [(LOAN_LENT, 63), (HOSTILE, 0), (HOSTILE, 0), (COLLECT, 0),
                      (FREEZE, 0), (LEND, 0), (LOAN, 200), (COLLECT, 0), (TAKE, 0),
                      (GIVE_BACK, 0), (COLLECT, 0)],
    "many_blocks": [(LOAN, 15)] * 8 + [(FREEZE, i) for i in range(8)]
                   + [(LEND, i) for i in range(8)] + [(TAKE, 0)] * 8
                   + [(DROP, 3), (GIVE_BACK, 5), (UNLEND, 0), (COLLECT, 0), (LOAN, 40)],
}
for name, script in LOAN_SCRIPTS.items():
    write("loan_returns", name, bytes(b for step in script for b in step))


# Rings for lanner_shm::fuzzing::ring_read: a selector byte (capacity 256 << (b % 8), the
# in-place threshold 1 << (3 * ((b >> 3) % 4))), then the data area. A record is a header
# word (len, then flags: u32 little-endian each) and its payload, padded to whole 64-byte
# lines; every well-formed header sets WRITTEN, and a zero word means "nothing here".
PADDING, MORE, PREFIXED, WRITTEN = 1, 2, 4, 8
LINE = 64


def ring_header(length, flags=WRITTEN):
    return struct.pack("<II", length, flags)


def ring_record(payload, flags=WRITTEN):
    data = ring_header(len(payload), flags) + payload
    return data + bytes(-len(data) % LINE)


def ring_pattern(length, seed):
    return bytes((i * 31 + seed) % 256 for i in range(length))


def decoys(length, seed):
    """A payload whose first word on every line it covers is a well-formed header."""
    payload = bytearray(ring_pattern(length, seed))
    words = [ring_header(0), ring_header(56), ring_header(0, PADDING | WRITTEN)]
    for k, at in enumerate(range(LINE - 8, length - 7, LINE)):
        payload[at : at + 8] = words[(seed + k) % len(words)]
    return bytes(payload)


RINGS = {
    "empty": (0, b""),
    "one_record": (0, ring_record(b"hello")),
    # Up to the end of a ring of 32 KiB, with room to spare for the laps.
    "many_records": (7, b"".join(ring_record(ring_pattern(i * 37 % 300, i)) for i in range(90))),
    "fragments": (
        2 << 3 | 1,
        ring_record(b"first piece", MORE | WRITTEN)
        + ring_record(b"middle", MORE | WRITTEN)
        + ring_record(b"last")
        + ring_record(ring_pattern(200, 1)),
    ),
    # The largest record a consumer takes at offset 0 of 256 bytes: all but the free line.
    "full_record": (0, ring_record(ring_pattern(184, 2))),
    "huge_len": (0, ring_header(0xFFFFFFFF)),
    # Records, then padding to the end of the ring (256 bytes): the next lap starts at 0.
    "padding_to_end": (
        0,
        ring_record(ring_pattern(20, 3)) + ring_record(ring_pattern(100, 4))
        + ring_record(b"", PADDING | WRITTEN),
    ),
    "padding_at_zero": (0, ring_record(bytes(56), PADDING | WRITTEN)),
    "unknown_flag": (0, ring_record(b"abcd", 0x10 | WRITTEN)),
    "no_written_flag": (0, ring_record(b"abcd", 0)),
    # A record to the last line, then one of two lines there.
    "record_past_end": (0, ring_record(ring_pattern(184, 5)) + ring_header(57)),
    # A record of the whole ring: it would end, with its free line, a ring past the start.
    "lap_ahead": (0, ring_header(248)),
    # One to six lines each in a ring of 1 KiB, with headers inside the payloads, and a
    # zero line: each lap starts where the last stopped, in the middle of earlier records.
    "mixed_sizes": (
        2 | 1 << 3,
        b"".join(ring_record(decoys(n, i)) for i, n in enumerate([57, 0, 200, 56, 300])),
    ),
    # A record of a line and one of two lines whose second line holds a header: laps at
    # 0, 192 (wrapping the second record to 0) and 128, where it runs past the end.
    "laps_offset": (0, ring_record(b"a") + ring_record(decoys(120, 0))),
    "prefixed": (
        1,
        ring_record(bytes([3, 0, 0]) + b"message", PREFIXED | WRITTEN)
        + ring_record(bytes([63]) + bytes(62) + b"m", PREFIXED | WRITTEN)
        + ring_record(bytes([9]) + b"short", PREFIXED | WRITTEN),
    ),
    "empty_fragments": (0, ring_record(b"", MORE | WRITTEN) * 4),
    # A header on every line: a stream without end.
    "every_line": (3 << 3, ring_record(b"x") * 4),
}
for name, (selector, contents) in RINGS.items():
    write("ring_read", name, bytes([selector]) + contents)


# URLs for lanner::fuzzing::url_parse: one of every scheme, as endpoints and object URLs.
URLS = {
    "tcp": "tcp://127.0.0.1:7000/calc",
    "tcp_ipv6": "tcp://[::1]:7000/calc",
    "tcp_name": "tcp://localhost:80",
    "unix": "unix:///tmp/app.sock/calc",
    "unix_endpoint": "unix:///run/a.sock",
    "shm": "shm://fast/calc",
    "mem": "mem://name/calc",
}
for name, url in URLS.items():
    write("url_parse", name, url.encode())
