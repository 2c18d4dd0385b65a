#!/usr/bin/env python3
"""The state file with a large ledger (issue 36, item 8): the WAL during a start-up prune, the
file's size after it, `history WATCH` over a large ledger alone and with 16 callers at once,
and the daemon's RSS after a large catch-up. Prints the numbers docs/measurements/ledger.md
keeps.

  python3 Tests/bench/ledger_scale.py --binary .build/release/watchkeeper [--rows 1000000] [--catch-up 100000]

The ledger is filled directly (one transaction of SQLite inserts in the daemon's schema): rule
"gone" with ROWS entries for files that do not exist under its root (the start-up prune forgets
them), rule "kept" with ROWS entries under a root that is missing (nothing is pruned: what
`history kept` reads). While the prune runs, the -wal file's size is sampled every 5 ms, with
and (a second start) without `history` callers beside it. Then a tree of CATCH_UP files, none
in the ledger, is caught up by a third start, and the daemon's RSS and malloc's in-use bytes
are read from the state dump once the jobs are done.
"""
import argparse, json, os, random, shutil, socket, sqlite3, statistics, subprocess, sys, tempfile, threading, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
import wk


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--catch-up", type=int, default=100_000)
    p.add_argument("--callers", type=int, default=16)
    p.add_argument("--keep", action="store_true")
    return p.parse_args()


def config(root, rules):
    text = "[daemon]\nmax_jobs = 8\n"
    for name, path in rules:
        text += f'\n[[watch]]\nname = "{name}"\npath = "{path}"\nrecursive = true\ncommand = ["/bin/true"]\n'
    with open(f"{root}/watchkeeper.toml", "w") as f:
        f.write(text)
    return f"{root}/watchkeeper.toml"


def fill(database, rule, rows):
    """ROWS entries for RULE, handled over the last day, in the daemon's schema."""
    connection = sqlite3.connect(database)
    now = time.time_ns()
    with connection:
        connection.executemany(
            "INSERT INTO file_ledger (rule, path, device, inode, size, modified_ns, outcome, handled_at, run_id, started_at, "
            "duration_ns, exit_code, changed_ns, born_ns, generation) VALUES (?, ?, 2049, ?, 4096, ?, 'ok', ?, ?, ?, 5000000, 0, ?, ?, ?)",
            ((rule, f"d{i % 1000:03d}/file-{i:07d}".encode(), 10_000_000 + i, now - i * 86_400, now - random.randrange(86_400_000_000_000),
              f"{random.getrandbits(64):016x}", now, now - i * 86_400, now - i * 86_400, random.getrandbits(62)) for i in range(rows)))
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()


def sizes(database):
    def size(path):
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            return 0
    return size(database), size(database + "-wal")


