#!/usr/bin/env python3
"""Issue 35's nemesis against real processes: three etcd members and three watchkeeper
daemons (one of them in a network namespace of its own behind a veth pair) run fleet tasks
every 2 s and a shared inbox that takes files all the time, while the nemesis breaks
something every few seconds; the jobs log their own starts and ends, and
watchkeeper-fleet-check reads that history.

The fleet (fleet_world.py builds it): hosts a, b and c (c in the namespace), `lease_ttl =
"4s"`, `max_jobs = 3`; fleet = "one" tasks every 2 s: `report` (persistent, 0.9 s), `rollup`
(persistent, 0.3 s), `sweep` (persistent, 2.2 s: a run is going on most of the time, for
cuts and quorum losses to fence), all three `overlap = "allow"` so that every fire must run,
and `ping` (0.2 s, `overlap = "skip"`); a fleet = "one" watch rule on a shared directory into
which a producer writes a file every 0.3-0.9 s and bursts of 15-30, half of them under a
temporary name renamed in, some names written again (a new version) once handled: about
3 files a second, on average, where the three hosts can run about 10. Every
job is fleet_job.sh: the items are task:<task>@<scheduled instant> and
file:inbox:<name>#<version>.

The faults, one at a time, each chosen by a generator seeded with --seed (printed; the same
seed replays the same schedule, though real timing differs), half of them 1.5 s after a
burst of 30-60 files:
  kill9            the daemon and its jobs SIGKILLed (its cgroup's cgroup.kill), restarted 1-6 s later
  sigstop          the daemon (not its jobs) stopped past its lease (TTL + 1-4 s), then SIGCONT
  partition        host c's link down for 1-12 s, then up (0.1-0.3 s after c started a sweep)
  etcd_one_member  one etcd member SIGKILLed for 2-8 s, then restarted
  etcd_two_members two of three (quorum lost) for 2-8 s, then restarted (0.1-0.3 s after a fire)
  sigterm_restart  a clean stop (SIGTERM) and a start
  same_name        a daemon restarted with another's name for 6-12 s, then with its own
Each fault is a line of the history (kind, host, t, until; jobs_killed for kill9).

etcd can also stall without a fault (a loaded machine: a slow election, a starved member):
the daemons then cannot renew their leases either and hold their fires, as in a quorum loss.
So a probe (fleet_probe.EtcdProbe) writes a key through etcd's HTTP gateway every 0.25 s, all
run long, with a 1 s deadline, to the members the daemons use (the next at once after a write
left unanswered), and every interval longer than 2.17 s in which no write was acknowledged
(the shortest stall that can cost a daemon its lease: fleet_probe.stall_threshold) is an
observed line, apart from the faults:
{"type":"observed","kind":"etcd_stall","t":<last ack before>,"until":<first ack after>}.

After the faults, the fleet heals and quiesces (the producer stops, every file is handled,
every run ended), the daemons stop, and the expected items are written: every version of
every file written, and every fire of the persistent tasks from 4 s after start to 6 s
after the last fault, each with its instant. Then `watchkeeper-fleet-check --silence-window S
--held-fire-slack 4 --json history.jsonl`: fires in a quorum loss, injected or observed (from
0.5 s before it to 4 s after etcd answered again), are held by design and only the latest
caught up, so the checker excuses them, counting each cause apart; a run whose observed
stalls cover over 25 % of it (outside injected losses) is failed, not judged: too loaded.

usage: fleet_nemesis.py BINARY [--seconds 600] [--seed N] [--json FILE] [--keep]
The scratch directory (history.jsonl, the daemons' and etcd members' logs) is kept when the
run failed or found anomalies, and with --keep; it is printed at the end.
Root only (cgroups, a network namespace); skipped, and said so, without root or etcd.
"""
import argparse, json, os, random, shutil, subprocess, sys, tempfile, threading, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_costs
import fleet_probe
import fleet_world as world
from wk import wait_for as wk_wait

