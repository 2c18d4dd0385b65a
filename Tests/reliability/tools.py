#!/usr/bin/env python3
"""The delivery tools of issue 36 under every watch method, live and across restarts.

Each tool delivers into a `[[watch]]` rule of its own per method (inotify, fanotify on a tmpfs
of the run's own, poll with a 1 s interval and settle), whose job appends the sha256 of what
it read and the path (as in deliveries.py). The run goes through four phases, one daemon for
every rule:

  live      versions delivered with the daemon running (twice: fresh names, then over them)
  sigterm   the daemon stopped with SIGTERM; versions delivered while it is down; started
  sigkill   once the ledger holds every file as it is now, SIGKILL; versions delivered while
            it is down; started

and checks, per tool and method, that every version was read exactly once, with its final
content, under its final name, and nothing else was read (no file ran again unchanged, no
partial read). Between phases it waits until every version was read and the ledger holds
every file as it is now (a deadline, never a count in a time window).

  tool            how (sources outside the tree; in-place tools keep one size and one mtime)
  cp-p            `cp -p` over the handled file (same inode, size and mtime; new content)
  cp-reflink-p    `cp --reflink=auto -p` the same way
  unzip           `unzip` of an archive with new member names (mtime set after the close)
  unzip-o         `unzip -o` over the handled files
  write-utime     open(O_TRUNC), write, close, then utime to the old mtime, over the handled file
  rsync-inplace   `rsync -a -I --inplace` over the handled file
  rsync-delay     `rsync -a -I --delay-updates` of a tree (recursive rule): the files go through
                  .~tmp~/ and are renamed into place; jobs must get the final paths
  tmpfile         open(dir, O_TMPFILE), write, linkat from /proc/self/fd/N into place, close
  exchange        renameat2(RENAME_EXCHANGE) of two handled files, both ways, live: no reads;
                  a new pair per phase

With --long the same with more names and a stream: in-place deliveries go on while the
daemon is killed (SIGKILL) and started again several times; no version may be lost, and a
version may be read twice only if the ledger did not hold its file as it was at the kill.

usage: tools.py --binary BINARY (--short | --long) [--methods inotify,poll] [--only cp-p,...] [--json FILE] [--keep]
"""
import argparse, ctypes, json, os, shutil, signal, sqlite3, subprocess, sys, threading, time, zipfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk
from deliveries import READER, appended_lines, sha256, tool
import deliveries

OLD_MTIME = 1_000_000_000
SIZE = 3000
TOKEN = os.urandom(6).hex()
LIBC = ctypes.CDLL(None, use_errno=True)
# Cells that cannot pass until another part of issue 36 lands, with why: run, reported, not failed.
KNOWN_GAPS = {}


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--short", action="store_true", help="2 names per tool, no stream")
    mode.add_argument("--long", action="store_true", help="10 names per tool, and the SIGKILL stream")
    p.add_argument("--methods", default="inotify,fanotify,poll")
    p.add_argument("--only", help="comma-separated tool names")
    p.add_argument("--deadline", type=float, default=30.0, help="seconds to wait for reads after the last sign of work")
    p.add_argument("--json")
    p.add_argument("--keep", action="store_true")
    return p.parse_args()


def write(path, data, mtime=None):
    """deliveries.py's open(O_TRUNC), write, close; then, with `mtime`, utime to it."""
    deliveries.write(path, data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def exchange(first, second):
    if LIBC.renameat2(-100, first.encode(), -100, second.encode(), 2) != 0:  # RENAME_EXCHANGE
        raise OSError(ctypes.get_errno(), f"renameat2 {first} {second}")


def link_tmpfile(directory, name, data):
    fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY, 0o644)
    try:
        os.write(fd, data)
        if LIBC.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, f"{directory}/{name}".encode(), 0x400) != 0:  # AT_SYMLINK_FOLLOW
            raise OSError(ctypes.get_errno(), "linkat")
    finally:
        os.close(fd)


