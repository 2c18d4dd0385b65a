#!/usr/bin/env python3
"""Checks a link that used split_text.py's object against the same link with the object as it
came (link/ld_split.py makes both in every release link):

- every instruction of the split section, in both binaries, must name the same target, as a
  function of the old section, an offset in it, or the same symbol outside it;
- every word of the object's data that a relocation points into the section must point at the
  same old offset, and every jump-table entry must jump to the same old offset
  (check_split_data.py); words naming one of its functions by symbol, the same function;
- every FDE that starts in the section must cover the same old range with the same CFI
  (check_split_eh.py).

    check_split.py ORIGINAL.o UNSPLIT_BINARY UNSPLIT.map SPLIT_BINARY SPLIT.map [--section .text]

The maps are lld's -Map of each link; the split object must have the original's file name.
Exit status 1 with the differences listed (the first 40), 0 when none.
Tests/link/split_mutations.py proves each comparison can fail."""

import argparse
import bisect
import os
import re
import subprocess
import sys

from check_split_data import check_data
from check_split_eh import check_eh_frame
from elf_file import ElfFile, SHF_EXECINSTR, STT_FUNC

MAP_LINE = re.compile(r"\s*([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s(.*)$")
INSTRUCTION = re.compile(r"^\s+([0-9a-f]+):\s+(?:[0-9a-f]{2} ?)+?\s*\t(\S+)\s*(.*)$")
# A branch's target, or a RIP-relative operand's address after `# `; not a displacement such as
# `0x6e8a8(%rcx,%r11)`, a constant that may happen to equal an address in one link.
TARGET = re.compile(r"(?:^|# )0x([0-9a-f]+)(?![0-9a-f(])(?: <([^>+]*)(?:\+0x[0-9a-f]+)?>)?")


def pieces(mapfile, obj, section):
    """(address, size, old offset) of each piece of OBJ's section in a link, and OBJ's other input
    sections as (name, address, size, names of the symbols the map lists in it)."""
    found, others, current, entry = [], [], None, None
    with open(mapfile) as f:
        for line in f:
            m = MAP_LINE.match(line)
            if not m:
                continue
            address, size, rest = int(m[1], 16), int(m[2], 16), m[3]
            depth = len(rest) - len(rest.lstrip(" "))
            name = rest.strip()
            if depth == 8:
                current = entry = None
                if name.endswith(f"{obj}):({section})") or name.endswith(f"/{obj}:({section})"):
                    found.append([address, size, 0])
                elif name.endswith(f"{obj}):({section}.split)") or name.endswith(f"/{obj}:({section}.split)"):
                    current = [address, size, None]
                    found.append(current)
                elif f"{obj})" in name or name.split(":(")[0].endswith(f"/{obj}"):
                    entry = (name.split(":(", 1)[-1][:-1], address, size, set())
                    others.append(entry)
            elif depth == 16 and current is not None and current[2] is None and name.startswith("__wk_split."):
                current[2] = int(name.split(".")[1], 16)
            elif depth == 16 and entry is not None:
                entry[3].add(name)
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
    def __init__(self, obj, text):
        aliases = {}
        for symbol in obj.symbols():
            if symbol.kind == STT_FUNC and symbol.shndx == text.index:
                aliases.setdefault(symbol.value, set()).add(symbol.name)
        self.by_offset, self.canonical = {}, {}
        for offset, group in aliases.items():
            chosen = min(group)
            self.by_offset[offset] = chosen
            for alias in group:
                self.canonical[alias] = chosen


class Layout:
    def __init__(self, binary, mapfile, obj, section):
        self.binary = binary
        self.code_low, self.code_high = output_range(mapfile, (".text", ".text.unnamed", ".plt"))
        self.pieces, self.entries = pieces(mapfile, obj, section)
        self.starts = [p[0] for p in self.pieces]
        self.by_old = sorted((p[2], p[0], p[1]) for p in self.pieces)
        self.old_starts = [p[0] for p in self.by_old]

    def old_offset(self, address):
        i = bisect.bisect_right(self.starts, address) - 1
        if i >= 0 and address < self.pieces[i][0] + self.pieces[i][1]:
            return self.pieces[i][2] + address - self.pieces[i][0]
        return None

    def address(self, old):
        """Where the split link put an old offset, or None when it left that code out."""
        i = bisect.bisect_right(self.old_starts, old) - 1
        if i >= 0 and old < self.by_old[i][0] + self.by_old[i][2]:
            return self.by_old[i][1] + old - self.by_old[i][0]
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


def check_instructions(before, after, names, differences):
    """Every instruction of every piece in the split link against the same old offset in the
    unsplit one; returns how many were compared."""
    compared = 0
    old_start = before.pieces[0][0]
    by_offset = {a - old_start: (mn, before.normal(ops, names))
                 for a, mn, ops in before.instructions(old_start, before.pieces[0][1])}
    for start, size, old in after.pieces:
        for address, mnemonic, operands in after.instructions(start, size):
            offset = old + address - start
            expected = by_offset.get(offset)
            got = (mnemonic, after.normal(operands, names))
            compared += 1
            if expected != got:
                differences.append(f"old+{offset:#x}: unsplit {expected}, split {got}")
    return compared


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("original")
    parser.add_argument("unsplit")
    parser.add_argument("unsplit_map")
    parser.add_argument("split")
    parser.add_argument("split_map")
    parser.add_argument("--section", default=".text")
    args = parser.parse_args()
    obj_name = os.path.basename(args.original)
    before = Layout(args.unsplit, args.unsplit_map, obj_name, args.section)
    after = Layout(args.split, args.split_map, obj_name, args.section)
    if len(before.pieces) != 1:
        raise SystemExit(f"check_split: the unsplit link has {len(before.pieces)} pieces of {obj_name}'s {args.section}")
    obj = ElfFile(args.original)
    text = [s for s in obj.named(args.section) if s.flags & SHF_EXECINSTR]
    if len(text) != 1:
        raise SystemExit(f"check_split: {args.original}: {len(text)} executable sections named {args.section}")
    differences = []
    names = Names(obj, text[0])
    instructions = check_instructions(before, after, names, differences)
    words, entries, by_name, unplaced = check_data(obj, text[0], names, before, after, differences)
    fdes, dropped, unsplit_fdes = check_eh_frame(before, after, differences)
    print(f"check_split: {instructions} instructions compared in {len(after.pieces)} pieces; {words} words of "
          f"data pointing into the section ({entries} of them jump-table entries, their jumps compared too; "
          f"{by_name} more name one of its functions: the same function; {unplaced} in sections not found in a map); "
          f"{fdes} FDEs compared ({dropped} of the unsplit link's {unsplit_fdes} cover code the split link "
          f"left out); {len(differences)} differ")
    for d in differences[:40]:
        print("  " + d)
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
