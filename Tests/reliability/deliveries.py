#!/usr/bin/env python3
"""Delivery patterns (issue 22): the everyday ways files arrive, each into a `[[watch]]` rule
of its own with the default settings (settle 0, events closed_write and moved_in, catch_up),
whose job reads the file: it appends the sha256 of the content and the path to the pattern's
results, and fails, recording nothing, when the file is gone. Every version delivered has
content of its own (a random token and a counter; one size in six is 256 KiB) and its sha256
is kept. At the end, after waiting until every version was read or until nothing happened (no
job running, no read) for --deadline seconds (never counting in a fixed window):

  lost        versions whose sha256 no job read: must be 0
  partial     reads of a sha256 that no delivered version had (a file read half-written): must be 0
  temporary   versions read, but only under a temporary name (x.part, .x.XXXXXX): reported
  duplicates  reads beyond the first. Bound: a version is read at most once per matching event
              its delivery makes (`events` below: the close of a temporary name and the
              move-in of the final one are two; a new directory's scan and the close are
              two); a version read more often than that is a failure too.

   # pattern         events  how (all on the file system of /tmp; sources outside the watched tree)
   1 curl              2     `curl -s -o x.part file://SRC` (a Python write if curl is missing), rename(2) to x.dat
   2 rsync             2     `rsync -a` of batches: rsync's temporary `.x.XXXXXX`, renamed
   3 rsync-inplace     1     `rsync -a --inplace`: written under the final name
   4 scp               2     what scp does (no sshd to run a real one against): open(x.tmp, O_CREAT|O_TRUNC), write, rename
   5 editor            2     atomic save: `.name.swp` written, fsync, renamed over `name`; the same names saved again
   6 cp-p              1     `cp -p` into the same names, one old mtime and one size for all, after the previous
                             version was deleted (ext4 reuses its inode)
   7 tar               1     `tar -x` of reproducible archives (same member, size, mtime 1000000000) over the previous
   8 unzip             1     `unzip -o` of zips with one fixed timestamp over the previous
   9 mv                1     `mv` from a directory outside the tree
  10 hardlink          1     `ln SRC name` and `cp -l SRC name` (SRC outside the tree)
  11 slow-writer       2     `mkdir -p x` (os.makedirs) and at once 10,000 bytes to x/big in 10 writes 0.2 s apart
                             (recursive rule): the whole version read, never a part
  12 job-deletes       1     a job that deletes its file; `cp -p` (256 KiB each, old mtime) of the next version into
                             the same name once the job deleted the previous (inode reuse)
  13 catch-up          1     N names delivered live by `cp -p` (one size, old mtime) and read; the daemon stopped
                             (SIGTERM); each name deleted and at once delivered again (`cp -p`, same size and mtime:
                             the new file gets the deleted one's inode); started again: every new version read

Patterns 5-8 and 12 deliver one name again and again: they run in lanes, each lane delivering
its next version once its previous one was read, or once nothing happened for --round-wait
seconds (the version replaced then was never read: lost); one delivery at a time, so the inode
a deletion frees goes to the next version of the same name rather than to another lane's.
1-12 run one after another, each followed by a drain (until read, or 2 s without a job or a
read) so the next one's lanes do not wait behind its jobs; 13 runs last, as it restarts the
daemon.

usage: deliveries.py --binary BINARY (--short | --long) [--files N] [--only 1,cp-p] [--json FILE] [--keep]
"""
import argparse, collections, concurrent.futures, hashlib, io, json, os, shutil, signal, subprocess, sys, tarfile, threading, time, zipfile
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk

OLD_MTIME = 1_000_000_000
TOKEN = os.urandom(8).hex()
LARGE = 256 * 1024
STOP = threading.Event()  # SIGTERM or SIGINT: lanes and waits end, the daemon is stopped, the scratch removed
# The job: "SHA256 PATH" appended to RESULTS; with `delete`, the file removed before the line is
# written (so a line means the file is gone). A file that cannot be read fails the job.
READER = """#!/bin/sh
h=$(sha256sum < "$2") || exit 1
if [ "$3" = delete ]; then rm -- "$2" || exit 1; fi
printf '%s %s\\n' "${h%% *}" "$2" >> "$1"
"""


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--short", action="store_true", help="12 versions per pattern in 6 lanes")
    mode.add_argument("--long", action="store_true", help="1,000 versions per pattern in 50 lanes")
    p.add_argument("--files", type=int, help="versions per pattern (13: names, each delivered twice)")
    p.add_argument("--lanes", type=int)
    p.add_argument("--round-wait", type=float, default=10.0,
                   help="how long a lane waits for a version to be read after the last job or read")
    p.add_argument("--deadline", type=float, default=30.0, help="how long to wait for reads after the last job or read")
    p.add_argument("--only", help="comma-separated pattern numbers or names")
    p.add_argument("--json")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    return p.parse_args()


