#!/usr/bin/env python3
"""Cron tasks across a set of the system clock (issue 11, part 4: clock jumps).

A time namespace (`unshare --time`) offsets only CLOCK_MONOTONIC and CLOCK_BOOTTIME, never
CLOCK_REALTIME, which is the clock cron schedules read: so this sets the machine's real
clock, and puts it back from CLOCK_MONOTONIC however the scenario ends. Root only, and only
in the long suite: everything else on the machine sees the jump too.

With a task `* * * * *` that records the wall clock of each run:
  back      the clock set back two hours after a run: the task must run again within
            the next wall-clock minute (before the daemon watched for clock changes, its
            timer waited for the old next minute, two hours later)
  forward   the clock put back (two hours forward): the task runs at once, once, and the
            daemon says the clock jumped

usage: clock.py BINARY [--json FILE]
"""
import argparse, json, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk

JUMP = 7200


def runs(root):
    try:
        with open(f"{root}/runs") as f:
            return [int(line) for line in f if line.strip()]
    except OSError:
        return []


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--json")
    args = p.parse_args()
    result = {"failures": [], "steps": []}
    if os.geteuid() != 0:
        result["skipped"] = "setting the system clock needs root"
    else:
        root = wk.scratch("wk-clock-")
        for sub in ["run", "state"]:
            os.makedirs(f"{root}/{sub}")
        conf = f"{root}/watchkeeper.toml"
        with open(conf, "w") as f:
            f.write("\n".join(["[daemon]", 'log_level = "info"', "",
                               "[[task]]", 'name = "minutely"', 'cron = "* * * * *"', 'timezone = "UTC"', 'budget = "30s"',
                               f"""command = ["/bin/sh", "-c", 'date +%s >> {root}/runs']""", ""]))
        daemon = wk.Daemon(args.binary, root, conf)
        # Wall time = monotonic + offset, as it was before any jump: the way back.
        offset = time.clock_gettime(time.CLOCK_REALTIME) - time.clock_gettime(time.CLOCK_MONOTONIC)
        try:
            daemon.start(ready_within=30)
            fail = result["failures"].append
            if not wk.wait_for(75, lambda: len(runs(root)) >= 1, step=0.2):
                fail("no run in the first 75 s")
            before = len(runs(root))
            time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_REALTIME) - JUMP)
            set_back = time.monotonic()
            ran_again = wk.wait_for(75, lambda: len(runs(root)) > before, step=0.2)
            result["steps"].append({"step": "back", "ran_again_after_s": round(time.monotonic() - set_back, 1) if ran_again else None})
            if not ran_again:
                fail(f"set back {JUMP} s: no run within 75 s")
            before = len(runs(root))
            time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_MONOTONIC) + offset)
            put_back = time.monotonic()
            ran = wk.wait_for(10, lambda: len(runs(root)) > before, step=0.1)
            ran_after = round(time.monotonic() - put_back, 1)
            time.sleep(2)  # a second run would show by now
            extra = len(runs(root)) - before
            result["steps"].append({"step": "forward", "ran_after_s": ran_after if ran else None, "runs": extra})
            if not ran:
                fail(f"put forward {JUMP} s: the overdue run did not start within 10 s")
            if extra > 1:
                fail(f"put forward {JUMP} s: {extra} runs at once, not one")
            def logged(needle):
                with open(f"{root}/stderr.log", errors="replace") as f:
                    return needle in f.read()
            for needle in ["the system clock was set back", "the system clock jumped forward"]:
                if not wk.wait_for(5, lambda: logged(needle), step=0.1):
                    fail(f"no log line saying {needle!r}")
        finally:
            time.clock_settime(time.CLOCK_REALTIME, time.clock_gettime(time.CLOCK_MONOTONIC) + offset)
            code = daemon.stop()
            if code != 0:
                result["failures"].append(f"the daemon stopped with {code}")
    for step in result["steps"]:
        print(step)
    for failure in result["failures"]:
        print(f"clock: FAIL {failure}")
    print("clock: " + (f"skipped ({result['skipped']})" if "skipped" in result else "ok" if not result["failures"] else "failed"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
