#!/usr/bin/env python3
"""Checks a link that used split_text.py's object against the same link with the object as it
came: every instruction of the split section, in both binaries, must name the same target, as
an offset in the old section when it points into it and as the same symbol otherwise; and every
word of data the object's relocations point into the section must point at the same offset.

    check_split.py ORIGINAL.o UNSPLIT_BINARY UNSPLIT.map SPLIT_BINARY SPLIT.map [--section .text]

The maps are lld's -Map of each link. Exit status 1 with the differences listed, 0 when none."""

import argparse
import bisect
import re
import struct
import subprocess
import sys

MAP_LINE = re.compile(r"\s*([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s(.*)$")
INSTRUCTION = re.compile(r"^\s+([0-9a-f]+):\s+(?:[0-9a-f]{2} ?)+?\s*\t(\S+)\s*(.*)$")
TARGET = re.compile(r"(?:^|# )0x([0-9a-f]+)(?: <([^>+]*)(?:\+0x[0-9a-f]+)?>)?")


def pieces(mapfile, obj, section):
    """(address, size, old offset) of each piece of OBJ's section in a link, and the addresses of
    OBJ's other input sections by name."""
    found, others, current = [], {}, None
    with open(mapfile) as f:
        for line in f:
            m = MAP_LINE.match(line)
            if not m:
                continue
            address, size, rest = int(m[1], 16), int(m[2], 16), m[3]
            depth = len(rest) - len(rest.lstrip(" "))
            name = rest.strip()
            if depth == 8:
                current = None
                if name.endswith(f"{obj}):({section})") or name.endswith(f"/{obj}:({section})"):
                    found.append([address, size, 0])
                elif name.endswith(f"{obj}):({section}.split)") or name.endswith(f"/{obj}:({section}.split)"):
                    current = [address, size, None]
                    found.append(current)
                elif f"{obj})" in name or name.split(":(")[0].endswith(f"/{obj}"):
                    others.setdefault(name.split(":(")[-1].rstrip(")"), []).append((address, size))
            elif depth == 16 and current is not None and current[2] is None and name.startswith("__wk_split."):
                current[2] = int(name.split(".")[1], 16)
    if any(p[2] is None for p in found):
        raise SystemExit(f"check_split: a piece in {mapfile} has no __wk_split symbol")
    return sorted(found), others


def output_range(mapfile, names):
    low, high = None, None
    with open(mapfile) as f:
        for line in f:
            m = MAP_LINE.match(line)
            if m and len(m[3]) - len(m[3].lstrip(" ")) == 0 and m[3].strip() in names:
                a, n = int(m[1], 16), int(m[2], 16)
                low, high = min(low or a, a), max(high or 0, a + n)
    return low, high


class Names:
    """The object's function symbols in the section: offset → one name, and every alias → it."""
    def __init__(self, path, section):
        out = subprocess.run(["llvm-readelf", "-s", "-S", "-W", path], capture_output=True, text=True, check=True).stdout
        index = next(int(m[1]) for m in re.finditer(r"\[\s*(\d+)\] (\S+)", out) if m[2] == section)
        self.by_offset, aliases = {}, {}
        for line in out.splitlines():
            f = line.split()
            if len(f) == 8 and f[3] == "FUNC" and f[6] == str(index):
                aliases.setdefault(int(f[1], 16), set()).add(f[7])
        self.canonical = {}
        for offset, group in aliases.items():
            chosen = min(group)
            self.by_offset[offset] = chosen
            for alias in group:
                self.canonical[alias] = chosen


class Layout:
    def __init__(self, binary, mapfile, obj, section):
        self.binary = binary
        self.code_low, self.code_high = output_range(mapfile, (".text", ".text.unnamed", ".plt"))
        self.pieces, self.others = pieces(mapfile, obj, section)
        self.starts = [p[0] for p in self.pieces]

    def old_offset(self, address):
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and address < self.pieces[i][0] + self.pieces[i][1]:
            return self.pieces[i][2] + address - self.pieces[i][0]
        return None

    def address(self, old):
        for start, size, offset in self.pieces:
            if offset <= old < offset + size:
                return start + old - offset
        return None

    def instructions(self, start, size):
        """(address, mnemonic, operands) of every instruction in [start, start + size), from one
        llvm-objdump run over the span of all the pieces (one per piece is too slow)."""
        if not hasattr(self, "listing"):
            low = min(p[0] for p in self.pieces)
            high = max(p[0] + p[1] for p in self.pieces)
            out = subprocess.run(["llvm-objdump", "-d", f"--start-address={low:#x}", f"--stop-address={high:#x}", self.binary],
                                 capture_output=True, text=True, check=True).stdout
            self.listing = []
            for line in out.splitlines():
                m = INSTRUCTION.match(line)
                if m:
                    self.listing.append((int(m[1], 16), m[2], m[3]))
            self.listing_at = [row[0] for row in self.listing]
        i = bisect.bisect_left(self.listing_at, start)
        rows = []
        while i < len(self.listing) and self.listing[i][0] < start + size:
            rows.append(self.listing[i])
            i += 1
        return rows

    def normal(self, text, names):
        """The operand text with each address replaced by what it names: a function of the old
        section by its name (weak copies elsewhere are the same function), another place in it
        by its offset, code elsewhere by its symbol; data is left out (the object reaches it
        through relocations the split keeps as they were)."""
        def name(m):
            address = int(m[1], 16)
            old = self.old_offset(address)
            if old is not None:
                return f"<{names.by_offset[old]}>" if old in names.by_offset else f"<old+{old:#x}>"
            if self.code_low <= address < self.code_high:
                return f"<{names.canonical.get(m[2], m[2])}>"
            return "<data>"
        return " ".join(TARGET.sub(name, re.sub(r"-?\w+\(%rip\)", "(%rip)", text)).split())


