#!/usr/bin/env python3
"""Writes the seed corpora under Tests/fuzz/<target>/seeds: small valid and nearly valid
inputs for each parser, so libFuzzer starts from the grammar instead of random bytes.
Crashes that fuzzing finds go beside them in Tests/fuzz/<target>/crashes, by hand.
The configuration target also starts from demo/, etc/ and Tests/config-corpus/bad."""
import os, struct

HERE = os.path.dirname(os.path.abspath(__file__))

CRON = ["* * * * *", "*/5 * * * *", "0 3 * * 1-5", "30 2 29 2 *", "0 0 31 4 *", "15,45 */2 1-7 * MON",
        "0 0 * JAN-MAR SUN", "5-55/10 8-18 * * 1,3,5", "0 12 1 * 7", "0 0 13 * FRI", "@daily", "1-60 * * * *",
        "*/0 * * * *", "0 0 L * *", "0 0 * * 8", "  0  0  *  *  *  "]
GLOB = ["*.csv\na.csv", "**/*.json\nx/y/a.json", "incoming/[a-z]?.txt\nincoming/ab.txt", "a/**\na/b/c",
        "[!.]*\n.hidden", "\\*literal\n*literal", "**\n", "a/**/b\na/b", "[]]x\n]x", "[a-]\n-",
        "*a*a*a*a*b\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "é?\né\xff"]
VARLINK = ['{"method":"io.watchkeeper.Control.Status"}', '{"method":"org.varlink.service.GetInfo","parameters":{}}',
           '{"method":"io.watchkeeper.Control.RunTask","parameters":{"name":"backup"},"more":true}',
           '{"method":"io.watchkeeper.Control.Pause","parameters":{"watch":"in\\u0000x","for":"10m"},"oneway":true}',
           '{"method":"a.b","parameters":{"n":[1,-2.5e3,true,null,{"k":"\\ud83d\\ude00"}]}}', '[[[[[[[[[[]]]]]]]]]]', '{"method":1}']


def inotify_record(wd, mask, cookie, name):
    padded = name + b"\0" * (16 - len(name) % 16) if name else b""
    return struct.pack("<iIII", wd, mask, cookie, len(padded)) + padded


INOTIFY = [inotify_record(1, 0x100, 0, b"a.csv"),
           inotify_record(1, 0x40, 7, b"old") + inotify_record(2, 0x80, 7, b"new name\nwith newline"),
           inotify_record(1, 0x4000, 0, b"") + inotify_record(-1, 0x4000, 0, b""),
           inotify_record(3, 0x40000100, 0, b"dir") + struct.pack("<iIII", 3, 2, 0, 4096)]


def fanotify_fid_record(info_type, handle, name=None):
    """A fanotify_event_info_fid record: header, fsid, file_handle, then the name, padded to 4."""
    body = struct.pack("<QIi", 0x1122334455667788, len(handle), 1) + handle
    if name is not None:
        body += name + b"\0"
    body += b"\0" * (-(4 + len(body)) % 4)
    return struct.pack("<BBH", info_type, 0, 4 + len(body)) + body


def fanotify_event(mask, records, pid=42):
    body = b"".join(records)
    return struct.pack("<IBBHQii", 24 + len(body), 3, 0, 24, mask, -1, pid) + body


HANDLE = bytes(range(1, 13))
FANOTIFY = [fanotify_event(0x4000010A, [fanotify_fid_record(2, HANDLE, b"new dir")]),
            fanotify_event(0x40, [fanotify_fid_record(2, HANDLE, b"old")]) + fanotify_event(0x80, [fanotify_fid_record(2, HANDLE, b"new")]),
            fanotify_event(0x4000, [], pid=0) + fanotify_event(0x40000800, [fanotify_fid_record(2, HANDLE, b".")]),
            fanotify_event(0x10000000, [fanotify_fid_record(10, HANDLE, b"a"), fanotify_fid_record(12, HANDLE, b"b"),
                                        fanotify_fid_record(1, HANDLE)]),
            fanotify_event(0x404, [fanotify_fid_record(1, HANDLE)]) + struct.pack("<IBBHQii", 4096, 3, 0, 24, 0x100, -1, 1)]


def tzif(version, transitions, types, footer):
    """A minimal TZif file: one block (v1) or the v1 header, an empty v1 block and a 64-bit block."""
    def block(width):
        fmt = "<q" if width == 8 else "<i"
        body = b"".join(struct.pack(">q" if width == 8 else ">i", t) for t, _ in transitions)
        body += bytes(i for _, i in transitions)
        abbreviations = b""
        records = b""
        for offset, dst, abbreviation in types:
            records += struct.pack(">iBB", offset, dst, len(abbreviations))
            abbreviations += abbreviation + b"\0"
        counts = struct.pack(">6I", 0, 0, 0, len(transitions), len(types), len(abbreviations))
        return b"TZif" + version + b"\0" * 15 + counts + body + records + abbreviations
    if version == b"\0":
        return block(4)
    empty_v1 = b"TZif" + version + b"\0" * 15 + struct.pack(">6I", 0, 0, 0, 0, 1, 1) + struct.pack(">iBB", 0, 0, 0) + b"\0"
    return empty_v1 + block(8) + b"\n" + footer + b"\n"


TZIF = [tzif(b"2", [(-100000, 0), (1_000_000_000, 1)], [(3600, 0, b"CET"), (7200, 1, b"CEST")], b"CET-1CEST,M3.5.0,M10.5.0/3"),
        tzif(b"3", [], [(0, 0, b"UTC")], b"UTC0"),
        tzif(b"\0", [(0, 0)], [(-18000, 0, b"EST")], b""),
        tzif(b"3", [(0, 0)], [(-10800, 0, b"-03")], b"<-03>3<-02>,M3.2.0/-1,J365/25")]

for target, seeds in [("cron", CRON), ("glob", GLOB), ("varlink", VARLINK), ("inotify", INOTIFY), ("fanotify", FANOTIFY), ("tzif", TZIF)]:
    directory = os.path.join(HERE, target, "seeds")
    os.makedirs(directory, exist_ok=True)
    for index, seed in enumerate(seeds):
        data = seed.encode("utf-8", "surrogateescape") if isinstance(seed, str) else seed
        with open(os.path.join(directory, f"{index:02d}"), "wb") as f:
            f.write(data)
