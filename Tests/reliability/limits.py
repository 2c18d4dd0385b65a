#!/usr/bin/env python3
"""Job limits in a delegated cgroup (issue 11, parts 0 and 3): a fork bomb under tasks_max
and a job over memory_max, with the daemon in a cgroup v2 delegated to it as systemd's
Delegate=yes would (the trusted.delegate attribute), so the limits are the kernel's.

A limit needs its controller in the unified hierarchy. On a hybrid host (v1 controllers
beside an empty v2 at /sys/fs/cgroup/unified) a v1 hierarchy that holds no cgroup but its
root can give its controller up: this moves such a controller to the unified hierarchy
for the run (umount of the v1 mount) and mounts it back after. A controller whose v1
hierarchy is in use cannot move, and its scenario is reported as skipped with the count.
Root only, long suite only: it changes the machine's cgroup mounts for a minute.

usage: limits.py BINARY [--json FILE]
"""
import argparse, json, os, re, shutil, subprocess, sys, threading, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk

TASKS_MAX, BUDGET, KILL_GRACE, SLACK = 32, 3.0, 1.0, 1.0
MEMORY_MAX_MIB, ALLOCATE_MIB = 64, 256
SAFETY_PIDS_MAX = 256


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--json")
    return p.parse_args()


def mounts():
    """(mount point, file system type, super options) of every mount, from mountinfo."""
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            dash = fields.index("-")
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            found.append((point, fields[dash + 1], fields[dash + 3].split(",")))
    return found


def v1_cgroups(controller):
    """How many cgroups the controller's v1 hierarchy holds (0: not on v1), from /proc/cgroups."""
    with open("/proc/cgroups") as f:
        for line in f:
            fields = line.split()
            if fields and fields[0] == controller:
                return int(fields[2]) if fields[1] != "0" else 0
    return 0


def read(path):
    with open(path) as f:
        return f.read()


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


class Controllers:
    """The unified hierarchy with the controllers the limits need, moved from v1 where free."""

    def __init__(self):
        unified = [point for point, kind, _ in mounts() if kind == "cgroup2"]
        if not unified:
            raise LookupError("no cgroup v2 hierarchy is mounted")
        self.root = unified[0]
        self.moved = {}  # controller -> the v1 mount point it came from
        self.unavailable = {}  # controller -> why

    def available(self):
        return read(f"{self.root}/cgroup.controllers").split()

    def obtain(self, controller):
        if controller in self.available():
            return True
        v1 = [point for point, kind, options in mounts() if kind == "cgroup" and controller in options]
        held = v1_cgroups(controller)
        if not v1 or held != 1:
            self.unavailable[controller] = (f"the {controller} controller is on the v1 hierarchy at {v1[0] if v1 else '?'}, "
                                            f"which holds {held} cgroups, so it cannot move to the unified hierarchy")
            return False
        subprocess.run(["umount", v1[0]], check=True)
        self.moved[controller] = v1[0]
        # The v1 hierarchy is destroyed after its last mount goes, not at once.
        if not wk.wait_for(10, lambda: controller in self.available(), 0.1):
            self.unavailable[controller] = f"the {controller} controller did not appear in {self.root} after its v1 mount went"
            return False
        return True

    def enable(self, controller):
        write(f"{self.root}/cgroup.subtree_control", f"+{controller}")

    def give_back(self):
        for controller, point in self.moved.items():
            try:
                write(f"{self.root}/cgroup.subtree_control", f"-{controller}")
            except OSError:
                pass
            # The v2 side lets go once its last css is freed: retry the mount a while.
            wk.wait_for(20, lambda: subprocess.run(["mount", "-t", "cgroup", "-o", controller, "cgroup", point],
                                                   stderr=subprocess.DEVNULL).returncode == 0, 0.2)


def remove_cgroup(path):
    """Kills what is left in `path` and its children, then removes them, deepest first."""
    if not os.path.isdir(path):
        return
    for name in os.listdir(path):
        if os.path.isdir(f"{path}/{name}"):
            remove_cgroup(f"{path}/{name}")
    try:
        write(f"{path}/cgroup.kill", "1")
    except OSError:
        pass

    def removed():
        try:
            os.rmdir(path)
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY while the killed processes exit
            return False
    if not wk.wait_for(10, removed, 0.05):
        print(f"limits: unable to remove {path}: processes still in it")


