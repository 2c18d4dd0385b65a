"""The split's checker, call frame information: lld rewrites `.eh_frame` (merges CIEs, drops the
FDEs of sections --gc-sections removed, relocates each FDE's start), so the two links are
compared after parsing it. Every FDE whose start lies in the old section must cover the same
range of old offsets in both links and carry the same CFI: its CIE's alignment factors,
return register, augmentation and initial instructions, and its own instructions. An unwinder
that reads a wrong FDE walks a wrong stack: a crash report, or a backtrace that lies."""

import struct

from elf_file import ElfFile

FORMATS = {0x02: ("<H", 2), 0x03: ("<I", 4), 0x04: ("<Q", 8), 0x0A: ("<h", 2), 0x0B: ("<i", 4),
           0x0C: ("<q", 8), 0x00: ("<Q", 8)}
DW_EH_PE_omit, DW_EH_PE_pcrel, DW_EH_PE_indirect = 0xFF, 0x10, 0x80


def uleb(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def sleb(data, at):
    value, end = uleb(data, at)
    if data[end - 1] & 0x40:
        value -= 1 << (7 * (end - at))
    return value, end


def pointer(data, at, encoding, base):
    """The value of an encoded pointer at data[at] (the section starts at address base)."""
    if encoding & 0x0F == 0x01:
        value, end = uleb(data, at)
    elif encoding & 0x0F == 0x09:
        value, end = sleb(data, at)
    elif encoding & 0x0F in FORMATS:
        fmt, size = FORMATS[encoding & 0x0F]
        value, end = struct.unpack_from(fmt, data, at)[0], at + size
    else:
        raise ValueError(f"pointer encoding {encoding:#x} not handled")
    if encoding & 0x70 == DW_EH_PE_pcrel:
        value += base + at
    elif encoding & 0x70:
        raise ValueError(f"pointer application {encoding & 0x70:#x} not handled")
    return value, end


class CIE:
    def __init__(self, data, at, end, base):
        version = data[at]
        nul = data.index(b"\0", at + 1)
        self.augmentation = data[at + 1: nul].decode()
        at = nul + 1
        code_align, at = uleb(data, at)
        data_align, at = sleb(data, at)
        if version == 1:
            return_register, at = data[at], at + 1
        else:
            return_register, at = uleb(data, at)
        self.fde_encoding, self.lsda_encoding, personality = 0, DW_EH_PE_omit, None
        if self.augmentation.startswith("z"):
            length, at = uleb(data, at)
            body_end, p = at + length, at
            for letter in self.augmentation[1:]:
                if letter == "R":
                    self.fde_encoding, p = data[p], p + 1
                elif letter == "L":
                    self.lsda_encoding, p = data[p], p + 1
                elif letter == "P":
                    # Only whether there is one: the routine lies outside the split section.
                    personality = data[p]
                    _, p = pointer(data, p + 1, data[p] & ~DW_EH_PE_indirect, base)
            at = body_end
        self.key = (version, self.augmentation, code_align, data_align, return_register,
                    self.fde_encoding, self.lsda_encoding, personality, bytes(data[at:end]))


def frame_descriptions(path):
    """(start address, length, CFI key) of every FDE in a linked binary's .eh_frame."""
    elf = ElfFile(path)
    section = elf.named(".eh_frame")
    if len(section) != 1:
        raise ValueError(f"{path}: {len(section)} sections named .eh_frame")
    base, data = section[0].addr, elf.contents(section[0])
    cies, found, at = {}, [], 0
    while at + 4 <= len(data):
        length, = struct.unpack_from("<I", data, at)
        if length == 0:
            break
        if length == 0xFFFFFFFF:
            raise ValueError(f"{path}: 64-bit .eh_frame records are not handled")
        body, end = at + 4, at + 4 + length
        cie_pointer, = struct.unpack_from("<I", data, body)
        if cie_pointer == 0:
            cies[at] = CIE(data, body + 4, end, base)
        else:
            cie = cies[body - cie_pointer]
            start, p = pointer(data, body + 4, cie.fde_encoding, base)
            size, p = pointer(data, p, cie.fde_encoding & 0x0F, base)
            lsda = None
            if cie.augmentation.startswith("z"):
                length_of_augmentation, p = uleb(data, p)
                if cie.lsda_encoding != DW_EH_PE_omit and length_of_augmentation:
                    lsda = "present"  # Swift.o has no .gcc_except_table; its presence is compared
                p += length_of_augmentation
            found.append((start, size, (cie.key, lsda, bytes(data[p:end]))))
        at = end
    return found


def covering(layout):
    """Old offset range → CFI of every FDE that starts in the old section, and the FDEs whose
    range runs out of the piece it starts in (an unwinder would read them for other code)."""
    found, crossing = {}, []
    for start, size, key in frame_descriptions(layout.binary):
        old = layout.old_offset(start)
        if old is None:
            continue
        if size and layout.old_offset(start + size - 1) != old + size - 1:
            crossing.append((old, size))
        found.setdefault((old, size), []).append(key)
    return found, crossing


def check_eh_frame(before, after, differences):
    """Compares the FDEs of the old section in both links; returns (compared, dropped): the FDEs
    compared and those of code the split link left out (--gc-sections drops unused chunks)."""
    unsplit, crossing_unsplit = covering(before)
    split, crossing_split = covering(after)
    for old, size in crossing_unsplit + crossing_split:
        differences.append(f".eh_frame: the FDE for old+{old:#x} ({size} bytes) runs out of its piece")
    compared = dropped = 0
    for place, keys in sorted(split.items()):
        compared += len(keys)
        if unsplit.get(place) != keys:
            differences.append(f".eh_frame: FDE for old+{place[0]:#x} ({place[1]} bytes): split {summary(keys)}, "
                               f"unsplit {summary(unsplit.get(place))}")
    for place, keys in sorted(unsplit.items()):
        if place in split:
            continue
        if after.address(place[0]) is None:
            dropped += len(keys)
        else:
            differences.append(f".eh_frame: the split link has code at old+{place[0]:#x} but no FDE for its "
                               f"{place[1]} bytes")
    return compared, dropped, sum(len(k) for k in unsplit.values())


def summary(keys):
    if keys is None:
        return "none"
    return "; ".join(f"{k[0][1]!r} CIE, {len(k[2])} bytes of CFI {k[2][:8].hex()}" for k in keys)
