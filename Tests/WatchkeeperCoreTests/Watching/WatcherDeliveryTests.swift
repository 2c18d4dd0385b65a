import Foundation
import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// The delivery patterns of the integration matrix (Tests/reliability/deliveries.py and
/// tools.py), each a row: the files are real, in a scratch directory, and the events are
/// the ones inotify gives for what the tool does, written by the test one read at a time
/// into a fake backend (FakeWatchBackend); time is a fake clock, the engine a fake that
/// records what was submitted. No daemon, no inotify instance: each row takes milliseconds.
final class WatcherDeliveryTests: XCTestCase {
    struct Row {
        let pattern: String
        var settings: (inout WatchSettings) -> Void = { _ in }
        /// Delivers, reads the events, moves the clock, ends jobs; may check on the way.
        let deliver: (WatcherHarness) -> Void
        /// Every file submitted, in order, by the end.
        let jobs: [String]
    }

    /// A settle window of a scan's find (1 s), with room for a loaded machine: a file a scan
    /// found is admitted once its change time is a window old by the fake wall clock.
    static let scanWait: Duration = .seconds(3)

    static var rows: [Row] { toolRows + overRows + renameRows + timeRows }

    /// The tools of deliveries.py and tools.py that write a file into place.
    static var toolRows: [Row] { [
        Row(pattern: "temporary name, then rename(2) (curl -o x.part, scp)", deliver: { h in
            h.write("x.part", "content")
            h.written("x.part")
            h.expect([], "a temporary name is left out")
            h.rename("x.part", "x.dat")
            h.renamed("x.part", "x.dat", cookie: 7)
        }, jobs: ["x.dat"]),
        Row(pattern: "rsync's temporary .name.XXXXXX, renamed", deliver: { h in
            h.write(".r1.Ab3xYz", "content")
            h.written(".r1.Ab3xYz")
            h.rename(".r1.Ab3xYz", "r1")
            h.renamed(".r1.Ab3xYz", "r1", cookie: 8)
        }, jobs: ["r1"]),
        Row(pattern: "rsync --delay-updates: written in .~tmp~/, renamed into place", settings: { $0.recursive = true }, deliver: { h in
            h.mkdir(".~tmp~")
            h.read(.create.union(.isDirectory), ".~tmp~")
            h.write(".~tmp~/d1", "content")
            h.written(".~tmp~/d1")
            h.rename(".~tmp~/d1", "d1")
            h.renamed(".~tmp~/d1", "d1", cookie: 9)
        }, jobs: ["d1"]),
        Row(pattern: "rsync --inplace and a plain write: the close", deliver: { h in
            h.write("p1", "content")
            h.written("p1")
        }, jobs: ["p1"]),
        Row(pattern: "editor's atomic save, twice: .name.swp renamed over the name", deliver: { h in
            h.write(".doc.txt.swp", "first")
            h.written(".doc.txt.swp")
            h.rename(".doc.txt.swp", "doc.txt")
            h.renamed(".doc.txt.swp", "doc.txt", cookie: 10)
            h.finishAll()
            h.write(".doc.txt.swp", "second")
            h.written(".doc.txt.swp")
            h.rename(".doc.txt.swp", "doc.txt")
            h.renamed(".doc.txt.swp", "doc.txt", cookie: 11)
        }, jobs: ["doc.txt", "doc.txt"]),
    ] }

    /// The tools that write over a handled file, or over its name, and set its times.
    static var overRows: [Row] { [
        Row(pattern: "cp -p over the handled file: same size and mtime, new content", deliver: { h in
            h.write("f", "AAAA")
            h.setTimes("f", modified: 1_000_000_000)
            h.read([(.create, "", "f", 0), (.modify, "", "f", 0), (.closeWrite, "", "f", 0), (.attrib, "", "f", 0)])
            h.finishAll()
            h.tick()
            h.write("f", "BBBB")
            h.setTimes("f", modified: 1_000_000_000)
            // One read after cp ended: the close is seen with the old mtime already set.
            h.read([(.modify, "", "f", 0), (.closeWrite, "", "f", 0), (.attrib, "", "f", 0)])
            h.finishAll()
            h.advance(TrackedChanges.confirmAfter * 2)
        }, jobs: ["f", "f"]),
        Row(pattern: "unzip of new names: closed, then its mtime set (utime): followed, not run again", deliver: { h in
            h.write("member", "content")
            h.setTimes("member", modified: 1_000_000_000)
            h.read([(.create, "", "member", 0), (.modify, "", "member", 0), (.closeWrite, "", "member", 0)])
            h.read(.attrib, "member")
            h.finishAll()
            h.advance(TrackedChanges.confirmAfter * 2)
            h.overflowAndRescan()
        }, jobs: ["member"]),
        Row(pattern: "tar -x over the previous version: unlinked, created anew, its mtime set", deliver: { h in
            h.write("t", "one")
            h.written("t")
            h.finishAll()
            h.remove("t")
            h.write("t", "two")
            h.setTimes("t", modified: 1_000_000_000)
            h.read([(.delete, "", "t", 0), (.create, "", "t", 0), (.modify, "", "t", 0), (.closeWrite, "", "t", 0), (.attrib, "", "t", 0)])
        }, jobs: ["t", "t"]),
        Row(pattern: "the job deleted its file; a new one with the same size and mtime (inode reuse)", deliver: { h in
            h.write("g", "AAAA")
            h.setTimes("g", modified: 1_000_000_000)
            h.written("g")
            h.remove("g")
            h.finishAll()
            h.read(.delete, "g")
            h.tick()
            h.write("g", "BBBB")
            h.setTimes("g", modified: 1_000_000_000)
            h.read([(.create, "", "g", 0), (.modify, "", "g", 0), (.closeWrite, "", "g", 0), (.attrib, "", "g", 0)])
        }, jobs: ["g", "g"]),
    ] }

