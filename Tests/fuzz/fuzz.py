#!/usr/bin/env python3
"""Runs the parser harnesses (Sources/watchkeeper-fuzz) over their inputs, a line per target.

  fuzz.py --build --runs 200000          `make fuzz`: builds the libFuzzer binary
                                         (.build-fuzz, -sanitize=fuzzer,address) and runs each
                                         target for that many executions from its seeds
  fuzz.py --replay .build/debug/watchkeeper-fuzz
                                         inside `make test`: the ordinary build replays every
                                         seed and every crash kept so far through the same checks

Inputs per target: Tests/fuzz/<target>/seeds and Tests/fuzz/<target>/crashes (a crash, once
fixed, stays there as a regression input); the configuration target also reads the bad
configuration corpus and the shipped configurations. New inputs libFuzzer finds go to
.build-fuzz/corpus/<target> (kept between runs, never committed); a crash, leak or timeout
is written to .build-fuzz/artifacts/<target>/ and fails the run. Exits 1 if any target failed.
"""
import argparse, json, os, re, shutil, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TARGETS = ["config", "cron", "calendar", "glob", "inotify", "fanotify", "varlink", "tzif"]
SCRATCH = os.path.join(ROOT, ".build-fuzz")
FUZZ_BINARY = os.path.join(SCRATCH, "debug", "watchkeeper-fuzz")
# -sanitize=fuzzer alone leaves Swift code without coverage counters in a SwiftPM build
# (only C is instrumented, and libFuzzer finds nothing to follow): ask for them explicitly.
BUILD = ["swift", "build", "--product", "watchkeeper-fuzz", "--scratch-path", SCRATCH,
         "--sanitize=fuzzer", "--sanitize=address", "-Xswiftc", "-DFUZZING", "-Xswiftc", "-use-ld=lld",
         "-Xswiftc", "-sanitize-coverage=edge,trace-cmp,inline-8bit-counters,pc-table"]


def inputs(target):
    paths = [os.path.join(HERE, target, kind) for kind in ("seeds", "crashes")]
    if target == "config":
        paths += [os.path.join(ROOT, "Tests", "config-corpus", "bad"), os.path.join(ROOT, "demo", "watchkeeper.toml"),
                  os.path.join(ROOT, "etc", "watchkeeper", "watchkeeper.toml")]
    return [p for p in paths if os.path.exists(p)]


def replay(binary, target):
    began = time.monotonic()
    run = subprocess.run([binary, target] + inputs(target), capture_output=True, text=True, errors="replace",
                         env={**os.environ, "SWIFT_BACKTRACE": "enable=no"})
    match = re.search(r"(\d+) inputs passed", run.stdout)
    ok = run.returncode == 0 and match is not None
    row = {"target": target, "mode": "replay", "inputs": int(match.group(1)) if match else 0, "ok": ok,
           "seconds": round(time.monotonic() - began, 1)}
    if not ok:
        # The replay names each input on stderr before running it: the last one crashed.
        lines = run.stderr.splitlines()
        named = [line for line in lines if line.startswith(f"{target}: ")]
        row["failure"] = named[-1:] + [line for line in lines if "Fatal error" in line][:2] or lines[-3:]
    return row


def fuzz(binary, target, runs, timeout):
    corpus = os.path.join(SCRATCH, "corpus", target)
    artifacts = os.path.join(SCRATCH, "artifacts", target)
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(artifacts, exist_ok=True)
    # libFuzzer takes directories: single files go into a temporary one.
    extra = tempfile.mkdtemp(prefix=f"fuzz-{target}-")
    dirs = []
    for path in inputs(target):
        if os.path.isdir(path):
            dirs.append(path)
        else:
            shutil.copy(path, extra)
    began = time.monotonic()
    command = [binary, f"-runs={runs}", f"-timeout={timeout}", "-rss_limit_mb=2048", "-max_len=16384",
               "-print_final_stats=1", f"-artifact_prefix={artifacts}/", corpus] + dirs + [extra]
    run = subprocess.run(command, env={**os.environ, "WATCHKEEPER_FUZZ_TARGET": target},
                         capture_output=True, text=True, errors="replace")
    shutil.rmtree(extra, ignore_errors=True)
    log = run.stderr
    with open(os.path.join(SCRATCH, f"fuzz-{target}.log"), "w") as f:
        f.write(log)
    stat = lambda name: int(m.group(1)) if (m := re.search(rf"stat::{name}:\s+(\d+)", log)) else None
    coverage = re.findall(r"cov: (\d+) ft: (\d+) corp: (\d+)/", log)
    found = sorted(os.listdir(artifacts))
    row = {"target": target, "mode": "fuzz", "executions": stat("number_of_executed_units"),
           "exec_per_second": stat("average_exec_per_sec"), "new_units": stat("new_units_added"),
           "coverage": int(coverage[-1][0]) if coverage else None, "features": int(coverage[-1][1]) if coverage else None,
           "corpus": int(coverage[-1][2]) if coverage else None, "artifacts": [os.path.join(artifacts, a) for a in found],
           "seconds": round(time.monotonic() - began, 1)}
    row["ok"] = run.returncode == 0 and not found and row["executions"] is not None
    if not row["ok"]:
        row["failure"] = [line for line in log.splitlines() if re.search(r"ERROR|Fatal error|SUMMARY|property failed", line)][:5]
    return row


def main():
    p = argparse.ArgumentParser()
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--replay", metavar="BINARY", help="an ordinary build of watchkeeper-fuzz")
    mode.add_argument("--build", action="store_true", help="build the libFuzzer binary, then fuzz")
    mode.add_argument("--binary", help="an existing libFuzzer build to fuzz with")
    p.add_argument("--runs", type=int, default=200_000, help="executions per target")
    p.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--json")
    args = p.parse_args()
    targets = args.targets.split(",")
    binary = args.replay or args.binary or FUZZ_BINARY
    if args.build:
        print("$ " + " ".join(BUILD), flush=True)
        build = subprocess.run(BUILD, cwd=ROOT, capture_output=True, text=True)
        if build.returncode != 0:
            print(build.stdout[-3000:] + build.stderr[-3000:])
            return 1
    rows = []
    for target in targets:
        row = replay(binary, target) if args.replay else fuzz(binary, target, args.runs, args.timeout)
        rows.append(row)
        if row["mode"] == "replay":
            print(f"{target:8s} {'ok  ' if row['ok'] else 'FAIL'} {row['inputs']} inputs replayed in {row['seconds']} s", flush=True)
        else:
            print(f"{target:8s} {'ok  ' if row['ok'] else 'FAIL'} {row['executions'] or 0:,} executions in {row['seconds']} s "
                  f"({row['exec_per_second']}/s), coverage {row['coverage']} edges, corpus {row['corpus']} inputs "
                  f"({row['new_units']} new)", flush=True)
        for line in row.get("failure", []):
            print(f"    {line}")
        for artifact in row.get("artifacts", []):
            print(f"    kept: {artifact}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