def size(i):
    return LARGE if i % 6 == 5 else 100 + (i * 397) % 8000


def write(path, data, fsync=False):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def appended_lines(path, offset):
    """The whole lines appended to `path` (a job's results) since `offset`, and the offset after them."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        chunk = b""
    chunk = chunk[:chunk.rfind(b"\n") + 1]
    return chunk.splitlines(), offset + len(chunk)


def tool(*argv):
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode(errors='replace').strip()}")


def parallel(function, items, workers):
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        list(pool.map(function, items))


class Pattern:
    """One rule: its directories (ROOT/NN-name/in watched, src beside it), the versions delivered
    (sha256s) and the reads of its results file (sha256 -> count)."""

    def __init__(self, root, number, name, deliver, events, recursive=False, deletes=False, needs=()):
        self.number, self.name, self.deliver, self.events = number, name, deliver, events
        self.recursive, self.deletes, self.needs = recursive, deletes, needs
        self.dir = f"{root}/{number:02d}-{name}"
        self.inbox, self.src, self.results = f"{self.dir}/in", f"{self.dir}/src", f"{self.dir}/results"
        os.makedirs(self.inbox)
        os.makedirs(self.src)
        # sha256 -> its final path; sha256 -> reads; the versions read at their final path.
        self.versions, self.reads, self.at_final = {}, collections.Counter(), set()
        self.offset, self.lines, self.counter = 0, 0, 0
        self.lock, self.note, self.seconds, self.inodes, self.reused = threading.Lock(), "", 0.0, set(), 0

    def rule(self, reader):
        command = ["/bin/sh", reader, self.results, "{path}"] + (["delete"] if self.deletes else [])
        return "\n".join(["[[watch]]", f'name = "{self.name}"', f'path = "{self.inbox}"']
                         + (["recursive = true"] if self.recursive else []) + [f"command = {json.dumps(command)}", ""])

    def payload(self, nbytes):
        with self.lock:
            self.counter += 1
            head = f"{self.name} {self.counter} {TOKEN}\n".encode()
        return head + os.urandom(max(0, nbytes - len(head)))

    def source(self, path, nbytes, mtime=None):
        """A version written outside the tree (with `mtime`, which `cp -p` keeps); returns its sha256."""
        data = self.payload(nbytes)
        write(path, data)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        return sha256(data)

    def expect(self, sha, final):
        """Counts a version as delivered, to the path `final`: called just before it is."""
        with self.lock:
            self.versions[sha] = final.encode()
        return sha

    def landed(self, path):
        """Counts the deliveries that got an inode an earlier version of this pattern had."""
        try:
            inode = os.stat(path).st_ino
        except FileNotFoundError:  # a job that deletes its file was quicker
            return
        with self.lock:
            self.reused += inode in self.inodes
            self.inodes.add(inode)

    def poll(self):
        """Reads the lines jobs appended since the last poll; returns how many lines there are."""
        with self.lock:
            lines, self.offset = appended_lines(self.results, self.offset)
            for line in lines:
                self.lines += 1
                sha, _, path = line.partition(b" ")
                sha = sha.decode(errors="replace")
                self.reads[sha] += 1
                if self.versions.get(sha) == path:
                    self.at_final.add(sha)
            return self.lines

    def missing(self, shas=None):
        with self.lock:
            return [s for s in (self.versions if shas is None else shas) if not self.reads[s]]

    def row(self):
        self.poll()
        with self.lock:
            counts = [self.reads[s] for s in self.versions]
            return {"number": self.number, "pattern": self.name, "delivered": len(self.versions),
                    "lost": counts.count(0), "duplicates": sum(n - 1 for n in counts if n > 1),
                    "partial": sum(n for s, n in self.reads.items() if s not in self.versions),
                    "events": self.events, "over_bound": sum(1 for n in counts if n > self.events),
                    "temporary_name_only": sum(1 for s in self.versions if self.reads[s] and s not in self.at_final),
                    "inode_reused": self.reused, "note": self.note, "seconds": round(self.seconds, 1)}


class Run:
    def __init__(self, args, root):
        self.args, self.root = args, root
        self.files = args.files or (1000 if args.long else 12)
        self.lanes = args.lanes or (50 if args.long else 6)
        self.reader = f"{root}/read.sh"
        self.daemon, self.failures = None, []
        self.lock, self.checked, self.running = threading.Lock(), 0.0, False

    def jobs_running(self):
        """Whether a job of ours is among the daemon's children (looked at most every 0.1 s)."""
        with self.lock:
            if time.monotonic() - self.checked >= 0.1:
                marker = self.reader.encode()
                self.running = any(marker in wk.cmdline(c) for c in wk.direct_children(self.daemon.pid))
                self.checked = time.monotonic()
            return self.running

    def wait_until(self, patterns, done, idle, cap=600.0):
        """Until done() (True), or until no job ran and no read came in `patterns` for `idle` s, or
        `cap` s in all (False): a deadline after the last sign of work, never a fixed window."""
        began = active = time.monotonic()
        last = None
        while not STOP.is_set():
            seen = sum(p.poll() for p in patterns)
            if done():
                return True
            now = time.monotonic()
            if seen != last or self.jobs_running():
                last, active = seen, now
            if now - active >= idle or now - began >= cap:
                return False
            time.sleep(0.05)
        return False

    def wait_reads(self, patterns, idle, shas=None):
        return self.wait_until(patterns, lambda: not any(p.missing(shas) for p in patterns), idle)

    def grace(self, patterns):
        """A second without jobs or reads, for duplicates still on their way."""
        self.wait_until(patterns, lambda: False, 1.0, cap=10.0)

    def lanes_of(self, p, deliver):
        """`files` versions in up to `lanes` lanes at once; in each lane version r+1 is delivered once
        version r was read (or --round-wait s passed without a job or a read). deliver(lane, round)
        returns the sha256 delivered."""
        width, lock = min(self.files, self.lanes), threading.Lock()

        def lane(index):
            for number in range((self.files - index + width - 1) // width):
                if STOP.is_set():
                    return
                with lock:  # one delivery at a time: no lane takes the inode another lane's deletion freed
                    sha = deliver(index, number)
                self.wait_reads([p], self.args.round_wait, [sha])
        parallel(lane, range(width), width)


# The patterns: each delivers run.files versions (13: run.files names, twice).

def curl(run, p):
    binary = shutil.which("curl")
    p.note = "real curl, then rename(2)" if binary else "curl not installed: a Python write, then rename(2)"
    for i in range(run.files):
        data, source, part = p.payload(size(i)), f"{p.src}/x{i}", f"{p.inbox}/x{i}.part"
        write(source, data)
        p.expect(sha256(data), f"{p.inbox}/x{i}.dat")
        if binary:
            tool(binary, "-s", "-o", part, f"file://{source}")
        else:
            write(part, data)
        os.rename(part, f"{p.inbox}/x{i}.dat")


def rsync(run, p, inplace=False):
    batch = max(1, min(10, run.files // 3))
    for start in range(0, run.files, batch):
        stage = f"{p.src}/batch{start}"
        os.makedirs(stage)
        for i in range(start, min(run.files, start + batch)):
            p.expect(p.source(f"{stage}/r{i}", size(i)), f"{p.inbox}/r{i}")
        tool("rsync", "-a", *(["--inplace"] if inplace else []), f"{stage}/", f"{p.inbox}/")


def scp(run, p):
    p.note = "no sshd for a real scp: its calls, open(O_CREAT|O_TRUNC) of x.tmp, write, rename(2)"
    for i in range(run.files):
        data = p.payload(size(i))
        p.expect(sha256(data), f"{p.inbox}/s{i}")
        write(f"{p.inbox}/s{i}.tmp", data)
        os.rename(f"{p.inbox}/s{i}.tmp", f"{p.inbox}/s{i}")


def editor(run, p):
    def save(lane, number):
        data = p.payload(size(lane * 5 + number))
        swap, name = f"{p.inbox}/.doc{lane}.txt.swp", f"{p.inbox}/doc{lane}.txt"
        write(swap, data, fsync=True)
        sha = p.expect(sha256(data), name)
        os.rename(swap, name)
        return sha
    run.lanes_of(p, save)


def cp_p(run, p, nbytes, deleted_by_job=False):
    # One size and one mtime for every version, so a reused inode makes the identity of a file
    # handled before, whichever name it had. Every source first: nothing else takes the inode a
    # deletion frees before cp creates the file.
    width = min(run.files, run.lanes)
    sources = [p.source(f"{p.src}/{i}", nbytes, OLD_MTIME) for i in range(run.files)]

    def deliver(lane, number):
        index, target = number * width + lane, f"{p.inbox}/file{lane}"
        if not deleted_by_job and os.path.exists(target):
            os.unlink(target)
        sha = p.expect(sources[index], target)
        tool("cp", "-p", f"{p.src}/{index}", target)
        p.landed(target)
        return sha
    run.lanes_of(p, deliver)


def tar(run, p):
    def deliver(lane, number):
        data, archive = p.payload(size(lane)), f"{p.src}/l{lane}-{number}.tar"
        member = tarfile.TarInfo(f"member{lane}.bin")
        member.size, member.mtime, member.mode = len(data), OLD_MTIME, 0o644
        with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as t:
            t.addfile(member, io.BytesIO(data))
        sha = p.expect(sha256(data), f"{p.inbox}/member{lane}.bin")
        tool("tar", "-xf", archive, "-C", p.inbox)
        p.landed(f"{p.inbox}/member{lane}.bin")
        return sha
    run.lanes_of(p, deliver)


def unzip(run, p):
    def deliver(lane, number):
        data, archive = p.payload(size(lane)), f"{p.src}/l{lane}-{number}.zip"
        member = zipfile.ZipInfo(f"member{lane}.bin", date_time=time.gmtime(OLD_MTIME)[:6])
        member.external_attr = 0o644 << 16
        with zipfile.ZipFile(archive, "w") as z:
            z.writestr(member, data)
        sha = p.expect(sha256(data), f"{p.inbox}/member{lane}.bin")
        tool("unzip", "-o", "-q", archive, "-d", p.inbox)
        p.landed(f"{p.inbox}/member{lane}.bin")
        return sha
    run.lanes_of(p, deliver)


def mv(run, p):
    for i in range(run.files):
        p.expect(p.source(f"{p.src}/m{i}", size(i)), f"{p.inbox}/m{i}")
        tool("mv", f"{p.src}/m{i}", f"{p.inbox}/m{i}")


def hardlink(run, p):
    p.note = "ln and cp -l in turn"
    for i in range(run.files):
        p.expect(p.source(f"{p.src}/h{i}", size(i)), f"{p.inbox}/h{i}")
        tool(*(["ln"] if i % 2 == 0 else ["cp", "-l"]), f"{p.src}/h{i}", f"{p.inbox}/h{i}")


def slow_writer(run, p):
    def one(i):
        if STOP.is_set():
            return
        data, directory = p.payload(10_000), f"{p.inbox}/x{i}"
        p.expect(sha256(data), f"{directory}/big")
        os.makedirs(directory)
        fd = os.open(f"{directory}/big", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for chunk in range(10):
                if chunk:
                    time.sleep(0.2)
                os.write(fd, data[chunk * 1000:(chunk + 1) * 1000])
        finally:
            os.close(fd)
    parallel(one, range(run.files), min(run.files, 50))


def catch_up(run, p):
    names = [f"{p.inbox}/c{i}" for i in range(run.files)]
    # As for cp -p: one size, one mtime, every source first.
    sources = {(tag, i): p.source(f"{p.src}/{tag}{i}", 4000, OLD_MTIME) for tag in ("live", "down") for i in range(run.files)}

    def deliver_all(tag):
        for i, target in enumerate(names):
            if os.path.exists(target):
                os.unlink(target)  # just before its successor is created, which gets its inode
            p.expect(sources[tag, i], target)
            tool("cp", "-p", f"{p.src}/{tag}{i}", target)
            p.landed(target)
    deliver_all("live")
    if not run.wait_reads([p], run.args.deadline):
        p.note = "not every live version read before the stop; "
    code = run.daemon.stop()
    if code != 0:
        run.failures.append(f"catch-up: the daemon stopped with {code}")
    deliver_all("down")
    if not run.daemon.start(ready_within=30):
        raise RuntimeError("no READY=1 after the restart: " + run.daemon.stderr_tail())
    p.note += f"{len(names)} names delivered live and read; each deleted and delivered again while stopped"


PATTERNS = [  # number, name, delivery, events per version, options
    (1, "curl", curl, 2, {}),
    (2, "rsync", rsync, 2, {"needs": ("rsync",)}),
    (3, "rsync-inplace", lambda run, p: rsync(run, p, inplace=True), 1, {"needs": ("rsync",)}),
    (4, "scp", scp, 2, {}),
    (5, "editor", editor, 2, {}),
    (6, "cp-p", lambda run, p: cp_p(run, p, 4000), 1, {}),
    (7, "tar", tar, 1, {"needs": ("tar",)}),
    (8, "unzip", unzip, 1, {"needs": ("unzip",)}),
    (9, "mv", mv, 1, {}),
    (10, "hardlink", hardlink, 1, {}),
    (11, "slow-writer", slow_writer, 2, {"recursive": True}),
    (12, "job-deletes", lambda run, p: cp_p(run, p, LARGE, deleted_by_job=True), 1, {"deletes": True}),
    (13, "catch-up", catch_up, 1, {}),
]


def play(run, p, idle):
    """Delivers pattern p, then waits until every version was read or `idle` s passed without a job or a read."""
    began = time.monotonic()
    p.deliver(run, p)
    run.wait_reads([p], idle)
    p.seconds = time.monotonic() - began
    print(f"  ({p.name}: {len(p.versions)} versions delivered in {p.seconds:.1f} s, {len(p.missing())} not read yet)", flush=True)


def line(row):
    if row.get("skipped"):
        return f"{row['pattern']}: skipped ({row['skipped']})"
    text = f"{row['pattern']}: delivered {row['delivered']}, lost {row['lost']}, duplicates {row['duplicates']}, partial {row['partial']}"
    extra = [row["note"]] if row["note"] else []
    extra += [f"inode reused {row['inode_reused']} times"] if row["inode_reused"] else []
    extra += [f"{row['temporary_name_only']} read only under a temporary name"] if row["temporary_name_only"] else []
    extra += [f"{row['over_bound']} read more than {row['events']} time(s)"] if row["over_bound"] else []
    return text + (f"  ({'; '.join(extra)})" if extra else "")


def verdict(row):
    if row.get("skipped"):
        return []
    return ([f"{row['pattern']}: {row['lost']} of {row['delivered']} versions never read"] if row["lost"] else []) + \
           ([f"{row['pattern']}: {row['partial']} reads of content never delivered (partial files)"] if row["partial"] else []) + \
           ([f"{row['pattern']}: {row['over_bound']} versions read more than once per event (bound {row['events']})"]
            if row["over_bound"] else [])


def main():
    args = parse()
    chosen = set(args.only.split(",")) if args.only else None
    root = wk.scratch("wk-deliveries-")
    os.chmod(root, 0o755)
    run = Run(args, root)

    def interrupted(number, _):
        STOP.set()
        raise SystemExit(128 + number)
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)
    rows = []
    try:
        for sub in ("run", "state"):
            os.makedirs(f"{root}/{sub}")
        with open(run.reader, "w") as f:
            f.write(READER)
        patterns = [Pattern(root, number, name, deliver, events, **options)
                    for number, name, deliver, events, options in PATTERNS
                    if not chosen or str(number) in chosen or name in chosen]
        conf = f"{root}/watchkeeper.toml"
        with open(conf, "w") as f:
            f.write("\n".join(p.rule(run.reader) for p in patterns))
        run.daemon = wk.Daemon(os.path.abspath(args.binary), root, conf)
        if not run.daemon.start(ready_within=30):
            raise RuntimeError("no READY=1: " + run.daemon.stderr_tail())
        print(f"deliveries: {run.files} versions per pattern, {run.lanes} lanes, in {root}", flush=True)
        ready = []
        for p in patterns:
            missing = [t for t in p.needs if not shutil.which(t)]
            if missing:
                rows.append({"number": p.number, "pattern": p.name, "skipped": f"{', '.join(missing)} not installed"})
                print(line(rows[-1]), flush=True)
            else:
                ready.append(p)
        first, last = [p for p in ready if p.name != "catch-up"], [p for p in ready if p.name == "catch-up"]
        for p in first:
            play(run, p, 2.0)
        run.wait_reads(first, args.deadline)
        run.grace(first)
        for p in first:  # their figures now, before catch-up restarts the daemon
            rows.append(p.row())
            print(line(rows[-1]), flush=True)
        for p in last:
            play(run, p, args.deadline)
            run.grace([p])
            rows.append(p.row())
            print(line(rows[-1]), flush=True)
    except Exception as error:
        run.failures.append(f"{type(error).__name__}: {error}")
    finally:
        if run.daemon and run.daemon.alive():
            code = run.daemon.stop()
            if code != 0:
                run.failures.append(f"the daemon stopped with {code}")
        if run.daemon and run.failures:
            print("daemon's last lines:\n  " + run.daemon.stderr_tail(10).replace("\n", "\n  "))
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    rows.sort(key=lambda r: r["number"])
    failures = [f for r in rows for f in verdict(r)] + run.failures
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"files": run.files, "lanes": run.lanes, "rows": rows, "failures": failures}, f, indent=1)
    for failure in failures:
        print(f"    {failure}")
    print("deliveries: ok" if not failures else f"deliveries: FAIL ({len(failures)} problems)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
