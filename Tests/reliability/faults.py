#!/usr/bin/env python3
"""Faults in the daemon's own world (issue 11, part 4), the ones the XCTest suite does not
script: a tiny open file limit, a full state directory, and a watched root the daemon's user
cannot read. Each scenario runs its own daemon on a watched inbox and drops files into it;
the promise checked is the same each time: the daemon stays up, says what is wrong (once,
with the path and the cause), and, once the fault is gone, every file is handled.

  nofile            RLIMIT_NOFILE 40 with max_jobs = 8 (a job holds 7 fds): the start-up
                    warning names the limit; a burst of FILES files is handled
  state-full        the state directory on a 1 MiB tmpfs, filled up while files arrive; the
                    daemon reports the full disk (one line per cause a minute, not one per
                    failed write), keeps the records it cannot write, and writes them once
                    space is freed: after a restart no file runs again
  unreadable-root   the daemon as nobody, its watched root mode 0700 root:root; it reports
                    the permission problem, and handles the files once the mode is 0755
                    (its fallback scan shortened from 30 s to 2 s)

usage: faults.py BINARY [--files N] [--only a,b] [--json FILE]
"""
import argparse, json, os, pwd, shutil, signal, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--files", type=int, default=300)
    p.add_argument("--only")
    p.add_argument("--json")
    return p.parse_args()


def config(root, max_jobs=4, extra=""):
    return "\n".join([
        "[daemon]", 'log_level = "info"', 'shutdown_grace = "5s"', f"max_jobs = {max_jobs}", extra, "",
        "[[watch]]", 'name = "inbox"', f'path = "{root}/inbox"', 'settle = "20ms"', 'budget = "30s"',
        f"""command = ["/bin/sh", "-c", 'printf "%s\\\\n" "$WATCHKEEPER_PATH" >> {root}/handled/log; sleep 0.02']""", ""])


def handled(root):
    try:
        with open(f"{root}/handled/log") as f:
            return [line.rstrip("\n") for line in f]
    except OSError:
        return []


def drop(root, names):
    for name in names:
        with open(f"{root}/inbox/{name}.tmp", "w") as f:
            f.write(name)
        os.rename(f"{root}/inbox/{name}.tmp", f"{root}/inbox/{name}")


def setup(prefix, owner=None):
    root = wk.scratch(prefix)
    for sub in ["inbox", "handled", "run", "state"]:
        os.makedirs(f"{root}/{sub}")
    os.chmod(root, 0o755)
    if owner is not None:
        for sub in ["handled", "run", "state"]:
            os.chown(f"{root}/{sub}", owner.pw_uid, owner.pw_gid)
    conf = f"{root}/watchkeeper.toml"
    return root, conf


def outcome(name, root, daemon, names, failures, started, **extra):
    seen = handled(root)
    expected = {f"{root}/inbox/{n}" for n in names}
    lost = len(expected - set(seen))
    row = {"scenario": name, "files": len(names), "lost": lost, "duplicates": len(seen) - len(set(seen)),
           "seconds": round(time.monotonic() - started, 1), "failures": failures, **extra}
    code = daemon.stop()
    if code not in (0,):
        failures.append(f"the daemon stopped with {code}")
    if lost:
        failures.append(f"{lost} files never handled")
    row["stderr_tail"] = daemon.stderr_tail(8)
    return row


def log_count(root, needle):
    try:
        with open(f"{root}/stderr.log", errors="replace") as f:
            return sum(1 for line in f if needle in line)
    except OSError:
        return 0


def log_has(root, *needles):
    try:
        with open(f"{root}/stderr.log", errors="replace") as f:
            text = f.read()
    except OSError:
        return False
    return all(needle in text for needle in needles)


def nofile(binary, files):
    root, conf = setup("wk-faults-nofile-")
    with open(conf, "w") as f:
        f.write(config(root, max_jobs=8))
    started = time.monotonic()
    daemon = wk.Daemon(binary, root, conf, wrapper=["prlimit", "--nofile=40:40", "--"])
    failures = []
    if not daemon.start(ready_within=30):
        return {"scenario": "nofile", "failures": ["no READY=1: " + daemon.stderr_tail()], "lost": files}
    # READY=1 does not wait for the start-up lines to be written (the log writer gathers).
    if not wk.wait_for(10, lambda: log_has(root, "RLIMIT_NOFILE=40"), step=0.1):
        failures.append("no start-up warning naming RLIMIT_NOFILE=40")
    names = [f"n{i:05d}" for i in range(files)]
    drop(root, names)
    wk.wait_for(120, lambda: len(set(handled(root))) >= files, step=0.2)
    return outcome("nofile", root, daemon, names, failures, started)


