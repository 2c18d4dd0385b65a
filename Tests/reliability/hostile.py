#!/usr/bin/env python3
"""Hostile jobs (issue 11, part 3), all in one daemon, each a task started once at start:
every job must end by budget + kill_grace (plus a scheduling slack), the retry loop must not
become a fork storm, and the daemon's RSS must stay under a bound while 1 GiB of output
passes through it. Without a delegated cgroup a process that called setsid escapes expiry:
counted and reported, not hidden. A fork bomb and a job over memory_max need a delegated
cgroup with its controllers: limits.py.

usage: hostile.py BINARY [--output-mib N] [--rss-bound-mib N] [--json FILE]
"""
import argparse, json, os, shutil, signal, subprocess, sys, threading, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk

BUDGET, KILL_GRACE = 2.0, 1.0


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--output-mib", type=int, default=1024)
    p.add_argument("--rss-bound-mib", type=int, default=48)
    # Timers share the jobs queue with the output floods' reads (at most 5 ms per read
    # event each): what an expiry may be late by, on top of kill_grace and the job's own
    # 0.1 s sleep.
    p.add_argument("--slack", type=float, default=1.0)
    p.add_argument("--json")
    return p.parse_args()


def jobs(root, output_mib):
    size = output_mib * 1024 * 1024
    line = "x" * 79
    short = {"budget": f"{BUDGET:.0f}s", "kill_grace": f"{KILL_GRACE:.0f}s"}
    long = {"budget": "10m", "kill_grace": "1s"}
    return {
        "ignores-sigterm": (short, "trap '' TERM; while :; do sleep 0.1; done"),
        "setsid-grandchild": (short, f"setsid sh -c 'echo $$ > {root}/escaped.pid; exec sleep 900' & sleep 60"),
        "stdout-lines": (long, f"yes {line} | head -c {size}"),
        "stdout-no-newline": (long, f"head -c {size} /dev/zero"),
        "closes-stdout": (short, "exec >&- 2>&-; sleep 0.5"),
        "reads-stdin": (short, "cat; echo stdin ended"),
        "fifo-argument": (short, f"exec cat {root}/fifo"),
        "exits-at-once": ({"budget": "5s", "retry": "{ attempts = 100, backoff = \"100ms\", max_backoff = \"100ms\" }"},
                          f"echo $(date +%s.%N) >> {root}/attempts; exit 3"),
    }


def config(root, output_mib):
    lines = ["[daemon]", "max_jobs = 16", 'shutdown_grace = "5s"', ""]
    for name, (keys, script) in jobs(root, output_mib).items():
        lines += ["[[task]]", f'name = "{name}"', 'every = "1h"', "run_on_start = true", "shell = true",
                  f"command = '''{script}'''"]
        lines += [f"{k} = {v}" if k == "retry" else f'{k} = "{v}"' for k, v in keys.items()] + [""]
    return "\n".join(lines)


def keep_daemon_lines(fd, log):
    """Reads the daemon's stderr as fast as it comes (a slow reader would throttle the daemon
    and the figures with it) and keeps every line but the two output jobs' own."""
    carry = b""
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        lines = (carry + chunk).split(b"\n")
        carry = lines.pop()
        kept = [l for l in lines if b"stdout-lines[" not in l and b"stdout-no-newline[" not in l]
        if kept:
            log.write(b"\n".join(kept) + b"\n")
            log.flush()
    os.close(fd)


