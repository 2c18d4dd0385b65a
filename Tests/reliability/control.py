#!/usr/bin/env python3
"""Control-socket clients cannot stall or starve the daemon (issue 23): three attacks on a
daemon under a watchdog (WATCHDOG_USEC, read from its notify socket as systemd would), each
while files keep arriving in a watched inbox and root asks `watchkeeper status`:

  never-read   CLIENTS connections send History and Dump calls and never read a reply, for
               SECONDS: the daemon's RSS stays within 100 MiB of idle and comes back near idle
               after they leave; `status` answers within 1 s every time; no watchdog ping late.
  half-sent    300 connections that each send part of a call (root), and as many from a uid
               the daemon refuses (the socket's mode opened to all, as an administrator might):
               root's `status` works.
  flood        four processes connecting and closing (socket, connect, close) for FLOOD_SECONDS
               (SECONDS/3), FLOOD_ROUNDS times: the daemon survives every round (issue 36: libdispatch's
               manager thread crashed on the hang-ups of such clients), its descriptors stay
               under their bound, files keep flowing, `status` works after each round.

    control.py --binary .build/debug/watchkeeper [--clients 200] [--seconds 15] [--flood-rounds 1] [--json out]
"""
import argparse, faulthandler, json, os, socket, subprocess, sys, threading, time

from wk import Daemon, scratch, status_fields, wait_for

NOBODY = 65534


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--binary", required=True)
    p.add_argument("--clients", type=int, default=200)
    p.add_argument("--seconds", type=int, default=15)
    p.add_argument("--flood-rounds", type=int, default=1, help="connect/close floods, one after the other")
    p.add_argument("--flood-seconds", type=int, help="each flood's length (SECONDS/3, at least 5, unless given)")
    p.add_argument("--seed", type=int, default=2000, help="files handled first, the rows History answers with")
    p.add_argument("--only", help="comma-separated attacks: never-read, half-sent, flood")
    p.add_argument("--json")
    return p.parse_args()


def call(method, **parameters):
    return json.dumps({"method": f"io.watchkeeper.Control.{method}", "parameters": parameters}).encode() + b"\0"


class Watchdog:
    """WATCHDOG=1 arrival times, from the notify socket's messages."""

    def __init__(self, notify):
        self.notify, self.seen, self.times = notify, 0, []

    def poll(self):
        arrivals, messages = list(self.notify.arrivals), list(self.notify.messages)
        while self.seen < min(len(arrivals), len(messages)):
            if b"WATCHDOG=1" in messages[self.seen].split(b"\n"):
                self.times.append(arrivals[self.seen])
            self.seen += 1

    def longest_gap(self, since):
        self.poll()
        times = [t for t in self.times if t >= since]
        gaps = [b - a for a, b in zip(times, times[1:])]
        # The time since the last ping counts too: a daemon that stopped pinging altogether.
        if times:
            gaps.append(time.monotonic() - times[-1])
        return max(gaps) if gaps else float("inf")


def status_time(binary, conf, env):
    began = time.monotonic()
    r = subprocess.run([binary, "status", "--config", conf], env=env, capture_output=True, timeout=60)
    return time.monotonic() - began, r.returncode, r.stderr.decode(errors="replace").strip()


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Inbox:
    """A file every 0.2 s into the watched inbox; each job appends the file's name to a log.
    `flowing(deadline)`: a file written now is handled within the deadline."""

    def __init__(self, root):
        self.root, self.n = root, 0

    def handled(self):
        try:
            with open(f"{self.root}/handled.log") as f:
                return set(f.read().split())
        except OSError:
            return set()

    def flowing(self, seconds):
        self.n += 1
        name = f"probe-{self.n}"
        with open(f"{self.root}/inbox/{name}", "w") as f:
            f.write(name)
        return wait_for(seconds, lambda: name in self.handled())


def open_client(path, uid=None):
    """A connected socket; as `uid` through a forked child that connects and passes it back."""
    if uid is None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        return s
    parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            socket.send_fds(child, [b"x"], [s.fileno()])
        except OSError as e:
            child.send(f"uid {NOBODY} could not connect: {e}".encode())
        finally:
            os._exit(0)
    message, fds, _, _ = socket.recv_fds(parent, 1024, 1)
    os.waitpid(pid, 0)
    parent.close()
    child.close()
    if not fds:
        raise OSError(message.decode(errors="replace"))
    return socket.socket(fileno=fds[0])


