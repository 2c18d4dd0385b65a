#!/usr/bin/env python3
"""A burst of files does not make periodic tasks late (issue 23): FILES files land in a
watched inbox at once (each a job), while a high-priority task runs every 100 ms. Every fire
of the task during the burst is read from its run record (`lateness_ms`, the start minus the
scheduled instant): the 99th percentile must stay within 50 ms, and every file is handled.

    lateness.py --binary .build/debug/watchkeeper [--files 20000] [--json out]
"""
import argparse, faulthandler, json, os, sys, time
from datetime import datetime

from wk import Daemon, metadata, scratch, wait_for


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--files", type=int, default=20000)
    p.add_argument("--bound-ms", type=float, default=50.0, help="the p99 lateness allowed")
    p.add_argument("--json")
    return p.parse_args()


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def tick_records(log):
    """(started_at, lateness_ms) of every run of task "tick" in the daemon's stderr log."""
    found = []
    with open(log, "rb") as f:
        for line in f:
            fields = metadata(line)
            if fields and fields.get("task") == b"tick" and "lateness_ms" in fields and "started_at" in fields:
                started = datetime.fromisoformat(fields["started_at"].decode().replace("Z", "+00:00")).timestamp()
                found.append((started, float(fields["lateness_ms"])))
    return found


def main():
    args = parse()
    faulthandler.dump_traceback_later(900, exit=True)
    root = scratch("wk-lateness-")
    os.makedirs(f"{root}/inbox")
    conf = f"{root}/watchkeeper.toml"
    with open(conf, "w") as f:
        f.write(f"""[daemon]
log_level = "info"
max_jobs = 4

[[task]]
name = "tick"
every = "100ms"
priority = "high"
command = ["/bin/true"]

[[watch]]
name = "inbox"
path = "{root}/inbox"
command = ["/bin/true", "{{path}}"]
""")
    daemon = Daemon(args.binary, root, conf)
    failures, result = [], {"files": args.files}
    if not daemon.start(ready_within=30):
        print("lateness: the daemon did not become ready:\n" + daemon.stderr_tail())
        return 1
    try:
        time.sleep(1)
        began = time.time()
        for i in range(args.files):
            with open(f"{root}/inbox/f-{i}", "w") as f:
                f.write(str(i))
        written = time.time()

        def handled():
            # The ok records of the watch rule in the log: one per file.
            with open(f"{root}/stderr.log", "rb") as f:
                return sum(1 for line in f if b"(watch=inbox, " in line and b"outcome=ok" in line)

        done = wait_for(600, lambda: handled() >= args.files, step=1.0)
        ended = time.time()
        if not done:
            failures.append(f"only {handled()} of {args.files} files handled within 600 s")
        time.sleep(0.5)
    finally:
        code = daemon.stop()
    if code != 0:
        failures.append(f"the daemon exited {code} at the stop")
    records = tick_records(f"{root}/stderr.log")
    # The fires whose start fell inside the burst (from the first file written to the last handled).
    during = [late for started, late in records if began <= started <= ended]
    result.update(burst_s=round(ended - began, 1), writing_s=round(written - began, 1), fires=len(during))
    if len(during) < 10:
        failures.append(f"only {len(during)} fires of the 100 ms task during the burst")
    else:
        p50, p99, worst = percentile(during, 0.5), percentile(during, 0.99), max(during)
        result.update(p50_ms=round(p50, 2), p99_ms=round(p99, 2), max_ms=round(worst, 2))
        print(f"lateness: {args.files} files in {ended - began:.1f} s (written in {written - began:.1f} s); "
              f"{len(during)} fires of a 100 ms task: lateness p50 {p50:.2f} ms, p99 {p99:.2f} ms, max {worst:.2f} ms")
        if p99 > args.bound_ms:
            failures.append(f"p99 lateness {p99:.1f} ms over {args.bound_ms:.0f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"result": result, "failures": failures}, f, indent=1)
    for failure in failures:
        print("FAIL: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
