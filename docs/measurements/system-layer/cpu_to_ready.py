#!/usr/bin/env python3
"""Start a watchkeeper binary N times with a real NOTIFY_SOCKET; at READY=1 read the
daemon's CPU time (sum of /proc/PID/task/*/schedstat run time, which other load on the
machine does not inflate the way it inflates wall-clock time) and its RSS; then SIGTERM.
Binaries are run alternately so that both see the same machine.
usage: cpu_to_ready.py RUNS NAME=BINARY [NAME=BINARY ...]"""
import os, shutil, signal, socket, statistics, subprocess, sys, tempfile, time

def cpu_ns(pid):
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/schedstat") as f:
            total += int(f.read().split()[0])
    return total

def status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0])
    return fields

def run_once(binary):
    directory = tempfile.mkdtemp(prefix="wk-cpu-")
    try:
        config = os.path.join(directory, "watchkeeper.toml")
        with open(config, "w") as f:
            f.write('[daemon]\nlog_level = "info"\n')
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(os.path.join(directory, "notify.sock"))
        sock.settimeout(10)
        env = {"PATH": "/usr/bin:/bin", "NOTIFY_SOCKET": os.path.join(directory, "notify.sock"),
               "RUNTIME_DIRECTORY": os.path.join(directory, "run"), "STATE_DIRECTORY": os.path.join(directory, "state")}
        started = time.monotonic_ns()
        child = subprocess.Popen([binary, "run", "--config", config], env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while b"READY=1" not in sock.recv(4096).split(b"\n"):
            pass
        wall = time.monotonic_ns() - started
        cpu = cpu_ns(child.pid)
        memory = status(child.pid)
        child.send_signal(signal.SIGTERM)
        if child.wait(10) != 0:
            raise SystemExit(f"{binary} exited with {child.returncode}")
        sock.close()
        return wall, cpu, memory
    finally:
        shutil.rmtree(directory)

def main():
    runs = int(sys.argv[1])
    binaries = [arg.split("=", 1) for arg in sys.argv[2:]]
    results = {name: [] for name, _ in binaries}
    for _ in range(runs):
        for name, binary in binaries:
            results[name].append(run_once(binary))
    for name, rows in results.items():
        walls = [r[0] / 1e6 for r in rows]
        cpus = [r[1] / 1e6 for r in rows]
        rss = [r[2]["VmRSS"] / 1024 for r in rows]
        anon = [r[2]["RssAnon"] / 1024 for r in rows]
        print(f"{name}: {runs} runs; exec to READY wall p50 {statistics.median(walls):.2f} ms; "
              f"CPU to READY p50 {statistics.median(cpus):.2f} ms (min {min(cpus):.2f}); "
              f"RSS at READY p50 {statistics.median(rss):.2f} MiB (anon {statistics.median(anon):.2f} MiB)")

main()
