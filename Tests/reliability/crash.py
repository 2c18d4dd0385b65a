#!/usr/bin/env python3
"""SIGKILL of the daemon, KILLS times, in the middle of the four things it does (issue 11, part 4):
a burst of files arriving, the catch-up at start of files that arrived while it was down, jobs
running, and a reload. After each kill: SQLite's integrity check of the state database, then a
restart that must reach READY=1. At the end every file must have been handled, and files handled
twice are bounded by the file jobs that were in flight at the kills (their results never reached
the ledger), counted at each kill with the daemon stopped.

usage: crash.py BINARY [--kills N] [--files-per-burst N] [--seed S] [--json FILE]
"""
import argparse, collections, json, os, random, shutil, signal, sqlite3, sys, threading, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk

MARKER = b"wk-file-job"
PHASES = ["burst", "catch-up", "runs", "reload"]


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--kills", type=int, default=50)
    p.add_argument("--files-per-burst", type=int, default=60)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", help="write the per-kill records and the totals here")
    return p.parse_args()


def config(root, generation):
    # The file job appends its path and lingers a little, so kills find jobs in flight; the
    # task keeps a run going most of the time; each reload changes budgets and adds or removes
    # a second task, so a reload applies a change.
    budget = "20s" if generation % 2 == 0 else "21s"
    lines = ["[daemon]", 'log_level = "info"', 'shutdown_grace = "5s"', "max_jobs = 6", "",
             "[[task]]", 'name = "ticker"', 'every = "1s"', f'budget = "{budget}"',
             'command = ["/bin/sleep", "0.4"]', "",
             "[[watch]]", 'name = "inbox"', f'path = "{root}/inbox"', "recursive = true",
             f'budget = "{budget}"', 'settle = "20ms"',
             f"""command = ["/bin/sh", "-c", 'printf "%s\\\\n" "$WATCHKEEPER_PATH" >> {root}/handled; sleep 0.05', "{MARKER.decode()}"]""", ""]
    if generation % 2 == 1:
        lines += ["[[task]]", 'name = "extra"', 'every = "2s"', 'command = ["/bin/true"]', ""]
    return "\n".join(lines)


class Files:
    """The files written so far, by name, and a writer that writes a batch in the background."""

    def __init__(self, root):
        self.root, self.count, self.written = root, 0, []

    def write(self, n, pause=0.0):
        for _ in range(n):
            self.count += 1
            subdir = f"{self.root}/inbox/d{self.count % 7}"
            os.makedirs(subdir, exist_ok=True)
            path = f"{subdir}/f-{self.count:06d}"
            with open(path, "w") as f:
                f.write(str(self.count))
            self.written.append(path)
            if pause:
                time.sleep(pause)

    def write_in_background(self, n, pause):
        thread = threading.Thread(target=self.write, args=(n, pause))
        thread.start()
        return thread


def handled_lines(root):
    try:
        with open(f"{root}/handled", "rb") as f:
            return [line.decode(errors="replace") for line in f.read().split(b"\n") if line]
    except FileNotFoundError:
        return []


def ledger_paths(database, root):
    """The files the ledger holds as handled, as absolute paths."""
    try:
        connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)
        try:
            rows = connection.execute("SELECT path FROM file_ledger WHERE outcome = 'ok'").fetchall()
        finally:
            connection.close()
    except sqlite3.Error:
        return set()
    return {f"{root}/inbox/" + bytes(row[0]).decode(errors="replace") for row in rows}


