import CSQLite
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// A ledger entry follows the renames and attribute changes the watcher saw (issue 36): it
/// takes the file's new form and name, an exchange of two files keeps both entries, and an
/// entry handled again meanwhile is left as it is.
final class LedgerFollowingTests: ScratchDirectoryTestCase {
    private let noon = WallTime(secondsSinceEpoch: 1_800_000_000, nanoseconds: 0)

    private func open() throws -> FileLedger {
        try FileLedger.open(stateDirectory: directory, now: noon).ledger
    }

    private func form(_ inode: UInt64, changed: Int64, modified: Int64 = 1_000) -> FileIdentity {
        FileIdentity(device: 4, inode: inode, size: 10, modifiedNanoseconds: modified, changedNanoseconds: changed,
                     bornNanoseconds: 500 + Int64(inode), generation: inode * 3)
    }

    private func record(_ ledger: FileLedger, _ path: String, _ identity: FileIdentity) throws {
        try ledger.record([LedgerRecord(rule: "r", path: Array(path.utf8), identity: identity, outcome: "ok", handledAt: noon,
                                        run: LedgerRun(runID: "00000000000000\(identity.inode)", startedAt: noon, durationNanoseconds: 7,
                                                       exitCode: 0, signal: nil))])
    }

    private func entry(_ ledger: FileLedger, _ path: String) throws -> FileIdentity? {
        try ledger.entry(rule: "r", path: Array(path.utf8))?.identity
    }

    func testAnAttributeChange_givesTheEntryTheNewForm_unlessItWasHandledAgainMeanwhile() throws {
        let ledger = try open()
        defer { ledger.close() }
        try record(ledger, "a", form(1, changed: 10))
        XCTAssertEqual(try ledger.follow(rule: "r", from: Array("a".utf8), to: Array("a".utf8), known: form(1, changed: 10),
                                         now: form(1, changed: 20, modified: 5)), 1)
        XCTAssertEqual(try entry(ledger, "a"), form(1, changed: 20, modified: 5))
        // Handled again since the change was seen: the newer record stays.
        try record(ledger, "a", form(1, changed: 30))
        XCTAssertEqual(try ledger.follow(rule: "r", from: Array("a".utf8), to: Array("a".utf8), known: form(1, changed: 20, modified: 5),
                                         now: form(1, changed: 40)), 0)
        XCTAssertEqual(try entry(ledger, "a"), form(1, changed: 30))
    }

    func testARename_movesTheEntryWithItsRun_andWhatItReplacedTakesTheOldName() throws {
        let ledger = try open()
        defer { ledger.close() }
        try record(ledger, "x.upload", form(1, changed: 10))
        try record(ledger, "x", form(2, changed: 10))
        try ledger.follow(rule: "r", from: Array("x.upload".utf8), to: Array("x".utf8), known: form(1, changed: 10), now: form(1, changed: 11))
        XCTAssertEqual(try entry(ledger, "x"), form(1, changed: 11))
        XCTAssertEqual(try entry(ledger, "x.upload"), form(2, changed: 10), "the replaced file's entry, for the prune to forget")
        let run = try ledger.recent(rule: "r", limit: 10).first { $0.entry.path == Array("x".utf8) }?.run
        XCTAssertEqual(run?.runID, "000000000000001")
    }

    func testAnExchange_keepsBothEntries_whicheverHalfIsWrittenFirst() throws {
        for firstHalfFirst in [true, false] {
            let ledger = try open()
            try ledger.connection.execute("DELETE FROM file_ledger", [], action: "empty")
            try record(ledger, "left", form(1, changed: 10))
            try record(ledger, "right", form(2, changed: 10))
            // renameat2(RENAME_EXCHANGE): left's file is at right now, and right's at left.
            let halves: [(from: String, to: String, known: FileIdentity, now: FileIdentity)] = [
                ("left", "right", form(1, changed: 10), form(1, changed: 20)),
                ("right", "left", form(2, changed: 10), form(2, changed: 20)),
            ]
            for half in firstHalfFirst ? halves : halves.reversed() {
                try ledger.follow(rule: "r", from: Array(half.from.utf8), to: Array(half.to.utf8), known: half.known, now: half.now)
            }
            XCTAssertEqual(try entry(ledger, "right"), form(1, changed: 20), "first half first: \(firstHalfFirst)")
            XCTAssertEqual(try entry(ledger, "left"), form(2, changed: 20), "first half first: \(firstHalfFirst)")
            XCTAssertEqual(try ledger.count(rule: "r"), 2)
            ledger.close()
        }
    }

    func testARenameOfAnEntryNotInTheKnownForm_changesNothing() throws {
        let ledger = try open()
        defer { ledger.close() }
        try record(ledger, "a", form(1, changed: 10))
        try record(ledger, "b", form(2, changed: 10))
        XCTAssertEqual(try ledger.follow(rule: "r", from: Array("a".utf8), to: Array("b".utf8), known: form(1, changed: 99), now: form(1, changed: 100)), 0)
        XCTAssertEqual(try entry(ledger, "a"), form(1, changed: 10))
        XCTAssertEqual(try entry(ledger, "b"), form(2, changed: 10))
    }
}
