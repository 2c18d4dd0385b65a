#!/usr/bin/env python3
"""Splits the one `.text` of an x86-64 ELF relocatable object into a section per function, so
that lld's --symbol-ordering-file can move each function on its own.

The Swift runtime's Swift.o gives 13,232 functions a section each and leaves 12,675 in one
1.5 MiB `.text`. The daemon runs 504 of them (111 KiB), spread over every 64 KiB fault-around
window of that section, so all of it is resident (docs/measurements/idle-memory.md, "The code
that stays"). This tool cuts the section at each function symbol:

- chunk 0 stays in the original section; every other chunk becomes a new `.text.split`
  section with its relocations in a new `.rela.text.split`, and a local symbol at its start;
- symbols and relocations that named the old section are moved to the chunk they point into;
- references from one function to another that the assembler resolved without a relocation
  (calls, jumps, RIP-relative operands: found in `llvm-objdump -d -r`) get an
  R_X86_64_PC32 relocation to the target chunk's symbol;
- chunks that a short (8-bit) jump, or code falling off its end, ties to the next one are
  kept together, since no relocation can follow them apart.

It refuses (exit status 2, nothing written) anything it does not understand: a relocation type
against the section it cannot place, a displacement it cannot find in its instruction, debug
sections, groups. `make release` then links the runtime as it came.

    split_text.py IN.o OUT.o [--section .text] [--stats] [--mutate KIND]

The same input gives the same bytes. `make release` runs it (link/prepare_split.sh) and links
the result through link/ld_split.py, which links the daemon with the object as it came too and
runs link/check_split.py on the two (docs/measurements/idle-memory.md). --mutate makes the
wrong splits Tests/link/split_mutations.py proves the checker catches."""

import argparse
import bisect
import re
import struct
import subprocess
import sys

SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_GROUP = 2, 3, 4, 17
SHT_LLVM_ADDRSIG = 0x6FFF4C03
SHF_ALLOC, SHF_EXECINSTR, SHF_INFO_LINK = 0x2, 0x4, 0x40
STT_FUNC, STT_SECTION = 2, 3
STB_LOCAL = 0
R_X86_64_64, R_X86_64_PC32, R_X86_64_PLT32, R_X86_64_32S = 1, 2, 4, 11
SHDR = struct.Struct("<IIQQQQIIQQ")
SYM = struct.Struct("<IBBHQQ")
RELA = struct.Struct("<QQq")


class Refused(Exception):
    pass


class Section:
    def __init__(self, index, raw):
        (self.name, self.type, self.flags, self.addr, self.offset, self.size,
         self.link, self.info, self.align, self.entsize) = SHDR.unpack(raw)
        self.index = index
        self.data = None  # replaced contents, or None to keep the original bytes

    def pack(self):
        return SHDR.pack(self.name, self.type, self.flags, self.addr, self.offset, self.size,
                         self.link, self.info, self.align, self.entsize)


def read_elf(blob):
    if blob[:4] != b"\x7fELF" or blob[4] != 2 or blob[5] != 1 or struct.unpack_from("<H", blob, 16)[0] != 1:
        raise Refused("not a little-endian ELF64 relocatable object")
    if struct.unpack_from("<H", blob, 18)[0] != 62:
        raise Refused("not x86-64")
    shoff = struct.unpack_from("<Q", blob, 40)[0]
    shnum, shstrndx = struct.unpack_from("<HH", blob, 60)
    if shnum == 0 or shstrndx == 0xFFFF:
        raise Refused("extended section numbering")
    sections = [Section(i, blob[shoff + i * 64: shoff + (i + 1) * 64]) for i in range(shnum)]
    return sections, shstrndx


def c_string(blob, offset):
    return blob[offset: blob.index(b"\0", offset)].decode()


