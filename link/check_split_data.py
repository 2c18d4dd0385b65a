"""The split's checker, data: every word of the object's data that a relocation against the old
section's symbol points into it must point at the same old offset in both links, and every
jump-table entry must send its jump to the same old offset.

A jump table's entry is `.long .LBB - .LJTI`: the assembler writes R_X86_64_PC32 against the
section with addend (target + place - table start), and the code adds the table's address to
the entry. So the relocation alone can be right while the jump is wrong: when the target and
that addend fell in chunks the split moved apart. The table's start is the offset the function's
`lea` takes (its relocation against the table's section, addend + 4).

Swift.o has 1,704 input sections all named `.rodata` (and many of each `swift5_*` name); a
link map cannot tell them apart by name, but it lists the symbols each one holds, and each of
them holds a symbol no other section of its name has."""

import bisect

from elf_file import ElfFile, Image, SHF_EXECINSTR, STT_FUNC, STT_SECTION

R_X86_64_64, R_X86_64_PC32 = 1, 2


def unique_symbols(obj):
    """Section index → names of its symbols that no other section of its name defines."""
    owners = {}
    for s in obj.symbols():
        if s.kind != STT_SECTION and 0 < s.shndx < len(obj.sections) and s.name:
            owners.setdefault((obj.sections[s.shndx].name, s.name), set()).add(s.shndx)
    found = {}
    for (_, name), indices in owners.items():
        if len(indices) == 1:
            found.setdefault(next(iter(indices)), []).append(name)
    return found


def locate(section, entries, unique):
    """The address of the object's section in a link, from the map's entries for the object:
    (name, address, size, symbols listed under it)."""
    same_name = [e for e in entries if e[0] == section.name]
    if len(same_name) == 1:
        found = same_name
    else:
        names = set(unique.get(section.index, ()))
        found = [e for e in same_name if names & e[3]]
    if len(found) == 1 and found[0][2] == section.size:
        return found[0][1]
    return None


def table_starts(obj, text):
    """Section index → {offset the old section's code takes the address of: the functions that
    take it}, and the function an old offset is in."""
    symbols = obj.symbols()
    functions = sorted({s.value for s in symbols if s.shndx == text.index and s.kind == STT_FUNC})

    def function_of(offset):
        i = bisect.bisect_right(functions, offset) - 1
        return functions[i] if i >= 0 else -1
    starts = {}
    for section, rows in obj.relocation_sections():
        if section.index != text.index:
            continue
        for place, sym, kind, addend in rows:
            target = symbols[sym]
            if kind == R_X86_64_PC32 and target.kind == STT_SECTION and target.shndx != text.index:
                starts.setdefault(target.shndx, {}).setdefault(addend + 4, set()).add(function_of(place))
    return starts, function_of


def words_into(obj, text):
    """(section, place, type, old offset S + A, table start or None) of every relocation in a
    data section against the old section's symbol, and (section, place, type, symbol name) of
    those against one of its functions' symbols."""
    symbols = obj.symbols()
    starts, function_of = table_starts(obj, text)
    words, by_name = [], []
    for section, rows in obj.relocation_sections():
        if section.flags & SHF_EXECINSTR or section.name == ".eh_frame":
            continue
        runs = {}
        for place, sym, kind, addend in sorted(rows):
            if symbols[sym].shndx == text.index and kind == R_X86_64_PC32:
                runs[place] = runs.get(place - 4, place)
        tables = sorted(starts.get(section.index, {}))
        for place, sym, kind, addend in rows:
            target = symbols[sym]
            if target.shndx != text.index:
                continue
            if target.kind != STT_SECTION:
                by_name.append((section, place, kind, target.name, addend))
                continue
            table = None
            i = bisect.bisect_right(tables, place) - 1
            if kind == R_X86_64_PC32 and i >= 0 and tables[i] >= runs[place]:
                start = tables[i]
                if function_of(addend - (place - start)) in starts[section.index][start]:
                    table = start
            words.append((section, place, kind, addend, table))
    return words, by_name