def history(root, rule):
    """One History call on the control socket (what `watchkeeper history RULE -n 50` sends),
    timed from the request to the whole reply: the daemon's time, without a CLI's start."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(f"{root}/run/control.sock")
        began = time.monotonic()
        s.sendall(json.dumps({"method": "io.watchkeeper.Control.History", "parameters": {"name": rule, "limit": 50}}).encode() + b"\0")
        reply = b""
        while not reply.endswith(b"\0"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
        took = time.monotonic() - began
    if b'"error"' in reply:
        raise RuntimeError(f"history {rule}: {reply[:300]!r}")
    return took


def start(daemon):
    if not daemon.start(ready_within=300):
        raise RuntimeError("no READY=1: " + daemon.stderr_tail())


def prune_run(args, root, daemon, conf, callers):
    """Starts the daemon on a ledger whose "gone" rows are all prunable; samples the WAL until
    the prune said how many it forgot; returns (largest WAL, file size after, history times)."""
    largest, times, stop = 0, [], threading.Event()

    def call():
        while not stop.is_set():
            times.append(history(root, "kept"))
    with open(f"{root}/stderr.log", "rb") as f:
        offset = len(f.read())
    start(daemon)
    workers = [threading.Thread(target=call) for _ in range(callers)]
    for worker in workers:
        worker.start()
    began = time.monotonic()
    while time.monotonic() - began < 600:
        largest = max(largest, sizes(daemon.database)[1])
        with open(f"{root}/stderr.log", "rb") as f:
            f.seek(offset)
            if b"the file ledger forgot" in f.read():
                break
        time.sleep(0.005)
    # The pages it freed go back after it, a step at a time (StateStore.shrinkStep), then
    # the checkpoint: until less than a tenth of the file is free, or 10 minutes.
    settled = time.monotonic() + 600
    while time.monotonic() < settled:
        largest = max(largest, sizes(daemon.database)[1])
        try:
            connection = sqlite3.connect(f"file:{daemon.database}?mode=ro", uri=True, timeout=5)
            pages, free, mode = (connection.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "auto_vacuum"))
            connection.close()
        except sqlite3.Error:
            pages, free, mode = 1, 1, 2
        if free * 10 < pages or mode == 0:  # a file without auto_vacuum never gives pages back
            break
        time.sleep(0.01)
    for _ in range(200):  # the checkpoint after it
        largest = max(largest, sizes(daemon.database)[1])
        time.sleep(0.005)
    stop.set()
    for worker in workers:
        worker.join()
    took = time.monotonic() - began
    daemon.stop(within=120)
    return largest, sizes(daemon.database)[0], times, took


def main():
    args = parse()
    binary = os.path.abspath(args.binary)
    root = tempfile.mkdtemp(prefix="wk-ledger-scale-")
    try:
        for sub in ("run", "state", "gone", "tree"):
            os.makedirs(f"{root}/{sub}")
        conf = config(root, [("gone", f"{root}/gone"), ("kept", f"{root}/kept-missing")])
        daemon = wk.Daemon(binary, root, conf)
        start(daemon)
        daemon.stop()
        print(f"ledger: {args.rows:,} rows of \"gone\" (files missing) and {args.rows:,} of \"kept\" (root missing)", flush=True)
        for rule in ("gone", "kept"):
            fill(daemon.database, rule, args.rows)
        before = sizes(daemon.database)[0]
        for callers in (0, args.callers):
            if callers:  # the same prune again, with callers beside it
                fill(daemon.database, "gone", args.rows)
            largest, after, times, took = prune_run(args, root, daemon, conf, callers)
            print(f"  start-up prune of {args.rows:,} rows and the shrink after it in {took:.1f} s, {callers} history callers: largest WAL "
                  f"{largest / 2**20:.1f} MiB; file {before / 2**20:.0f} MiB before, {after / 2**20:.0f} MiB after the stop", flush=True)
            if times:
                print(f"    history kept -n 50 by {callers} callers at once: {len(times)} calls, median {statistics.median(times):.3f} s, "
                      f"max {max(times):.3f} s", flush=True)
        start(daemon)
        alone = [history(root, "kept") for _ in range(10)]
        print(f"  history kept -n 50 alone over {args.rows:,} rows: median {statistics.median(alone):.3f} s, max {max(alone):.3f} s", flush=True)
        together, stop = [0.0], threading.Event()

        def call():
            while not stop.is_set():
                together.append(history(root, "kept"))
        workers = [threading.Thread(target=call) for _ in range(args.callers)]
        for worker in workers:
            worker.start()
        time.sleep(10 if workers else 0)
        stop.set()
        for worker in workers:
            worker.join()
        together = together[1:] or [0.0]
        print(f"  history kept -n 50 by {args.callers} callers at once, nothing else running: {len(together)} calls in 10 s, "
              f"median {statistics.median(together):.3f} s, max {max(together):.3f} s", flush=True)
        daemon.stop()
        # A large catch-up: CATCH_UP files none of which is in the ledger.
        for i in range(args.catch_up):
            directory = f"{root}/tree/d{i % 100:02d}"
            os.makedirs(directory, exist_ok=True)
            with open(f"{directory}/f{i}", "w") as f:
                f.write("x")
        conf = config(root, [("gone", f"{root}/gone"), ("kept", f"{root}/kept-missing"), ("tree", f"{root}/tree")])
        daemon = wk.Daemon(binary, root, conf)
        start(daemon)
        peak, began, handled = 0, time.monotonic(), 0
        while handled < args.catch_up:
            peak = max(peak, wk.status_fields(daemon.pid)["rss_kib"])
            time.sleep(0.2)
            try:
                connection = sqlite3.connect(f"file:{daemon.database}?mode=ro", uri=True, timeout=5)
                handled = connection.execute("SELECT count(*) FROM file_ledger WHERE rule = 'tree'").fetchone()[0]
                connection.close()
            except sqlite3.Error:
                pass
            if time.monotonic() - began > 3600:
                raise RuntimeError(f"the catch-up handled {handled} of {args.catch_up} files in an hour")
        took = time.monotonic() - began
        time.sleep(5)
        daemon.signal(10)  # SIGUSR1: the dump's figures
        time.sleep(1)
        with open(f"{root}/run/state.json") as f:
            state = json.load(f)
        rss = wk.status_fields(daemon.pid)
        resources = state.get("daemon", {}).get("resources") or state.get("resources") or {}
        print(f"  catch-up of {args.catch_up:,} files in {took:.0f} s: peak RSS {peak / 1024:.1f} MiB; 5 s after the last job RSS "
              f"{rss['rss_kib'] / 1024:.1f} MiB ({rss['anon_kib'] / 1024:.1f} anon), malloc in use "
              f"{resources.get('malloc_in_use_bytes', 0) / 2**20:.1f} MiB, kept free {resources.get('malloc_free_kept_bytes', 0) / 2**20:.1f} MiB, "
              f"SQLite {resources.get('sqlite_bytes', 0) / 2**20:.1f} MiB", flush=True)
        daemon.stop()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
