#!/usr/bin/env python3
"""What watches etcd from outside while the fleet nemesis (fleet_nemesis.py) breaks things:
EtcdProbe, which records every interval in which no write got through, for the history's
observed lines. `python3 fleet_probe.py --probe-check` shows it against a cluster of its own.
"""
import base64, http.client, json, os, shutil, signal, sys, tempfile, threading, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_world as world


def stall_threshold(lease_ttl):
    """The shortest stall that can cost a daemon its lease, and with it the fires it holds (a
    lease lost, each task's latest held fire alone is caught up): 2.17 s for a 4 s TTL.

    A daemon renews every TTL/3, so the renewal answered last before etcd stopped answering
    went out at most TTL/3 before; failed renewals are tried again every 0.5 s (FleetLease),
    so one gets through within 0.5 s of etcd answering again, and the lease lives if that is
    before TTL after the last one answered: TTL - TTL/3 - 0.5 s. A shorter stall may close the
    start gate (TTL - max(1 s, TTL/3) after the last renewal) and hold a fire or fence a run,
    but the fire is kept while the lease lives and must still run, so it stays judged; and a
    leader election (0.5-1.3 s with the nemesis's 500 ms election timeout, etcd_one_member's)
    is no stall. The probe measures from one acknowledgement to the next, so what it records
    contains the stall: one is never missed, and is recorded at most a probe period longer."""
    return lease_ttl - lease_ttl / 3 - 0.5


class EtcdProbe(threading.Thread):
    """Watches etcd from outside, all run long: a write to `key` through the v3 HTTP gateway
    every `period`, each with a deadline of `deadline`, to one member at a time, and at once
    to the next after a write without an answer (as the daemons fail over: a member killed
    or stopped costs a deadline, a leader killed an election). Every interval in which
    no write was acknowledged for longer than `threshold` goes to `on_stall(t, until)` in
    CLOCK_REALTIME seconds, `t` the last acknowledgement before it and `until` the first
    after (None: none came before the probe stopped). What it sees is what a client on this
    machine sees: it cannot tell etcd stalled from the machine stalled around it, and need
    not, since either denies the daemons their lease alike."""

    def __init__(self, cluster, key, threshold, on_stall, period=0.25, deadline=1.0):
        super().__init__(daemon=True, name="etcd-probe")
        self.cluster, self.key, self.threshold, self.on_stall = cluster, key, threshold, on_stall
        self.period, self.deadline = period, deadline
        self.stopping = threading.Event()
        self.writes = self.acknowledged = 0
        self.longest_gap = 0.0
        self.member = 0

    def put(self, m, value):
        """One write through member `m`; True once etcd acknowledged it within the deadline."""
        body = json.dumps({"key": base64.b64encode(self.key.encode()).decode(),
                           "value": base64.b64encode(value.encode()).decode()})
        connection = http.client.HTTPConnection("127.0.0.1", self.cluster.client_ports[m], timeout=self.deadline)
        try:
            connection.request("POST", "/v3/kv/put", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = response.read()
            return response.status == 200 and b'"header"' in answer
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def run(self):
        last, unanswered = (time.monotonic(), time.time()), 0
        while not self.stopping.is_set():
            began = time.monotonic()
            self.writes += 1
            if self.put(self.member, f"{self.writes} {time.time():.3f}"):
                unanswered = 0
                now = (time.monotonic(), time.time())
                gap = now[0] - last[0]
                self.acknowledged += 1
                self.longest_gap = max(self.longest_gap, gap)
                if gap > self.threshold:
                    self.on_stall(last[1], now[1])
                last = now
            else:
                self.member = (self.member + 1) % self.cluster.members
                unanswered += 1
                if unanswered % self.cluster.members:
                    continue  # the next member at once; after a round of refusals, a period's rest
            self.stopping.wait(max(0.0, began + self.period - time.monotonic()))
        if time.monotonic() - last[0] > self.threshold:
            self.on_stall(last[1], None)

    def stop(self):
        self.stopping.set()
        if self.ident is not None:  # started
            self.join(self.deadline + 5)


def probe_check():
    """`python3 fleet_probe.py --probe-check` (root not needed; etcd is): the probe, with the
    nemesis's threshold, against a cluster of its own whose members it stops by their PIDs.
    Each member in turn killed for 3 s (as the nemesis's etcd_one_member; one of them the
    leader: an election) and then one stopped (SIGSTOP: its writes wait out their deadline)
    must record no stall: the probe moves to the next member, as the daemons do. Two of three
    stopped for 4 s must record one stall covering the stop (or stalls end to end: the
    election after it): no quorum, no write. Exit 1 if any is not so."""
    cleanup = world.Cleanup()
    scratch = tempfile.mkdtemp(prefix="wk-probe-check-")
    cleanup.add(f"remove {scratch}", lambda: shutil.rmtree(scratch, ignore_errors=True))
    etcd = world.EtcdCluster(scratch, cleanup)
    stalls = []
    probe = EtcdProbe(etcd, f"/wk-probe-check/{os.getpid()}", stall_threshold(4.0), lambda at, until: stalls.append((at, until)))
    cleanup.add("stop the probe", probe.stop)
    probe.start()
    time.sleep(2)
    failures = []
    for m in range(etcd.members):
        etcd.kill(m)
        time.sleep(3)
        etcd.restart(m)
        if not etcd.wait_healthy(30):
            raise world.HarnessError(f"etcd not healthy 30 s after restarting member{m}: {etcd.tail(m)}")
        time.sleep(1)
    os.kill(etcd.processes[0].pid, signal.SIGSTOP)
    time.sleep(4)
    os.kill(etcd.processes[0].pid, signal.SIGCONT)
    time.sleep(1)
    one_gap, one_stalls = probe.longest_gap, list(stalls)
    if stalls:
        failures.append(f"each member killed, then member0 stopped: stalls {stalls}, none expected")
    stalls.clear()
    time.sleep(2)
    pids = [etcd.processes[m].pid for m in (1, 2)]
    stopped_at = time.time()
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    time.sleep(4)
    for pid in pids:
        os.kill(pid, signal.SIGCONT)
    continued_at = time.time()
    time.sleep(3)
    probe.stop()
    # Back, the two may call an election that stalls etcd again (3.4 has no pre-vote by
    # default): a stall from the acknowledgement that ended the first is the same outage.
    merged = []
    for at, until in sorted(stalls, key=lambda stall: stall[0]):
        if merged and merged[-1][1] is not None and at <= merged[-1][1]:
            merged[-1] = (merged[-1][0], until)
        else:
            merged.append((at, until))
    covering = [(at, until) for at, until in merged if at <= stopped_at and until is not None and until >= continued_at]
    if len(merged) != 1 or not covering:
        failures.append(f"members 1 and 2 stopped {stopped_at:.2f} to {continued_at:.2f}: stalls {stalls}, one covering the stop expected")
    print(f"probe check: {probe.acknowledged} of {probe.writes} writes acknowledged; each member killed 3 s, then one stopped 4 s: "
          f"{len(one_stalls) or 'no'} stall(s), the longest gap {one_gap:.2f} s; members 1 and 2 "
          f"stopped {continued_at - stopped_at:.1f} s: {len(stalls)} stall(s), " + ", ".join(f"together {until - at:.2f} s, from {stopped_at - at:.2f} s "
                                                                   f"before the stop to {until - continued_at:.2f} s after"
                                                                   for at, until in covering))
    for failure in failures:
        print(f"  FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--probe-check"]:
        sys.exit("usage: fleet_probe.py --probe-check")
    sys.exit(probe_check())