def main():
    args = parse()
    seed = args.seed if args.seed is not None else int(time.time())
    rng = random.Random(seed)
    root = wk.scratch("wk-crash-")
    os.makedirs(f"{root}/inbox")
    conf = f"{root}/watchkeeper.toml"
    generation = 0
    with open(conf, "w") as f:
        f.write(config(root, generation))
    daemon = wk.Daemon(args.binary, root, conf)
    files = Files(root)
    records, failures = [], []
    started = time.monotonic()
    if not daemon.start(ready_within=20):
        raise SystemExit(f"crash: the daemon never became ready\n{daemon.stderr_tail()}")

    previous_counts = collections.Counter()
    for kill in range(args.kills):
        phase = PHASES[kill % len(PHASES)]
        record = {"kill": kill + 1, "phase": phase}
        writer = None
        if phase == "burst":
            writer = files.write_in_background(args.files_per_burst, 0.002)
            time.sleep(rng.uniform(0.02, 0.25))
        elif phase == "catch-up":
            # The previous kill left the daemon down: files arrive, then it starts and is killed
            # while it lists and runs them (sometimes before READY=1).
            files.write(args.files_per_burst)
            daemon.start()
            # Before READY=1 now and then; mostly while its jobs run (files a scan finds wait 1 s).
            record["delay"] = round(rng.uniform(0.0, 0.1) if rng.random() < 0.25 else rng.uniform(1.0, 1.6), 3)
            time.sleep(record["delay"])
        elif phase == "runs":
            files.write(10)
            wk.wait_for(5, lambda: any(MARKER in wk.cmdline(c) for c in wk.direct_children(daemon.pid)), 0.005)
            time.sleep(rng.uniform(0.0, 0.05))
        elif phase == "reload":
            files.write(10)
            generation += 1
            with open(conf + ".new", "w") as f:
                f.write(config(root, generation))
            os.rename(conf + ".new", conf)
            daemon.signal(signal.SIGHUP)
            time.sleep(rng.uniform(0.0, 0.1))
        record["alive_at_kill"] = daemon.alive()
        # The process that waits to become the next job (wk-next-job) must not outlive the
        # daemon: it reads EOF on its wake socket and exits (prepared.c).
        prepared = [p for p in wk.direct_children(daemon.pid) if wk.comm(p) == "wk-next-job"] if record["alive_at_kill"] else []
        record["prepared_at_kill"] = len(prepared)
        record["in_flight"] = daemon.kill_counting_children(MARKER) if record["alive_at_kill"] else 0
        if writer:
            writer.join()
        # Jobs left running finish on their own, as after a real crash; then the files they
        # handled that the ledger does not hold are the ones a restart will run again.
        wk.wait_for(10, lambda: not wk.processes_with(MARKER))
        if not wk.wait_for(10, lambda: all(wk.comm(p) != "wk-next-job" for p in prepared)):
            failures.append(f"kill {kill + 1} ({phase}): a prepared job process (wk-next-job) outlived the daemon by 10 s")
        # Counted once per life: a file already unrecorded at the last kill and not run since adds nothing.
        counts = collections.Counter(handled_lines(root))
        ledger = ledger_paths(daemon.database, root)
        record["uncommitted"] = sum(1 for path, n in counts.items() if path not in ledger and n > previous_counts[path])
        record["ran"] = sum(counts.values()) - sum(previous_counts.values())
        previous_counts = counts
        record["integrity"] = wk.integrity(daemon.database)
        if record["integrity"] != "ok":
            failures.append(f"kill {kill + 1} ({phase}): state database {record['integrity']}")
        if PHASES[(kill + 1) % len(PHASES)] != "catch-up":
            began = time.monotonic()
            if not daemon.start(ready_within=20):
                failures.append(f"kill {kill + 1} ({phase}): no READY=1 within 20 s of the restart")
                records.append(record)
                break
            record["ready_s"] = round(time.monotonic() - began, 3)
        records.append(record)
        print(f"kill {kill + 1:3d} {phase:9s} in flight {record['in_flight']:2d} unrecorded {record['uncommitted']:2d} ran {record['ran']:3d} "
              f"db {record['integrity']} ready {record.get('ready_s', '-')}", flush=True)

    if not daemon.alive():
        daemon.start(ready_within=20)
    expected = set(files.written)
    complete = wk.wait_for(120, lambda: expected <= set(handled_lines(root)), 0.2)
    time.sleep(1.5)  # anything that would run a second time has had its chance
    daemon_exit = daemon.stop()
    lines = handled_lines(root)
    handled = set(lines)
    lost = sorted(expected - handled)
    duplicates = len(lines) - len(handled)
    in_flight = sum(r["in_flight"] for r in records)
    uncommitted = sum(r["uncommitted"] for r in records)
    damaged = sum(1 for line in open(f"{root}/stderr.log", "rb") if b"damaged" in line)
    totals = {"seed": seed, "kills": len(records), "files": len(expected), "handled": len(handled & expected),
              "lost": len(lost), "duplicates": duplicates, "in_flight_at_kills": in_flight, "unrecorded_at_kills": uncommitted,
              "integrity_failures": sum(1 for r in records if r["integrity"] != "ok"),
              "damaged_ledger_lines": damaged, "last_stop_exit": daemon_exit,
              "prepared_at_kills": sum(r.get("prepared_at_kill", 0) for r in records),
              "ready_s_max": max((r.get("ready_s", 0) for r in records), default=0),
              "seconds": round(time.monotonic() - started, 1)}
    if not complete or lost:
        failures.append(f"{len(lost)} of {len(expected)} files never handled, e.g. {lost[:3]}")
    # A job is in flight until its record is in the ledger: running or unreaped at the kill
    # (counted with the daemon stopped), or reaped with its record not yet committed.
    if duplicates > uncommitted:
        failures.append(f"{duplicates} files handled twice, more than the {uncommitted} whose jobs' records were not in the ledger at the kills")
    if damaged:
        failures.append(f"{damaged} log lines about a damaged state file")
    if daemon_exit != 0:
        failures.append(f"the final SIGTERM stop exited {daemon_exit}")
    print("totals: " + " ".join(f"{k}={v}" for k, v in totals.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"totals": totals, "kills": records, "failures": failures}, f, indent=1)
    if failures:
        print(daemon.stderr_tail(30))
        print(f"crash: root kept for a look: {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    for failure in failures:
        print(f"crash: FAIL {failure}")
    print("crash: ok" if not failures else "crash: failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
