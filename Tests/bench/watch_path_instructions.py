#!/usr/bin/env python3
"""Instructions (callgrind Ir) per file on the watching path: the inotify read's decode
(KernelEventWatcher.readQueued) and the backend's delivery (InotifyBackend.deliver, which
runs the watch table, DirectoryWatcher.handle, the rule, admission with its statx, and the
submit) to its return. FILES files GAP_MS apart, counters zeroed after three warm-up files.
Counts, not times: the same at any load. valgrind 3.19 cannot read the release binary's
DWARF 5, so pass a copy made with `objcopy --strip-debug` (the symbols stay). Keep GAP_MS
long enough that each job ends before the next file (50 ms is: 30 files, all handled): a job
queued behind another is cloned without CLONE_VFORK on a stack of its own (nowait.c), and
valgrind stops the whole daemon at that clone ("Unsupported clone() flags"), as it does at
a prepared child's, which this script turns off (`WATCHKEEPER_NO_PREPARED_CHILD`).
docs/measurements/latency-path.md ("Issue 39, third round: reader").

    python3 Tests/bench/watch_path_instructions.py STRIPPED_BINARY FILES GAP_MS OUT.callgrind [all]

With `all`, every thread's instructions are counted, not only the watcher's: the engine's
request, the spawn and the work after it (JobRun.spawnMain, JobEngine.launch) are then in
the tree too, and the total includes the daemon's stop (its final state dump).

Then `callgrind_annotate --tree=calling --inclusive=yes OUT.callgrind | swift demangle
--simplified` says where they go. Needs valgrind, gcc and ../shared/bench-peers."""
import os, subprocess, sys, tempfile, time, shutil, glob
from latency_path import build_helpers, write_config
from symbol_order import PREPARED_CHILD_OFF

binary, files, gap_ms, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
everything = sys.argv[5:] == ["all"]
work = tempfile.mkdtemp(prefix="wk-reader-cg-")
try:
    build_helpers(work, ("stamp", "writer"))
    inbox = f"{work}/in"
    os.makedirs(inbox)
    write_config(work, inbox, f"{work}/stamps")
    cg = f"{work}/cg.out"
    toggles = [] if everything else ["--toggle-collect=$s15WatchkeeperCore18KernelEventWatcherC10readQueued*",
                                     "--toggle-collect=$s15WatchkeeperCore14InotifyBackendC7deliver*"]
    daemon = subprocess.Popen(["valgrind", "--tool=callgrind", "--trace-children=no", f"--callgrind-out-file={cg}", *toggles,
                               binary, "run", "--config", f"{work}/wk.toml"],
                              stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True,
                              env=dict(os.environ, **{PREPARED_CHILD_OFF: "1"}))
    def handled():
        return sum(1 for _ in open(f"{work}/stamps")) if os.path.exists(f"{work}/stamps") else 0
    time.sleep(15)
    for i in range(3):
        subprocess.run([f"{work}/writer", inbox, f"warm{i}-", "1", "0", f"{work}/warm"], check=True, stdout=subprocess.DEVNULL)
        deadline = time.time() + 30
        while handled() < i + 1 and time.time() < deadline:
            time.sleep(0.2)
    time.sleep(1)
    subprocess.run(["callgrind_control", "-z", str(daemon.pid)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([f"{work}/writer", inbox, "g", str(files), str(gap_ms * 1000), f"{work}/writes"], check=True,
                   stdout=subprocess.DEVNULL)
    deadline = time.time() + 60
    while handled() < files + 3 and time.time() < deadline:
        time.sleep(0.2)
    daemon.send_signal(15)
    daemon.wait(120)
    outs = glob.glob(cg + "*")
    shutil.copy(max(outs, key=os.path.getmtime), out)
    total = subprocess.run(["callgrind_annotate", out], capture_output=True, text=True).stdout
    line = next(l for l in total.splitlines() if "PROGRAM TOTALS" in l)
    ir = int(line.split()[0].replace(",", ""))
    print(f"{os.path.basename(binary)} files={files} handled={handled() - 3} Ir={ir} per delivery={ir / files:.0f}")
finally:
    shutil.rmtree(work, ignore_errors=True)