    /// Files that arrive by a name of their own, and renames of handled files.
    static var renameRows: [Row] { [
        Row(pattern: "O_TMPFILE written, linkat(2) into place, closed under #inode", deliver: { h in
            let inode = h.linkTmpfile("t1", "content")
            h.read(.create, "t1")
            h.expect([], "a linked O_TMPFILE is not whole before its close")
            h.closeTmpfile()
            h.read(.closeWrite, "#\(inode)")
        }, jobs: ["t1"]),
        Row(pattern: "mv from outside the tree", deliver: { h in
            let outside = h.outside("m1", "content")
            h.moveIn(outside, "m1")
            h.read(.movedTo, "m1", cookie: 12)
        }, jobs: ["m1"]),
        Row(pattern: "hard link (ln, cp -l): no close, admitted once unchanged for a scan's window", deliver: { h in
            let outside = h.outside("h1", "content")
            h.link(outside, "h1")
            h.read(.create, "h1")
            h.expect([], "a link waits like a scan's find")
            h.advance(WatcherDeliveryTests.scanWait)
        }, jobs: ["h1"]),
        Row(pattern: "a handled file renamed within the tree is that file, not a new one", deliver: { h in
            h.write("a", "content")
            h.written("a")
            h.finishAll()
            h.rename("a", "b")
            h.renamed("a", "b", cookie: 13)
            h.advance(TrackedChanges.confirmAfter * 2)
            h.overflowAndRescan()
        }, jobs: ["a"]),
        Row(pattern: "out of the root and back: the file may have changed outside, it runs again", deliver: { h in
            h.write("x", "content")
            h.written("x")
            h.finishAll()
            let outside = h.outside("x", "placeholder")
            XCTAssertEqual(Glibc.rename(h.path("x"), outside), 0)
            h.read(.movedFrom, "x", cookie: 20)
            h.moveIn(outside, "x")
            h.read(.movedTo, "x", cookie: 21)
        }, jobs: ["x", "x"]),
        Row(pattern: "moved out of the root while it settles: nothing runs", settings: { $0.settle = .seconds(2) }, deliver: { h in
            h.write("y", "content")
            h.written("y")
            XCTAssertEqual(Glibc.rename(h.path("y"), h.outside("y", "placeholder")), 0)
            h.read(.movedFrom, "y", cookie: 22)
            h.advance(.seconds(3))
        }, jobs: []),
        Row(pattern: "RENAME_EXCHANGE of two handled files: both followed, neither runs again", deliver: { h in
            h.write("left", "L")
            h.write("right", "R")
            h.written("left")
            h.written("right")
            h.finishAll()
            h.exchange("left", "right")
            h.read([(.movedFrom, "", "left", 14), (.movedTo, "", "right", 14), (.movedFrom, "", "right", 15), (.movedTo, "", "left", 15)])
            h.advance(TrackedChanges.confirmAfter * 2)
            h.overflowAndRescan()
        }, jobs: ["left", "right"]),
        Row(pattern: "a directory made and written at once (slow writer): the scan's find and the close are one job",
            settings: { $0.recursive = true }, deliver: { h in
            h.mkdir("x1")
            h.write("x1/big", "part")
            h.read(.create.union(.isDirectory), "x1")
            h.write("x1/big", "part and the rest")
            h.written("x1/big", created: false)
            h.advance(WatcherDeliveryTests.scanWait)
        }, jobs: ["x1/big"]),
        Row(pattern: "a directory of handled files moved within the tree: found handled at the new path",
            settings: { $0.recursive = true }, deliver: { h in
            h.mkdir("d")
            h.read(.create.union(.isDirectory), "d")
            h.write("d/one", "content")
            h.written("d/one")
            h.finishAll()
            h.rename("d", "e")
            h.renamed("d", "e", cookie: 16, directory: true)
            h.advance(WatcherDeliveryTests.scanWait)
        }, jobs: ["d/one"]),
    ] }