class Cell:
    """One tool under one method: its rule, its directories, what it delivered and what jobs read."""

    def __init__(self, tool_name, method, base, names):
        self.tool, self.method, self.names = tool_name, method, names
        self.rule = f"{tool_name}-{method}"
        self.dir = f"{base}/{tool_name}"
        self.inbox, self.src, self.results = f"{self.dir}/in", f"{self.dir}/src", f"{self.dir}/results"
        os.makedirs(self.inbox)
        os.makedirs(self.src)
        self.versions = {}        # sha -> final path (bytes)
        self.reads = {}           # sha -> [paths]
        self.offset, self.counter, self.round = 0, 0, 0
        self.at_risk = set()      # versions a kill may make run twice (stream)
        self.lock = threading.Lock()

    def config(self, reader):
        lines = ["[[watch]]", f'name = "{self.rule}"', f'path = "{self.inbox}"', f'method = "{self.method}"',
                 f'command = {json.dumps(["/bin/sh", reader, self.results, "{path}"])}']
        if self.tool == "rsync-delay":
            lines.append("recursive = true")
        if self.method == "poll":
            lines += ['poll_interval = "1s"', 'poll_settle = "1s"']
        return "\n".join(lines) + "\n"

    def payload(self):
        with self.lock:
            self.counter += 1
            head = f"{self.rule} {self.counter} {TOKEN}\n".encode()
        return head + os.urandom(SIZE - len(head))

    def expect(self, data, final):
        with self.lock:
            self.versions[sha256(data)] = final.encode()

    def poll(self):
        with self.lock:
            lines, self.offset = appended_lines(self.results, self.offset)
            for line in lines:
                sha, _, path = line.partition(b" ")
                self.reads.setdefault(sha.decode(errors="replace"), []).append(path)
            return sum(len(v) for v in self.reads.values())

    def unread(self):
        with self.lock:
            return [s for s in self.versions if s not in self.reads]

    def files(self):
        """Every regular file of the inbox, relative: what the ledger must hold."""
        found = []
        for directory, _, names in os.walk(self.inbox):
            for name in names:
                relative = os.path.relpath(os.path.join(directory, name), self.inbox)
                if ".~tmp~" not in relative.split(os.sep):
                    found.append(relative)
        return found

    def read_again(self):
        """The final paths (bytes) of the versions read more than once."""
        with self.lock:
            return sorted({self.versions[s] for s, paths in self.reads.items() if s in self.versions and len(paths) > 1})

    def row(self):
        self.poll()
        with self.lock:
            counts = {s: len(self.reads.get(s, [])) for s in self.versions}
            wrong = sum(1 for s, paths in self.reads.items() if s in self.versions and any(p != self.versions[s] for p in paths))
            again = sum(n - 1 for s, n in counts.items() if n > 1)
            return {"tool": self.tool, "method": self.method, "delivered": len(self.versions),
                    "lost": sum(1 for n in counts.values() if n == 0), "again": again,
                    "again_at_risk": sum(len(self.reads.get(s, [])) - 1 for s in self.at_risk if len(self.reads.get(s, [])) > 1),
                    "wrong_path": wrong, "partial": sum(len(v) for s, v in self.reads.items() if s not in self.versions),
                    "gap": KNOWN_GAPS.get((self.tool, self.method))}


# The tools. Each delivers one version of each of its names (a phase); `after_read` runs once
# the phase's versions were read, with the daemon running (the exchange).

def in_place(cell, command):
    for name in cell.names:
        data, source = cell.payload(), f"{cell.src}/{name}"
        write(source, data, OLD_MTIME)
        cell.expect(data, f"{cell.inbox}/{name}")
        tool(*command, source, f"{cell.inbox}/{name}")


def write_utime(cell):
    for name in cell.names:
        data = cell.payload()
        cell.expect(data, f"{cell.inbox}/{name}")
        write(f"{cell.inbox}/{name}", data, OLD_MTIME)


def unzip(cell, overwrite):
    archive = f"{cell.src}/round{cell.round}.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in cell.names:
            member = name if overwrite else f"r{cell.round}-{name}"
            info = zipfile.ZipInfo(member, date_time=time.gmtime(OLD_MTIME)[:6])
            info.external_attr = 0o644 << 16
            data = cell.payload()
            cell.expect(data, f"{cell.inbox}/{member}")
            z.writestr(info, data)
    tool("unzip", "-q", *(["-o"] if overwrite else []), archive, "-d", cell.inbox)


def rsync_delay(cell):
    stage = f"{cell.src}/stage"
    for index, name in enumerate(cell.names):
        relative = f"sub/{name}" if index % 2 else name
        os.makedirs(os.path.dirname(f"{stage}/{relative}"), exist_ok=True)
        data = cell.payload()
        write(f"{stage}/{relative}", data)
        cell.expect(data, f"{cell.inbox}/{relative}")
    tool("rsync", "-a", "-I", "--delay-updates", f"{stage}/", f"{cell.inbox}/")


