#!/usr/bin/env python3
"""Soak: the daemon under mixed load for a while, sampled every SAMPLE seconds.

Load (issue 11, part 7): TASKS tasks every second, a file into a watched directory every
second, SIGUSR1 every 10 s, a control-socket `status` every 5 s, SIGHUP every 60 s (the
configuration alternates between two versions so each reload applies a change).
Samples: VmRSS, RssAnon, malloc in use and SQLite's share (from the dump's resources
section), open fds, threads. Prints the series and the growth between the first and the
last third of the run (after WARMUP seconds), per figure; exits 1 if fds other than the
running jobs' or pipes at rest or threads grew, or RSS grew by more than --max-rss-growth-kib.

usage: soak.py BINARY [--minutes M] [--sample S] [--tasks N] [--max-rss-growth-kib K]
"""
import argparse, json, os, shutil, signal, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wk import daemon_pid, status_fields


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--minutes", type=float, default=30)
    p.add_argument("--sample", type=float, default=30)
    p.add_argument("--tasks", type=int, default=50)
    p.add_argument("--warmup", type=float, default=60)
    p.add_argument("--max-rss-growth-kib", type=int, default=1024)
    p.add_argument("--reload-every", type=int, default=60, help="seconds between SIGHUPs (0: never)")
    p.add_argument("--dump-every", type=int, default=10, help="seconds between SIGUSR1s (0: never)")
    p.add_argument("--status-every", type=int, default=5, help="seconds between `status` calls (0: never)")
    p.add_argument("--wrapper", default="", help="a command the daemon runs under, e.g. heaptrack -o FILE")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE for the daemon's environment")
    p.add_argument("--json", help="write the samples here")
    return p.parse_args()


def config(root, tasks, generation):
    lines = ['[daemon]', 'log_level = "info"', 'shutdown_grace = "5s"', 'max_jobs = 16',
             'dump_component_timeout = "2s"', '']
    for i in range(tasks):
        # A mix: plain, with output through the daemon, with progress; budget alternates per
        # generation so every reload changes something.
        budget = "30s" if generation % 2 == 0 else "31s"
        if i % 3 == 0:
            command = '["/bin/true"]'
        elif i % 3 == 1:
            command = '["/bin/echo", "soak {task} run {run_id}"]'
        else:
            command = '["/bin/sh", "-c", "echo PROGRESS=50 >&3; echo STATUS=half >&3"]'
        lines += ['[[task]]', f'name = "soak-{i:02d}"', 'every = "1s"', f'budget = "{budget}"',
                  f'command = {command}', '']
    lines += ['[[watch]]', 'name = "soak-inbox"', f'path = "{root}/inbox"',
              'command = ["/bin/rm", "-f", "{path}"]', '']
    return "\n".join(lines)


def fd_kinds(pid):
    """The daemon's open fds by kind. Each running job holds a pidfd and its output pipes,
    so the total follows how many jobs happen to run at the sample; a leak shows in the
    fds that are neither, or in pipes left over beyond the running jobs'."""
    kinds = {"fds": 0, "pidfds": 0, "pipes": 0, "other_fds": 0}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed between the listing and the readlink
        kinds["fds"] += 1
        kind = "pidfds" if target == "anon_inode:[pidfd]" else "pipes" if target.startswith("pipe:") else "other_fds"
        kinds[kind] += 1
    return kinds


