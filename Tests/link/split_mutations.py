#!/usr/bin/env python3
"""Proves that link/check_split.py fails when the split is wrong. Each of split_text.py's
mutations is split from the release build's Swift.o, linked with the release build's own link
command (recorded by link/ld_split.py), and checked against the release build's link of the
runtime as it came; the checker must exit 1 and list differences of the kind the mutation makes:

- relocations: 1 in 500 of the relocations written for references the assembler resolved is
  left out, so those calls and jumps keep the displacement of the old layout (instructions);
- eh-frame: 1 in 200 of the FDE starts is resolved against the next chunk (.eh_frame);
- jump-tables: runs of jump-table entries no longer keep their chunks together, so an entry's
  relocation is right while the jump it makes is not (jump-table entries).

The release binary itself must pass. Needs `make release` first; about 15 s a mutation.

    python3 Tests/link/split_mutations.py [--split-dir .build/x86_64-unknown-linux-gnu/release/runtime-split]"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MUTATIONS = {"relocations": r"^  old\+0x", "eh-frame": r"^  \.eh_frame: ", "jump-tables": r"\(jump-table entry\)"}


def check(split_dir, binary, mapfile):
    unsplit = os.path.join(split_dir, "unsplit", "watchkeeper")
    return subprocess.run([sys.executable, os.path.join(ROOT, "link", "check_split.py"), os.path.join(split_dir, "Swift.o"),
                           unsplit, unsplit + ".map", binary, mapfile], capture_output=True, text=True)


def mutated_link(split_dir, recorded, mutation, scratch):
    obj = os.path.join(scratch, mutation, "Swift.o")  # named as the runtime's, as the map is read by name
    os.makedirs(os.path.dirname(obj))
    subprocess.run([sys.executable, os.path.join(ROOT, "link", "split_text.py"), os.path.join(split_dir, "Swift.o"), obj,
                    "--mutate", mutation], check=True)
    binary = os.path.join(scratch, mutation, "watchkeeper")
    split_object = os.path.join(split_dir, "split", "Swift.o")
    args = []
    for a in recorded["args"]:
        if a == split_object:
            a = obj
        elif a == recorded["output"]:
            a = binary
        elif a.startswith("-Map="):
            a = f"-Map={binary}.map"
        args.append(a)
    if obj not in args:
        raise SystemExit(f"split_mutations: {split_object} is not in the recorded link")
    subprocess.run([recorded["lld"]] + args, check=True)
    return check(split_dir, binary, binary + ".map")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split-dir", default=os.path.join(ROOT, ".build", f"{os.uname().machine}-unknown-linux-gnu",
                                                              "release", "runtime-split"))
    args = parser.parse_args()
    # The recorded link names the split object by the absolute path make gave ld_split.py.
    args.split_dir = os.path.abspath(args.split_dir)
    with open(os.path.join(args.split_dir, "link-args.json")) as f:
        recorded = json.load(f)
    failures = []
    real = check(args.split_dir, recorded["output"], os.path.join(args.split_dir, "watchkeeper.map"))
    print(f"unmutated: exit {real.returncode}: {real.stdout.splitlines()[0] if real.stdout else real.stderr}")
    if real.returncode != 0:
        failures.append("the release binary does not pass the checker")
    with tempfile.TemporaryDirectory(prefix="wk-split-mutations-") as scratch:
        for mutation, marker in MUTATIONS.items():
            result = mutated_link(args.split_dir, recorded, mutation, scratch)
            summary = result.stdout.splitlines()[0] if result.stdout else result.stderr.strip()
            found = sum(1 for line in result.stdout.splitlines() if re.search(marker, line))
            print(f"{mutation}: exit {result.returncode}, {found} listed differences of its kind: {summary}")
            if result.returncode != 1 or found == 0:
                failures.append(f"{mutation}: the checker did not report it (exit {result.returncode}, {found} of its kind)")
    for failure in failures:
        print("FAIL: " + failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