def tmpfile(cell):
    for name in cell.names:
        data = cell.payload()
        cell.expect(data, f"{cell.inbox}/r{cell.round}-{name}")
        link_tmpfile(cell.inbox, f"r{cell.round}-{name}", data)


def exchange_pairs(cell):
    for name in cell.names:
        for side in ("left", "right"):
            data, path = cell.payload(), f"{cell.inbox}/r{cell.round}-{name}-{side}"
            cell.expect(data, path)
            write(path + ".tmp", data)
            os.rename(path + ".tmp", path)


def exchange_all(cell):
    """Every pair delivered so far swaps its two files; the versions' final paths swap too."""
    for round_ in range(cell.round + 1):
        for name in cell.names:
            left, right = f"{cell.inbox}/r{round_}-{name}-left", f"{cell.inbox}/r{round_}-{name}-right"
            if os.path.exists(left) and os.path.exists(right):
                exchange(left, right)
                with cell.lock:
                    for sha, final in cell.versions.items():
                        if final == left.encode():
                            cell.versions[sha] = right.encode()
                        elif final == right.encode():
                            cell.versions[sha] = left.encode()
                    for paths in cell.reads.values():
                        paths[:] = [right.encode() if p == left.encode() else left.encode() if p == right.encode() else p for p in paths]


TOOLS = {  # name -> (deliver, after_read, needs)
    "cp-p": (lambda c: in_place(c, ["cp", "-p"]), None, ()),
    "cp-reflink-p": (lambda c: in_place(c, ["cp", "--reflink=auto", "-p"]), None, ()),
    "unzip": (lambda c: unzip(c, overwrite=False), None, ("unzip",)),
    "unzip-o": (lambda c: unzip(c, overwrite=True), None, ("unzip",)),
    "write-utime": (write_utime, None, ()),
    "rsync-inplace": (lambda c: in_place(c, ["rsync", "-a", "-I", "--inplace"]), None, ("rsync",)),
    "rsync-delay": (rsync_delay, None, ("rsync",)),
    "tmpfile": (tmpfile, None, ()),
    "exchange": (exchange_pairs, exchange_all, ()),
}


