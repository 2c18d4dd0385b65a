#!/usr/bin/env python3
"""The way from a file's close(2) to its job's first instruction, step by step, for the
release daemon and for the bare C loop of ../shared/bench-peers (c/baseline.c), each under
the same tracer: `perf record -k mono` of the raw_syscalls and sched tracepoints (cheap,
unlike strace's ptrace stops), paced deliveries written by bench-peers' writer, the job
bench-peers' stamp (it reads CLOCK_MONOTONIC first). Prints the p50, p90 and p99 of each step and the
system calls each side makes between the daemon's wake and the child's execve.

    python3 Tests/bench/latency_path.py [--binary .build/release/watchkeeper] [--system watchkeeper|baseline] [--files 60]

The tracer adds about 1 µs per system call to both systems; compare the two, not the totals
with bench-peers'. docs/measurements/latency-path.md reads the output. Needs root, perf
(linux-perf), gcc and ../shared/bench-peers."""

import argparse
import bisect
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time

PEERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../shared/bench-peers/c")
EVENTS = "raw_syscalls:sys_enter,raw_syscalls:sys_exit,sched:sched_switch,sched:sched_wakeup,sched:sched_process_exec"
LINE = re.compile(r"^\s*(\S.*?)\s+(\d+)\s+(\d+\.\d+):\s+(\S+):\s*(.*)$")


def build_helpers(directory, names=("stamp", "writer", "baseline")):
    """bench-peers' C helpers, built static into `directory` (the other bench scripts import this)."""
    for name in names:
        subprocess.run(["gcc", "-O2", "-static", "-o", os.path.join(directory, name), os.path.join(PEERS, name + ".c")], check=True)


def write_config(work, inbox, stamps):
    """The daemon's configuration with bench-peers' rule (its stamp as the job), in `work`; its path."""
    config = os.path.join(work, "wk.toml")
    with open(config, "w") as f:
        f.write(f'[daemon]\nstate_dir = "{work}/state"\nruntime_dir = "{work}/run"\nlog_level = "notice"\nmax_jobs = 8\n\n'
                f'[[watch]]\nname = "bench"\npath = "{inbox}"\nrecursive = false\nevents = ["closed_write"]\ncatch_up = false\n'
                f'command = ["{work}/stamp", "{{path}}"]\nenvironment = {{ STAMP_OUT = "{stamps}" }}\n')
    return config


