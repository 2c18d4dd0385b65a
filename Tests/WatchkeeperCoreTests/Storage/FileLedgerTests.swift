import CSQLite
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// The ledger on real SQLite files and real directory trees in a temporary directory.
/// Damage is made by hand: random bytes, truncation, a directory in the file's place.
final class FileLedgerTests: ScratchDirectoryTestCase {
    private var databasePath: String { directory + "/" + StateDatabase.fileName }
    private let noon = WallTime(secondsSinceEpoch: 1_800_000_000, nanoseconds: 123_000_000)

    private func open() throws -> FileLedger {
        let opened = try FileLedger.open(stateDirectory: directory, now: noon)
        XCTAssertNil(opened.rebuilt)
        return opened.ledger
    }

    private func identity(_ inode: UInt64, size: Int64 = 7) -> FileIdentity {
        FileIdentity(device: 0xFFFF_FFFF_0000_0001, inode: inode, size: size, modifiedNanoseconds: 1_800_000_000_123_456_789)
    }

    private func record(_ rule: String, _ path: String, inode: UInt64 = 1, outcome: String = "ok", at seconds: Int64 = 1_800_000_000) -> LedgerRecord {
        LedgerRecord(rule: rule, path: Array(path.utf8), identity: identity(inode), outcome: outcome,
                     handledAt: WallTime(secondsSinceEpoch: seconds, nanoseconds: 5))
    }

    private func paths(_ ledger: FileLedger, rule: String) throws -> [String] {
        try query("SELECT path FROM file_ledger WHERE rule = '\(rule)' ORDER BY path")
    }