def config(limits):
    lines = ["[daemon]", "max_jobs = 4", 'shutdown_grace = "5s"', "",
             # Runs every second throughout: the daemon keeps starting jobs beside the bomb.
             "[[task]]", 'name = "heartbeat"', 'every = "1s"', "run_on_start = true", 'command = ["/bin/true"]', ""]
    if "pids" in limits:
        # Each bomb doubles itself in the background; the task's own process is `sleep`, so
        # the job ends by expiry however the forks fare.
        lines += ["[[task]]", 'name = "fork-bomb"', 'every = "1h"', "run_on_start = true", "shell = true",
                  f"tasks_max = {TASKS_MAX}", f'budget = "{BUDGET:.0f}s"', f'kill_grace = "{KILL_GRACE:.0f}s"',
                  "command = '''bomb() { bomb | bomb & }; bomb; exec sleep 60'''", ""]
    if "memory" in limits:
        lines += ["[[task]]", 'name = "over-memory"', 'every = "1h"', "run_on_start = true",
                  f'memory_max = "{MEMORY_MAX_MIB}M"', 'budget = "30s"',
                  f"command = ['/usr/bin/python3', '-c', 'b = bytearray({ALLOCATE_MIB} << 20); print(len(b))']", ""]
    return "\n".join(lines)


class JobCgroupSampler(threading.Thread):
    """Samples the run-* cgroups under the delegated one every 5 ms: the most processes any
    held, and the forks its pids.max refused (pids.events "max")."""

    def __init__(self, delegated):
        super().__init__(daemon=True)
        self.delegated, self.stopping = delegated, threading.Event()
        self.peak, self.refused, self.seen = 0, 0, set()

    def run(self):
        while not self.stopping.is_set():
            try:
                names = [n for n in os.listdir(self.delegated) if n.startswith("run-")]
            except OSError:
                names = []
            for name in names:
                try:
                    base = f"{self.delegated}/{name}"
                    current = int(read(f"{base}/pids.current"))
                    peak = int(read(f"{base}/pids.peak")) if os.path.exists(f"{base}/pids.peak") else current
                    events = dict(line.split() for line in read(f"{base}/pids.events").splitlines())
                    self.peak = max(self.peak, current, peak)
                    self.refused = max(self.refused, int(events.get("max", 0)))
                    self.seen.add(name)
                except (OSError, ValueError):
                    pass
            time.sleep(0.005)