HERE = os.path.dirname(os.path.abspath(__file__))
LEASE_TTL = 4.0
INTERVAL = 2.0
# A fire from HELD_LEAD before an etcd outage (its claim on its way) to HELD_SLACK after etcd
# answered again (new leases, then each task's latest held fire claimed) may be held by design
# (docs/fleet.md); the checker applies the same window (EtcdOutages.leadBefore, --held-fire-slack).
HELD_LEAD, HELD_SLACK = 0.5, 2 * INTERVAL
# What the probe calls a stall: one that can cost a daemon its lease (fleet_probe says why).
STALL_THRESHOLD = fleet_probe.stall_threshold(LEASE_TTL)
# name: (persistent, seconds). `sweep` is running most of the time, for cuts and quorum losses
# to fence (they come just after a fire, below); at 2.2 s it still ends before a stopped
# daemon's lease can expire, 2.67 s after the stop at the soonest: a daemon under SIGSTOP
# cannot stop its jobs (docs/fleet.md), so a longer job would overlap a takeover by design.
TASKS = {"report": (True, 0.9), "rollup": (True, 0.3), "sweep": (True, 2.2), "ping": (False, 0.2)}
FAULTS = ["kill9", "sigstop", "partition", "etcd_one_member", "etcd_two_members", "sigterm_restart", "same_name"]


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("binary")
    p.add_argument("--seconds", type=float, default=600, help="how long faults are injected")
    p.add_argument("--seed", type=int, help="replays the schedule of a run (default: random, printed)")
    p.add_argument("--silence-window", type=float, default=1.0,
                   help="watchkeeper-fleet-check's: how long after an ok end a silenced host excuses a run again")
    p.add_argument("--checker", help="default: watchkeeper-fleet-check beside BINARY")
    p.add_argument("--json")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory (history, logs)")
    return p.parse_args()


