"""A file burst through `watchkeeper-bench watch` with only watchkeeper, for the scripts
that look at the daemon while it drains (profile_burst.py, syscalls_burst.py)."""

import os
import subprocess
import sys
import time


class BurstDaemon:
    """Starts the bench's burst part; `pid` is the daemon's once it runs."""

    def __init__(self, bench, binary, files):
        self.binary = os.path.abspath(binary)
        env = dict(os.environ, WATCHKEEPER_BIN=self.binary, WATCHKEEPER_BENCH_WATCH_PARTS="burst",
                   WATCHKEEPER_BENCH_BURST=str(files), WATCHKEEPER_BENCH_BURST_SETTLE_S="1",
                   WATCHKEEPER_BENCH_WATCH_PEERS="watchkeeper", WATCHKEEPER_BENCH_BURST_PEERS="watchkeeper")
        self.bench = subprocess.Popen([bench, "watch"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.pid = self._daemon_pid(time.monotonic() + 60)

    def _daemon_pid(self, deadline):
        while time.monotonic() < deadline:
            found = subprocess.run(["pgrep", "-f", f"{self.binary} run"], capture_output=True, text=True).stdout.split()
            if found:
                return int(found[0])
            time.sleep(0.2)
        self.bench.kill()
        sys.exit("the daemon did not start within 60 s")

    def finish(self):
        """Waits for the bench and prints its line about the burst."""
        output, _ = self.bench.communicate()
        for line in output.splitlines():
            if " handled " in line:
                print(line.strip()[:200])
