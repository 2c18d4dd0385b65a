#!/usr/bin/env python3
"""What the daemon asks of the kernel per job: a file burst through `watchkeeper-bench
watch`, every system call of the daemon's threads (its jobs excluded) counted by perf for a
few seconds in the middle of the drain, divided by the clones (one per job) in that window.
Also the daemon's user and system CPU over the window, from /proc/PID/stat.

    python3 Tests/bench/syscalls_burst.py [--binary .build/release/watchkeeper] [--files 20000] [--skip 6] [--seconds 8]

The counts do not depend on the machine's speed the way CPU time does, so they compare
two builds on a noisy machine. Needs perf (linux-perf) and a release build."""

import argparse
import collections
import os
import re
import subprocess
import sys
import time

from burst_daemon import BurstDaemon


def syscall_names():
    names = {}
    with open("/usr/include/x86_64-linux-gnu/asm/unistd_64.h") as f:
        for line in f:
            match = re.match(r"#define __NR_(\w+) (\d+)", line)
            if match:
                names[int(match.group(2))] = match.group(1)
    return names


def cpu_ticks(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]), int(fields[12])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--bench", default=".build/release/watchkeeper-bench")
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--skip", type=float, default=6, help="seconds after the daemon starts: past the writes")
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--data", default="/tmp/watchkeeper-syscalls.data")
    args = parser.parse_args()
    burst = BurstDaemon(args.bench, args.binary, args.files)
    time.sleep(args.skip)
    user_before, system_before = cpu_ticks(burst.pid)
    subprocess.run(["perf", "record", "-e", "raw_syscalls:sys_enter", "--no-inherit", "-p", str(burst.pid), "-o", args.data,
                    "--", "sleep", str(args.seconds)], check=True, capture_output=True)
    user_after, system_after = cpu_ticks(burst.pid)
    burst.finish()
    script = subprocess.run(["perf", "script", "-i", args.data, "-F", "trace"], capture_output=True, text=True, check=True).stdout
    names = syscall_names()
    counts = collections.Counter()
    for line in script.splitlines():
        match = re.search(r"NR (\d+)", line)
        if match:
            counts[names.get(int(match.group(1)), match.group(1))] += 1
    jobs = counts["clone"] + counts["clone3"]
    if jobs == 0:
        sys.exit("no clone in the window: the burst was over (fewer --skip seconds, or more --files)")
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    user, system = (user_after - user_before) * tick_ms / jobs, (system_after - system_before) * tick_ms / jobs
    print(f"{jobs} jobs in {args.seconds} s; daemon CPU per job {user + system:.3f} ms (user {user:.3f}, system {system:.3f})")
    print(f"{sum(counts.values()) / jobs:.1f} system calls per job:")
    for name, count in counts.most_common():
        if count / jobs >= 0.05:
            print(f"  {name:20s} {count / jobs:6.2f}")


if __name__ == "__main__":
    main()
