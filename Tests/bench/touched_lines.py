#!/usr/bin/env python3
"""What a start touches in the binary, to the 64-byte line: one daemon configured as
bench-peers' idle one (idle_memory.py's: 1,000 directories under one recursive rule) run under
valgrind's lackey (`--trace-mem=yes`: every instruction fetch, load and store) until its last
watch is in place, each access reduced to its line by a small C filter, then counted per
output section of the binary: the lines touched, the 4 KiB pages they are on, and the 64 KiB
fault-around windows those pages are in (an upper bound of what is resident after a real
start; idle-memory.md, "Where it stands", reads the output).

    python3 Tests/bench/touched_lines.py [--binary .build/release/watchkeeper] [--dirs 1000]

The start takes 35-50 s under lackey, so timers of the first seconds (the watchdog's tick)
run during it too: a few functions show as touched that a real start reaches only later.
Needs root, valgrind and gcc."""

import argparse
import collections
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from idle_memory import idle_daemon_config, inotify_watches
from symbol_order import copy_without_dwarf

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../link"))
from elf_file import ElfFile  # noqa: E402  (the split checker's ELF reader)

FILTER = r"""
#include <stdio.h>
#include <stdlib.h>
/* lackey's trace lines ("I  addr,size", " L addr,size", " S ...", " M ...") on stdin; every
   64-byte line below LIMIT they touch, one address per output line. */
#define LIMIT 0x20000000UL
static unsigned char seen[LIMIT >> 6];
int main(void) {
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        char *p = line;
        if (!(p[0] == 'I' || (p[0] == ' ' && (p[1] == 'L' || p[1] == 'S' || p[1] == 'M')))) continue;
        p += 2;
        while (*p == ' ') p++;
        char *end;
        unsigned long address = strtoul(p, &end, 16);
        if (end == p || *end != ',') continue;
        unsigned long size = strtoul(end + 1, NULL, 10);
        for (unsigned long x = address >> 6; x <= (address + (size ? size - 1 : 0)) >> 6 && x < (LIMIT >> 6); x++)
            seen[x] = 1;
    }
    for (unsigned long x = 0; x < (LIMIT >> 6); x++)
        if (seen[x]) printf("%lx\n", x << 6);
    return 0;
}
"""

SHF_ALLOC = 0x2


def alloc_sections(binary):
    """(name, address, size) of every section the binary maps."""
    return [(s.name, s.addr, s.size) for s in ElfFile(binary).sections if s.flags & SHF_ALLOC and s.size]


def trace(binary, dirs, scratch):
    """The touched lines' link-time addresses, for a start of BINARY (without its DWARF,
    which valgrind 3.19 cannot read) up to its last watch."""
    subprocess.run(["gcc", "-O2", "-o", f"{scratch}/lines", "-x", "c", "-"], input=FILTER, text=True, check=True)
    stripped = copy_without_dwarf(binary, scratch)
    config, environment = idle_daemon_config(dirs, scratch)
    fifo = f"{scratch}/trace"
    os.mkfifo(fifo)
    with open(f"{scratch}/lines.txt", "w") as out:
        lines = subprocess.Popen(f"'{scratch}/lines' < '{fifo}'", shell=True, stdout=out)
        with open(f"{scratch}/daemon.log", "w") as log:
            daemon = subprocess.Popen(["valgrind", "--tool=lackey", "--trace-mem=yes", f"--log-file={fifo}", stripped,
                                       "run", "--config", config], stdout=log, stderr=log, env=environment)
        deadline = time.monotonic() + 600
        while inotify_watches(daemon.pid) < dirs + 1:
            if daemon.poll() is not None or time.monotonic() > deadline:
                daemon.kill()
                raise SystemExit(f"the daemon did not watch {dirs + 1} directories under lackey; see {scratch}/daemon.log")
            time.sleep(0.2)
        with open(f"/proc/{daemon.pid}/maps") as f:
            maps = f.read()
        daemon.send_signal(signal.SIGKILL)
        daemon.wait()
        lines.wait()
    base = min(int(fields[0].split("-")[0], 16) - int(fields[2], 16) for fields in (line.split() for line in maps.splitlines())
               if len(fields) >= 6 and fields[5] == stripped)
    with open(f"{scratch}/lines.txt") as f:
        return [int(line, 16) - base for line in f]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--binary", default=".build/release/watchkeeper")
    parser.add_argument("--dirs", type=int, default=1000)
    args = parser.parse_args()
    scratch = tempfile.mkdtemp(prefix="wk-touched-lines-")
    try:
        touched = trace(os.path.realpath(args.binary), args.dirs, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    by_section = collections.defaultdict(list)
    sections = alloc_sections(os.path.realpath(args.binary))
    for address in touched:
        for name, start, size in sections:
            if start <= address < start + size:
                by_section[name].append(address)
                break
    print("| section | size KiB | lines touched KiB | pages touched KiB | 64 KiB windows touched KiB |")
    print("|---|---|---|---|---|")
    for name, start, size in sections:
        lines = by_section.get(name)
        if lines:
            pages, windows = {a >> 12 for a in lines}, {a >> 16 for a in lines}
            print(f"| {name} | {size / 1024:.0f} | {len(lines) * 64 / 1024:.0f} | {len(pages) * 4} | {len(windows) * 64} |")


if __name__ == "__main__":
    main()
