"""What the reliability scenarios share: a daemon started as systemd would start it (its own
runtime and state directories, a notify socket read for READY=1), the daemon's pid behind a
wrapper, its children, and small waits with deadlines (never counts in a time window)."""
import os, re, signal, socket, sqlite3, subprocess, tempfile, threading, time


def proc_children():
    """pid -> [(child pid, comm)] for every process on the machine."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/comm") as f:
                    comm = f.read().strip()
                children.setdefault(int(fields[1]), []).append((int(entry), comm))
            except OSError:
                pass
    return children


def status_fields(pid):
    """VmRSS and RssAnon in KiB and the thread count, from /proc/PID/status."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    kib = lambda k: int(fields.get(k, "0 kB").split()[0])
    return {"rss_kib": kib("VmRSS"), "anon_kib": kib("RssAnon"), "threads": int(fields.get("Threads", "0"))}


def daemon_pid(launched):
    """The daemon itself: `launched`, or its descendant when a wrapper (heaptrack, valgrind)
    started it, so signals and samples reach the daemon and not the wrapper."""
    for _ in range(100):
        children = proc_children()
        queue = [launched]
        while queue:
            pid = queue.pop()
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "watchkeeper":
                        return pid
            except OSError:
                pass
            queue += [child for child, _ in children.get(pid, [])]
        time.sleep(0.1)
    raise SystemExit(f"no watchkeeper process under pid {launched}")


def direct_children(pid):
    """The pids whose parent is `pid`, zombies included, from every thread's children list."""
    found = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return found


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def comm(pid):
    """The process's name (what ps shows), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def processes_with(marker):
    """Pids whose argv holds `marker`."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and marker in cmdline(int(e))]


def wait_for(seconds, predicate, step=0.05):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


class NotifySocket:
    """The NOTIFY_SOCKET a supervisor listens on, read all the time as systemd reads it (a
    socket nobody reads fills up, and then the daemon's sd_notify blocks); READY=1 sets
    `ready`, and every message is kept in `messages`, its arrival (time.monotonic()) in `arrivals`."""

    def __init__(self, directory):
        self.path = os.path.join(directory, f"notify-{os.getpid()}-{time.monotonic_ns()}")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.ready = threading.Event()
        self.messages = []
        self.arrivals = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            try:
                message = self.sock.recv(65536)
            except OSError:
                return
            if not message:
                return  # shut down by close(); sd_notify never sends an empty datagram
            self.arrivals.append(time.monotonic())
            self.messages.append(message)
            if b"READY=1" in message.split(b"\n"):
                self.ready.set()

    def wait_ready(self, seconds):
        return self.ready.wait(seconds)

    def close(self):
        # The reader must be gone before the fd is closed: a recv of the old reader that
        # started after the close would read from whatever socket got the same number next,
        # such as the next start's notify socket, and swallow its READY=1.
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.reader.join(5)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass


