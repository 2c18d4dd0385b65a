#!/usr/bin/env python3
"""Whether a slow run is the daemon's work or the machine's: bench-peers' latency measurement
(its writer, stamp and rule, a tmpfs inbox, files 100 ms apart) for the bare C loop and the
release daemon alternating, each started in a session of its own as bench-peers starts them,
and for each run the CPU time its threads spent per file (se.sum_exec_runtime in
/proc/PID/task/TID/sched, read before the first file and after the last) with their context
switches. A run whose latency moved while its CPU per file did not was slowed by the machine.

    python3 Tests/bench/latency_phases.py [--binary .build/release/watchkeeper] [--files 200] [--pairs 6] [--env NAME=VALUE]...

--env is set in the daemon's environment only (to compare the two sides of an experiment's
switch in one binary: each pair then runs the daemon once per --env, and once without).
Needs root (the tmpfs), gcc and ../shared/bench-peers; nothing else should run meanwhile.
docs/measurements/latency-path.md reads the output."""

import argparse
import os
import shutil
import subprocess
import tempfile
import time

from latency_path import build_helpers, write_config
from latency_tail import matched, percentile

FIELDS = ("se.sum_exec_runtime", "nr_switches", "nr_involuntary_switches")


def thread_times(pid):
    """{tid: (name, {field: value})}: sum_exec_runtime in ms, switches as counts."""
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/sched") as f:
                text = f.read()
        except OSError:
            continue  # the thread ended meanwhile
        values = {}
        for line in text.splitlines()[2:]:
            name, _, value = line.partition(":")
            if name.strip() in FIELDS:
                values[name.strip()] = float(value)
        threads[tid] = (text.split(" (")[0], values)
    return threads


def spent(before, after):
    """[(thread name, {field: increase})] for the threads that ran meanwhile."""
    rows = []
    for tid, (name, values) in after.items():
        start = before.get(tid, (name, {}))[1]
        grown = {field: values[field] - start.get(field, 0) for field in values}
        if grown.get("se.sum_exec_runtime", 0) > 0:
            rows.append((name, grown))
    return rows


def one_run(command, env, helpers, files, inbox, stamps):
    """Latencies in µs of the files handled, and what the watcher's threads spent."""
    writes = os.path.join(os.path.dirname(inbox), "writes")
    os.makedirs(inbox)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", inbox], check=True)
    try:
        watcher = subprocess.Popen(command, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(2)  # both have their watch in place well before
            before = thread_times(watcher.pid)
            subprocess.run([os.path.join(helpers, "writer"), inbox, "L", str(files), "100000", writes],
                           check=True, stdout=subprocess.DEVNULL)
            time.sleep(1)
            threads = spent(before, thread_times(watcher.pid))
        finally:
            watcher.terminate()
            watcher.wait(30)
    finally:
        subprocess.run(["umount", inbox], check=True)
    return [latency for _, latency in matched(stamps, writes) if latency is not None], threads


def report(label, latencies, threads):
    total = sum(values["se.sum_exec_runtime"] for _, values in threads) * 1000 / len(latencies)
    busiest = max(threads, key=lambda row: row[1]["se.sum_exec_runtime"])
    name, values = busiest
    print(f"{label:24s} handled {len(latencies):4d}  p50 {percentile(latencies, 50):5.0f}  p90 {percentile(latencies, 90):5.0f}"
          f"  p99 {percentile(latencies, 99):6.0f} us  CPU per file: all {len(threads)} threads {total:4.0f} us,"
          f" {name} {values['se.sum_exec_runtime'] * 1000 / len(latencies):4.0f} us"
          f" ({values['nr_switches'] / len(latencies):.1f} switches, {values['nr_involuntary_switches'] / len(latencies):.1f} involuntary)",
          flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--env", action="append", default=[])
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    helpers = tempfile.mkdtemp(prefix="wk-latency-phases-")
    try:
        build_helpers(helpers)
        daemons = [("watchkeeper", {})] + [(f"watchkeeper {e}", dict([e.split("=", 1)])) for e in args.env]
        for pair in range(args.pairs):
            for label, extra in [("C loop", None)] + daemons:
                work = tempfile.mkdtemp(dir=helpers)
                inbox, stamps = os.path.join(work, "in"), os.path.join(work, "stamps")
                env = dict(os.environ, STAMP_OUT=stamps)
                if extra is None:
                    command = [os.path.join(helpers, "baseline"), os.path.join(helpers, "stamp"), inbox]
                else:
                    shutil.copy(os.path.join(helpers, "stamp"), work)
                    command = [binary, "run", "--config", write_config(work, inbox, stamps)]
                    env.update(extra)
                latencies, threads = one_run(command, env, helpers, args.files, inbox, stamps)
                report(f"{pair} {label}", latencies, threads)
    finally:
        shutil.rmtree(helpers, ignore_errors=True)


if __name__ == "__main__":
    main()