def disassembly(path, section):
    """(offset, length, target, has_relocation, mnemonic) of each instruction that names a
    target, and the offset → (start, length) of every instruction, from llvm-objdump."""
    out = subprocess.run(["llvm-objdump", "-d", "-r", f"--section={section}", path],
                         capture_output=True, text=True, check=True).stdout
    instruction = re.compile(r"^\s+([0-9a-f]+):\s+((?:[0-9a-f]{2} ?)+?)\s*\t(\S+)\s*(.*)$")
    relocation = re.compile(r"^\s+([0-9a-f]+):\s+R_X86_64_")
    target = re.compile(r"(?:^|# )0x([0-9a-f]+) <")
    starts, lengths, named, relocated = [], [], [], set()
    for line in out.splitlines():
        m = instruction.match(line)
        if m:
            raw = bytes.fromhex(m[2].replace(" ", ""))
            offset, length = int(m[1], 16), len(raw)
            starts.append(offset)
            lengths.append(length)
            t = target.search(m[4])
            named.append((offset, length, int(t[1], 16) if t else None, m[3], raw))
            continue
        m = relocation.match(line)
        if m:
            relocated.add(int(m[1], 16))
    return starts, lengths, named, relocated


class Split:
    """One object being split: its parsed parts, then the chunks and what each step writes."""

    def __init__(self, path, section_name, mutate=None):
        self.path, self.section_name, self.mutate = path, section_name, mutate
        self.blob = bytearray(open(path, "rb").read())
        self.sections, self.shstrndx = read_elf(self.blob)
        head = self.sections[self.shstrndx]
        self.shstr = bytes(self.blob[head.offset: head.offset + head.size])
        self.names = [c_string(self.shstr, s.name) for s in self.sections]
        for s, name in zip(self.sections, self.names):
            if name.startswith(".debug") or s.type == SHT_GROUP:
                raise Refused(f"{name}: debug sections and groups are not handled")
        text = [s for s, n in zip(self.sections, self.names) if n == section_name and s.flags & SHF_EXECINSTR]
        if len(text) != 1:
            raise Refused(f"{len(text)} executable sections named {section_name}")
        self.text = text[0]
        self.rela_text = [s for s in self.sections if s.type == SHT_RELA and s.info == self.text.index]
        symtab = [s for s in self.sections if s.type == SHT_SYMTAB]
        if len(symtab) != 1 or len(self.rela_text) > 1:
            raise Refused("expected one symbol table and at most one relocation section for the text")
        self.symtab, self.strtab = symtab[0], self.sections[symtab[0].link]
        self.symbols = [list(SYM.unpack_from(self.blob, self.symtab.offset + i * 24))
                        for i in range(self.symtab.size // 24)]
        self.first_global = self.symtab.info
        self.section_symbol = next((i for i, s in enumerate(self.symbols)
                                    if s[1] & 0xF == STT_SECTION and s[3] == self.text.index), None)
        self.appended = []

    def choose_cuts(self):
        """Cut at every function symbol, and at every place another section's code calls or
        jumps to through the section symbol (a function the compiler gave no symbol); then
        keep together the chunks that cannot be moved apart."""
        starts, lengths, self.named, self.relocated = disassembly(self.path, self.section_name)
        self.instruction_at = {}
        for start, length in zip(starts, lengths):
            for b in range(start, start + length):
                self.instruction_at[b] = (start, length)
        self.outside = outside_references(self.blob, self.sections, self.section_symbol, self.text)
        called = {addend + 4 for referrer, kind, place, addend in self.outside
                  if self.sections[referrer].flags & SHF_EXECINSTR and kind in (R_X86_64_PC32, R_X86_64_PLT32)}
        if not called <= set(starts):
            raise Refused(f"code elsewhere points into {self.section_name} between instructions")
        cuts = sorted({0} | called | {s[4] for s in self.symbols if s[3] == self.text.index
                                      and s[1] & 0xF == STT_FUNC and s[4] < self.text.size})
        self.cut_set_all = set(cuts)
        self.join = self.joined(cuts)
        self.cuts = [cut for i, cut in enumerate(cuts) if i not in self.join]
        self.bounds = self.cuts + [self.text.size]

    def joined(self, cuts):
        """Chunks that cannot be moved apart: an 8-bit branch between them, code that runs off
        the end of one into the next (its last instruction before padding is not a jump,
        return or trap), or a jump table's entries (relative to the table's start, up to the
        run of entries before them: the target is somewhere from the addend back by that much)."""
        def chunk_of(offset):
            return bisect.bisect_right(cuts, offset) - 1
        join = set()
        for offset, length, target, mnemonic, raw in self.named:
            if target is None or chunk_of(target) == chunk_of(offset) or relocated_inside(self.relocated, offset, length):
                continue
            if displacement_at(raw, target - (offset + length)) is None:
                lo, hi = sorted((chunk_of(target), chunk_of(offset)))
                join.update(range(lo + 1, hi + 1))
        outside_runs = runs_of_entries(self.outside)
        for referrer, kind, place, addend in self.outside:
            if kind == R_X86_64_PC32 and not self.sections[referrer].flags & SHF_EXECINSTR and self.mutate != "jump-tables":
                lo, hi = sorted((chunk_of(addend - place_back(outside_runs, referrer, place)), chunk_of(addend)))
                join.update(range(lo + 1, hi + 1))
        ends = ("ret", "retq", "jmp", "jmpq", "ud2", "hlt")
        last = {}
        for offset, length, target, mnemonic, raw in self.named:
            if not mnemonic.startswith(("nop", "data16", "int3")):
                last[chunk_of(offset)] = mnemonic
        for c in range(len(cuts) - 1):
            if last.get(c, "ret") not in ends:
                join.add(c + 1)
        return join

    def add_chunks(self):
        """A `.text.split` section for every chunk but the first, and a local symbol at its
        start named for its offset in the old section (check_split.py reads it from the map)."""
        cuts, bounds, text = self.cuts, self.bounds, self.text
        self.new_strtab = bytearray(self.blob[self.strtab.offset: self.strtab.offset + self.strtab.size])
        # LLVM writes one string table for section and symbol names.
        self.new_shstr = self.new_strtab if self.strtab.index == self.shstrndx else bytearray(self.shstr)
        split_name = len(self.new_shstr)
        self.new_shstr += b".text.split\0"
        self.rela_name = len(self.new_shstr)
        self.new_shstr += b".rela.text.split\0"
        self.chunk_section = [text.index]
        for c in range(1, len(cuts)):
            s = Section(len(self.sections) + len(self.appended),
                        SHDR.pack(split_name, 1, text.flags, 0, text.offset + cuts[c], bounds[c + 1] - cuts[c], 0, 0, 0, 0))
            s.align = min(text.align, cuts[c] & -cuts[c])
            self.appended.append(s)
            self.chunk_section.append(s.index)
        self.anchors = []
        for c in range(1, len(cuts)):
            name = len(self.new_strtab)
            self.new_strtab += f"__wk_split.{cuts[c]:x}".encode() + b"\0"
            self.anchors.append([name, (STB_LOCAL << 4) | STT_FUNC, 0, self.chunk_section[c], 0, bounds[c + 1] - cuts[c]])
        text.size = bounds[1]

    def new_index(self, i):
        """The anchors go in before the first global, so every later index moves up."""
        return i + len(self.anchors) if i >= self.first_global else i

    def anchor_of(self, c):
        """The symbol at chunk c's start, already in the new numbering."""
        return self.section_symbol if c == 0 else self.first_global + c - 1

    def move_symbols(self):
        for s in self.symbols:
            if s[3] == self.text.index and s[1] & 0xF != STT_SECTION:
                c = chunk_of_final(self.bounds, s[4])
                s[3], s[4] = self.chunk_section[c], s[4] - self.cuts[c]
        if self.section_symbol is None and len(self.cuts) > 1:
            raise Refused("no section symbol for the text")
        self.symbols = self.symbols[:self.first_global] + self.anchors + self.symbols[self.first_global:]

    def place(self, kind, offset, addend, referrer):
        """The offset in the old section that a relocation against its section symbol points at."""
        if kind in (R_X86_64_PC32, R_X86_64_PLT32) and referrer is self.text:
            start, length = self.instruction_at[offset]
            return addend + (start + length - offset)
        if kind in (R_X86_64_PC32, R_X86_64_PLT32) and referrer.flags & SHF_EXECINSTR:
            # A call, jump or lea in another function's section: its displacement is the
            # instruction's last field, so the target is 4 bytes past the addend. Only a
            # function's start is taken on trust.
            if addend + 4 not in self.cut_set_all:  # cannot happen: each is a cut above
                raise Refused(f"{kind} at {offset:#x} of section {referrer.index}: into "
                              f"{self.section_name}+{addend + 4:#x}, not a function's start")
            return addend + 4
        if kind in (R_X86_64_PC32, R_X86_64_64, R_X86_64_32S):
            return addend
        raise Refused(f"relocation type {kind} against {self.section_name} at {offset:#x} of section {referrer.index}")

    def move_relocations(self):
        """Every relocation section: the symbol indices move; those against the section's own
        symbol are sent to the chunk they point into; the text's own go to their chunk."""
        self.per_chunk = [[] for _ in self.cuts]
        self.moved = 0
        for s in self.sections:
            if s.type != SHT_RELA or s.link != self.symtab.index:
                if s.type == SHT_RELA:
                    raise Refused("a relocation section for another symbol table")
                continue
            own = bool(self.rela_text) and s is self.rela_text[0]
            rows = []
            for r in range(s.size // 24):
                offset, info, addend = RELA.unpack_from(self.blob, s.offset + r * 24)
                info, addend = self.moved_relocation(s, offset, info, addend)
                if own:
                    c = chunk_of_final(self.bounds, offset)
                    self.per_chunk[c].append((offset - self.cuts[c], info, addend))
                else:
                    rows.append((offset, info, addend))
            if not own:
                s.data = b"".join(RELA.pack(*row) for row in rows)

    def moved_relocation(self, s, offset, info, addend):
        sym, kind = info >> 32, info & 0xFFFFFFFF
        if sym != self.section_symbol or self.section_symbol is None:
            return (self.new_index(sym) << 32) | kind, addend
        target = self.place(kind, offset, addend, self.sections[s.info])
        c = chunk_of_final(self.bounds, target)
        self.moved += 1
        if self.mutate == "eh-frame" and self.names[s.info] == ".eh_frame" and self.moved % 200 == 0 and c + 1 < len(self.cuts):
            c += 1  # the mutation: an FDE's start resolved against the next chunk
        return (self.anchor_of(c) << 32) | kind, addend - self.cuts[c]

    def resolve_references(self):
        """The references the assembler resolved: a PC32 relocation each, to the target's chunk."""
        self.made = 0
        for offset, length, target, mnemonic, raw in self.named:
            if target is None or chunk_of_final(self.bounds, target) == chunk_of_final(self.bounds, offset):
                continue
            if relocated_inside(self.relocated, offset, length):
                if target != offset + length:
                    raise Refused(f"{mnemonic} at {offset:#x}: a relocation and a resolved displacement in one instruction")
                continue
            at = displacement_at(raw, target - (offset + length))
            if at is None:
                raise Refused(f"{mnemonic} at {offset:#x}: cannot find its displacement to {target:#x}")
            c, t = chunk_of_final(self.bounds, offset), chunk_of_final(self.bounds, target)
            addend = (target - self.cuts[t]) - (length - at)
            self.made += 1
            if self.mutate == "relocations" and self.made % 500 == 7:
                continue  # the mutation: a reference left as the assembler resolved it
            self.per_chunk[c].append((offset + at - self.cuts[c], (self.anchor_of(t) << 32) | R_X86_64_PC32, addend))
        if self.rela_text:
            self.rela_text[0].data = b"".join(RELA.pack(*row) for row in sorted(self.per_chunk[0]))
        for c in range(1, len(self.cuts)):
            if self.per_chunk[c]:
                s = Section(len(self.sections) + len(self.appended),
                            SHDR.pack(self.rela_name, SHT_RELA, SHF_INFO_LINK, 0, 0, 0, self.symtab.index, self.chunk_section[c], 8, 24))
                s.data = b"".join(RELA.pack(*row) for row in sorted(self.per_chunk[c]))
                self.appended.append(s)

    def write(self, path_out):
        for s in self.sections:
            if s.type == SHT_LLVM_ADDRSIG:
                s.data = encode_addrsig(self.blob, s, self.new_index)
        self.symtab.data = b"".join(SYM.pack(*s) for s in self.symbols)
        self.symtab.info = self.first_global + len(self.anchors)
        self.strtab.data = bytes(self.new_strtab)
        self.sections[self.shstrndx].data = bytes(self.new_shstr)
        everything = self.sections + self.appended
        if len(everything) >= 0xFF00:
            raise Refused(f"{len(everything)} sections: extended numbering is not handled")
        out = bytearray(self.blob)
        for s in everything:
            if s.data is not None:
                while len(out) % 8:
                    out.append(0)
                s.offset, s.size = len(out), len(s.data)
                out += s.data
        while len(out) % 8:
            out.append(0)
        shoff = len(out)
        out += b"".join(s.pack() for s in everything)
        struct.pack_into("<Q", out, 40, shoff)
        struct.pack_into("<H", out, 60, len(everything))
        open(path_out, "wb").write(out)


def split(path_in, path_out, section_name, stats, mutate=None):
    work = Split(path_in, section_name, mutate)
    work.choose_cuts()
    work.add_chunks()
    work.move_symbols()
    work.move_relocations()
    work.resolve_references()
    work.write(path_out)
    if stats:
        print(f"split_text: {len(work.cuts)} chunks of {section_name} ({len(work.join)} cuts kept together), "
              f"{work.moved} relocations moved to their chunk, {work.made} made for references the assembler resolved")


def outside_references(blob, sections, section_symbol, text):
    """(referring section, type, place, addend) of every relocation in another section against
    the text's section symbol."""
    found = []
    for s in sections:
        if s.type != SHT_RELA or s.info == text.index or section_symbol is None:
            continue
        for r in range(s.size // 24):
            offset, info, addend = RELA.unpack_from(blob, s.offset + r * 24)
            if info >> 32 == section_symbol:
                found.append((s.info, info & 0xFFFFFFFF, offset, addend))
    return found


def runs_of_entries(outside):
    """For each (section, place) of a 32-bit PC-relative entry: the place where its run of
    entries 4 bytes apart starts."""
    places = {}
    for referrer, kind, place, addend in outside:
        if kind == R_X86_64_PC32:
            places.setdefault(referrer, set()).add(place)
    start = {}
    for referrer, found in places.items():
        for place in sorted(found):
            start[(referrer, place)] = start.get((referrer, place - 4), place)
    return start


def place_back(runs, referrer, place):
    return place - runs[(referrer, place)]


def relocated_inside(relocated, offset, length):
    return any(b in relocated for b in range(offset, offset + length))


def displacement_at(raw, displacement):
    """Where in the instruction's bytes its 32-bit displacement is, if exactly one place holds it."""
    places = [p for p in range(1, len(raw) - 3) if struct.unpack_from("<i", raw, p)[0] == displacement]
    return places[0] if len(places) == 1 else None


def chunk_of_final(bounds, offset):
    return bisect.bisect_right(bounds, offset) - 1 if offset < bounds[-1] else len(bounds) - 2


def encode_addrsig(blob, section, new_index):
    values, value, shift, out = [], 0, 0, bytearray()
    for byte in blob[section.offset: section.offset + section.size]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            values.append(value)
            value, shift = 0, 0
    for v in values:
        v = new_index(v)
        while True:
            byte = v & 0x7F
            v >>= 7
            out.append(byte | (0x80 if v else 0))
            if not v:
                break
    return bytes(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--section", default=".text")
    parser.add_argument("--stats", action="store_true")
    parser.add_argument("--mutate", choices=("relocations", "eh-frame", "jump-tables"),
                        help="for the checker's tests (Tests/link): drop 1 in 500 of the relocations written for "
                             "resolved references, resolve 1 in 200 of the FDE starts against the next chunk, or "
                             "let jump tables' runs of entries be cut apart")
    args = parser.parse_args()
    try:
        split(args.input, args.output, args.section, args.stats, args.mutate)
    except Refused as refusal:
        print(f"split_text: {args.input}: not split: {refusal}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
