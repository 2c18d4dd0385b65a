#!/usr/bin/env python3
"""The daemon's allocations and CPU time per job, over N files written GAP_US apart into
the rule latency_path.py uses (bench-peers' stamp as the job): malloc, calloc, realloc and
posix_memalign counted by perf uprobes on the C library (added here if missing), CPU time
from /proc/PID/stat. With --breakdown, the allocations per job by the innermost
watchkeeper function that made them (perf record of the same uprobes, call chains);
with --function NAME, only those made directly in functions whose symbol contains NAME,
by return address (disassemble the function to see which call each one is).

    python3 Tests/bench/allocations_per_job.py --binary .build/release/watchkeeper [--files 2000] [--gap-us 3000] [--breakdown]

The counts are exact; the CPU time moves with the machine's load. Needs root, perf
(linux-perf), gcc and ../shared/bench-peers. docs/measurements/latency-path.md reads it."""

import argparse
import collections
import os
import shutil
import subprocess
import tempfile
import time

from latency_path import build_helpers, write_config
CALLS = ("malloc", "calloc", "realloc", "posix_memalign")
LIBC = "/lib/x86_64-linux-gnu/libc.so.6"


def ensure_probes():
    listed = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    for call in CALLS:
        if f"probe_libc:{call} " not in listed:
            subprocess.run(["perf", "probe", "-q", "-x", LIBC, "--add", call], check=True)


def start_daemon(args, work):
    build_helpers(work, ("stamp", "writer"))
    inbox = os.path.join(work, "in")
    os.makedirs(inbox)
    config = write_config(work, inbox, os.path.join(work, "stamps"))
    daemon = subprocess.Popen([args.binary, "run", "--config", config], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2)
    # Warm: the first jobs make the caches and the reserve every later one reuses.
    subprocess.run([os.path.join(work, "writer"), inbox, "warm", "20", "5000", os.path.join(work, "warm")], check=True, stdout=subprocess.DEVNULL)
    time.sleep(1)
    return daemon, inbox


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_and_wait(args, work, inbox):
    subprocess.run([os.path.join(work, "writer"), inbox, "g", str(args.files), str(args.gap_us), os.path.join(work, "writes")],
                   check=True, stdout=subprocess.DEVNULL)
    stamps = os.path.join(work, "stamps")
    deadline = time.time() + 120
    done = 0
    while time.time() < deadline:
        done = sum(1 for line in open(stamps) if "/g" in line) if os.path.exists(stamps) else 0
        if done >= args.files:
            break
        time.sleep(0.2)
    time.sleep(0.5)
    return done


def count(args, work):
    daemon, inbox = start_daemon(args, work)
    try:
        out = os.path.join(work, "stat")
        events = ",".join(f"probe_libc:{call}" for call in CALLS)
        stat = subprocess.Popen(["perf", "stat", "-x", ",", "-e", events, "-p", str(daemon.pid), "-o", out])
        time.sleep(0.5)
        load, before = os.getloadavg()[0], cpu_seconds(daemon.pid)
        done = write_and_wait(args, work, inbox)
        used = cpu_seconds(daemon.pid) - before
        stat.send_signal(2)
        stat.wait()
    finally:
        daemon.terminate()
        daemon.wait(30)
    counts = {}
    for line in open(out):
        parts = line.strip().split(",")
        if len(parts) > 2 and parts[2].startswith("probe_libc:"):
            counts[parts[2].split(":")[1]] = int(parts[0]) if parts[0].isdigit() else 0
    per_job = {call: counts.get(call, 0) / max(done, 1) for call in CALLS}
    print(f"jobs {done}, load1 {load:.2f}: allocations per job {sum(per_job.values()):.1f} "
          f"({', '.join(f'{call} {value:.1f}' for call, value in per_job.items())}), daemon CPU per job {used / max(done, 1) * 1e6:.0f} us")


def breakdown(args, work):
    daemon, inbox = start_daemon(args, work)
    data = os.path.join(work, "perf.data")
    try:
        events = ",".join(f"probe_libc:{call}" for call in CALLS)
        record = subprocess.Popen(["perf", "record", "-q", "-g", "-e", events, "-p", str(daemon.pid), "-o", data], stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        done = write_and_wait(args, work, inbox)
        record.send_signal(2)
        record.wait()
    finally:
        daemon.terminate()
        daemon.wait(30)
    script = subprocess.run(["perf", "script", "-i", data, "-F", "ip,sym,symoff"], capture_output=True, text=True).stdout
    counts = collections.Counter()
    for sample in script.split("\n\n"):
        frames = [line.strip().split(None, 1)[1] for line in sample.strip().splitlines() if len(line.strip().split(None, 1)) > 1]
        ours = [frame for frame in frames if "Watchkeeper" in frame or "wk_" in frame]
        innermost = ours[0] if ours else "(none of watchkeeper's)"
        if args.function:
            if args.function in innermost:
                counts[innermost] += 1
        else:
            counts[innermost.rsplit("+0x", 1)[0]] += 1
    print(f"jobs {done}; allocations per job by the innermost watchkeeper function:")
    for name, number in counts.most_common(40):
        print(f"{number / max(done, 1):7.2f}  {name}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--gap-us", type=int, default=3000)
    parser.add_argument("--breakdown", action="store_true")
    parser.add_argument("--function")
    args = parser.parse_args()
    args.binary = os.path.abspath(args.binary)
    ensure_probes()
    work = tempfile.mkdtemp(prefix="wk-allocations-")
    try:
        (breakdown if args.breakdown or args.function else count)(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