def never_read(args, daemon, sock, conf, env, inbox, watchdog, failures, result):
    idle = status_fields(daemon.pid)["rss_kib"]
    clients = []
    for _ in range(args.clients):
        s = open_client(sock)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        clients.append(s)
    requests = [call("History", name="inbox", limit=10000), call("Dump")]
    began = time.monotonic()
    peak, slowest, sent = idle, 0.0, 0
    stop = threading.Event()

    def send_all():
        # Every client sends as fast as the daemon reads: once it stops reading, the sends
        # fail with EAGAIN and are tried again, so calls are always waiting.
        nonlocal sent
        while not stop.is_set():
            for i, s in enumerate(clients):
                try:
                    s.send(requests[(i + sent) % 2])
                    sent += 1
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    pass  # dropped by the daemon: that is its right
            time.sleep(0.01)

    sender = threading.Thread(target=send_all, daemon=True)
    sender.start()
    while time.monotonic() - began < args.seconds:
        took, code, err = status_time(args.binary, conf, env)
        slowest = max(slowest, took)
        if code != 0:
            failures.append(f"never-read: status failed (exit {code}): {err}")
        elif took > 1.0:
            failures.append(f"never-read: status took {took:.2f} s")
        peak = max(peak, status_fields(daemon.pid)["rss_kib"])
        if not inbox.flowing(10):
            failures.append("never-read: a file written during the attack was not handled within 10 s")
        time.sleep(0.5)
    stop.set()
    sender.join()
    gap = watchdog.longest_gap(began)
    for s in clients:
        s.close()
    # Freed replies go back to the system at the control queue's next sweep (once a second).
    after = idle
    wait_for(15, lambda: status_fields(daemon.pid)["rss_kib"] - idle < 20 * 1024, step=0.5)
    after = status_fields(daemon.pid)["rss_kib"]
    control = json.loads(subprocess.run([args.binary, "dump", "--json", "--config", conf], env=env, capture_output=True).stdout or b"{}").get("control", {})
    print("never-read: the control section after: " + json.dumps({k: v for k, v in control.items() if k != "open"}))
    result.update(idle_rss_mib=round(idle / 1024, 1), peak_rss_mib=round(peak / 1024, 1), rss_after_mib=round(after / 1024, 1),
                  slowest_status_s=round(slowest, 3), calls_sent=sent, longest_watchdog_gap_s=round(gap, 2))
    print(f"never-read: {args.clients} clients for {args.seconds} s, {sent} calls sent: RSS idle {idle / 1024:.1f} MiB, "
          f"peak {peak / 1024:.1f} MiB, after {after / 1024:.1f} MiB; slowest status {slowest:.3f} s; "
          f"longest gap between watchdog pings {gap:.2f} s")
    if peak - idle > 100 * 1024:
        failures.append(f"never-read: RSS rose {(peak - idle) / 1024:.0f} MiB above idle (bound: 100 MiB)")
    if after - idle > 20 * 1024:
        failures.append(f"never-read: RSS still {(after - idle) / 1024:.0f} MiB above idle after the clients left (bound: 20 MiB)")


def half_sent(args, daemon, sock, conf, env, inbox, failures, result):
    # As an administrator might leave it: the socket open to all, so that SO_PEERCRED is
    # what refuses the stranger.
    for directory in (daemon.root, f"{daemon.root}/run"):
        os.chmod(directory, 0o755)
    os.chmod(sock, 0o666)
    partial = call("Status")[:20]
    held, refused = [], []
    for i in range(300):
        try:
            s = open_client(sock)
            s.send(partial)
            held.append(s)
        except OSError:
            pass
    problems = []
    for i in range(300):
        try:
            s = open_client(sock, uid=NOBODY)
        except OSError as e:
            problems.append(str(e))
            continue
        s.setblocking(False)
        try:
            s.send(partial)
        except OSError:
            pass  # closed already: refused at once
        refused.append(s)
    if problems:
        failures.append(f"half-sent: {len(problems)} connections from uid {NOBODY} failed: {problems[0]}")
    took, code, err = status_time(args.binary, conf, env)
    if code != 0 or took > 1.0:
        failures.append(f"half-sent: root's status with 600 half-sent calls open: exit {code} in {took:.2f} s: {err}")
    if not inbox.flowing(10):
        failures.append("half-sent: a file was not handled within 10 s")
    # The refused ones were answered and closed at once: PermissionDenied is there to read.
    answered = 0
    for s in refused:
        try:
            if b"PermissionDenied" in s.recv(4096):
                answered += 1
        except OSError:
            pass
        s.close()
    for s in held:
        s.close()
    os.chmod(sock, 0o660)
    result.update(half_sent_status_s=round(took, 3), refused_answered=answered)
    print(f"half-sent: 300 from root and 300 from uid {NOBODY}: root's status exit {code} in {took:.3f} s; "
          f"{answered} refused connections told PermissionDenied")
    if answered < 250:
        failures.append(f"half-sent: only {answered} of 300 refused connections were answered PermissionDenied at once")


def flood_worker(sock, seconds):
    """socket, connect, close, as fast as one process goes; prints how many it made."""
    end, made = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sock)
            s.close()
            made += 1
        except OSError:
            time.sleep(0.001)
    print(made)