def state_full(binary, files):
    if os.geteuid() != 0:
        return {"scenario": "state-full", "skipped": "mounting a tmpfs needs root", "failures": [], "lost": 0}
    root, conf = setup("wk-faults-full-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "wk-faults-state", f"{root}/state"]).returncode != 0:
        return {"scenario": "state-full", "skipped": "unable to mount a tmpfs here", "failures": [], "lost": 0}
    try:
        with open(conf, "w") as f:
            f.write(config(root))
        started = time.monotonic()
        daemon = wk.Daemon(binary, root, conf)
        failures = []
        if not daemon.start(ready_within=30):
            return {"scenario": "state-full", "failures": ["no READY=1: " + daemon.stderr_tail()], "lost": files}
        first = [f"f{i:05d}" for i in range(files // 3)]
        drop(root, first)
        wk.wait_for(60, lambda: len(set(handled(root))) >= len(first), step=0.2)
        # Fill what is left of the state directory's file system.
        filler = f"{root}/state/filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], stderr=subprocess.DEVNULL)
        full = [f"g{i:05d}" for i in range(files // 3)]
        drop(root, full)
        reported = wk.wait_for(60, lambda: any(log_has(root, text) for text in ("disk is full", "No space left", "ENOSPC")), step=0.2)
        if not reported:
            failures.append("no report of the full state directory")
        # The jobs of the files that came while it was full still run, and their records
        # wait: the disk stays full for a few more retries before space is freed.
        if not wk.wait_for(60, lambda: len(set(handled(root))) >= len(first) + len(full), step=0.2):
            failures.append("files that arrived while the state directory was full were not handled meanwhile")
        time.sleep(3)
        alive_while_full = daemon.alive()
        if not alive_while_full:
            failures.append("the daemon died with its state directory full")
        os.unlink(filler)
        after = [f"h{i:05d}" for i in range(files - len(first) - len(full))]
        drop(root, after)
        names = first + full + after
        wk.wait_for(120, lambda: len(set(handled(root))) >= len(names), step=0.2)
        # The records that waited are written by the daemon's own retries, not only at its stop.
        if not wk.wait_for(15, lambda: log_has(root, "the state file is written again"), step=0.2):
            failures.append("the records that waited were not written within 15 s of space coming back")
        # Space is back: every record that waited must be in the ledger, so a restart (whose
        # catch-up compares every file with it) runs nothing again.
        code = daemon.stop()
        if code != 0:
            failures.append(f"the first daemon stopped with {code}")
        # Counted after the stop, when every line is written: an upper bound read early passes on a log not yet complete.
        reports = log_count(root, "unable to write to the state file")
        if reports > 3:
            failures.append(f"{reports} lines about the full state directory: one per cause a minute was the promise")
        before_restart = len(handled(root))
        daemon = wk.Daemon(binary, root, conf)
        rerun = None
        if not daemon.start(ready_within=30):
            failures.append("no READY=1 after the restart: " + daemon.stderr_tail())
        else:
            # Catch-up lists the tree and gives each file it finds a 1 s window.
            time.sleep(4)
            rerun = len(handled(root)) - before_restart
            if rerun:
                failures.append(f"{rerun} files ran again after a restart once space was back")
        row = outcome("state-full", root, daemon, names, failures, started, reported=reported, report_lines=reports,
                      run_again_after_restart=rerun)
        row["integrity"] = wk.integrity(daemon.database)
        if row["integrity"] != "ok":
            failures.append(f"integrity_check: {row['integrity']}")
        return row
    finally:
        subprocess.run(["umount", "-l", f"{root}/state"])


def unreadable_root(binary, files):
    if os.geteuid() != 0:
        return {"scenario": "unreadable-root", "skipped": "running the daemon as nobody needs root", "failures": [], "lost": 0}
    nobody = pwd.getpwnam("nobody")
    root, conf = setup("wk-faults-unreadable-", owner=nobody)
    # The build directory may not be readable by nobody: run a copy.
    copy = f"{root}/watchkeeper"
    shutil.copy(binary, copy)
    os.chmod(copy, 0o755)
    os.chmod(f"{root}/inbox", 0o700)
    with open(conf, "w") as f:
        f.write(config(root))
    os.chmod(conf, 0o644)
    started = time.monotonic()
    daemon = wk.Daemon(copy, root, conf, wrapper=["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", "--"])
    # The scan that stands in for an unwatchable directory comes every 30 s; 2 s here.
    daemon.env["WATCHKEEPER_TEST_FALLBACK_INTERVAL"] = "2s"
    failures = []
    # Not READY=1: nobody may not write to the notify socket root made. The log says it.
    daemon.start()
    wk.wait_for(30, lambda: log_has(root, "info: ready in"), step=0.1)
    if not wk.wait_for(30, lambda: log_has(root, f"{root}/inbox", "ermission denied"), step=0.2):
        failures.append("no report naming the unreadable root and the cause")
    if not daemon.alive():
        return {"scenario": "unreadable-root", "failures": failures + ["the daemon exited: " + daemon.stderr_tail()], "lost": files}
    names = [f"u{i:05d}" for i in range(files)]
    drop(root, names)
    os.chmod(f"{root}/inbox", 0o755)
    # Reading the root again is the daemon's to notice (a retry, or a reload), not ours.
    recovered = wk.wait_for(120, lambda: len(set(handled(root))) >= files, step=0.2)
    return outcome("unreadable-root", root, daemon, names, failures, started, recovered_without_reload=recovered)


SCENARIOS = {"nofile": nofile, "state-full": state_full, "unreadable-root": unreadable_root}


def main():
    args = parse()
    chosen = args.only.split(",") if args.only else list(SCENARIOS)
    rows = []
    for name in chosen:
        row = SCENARIOS[name](os.path.abspath(args.binary), args.files)
        rows.append(row)
        if row.get("skipped"):
            print(f"{name:16s} skipped: {row['skipped']}")
            continue
        print(f"{name:16s} {'ok  ' if not row['failures'] else 'FAIL'} {row.get('files', 0)} files: {row['lost']} lost, "
              f"{row.get('duplicates', 0)} run twice, {row.get('seconds', 0)} s", flush=True)
        for failure in row["failures"]:
            print(f"    {failure}")
        if row["failures"] and row.get("stderr_tail"):
            print("    " + row["stderr_tail"].replace("\n", "\n    "))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "failures": [f for r in rows for f in r["failures"]]}, f, indent=1)
    return 1 if any(r["failures"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
