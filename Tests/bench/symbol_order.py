#!/usr/bin/env python3
"""The link order of the release binary: the functions a daemon runs (start, watching
1,000 directories, a few jobs, a task, a dump, a reload, the stop) listed for lld's
--symbol-ordering-file, so they sit together in a few pages of code instead of spread
over all 10 MB of it. Idle RSS is mostly code pages (docs/measurements/performance.md,
"Idle memory"), so this is what the release build's link order comes from. The functions
the inotify reader's thread runs for a file, from its event to its job's exec, come first,
packed, for the latency of a lone event after an idle spell (latency-path.md, "The event
path's code pages"); then the start-up's, then what idle adds, then the rest.

    python3 Tests/bench/symbol_order.py [--binary .build/release/watchkeeper] [--out link/symbol-order.txt]

Runs the daemon under valgrind's callgrind (apt-get install valgrind), which sees every
function executed, not a sample. A symbol the file names that a later build no longer has
is skipped by the linker; a new function not in the file is placed after the listed ones,
so a stale file costs memory, never correctness. Rerun it when the start-up or the job
path changes much. The traced configuration has no [cluster] on purpose: the list is the path
every daemon runs, and the etcd code stays out of its pages (docs/measurements/fleet.md)."""

import argparse
import bisect
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CONFIG = """\
[daemon]
max_jobs = 8

[[watch]]
name = "inbox"
path = "{root}/in"
recursive = true
command = ["/bin/echo", "{{path}}"]

# bench-peers' rule (../shared/bench-peers/bench.py), so its start-up's code is listed too.
[[watch]]
name = "bench"
path = "{root}/bench"
events = ["closed_write"]
catch_up = false
command = ["/bin/echo", "{{path}}"]
environment = {{ STAMP_OUT = "{root}/stamps" }}

[[task]]
name = "tick"
every = "2s"
run_on_start = true
budget = "5s"
shell = true
command = 'echo "PROGRESS=50" >&"$WATCHKEEPER_PROGRESS_FD"; echo tick'
"""


def wait_for(path, text, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with open(path, errors="replace") as f:
                if text in f.read():
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.5)
    sys.exit(f"{text!r} did not appear in {path} within {seconds} s")


def part_number(profile):
    """Callgrind numbers its dumps in a `part:` line (the final one is `callgrind.out`, the one
    at ready `callgrind.out.1`)."""
    with open(profile, errors="replace") as f:
        for line in f:
            if line.startswith("part:"):
                return int(line.split(":")[1])
    return 0


def copy_without_dwarf(binary, directory):
    """A copy of `binary` in `directory` without its DWARF, which valgrind 3.19 cannot read
    (the toolchain writes DWARF 5); the symbols stay. Its path."""
    copy = os.path.join(directory, os.path.basename(binary))
    objcopy = shutil.which("llvm-objcopy") or "/opt/swift/usr/bin/llvm-objcopy"
    subprocess.run([objcopy, "--strip-debug", os.path.abspath(binary), copy], check=True)
    return copy


