#!/usr/bin/env python3
"""What the daemon keeps after a burst, and of what: one daemon (release build) watching one
directory with a `/bin/true {path}` rule, its VmRSS and RssAnon idle, when the burst has
drained (every file in the ledger), and SETTLE seconds later, then its dump's `resources`
(malloc in use and kept free, SQLite) and /proc/PID/smaps kept beside the scratch directory.

    python3 Tests/bench/memory_after_burst.py [--binary .build/release/watchkeeper] [--files 20000] [--settle 30] [--rate N]

--rate writes N files a second instead of as fast as one thread can: below what the daemon
drains, no line of waiting files builds up, which tells the line's share of what stays.

MALLOC_* and GLIBC_TUNABLES in the environment are passed to the daemon, to try glibc's
settings without a rebuild."""

import argparse
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import time


def memory(pid):
    figures = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, value = line.split(":", 1)
            if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM", "Threads"):
                figures[key] = value.strip()
    return figures


def resources(pid, root):
    """The dump's memory figures: SIGUSR1, then state.json once rewritten."""
    path = f"{root}/run/state.json"
    before = os.stat(path).st_mtime_ns if os.path.exists(path) else 0
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (not os.path.exists(path) or os.stat(path).st_mtime_ns == before):
        time.sleep(0.1)
    with open(path) as f:
        figures = json.load(f).get("resources", {})
    return {key: figures.get(key) for key in ("rss_anonymous_bytes", "malloc_in_use_bytes", "malloc_free_kept_bytes", "sqlite_bytes", "threads")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--settle", type=int, default=30)
    parser.add_argument("--rate", type=float, default=0, help="files a second; 0: as fast as possible")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="wk-memory-after-burst-")
    for name in ("in", "run", "state"):
        os.makedirs(f"{root}/{name}")
    with open(f"{root}/watchkeeper.toml", "w") as f:
        f.write(f'[daemon]\nmax_jobs = 8\n\n[[watch]]\nname = "bench"\npath = "{root}/in"\ncommand = ["/bin/true", "{{path}}"]\n')
    env = {key: value for key, value in os.environ.items() if key.startswith("MALLOC_") or key == "GLIBC_TUNABLES"}
    env.update(PATH="/usr/bin:/bin", RUNTIME_DIRECTORY=f"{root}/run", STATE_DIRECTORY=f"{root}/state")
    with open(f"{root}/stderr.log", "w") as log:
        daemon = subprocess.Popen([os.path.abspath(args.binary), "run", "--config", f"{root}/watchkeeper.toml"], env=env, stderr=log)
    try:
        time.sleep(2)
        print("idle   ", memory(daemon.pid))
        print("resources", resources(daemon.pid, root))
        started = time.monotonic()
        for index in range(args.files):
            if args.rate > 0:
                time.sleep(max(0.0, started + index / args.rate - time.monotonic()))
            with open(f"{root}/in/f{index}", "w") as f:
                f.write("x")
        while True:
            time.sleep(1)
            try:
                with sqlite3.connect(f"file:{root}/state/watchkeeper.sqlite3?mode=ro", uri=True) as db:
                    if db.execute("SELECT count(*) FROM file_ledger").fetchone()[0] >= args.files:
                        break
            except sqlite3.Error:
                pass
        print("drained", memory(daemon.pid), f"{time.monotonic() - started:.1f} s after the first write")
        time.sleep(args.settle)
        print(f"{args.settle} s later", memory(daemon.pid))
        print("resources", resources(daemon.pid, root))
        shutil.copy(f"/proc/{daemon.pid}/smaps", root + ".smaps")
        print("smaps in", root + ".smaps")
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
