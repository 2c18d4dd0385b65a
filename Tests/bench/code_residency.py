#!/usr/bin/env python3
"""Which of the linker's input sections an idle daemon's resident code is: one daemon (release
build) watching DIRS directories as idle_memory.py runs it, measured when every watch is in
place (bench-peers' idle reading), each page of .text and .text.unnamed looked up in
/proc/PID/pagemap and charged to the input sections on it, by the bytes each has there.

    python3 Tests/bench/code_residency.py --binary B --map B.map [--dirs 1000]

The map is lld's for that very binary: `make release` leaves it beside the split runtime
(.build/x86_64-unknown-linux-gnu/release/runtime-split/watchkeeper.map, link/ld_split.py). Prints the
resident KiB by origin (the Swift runtime's one-section object, the other Swift libraries'
whole-object sections, SQLite's functions, the libraries' function
sections, watchkeeper's own code), then every input section of 100 KiB or more.
docs/measurements/idle-memory.md ("The code that stays") reads the output."""

import argparse
import collections
import os
import re
import signal
import struct
import tempfile

from idle_memory import start_idle_daemon

MAP_LINE = re.compile(r"\s*([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s(.*)$")
CODE = (".text", ".text.unnamed")


def input_sections(path):
    """(address, size, name) of every input section lld put in the code's output sections."""
    rows, output = [], None
    with open(path) as f:
        for line in f:
            m = MAP_LINE.match(line)
            if not m:
                continue
            rest = m[3]
            depth = len(rest) - len(rest.lstrip(" "))
            if depth == 0:
                output = rest.strip()
            elif depth == 8 and output in CODE:
                rows.append((int(m[1], 16), int(m[2], 16), rest.strip()))
    return rows


def origin(name):
    if "(Swift.o):(.text)" in name:
        return "the Swift runtime's Swift.o: one .text for the functions it gave no section"
    if "/runtime-split/split/Swift.o:(.text)" in name or "/runtime-split/split/Swift.o:(.text.split)" in name:
        return "the Swift runtime's Swift.o: that .text split into functions (link/split_text.py)"
    if "/runtime-split/split/Swift.o:" in name:
        return "the Swift libraries' function sections"
    if "libsqlite3.a" in name:
        return "SQLite (Vendor/SQLite, a section per function)"
    if "swift_static" in name and name.endswith(":(.text)"):
        return "other Swift libraries (libdispatch, _Concurrency, ...): whole-object .text"
    if "swift_static" in name:
        return "the Swift libraries' function sections"
    if "libstdc++" in name:
        return "libstdc++ (toml++'s)"
    if "/.build/" in name:
        return "watchkeeper's own code (Swift, C, toml++ compiled in)"
    return "the rest (crt, libgcc, linker-made)"


def resident_pages(pid, binary, first, last):
    """The set of resident page numbers (link-time addresses / 4096) in [first, last)."""
    real = os.path.realpath(binary)
    bias = None
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and os.path.realpath(parts[5]) == real:
                start = int(parts[0].split("-")[0], 16) - int(parts[2], 16)
                bias = start if bias is None else min(bias, start)
    pages = set()
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for page in range(first // 4096, (last + 4095) // 4096):
            pagemap.seek((page + bias // 4096) * 8)
            if struct.unpack("<Q", pagemap.read(8))[0] & (1 << 63):
                pages.add(page)
    return pages


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--map", required=True, help="lld's -Map output for this binary")
    parser.add_argument("--dirs", type=int, default=1000)
    args = parser.parse_args()
    sections = input_sections(args.map)
    if not sections:
        raise SystemExit(f"code_residency: no input sections of {' or '.join(CODE)} in {args.map}")
    daemon = start_idle_daemon(args.binary, args.dirs, tempfile.mkdtemp(prefix="wk-code-residency-"))
    try:
        resident = resident_pages(daemon.pid, args.binary, min(s[0] for s in sections), max(s[0] + s[1] for s in sections))
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    by_origin, size_by_origin, large = collections.Counter(), collections.Counter(), []
    for address, size, name in sections:
        # Bytes of the section on resident pages: a page two sections share counts for both, by their parts.
        on_resident = sum(min(address + size, (page + 1) * 4096) - max(address, page * 4096)
                          for page in range(address // 4096, (address + size + 4095) // 4096) if page in resident)
        by_origin[origin(name)] += on_resident
        size_by_origin[origin(name)] += size
        if size >= 100 * 1024:
            large.append((on_resident, size, name))
    print(f"resident code when the watches were in place: {sum(by_origin.values()) / 1024:.0f} KiB")
    for name, kib in by_origin.most_common():
        print(f"  {kib / 1024:6.0f} KiB resident of {size_by_origin[name] / 1024:6.0f}  {name}")
    print("input sections of 100 KiB or more:")
    for on_resident, size, name in large:
        print(f"  {on_resident / 1024:6.0f} KiB resident of {size / 1024:6.0f}  {name.split('/')[-1]}")


if __name__ == "__main__":
    main()