def function_symbols(binary):
    """(address, name) of every function of `binary`, by address."""
    listing = subprocess.run(["llvm-nm", "-n", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
    symbols = []
    for line in listing.splitlines():
        fields = line.split(None, 2)
        if len(fields) == 3 and fields[1] in "tTwW":
            symbols.append((int(fields[0], 16), fields[2]))
    return symbols


def executed_functions(profile, binary, symbols):
    """Every function of `binary` with an executed instruction, in the order callgrind's output
    first shows one. By address, not by callgrind's `fn=` names: code entered by a jump (a tail
    call to a metadata or witness table accessor) is counted in its caller's name, and aliases
    share one name, so 36 of the 84 code page faults of a start were in functions the names
    missed (perf record -e page-faults -d, docs/measurements/idle-memory.md)."""
    starts = [address for address, _ in symbols]
    by_name = {name: address for address, name in symbols}
    functions, seen, in_binary, base = [], set(), False, None
    with open(profile, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                in_binary = line[3:].strip() == binary
            elif line.startswith("fn=") and in_binary and base is None:
                name = line[3:].strip()
                current = name if name in by_name else None
            elif in_binary and line.startswith("0x"):
                address = int(line.split()[0], 16)
                if base is None:
                    # The load address, from the first function whose name nm knows: its first
                    # executed instruction is not always its entry, so round to the page.
                    if current is None:
                        continue
                    base = (address - by_name[current]) & ~0xFFF
                index = bisect.bisect_right(starts, address - base) - 1
                if index >= 0 and symbols[index][1] not in seen:
                    seen.add(symbols[index][1])
                    functions.append(symbols[index][1])
    return functions


# The inotify reader's thread (ReadinessThread.Runner.run, never left while it runs): its
# every instruction is a file's way from the read to its job's exec, the engine's included
# (carried on the same thread), and nothing of the start-up.
READER_THREAD = "$s15WatchkeeperCore15ReadinessThreadC6Runner*runyyF"
# Valgrind ends the daemon at a prepared child's clone: the scripts that run it under valgrind turn them off.
PREPARED_CHILD_OFF = "WATCHKEEPER_NO_PREPARED_CHILD"


# What a lone file's job runs that callgrind cannot show: valgrind refuses the prepared
# child's clone ("Unsupported clone() flags") and ends the program there, so the daemon runs
# under it with prepared children switched off and every job takes the ordinary spawn.
# The spawning thread's side of the prepared spawn (prepared.c, nowait.c's request copy) and
# what the child runs between its wake byte and its exec (child.c), in the order they run;
# names the compiler inlined are not in the binary and are left out.
PREPARED_SPAWN = ["wk_spawn_prepared", "parked_block", "fits", "wk_block_copy_request", "copy_into", "copy_string",
                  "copy_vector", "join_cgroup_for", "wait_for_exec", "wk_spawn_succeed", "finish_and_exec", "report_and_exit"]


def event_path(binary, symbols, scratch, env):
    """The functions of `binary` the reader thread ran for 10 files of bench-peers' rule, one
    at a time after 3 to warm up, in the order it first ran them."""
    profile = os.path.join(scratch, "event-path.out")
    log = os.path.join(scratch, "event-path.log")
    with open(log, "w") as stderr:
        daemon = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}", "--dump-instr=yes",
                                   "--compress-pos=no", "--compress-strings=no", "--demangle=no", f"--toggle-collect={READER_THREAD}",
                                   binary, "run", "--config", os.path.join(scratch, "watchkeeper.toml")],
                                  env=env, stdout=stderr, stderr=stderr, cwd=scratch)
    wait_for(log, "ready in", 600)
    for i in range(13):
        if i == 3:
            # What only the first events run (metadata made once, tables grown) stays out.
            subprocess.run(["callgrind_control", "--zero", str(daemon.pid)], check=True, capture_output=True)
        with open(os.path.join(scratch, "bench", f"f{i}"), "w") as f:
            f.write("x")
        time.sleep(0.3)
    time.sleep(2)
    daemon.send_signal(signal.SIGTERM)
    if daemon.wait(timeout=120) != 0:
        sys.exit(f"the daemon exited {daemon.returncode}; its log: {log}")
    functions = executed_functions(profile, binary, symbols)
    if len(functions) < 100:
        sys.exit(f"only {len(functions)} functions on the reader thread: has {READER_THREAD} been renamed?")
    names = {name for _, name in symbols}
    return functions + [name for name in PREPARED_SPAWN if name in names and name not in functions]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--out", default="link/symbol-order.txt")
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("unable to find valgrind: apt-get install valgrind")
    scratch = tempfile.mkdtemp(prefix="wk-symbol-order-")
    try:
        binary = copy_without_dwarf(args.binary, scratch)
        for name in ("run", "state", "bench"):
            os.makedirs(os.path.join(scratch, name))
        for i in range(100):
            for j in range(10):
                os.makedirs(os.path.join(scratch, "in", f"d{i}", f"e{j}"))
        config = os.path.join(scratch, "watchkeeper.toml")
        with open(config, "w") as f:
            f.write(CONFIG.format(root=scratch))
        profile = os.path.join(scratch, "callgrind.out")
        log = os.path.join(scratch, "stderr.log")
        # Valgrind ends a program at the prepared child's clone; PREPARED_SPAWN lists its path.
        env = {"PATH": "/usr/bin:/bin", "RUNTIME_DIRECTORY": scratch + "/run", "STATE_DIRECTORY": scratch + "/state",
               PREPARED_CHILD_OFF: "1"}
        with open(log, "w") as stderr:
            daemon = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={profile}", "--dump-instr=yes",
                                       "--compress-pos=no", "--compress-strings=no", "--demangle=no", binary, "run", "--config", config],
                                      env=env, stdout=stderr, stderr=stderr, cwd=scratch)
        wait_for(log, "ready in", 600)
        # The start-up's functions first, in a part of their own: an idle daemon (and
        # bench-peers' idle reading, taken when the watches are in place) touches only these,
        # so they fill as few 64 KiB fault-around windows as they can (idle-memory.md).
        subprocess.run(["callgrind_control", "--dump=ready", str(daemon.pid)], check=True, capture_output=True)
        # Then what an idle daemon runs next, in a part of its own: the watchdog's probe every
        # 5 s and the worker threads libdispatch makes again for it once its idle ones have
        # left. Listed right after the start-up, the probe tick's code shares its windows
        # instead of faulting in new ones (idle-memory.md, "The main thread's unwind").
        time.sleep(12)
        subprocess.run(["callgrind_control", "--dump=idle", str(daemon.pid)], check=True, capture_output=True)
        # One at a time, each job alone in line: a job with others waiting behind it is cloned
        # without waiting for its exec, a clone valgrind refuses ("Unsupported clone() flags").
        for i in range(20):
            with open(os.path.join(scratch, "in", f"d{i}", "e1", f"file-{i}"), "w") as f:
                f.write("x")
            time.sleep(0.5)
        time.sleep(5)
        daemon.send_signal(signal.SIGUSR1)
        time.sleep(3)
        daemon.send_signal(signal.SIGHUP)
        time.sleep(3)
        for i in range(5):
            os.rename(os.path.join(scratch, "in", f"d{i}", "e1", f"file-{i}"), os.path.join(scratch, "in", f"d{i}", "e2", f"moved-{i}"))
        time.sleep(5)
        daemon.send_signal(signal.SIGTERM)
        if daemon.wait(timeout=120) != 0:
            sys.exit(f"the daemon exited {daemon.returncode}; its log: {log}")
        parts = sorted((p for p in os.listdir(scratch) if p.startswith("callgrind.out")), key=lambda p: part_number(os.path.join(scratch, p)))
        if len(parts) < 3:
            sys.exit(f"callgrind wrote {parts}: expected a part at ready, one after the idle ticks and one at the end")
        symbols = function_symbols(binary)
        by_part = [executed_functions(os.path.join(scratch, part), binary, symbols) for part in parts]
        functions = list(dict.fromkeys(name for part in by_part for name in part))
        print(f"{len(by_part[0])} functions in the start-up, {len(set(by_part[1]) - set(by_part[0]))} more at idle, {len(functions)} in all")
        hot = event_path(binary, symbols, scratch, env)
        listed = set(hot)
        functions = hot + [name for name in functions if name not in listed]
        print(f"{len(hot)} functions on the event path, listed first")
        if len(functions) < 1000:
            sys.exit(f"only {len(functions)} functions seen in {binary}: is callgrind's output format what this script reads?")
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as out:
            out.write("# lld --symbol-ordering-file for the release build: written by Tests/bench/symbol_order.py,\n"
                      "# the functions a daemon ran under callgrind. Do not edit; regenerate.\n")
            out.write("\n".join(functions) + "\n")
        print(f"{len(functions)} functions -> {args.out}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
