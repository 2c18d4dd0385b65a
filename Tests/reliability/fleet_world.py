"""The real parts the fleet nemesis (fleet_nemesis.py) breaks: a three-member etcd on free
loopback ports, a network namespace behind a veth pair, a cgroup of its own for every life
of every daemon, and the daemons themselves. The Python counterparts of the Swift tests'
EtcdTestCluster and NetworkPartition (Tests/WatchkeeperTestSupport).

Everything made here is registered with a `Cleanup` as it is made and undone in reverse
order at exit, on SIGINT, SIGTERM and SIGHUP too: processes by their pid (never by name),
cgroups (killed, then removed), the namespace and its veth pair, the scratch directory.
Only a SIGKILL of the nemesis itself skips that; then its etcd members and daemons still
die with it (setpriv --pdeathsig), and the namespace `wk-nem-*` and the cgroup directory
it printed at start are left to remove by hand.
"""
import atexit, errno, os, random, re, shutil, signal, socket, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wk

IP = next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip") if os.access(p, os.X_OK)), None)
NSENTER = next((p for p in ("/usr/bin/nsenter", "/bin/nsenter") if os.access(p, os.X_OK)), None)
SETPRIV = "/usr/bin/setpriv" if os.access("/usr/bin/setpriv", os.X_OK) else None
ETCD, ETCDCTL = "/usr/bin/etcd", "/usr/bin/etcdctl"


class HarnessError(Exception):
    """The nemesis could not build or drive its world (not a finding about the daemon)."""


class Cleanup:
    """Undo steps run last-in first-out at exit; fatal signals become SystemExit so that
    `finally` blocks and these steps run."""

    def __init__(self):
        self.steps = []
        atexit.register(self.run)
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(number, self._interrupted)

    @staticmethod
    def _interrupted(number, _frame):
        raise SystemExit(128 + number)

    def add(self, what, step):
        self.steps.append((what, step))

    def run(self):
        while self.steps:
            what, step = self.steps.pop()
            try:
                step()
            except Exception as error:  # one step failing must not stop the rest
                print(f"fleet nemesis: cleanup: unable to {what}: {error}", file=sys.stderr, flush=True)


def run(command, timeout=10, env=None):
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as expired:
        return subprocess.CompletedProcess(command, None, expired.stdout or "", f"timed out after {timeout} s")


def ip(*arguments):
    return run([IP] + list(arguments))