class Run:
    def __init__(self, args, root):
        self.args, self.root = args, root
        self.cells, self.daemon, self.failures, self.notes = [], None, [], []
        self.checked, self.running = 0.0, False

    def jobs_running(self):
        if time.monotonic() - self.checked >= 0.1:
            marker = f"{self.root}/read.sh".encode()
            self.running = any(marker in wk.cmdline(c) for c in wk.direct_children(self.daemon.pid))
            self.checked = time.monotonic()
        return self.running

    def wait_until(self, done, what, detail=lambda: ""):
        """Until done(), or until no job ran and no read came for --deadline s (a failure)."""
        active, last = time.monotonic(), None
        while True:
            seen = sum(c.poll() for c in self.cells)
            if done():
                return True
            if seen != last or self.jobs_running():
                last, active = seen, time.monotonic()
            if time.monotonic() - active >= self.args.deadline:
                self.failures.append(f"{what}: nothing happened for {self.args.deadline:.0f} s{detail()}")
                return False
            time.sleep(0.05)

    def ledger_current(self):
        return not self.not_current()

    def not_current(self):
        """The files the ledger does not hold as they are now (path, inode, size, mtime, change
        time), by rule: none once the daemon caught up with everything it saw."""
        try:
            connection = sqlite3.connect(f"file:{self.daemon.database}?mode=ro", uri=True, timeout=5)
            try:
                rows = set(connection.execute(
                    "SELECT rule, path, inode, size, modified_ns, changed_ns FROM file_ledger WHERE outcome = 'ok'").fetchall())
            finally:
                connection.close()
        except sqlite3.Error as error:
            return [f"the ledger: {error}"]
        missing = []
        for cell in self.cells:
            for relative in cell.files():
                try:
                    info = os.stat(f"{cell.inbox}/{relative}")
                except FileNotFoundError:
                    continue
                if (cell.rule, relative.encode(), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns) not in rows:
                    missing.append(f"{cell.rule}/{relative}")
        return missing

    def settle(self, what):
        """Every version read, and the ledger current."""
        self.wait_until(lambda: not any(c.unread() for c in self.cells), f"{what}: versions never read",
                        lambda: ": " + ", ".join(f"{c.rule} {len(c.unread())}" for c in self.cells if c.unread()))
        self.wait_until(self.ledger_current, f"{what}: the ledger never held every file as it is",
                        lambda: ": " + ", ".join(self.not_current()[:10]))

    def phase(self, what):
        for cell in self.cells:
            cell.round += 1
            TOOLS[cell.tool][0](cell)
        self.settle(what)
        for cell in self.cells:
            if TOOLS[cell.tool][1]:
                TOOLS[cell.tool][1](cell)
        self.settle(f"{what}, after the exchanges")
        print(f"  {what}: {sum(len(c.versions) for c in self.cells)} versions so far, all read", flush=True)

    def restart(self, how):
        if how == signal.SIGKILL:
            self.daemon.signal(signal.SIGKILL)
            self.daemon.process.wait(10)
            self.daemon.notify.close()
        else:
            code = self.daemon.stop()
            if code != 0:
                self.failures.append(f"the daemon stopped with {code}")
        for cell in self.cells:  # while it is down
            cell.round += 1
            TOOLS[cell.tool][0](cell)
        if not self.daemon.start(ready_within=30):
            raise RuntimeError("no READY=1 after a restart: " + self.daemon.stderr_tail())
        self.settle(f"after {signal.Signals(how).name}")
        print(f"  {signal.Signals(how).name}: delivered while down and read after the start", flush=True)

    def stream(self, kills):
        """In-place deliveries on every in-place cell, each round once the last was read, while
        the daemon is killed and started `kills` times (so a round may be delivered while it
        is down, and must be read after the start)."""
        cells = [c for c in self.cells if c.tool in ("cp-p", "cp-reflink-p", "write-utime", "rsync-inplace")]
        stop = threading.Event()

        def deliver():
            while not stop.is_set():
                for cell in cells:
                    cell.round += 1
                    TOOLS[cell.tool][0](cell)
                while not stop.is_set() and any(cell.unread() for cell in cells):
                    for cell in cells:
                        cell.poll()
                    time.sleep(0.02)
        worker = threading.Thread(target=deliver)
        worker.start()
        try:
            for _ in range(kills):
                time.sleep(1.5)
                os.kill(self.daemon.pid, signal.SIGSTOP)
                self.mark_at_risk(cells)
                self.daemon.signal(signal.SIGKILL)
                self.daemon.process.wait(10)
                self.daemon.notify.close()
                time.sleep(0.5)
                if not self.daemon.start(ready_within=30):
                    raise RuntimeError("no READY=1 in the stream: " + self.daemon.stderr_tail())
        finally:
            stop.set()
            worker.join()
        self.settle("after the SIGKILL stream")
        print(f"  stream: {kills} SIGKILLs while {len(cells)} tools delivered in place", flush=True)

    def mark_at_risk(self, cells):
        """With the daemon stopped: the versions whose file the ledger does not hold as it is (a
        job without its record, a change not confirmed) may run again after the kill."""
        connection = sqlite3.connect(f"file:{self.daemon.database}?mode=ro", uri=True, timeout=5)
        try:
            rows = set(connection.execute("SELECT rule, path, inode, size, modified_ns, changed_ns FROM file_ledger").fetchall())
        finally:
            connection.close()
        for cell in cells:
            for sha, final in list(cell.versions.items()):
                relative = os.path.relpath(final.decode(), cell.inbox)
                try:
                    info = os.stat(final)
                except FileNotFoundError:
                    continue
                if (cell.rule, relative.encode(), info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns) not in rows:
                    cell.at_risk.add(sha)


def mount_tmpfs(path):
    os.makedirs(path)
    if os.geteuid() != 0:
        return "needs root (fanotify_init, mount)"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "wk-tools-fanotify", path], capture_output=True, text=True)
    return None if done.returncode == 0 else f"unable to mount a tmpfs: {done.stderr.strip()}"


def verdict(row):
    problems = []
    if row["lost"]:
        problems.append(f"{row['lost']} of {row['delivered']} versions never read")
    if row["partial"]:
        problems.append(f"{row['partial']} reads of content never delivered")
    if row["wrong_path"]:
        problems.append(f"{row['wrong_path']} versions read under another name than their final one")
    if row["again"] - row["again_at_risk"] > 0:
        problems.append(f"{row['again'] - row['again_at_risk']} reads of versions already read (unchanged files run again)")
    return [f"{row['tool']} under {row['method']}: {p}" for p in problems]