def alive(pid):
    """The daemon is running: not gone, not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def flood(args, daemon, sock, conf, env, inbox, failures, result):
    seconds = args.flood_seconds or max(5, args.seconds // 3)
    most, connections, rounds_survived = 0, 0, 0
    for round_number in range(1, args.flood_rounds + 1):
        workers = [subprocess.Popen([sys.executable, "-c", f"import control; control.flood_worker({sock!r}, {seconds})"],
                                    cwd=os.path.dirname(os.path.abspath(__file__)), stdout=subprocess.PIPE, text=True)
                   for _ in range(4)]
        began = time.monotonic()
        flowing = True
        while time.monotonic() - began < seconds and alive(daemon.pid):
            try:
                most = max(most, fd_count(daemon.pid))
            except OSError:
                break
            flowing = inbox.flowing(10) and flowing
            time.sleep(0.2)
        made = sum(int(w.communicate()[0].strip() or 0) for w in workers)
        connections += made
        if not alive(daemon.pid):
            # Its exit status and the end of its log follow in main's failure for the exit.
            failures.append(f"flood: the daemon died in round {round_number} of {args.flood_rounds} "
                            f"({made} connections that round, {connections} in all)")
            break
        rounds_survived = round_number
        took, code, err = status_time(args.binary, conf, env)
        print(f"flood: round {round_number}: 4 processes for {seconds} s, {made} connections; status after: exit {code} in {took:.3f} s", flush=True)
        if not flowing:
            failures.append(f"flood: a file was not handled within 10 s during round {round_number}")
        if code != 0:
            failures.append(f"flood: status failed after round {round_number} (exit {code}): {err}")
            break
    dump = json.loads(subprocess.run([args.binary, "dump", "--json", "--config", conf], env=env, capture_output=True).stdout or b"{}")
    control = dump.get("control", {})
    bound = control.get("max_descriptors", 320) + 64  # the daemon's own descriptors beside them
    result.update(flood_most_fds=most, flood_accepted=control.get("accepted"), flood_rounds=rounds_survived,
                  flood_connections=connections)
    print(f"flood: {rounds_survived} of {args.flood_rounds} rounds survived, {connections} connections; the daemon held at most "
          f"{most} descriptors (bound {bound})")
    if most > bound:
        failures.append(f"flood: the daemon held {most} descriptors (bound {bound})")


def main():
    args = parse()
    # A hang of this script says where it was, instead of only timing out.
    flood_seconds = args.flood_seconds or max(5, args.seconds // 3)
    faulthandler.dump_traceback_later(args.seconds * 4 + 300 + args.flood_rounds * (flood_seconds + 30), exit=True)
    root = scratch("wk-control-")
    os.makedirs(f"{root}/inbox")
    conf = f"{root}/watchkeeper.toml"
    with open(conf, "w") as f:
        f.write(f"""[daemon]
log_level = "info"

[[task]]
name = "tick"
every = "1s"
command = ["/bin/true"]

[[watch]]
name = "inbox"
path = "{root}/inbox"
command = ["/bin/sh", "-c", "basename \\"$1\\" >> {root}/handled.log", "sh", "{{path}}"]
""")
    daemon = Daemon(args.binary, root, conf)
    daemon.env["WATCHDOG_USEC"] = "4000000"
    env = dict(daemon.env)
    env.pop("WATCHDOG_USEC")
    failures, result = [], {}
    if not daemon.start(ready_within=30):
        print("control: the daemon did not become ready:\n" + daemon.stderr_tail())
        return 1
    watchdog = Watchdog(daemon.notify)
    sock = f"{root}/run/control.sock"
    inbox = Inbox(root)
    try:
        # History to answer with: 2,000 rows are about 500 KB a reply.
        for i in range(args.seed):
            with open(f"{root}/inbox/seed-{i}", "w") as f:
                f.write(str(i))
        if not wait_for(120, lambda: len(inbox.handled()) >= args.seed):
            failures.append(f"the {args.seed} seed files were not handled within 120 s")
        time.sleep(2)
        chosen = set(args.only.split(",")) if args.only else {"never-read", "half-sent", "flood"}
        if "never-read" in chosen:
            never_read(args, daemon, sock, conf, env, inbox, watchdog, failures, result)
        if "half-sent" in chosen:
            half_sent(args, daemon, sock, conf, env, inbox, failures, result)
        if "flood" in chosen:
            flood(args, daemon, sock, conf, env, inbox, failures, result)
        gap = watchdog.longest_gap(0)
        result["longest_watchdog_gap_s"] = round(gap, 2)
        if gap > 4.0:
            failures.append(f"a watchdog ping came {gap:.2f} s after the one before (WATCHDOG_USEC is 4 s)")
    finally:
        code = daemon.stop()
        if code != 0:
            failures.append(f"the daemon exited with {code}:\n{daemon.stderr_tail()}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"result": result, "failures": failures}, f, indent=1)
    for failure in failures:
        print(f"control: FAIL {failure}")
    print("control: ok" if not failures else "control: failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