    /// The ledger's own rows, read as another process would; a missing file is created empty.
    private func query(_ sql: String, column: Int32 = 0) throws -> [String] {
        try queryRows(sql, database: databasePath, column: column, flags: SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
    }

    // MARK: - Recording and reading

    func testRecord_roundTripsBinaryPathsAndIdentity_perRule_andSurvivesReopening() throws {
        let path: [UInt8] = [0x2d, 0x72, 0x66, 0x0a, 0xff, 0x2f, 0x78]
        let handledAt = WallTime(secondsSinceEpoch: 1_800_000_000, nanoseconds: 999)
        do {
            let ledger = try open()
            XCTAssertNil(try ledger.entry(rule: "inbox", path: path))
            try ledger.record([
                LedgerRecord(rule: "inbox", path: path, identity: identity(42), outcome: "ok", handledAt: handledAt),
                LedgerRecord(rule: "other", path: path, identity: identity(42), outcome: "ok", handledAt: handledAt),
            ])
            ledger.close()
        }
        let reopened = try open()
        defer { reopened.close() }
        XCTAssertEqual(try reopened.entry(rule: "inbox", path: path),
                       LedgerEntry(path: path, identity: identity(42), outcome: "ok", handledAt: handledAt))
        XCTAssertNil(try reopened.entry(rule: "inbox", path: Array(path.dropLast())), "paths are compared byte for byte")
        let failed = LedgerRecord(rule: "inbox", path: path, identity: identity(43, size: 8), outcome: "failed", handledAt: noon)
        try reopened.record([failed])
        XCTAssertEqual(try reopened.entry(rule: "inbox", path: path),
                       LedgerEntry(path: path, identity: identity(43, size: 8), outcome: "failed", handledAt: noon),
                       "a later handling replaces the entry")
        XCTAssertEqual(try reopened.count(rule: "inbox"), 1)
        XCTAssertEqual(try reopened.count(rule: "other"), 1)
        XCTAssertEqual(try reopened.count(rule: "never"), 0)
    }

    /// `watchkeeper history WATCH`: newest first, with the run that handled each file; a
    /// handling without a run (written before schema 4) reads back without one.
    func testRecent_listsTheNewestHandlingsFirst_withTheirRuns() throws {
        let ledger = try open()
        defer { ledger.close() }
        let run = LedgerRun(runID: "00000000000000aa", startedAt: noon, durationNanoseconds: 1_500_000, exitCode: nil, signal: 15)
        try ledger.record([
            record("inbox", "old", inode: 1, at: 1_800_000_000),
            LedgerRecord(rule: "inbox", path: Array("new".utf8), identity: identity(2), outcome: "expired",
                         handledAt: WallTime(secondsSinceEpoch: 1_800_000_100, nanoseconds: 0), run: run),
            record("other", "elsewhere", inode: 3, at: 1_800_000_200),
        ])
        let recent = try ledger.recent(rule: "inbox", limit: 10)
        XCTAssertEqual(recent.map { String(decoding: $0.entry.path, as: UTF8.self) }, ["new", "old"])
        XCTAssertEqual(recent[0].run, run)
        XCTAssertNil(recent[1].run)
        XCTAssertEqual(try ledger.recent(rule: "inbox", limit: 1).count, 1)
    }

    /// After a burst the daemon gives the ledger's page cache back rather than keep the pages
    /// the burst touched for its whole life.
    func testReleaseMemory_givesBackThePageCacheABurstFilled_andTheLedgerStillReads() throws {
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record((0 ..< 10_000).map { record("inbox", "file-\($0)", inode: UInt64($0)) })
        let filled = ledger.cacheBytes
        XCTAssertGreaterThan(filled, 256 * 1024, "10,000 entries fill more than a few pages")
        ledger.releaseMemory()
        XCTAssertLessThan(ledger.cacheBytes, filled / 4)
        XCTAssertEqual(try ledger.count(rule: "inbox"), 10_000)
    }

    func testRecord_aBurstOfTenThousandFiles_commitsOncePerChunk_notOncePerFile() throws {
        let ledger = try open()
        defer { ledger.close() }
        let burst = (0..<10_000).map { record("burst", "file-\($0)", inode: UInt64($0)) }
        let before = ledger.commits
        try ledger.record(burst)
        XCTAssertEqual(ledger.commits - before, 3, "4,096 records per transaction")
        XCTAssertEqual(try ledger.count(rule: "burst"), 10_000)
        try ledger.record([])
        XCTAssertEqual(ledger.commits - before, 3, "an empty batch commits nothing")
    }

    func testRecord_whenOneRecordCannotBeStored_storesNoneOfTheBatch() throws {
        let ledger = try open()
        defer { ledger.close() }
        let tooLate = LedgerRecord(rule: "r", path: Array("late".utf8), identity: identity(1), outcome: "ok",
                                   handledAt: WallTime(secondsSinceEpoch: .max / 2, nanoseconds: 0))
        XCTAssertThrowsError(try ledger.record([record("r", "fine"), tooLate])) { error in
            XCTAssertTrue("\(error)".hasPrefix("unable to record 2 handled file(s) of watch \"r\" in file ledger \(self.databasePath): "), "\(error)")
            XCTAssertTrue("\(error)".contains("outside the years 1678 to 2262"), "\(error)")
        }
        XCTAssertEqual(try ledger.count(rule: "r"), 0)
    }

    func testEntriesByIdentity_findAFileHandledUnderAnotherName_withinTheRuleOnly_throughTheIndex() throws {
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record([
            record("inbox", "old/name", inode: 77, at: 1_800_000_001),
            record("inbox", "hard/link", inode: 77, at: 1_800_000_002),
            record("inbox", "unrelated", inode: 78),
            record("elsewhere", "old/name", inode: 77),
        ])
        XCTAssertEqual(try ledger.entries(rule: "inbox", identity: identity(77)).map { String(decoding: $0.path, as: UTF8.self) },
                       ["hard/link", "old/name"], "newest handling first")
        XCTAssertEqual(try ledger.entries(rule: "inbox", identity: identity(77, size: 8)), [], "a changed size is another form")
        let plan = try query("EXPLAIN QUERY PLAN " + FileLedger.identityLookup, column: 3)
        XCTAssertTrue(plan.joined().contains("USING INDEX file_ledger_by_identity"), plan.joined())
        // `history WATCH` reads the latest entries through an index in its order: no sort of
        // the rule's whole ledger (0.5 s for 1,000,000 entries without it).
        let recent = try query("EXPLAIN QUERY PLAN " + FileLedger.recentLookup, column: 3).joined()
        XCTAssertTrue(recent.contains("USING INDEX file_ledger_by_recency") && !recent.contains("TEMP B-TREE"), recent)
    }

    func testRecord_keepsTheChangeTimeBirthTimeAndGeneration_andAReusedInodeIsNotFoundAsTheHandledFile() throws {
        let ledger = try open()
        defer { ledger.close() }
        let handled = FileIdentity(device: 3, inode: 9, size: 5, modifiedNanoseconds: 1_000, changedNanoseconds: 2_000,
                                   bornNanoseconds: 1_500, generation: 0xFFFF_0000_1234_5678)
        try ledger.record([LedgerRecord(rule: "r", path: Array("a".utf8), identity: handled, outcome: "ok", handledAt: noon)])
        XCTAssertEqual(try ledger.entry(rule: "r", path: Array("a".utf8))?.identity, handled, "every part reads back")
        // The same inode number, size and mtime in a new incarnation (the old file deleted,
        // the new one extracted with a preserved mtime).
        let reused = FileIdentity(device: 3, inode: 9, size: 5, modifiedNanoseconds: 1_000, changedNanoseconds: 9_000,
                                  bornNanoseconds: 8_500, generation: 0xFFFF_0000_1234_5679)
        XCTAssertEqual(try ledger.entries(rule: "r", identity: reused), [])
        // The same file renamed (its change time moved) is not found by identity: unseen, a
        // rename looks like `cp -p` over it. The watcher follows the renames it sees (follow).
        let renamed = FileIdentity(device: 3, inode: 9, size: 5, modifiedNanoseconds: 1_000, changedNanoseconds: 3_000,
                                   bornNanoseconds: 1_500, generation: 0xFFFF_0000_1234_5678)
        XCTAssertEqual(try ledger.entries(rule: "r", identity: renamed), [])
        // A polled tree has no event to say so, and asks for what looks renamed.
        XCTAssertEqual(try ledger.entries(rule: "r", identity: renamed, renamed: true).count, 1)
        XCTAssertEqual(try ledger.entries(rule: "r", identity: reused, renamed: true), [], "a reused inode is not a rename")
        // A file whose directory moved keeps its change time: found.
        XCTAssertEqual(try ledger.entries(rule: "r", identity: handled).count, 1)
    }

    func testARowWrittenBeforeSchema5_readsWithoutTheNewParts_andMatchesAsItDidBefore() throws {
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record([record("r", "legacy", inode: 12)])
        _ = try query("UPDATE file_ledger SET changed_ns = NULL, born_ns = NULL, generation = NULL")
        let entry = try XCTUnwrap(try ledger.entry(rule: "r", path: Array("legacy".utf8)))
        XCTAssertNil(entry.identity.changedNanoseconds)
        let now = FileIdentity(device: identity(12).device, inode: 12, size: 7, modifiedNanoseconds: identity(12).modifiedNanoseconds,
                               changedNanoseconds: 77, bornNanoseconds: 66, generation: 55)
        XCTAssertTrue(entry.identity.sameFile(as: now))
        XCTAssertEqual(StateDatabase.schemaVersion, 7)
    }

    // MARK: - Moving a directory

    func testMove_rewritesTheDirectoryAndEverythingBelowIt_butNotNamesThatMerelyStartTheSame() throws {
        let ledger = try open()
        defer { ledger.close() }
        var records = ["a", "a/x", "a/b/y", "ab/z", "a0", "a.txt", "other/a/x", "c/d/stale"].map { record("r", $0) }
        records.append(LedgerRecord(rule: "r", path: Array("a/".utf8) + [0xff], identity: identity(9), outcome: "ok", handledAt: noon))
        records.append(record("other-rule", "a/x"))
        try ledger.record(records)

        XCTAssertEqual(try ledger.move(rule: "r", fromPrefix: Array("a".utf8), toPrefix: Array("c/d".utf8)), 4)
        XCTAssertEqual(try paths(ledger, rule: "r").sorted(), ["a.txt", "a0", "ab/z", "c/d", "c/d/b/y", "c/d/x", "c/d/\u{FFFD}", "other/a/x"].sorted())
        XCTAssertNil(try ledger.entry(rule: "r", path: Array("c/d/stale".utf8)), "what was under the destination is gone")
        // paths() shows the raw byte 0xff as U+FFFD; the lookup uses the bytes themselves.
        let moved = try XCTUnwrap(ledger.entry(rule: "r", path: Array("c/d/".utf8) + [0xff]), "raw bytes survive the rewrite")
        XCTAssertEqual(moved.identity, identity(9))
        XCTAssertEqual(try query("SELECT DISTINCT typeof(path) FROM file_ledger"), ["blob"])
        XCTAssertNotNil(try ledger.entry(rule: "other-rule", path: Array("a/x".utf8)), "other rules keep their paths")
        XCTAssertEqual(try ledger.move(rule: "r", fromPrefix: Array("c/d".utf8), toPrefix: Array("c/d".utf8)), 0)
    }

    func testMove_intoItselfOrOfTheRoot_failsWithoutChangingAnything() throws {
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record([record("r", "a/x")])
        for (from, to) in [("a", "a/b"), ("a/b", "a"), ("", "b"), ("a", "")] {
            XCTAssertThrowsError(try ledger.move(rule: "r", fromPrefix: Array(from.utf8), toPrefix: Array(to.utf8))) { error in
                XCTAssertTrue("\(error)".contains("a directory cannot move to the root, from it, into itself or onto its own parent"), "\(error)")
            }
        }
        XCTAssertEqual(try paths(ledger, rule: "r"), ["a/x"])
    }

    /// A directory's move and, before it was committed, one file of it found at its new path
    /// by identity (the watcher submits both): the second finds nothing left at its source
    /// and must not delete what the first put at its destination.
    func testMove_withNothingAtTheSource_changesNothing_notEvenAtTheDestination() throws {
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record([record("r", "a/f", inode: 5)])
        XCTAssertEqual(try ledger.move(rule: "r", fromPrefix: Array("a".utf8), toPrefix: Array("b".utf8)), 1)
        XCTAssertEqual(try ledger.move(rule: "r", fromPrefix: Array("a/f".utf8), toPrefix: Array("b/f".utf8)), 0)
        XCTAssertEqual(try paths(ledger, rule: "r"), ["b/f"])
    }

    // MARK: - Pruning

    /// A prune reads an entry, finds its file gone, and deletes it later (on the state queue,
    /// between other writes): a file handled again at that path meanwhile keeps its entry.
    func testForget_deletesAnEntryOnlyIfItIsStillTheRowThePruneRead() throws {
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record([record("r", "again", inode: 1, at: 1_800_000_000), record("r", "gone", inode: 2, at: 1_800_000_000)])
        let read = try ledger.entriesForPruning(rule: "r", after: nil, limit: 10)
        XCTAssertEqual(read.map { String(decoding: $0.path, as: UTF8.self) }, ["again", "gone"])
        try ledger.record([record("r", "again", inode: 3, at: 1_800_000_100)])
        let removed = try ledger.connection.transaction("forget") { () throws(SQLiteError) -> Int in
            try ledger.forgetInTransaction(rule: "r", read[...])
        }
        XCTAssertEqual(removed, 1)
        XCTAssertEqual(try paths(ledger, rule: "r"), ["again"])
        XCTAssertEqual(try ledger.entry(rule: "r", path: Array("again".utf8))?.identity, identity(3))
    }

    func testPruneMissingUnder_removesOnlyEntriesWhoseFileIsGone() throws {
        let root = directory + "/tree"
        try FileManager.default.createDirectory(atPath: root + "/kept-dir", withIntermediateDirectories: true)
        XCTAssertTrue(FileManager.default.createFile(atPath: root + "/present", contents: Data()))
        XCTAssertTrue(FileManager.default.createFile(atPath: root + "/kept-dir/inner", contents: Data()))
        XCTAssertTrue(FileManager.default.createFile(atPath: root + "/not-a-dir", contents: Data()))
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record(["present", "kept-dir/inner", "gone", "gone-dir/file", "not-a-dir/below"].map { record("r", $0) } + [record("s", "gone")])

        XCTAssertEqual(try ledger.prune(rule: "r", missingUnder: Array(root.utf8)), .pruned(removed: 3, kept: 2))
        XCTAssertEqual(try paths(ledger, rule: "r"), ["kept-dir/inner", "present"])
        XCTAssertEqual(try ledger.count(rule: "s"), 1, "only the named rule is pruned")
    }

    func testPruneMissingUnder_aMissingRoot_removesNothing() throws {
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record([record("r", "a"), record("r", "b")])
        XCTAssertEqual(try ledger.prune(rule: "r", missingUnder: Array((directory + "/unmounted").utf8)), .rootUnavailable(errorNumber: ENOENT))
        XCTAssertTrue(FileManager.default.createFile(atPath: directory + "/a-file", contents: Data()))
        XCTAssertEqual(try ledger.prune(rule: "r", missingUnder: Array((directory + "/a-file").utf8)), .rootUnavailable(errorNumber: ENOTDIR))
        XCTAssertEqual(try ledger.count(rule: "r"), 2)
    }

    func testPruneKeepingOnly_deletesWhatTheCallerRejects_inChunks() throws {
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record((0..<1_200).map { record("r", "f\($0)") })
        let before = ledger.commits
        let removed = try ledger.prune(rule: "r") { path in path.last.map { $0 != UInt8(ascii: "7") } ?? true }
        XCTAssertEqual(removed, 120)
        XCTAssertEqual(ledger.commits - before, 1)
        XCTAssertEqual(try ledger.count(rule: "r"), 1_080)
    }

    // MARK: - Stopping and the WAL

    func testCheckpoint_leavesTheWALEmpty_forACleanStop() throws {
        let ledger = try open()
        defer { ledger.close() }
        try ledger.record((0..<2_000).map { record("r", "file-\($0)") })
        var info = stat()
        XCTAssertEqual(stat(databasePath + "-wal", &info), 0)
        XCTAssertGreaterThan(info.st_size, 0)
        XCTAssertFalse(try ledger.checkpoint().busy)
        XCTAssertEqual(stat(databasePath + "-wal", &info), 0)
        XCTAssertEqual(info.st_size, 0)
    }
}
