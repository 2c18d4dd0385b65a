#!/usr/bin/env python3
"""What the daemon keeps after a burst, and of what: one daemon (release build) watching one
directory with a `/bin/true {path}` rule, its VmRSS and RssAnon idle, when the burst has
drained (every file in the ledger), and SETTLE seconds later, then its dump's `resources`
(malloc in use and kept free, SQLite) and /proc/PID/smaps kept beside the scratch directory.

    python3 Tests/bench/memory_after_burst.py [--binary .build/release/watchkeeper] [--files 20000] [--settle 30]

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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--settle", type=int, default=30)
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
        for index in range(args.files):
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
        print("drained", memory(daemon.pid))
        time.sleep(args.settle)
        print(f"{args.settle} s later", memory(daemon.pid))
        os.kill(daemon.pid, signal.SIGUSR1)
        time.sleep(1)
        with open(f"{root}/run/state.json") as f:
            print("resources", json.dumps(json.load(f).get("resources")))
        shutil.copy(f"/proc/{daemon.pid}/smaps", root + ".smaps")
        print("smaps in", root + ".smaps")
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
