#!/usr/bin/env python3
"""Instructions (callgrind Ir) the inotify reader's thread runs for the first file after a
start, and for each of the next three: what a just-started daemon adds to its first job's
latency (bench-peers starts measuring as soon as the watches are in place). bench-peers'
rule and writer, one file at a time; collection toggled on the reader's thread
(ReadinessThread.Runner.run), zeroed once the daemon is up; prepared children off, as
valgrind ends the daemon at their clone (the first job's exit makes one). Counts, not
times: the same at any load. docs/measurements/latency-path.md, "The first event after a start".

    python3 Tests/bench/first_event_instructions.py [--binary .build/release/watchkeeper]

Needs valgrind, gcc and ../shared/bench-peers."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

from latency_path import build_helpers, write_config
from symbol_order import PREPARED_CHILD_OFF, READER_THREAD, copy_without_dwarf


def totals(profile):
    with open(profile, errors="replace") as f:
        for line in f:
            if line.startswith("totals:"):
                return int(line.split()[1])
    sys.exit(f"no totals in {profile}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("unable to find valgrind: apt-get install valgrind")
    work = tempfile.mkdtemp(prefix="wk-first-event-")
    try:
        build_helpers(work, ("stamp", "writer"))
        inbox = f"{work}/in"
        os.makedirs(inbox)
        config = write_config(work, inbox, f"{work}/stamps")
        binary = copy_without_dwarf(args.binary, work)
        profile, log = f"{work}/cg.out", f"{work}/stderr.log"
        with open(log, "w") as stderr:
            daemon = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}",
                                       f"--toggle-collect={READER_THREAD}", binary, "run", "--config", config],
                                      stdout=stderr, stderr=stderr, start_new_session=True,
                                      env=dict(os.environ, **{PREPARED_CHILD_OFF: "1"}))
        try:
            # The bench's rule logs at notice: ready once the control socket listens (made
            # before READY=1), and a moment more under valgrind.
            deadline = time.monotonic() + 120
            while not os.path.exists(f"{work}/run/control.sock"):
                if time.monotonic() > deadline or daemon.poll() is not None:
                    sys.exit(f"the daemon did not start; its log: {log}")
                time.sleep(0.5)
            time.sleep(3)
            control = lambda *a: subprocess.run(["callgrind_control", *a, str(daemon.pid)], check=True, capture_output=True)
            control("--zero")
            subprocess.run([f"{work}/writer", inbox, "first-", "1", "0", f"{work}/t"], check=True, stdout=subprocess.DEVNULL)
            time.sleep(2)
            control("--dump=first")
            for i in range(3):
                subprocess.run([f"{work}/writer", inbox, f"next{i}-", "1", "0", f"{work}/t"], check=True, stdout=subprocess.DEVNULL)
                time.sleep(1)
            control("--dump=next")
        finally:
            daemon.terminate()
            daemon.wait(timeout=60)
        with open(f"{work}/stamps") as f:
            handled = sum(1 for _ in f)
        if handled != 4:
            sys.exit(f"{handled} of 4 files handled; the daemon's log: {log}")
        first, following = totals(f"{profile}.1"), totals(f"{profile}.2")
        print(f"{os.path.basename(args.binary)}: first file {first:,} instructions on the reader thread, "
              f"each of the next three {following // 3:,}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
