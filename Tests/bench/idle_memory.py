#!/usr/bin/env python3
"""What the idle daemon's resident memory is, mapping by mapping: one daemon (release build)
watching DIRS directories under one recursive rule, configured as ../shared/bench-peers does
(`log_level = "notice"`, `max_jobs = 8`, `catch_up = false`), measured as soon as every
watch is in place (what bench-peers' idle figure reads) and again after IDLE seconds.

    python3 Tests/bench/idle_memory.py [--binary .build/release/watchkeeper] [--dirs 1000] [--idle 30] [--runs 3] [--smaps DIR]

Prints VmRSS, RssAnon, RssFile and threads at both moments, then the last run's resident
KiB by mapping: each of the binary's mappings named by the sections in it (llvm-readelf)
and its .bss, each library's code and data, the heap, the thread stacks and the other
anonymous mappings, with what of each is anonymous (written: it cannot be dropped). --smaps keeps each run's /proc/PID/smaps in DIR.

MALLOC_* and GLIBC_TUNABLES in the environment are passed to the daemon."""

import argparse
import collections
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time


def status(pid):
    figures = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, value = line.split(":", 1)
            if key in ("VmRSS", "RssAnon", "RssFile", "Threads"):
                figures[key] = int(value.split()[0])
    return figures


def inotify_watches(pid):
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                count += sum(1 for line in f if line.startswith("inotify wd:"))
        except OSError:
            pass
    return count


