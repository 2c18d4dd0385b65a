#!/usr/bin/python3
"""The Cockpit page (cockpit/, issue 40) in a real browser: Debian's cockpit-ws 287 with a
local session, Debian's Chromium headless, and real daemons (one of two hosts on a
one-member etcd) logging to a journald of the test's own. Run as root by `make
browser-test` (and `make test`):

    /usr/bin/python3 Tests/browser/run.py --binary .build/debug/watchkeeper [--screenshots docs/images]

Prints one line per check and, last, `browser: N passed, M failed`; exits 1 if one failed."""

import argparse
import os
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from checks import CHECKS, World  # noqa: E402

ALPHA = """\
[daemon]
log_level = "info"
shutdown_grace = "5s"
read_group = "nogroup"

[cluster]
etcd = ["{etcd}"]
name = "alpha"
prefix = "{prefix}"
lease_ttl = "4s"

[[task]]
name = "report"
manual = true
budget = "20s"
warn_at = "60%"
shell = true
command = '''
for step in 1 2 3 4 5 6; do
  echo "PROGRESS=$((step * 16))" >&"$WATCHKEEPER_PROGRESS_FD"
  echo "STATUS=writing part $step of 6" >&"$WATCHKEEPER_PROGRESS_FD"
  printf 'line %s \\033[31mred\\033[0m <b>bold</b>\\n' "$step"
  sleep 1
done
'''

[[task]]
name = "stuck"
manual = true
budget = "2m"
command = ["/bin/sleep", "600"]

# Outcomes in a fixed cycle, for the timeline: ok, ok, failed, ok, expired (past its 1 s budget).
[[task]]
name = "sampler"
every = "2s"
run_on_start = true
budget = "1s"
kill_grace = "1s"
shell = true
command = '''
count=$(cat {root}/sampler 2>/dev/null || echo 0); echo $((count + 1)) > {root}/sampler
case $((count % 5)) in 0) sleep 0.2 ;; 1) sleep 0.5 ;; 2) sleep 0.1; exit 3 ;; 3) sleep 0.8 ;; 4) sleep 5 ;; esac
'''

[[task]]
name = "heartbeat"
every = "20s"
run_on_start = true
budget = "5s"
command = ["/bin/echo", "beat"]

[[task]]
name = "spring-forward"
cron = "30 2 25-31 3 *"
timezone = "Europe/Berlin"
budget = "1m"
command = ["/bin/true"]

[[task]]
name = "fleet-report"
manual = true
fleet = "one"
command = ["/bin/echo", "fleet fire"]

[[watch]]
name = "inbox"
path = "{root}/inbox"
command = ["/usr/bin/printf", "got %s\\\\n", "{{path}}"]
"""

BRAVO = """\
[daemon]
shutdown_grace = "5s"

[cluster]
etcd = ["{etcd}"]
name = "bravo"
prefix = "{prefix}"
lease_ttl = "4s"

[[task]]
name = "fleet-report"
manual = true
fleet = "one"
command = ["/bin/echo", "fleet fire"]
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--screenshots", help="where to keep a screenshot of each page (docs/images updates the README's)")
    parser.add_argument("--keep", action="store_true", help="leave the scratch directory for a look")
    args = parser.parse_args()
    if os.getuid() != 0:
        print("browser: skipped (needs root: a mount namespace, journald, other users' sessions)")
        return 0
    missing = harness.missing_tools()
    if missing:
        print(f"browser: unable to run: missing {', '.join(missing)} (make deps installs them)", file=sys.stderr)
        return 1
    binary = os.path.abspath(args.binary)
    shots = os.path.abspath(args.screenshots or os.path.join(CHECKOUT, ".build", "browser-test"))
    harness.enter_namespace([os.path.abspath(__file__), "--binary", binary, "--screenshots", shots] + (["--keep"] if args.keep else []))
    os.makedirs(shots, exist_ok=True)

    root = tempfile.mkdtemp(prefix="wk-browser-")
    os.chmod(root, 0o755)
    os.makedirs(f"{root}/inbox")
    started = time.monotonic()
    things = []
    world = None
    passed = failed = 0
    try:
        journal = harness.Journal(root)
        things.append(journal)
        etcd = harness.Etcd(root)
        things.append(etcd)
        shared = harness.copy_binary(binary, root)
        prefix = f"/wk-browser/{os.getpid()}"
        alpha = harness.Host(shared, root, "alpha", ALPHA.format(etcd=etcd.endpoint, prefix=prefix, root=root), journal)
        things.append(alpha)
        bravo = harness.Host(shared, root, "bravo", BRAVO.format(etcd=etcd.endpoint, prefix=prefix), journal)
        things.append(bravo)
        share, config = harness.install_package(CHECKOUT, shared, root, alpha.socket)
        world = World(root=root, alpha=alpha, bravo=bravo, share=share, config=config, shots=shots, things=things)
        print(f"browser: set up in {time.monotonic() - started:.1f}s (journald, etcd, two daemons)")
        for name, check in CHECKS:
            began = time.monotonic()
            try:
                check(world)
                passed += 1
                print(f"browser: {name}: ok ({time.monotonic() - began:.1f}s)")
            except Exception:
                failed += 1
                print(f"browser: {name}: FAILED ({time.monotonic() - began:.1f}s)")
                traceback.print_exc()
                world.save_failure(name)
        errors = world.console_errors()
        if errors:
            failed += 1
            print("browser: the page's console: FAILED\n  " + "\n  ".join(errors))
        else:
            passed += 1
            print("browser: no error in the page's console: ok")
    finally:
        if world:
            world.close()
        harness.terminate_all(things)
        if failed or args.keep:
            print(f"browser: logs and state kept in {root}")
        else:
            import shutil
            shutil.rmtree(root, ignore_errors=True)
    print(f"browser: screenshots in {shots}; {time.monotonic() - started:.1f}s in all")
    print(f"browser: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