def free_loopback_ports(count):
    """`count` distinct ports the kernel gave out on 127.0.0.1, all held until all are chosen."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def answers_http(port, address="127.0.0.1"):
    try:
        with socket.create_connection((address, port), timeout=0.3) as s:
            s.settimeout(0.3)
            s.sendall(b"GET /version HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            return s.recv(5) == b"HTTP/"
    except OSError:
        return False


class EtcdCluster:
    """Three members of Debian's etcd on free loopback ports (clients also on
    `extra_addresses`, for a daemon in a namespace), data and logs under `directory`.
    Heartbeat 50 ms and election timeout 500 ms, as EtcdTestCluster: a new leader ~0.7 s
    after the old one is killed."""

    def __init__(self, directory, cleanup, extra_addresses=(), members=3):
        self.directory, self.members, self.extra = directory, members, list(extra_addresses)
        self.processes = [None] * members
        self.client_ports, self.peer_ports, self.token = [], [], ""
        cleanup.add("stop the etcd members", self.stop_all)
        self._start()

    def name(self, m):
        return f"member{m}"

    def log_path(self, m):
        return f"{self.directory}/member{m}.log"

    def endpoints(self, address="127.0.0.1"):
        return [f"http://{address}:{port}" for port in self.client_ports]

    def _arguments(self, m):
        cluster = ",".join(f"{self.name(i)}=http://127.0.0.1:{self.peer_ports[i]}" for i in range(self.members))
        clients = ",".join(f"http://{a}:{self.client_ports[m]}" for a in ["127.0.0.1"] + self.extra)
        peer = f"http://127.0.0.1:{self.peer_ports[m]}"
        return [ETCD, f"--name={self.name(m)}", f"--data-dir={self.directory}/member{m}.data",
                f"--listen-client-urls={clients}", f"--advertise-client-urls={clients}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={cluster}", "--initial-cluster-state=new", f"--initial-cluster-token={self.token}",
                "--heartbeat-interval=50", "--election-timeout=500", "--enable-grpc-gateway=true",
                "--unsafe-no-fsync", "--log-outputs=stderr"]

    def launch(self, m):
        command = self._arguments(m)
        if SETPRIV:
            command = [SETPRIV, "--pdeathsig", "KILL", "--"] + command
        with open(self.log_path(m), "ab") as log:
            self.processes[m] = subprocess.Popen(command, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                                 env={"PATH": "/usr/bin:/bin"})

    def running(self, m):
        p = self.processes[m]
        return p is not None and p.poll() is None

    def _start(self):
        """Members one at a time, each once its peer port serves (as EtcdTestCluster, which
        explains why); a port someone else took meanwhile starts over on new ports."""
        for _ in range(5):
            self.token = f"wk-nem-{os.getpid()}-{random.getrandbits(32):08x}"
            ports = free_loopback_ports(2 * self.members)
            self.client_ports, self.peer_ports = ports[:self.members], ports[self.members:]
            taken = False
            for m in range(self.members):
                shutil.rmtree(f"{self.directory}/member{m}.data", ignore_errors=True)
                self.launch(m)
                deadline = time.monotonic() + 30
                while not answers_http(self.peer_ports[m]):
                    if not self.running(m):
                        taken = "address already in use" in self.tail(m)
                        if not taken:
                            raise HarnessError(f"unable to start etcd {self.name(m)}: {self.tail(m)}")
                        break
                    if time.monotonic() > deadline:
                        raise HarnessError(f"unable to start etcd {self.name(m)} within 30 s: {self.tail(m)}")
                    time.sleep(0.01)
                if taken:
                    break
            if not taken:
                if not self.wait_healthy(30):
                    raise HarnessError(f"etcd did not become healthy within 30 s: {self.tail(0)}")
                return
            self.stop_all()
        raise HarnessError("unable to start etcd on free ports in 5 attempts")

    def tail(self, m, lines=8):
        try:
            with open(self.log_path(m), errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def kill(self, m):
        p = self.processes[m]
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(10)
        self.processes[m] = None

    def restart(self, m):
        self.kill(m)
        self.launch(m)

    def stop_all(self):
        for m in range(self.members):
            self.kill(m)

    def etcdctl(self, arguments, members=None, timeout=5):
        members = range(self.members) if members is None else members
        endpoints = ",".join(f"http://127.0.0.1:{self.client_ports[m]}" for m in members)
        return run([ETCDCTL, f"--endpoints={endpoints}"] + arguments, timeout=timeout,
                   env={"PATH": "/usr/bin:/bin", "ETCDCTL_API": "3"})

    def healthy(self):
        """Every running member answers a linearizable read (so a quorum is up)."""
        members = [m for m in range(self.members) if self.running(m)]
        return bool(members) and self.etcdctl(["endpoint", "health", "--dial-timeout=500ms", "--command-timeout=1s"],
                                              members).returncode == 0

    def wait_healthy(self, seconds):
        return wk.wait_for(seconds, self.healthy, step=0.1)


class Partition:
    """A network namespace `wk-nem-<random>` joined to this one by a veth pair on a /30 of
    10.213.0.0/16 that no address or route on this host overlaps. `cut()` takes the host
    side of the link down (nothing inside reaches etcd), `heal()` brings it up again."""

    def __init__(self, cleanup):
        if IP is None or NSENTER is None:
            raise HarnessError("a partition needs iproute2's ip and util-linux's nsenter")
        tag = f"{random.getrandbits(32):08x}"
        self.name, self.host_if, self.ns_if = f"wk-nem-{tag}", f"wnh{tag}", f"wnn{tag}"
        base = self._unused_subnet()
        self.host_address, self.ns_address = self._dotted(base + 1), self._dotted(base + 2)
        added = ip("netns", "add", self.name)
        if added.returncode != 0:
            raise HarnessError(f"unable to create a network namespace: ip netns add: {added.stderr.strip()}")
        cleanup.add(f"remove the namespace {self.name}", self.remove)
        for step in (["link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if, "netns", self.name],
                     ["address", "add", f"{self.host_address}/30", "dev", self.host_if],
                     ["link", "set", self.host_if, "up"],
                     ["-n", self.name, "address", "add", f"{self.ns_address}/30", "dev", self.ns_if],
                     ["-n", self.name, "link", "set", self.ns_if, "up"],
                     ["-n", self.name, "link", "set", "lo", "up"]):
            result = ip(*step)
            if result.returncode != 0:
                raise HarnessError(f"unable to set up {self.name}: ip {' '.join(step)}: {result.stderr.strip()}")
        holders = [l for l in ip("-o", "-4", "address", "show").stdout.splitlines()
                   if f" {self.host_address}/" in l or f" {self.ns_address}/" in l]
        if len(holders) != 1:
            raise HarnessError(f"unable to own {self.host_address}/30: also on {holders}")
        self._wait_carrier()
        self.is_cut = False

    @property
    def launcher(self):
        # nsenter into the network namespace only: `ip netns exec` would also give the daemon
        # a mount namespace with a fresh /sys, without the cgroup2 hierarchy.
        return [NSENTER, f"--net=/run/netns/{self.name}", "--"]

    def cut(self):
        result = ip("link", "set", self.host_if, "down")
        if result.returncode != 0:
            raise HarnessError(f"unable to cut {self.host_if}: {result.stderr.strip()}")
        self.is_cut = True

    def heal(self):
        result = ip("link", "set", self.host_if, "up")
        if result.returncode != 0:
            raise HarnessError(f"unable to heal {self.host_if}: {result.stderr.strip()}")
        self._wait_carrier()
        # Entries left INCOMPLETE during the cut would delay new connections by up to 1.5 s
        # (NetworkPartition.heal explains).
        ip("-n", self.name, "neighbour", "flush", "dev", self.ns_if)
        ip("neighbour", "flush", "dev", self.host_if)
        self.is_cut = False

    def remove(self):
        ip("netns", "delete", self.name)
        ip("link", "delete", self.host_if)  # gone with the namespace, unless something still holds it

    def _wait_carrier(self):
        if not wk.wait_for(5, lambda: "LOWER_UP" in ip("-n", self.name, "-o", "link", "show", self.ns_if).stdout, step=0.05):
            raise HarnessError(f"unable to bring up the link to {self.name}: no carrier after 5 s")

    @staticmethod
    def _dotted(value):
        return ".".join(str((value >> shift) & 0xff) for shift in (24, 16, 8, 0))

    @staticmethod
    def _unused_subnet():
        listed = ip("-o", "-4", "address", "show").stdout + "\n" + ip("-4", "route", "show", "table", "all").stdout
        taken = []
        for word in re.findall(r"\b(\d+\.\d+\.\d+\.\d+)(?:/(\d+))?", listed):
            octets = [int(o) for o in word[0].split(".")]
            if any(o > 255 for o in octets):
                continue
            address = (octets[0] << 24) | (octets[1] << 16) | (octets[2] << 8) | octets[3]
            length = min(32, int(word[1])) if word[1] else 32
            mask = 0 if length == 0 else (0xffffffff << (32 - length)) & 0xffffffff
            taken.append((address & mask, mask))
        for _ in range(64):
            base = (10 << 24) | (213 << 16) | (random.randrange(256) << 8) | (random.randrange(64) << 2)
            if not any(mask and ((base & mask) == network or (network & 0xfffffffc) == base) for network, mask in taken):
                return base
        raise HarnessError("unable to find a free /30 in 10.213.0.0/16")


def cgroup2_mount():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            dash = fields.index("-")
            if fields[dash + 1] == "cgroup2":
                return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
    return None


class Cgroups:
    """A directory `wk-nem-<random>` in the cgroup v2 hierarchy, and in it a cgroup for
    each life of each daemon, marked delegated (trusted.delegate, as systemd's Delegate=yes
    does) so that the daemon puts every job in a cgroup of its own below it. Killing a life
    is what systemd does when a unit's main process dies: SIGKILL to all of its cgroup."""

    def __init__(self, cleanup):
        mount = cgroup2_mount()
        if mount is None:
            raise HarnessError("no cgroup v2 hierarchy is mounted")
        self.root = f"{mount}/wk-nem-{random.getrandbits(32):08x}"
        os.mkdir(self.root)
        cleanup.add(f"remove the cgroup {self.root}", lambda: self.remove(self.root))

    def make(self, name):
        path = f"{self.root}/{name}"
        os.mkdir(path)
        os.setxattr(path, "trusted.delegate", b"1")
        return path

    @staticmethod
    def processes(path):
        found = []
        for directory, _, _ in os.walk(path):
            try:
                with open(f"{directory}/cgroup.procs") as f:
                    found += [int(p) for p in f.read().split()]
            except OSError:
                pass
        return found

    def kill(self, path):
        """SIGKILL to every process of the cgroup and those below it (cgroup.kill, Linux 5.14;
        before it, each process in turn until none is left)."""
        try:
            with open(f"{path}/cgroup.kill", "w") as f:
                f.write("1")
        except OSError:
            for _ in range(100):
                pids = self.processes(path)
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.01)
        wk.wait_for(10, lambda: not self.processes(path), step=0.02)

    def remove(self, path):
        if not os.path.isdir(path):
            return
        self.kill(path)
        for directory, children, _ in sorted(os.walk(path), key=lambda entry: -entry[0].count("/")):
            try:
                os.rmdir(directory)
            except OSError as error:
                if error.errno != errno.ENOENT:
                    raise