def data_relocations(path, section):
    """(section name, place, type, addend) of every relocation in a data section of the object
    against the text's section symbol."""
    out = subprocess.run(["llvm-readelf", "-r", "-W", path], capture_output=True, text=True, check=True).stdout
    found, current = [], None
    for line in out.splitlines():
        m = re.match(r"Relocation section '\.rela(\S+)'", line)
        if m:
            current = m[1]
            continue
        f = line.split()
        if current and len(f) >= 5 and re.fullmatch(r"[0-9a-f]{16}", f[0]) and f[4] == section:
            addend = int(f[6], 16) * (-1 if f[5] == "-" else 1) if len(f) >= 7 else 0
            found.append((current, int(f[0], 16), f[2], addend))
    return [r for r in found if not r[0].startswith(section)]


class Image:
    """The bytes at link addresses of a binary (its loadable segments)."""
    def __init__(self, path):
        self.blob = open(path, "rb").read()
        phoff, = struct.unpack_from("<Q", self.blob, 32)
        phnum, = struct.unpack_from("<H", self.blob, 56)
        self.segments = []
        for i in range(phnum):
            kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", self.blob, phoff + i * 56)
            if kind == 1:
                self.segments.append((vaddr, filesz, offset))

    def word(self, address, size):
        for vaddr, filesz, offset in self.segments:
            if vaddr <= address < vaddr + filesz:
                return int.from_bytes(self.blob[offset + address - vaddr: offset + address - vaddr + size], "little", signed=size == 4)
        return None


def check_data(original, section, before, after, differences):
    """Each data word the object's relocations point into the section: the same old offset in both links."""
    images = (Image(before.binary), Image(after.binary))
    words = skipped = unmatched = 0
    for name, place, kind, addend in data_relocations(original, section):
        if name == ".eh_frame":
            skipped += 1
            continue
        seen = []
        for layout, image in zip((before, after), images):
            bases = layout.others.get(name, [])
            if len(bases) != 1:
                seen.append(f"{len(bases)} input sections named {name}")
                continue
            address = bases[0][0] + place
            if kind == "R_X86_64_PC32":
                value = image.word(address, 4)
                seen.append(layout.old_offset(address + value) if value is not None else "unreadable")
            elif kind == "R_X86_64_64":
                value = image.word(address, 8)
                seen.append(layout.old_offset(value) if value is not None else "unreadable")
            else:
                seen.append(f"type {kind}")
        if any(isinstance(v, str) for v in seen):
            unmatched += 1  # e.g. one of Swift.o's 1,704 sections all named .rodata: the map cannot say which
            continue
        words += 1
        if seen[0] != seen[1] or seen[0] is None:
            differences.append(f"{name}+{place:#x} ({kind}, addend {addend:#x}): unsplit {seen[0]}, split {seen[1]}"
                               if len(differences) < 40 else None)
    return words, skipped, unmatched


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("original")
    parser.add_argument("unsplit")
    parser.add_argument("unsplit_map")
    parser.add_argument("split")
    parser.add_argument("split_map")
    parser.add_argument("--section", default=".text")
    args = parser.parse_args()
    obj = args.original.split("/")[-1]
    before = Layout(args.unsplit, args.unsplit_map, obj, args.section)
    after = Layout(args.split, args.split_map, obj, args.section)
    if len(before.pieces) != 1:
        raise SystemExit(f"check_split: the unsplit link has {len(before.pieces)} pieces of {obj}'s {args.section}")
    differences, compared = [], 0
    old_start = before.pieces[0][0]
    whole_before = before.instructions(old_start, before.pieces[0][1])
    names = Names(args.original, args.section)
    by_offset = {a - old_start: (mn, before.normal(ops, names)) for a, mn, ops in whole_before}
    for start, size, old in after.pieces:
        for address, mnemonic, operands in after.instructions(start, size):
            offset = old + address - start
            expected = by_offset.get(offset)
            got = (mnemonic, after.normal(operands, names))
            compared += 1
            if expected != got and len(differences) < 40:
                differences.append(f"old+{offset:#x}: unsplit {expected}, split {got}")
            elif expected != got:
                differences.append(None)
    words, skipped, unmatched = check_data(args.original, args.section, before, after, differences)
    print(f"check_split: {compared} instructions compared in {len(after.pieces)} pieces, {words} words of data "
          f"pointing into the section; not compared: {skipped} in .eh_frame (lld rewrites it), {unmatched} in "
          f"sections the map cannot tell apart by name; {len(differences)} differ")
    for d in differences:
        if d:
            print("  " + d)
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