def main():
    args = parse()
    root = tempfile.mkdtemp(prefix="wk-soak-")
    os.makedirs(f"{root}/inbox")
    conf = f"{root}/watchkeeper.toml"
    generation = 0
    with open(conf, "w") as f:
        f.write(config(root, args.tasks, generation))
    env = {"PATH": "/usr/bin:/bin", "RUNTIME_DIRECTORY": f"{root}/run", "STATE_DIRECTORY": f"{root}/state"}
    env.update(item.split("=", 1) for item in args.env)
    log = open(f"{root}/stderr.log", "wb")
    daemon = subprocess.Popen(args.wrapper.split() + [args.binary, "run", "--config", conf], env=env, stderr=log, stdout=subprocess.DEVNULL)
    pid = daemon_pid(daemon.pid)
    state = f"{root}/run/state.json"
    samples, failures = [], []
    start = time.monotonic()
    next_tick = start
    tick = 0
    last_dump = {}
    try:
        while time.monotonic() - start < args.minutes * 60:
            next_tick += 1
            time.sleep(max(0, next_tick - time.monotonic()))
            tick += 1
            if daemon.poll() is not None:
                failures.append(f"the daemon exited with {daemon.returncode} after {tick} s")
                break
            with open(f"{root}/inbox/file-{tick}", "w") as f:
                f.write("x")
            if args.status_every and tick % args.status_every == 0:
                r = subprocess.run([args.binary, "status", "--json", "--config", conf], env=env,
                                   capture_output=True, timeout=30)
                if r.returncode != 0:
                    failures.append(f"status failed at {tick} s: {r.stderr.decode(errors='replace').strip()}")
            if args.dump_every and tick % args.dump_every == 0:
                os.kill(pid, signal.SIGUSR1)
            if args.reload_every and tick % args.reload_every == 0:
                generation += 1
                with open(conf + ".new", "w") as f:
                    f.write(config(root, args.tasks, generation))
                os.rename(conf + ".new", conf)
                os.kill(pid, signal.SIGHUP)
            if tick % 10 == 5:
                try:
                    with open(state) as f:
                        last_dump = json.load(f)
                except (OSError, ValueError):
                    pass
            if tick % int(args.sample) == 0:
                sample = {"t": tick, **status_fields(pid), **fd_kinds(pid)}
                resources = last_dump.get("resources", {})
                sample["malloc_kib"] = resources.get("malloc_in_use_bytes", 0) // 1024
                sample["sqlite_kib"] = resources.get("sqlite_bytes", 0) // 1024
                # Each dump section's JSON size: what grows in the daemon's own state shows here.
                sample["sections"] = {k: len(json.dumps(v)) for k, v in last_dump.items() if isinstance(v, (dict, list))}
                samples.append(sample)
                print(f"t={tick:5d}s rss={sample['rss_kib']} KiB anon={sample['anon_kib']} KiB "
                      f"malloc={sample['malloc_kib']} KiB sqlite={sample['sqlite_kib']} KiB fds={sample['fds']} "
                      f"(pidfds={sample['pidfds']} pipes={sample['pipes']} other={sample['other_fds']}) "
                      f"threads={sample['threads']}", flush=True)
    finally:
        if daemon.poll() is None:
            os.kill(pid, signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
                failures.append("the daemon did not stop within 30 s of SIGTERM")
        log.close()

    steady = [s for s in samples if s["t"] >= args.warmup]
    third = max(1, len(steady) // 3)
    if len(steady) >= 3:
        first, last = steady[:third], steady[-third:]
        mean = lambda xs, k: sum(x[k] for x in xs) / len(xs)
        print(f"growth from the first to the last third after {args.warmup:.0f} s "
              f"({len(steady)} samples, {third} per third):")
        for key in ["rss_kib", "anon_kib", "malloc_kib", "sqlite_kib", "fds", "other_fds", "threads"]:
            print(f"  {key:11s} {mean(first, key):10.1f} -> {mean(last, key):10.1f}  ({mean(last, key) - mean(first, key):+.1f})")
        for name in sorted(set(last[-1]["sections"]) & set(first[0]["sections"])):
            before, after = first[0]["sections"][name], last[-1]["sections"][name]
            if after - before > 1024:
                print(f"  dump section {name}: {before} -> {after} bytes of JSON")
        # The total follows the jobs running at the sample (a pidfd and both ends of three
        # pipes each, JobPipes.swift), so it is not judged; what a leak would grow is. A
        # leak raises every later sample; a control connection open at one sample (status
        # is asked every 5 s) raised one, and the mean of a short run's last third with it.
        if min(x["other_fds"] for x in last) > max(x["other_fds"] for x in first):
            failures.append("open fds other than the running jobs' grew")
        # Pipes are judged at rest only (no job running at the sample): a job between its
        # pipes and its pidfd, or draining after exit, holds pipes that are no leak, and a
        # loaded machine has many of those at once (38-62 spare pipes in one CI run).
        first_rest = [x["pipes"] for x in first if x["pidfds"] == 0]
        last_rest = [x["pipes"] for x in last if x["pidfds"] == 0]
        if first_rest and last_rest and min(last_rest) > max(first_rest):
            failures.append("pipes at rest grew")
        # libdispatch grows and shrinks its worker pool with load (one per core per QoS
        # class in use, plus the manager): a few threads more is the pool, not a leak.
        if mean(last, "threads") > max(x["threads"] for x in first) + 4:
            failures.append("threads grew")
        growth = mean(last, "rss_kib") - mean(first, "rss_kib")
        if growth > args.max_rss_growth_kib:
            failures.append(f"RSS grew by {growth:.0f} KiB (limit {args.max_rss_growth_kib})")
    else:
        failures.append("too few samples after the warm-up to judge growth")
    runs = 0
    with open(f"{root}/stderr.log", "rb") as f:
        for line in f:
            if b"outcome=" in line:
                runs += 1
    print(f"runs recorded: {runs}; reloads: {generation}; log {os.path.getsize(root + '/stderr.log') // 1024} KiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"samples": samples, "failures": failures, "runs": runs, "warmup": args.warmup}, f, indent=1)
    shutil.rmtree(root, ignore_errors=True)
    for failure in failures:
        print(f"soak: FAIL {failure}")
    print("soak: ok" if not failures else "soak: failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