def main():
    args = parse()
    if os.geteuid() != 0:
        return report(args, [], [], {"skipped": "needs root"})
    try:
        controllers = Controllers()
    except LookupError as error:
        return report(args, [], [], {"skipped": str(error)})
    root = wk.scratch("wk-limits-")
    delegated = f"{controllers.root}/wk-limits-{os.getpid()}"
    rows, failures, totals = [], [], {}
    try:
        limits = [c for c in ("pids", "memory") if controllers.obtain(c)]
        for controller in limits:
            controllers.enable(controller)
        os.mkdir(delegated)
        os.setxattr(delegated, "trusted.delegate", b"1")
        # A net under the test: should the daemon not contain the bomb, the kernel still
        # holds everything started below this cgroup (the daemon's threads count too).
        if "pids" in limits:
            write(f"{delegated}/pids.max", str(SAFETY_PIDS_MAX))
        conf = f"{root}/watchkeeper.toml"
        write(conf, config(limits))
        # The daemon alone goes into the delegated cgroup (it then moves itself into its
        # `daemon` leaf); this script must not, or the cgroup could not enable controllers.
        enter = 'echo $$ > "$WK_CGROUP/cgroup.procs" && exec "$0" "$@"'
        daemon = wk.Daemon(args.binary, root, conf, wrapper=["/usr/bin/env", f"WK_CGROUP={delegated}", "/bin/sh", "-c", enter])
        sampler = JobCgroupSampler(delegated)
        sampler.start()
        began = time.monotonic()
        if not daemon.start(ready_within=20):
            raise SystemExit(f"limits: the daemon never became ready: {daemon.stderr_tail()}")
        log = f"{root}/stderr.log"
        wanted = [{"pids": "fork-bomb", "memory": "over-memory"}[c] for c in limits]
        wk.wait_for(60, lambda: all(name in wk.run_records(log) for name in wanted), 0.2)
        bomb_window = time.monotonic() - began
        # The heartbeat must go on beside the bomb: two more runs after the limits' jobs ended.
        beats_before = len(wk.run_records(log).get("heartbeat", []))
        heart_ok = wk.wait_for(10, lambda: len(wk.run_records(log).get("heartbeat", [])) >= beats_before + 2, 0.2)
        leftovers = [n for n in os.listdir(delegated) if n.startswith("run-") and read(f"{delegated}/{n}/cgroup.procs").strip()]
        startup = [l.strip() for l in open(log, errors="replace") if "a cgroup per job" in l or "process groups (" in l]
        daemon.stop()
        sampler.stopping.set()
        sampler.join()
        found = wk.run_records(log)
        if not startup or "a cgroup per job" not in startup[0]:
            failures.append(f"the daemon did not use the delegated cgroup: {startup[:1]}")
        if "pids" in limits:
            outcome, duration, _ = (found.get("fork-bomb") or [("none", 0, "")])[-1]
            limit_ms = (BUDGET + KILL_GRACE + SLACK) * 1000
            rows.append({"scenario": "fork-bomb", "tasks_max": TASKS_MAX, "outcome": outcome, "duration_ms": duration,
                         "peak_processes": sampler.peak, "forks_refused": sampler.refused})
            if outcome != "expired":
                failures.append(f"fork-bomb: outcome {outcome}, expected expired")
            if duration > limit_ms:
                failures.append(f"fork-bomb ended after {duration} ms, over budget + kill_grace ({limit_ms:.0f} ms with slack)")
            if not 0 < sampler.peak <= TASKS_MAX:
                failures.append(f"fork-bomb: its cgroup held {sampler.peak} processes at the most, tasks_max {TASKS_MAX}")
            if sampler.refused == 0:
                failures.append("fork-bomb: pids.max refused no fork: the bomb never reached its limit")
        if "memory" in limits:
            outcome, duration, line = (found.get("over-memory") or [("none", 0, "")])[-1]
            rows.append({"scenario": "over-memory", "memory_max_mib": MEMORY_MAX_MIB, "outcome": outcome,
                         "duration_ms": duration, "recorded_oom": "OOM killer" in line})
            if outcome != "failed" or "OOM killer" not in line:
                failures.append(f"over-memory: expected a failure recorded as the OOM killer's, got {outcome}: {line}")
        if not heart_ok:
            failures.append("the heartbeat task stopped running beside the limited jobs")
        if leftovers:
            failures.append(f"job cgroups still holding processes after the jobs ended: {leftovers}")
        totals = {"limits": limits, "heartbeat_runs": len(found.get("heartbeat", [])), "seconds": round(bomb_window, 1),
                  "moved_from_v1": sorted(controllers.moved)}
    finally:
        remove_cgroup(delegated)
        controllers.give_back()
    skipped = dict(controllers.unavailable)
    return report(args, rows, failures, {"totals": totals, "skipped_limits": skipped}, root)


def report(args, rows, failures, extra, root=None):
    for row in rows:
        print("  ".join(f"{k}={v}" for k, v in row.items()))
    for controller, why in extra.get("skipped_limits", {}).items():
        print(f"limits: {controller} not tested: {why}")
    if extra.get("skipped"):
        print(f"limits: skipped ({extra['skipped']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(extra, rows=rows, failures=failures), f, indent=1)
    for failure in failures:
        print(f"limits: FAIL {failure}")
    if root and not failures:
        shutil.rmtree(root, ignore_errors=True)
    print("limits: ok" if not failures else f"limits: failed (kept {root})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