class Link:
    """One link's bytes, where it put the object's sections, and its function symbols."""
    def __init__(self, layout, unique):
        self.layout, self.unique = layout, unique
        self.image = Image(layout.binary)
        self.placed, self.functions = {}, None

    def base(self, section):
        if section.index not in self.placed:
            self.placed[section.index] = locate(section, self.layout.entries, self.unique)
        return self.placed[section.index]

    def names_at(self, address):
        if self.functions is None:
            self.functions = {}
            for s in ElfFile(self.layout.binary).symbols():
                if s.kind == STT_FUNC:
                    self.functions.setdefault(s.value, set()).add(s.name)
        return self.functions.get(address, set())


def check_data(obj, text, names, before, after, differences):
    """Returns (words compared, jump-table entries among them, words naming a function by its
    symbol compared, words in sections no map entry could be found for)."""
    unique = unique_symbols(obj)
    words, by_name = words_into(obj, text)
    links = (Link(before, unique), Link(after, unique))
    compared = entries = unplaced = 0
    for section, place, kind, addend, table in words:
        bases = [link.base(section) for link in links]
        if None in bases:
            unplaced += 1
            differences.append(f"{section.name} (section {section.index}) +{place:#x}: not found in "
                               f"{'the unsplit' if bases[0] is None else 'the split'} link's map")
            continue
        compared += 1
        entries += table is not None
        expected = (addend, None if table is None else addend - (place - table))
        for label, link, base in zip(("unsplit", "split"), links, bases):
            got = read_word(link.layout, link.image, base, place, kind, table)
            if got != expected:
                what = "jump-table entry" if table is not None else f"type {kind}"
                differences.append(f"{section.name} (section {section.index}) +{place:#x} ({what}): "
                                   f"expected {shown(expected, table)}, {label} link {shown(got, table)}")
    named, missing = check_named(by_name, links, names, differences)
    return compared, entries, named, unplaced + missing


def check_named(by_name, links, names, differences):
    """Words that name a function of the old section by its symbol: the same function in both
    links. A weak one may be another object's copy in one of them (the archive's Swift.o loads
    after the daemon's objects, the split object before them), so it is compared by name."""
    compared = missing = 0
    for section, place, kind, name, addend in by_name:
        bases = [link.base(section) for link in links]
        if None in bases:
            missing += 1
            differences.append(f"{section.name} (section {section.index}) +{place:#x}: not found in a link's map")
            continue
        compared += 1
        expected = names.canonical.get(name, name)
        for label, link, base in zip(("unsplit", "split"), links, bases):
            target = raw_target(link.image, base + place, kind)
            old = None if target is None else link.layout.old_offset(target - addend)
            if old is not None:
                got = {names.by_offset.get(old, f"old+{old:#x}")}
            else:
                got = {names.canonical.get(n, n) for n in link.names_at(None if target is None else target - addend)}
            if expected not in got:
                differences.append(f"{section.name} (section {section.index}) +{place:#x} -> {name}: "
                                   f"{label} link names {sorted(got)[:3] or 'nothing'}")
    return compared, missing


def raw_target(image, address, kind):
    if kind == R_X86_64_PC32:
        value = image.word(address, 4)
        return None if value is None else address + value
    if kind == R_X86_64_64:
        return image.word(address, 8)
    return None


def shown(pair, table):
    """(value's old offset, jump's old offset) as text; None is outside the old section."""
    def one(v):
        return f"old+{v:#x}" if isinstance(v, int) else ("outside it" if v is None else v)
    return one(pair[0]) if table is None else f"{one(pair[0])}, jump to {one(pair[1])}"


def read_word(layout, image, base, place, kind, table):
    """(old offset the relocation's value names, old offset a jump through the entry reaches)."""
    target = raw_target(image, base + place, kind)
    if target is None:
        return (f"unreadable (type {kind})", None)
    jump = None if table is None else layout.old_offset(target - place + table)
    return (layout.old_offset(target), jump)
