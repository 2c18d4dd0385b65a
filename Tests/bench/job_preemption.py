#!/usr/bin/env python3
"""Who takes a job's CPU between its exec and its exit: `perf record -a` of the scheduler's
switches while paced files arrive (bench-peers' writer, 100 ms apart), for the release daemon
or bench-peers' bare C loop. Each time the job (bench-peers' stamp) is switched out still
runnable, the task switched in is charged until the job runs again.

    python3 Tests/bench/job_preemption.py [--binary .build/release/watchkeeper] [--system watchkeeper|baseline] [--files 150]

Prints, per task that ran in the job's place, how often and the µs per job. This is the
latency tail's step k in latency_path.py (exec to the job's first clock read). For the
thread that cloned the job it also says when: at the exec (within 30 µs: the vfork parent
woken by the exec, which yields) or later, and whether a timer tick on that CPU came just
before (within 40 µs); and how often the kernel placed the child on its parent's CPU.
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

EVENTS = ("sched:sched_switch,sched:sched_process_exec,sched:sched_process_exit,sched:sched_wakeup_new,"
          "irq_vectors:local_timer_entry")
LINE = re.compile(r"^\s*(.*?)\s+(\d+)\s+\[(\d+)\]\s+(\d+\.\d+):\s+(\S+):\s*(.*)$")
SWITCH = re.compile(r"prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)")
NEW_TASK = re.compile(r"pid=(\d+) .*target_cpu=(\d+)")


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
    """Per task that ran in a runnable job's place: how often and for how long; and for the
    thread that cloned the job, when (at the exec or later, after a tick or not)."""
    events = [(float(m[4]), int(m[2]), int(m[3]), m[5], m[6]) for m in map(LINE.match, script.splitlines()) if m]
    started, ended, parent, placed = {}, {}, {}, collections.Counter()
    for at, tid, cpu, event, trace in events:
        if event == "sched:sched_wakeup_new" and (m := NEW_TASK.search(trace)):
            parent[int(m[1])] = (tid, cpu, int(m[2]))
        elif event == "sched:sched_process_exec" and "stamp" in trace:
            started[tid] = at
            if tid in parent:
                placed["on its parent's CPU" if parent[tid][1] == parent[tid][2] else "on another CPU"] += 1
        elif event == "sched:sched_process_exit" and tid in started:
            ended[tid] = at
    times, seconds, away, when, last_tick = collections.Counter(), collections.Counter(), {}, collections.Counter(), {}
    for at, tid, cpu, event, trace in events:
        if event == "irq_vectors:local_timer_entry":
            last_tick[cpu] = at
        m = SWITCH.search(trace) if event == "sched:sched_switch" else None
        if not m:
            continue
        job, state, instead, back = int(m[1]), m[2], m[3], int(m[4])
        if job in started and started[job] <= at <= ended.get(job, float("inf")) and state.startswith("R"):
            away[job] = (at, instead)
            times[instead] += 1
            if back == parent.get(job, (None,))[0]:
                if at - started[job] < 30e-6:
                    when["the parent, at the exec"] += 1
                else:
                    after_tick = at - last_tick.get(cpu, float("-inf")) < 40e-6
                    when["the parent, later, just after a tick" if after_tick else "the parent, later, no tick"] += 1
        if back in away:
            left, who = away.pop(back)
            seconds[who] += at - left
    return len(started), times, seconds, when, placed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--system", choices=("watchkeeper", "baseline"), default="watchkeeper")
    parser.add_argument("--files", type=int, default=150)
    args = parser.parse_args()
    jobs, times, seconds, when, placed = preemptions(record(args, tempfile.mkdtemp(prefix="wk-job-preemption-")))
    print(f"{args.system}: {jobs} jobs; switched out while runnable between exec and exit:")
    if not times:
        print("  never")
    for who, count in times.most_common(10):
        print(f"  {who:20s} {count:4d} times, {seconds[who] * 1e6 / max(jobs, 1):7.1f} µs per job")
    for what, count in sorted(when.items()):
        print(f"  by {what}: {count}")
    print("children placed " + ", ".join(f"{where}: {count}" for where, count in sorted(placed.items())))


if __name__ == "__main__":
    main()