    /// Lost events, changes after the job, settle windows, the root going away.
    static var timeRows: [Row] { [
        Row(pattern: "overflow: the tree is rescanned; what changed since runs, what was handled does not", deliver: { h in
            h.write("before", "content")
            h.written("before")
            h.finishAll()
            h.write("lost", "written while events were lost")
            h.overflowAndRescan()
        }, jobs: ["before", "lost"]),
        Row(pattern: "an attribute change of a handled file is followed: a rescan does not run it", deliver: { h in
            h.write("c", "content")
            h.written("c")
            h.finishAll()
            h.chmod("c", 0o600)
            h.read(.attrib, "c")
            h.advance(TrackedChanges.confirmAfter * 2)
            h.overflowAndRescan()
        }, jobs: ["c"]),
        Row(pattern: "a write after the job is new content: the close runs it again", deliver: { h in
            h.write("w", "one")
            h.written("w")
            h.finishAll()
            h.tick()
            h.write("w", "two")
            h.written("w", created: false)
        }, jobs: ["w", "w"]),
        Row(pattern: "a close that changed nothing (renamed into place, then closed) does not run twice", deliver: { h in
            h.write("n", "content")
            h.written("n")
            h.finishAll()
            h.read(.closeWrite, "n")
        }, jobs: ["n"]),
        Row(pattern: "settle 2 s: events within the window make one job, at its end", settings: { $0.settle = .seconds(2) }, deliver: { h in
            h.write("s", "one")
            h.written("s")
            h.advance(.seconds(1))
            h.write("s", "two")
            h.written("s", created: false)
            h.advance(.milliseconds(1_500))
            h.expect([], "the window restarted at the second close")
            h.advance(.seconds(1))
        }, jobs: ["s"]),
        Row(pattern: "a file renamed while it settles: the wait moves to the new name", settings: { $0.settle = .seconds(2) }, deliver: { h in
            h.write("old", "content")
            h.written("old")
            h.rename("old", "new")
            h.renamed("old", "new", cookie: 17)
            h.advance(.seconds(3))
        }, jobs: ["new"]),
        Row(pattern: "the root renamed away: a new directory at its path is watched and caught up", deliver: { h in
            h.write("kept", "content")
            h.written("kept")
            h.finishAll()
            h.renameRoot()
            h.read(.moveSelf, "")
            h.mkdirRoot()
            h.write("arrived", "content")
            h.readParent(.create.union(.isDirectory))
            h.advance(WatcherDeliveryTests.scanWait)
        }, jobs: ["kept", "arrived"]),
    ] }

    func testEveryDeliveryPattern_runsEachNewVersionOnce_underItsFinalName() throws {
        for row in Self.rows {
            let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("wk-deliveries-\(UUID().uuidString.prefix(8))")
            defer { try? FileManager.default.removeItem(at: scratch) }
            let h = try WatcherHarness(scratch: scratch)
            h.start([h.rule("inbox", row.settings)])
            row.deliver(h)
            XCTAssertEqual(h.submitted, row.jobs, row.pattern)
        }
    }
}

/// Renames above the root: the path stops leading to the watched directory while the root
/// itself stays put (`mv /srv/p /srv/p.old; mkdir -p /srv/p/in`).
final class WatcherRootTests: XCTestCase {
    func testTheRootsParentRenamedAway_theOldTreeIsUnwatched_andTheNewRootIsWatchedAndCaughtUp() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("wk-roots-\(UUID().uuidString.prefix(8))")
        let moved = URL(fileURLWithPath: scratch.path + ".old")
        defer {
            try? FileManager.default.removeItem(at: scratch)
            try? FileManager.default.removeItem(at: moved)
        }
        let h = try WatcherHarness(scratch: scratch)
        h.start([h.rule()])
        let parent = scratch.deletingLastPathComponent().path
        XCTAssertEqual(Glibc.rename(scratch.path, moved.path), 0)
        // The parent's own watch (the root's ancestors are watched for this) says it moved.
        h.step { h.backend.read([h.backend.event(.moveSelf, scratch.path, "")]) }
        // The root is lost: its old watches go, and the path is watched for what comes next.
        h.step { h.watcher.rules["inbox"].map { XCTAssertTrue($0.isMissing, "the root is lost") } }
        XCTAssertFalse(h.backend.isWatching(h.root), "the old tree is not watched")
        try FileManager.default.createDirectory(atPath: h.root, withIntermediateDirectories: true)
        h.write("arrived", "content")
        // The nearest directory above that exists is watched for the next missing name.
        h.step { h.backend.read([h.backend.event(.create.union(.isDirectory), parent, scratch.lastPathComponent)]) }
        h.advance(WatcherDeliveryTests.scanWait)
        XCTAssertEqual(h.submitted, ["arrived"])
    }
}
