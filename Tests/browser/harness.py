"""What the browser test runs against, all real and all on loopback: systemd-journald (in a
private mount namespace, on a tmpfs over /run, so `watchkeeper logs` has a journal and the
machine's is untouched), a one-member etcd, watchkeeper daemons logging to that journal,
Debian's cockpit-ws with a local session (one per browser session, run as the user whose
view is tested), and Debian's Chromium through chromedriver (selenium)."""

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability"))
import wk  # noqa: E402  (the reliability suite's daemon and notify socket)

COCKPIT_WS = "/usr/lib/cockpit/cockpit-ws"
JOURNALD = "/lib/systemd/systemd-journald"
ETCD = "/usr/bin/etcd"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
NAMESPACE_MARK = "WK_BROWSER_TEST_NAMESPACE"


def missing_tools():
    return [path for path in (COCKPIT_WS, JOURNALD, ETCD, CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]


def enter_namespace(argv):
    """Re-runs this script in a mount and a network namespace of its own (`unshare`): a
    tmpfs over /run holds the test's journal, and only a loopback of its own is there, so
    Chromium never sees the interfaces other tests make and break (it aborts its loads
    with ERR_NETWORK_CHANGED when one comes or goes), and no port is anyone else's.
    Returns only inside them."""
    if os.environ.get(NAMESPACE_MARK) == "1":
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "wk-browser-run", "/run"], check=True)
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
        return
    env = dict(os.environ, **{NAMESPACE_MARK: "1"})
    os.execvpe("unshare", ["unshare", "--mount", "--net", "--propagation", "private", sys.executable] + argv, env)


def free_ports(count):
    sockets = []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def wait_for(seconds, predicate, what, step=0.1):
    if not wk.wait_for(seconds, predicate, step):
        raise AssertionError(f"waited {seconds}s for {what}")


def spawn(argv, log, env=None, user=None):
    """A child that dies with the test runner (--pdeathsig), optionally as (uid, gid)."""
    prefix = ["setpriv", "--pdeathsig", "KILL"]
    if user:
        prefix += [f"--reuid={user[0]}", f"--regid={user[1]}", "--clear-groups"]
    with open(log, "ab") as out:
        return subprocess.Popen(prefix + ["--"] + argv, stdout=out, stderr=subprocess.STDOUT, env=env or {"PATH": "/usr/bin:/bin"},
                                stdin=subprocess.DEVNULL)


