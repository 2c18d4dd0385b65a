#!/usr/bin/env python3
"""How much of a p99 over 300 deliveries is the machine: bench-peers' latency measurement
(its writer, stamp and rule, a tmpfs inbox, files 100 ms apart) for the bare C loop and the
release daemon alternating, with many deliveries per run, kept one by one. Prints for each
run the p50 and p99 of all its deliveries, then the p99 of each consecutive chunk of 300
(what one bench-peers run reads) and the ratio of the daemon's chunks to the C loop's, chunk
by chunk, in runs taken one after the other.

    python3 Tests/bench/latency_tail.py [--binary .build/release/watchkeeper] [--files 3000] [--pairs 1] [--raw FILE]

--raw keeps every delivery (system, run, index, close time, latency) as JSON lines. Needs
root (the tmpfs), gcc and ../shared/bench-peers; nothing else should run meanwhile.
docs/measurements/performance.md reads the output."""

import argparse
import json
import math
import os
import shutil
import subprocess
import tempfile
import time

from latency_path import build_helpers, write_config

CHUNK = 300


def percentile(values, q):
    """Nearest rank, as bench-peers' pct()."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def deliveries(system, binary, helpers, files, work):
    """One run: latency in µs of each file in the order written (None: no stamp)."""
    inbox, stamps = os.path.join(work, "in"), os.path.join(work, "stamps")
    os.makedirs(inbox)
    if system == "baseline":
        command = [os.path.join(helpers, "baseline"), os.path.join(helpers, "stamp"), inbox]
    else:
        shutil.copy(os.path.join(helpers, "stamp"), work)
        command = [binary, "run", "--config", write_config(work, inbox, stamps)]
    writes = os.path.join(work, "writes")
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", inbox], check=True)
    try:
        watcher = subprocess.Popen(command, env=dict(os.environ, STAMP_OUT=stamps),
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(2)  # bench-peers waits for the watches; both are in place well before
            subprocess.run([os.path.join(helpers, "writer"), inbox, "L", str(files), "100000", writes],
                           check=True, stdout=subprocess.DEVNULL)
            time.sleep(1)
        finally:
            watcher.terminate()
            watcher.wait(30)
    finally:
        subprocess.run(["umount", inbox], check=True)
    return matched(stamps, writes)


def matched(stamps, writes):
    """Each file the writer wrote, in order: (close time in ns, latency in µs to the first stamp
    of its name, None if it has none)."""
    first = {}
    with open(stamps) as f:
        for line in f:
            path, at = line.split()
            first.setdefault(os.path.basename(path), int(at))
    rows = []
    with open(writes) as f:
        for line in f:
            name, _, closed = line.split()
            at = first.get(os.path.basename(name))
            rows.append((int(closed), (at - int(closed)) / 1000 if at is not None else None))
    return rows


def chunk_p99(latencies):
    return [percentile(latencies[i:i + CHUNK], 99) for i in range(0, len(latencies) - CHUNK + 1, CHUNK)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--raw")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    helpers = tempfile.mkdtemp(prefix="wk-latency-tail-")
    raw = open(args.raw, "w") if args.raw else None
    try:
        build_helpers(helpers)
        for pair in range(args.pairs):
            chunks = {}
            for system in ("baseline", "watchkeeper"):
                work = tempfile.mkdtemp(prefix=f"{system}-", dir=helpers)
                rows = deliveries(system, binary, helpers, args.files, work)
                latencies = [latency for _, latency in rows if latency is not None]
                if raw:
                    for index, (closed, latency) in enumerate(rows):
                        raw.write(json.dumps(dict(system=system, pair=pair, index=index, closed_ns=closed, us=latency)) + "\n")
                chunks[system] = chunk_p99(latencies)
                print(f"pair {pair} {system:11s} handled {len(latencies)}/{len(rows)}  p50 {percentile(latencies, 50):6.0f} us"
                      f"  p99 {percentile(latencies, 99):6.0f} us  max {max(latencies):7.0f} us", flush=True)
                print(f"  p99 of each {CHUNK}: " + " ".join(f"{value:.0f}" for value in chunks[system]), flush=True)
            ratios = [w / b for b, w in zip(chunks["baseline"], chunks["watchkeeper"])]
            print(f"  chunk by chunk, daemon / C loop: " + " ".join(f"{r:.2f}" for r in ratios)
                  + f"  ({sum(r <= 1.3 for r in ratios)} of {len(ratios)} at or under 1.3x)", flush=True)
    finally:
        if raw:
            raw.close()
        shutil.rmtree(helpers, ignore_errors=True)


if __name__ == "__main__":
    main()
