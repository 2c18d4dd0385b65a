"""Where a burst's CPU goes, for bench-peers' C loop and the daemon side by side: the
drain as bench-peers takes it (the writer's last close to the last stamp) and the whole
burst (its first open to the last stamp), the watcher
process's own CPU, its children's (the jobs: clone, exec, run, exit) and the whole
machine's, and how busy the machine's CPUs were during it.

    python3 Tests/bench/burst_cpu.py --binary .build/x86_64-unknown-linux-gnu/release/watchkeeper --runs 2
    python3 Tests/bench/burst_cpu.py --binary ... --spawn-wait   # also the jobs queue's wait in wk_spawn (perf probe)
    python3 Tests/bench/burst_cpu.py --binary ... --exec-delay   # also each child's clone-to-exec, both systems (perf sched events)

On two CPUs the drain follows the machine's CPU (docs/measurements/latency-path.md,
"The spawn off the jobs queue"). Root; uses /dev/shm for the watched directory."""

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time

from latency_path import build_helpers, write_config

TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid):
    """(own, children) CPU seconds of `pid` from /proc/PID/stat."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(x) / TICK for x in fields[11:15])
    return utime + stime, cutime + cstime


def machine_cpu():
    """(busy, idle) CPU seconds of the whole machine from /proc/stat."""
    values = list(map(int, open("/proc/stat").readline().split()[1:]))
    idle = values[3] + values[4]
    return (sum(values) - idle) / TICK, idle / TICK


def wait_for_lines(path, count, deadline):
    """Until `path` has `count` lines, reading only what was added since the last look: the
    burst's own CPU is measured, and rereading 20,000 lines every look would add to it."""
    offset = lines = 0
    while lines < count and time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path, "rb") as f:
                f.seek(offset)
                added = f.read()
            offset += len(added)
            lines += added.count(b"\n")
        time.sleep(0.1)


def burst(system, binary, helpers, files, spawn_wait, exec_delay=False):
    work = tempfile.mkdtemp(prefix="burst-cpu-", dir="/dev/shm")
    inbox, stamps = os.path.join(work, "inbox"), os.path.join(work, "stamps")
    os.makedirs(inbox)
    shutil.copy(os.path.join(helpers, "stamp"), work)
    if system == "baseline":
        command, env = [os.path.join(helpers, "baseline"), os.path.join(work, "stamp"), inbox], dict(os.environ, STAMP_OUT=stamps)
    else:
        command, env = [binary, "run", "--config", write_config(work, inbox, stamps)], dict(os.environ)
    watcher = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "log"), "w"), start_new_session=True)
    time.sleep(2)
    probe = None
    if spawn_wait and system != "baseline":
        probe = subprocess.Popen(["perf", "record", "-q", "-a", "-o", os.path.join(work, "spawn.data"),
                                  "-e", "probe_watchkeeper:wk_spawn", "-e", "probe_watchkeeper:wk_spawn__return"])
        time.sleep(1)
    if exec_delay:
        probe = subprocess.Popen(["perf", "record", "-q", "-a", "-o", os.path.join(work, "sched.data"),
                                  "-e", "sched:sched_wakeup_new", "-e", "sched:sched_process_exec"])
        time.sleep(1)
    own0, children0 = process_cpu(watcher.pid)
    busy0, idle0 = machine_cpu()
    subprocess.run([os.path.join(helpers, "writer"), inbox, "B", str(files), "0", os.path.join(work, "writes")], check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(work, "writes")) as writes:
        written = writes.read().split("\n")
        first_open, last_close = int(written[0].split()[1]), int(written[-2].split()[2])
    wait_for_lines(stamps, files, deadline=time.monotonic() + 120)
    own1, children1 = process_cpu(watcher.pid)
    busy1, idle1 = machine_cpu()
    with open(stamps) as lines:
        last_stamp = max(int(line.split()[1]) for line in lines if len(line.split()) > 1)
    if probe:
        probe.send_signal(2)
        probe.wait()
    watcher.terminate()
    watcher.wait(timeout=60)
    busy, idle = busy1 - busy0, idle1 - idle0
    # The drain alone flatters a system that slows the writer down (both share the CPUs):
    # the whole burst, from the first open to the last stamp, is printed beside it.
    line = (f"{system}: whole burst {(last_stamp - first_open) / 1e9:.2f} s, drain {(last_stamp - last_close) / 1e9:.2f} s, its own CPU {own1 - own0:.2f} s, its jobs' {children1 - children0:.2f} s, "
            f"the machine's {busy:.2f} s ({100 * busy / (busy + idle):.0f} % busy), load {os.getloadavg()[0]:.2f}")
    if probe and exec_delay:
        line += ", " + clone_to_exec(os.path.join(work, "sched.data"), watcher.pid)
    elif probe:
        line += ", " + spawn_wait_share(os.path.join(work, "spawn.data"))
    print(line, flush=True)
    shutil.rmtree(work, ignore_errors=True)


