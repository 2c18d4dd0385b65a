#!/usr/bin/env python3
"""Who takes a job's CPU between its exec and its exit: `perf record -a` of the scheduler's
switches while paced files arrive (bench-peers' writer, 100 ms apart), for the release daemon
or bench-peers' bare C loop. Each time the job (bench-peers' stamp) is switched out still
runnable, the task switched in is charged until the job runs again.

    python3 Tests/bench/job_preemption.py [--binary .build/release/watchkeeper] [--system watchkeeper|baseline] [--files 150]

Prints, per task that ran in the job's place, how often and the µs per job. This is the
latency tail's step k in latency_path.py (exec to the job's first clock read).
docs/measurements/performance.md reads the output. Needs root, perf (linux-perf), gcc and
../shared/bench-peers."""

import argparse
import collections
import os
import re
import signal
import subprocess
import tempfile
import time

from latency_path import build_helpers, write_config

EVENTS = "sched:sched_switch,sched:sched_process_exec,sched:sched_process_exit"
LINE = re.compile(r"^\s*(.*?)\s+(\d+)\s+\[(\d+)\]\s+(\d+\.\d+):\s+(\S+):\s*(.*)$")
SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")


def record(args, work):
    build_helpers(work)
    inbox, stamps = os.path.join(work, "in"), os.path.join(work, "stamps")
    os.makedirs(inbox)
    if args.system == "baseline":
        command = [os.path.join(work, "baseline"), os.path.join(work, "stamp"), inbox]
    else:
        command = [args.binary, "run", "--config", write_config(work, inbox, stamps)]
    daemon = subprocess.Popen(command, env=dict(os.environ, STAMP_OUT=stamps), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    data = os.path.join(work, "perf.data")
    try:
        time.sleep(3)
        perf = subprocess.Popen(["perf", "record", "-q", "-a", "-k", "mono", "-e", EVENTS, "-o", data],
                                stderr=subprocess.DEVNULL)
        time.sleep(1)
        subprocess.run([os.path.join(work, "writer"), inbox, "g", str(args.files), "100000", os.path.join(work, "writes")],
                       check=True, stdout=subprocess.DEVNULL)
        time.sleep(1)
        perf.send_signal(signal.SIGINT)
        perf.wait(30)
    finally:
        daemon.terminate()
        daemon.wait(30)
    return subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,cpu,time,event,trace"],
                          capture_output=True, text=True, check=True).stdout


def preemptions(script):
    events = [(float(m[4]), int(m[2]), m[5], m[6]) for m in map(LINE.match, script.splitlines()) if m]
    started, ended = {}, {}
    for at, tid, event, trace in events:
        if event == "sched:sched_process_exec" and "stamp" in trace:
            started[tid] = at
        elif event == "sched:sched_process_exit" and tid in started:
            ended[tid] = at
    times, seconds, away = collections.Counter(), collections.Counter(), {}
    for at, tid, event, trace in events:
        m = SWITCH.search(trace) if event == "sched:sched_switch" else None
        if not m:
            continue
        job, state, instead, back = int(m[1]), m[2], m[3], int(m[4])
        if job in started and started[job] <= at <= ended.get(job, float("inf")) and state.startswith("R"):
            away[job] = (at, instead)
            times[instead] += 1
        if back in away:
            left, who = away.pop(back)
            seconds[who] += at - left
    return len(started), times, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--system", choices=("watchkeeper", "baseline"), default="watchkeeper")
    parser.add_argument("--files", type=int, default=150)
    args = parser.parse_args()
    jobs, times, seconds = preemptions(record(args, tempfile.mkdtemp(prefix="wk-job-preemption-")))
    print(f"{args.system}: {jobs} jobs; switched out while runnable between exec and exit:")
    if not times:
        print("  never")
    for who, count in times.most_common(10):
        print(f"  {who:20s} {count:4d} times, {seconds[who] * 1e6 / max(jobs, 1):7.1f} µs per job")


if __name__ == "__main__":
    main()