def main():
    args = parse()
    root = wk.scratch("wk-hostile-")
    os.mkfifo(f"{root}/fifo")
    conf = f"{root}/watchkeeper.toml"
    with open(conf, "w") as f:
        f.write(config(root, args.output_mib))
    # The job output (2 GiB of log lines) is not kept: only the daemon's own lines are.
    log = open(f"{root}/stderr.log", "wb")
    read_end, write_end = os.pipe()
    sieve = threading.Thread(target=keep_daemon_lines, args=(read_end, log))
    sieve.start()
    daemon = wk.Daemon(args.binary, root, conf)
    daemon.stderr_target = write_end
    peak = {"rss_kib": 0}
    failures = []
    began = time.monotonic()
    if not daemon.start(ready_within=20):
        raise SystemExit("hostile: the daemon never became ready")
    os.close(write_end)
    write_end = os.open("/dev/null", os.O_WRONLY)

    def sample():
        while daemon.alive():
            try:
                peak["rss_kib"] = max(peak["rss_kib"], wk.status_fields(daemon.pid)["rss_kib"])
            except OSError:
                return
            time.sleep(0.05)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    names = list(jobs(root, args.output_mib))
    finished = {}

    def records():
        log.flush()
        return wk.run_records(f"{root}/stderr.log")

    # exits-at-once ends after its 100 attempts; the others after one run each.
    done = lambda r: all(n in r for n in names) and len(r.get("exits-at-once", [])) >= 100
    complete = wk.wait_for(600, lambda: done(records()), 0.5)
    finished = records()
    daemon.stop()
    os.close(write_end)
    sieve.join()

    rows = []
    limit_ms = (BUDGET + KILL_GRACE + args.slack) * 1000
    for name in names:
        runs = finished.get(name, [])
        outcome, duration, _ = (runs[-1] if runs else ("none", 0, ""))
        row = {"job": name, "outcome": outcome, "duration_ms": duration, "runs": len(runs)}
        keys = jobs(root, args.output_mib)[name][0]
        if keys.get("budget") == f"{BUDGET:.0f}s" and duration > limit_ms:
            failures.append(f"{name} ended after {duration} ms, over budget + kill_grace ({limit_ms:.0f} ms with slack)")
        rows.append(row)
    expected = {"ignores-sigterm": "expired", "setsid-grandchild": "expired", "stdout-lines": "ok",
                "stdout-no-newline": "ok", "closes-stdout": "ok", "reads-stdin": "ok", "fifo-argument": "expired",
                "exits-at-once": "failed"}
    for row in rows:
        if row["outcome"] != expected[row["job"]]:
            failures.append(f"{row['job']}: outcome {row['outcome']}, expected {expected[row['job']]}")
    # No fork storm: the retry loop's attempts per second, at most 1 / backoff (10) plus slack.
    stamps = sorted(float(x) for x in open(f"{root}/attempts").read().split()) if os.path.exists(f"{root}/attempts") else []
    per_second = max((sum(1 for t in stamps if s <= t < s + 1) for s in stamps), default=0)
    if per_second > 15:
        failures.append(f"the failing job ran {per_second} times in one second: a fork storm")
    escaped = 0
    try:
        pid = int(open(f"{root}/escaped.pid").read())
        if os.path.exists(f"/proc/{pid}"):
            escaped = 1
            os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError):
        pass
    if peak["rss_kib"] > args.rss_bound_mib * 1024:
        failures.append(f"daemon RSS peaked at {peak['rss_kib'] // 1024} MiB, over {args.rss_bound_mib} MiB")
    if not complete:
        failures.append(f"not every job ended within 600 s: {sorted(set(names) - set(finished))}")
    for row in rows:
        print(f"{row['job']:20s} {row['outcome']:8s} {row['duration_ms']:8d} ms  runs {row['runs']}")
    totals = {"jobs": len(rows), "peak_rss_mib": round(peak["rss_kib"] / 1024, 1), "retry_attempts_per_second_max": per_second,
              "escaped_setsid_processes": escaped, "output_mib_per_job": args.output_mib,
              "seconds": round(time.monotonic() - began, 1)}
    print("totals: " + " ".join(f"{k}={v}" for k, v in totals.items()))
    if escaped:
        print("note: without a delegated cgroup the setsid grandchild outlived the job's expiry (killed here)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "totals": totals, "failures": failures}, f, indent=1)
    if not failures:
        shutil.rmtree(root, ignore_errors=True)
    for failure in failures:
        print(f"hostile: FAIL {failure}")
    print("hostile: ok" if not failures else f"hostile: failed (kept {root})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