class Host:
    """One daemon as one host of the fleet: its state and runtime directories under `root`,
    kept across its lives as a real host's are; a configuration written before each start
    (`config(name)`: the cluster name can change); each life in a fresh delegated cgroup
    (without cgroup v2: the daemon's children found through /proc instead)."""

    def __init__(self, slot, root, binary, config, cgroups, cleanup, launcher=()):
        self.slot, self.root, self.config, self.cgroups = slot, root, config, cgroups
        self.launcher = list(launcher)
        os.makedirs(root, exist_ok=True)
        self.daemon = wk.Daemon(binary, root, f"{root}/watchkeeper.toml")
        self.cgroup, self.lives, self.name, self.frozen = None, 0, slot, False
        cleanup.add(f"stop host {slot}", self.destroy)

    @property
    def pid(self):
        return self.daemon.pid

    def alive(self):
        return self.daemon.alive()

    def start(self, name=None, ready_within=60):
        """Writes the configuration with cluster name `name` (the slot's own by default),
        starts the daemon and waits for READY=1; returns the instant it came."""
        self.name = name or self.slot
        with open(self.daemon.conf, "w") as f:
            f.write(self.config(self.name))
        self.lives += 1
        wrapper = [SETPRIV, "--pdeathsig", "KILL", "--"] if SETPRIV else []
        if self.cgroups:
            self.cgroup = self.cgroups.make(f"{self.slot}-{self.lives}")
            # The daemon alone enters the cgroup, before it runs: it finds the cgroup
            # delegated, moves itself into its `daemon` leaf and puts each job beside it.
            wrapper += ["/bin/sh", "-c", 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"', "sh", self.cgroup]
        self.daemon.wrapper = wrapper + self.launcher
        self.frozen = False
        if not self.daemon.start(ready_within=ready_within):
            raise HarnessError(f"host {self.slot}: no READY=1 within {ready_within} s; stderr ends:\n{self.daemon.stderr_tail()}")
        return time.time()

    def freeze(self):
        os.kill(self.pid, signal.SIGSTOP)
        self.frozen = True

    def thaw(self):
        os.kill(self.pid, signal.SIGCONT)
        self.frozen = False

    def kill9(self):
        """The daemon and every job it runs, SIGKILLed at once, as systemd does to a unit
        whose main process died (KillMode=control-group); returns the instant."""
        at = time.time()
        if self.cgroup:
            self.cgroups.kill(self.cgroup)
        else:
            os.kill(self.pid, signal.SIGSTOP)  # it starts nothing more while its jobs are found
            for child in wk.direct_children(self.pid):
                for target in (lambda: os.killpg(child, signal.SIGKILL), lambda: os.kill(child, signal.SIGKILL)):
                    try:
                        target()
                    except OSError:
                        pass
            os.kill(self.pid, signal.SIGKILL)
        self.daemon.process.wait(10)
        self._ended()
        return at

    def stop(self, within=60):
        """SIGTERM, as `systemctl stop` sends it; waits for the exit. Returns the exit status
        (None if it had to be killed)."""
        if self.frozen:
            self.thaw()
        status = self.daemon.stop(within=within)
        self._ended()
        return status

    def _ended(self):
        self.frozen = False
        try:
            self.daemon.notify.close()
        except OSError:
            pass
        if self.cgroup:
            self.cgroups.remove(self.cgroup)
            self.cgroup = None

    def destroy(self):
        if self.alive():
            if self.frozen:
                self.thaw()
            self.kill9()
        elif self.cgroup:
            self.cgroups.remove(self.cgroup)
