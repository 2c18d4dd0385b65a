#!/usr/bin/env python3
"""The release build's linker: ld.lld, with the Swift runtime's Swift.o split into a section per
function (link/split_text.py) linked ahead of -lswiftCore, and the result checked.

SwiftPM gives no place for an object before the runtime's archive, so `make release` names
this script as the linker (`swiftc -ld-path=`, which clang passes on as --ld-path) and adds
`-Xlinker --wk-split-dir=DIR`, where link/prepare_split.sh left DIR/Swift.o (the runtime's, as
it came) and, when it is the one the split was checked on, DIR/split/Swift.o. For the link of
`watchkeeper` with a split object, this script:

1. links the daemon as it came (the arguments unchanged) to DIR/unsplit/watchkeeper, with a map;
2. links it with DIR/split/Swift.o right after --start-group (so every symbol the archive's
   Swift.o would give comes from it, and lld's --symbol-ordering-file can place each function),
   to the output, with a map (DIR/watchkeeper.map);
3. runs link/check_split.py on the two, and removes the output if they differ (exit status 1),
   so no unchecked binary is left for SwiftPM to call built; DIR/checked records the check.

Any other link (another product, or no split object) is ld.lld with the arguments as given."""

import json
import os
import shlex
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PRODUCT = "watchkeeper"


def expand(args):
    """Response files (@file) inlined: the split object goes in among their arguments."""
    out = []
    for a in args:
        if a.startswith("@") and os.path.isfile(a[1:]):
            out += expand(shlex.split(open(a[1:]).read()))
        else:
            out.append(a)
    return out


def value_of(args, flag):
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a[len(flag) + 1:]
    return None


def with_output(args, output, mapfile):
    """The arguments with another output and map (any -Map of the caller's replaced)."""
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in ("-o", "-Map", "--Map"):
            skip = True
            continue
        if a.startswith(("-Map=", "--Map=")):
            continue
        out.append(a)
    return out + ["-o", output, f"-Map={mapfile}"]


def link(lld, args):
    result = subprocess.run([lld] + args)
    if result.returncode:
        sys.exit(result.returncode)


def split_link(lld, args, directory):
    output = value_of(args, "-o")
    split_object = os.path.join(directory, "split", "Swift.o")
    if "--start-group" not in args:
        print("ld_split: no --start-group in the link: the Swift runtime linked as it came", file=sys.stderr)
        os.execv(lld, [lld] + args)
    os.makedirs(os.path.join(directory, "unsplit"), exist_ok=True)
    unsplit = os.path.join(directory, "unsplit", PRODUCT)
    link(lld, with_output(args, unsplit, unsplit + ".map"))
    group = args.index("--start-group")
    split_args = with_output(args[:group + 1] + [split_object] + args[group + 1:], output,
                             os.path.join(directory, PRODUCT + ".map"))
    with open(os.path.join(directory, "link-args.json"), "w") as f:
        json.dump({"lld": lld, "args": split_args, "output": output}, f)
    link(lld, split_args)
    check = subprocess.run([sys.executable, os.path.join(HERE, "check_split.py"), os.path.join(directory, "Swift.o"),
                            unsplit, unsplit + ".map", output, os.path.join(directory, PRODUCT + ".map")],
                           capture_output=True, text=True)
    sys.stderr.write(check.stdout + check.stderr)
    checked = os.path.join(directory, "checked")
    if check.returncode:
        for path in (output, checked):
            if os.path.exists(path):
                os.remove(path)
        print(f"ld_split: the link with the split runtime ({split_object}) differs from the link with it as "
              f"it came: {output} removed", file=sys.stderr)
        sys.exit(1)
    with open(checked, "w") as f:
        f.write(check.stdout)


def main():
    args = expand(sys.argv[1:])
    directory = next((a.split("=", 1)[1] for a in args if a.startswith("--wk-split-dir=")), None)
    args = [a for a in args if not a.startswith("--wk-split-dir=")]
    lld = shutil.which("ld.lld")
    if lld is None:
        sys.exit("ld_split: unable to find ld.lld on PATH (the Swift toolchain's bin)")
    output = value_of(args, "-o")
    if (directory is None or output is None or os.path.basename(output) != PRODUCT
            or not os.path.isfile(os.path.join(directory, "split", "Swift.o"))):
        os.execv(lld, [lld] + args)
    split_link(lld, args, directory)


if __name__ == "__main__":
    main()