def spawn_wait_share(data):
    """The time threads spent inside wk_spawn (clone to the child's exec) against the burst's span."""
    script = subprocess.run(["perf", "script", "-i", data, "-F", "tid,time,event"], capture_output=True, text=True).stdout
    entered, waits, first, last = {}, [], None, None
    for match in re.finditer(r"^\s*(\d+)\s+([\d.]+):\s+probe_watchkeeper:(wk_spawn\S*):", script, re.M):
        tid, at, event = match[1], float(match[2]), match[3]
        if event == "wk_spawn":
            entered[tid] = at
            first = first or at
        elif tid in entered:
            waits.append(at - entered.pop(tid))
            last = at
    if not waits:
        return "no spawns probed"
    waits.sort()
    return (f"{len(waits)} spawns, {sum(waits):.2f} s in wk_spawn of {last - first:.2f} s "
            f"(p50 {waits[len(waits) // 2] * 1e6:.0f} µs, p90 {waits[len(waits) * 9 // 10] * 1e6:.0f} µs)")


def clone_to_exec(data, parent):
    """Each child of `parent`: from its creation (sched_wakeup_new, in the parent's context) to
    its execve (sched_process_exec), the part of a job's start that the spawner waits for."""
    script = subprocess.run(["perf", "script", "-i", data, "-F", "pid,time,event,trace"], capture_output=True, text=True).stdout
    created, delays = {}, []
    for match in re.finditer(r"^\s*(\d+)\s+([\d.]+):\s+sched:(sched_wakeup_new|sched_process_exec):(.*)$", script, re.M):
        pid, at, event, trace = int(match[1]), float(match[2]), match[3], match[4]
        if event == "sched_wakeup_new":
            if pid == parent:
                created[int(re.search(r"\bpid=(\d+)", trace)[1])] = at
        else:
            child = int(re.search(r"\bpid=(\d+)", trace)[1])
            if child in created:
                delays.append(at - created.pop(child))
    if not delays:
        return "no children seen"
    delays.sort()
    return (f"{len(delays)} children, clone to exec p50 {delays[len(delays) // 2] * 1e6:.0f} µs, "
            f"p90 {delays[len(delays) * 9 // 10] * 1e6:.0f} µs, mean {sum(delays) / len(delays) * 1e6:.0f} µs, "
            f"{sum(delays):.2f} s in all")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--spawn-wait", action="store_true", help="probe wk_spawn with perf (slows the drain a little)")
    parser.add_argument("--exec-delay", action="store_true", help="each child's clone to exec, for both systems (perf sched events)")
    args = parser.parse_args()
    binary = os.path.abspath(args.binary)
    helpers = tempfile.mkdtemp(prefix="burst-cpu-helpers-")
    build_helpers(helpers)
    if args.spawn_wait:
        subprocess.run(["perf", "probe", "-q", "-d", "probe_watchkeeper:*"], stderr=subprocess.DEVNULL)
        for point in ("wk_spawn", "wk_spawn%return"):
            subprocess.run(["perf", "probe", "-q", "-x", binary, point], check=True)
    try:
        for _ in range(args.runs):
            for system in ("baseline", "watchkeeper"):
                burst(system, binary, helpers, args.files, args.spawn_wait and not args.exec_delay, args.exec_delay)
    finally:
        if args.spawn_wait:
            subprocess.run(["perf", "probe", "-q", "-d", "probe_watchkeeper:*"], stderr=subprocess.DEVNULL)
        shutil.rmtree(helpers, ignore_errors=True)


if __name__ == "__main__":
    main()
