#!/usr/bin/env python3
"""Thread creations of the release daemon while files arrive paced: `perf record` of
clone3 (the daemon's own threads: libdispatch's workers) and clone (the jobs), counted
between the writer's first and last file, and the thread creations between each file's
close(2) and its job's clone (on the path). A gap over 5 s lets libdispatch's idle workers
exit before each file. docs/measurements/latency-path.md ("Issue 39, third round: reader").

    python3 Tests/bench/thread_creations.py BINARY FILES GAP_MS

Needs root, perf, gcc and ../shared/bench-peers."""
import os, subprocess, sys, tempfile, time, shutil, datetime
from latency_path import build_helpers, write_config

binary, files, gap_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
work = tempfile.mkdtemp(prefix="wk-reader-clones-")
try:
    build_helpers(work, ("stamp", "writer"))
    inbox = f"{work}/in"
    os.makedirs(inbox)
    write_config(work, inbox, f"{work}/stamps")
    trace = f"{work}/trace"
    traced = subprocess.Popen(["perf", "record", "-q", "-k", "mono", "-e", "syscalls:sys_enter_clone3,syscalls:sys_enter_clone",
                               "-o", trace, "--", binary, "run", "--config", f"{work}/wk.toml"],
                              stderr=subprocess.DEVNULL, start_new_session=True)
    time.sleep(3)
    subprocess.run([f"{work}/writer", inbox, "warm", "1", "0", f"{work}/warm"], check=True, stdout=subprocess.DEVNULL)
    time.sleep(6)  # idle workers exit after 5 s: start from the state a quiet daemon is in

    subprocess.run([f"{work}/writer", inbox, "g", str(files), str(gap_ms * 1000), f"{work}/writes"], check=True,
                   stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    times = [line.split() for line in open(f"{work}/writes")]
    begin = min(int(t[1]) for t in times) / 1e9
    end = max(int(t[2]) for t in times) / 1e9 + 0.3
    daemon = subprocess.run(["pgrep", "-P", str(traced.pid)], capture_output=True, text=True).stdout.split()
    for pid in daemon:
        os.kill(int(pid), 15)
    traced.wait(60)
    clone3 = clone = 0
    closes = sorted(int(t[2]) / 1e9 for t in times)
    spawn_times, thread_times = [], []
    script = subprocess.run(["perf", "script", "-i", trace, "-F", "tid,time,event"], capture_output=True, text=True).stdout
    for line in script.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        at = float(parts[1].rstrip(":"))
        if "clone3" in parts[2]:
            thread_times.append(at)
        elif "clone" in parts[2]:
            spawn_times.append(at)
        if not (begin <= at <= end):
            continue
        if "clone3" in parts[2]:
            clone3 += 1
        elif "clone" in parts[2]:
            clone += 1
    on_path = 0
    for close in closes:
        spawn = min((t for t in spawn_times if t > close), default=None)
        if spawn:
            on_path += sum(1 for t in thread_times if close < t < spawn)
    handled = sum(1 for _ in open(f"{work}/stamps")) - 1 if os.path.exists(f"{work}/stamps") else 0
    load = open("/proc/loadavg").read().split()[0]
    print(f"files={files} gap={gap_ms}ms "
          f"jobs(clone)={clone} threads(clone3)={clone3} per100={100 * clone3 / files:.1f} on_path(close->spawn)={on_path} handled={handled} load1={load}")
finally:
    shutil.rmtree(work, ignore_errors=True)