def stop(process, within=10):
    if process and process.poll() is None:
        process.terminate()
        try:
            process.wait(within)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Journal:
    """systemd-journald on the namespace's /run: volatile storage, no rate limit."""

    def __init__(self, root):
        os.makedirs("/run/systemd/journald.conf.d", exist_ok=True)
        with open("/run/systemd/journald.conf.d/wk-browser.conf", "w") as conf:
            conf.write("[Journal]\nStorage=volatile\nRateLimitBurst=0\n")
        self.process = spawn([JOURNALD], f"{root}/journald.log")
        wait_for(10, lambda: os.path.exists("/run/systemd/journal/stdout"), "journald's stdout socket")

    def stream(self, identifier):
        """A journal stream, as systemd gives a service's stderr, and its JOURNAL_STREAM."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("/run/systemd/journal/stdout")
        s.shutdown(socket.SHUT_RD)
        # identifier, unit, priority, level prefix, forward to syslog, kmsg, console
        s.sendall(f"{identifier}\n\n6\n1\n0\n0\n0\n".encode())
        info = os.fstat(s.fileno())
        return s, f"{info.st_dev}:{info.st_ino}"

    def close(self):
        stop(self.process)


class Etcd:
    """One etcd member on free loopback ports (Tests/WatchkeeperTestSupport/EtcdTestCluster.swift
    starts clusters the same way)."""

    def __init__(self, root):
        client, peer = free_ports(2)
        self.endpoint = f"http://127.0.0.1:{client}"
        peer_url = f"http://127.0.0.1:{peer}"
        self.process = spawn([ETCD, "--name=wk-browser", f"--data-dir={root}/etcd", f"--listen-client-urls={self.endpoint}",
                              f"--advertise-client-urls={self.endpoint}", f"--listen-peer-urls={peer_url}",
                              f"--initial-advertise-peer-urls={peer_url}", f"--initial-cluster=wk-browser={peer_url}",
                              "--initial-cluster-state=new", f"--initial-cluster-token=wk-browser-{os.getpid()}",
                              "--enable-grpc-gateway=true", "--unsafe-no-fsync", "--log-outputs=stderr"], f"{root}/etcd.log")
        wait_for(30, self.healthy, "etcd's /health")

    def healthy(self):
        try:
            with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as answer:
                return json.load(answer).get("health") == "true"
        except OSError:
            return False

    def close(self):
        stop(self.process)


class Host:
    """A watchkeeper daemon whose stderr is a journal stream, as under systemd."""

    def __init__(self, binary, root, name, config, journal):
        self.root = f"{root}/{name}"
        os.makedirs(f"{self.root}/run", exist_ok=True)
        os.chmod(self.root, 0o755)
        os.chmod(f"{self.root}/run", 0o755)
        self.conf = f"{self.root}/watchkeeper.toml"
        self.write_config(config)
        self.binary = binary
        self.daemon = wk.Daemon(binary, self.root, self.conf)
        self.stream, journal_stream = journal.stream("watchkeeper")
        self.daemon.env["JOURNAL_STREAM"] = journal_stream
        self.daemon.stderr_target = self.stream
        if not self.daemon.start(ready_within=30):
            raise AssertionError(f"daemon {name} did not become ready")
        self.socket = f"{self.root}/run/control.sock"

    def write_config(self, text):
        with open(self.conf, "w") as conf:
            conf.write(text)

    def cli(self, *arguments):
        result = subprocess.run([self.binary, *arguments, "--socket", self.socket], capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            raise AssertionError(f"watchkeeper {' '.join(arguments)}: exit {result.returncode}: {result.stderr}")
        return result.stdout

    def close(self):
        self.daemon.stop(within=30)
        self.stream.close()


class Cockpit:
    """cockpit-ws with a local session on a free loopback port, as `user` (uid, gid) or root,
    serving the package from `share` (XDG_DATA_DIRS) with the override in `config`
    (XDG_CONFIG_DIRS): the same files `make install` puts in /usr/share/cockpit/watchkeeper.
    A local session is one browser session: each view gets its own."""

    def __init__(self, root, name, share, config, user=None):
        self.port = free_ports(1)[0]
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "XDG_DATA_DIRS": f"{share}:/usr/share", "XDG_CONFIG_DIRS": config,
               "HOME": f"{root}/home-{name}", "LANG": "C.UTF-8"}
        os.makedirs(env["HOME"], exist_ok=True)
        if user:
            os.chown(env["HOME"], user[0], user[1])
        self.process = spawn([COCKPIT_WS, "-p", str(self.port), "-a", "127.0.0.1", "--local-session=cockpit-bridge"],
                             f"{root}/cockpit-ws-{name}.log", env=env, user=user)
        wait_for(20, self.listening, f"cockpit-ws ({name}) on port {self.port}")

    def listening(self):
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def close(self):
        stop(self.process)


def install_package(checkout, binary, root, socket_path):
    """The package installed by `make install-files` into a DESTDIR (what `make install`
    puts in /usr/local/share/cockpit/watchkeeper), readable by every user, and the override
    an administrator writes for another socket (docs/cockpit.md)."""
    destination = f"{root}/dest"
    subprocess.run(["make", "-C", checkout, "--no-print-directory", "install-files", f"DESTDIR={destination}", f"BIN={binary}"],
                   check=True, stdout=subprocess.DEVNULL, timeout=120)
    share = f"{destination}/usr/local/share"
    with open(f"{share}/cockpit/watchkeeper/manifest.json") as manifest:
        installed = json.load(manifest)["config"]["command"]
    if installed != "/usr/local/bin/watchkeeper":
        raise AssertionError(f"make install-files told the page the binary is {installed}")
    config = f"{root}/etc"
    os.makedirs(f"{config}/cockpit")
    with open(f"{config}/cockpit/watchkeeper.override.json", "w") as override:
        json.dump({"config": {"socket": socket_path, "command": f"{destination}/usr/local/bin/watchkeeper"}}, override)
    for top in (destination, config):
        for directory, _, files in os.walk(top):
            os.chmod(directory, os.stat(directory).st_mode | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
            for name in files:
                path = os.path.join(directory, name)
                os.chmod(path, os.stat(path).st_mode | stat.S_IRGRP | stat.S_IROTH)
    return share, config


def copy_binary(binary, root):
    """A copy other users can run (the checkout may be in /root)."""
    copy = f"{root}/watchkeeper"
    shutil.copy(binary, copy)
    os.chmod(copy, 0o755)
    return copy


def terminate_all(things):
    for thing in reversed(things):
        try:
            thing.close()
        except Exception as error:  # a cleanup failure must not hide the test's own
            print(f"browser: cleanup of {type(thing).__name__}: {error}", file=sys.stderr)


def kill_group_on_exit():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