def mappings(pid):
    """(start, end, perms, path, rss_kib, anonymous_kib, file_offset) for every mapping."""
    rows, current = [], None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = re.match(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ \S+\s*(.*)$", line)
            if head:
                current = [int(head[1], 16), int(head[2], 16), head[3], head[5], 0, 0, int(head[4], 16)]
                rows.append(current)
            elif line.startswith("Rss:"):
                current[4] = int(line.split()[1])
            elif line.startswith("Anonymous:"):
                current[5] = int(line.split()[1])
    return rows


def stacks(pid):
    """Start addresses of the threads' stack mappings, from each thread's saved stack pointer."""
    pointers = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            pointers.append(int(fields[26]))  # kstkesp, field 29 (0 without ptrace rights)
        except (OSError, IndexError, ValueError):
            pass
    return pointers


def breakdown(pid, binary):
    """Resident KiB by what it is for."""
    parts, dirty = collections.OrderedDict(), {}
    rows = mappings(pid)
    binary = os.path.realpath(binary)
    binary_rows = [r for r in rows if r[3] == binary]
    after_binary = rows.index(binary_rows[-1]) + 1 if binary_rows else 0
    sections = file_sections(binary)
    for row in binary_rows:
        # Mappings are whole pages and sections are not: a section is named where at least
        # a page of it lies.
        end = row[6] + (row[1] - row[0])
        inside = [name for name, offset, size in sections if min(end, offset + size) - max(row[6], offset) >= 4096]
        shown = inside if len(inside) <= 3 else inside[:2] + ["...", inside[-1]]
        key = f"binary {row[2]}: {' '.join(shown)}"
        parts[key] = parts.get(key, 0) + row[4]
        dirty[key] = dirty.get(key, 0) + row[5]
    # The binary's .bss follows its file mappings, anonymous.
    if after_binary < len(rows) and rows[after_binary][3] == "" and rows[after_binary][2] == "rw-p":
        parts["binary: .bss"] = rows[after_binary][4]
        dirty["binary: .bss"] = rows[after_binary][5]
        bss = rows[after_binary]
    else:
        bss = None
    for row in rows:
        path = row[3]
        if row in binary_rows or row is bss:
            continue
        if path.startswith("/"):
            name = os.path.basename(path)
            name = re.sub(r"\.so.*", "", name)
            key = f"{name}: {'code' if 'x' in row[2] else 'data'}"
        elif path == "[heap]":
            key = "heap (main arena)"
        elif path.startswith("[stack"):
            key = "main thread stack"
        elif path in ("[vdso]", "[vvar]", "[vsyscall]", "[vvar_vclock]"):
            key = "vdso"
        elif row[2] == "---p":
            key = "guard pages"
        else:
            size = (row[1] - row[0]) // 1024
            # glibc's thread stacks are 8 MiB mappings (plus guard); its arenas are 64 MiB reservations.
            if size in (8192, 8188, 8196, 8200, 8184):
                key = "thread stacks (8 MiB each)"
            elif size >= 60 * 1024:
                key = "malloc arenas (64 MiB reservations)"
            else:
                key = "other anonymous"
        parts[key] = parts.get(key, 0) + row[4]
        dirty[key] = dirty.get(key, 0) + row[5]
    return parts, dirty


def file_sections(binary):
    """(name, file offset, size) of the binary's allocated sections, from llvm-readelf."""
    listing = subprocess.run(["llvm-readelf", "-S", "-W", binary], capture_output=True, text=True).stdout
    found = []
    for line in listing.splitlines():
        fields = re.match(r"^\s*\[\s*\d+\]\s+(\S+)\s+(\S+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+\S+\s+(\S*A\S*)", line)
        if fields and fields[2] != "NOBITS" and int(fields[4], 16) > 0:
            found.append((fields[1], int(fields[3], 16), int(fields[4], 16)))
    return found


def idle_daemon_config(dirs, scratch):
    """DIRS new directories under SCRATCH and a configuration watching them under one recursive
    rule, as bench-peers configures its idle daemon: (the configuration's path, the environment)."""
    root = f"{scratch}/dirs"
    for i in range(dirs):
        os.makedirs(f"{root}/d{i:04d}", exist_ok=True)
    config = f"{scratch}/watchkeeper.toml"
    with open(config, "w") as f:
        f.write(f'[daemon]\nstate_dir = "{scratch}/state"\nruntime_dir = "{scratch}/run"\nlog_level = "notice"\nmax_jobs = 8\n\n'
                f'[[watch]]\nname = "bench"\npath = "{root}"\nrecursive = true\nevents = ["closed_write"]\ncatch_up = false\n'
                f'command = ["/bin/true", "{{path}}"]\n')
    environment = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM")}
    return config, environment


def start_idle_daemon(binary, dirs, scratch):
    """One daemon watching DIRS new directories under one recursive rule, configured as
    bench-peers does, returned once every watch is in place (bench-peers' idle reading)."""
    config, environment = idle_daemon_config(dirs, scratch)
    with open(f"{scratch}/daemon.log", "w") as log:
        daemon = subprocess.Popen([binary, "run", "--config", config], stdout=log, stderr=log, env=environment)
    deadline = time.monotonic() + 60
    while inotify_watches(daemon.pid) < dirs + 1:
        if time.monotonic() > deadline or daemon.poll() is not None:
            daemon.kill()
            raise SystemExit(f"the daemon did not watch {dirs + 1} directories; see {scratch}/daemon.log")
        time.sleep(0.01)
    return daemon


def run_once(args, scratch, keep):
    daemon = start_idle_daemon(args.binary, args.dirs, scratch)
    try:
        ready = status(daemon.pid)
        ready_parts, _ = breakdown(daemon.pid, args.binary)
        time.sleep(args.idle)
        idle = status(daemon.pid)
        parts, dirty = breakdown(daemon.pid, args.binary)
        if keep:
            shutil.copy(f"/proc/{daemon.pid}/smaps", keep)
        return ready, idle, ready_parts, parts, dirty
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--dirs", type=int, default=1000)
    parser.add_argument("--idle", type=float, default=30)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smaps", help="keep each run's smaps in this directory")
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average before: {' '.join(f.read().split()[:3])}")
    mib = lambda kib: f"{kib / 1024:.1f}"
    for run in range(args.runs):
        scratch = tempfile.mkdtemp(prefix="wk-idle-memory-")
        keep = None
        if args.smaps:
            os.makedirs(args.smaps, exist_ok=True)
            keep = f"{args.smaps}/smaps.{run + 1}"
        try:
            ready, idle, ready_parts, parts, dirty = run_once(args, scratch, keep)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        print(f"run {run + 1}: watches in place: VmRSS {mib(ready['VmRSS'])} MiB (anon {mib(ready['RssAnon'])}, file {mib(ready['RssFile'])}), "
              f"{ready['Threads']} threads; after {args.idle:g} s: VmRSS {mib(idle['VmRSS'])} MiB (anon {mib(idle['RssAnon'])}, "
              f"file {mib(idle['RssFile'])}), {idle['Threads']} threads")
    with open("/proc/loadavg") as f:
        print(f"load average after: {' '.join(f.read().split()[:3])}")
    print(f"\nlast run, resident KiB by mapping: | when the watches were in place | after {args.idle:g} s | of which anonymous (dirty) |")
    for key in sorted(set(ready_parts) | set(parts), key=lambda k: -max(parts.get(k, 0), ready_parts.get(k, 0))):
        if max(parts.get(key, 0), ready_parts.get(key, 0)) > 0:
            print(f"| {key} | {ready_parts.get(key, 0)} | {parts.get(key, 0)} | {dirty.get(key, 0)} |")
    print(f"| total | {sum(ready_parts.values())} | {sum(parts.values())} | {sum(dirty.values())} |")


if __name__ == "__main__":
    main()