class Daemon:
    """`watchkeeper run` on CONF with RUNTIME_DIRECTORY and STATE_DIRECTORY under ROOT, stderr
    appended to ROOT/stderr.log (across restarts)."""

    def __init__(self, binary, root, conf, wrapper=()):
        self.binary, self.root, self.conf, self.wrapper = binary, root, conf, list(wrapper)
        self.env = {"PATH": "/usr/bin:/bin", "RUNTIME_DIRECTORY": f"{root}/run",
                    "STATE_DIRECTORY": f"{root}/state"}
        self.process, self.pid, self.notify = None, None, None
        # Where the daemon's stderr goes: ROOT/stderr.log unless a scenario sets a pipe.
        self.stderr_target = None

    @property
    def database(self):
        return f"{self.root}/state/watchkeeper.sqlite3"

    def start(self, ready_within=None):
        """Starts the daemon; with ready_within, waits that long for READY=1 (False if none)."""
        self.notify = NotifySocket(self.root)
        env = dict(self.env, NOTIFY_SOCKET=self.notify.path)
        with open(f"{self.root}/stderr.log", "ab") as log:
            self.process = subprocess.Popen(self.wrapper + [self.binary, "run", "--config", self.conf],
                                            env=env, stderr=self.stderr_target or log, stdout=subprocess.DEVNULL)
        self.pid = daemon_pid(self.process.pid) if self.wrapper else self.process.pid
        if ready_within is None:
            return True
        return self.notify.wait_ready(ready_within)

    def signal(self, number):
        os.kill(self.pid, number)

    def alive(self):
        return self.process is not None and self.process.poll() is None

    def kill_counting_children(self, marker):
        """SIGSTOP (nothing more starts), count the children whose argv holds `marker` (the
        jobs in flight, finished but unreaped ones included), then SIGKILL. Returns the count."""
        os.kill(self.pid, signal.SIGSTOP)
        in_flight = sum(1 for child in direct_children(self.pid) if marker in cmdline(child)
                        or not cmdline(child))  # a zombie's argv is gone; it was a job all the same
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(10)
        self.notify.close()
        return in_flight

    def stop(self, within=30):
        if not self.alive():
            return self.process.returncode if self.process else None
        os.kill(self.pid, signal.SIGTERM)
        try:
            return self.process.wait(within)
        except subprocess.TimeoutExpired:
            self.save_stacks("stop-timeout")
            self.process.kill()
            self.process.wait()
            return None
        finally:
            self.notify.close()

    def save_stacks(self, why):
        """Every thread's backtrace into ROOT/stacks-WHY.txt (gdb, when installed): what a hang
        was waiting for, kept before the process is killed."""
        path = f"{self.root}/stacks-{why}.txt"
        try:
            with open(path, "wb") as out:
                subprocess.run(["gdb", "-p", str(self.pid), "-batch", "-ex", "thread apply all bt"],
                               stdout=out, stderr=subprocess.STDOUT, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            pass
        return path

    def stderr_tail(self, lines=20):
        try:
            with open(f"{self.root}/stderr.log", "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""


def integrity(database):
    """SQLite's own verdict on the file ("ok" or its complaints), read-only, with the
    write-ahead log as the daemon left it."""
    if not os.path.exists(database):
        return "missing"
    try:
        connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)
        try:
            rows = connection.execute("PRAGMA integrity_check").fetchall()
        finally:
            connection.close()
    except sqlite3.Error as error:
        return f"unreadable: {error}"
    return "; ".join(str(row[0]) for row in rows)


# The " (key=value, ...)" suffix of a stderr log line (LogSink.metadataSuffix): a key or
# value is a bare word, or a double-quoted string in which a backslash starts an escape
# (\" \\ \n \r \t \xNN \uNNNN), so a file name such as "a, outcome=ok" stays one value.
_FIELD = rb'(?:[A-Za-z0-9._/:@+-]+|"(?:[^"\\]|\\.)*")'
_PAIR = re.compile(rb"(%s)=(%s)" % (_FIELD, _FIELD))
_SUFFIX = re.compile(rb" \((%s=%s(?:, %s=%s)*)\)\r?\n?$" % (_FIELD, _FIELD, _FIELD, _FIELD))
_ESCAPE = re.compile(rb'\\(x[0-9a-f]{2}|u[0-9a-f]{4}|.)', re.DOTALL)
_SIMPLE_ESCAPES = {b'"': b'"', b"\\": b"\\", b"n": b"\n", b"r": b"\r", b"t": b"\t"}


def _unquote(field):
    """A key or value's bytes as they were logged (LineEscaping's escapes decoded)."""
    if not field.startswith(b'"'):
        return field

    def decode(match):
        escape = match.group(1)
        if escape[:1] == b"x" and len(escape) == 3:
            return bytes([int(escape[1:], 16)])
        if escape[:1] == b"u" and len(escape) == 5:
            return chr(int(escape[1:], 16)).encode()
        return _SIMPLE_ESCAPES.get(escape, b"\\" + escape)
    return _ESCAPE.sub(decode, field[1:-1])


def metadata(line):
    """The pairs of a stderr log line's " (key=value, ...)" suffix as {key: value bytes}, or
    None when the line has none. The suffix is the earliest " (" from which the rest of the
    line is exactly a list of pairs."""
    match = _SUFFIX.search(line)
    if not match:
        return None
    return {_unquote(key).decode(errors="replace"): _unquote(value) for key, value in _PAIR.findall(match.group(1))}


def run_records(log):
    """The run records in a daemon's stderr log: task name -> [(outcome, duration_ms, line)], in order."""
    found = {}
    with open(log, "rb") as f:
        for line in f:
            fields = metadata(line)
            if fields and {"task", "run_id", "outcome", "duration_ms"} <= fields.keys():
                found.setdefault(fields["task"].decode(errors="replace"), []).append(
                    (fields["outcome"].decode(), int(fields["duration_ms"]), line.decode(errors="replace").strip()))
    return found


def scratch(prefix):
    return tempfile.mkdtemp(prefix=prefix)