class History:
    """The one log every job and the nemesis append to: one os.write per line, O_APPEND."""

    def __init__(self, path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def write(self, **fields):
        os.write(self.fd, (json.dumps(fields, separators=(",", ":")) + "\n").encode())

    def fault(self, kind, host, at, until, jobs_killed=False):
        self.write(type="fault", kind=kind, **({"host": host} if host else {}), t=at, until=until,
                   **({"jobs_killed": True} if jobs_killed else {}))

    def observed(self, kind, at, until):
        """What the nemesis saw and did not cause: evidence, never a fault."""
        self.write(type="observed", kind=kind, t=at, until=until)

    def events(self):
        events = []
        with open(self.path) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass  # a line being written; the checker reads the file whole at the end
        return events


class Producer(threading.Thread):
    """Writes the shared inbox's files, each with its version and its job's length in it,
    and an expect line for every version; its own generator, seeded from the run's seed."""

    def __init__(self, inbox, history, seed):
        super().__init__(daemon=True)
        self.inbox, self.history, self.rng = inbox, history, random.Random(seed)
        self.stopping, self.lock = threading.Event(), threading.Lock()
        self.bursts, self.versions, self.written_at, self.count = [], {}, {}, 0
        self.error = None

    def burst(self, size):
        with self.lock:
            self.bursts.append(size)

    def run(self):
        try:
            next_burst = time.monotonic() + self.rng.uniform(10, 20)
            while not self.stopping.wait(self.rng.uniform(0.3, 0.9)):
                with self.lock:
                    asked, self.bursts = self.bursts, []
                if time.monotonic() > next_burst:
                    next_burst = time.monotonic() + self.rng.uniform(10, 20)
                    asked.append(self.rng.randint(15, 30))
                for _ in range(sum(asked)):
                    self.write_one()
                self.write_one()
        except Exception as error:  # reported by the main thread
            self.error = error

    def write_one(self):
        name = None
        if self.rng.random() < 0.15:
            # A name written again once its last version left the inbox, and not too soon after
            # (a run still going on the old version would read the new one).
            old = [n for n, at in self.written_at.items() if time.monotonic() - at > 8 and not os.path.exists(f"{self.inbox}/{n}")]
            name = self.rng.choice(sorted(old)) if old else None
        if name is None:
            name = f"f{self.count:05d}.dat"
            self.count += 1
        version = self.versions.get(name, 0) + 1
        content = f"{name} {version} {self.rng.uniform(0.2, 1.0):.2f}\n".encode()
        self.history.write(type="expect", item=f"file:inbox:{name}#{version}")
        if self.rng.random() < 0.5:
            temporary = f"{self.inbox}/.{name}.part"
            with open(temporary, "wb") as f:
                f.write(content)
            os.rename(temporary, f"{self.inbox}/{name}")
        else:
            with open(f"{self.inbox}/{name}", "wb") as f:
                f.write(content)
        self.versions[name], self.written_at[name] = version, time.monotonic()


def configuration(paths, endpoints, prefix, slot):
    """A host's watchkeeper.toml, for cluster name `name`."""
    q = json.dumps

    def text(name):
        lines = ["[daemon]", "max_jobs = 3", 'shutdown_grace = "10s"', "",
                 "[cluster]", f"etcd = [{', '.join(q(e) for e in endpoints)}]", f"name = {q(name)}",
                 f"prefix = {q(prefix)}", f'lease_ttl = "{LEASE_TTL:g}s"']
        for task, (persistent, seconds) in TASKS.items():
            lines += ["", "[[task]]", f"name = {q(task)}", f'every = "{INTERVAL:g}s"', 'fleet = "one"', 'priority = "high"',
                      'budget = "20s"', 'kill_grace = "2s"']
            # Persistent fires side by side (a takeover never makes the next fire a skip), so
            # every fire must run; `ping` keeps overlap = "skip", fleet-wide, unexpected.
            lines += ["persistent = true", 'catch_up_window = "30s"', 'overlap = "allow"'] if persistent else []
            lines.append(f"command = {q(['/bin/sh', paths['job'], 'task', slot, paths['history'], str(seconds)])}")
        lines += ["", "[[watch]]", 'name = "inbox"', f"path = {q(paths['inbox'])}", 'events = ["closed_write", "moved_in"]',
                  'include = ["*.dat"]', 'fleet = "one"', 'budget = "20s"', 'kill_grace = "2s"',
                  f"command = {q(['/bin/sh', paths['job'], 'file', slot, paths['history'], paths['done']])}"]
        return "\n".join(lines) + "\n"
    return text


class Nemesis:
    def __init__(self, args, scratch, cleanup):
        self.args, self.rng = args, random.Random(args.seed)
        self.paths = {"job": f"{scratch}/fleet_job.sh", "history": f"{scratch}/history.jsonl",
                      "inbox": f"{scratch}/inbox", "done": f"{scratch}/done"}
        os.makedirs(self.paths["inbox"])
        os.makedirs(self.paths["done"])
        shutil.copy(f"{HERE}/fleet_job.sh", self.paths["job"])
        self.history = History(self.paths["history"])
        self.notes, self.quorum_losses, self.injected, self.stalls = [], [], [], []
        try:
            self.partition = world.Partition(cleanup)
        except world.HarnessError as error:
            self.partition = None
            self.notes.append(f"no partition faults: {error}")
        extra = [self.partition.host_address] if self.partition else []
        os.makedirs(f"{scratch}/etcd")
        self.etcd = world.EtcdCluster(f"{scratch}/etcd", cleanup, extra)
        self.probe = fleet_probe.EtcdProbe(self.etcd, f"/wk-nem-probe/{os.getpid()}-{random.getrandbits(32):08x}",
                                           STALL_THRESHOLD, self.stalled)
        cleanup.add("stop the etcd probe", self.probe.stop)
        try:
            cgroups = world.Cgroups(cleanup)
        except (world.HarnessError, OSError) as error:
            cgroups = None
            self.notes.append(f"no cgroup per daemon ({error}): kill9 kills the daemon's children it finds in /proc")
        prefix = f"/wk-nem/{os.getpid()}-{random.getrandbits(32):08x}"
        self.hosts = {}
        for slot in "abc":
            namespaced = slot == "c" and self.partition is not None
            endpoints = self.etcd.endpoints(self.partition.host_address if namespaced else "127.0.0.1")
            self.hosts[slot] = world.Host(slot, f"{scratch}/host-{slot}", args.binary,
                                          configuration(self.paths, endpoints, prefix, slot), cgroups, cleanup,
                                          self.partition.launcher if namespaced else ())
        self.producer = Producer(self.paths["inbox"], self.history, self.rng.getrandbits(32))

    def stalled(self, at, until):
        """The probe's: no write acknowledged from `at` to `until` (None: to the end)."""
        self.stalls.append((at, until))
        self.history.observed("etcd_stall", at, until)

    # The faults. Each draws its parameters first, so a seed always gives one schedule.

    def kill9(self, host, down):
        at = host.kill9()
        time.sleep(down)
        self.history.fault("kill9", host.slot, at, host.start(), jobs_killed=True)

    def sigstop(self, host, stopped):
        at = time.time()
        host.freeze()
        time.sleep(stopped)
        host.thaw()
        self.history.fault("sigstop", host.slot, at, time.time())

    def partition_cut(self, host, cut):
        at = time.time()
        self.partition.cut()
        time.sleep(cut)
        self.partition.heal()
        self.history.fault("partition", host.slot, at, time.time())

    def etcd_members(self, kind, members, down):
        at = time.time()
        for m in members:
            self.etcd.kill(m)
        time.sleep(down)
        for m in members:
            self.etcd.restart(m)
        if not self.etcd.wait_healthy(60):
            raise world.HarnessError(f"etcd not healthy 60 s after restarting {members}: {self.etcd.tail(members[0])}")
        until = time.time()
        if len(members) > 1:
            self.quorum_losses.append((at, until))
        self.history.fault(kind, None, at, until)

    def sigterm_restart(self, host):
        at = time.time()
        host.stop()
        self.history.fault("sigterm_restart", host.slot, at, host.start())

    def same_name(self, host, other, held):
        at = time.time()
        host.stop()
        host.start(name=other.name)
        time.sleep(held)
        host.stop()
        self.history.fault("same_name", host.slot, at, host.start())

    def step(self):
        kinds = [k for k in FAULTS if k != "partition" or self.partition]
        kind, slot = self.rng.choice(kinds), self.rng.choice("abc")
        other = self.rng.choice([s for s in "abc" if s != slot])
        seconds, members = self.rng.uniform(0, 1), self.rng.sample(range(3), 2)
        burst_first, burst, gap = self.rng.random() < 0.5, self.rng.randint(30, 60), self.rng.uniform(1, 4)
        after_fire = self.rng.uniform(0.1, 0.3)
        host = self.hosts["c" if kind == "partition" else slot]
        if burst_first:
            # A backlog claimed just before the fault, as in the partition (60 files,
            # the link down 2 s later): what a host cut off or stopped holds.
            self.producer.burst(burst)
            time.sleep(1.5)
        # Just after a fire, while its runs have most of their time to go: what a fence is for;
        # a cut once host c itself has a run of `sweep` going (c, behind its veth pair, wins
        # fewer claims), or after 20 s without.
        if kind == "partition":
            wk_wait(20, lambda: self.running_since(host.slot, "task:sweep@") is not None, step=0.05)
            time.sleep(after_fire)
        elif kind == "etcd_two_members":
            time.sleep((after_fire - time.time()) % INTERVAL)
        print(f"  {time.strftime('%H:%M:%S')} {kind} {host.slot if kind.startswith(('kill', 'sig', 'part', 'same')) else members}", flush=True)
        if kind == "kill9":
            self.kill9(host, 1 + 5 * seconds)
        elif kind == "sigstop":
            self.sigstop(host, LEASE_TTL + 1 + 3 * seconds)
        elif kind == "partition":
            self.partition_cut(host, 1 + 11 * seconds)
        elif kind == "etcd_one_member":
            self.etcd_members(kind, members[:1], 2 + 6 * seconds)
        elif kind == "etcd_two_members":
            self.etcd_members(kind, members, 2 + 6 * seconds)
        elif kind == "sigterm_restart":
            self.sigterm_restart(host)
        else:
            self.same_name(host, self.hosts[other], 6 + 6 * seconds)
        self.injected.append(kind)
        time.sleep(gap)

    def running_since(self, slot, prefix):
        """When the latest run of an item starting with `prefix` on host `slot` started, if it
        has not ended and started less than a second ago."""
        runs = fleet_costs.runs_of(self.history.events()).values()
        starts = [r["start"] for r in runs if r["host"] == slot and r["item"].startswith(prefix)
                  and r["end"] is None and r["start"] > time.time() - 1]
        return max(starts, default=None)

    def run(self):
        print(f"fleet nemesis: seed {self.args.seed}, {self.args.seconds:g} s of faults; etcd {self.etcd.endpoints()}"
              + (f"; host c in {self.partition.name} ({self.partition.ns_address}, etcd at {self.partition.host_address})" if self.partition else ""),
              flush=True)
        for note in self.notes:
            print(f"fleet nemesis: {note}", flush=True)
        self.probe.start()
        for host in self.hosts.values():
            host.start()
        began = time.time()
        self.producer.start()
        time.sleep(5)
        while time.time() - began < self.args.seconds + 5:
            self.step()
            if self.producer.error:
                raise world.HarnessError(f"the producer failed: {self.producer.error}")
        faults_ended = time.time()
        self.producer.stopping.set()
        self.producer.join(10)
        quiet = self.quiesce(faults_ended + 6)
        stopped = time.time()
        for host in self.hosts.values():
            host.daemon.signal(15)
        for host in self.hosts.values():
            host.stop()
        self.probe.stop()
        self.expect_fires(began + 4, faults_ended + 6)
        return {"began": began, "faults_ended": faults_ended, "quiesced_s": round(quiet, 1), "stopped": stopped}

    @staticmethod
    def fire_instants(start, end):
        first = int(start // INTERVAL + 1) * INTERVAL
        return [first + INTERVAL * k for k in range(int((end - first) // INTERVAL) + 1)] if first <= end else []

    def held(self, instant):
        """Whether a quorum loss, injected or observed, may have held the fire due at `instant`
        (the checker's rule, which judges; this only tells quiesce which fires to wait for)."""
        outages = self.quorum_losses + [(at, until if until is not None else float("inf")) for at, until in self.stalls]
        return any(at - HELD_LEAD <= instant <= until + HELD_SLACK for at, until in outages)

    def expect_fires(self, start, end):
        """Every fire of every persistent task, with its instant: the checker excuses the ones
        an etcd outage held, and says how many."""
        for task, (persistent, _) in TASKS.items():
            for instant in self.fire_instants(start, end) if persistent else []:
                self.history.write(type="expect", item=f"task:{task}@{fleet_costs.iso(instant)}", fire=instant)

    def quiesce(self, fires_until):
        """Waits (at most 60 s) until the inbox is empty, every run but the newest has ended
        and every persistent fire up to `fires_until` ran ok; returns how long it took."""
        began = time.time()

        def settled():
            if time.time() < fires_until + 2 or any(n.endswith(".dat") for n in os.listdir(self.paths["inbox"])):
                return False
            wanted = {f"task:{t}@{fleet_costs.iso(i)}" for t, (p, _) in TASKS.items() if p
                      for i in self.fire_instants(began - 60, fires_until) if not self.held(i)}
            # Fires go on (a sweep is always running): every run older than 5 s has ended (a
            # kill9 ends its host's runs), and every wanted fire ran ok.
            runs = fleet_costs.runs_of(self.history.events()).values()
            return (all(r["end"] is not None for r in runs if r["start"] < time.time() - 5)
                    and wanted <= {r["item"] for r in runs if r["ok"]})
        world.wk.wait_for(60, settled, step=1)
        return time.time() - began


def check(args, history_path):
    checker = args.checker or os.path.join(os.path.dirname(os.path.abspath(args.binary)), "watchkeeper-fleet-check")
    result = subprocess.run([checker, "--silence-window", str(args.silence_window), "--held-fire-slack", str(HELD_SLACK),
                             "--json", history_path], capture_output=True, text=True, timeout=300)
    # 1: anomalies; 3: too loaded a run to judge (the report says why).
    if result.returncode not in (0, 1, 3):
        raise world.HarnessError(f"{checker} exited {result.returncode}: {result.stderr.strip()}")
    return json.loads(result.stdout)


def tidy(scratch, keep_logs):
    if not keep_logs:
        shutil.rmtree(scratch, ignore_errors=True)
        return
    for m in range(3):
        shutil.rmtree(f"{scratch}/etcd/member{m}.data", ignore_errors=True)
    for name in ("inbox", "done"):
        shutil.rmtree(f"{scratch}/{name}", ignore_errors=True)


def main():
    args = parse()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    checker = args.checker or os.path.join(os.path.dirname(os.path.abspath(args.binary)), "watchkeeper-fleet-check")
    missing = [p for p in (world.ETCD, world.ETCDCTL, checker, args.binary) if not os.access(p, os.X_OK)]
    skipped = "needs root" if os.geteuid() != 0 else (f"missing {', '.join(missing)}" if missing else None)
    if skipped:
        print(f"fleet nemesis: skipped: {skipped}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"skipped": skipped, "failures": []}, f)
        return 0
    cleanup = world.Cleanup()
    scratch = tempfile.mkdtemp(prefix="wk-nem-")
    result = {"seed": args.seed, "seconds": args.seconds, "silence_window": args.silence_window, "failures": []}
    # Registered first, so it runs last: the history and the logs stay when something was
    # found (the etcd data directories go: 64 MB of preallocated WAL each).
    cleanup.add(f"remove {scratch}", lambda: tidy(scratch, keep_logs=args.keep or bool(result["failures"])))
    began = time.monotonic()
    try:
        nemesis = Nemesis(args, scratch, cleanup)
        timing = nemesis.run()
        report = check(args, nemesis.paths["history"])
        result.update(fleet_costs.summary(nemesis, timing, report, lambda path: check(args, path)))
    except world.HarnessError as error:
        result["failures"].append(f"harness: {error}")
    result["duration_s"] = round(time.monotonic() - began)
    if result.get("anomaly_count"):
        result["failures"].append(f"{result['anomaly_count']} anomalies")
    if result.get("unjudged"):
        result["failures"].append(f"not judged: {result['unjudged']}")
    fleet_costs.print_result(result, scratch if args.keep or result["failures"] else None)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
