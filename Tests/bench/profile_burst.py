#!/usr/bin/env python3
"""Where the daemon's CPU goes per job: a file burst through `watchkeeper-bench watch`,
`perf record` on the daemon alone (its jobs excluded), every sample put in one bucket.

    python3 Tests/bench/profile_burst.py [--binary .build/release/watchkeeper] [--files 20000] [--seconds 12]

A sample goes to the bucket of the innermost frame of its stack that a bucket names, so
"spawn" is the clone and what the shim does, and the job engine around it counts only
what it does itself; a frame two buckets name goes to the first in the list. Needs perf
(linux-perf) and a release build (`make release`)."""

import argparse
import collections
import subprocess
import time

from burst_daemon import BurstDaemon

# (bucket, substrings of a mangled or C symbol).
BUCKETS = [
    ("spawn: clone and the child's setup until exec", ["ProcessSpawner", "wk_spawn"]),
    ("pipes: pipe2, O_NONBLOCK, F_SETPIPE_SZ", ["forJobOutput", "OwnedPipeV7enlarge"]),
    ("run record: the journal line of each run", ["RunRecordV7journal"]),
    ("state file: SQLite", ["StateStore", "FileLedger", "StateReader", "sqlite3"]),
    ("watching: inotify events to job requests", ["InotifyWatcher", "DirectoryWatcher"]),
    ("argv and environment of the spawn", ["spawnRequest"]),
    ("output channels: set up, read, close", ["OutputChannel", "JobOutputPlan", "JobOutputWriter"]),
    ("reaping: waitid on the pidfd", ["waitid"]),
    ("job descriptors: epoll_ctl, epoll_wait, dispatch", ["DescriptorPoller", "PolledDescriptor", "epoll_ctl"]),
    ("job deadlines and timers", ["JobDeadline", "RegisteredTimer", "makeTimer"]),
    ("sources registry (the dump's list)", ["SourceRegistry"]),
    ("STATUS= summary", ["runningSummary", "jobSummary"]),
    ("libdispatch manager thread", ["_dispatch_mgr_thread"]),
    ("cgroup or process group of the job", ["JobCgroup", "signalGroup", "groupHasMembers", "releaseContainment"]),
    ("the rest of the job engine (line, records, state machine)", ["JobEngine", "JobRun", "ChildProcess", "JobLine"]),
    ("thread hand-offs: futex, wake-ups, scheduling", ["futex", "sem_post", "sem_wait", "__schedule", "_dispatch_root_queue"]),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--bench", default=".build/release/watchkeeper-bench")
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--seconds", type=int, default=12)
    parser.add_argument("--data", default="/tmp/watchkeeper-profile.data")
    args = parser.parse_args()
    burst = BurstDaemon(args.bench, args.binary, args.files)
    time.sleep(3)  # into the burst
    subprocess.run(["perf", "record", "--no-inherit", "-F", "1999", "-g", "-p", str(burst.pid), "-o", args.data, "--", "sleep", str(args.seconds)],
                   check=True, capture_output=True)
    burst.finish()
    script = subprocess.run(["perf", "script", "-i", args.data, "-F", "ip,sym"], capture_output=True, text=True, check=True).stdout
    counts = collections.Counter()
    total = 0
    for block in script.split("\n\n"):
        frames = [line.strip().split(None, 1)[-1] for line in block.splitlines() if line.strip()]
        if not frames:
            continue
        total += 1
        # perf script lists the leaf first: the innermost frame any bucket names decides.
        bucket = next((name for frame in frames for name, marks in BUCKETS if any(mark in frame for mark in marks)),
                      "other (kernel entry, malloc, runtime)")
        counts[bucket] += 1
    print(f"{total} samples at 1999 Hz = {total / 1999:.2f} s of daemon CPU in {args.seconds} s")
    for name, count in counts.most_common():
        print(f"{100 * count / total:5.1f} %  {name}")


if __name__ == "__main__":
    main()