def runs_of(log, paths, limit=8):
    """The daemon's lines whose `path=` field is each of `paths` (its runs, with the event
    each came from), and its debug lines that name the path (why a handled file ran again:
    the form the ledger held and the form found), so a failure in CI says what made a version
    run again."""
    shown = []
    try:
        with open(log, "rb") as f:
            lines = [(line, wk.metadata(line) or {}) for line in f]
    except OSError as error:
        return [f"(no daemon log: {error})"]
    for path in paths:
        hits = [line.decode(errors="replace").rstrip()[:600] for line, fields in lines
                if fields.get("path") == path or (b" debug: " in line and b" " + path + b" " in line)]
        shown.append(f"{path.decode(errors='replace')}: {len(hits)} line(s)")
        shown += ["  " + hit for hit in hits[-limit:]]
    return shown


def main():
    args = parse()
    root = wk.scratch("wk-tools-")
    os.chmod(root, 0o755)
    run = Run(args, root)
    names = [f"n{i}" for i in range(10 if args.long else 2)]
    chosen = set(args.only.split(",")) if args.only else set(TOOLS)
    methods = args.methods.split(",")
    mounted = None
    rows = []
    try:
        for sub in ("run", "state"):
            os.makedirs(f"{root}/{sub}")
        with open(f"{root}/read.sh", "w") as f:
            f.write(READER)
        for method in methods:
            base = f"{root}/{method}"
            if method == "fanotify":
                why = mount_tmpfs(base)
                if why:
                    run.notes.append(f"fanotify not tested: {why}")
                    continue
                mounted = base
            else:
                os.makedirs(base)
            for name, (_, _, needs) in TOOLS.items():
                missing = [t for t in needs if not shutil.which(t)]
                if name not in chosen:
                    continue
                if missing:
                    run.notes.append(f"{name} not tested: {', '.join(missing)} not installed")
                    continue
                run.cells.append(Cell(name, method, base, names))
        conf = f"{root}/watchkeeper.toml"
        with open(conf, "w") as f:
            # Debug: a version read again comes with the daemon's reason (runs_of).
            f.write("[daemon]\nmax_jobs = 8\nlog_level = \"debug\"\n\n" + "\n".join(c.config(f"{root}/read.sh") for c in run.cells))
        run.daemon = wk.Daemon(os.path.abspath(args.binary), root, conf)
        if not run.daemon.start(ready_within=30):
            raise RuntimeError("no READY=1: " + run.daemon.stderr_tail())
        print(f"tools: {len(run.cells)} cells ({len(names)} names each), in {root}", flush=True)
        run.phase("live, fresh names")
        run.phase("live, over the handled files")
        run.restart(signal.SIGTERM)
        run.restart(signal.SIGKILL)
        if args.long:
            run.stream(kills=5)
    except Exception as error:
        run.failures.append(f"{type(error).__name__}: {error}")
    finally:
        if run.daemon and run.daemon.alive():
            code = run.daemon.stop()
            if code != 0:
                run.failures.append(f"the daemon stopped with {code}")
        rows = [c.row() for c in run.cells]
        again = [path for c in run.cells for path in c.read_again()]
        evidence = runs_of(f"{root}/stderr.log", again) if run.daemon and again else []
        if run.daemon and run.failures:
            print("daemon's last lines:\n  " + run.daemon.stderr_tail(15).replace("\n", "\n  "))
        if mounted:
            subprocess.run(["umount", "-l", mounted])
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    failures = list(run.failures)
    for row in rows:
        problems = verdict(row)
        text = (f"{row['tool']:14s} {row['method']:9s} delivered {row['delivered']:3d}, lost {row['lost']}, read again {row['again']}"
                + (f" ({row['again_at_risk']} at risk at a kill)" if row["again_at_risk"] else "")
                + f", under another name {row['wrong_path']}, partial {row['partial']}")
        if row["gap"] and problems:
            text += f"  [known gap: {row['gap']}]"
        elif problems:
            failures += problems
        print(text, flush=True)
    for note in run.notes:
        print(f"  ({note})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"names": len(names), "rows": rows, "notes": run.notes, "failures": failures}, f, indent=1)
    for failure in failures:
        print(f"    {failure}")
    if evidence:  # last, so the tail that run.py keeps shows it
        print("read more than once; the daemon's lines for those paths:\n  " + "\n  ".join(evidence))
    print("tools: ok" if not failures else f"tools: FAIL ({len(failures)} problems)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