def record(args, work):
    inbox = os.path.join(work, "in")
    os.makedirs(inbox)
    stamps = os.path.join(work, "stamps")
    if args.system == "baseline":
        command = [os.path.join(work, "baseline"), os.path.join(work, "stamp"), inbox]
    else:
        command = [args.binary, "run", "--config", write_config(work, inbox, stamps)]
    data = os.path.join(work, "perf.data")
    env = dict(os.environ, STAMP_OUT=stamps)
    traced = subprocess.Popen(["perf", "record", "-q", "-k", "mono", "-e", EVENTS, "-o", data, "--"] + command,
                              env=env, stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(3)
    writer = os.path.join(work, "writer")
    subprocess.run([writer, inbox, "warm", "1", "0", os.path.join(work, "warm")], check=True, stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    writes = os.path.join(work, "writes")
    subprocess.run([writer, inbox, "g", str(args.files), "300000", writes], check=True, stdout=subprocess.DEVNULL)
    time.sleep(1)
    daemon = subprocess.run(["pgrep", "-P", str(traced.pid)], capture_output=True, text=True).stdout.split()
    for pid in daemon:
        os.kill(int(pid), 15)
    traced.wait(30)
    script = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,time,event,trace"], capture_output=True, text=True).stdout
    return script, writes, stamps


def steps(script, writes, stamps):
    events = []
    for line in script.splitlines():
        match = LINE.match(line)
        if match:
            _, tid, at, event, rest = match.groups()
            events.append((float(at), int(tid), event, rest))
    events.sort()
    times = [event[0] for event in events]
    closed = {line.split()[0]: int(line.split()[2]) / 1e9 for line in open(writes)}
    started = {line.split()[0].rsplit("/", 1)[1]: int(line.split()[1]) / 1e9 for line in open(stamps)}
    found, calls = {}, {"daemon": [], "child": []}

    def add(name, seconds):
        found.setdefault(name, []).append(seconds * 1e6)

    for name, at in closed.items():
        if name not in started:
            continue
        window = events[bisect.bisect_left(times, at):bisect.bisect_right(times, started[name])]

        def first(test, after=0.0):
            return next((e for e in window if e[0] >= after and test(e)), None)

        def entering(number):
            return lambda e: e[2] == "raw_syscalls:sys_enter" and e[3].startswith(f"NR {number} ")

        def leaving(number):
            return lambda e: e[2] == "raw_syscalls:sys_exit" and e[3].startswith(f"NR {number} ")

        wake = first(lambda e: leaving(232)(e) or leaving(7)(e))  # epoll_wait (libdispatch), poll (C, the daemon's inotify reader)
        read = first(lambda e: entering(0)(e) and (", 40000," in e[3] or ", 10000," in e[3]))  # the inotify read
        clone = first(lambda e: entering(56)(e) or entering(435)(e))
        execve = first(entering(59))
        done = first(lambda e: e[2] == "sched:sched_process_exec" and "stamp" in e[3])
        if not (wake and read and clone and execve and done):
            continue
        read_done = first(lambda e: leaving(0)(e) and e[1] == read[1], read[0])
        child_runs = first(lambda e: e[2] == "raw_syscalls:sys_exit" and e[1] == execve[1], clone[0])
        add("a close(2) -> the daemon wakes (epoll_wait or poll returns)", wake[0] - at)
        add("b wake -> the inotify read returns", read_done[0] - wake[0])
        statx = first(lambda e: entering(332)(e) and e[1] == read[1], read_done[0])
        if statx:  # watchkeeper: the watching queue, then the jobs queue
            handle = first(lambda e: leaving(303)(e) and e[1] == read[1], statx[0])
            add("c read -> statx (decode the event, match the rule)", statx[0] - read_done[0])
            add("d statx + name_to_handle_at (the file's identity)", handle[0] - statx[0])
            if clone[1] == read[1]:
                # Carried (CarriedHandOffs): the reader thread runs the jobs queue's block
                # itself after the watching block, no wake between them.
                add("e-g identity -> clone, carried by the reader thread (admission, submit, request)", clone[0] - handle[0])
            else:
                futex = first(lambda e: entering(202)(e) and e[1] == read[1], handle[0])
                jobs = first(lambda e: e[1] == clone[1] and e[2] == "raw_syscalls:sys_exit", futex[0])
                add("e identity -> futex wake of the jobs queue (admission, submit)", futex[0] - handle[0])
                add("f the jobs queue's worker runs", jobs[0] - futex[0])
                add("g jobs queue: line, request, environment, pipes -> clone", clone[0] - jobs[0])
        else:
            add("c-g read -> clone3 (stack, signal mask)", clone[0] - read_done[0])
        add("a-g close(2) -> clone (the daemon's whole share)", clone[0] - at)
        add("h clone -> the child runs", child_runs[0] - clone[0])
        add("i the child's setup -> execve", execve[0] - child_runs[0])
        add("j execve -> exec done", done[0] - execve[0])
        add("k exec -> the job's first clock read", started[name] - done[0])
        add("= close(2) -> the job's first clock read", started[name] - at)
        for side, begin, end, is_child in (("daemon", wake[0], clone[0], False), ("child", clone[0], execve[0] + 1e-9, True)):
            calls[side].append(sum(1 for e in window if e[2] == "raw_syscalls:sys_enter" and begin <= e[0] < end and (e[1] == execve[1]) == is_child))
    print(f"{len(found.get('= close(2) -> the job' + chr(39) + 's first clock read', []))} deliveries")
    for name in sorted(found):
        values = sorted(found[name])
        tail = values[min(len(values) - 1, int(len(values) * 0.99))]
        print(f"{name:66s} p50 {statistics.median(values):7.1f} us  p90 {values[int(len(values) * 0.9)]:7.1f}  p99 {tail:7.1f}")
    spans = {"daemon": "the daemon's wake -> clone", "child": "clone -> execve"}
    for side, counts in calls.items():
        if counts:
            print(f"system calls, {side} ({spans[side]}): median {statistics.median(counts)}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--system", choices=["watchkeeper", "baseline"], default="watchkeeper")
    parser.add_argument("--files", type=int, default=60)
    args = parser.parse_args()
    args.binary = os.path.abspath(args.binary)
    work = tempfile.mkdtemp(prefix="wk-latency-path-")
    try:
        build_helpers(work)
        steps(*record(args, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
