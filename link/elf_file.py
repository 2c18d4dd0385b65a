"""A small reader of x86-64 ELF files for the split's checker: section headers by name, the
symbol table and RELA relocations of a relocatable object, and the bytes at a linked
binary's addresses. Read with struct alone: the checker must run wherever `make release`
does, and Debian's binutils or llvm-readelf are not among the build's packages."""

import struct

SHDR = struct.Struct("<IIQQQQIIQQ")
SYM = struct.Struct("<IBBHQQ")
RELA = struct.Struct("<QQq")
SHT_SYMTAB, SHT_RELA = 2, 4
SHF_EXECINSTR = 0x4
STT_FUNC, STT_SECTION = 2, 3


class Section:
    def __init__(self, index, name, raw):
        (_, self.type, self.flags, self.addr, self.offset, self.size,
         self.link, self.info, self.align, self.entsize) = raw
        self.index, self.name = index, name


class Symbol:
    def __init__(self, name, info, shndx, value, size):
        self.name, self.kind, self.bind = name, info & 0xF, info >> 4
        self.shndx, self.value, self.size = shndx, value, size


class ElfFile:
    def __init__(self, path):
        self.blob = open(path, "rb").read()
        if self.blob[:4] != b"\x7fELF" or self.blob[4] != 2 or self.blob[5] != 1:
            raise ValueError(f"{path}: not a little-endian ELF64 file")
        shoff, = struct.unpack_from("<Q", self.blob, 40)
        shnum, shstrndx = struct.unpack_from("<HH", self.blob, 60)
        raws = [SHDR.unpack_from(self.blob, shoff + i * 64) for i in range(shnum)]
        names_at = raws[shstrndx][4]
        self.sections = [Section(i, self.string(names_at, raw[0]), raw) for i, raw in enumerate(raws)]
        self._symbols = None

    def string(self, table_offset, offset):
        start = table_offset + offset
        return self.blob[start: self.blob.index(b"\0", start)].decode()

    def named(self, name):
        return [s for s in self.sections if s.name == name]

    def contents(self, section):
        return self.blob[section.offset: section.offset + section.size]

    def symbols(self):
        if self._symbols is None:
            table = next(s for s in self.sections if s.type == SHT_SYMTAB)
            names_at = self.sections[table.link].offset
            self._symbols = [Symbol(self.string(names_at, n), info, shndx, value, size)
                             for n, info, _, shndx, value, size in SYM.iter_unpack(self.contents(table))]
        return self._symbols

    def relocation_sections(self):
        """(the section relocated, its rows as (place, symbol index, type, addend))."""
        for s in self.sections:
            if s.type == SHT_RELA:
                rows = [(place, info >> 32, info & 0xFFFFFFFF, addend)
                        for place, info, addend in RELA.iter_unpack(self.contents(s))]
                yield self.sections[s.info], rows


class Image:
    """The bytes at link addresses of a linked binary (its loadable segments)."""
    def __init__(self, path):
        self.blob = open(path, "rb").read()
        phoff, = struct.unpack_from("<Q", self.blob, 32)
        phnum, = struct.unpack_from("<H", self.blob, 56)
        self.segments = []
        for i in range(phnum):
            kind, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", self.blob, phoff + i * 56)
            if kind == 1:
                self.segments.append((vaddr, filesz, offset))

    def bytes_at(self, address, size):
        for vaddr, filesz, offset in self.segments:
            if vaddr <= address and address + size <= vaddr + filesz:
                return self.blob[offset + address - vaddr: offset + address - vaddr + size]
        return None

    def word(self, address, size):
        raw = self.bytes_at(address, size)
        return None if raw is None else int.from_bytes(raw, "little", signed=size == 4)
