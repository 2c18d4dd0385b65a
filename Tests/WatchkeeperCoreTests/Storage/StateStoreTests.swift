import CSQLite
import Foundation
import Logging
import Synchronization
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// The state file's one writer on real SQLite files. A full disk is made for real with
/// `PRAGMA max_page_count` on the store's connection (SQLite then fails a write that needs
/// a new page with SQLITE_FULL, as on a full file system) and given room by raising it;
/// a lock held too long, by a second connection holding a write transaction.
final class StateStoreTests: ScratchDirectoryTestCase {
    private let owner = SubsystemQueue(name: "test.owner.\(UUIDLess.next())")
    private var store: StateStore!
    private var databasePath: String { directory + "/" + StateDatabase.fileName }
    private let noon = WallTime(secondsSinceEpoch: 1_800_000_000, nanoseconds: 0)

    override func setUpWithError() throws {
        try super.setUpWithError()
        store = try openStore()
    }

    override func tearDownWithError() throws {
        close(store)
        try super.tearDownWithError()
    }

    private func openStore(pendingRowLimit: Int = StateStore.defaultPendingRowLimit) throws -> StateStore {
        let store = StateStore(queue: SubsystemQueue(name: "test.state.\(UUIDLess.next())"), sources: SourceRegistry(),
                               logger: Logger(label: "test"), pendingRowLimit: pendingRowLimit)
        let availability = store.queue.queue.sync { store.open(stateDirectory: directory) }
        guard case .open = availability else {
            XCTFail("\(availability)")
            throw XCTSkip("the store did not open")
        }
        return store
    }

    @discardableResult
    private func close(_ store: StateStore, within budget: Duration = .seconds(5)) -> StateStore.CloseReport? {
        let report = Mutex<StateStore.CloseReport?>(nil)
        let closed = expectation(description: "closed")
        store.close(within: budget) { result in
            report.withLock { $0 = result }
            closed.fulfill()
        }
        wait(for: [closed], timeout: 30)
        return report.withLock { $0 }
    }

    private func identity(_ inode: UInt64) -> FileIdentity {
        FileIdentity(device: 7, inode: inode, size: 3, modifiedNanoseconds: 1_800_000_000_000_000_000, changedNanoseconds: 1_800_000_000_000_000_001,
                     bornNanoseconds: nil, generation: inode &* 31)
    }

    private func record(_ path: String, inode: UInt64, outcome: String = "ok", second: Int64 = 0) -> LedgerRecord {
        LedgerRecord(rule: "inbox", path: Array(path.utf8), identity: identity(inode), outcome: outcome,
                     handledAt: WallTime(secondsSinceEpoch: noon.secondsSinceEpoch + second, nanoseconds: 0))
    }

    private func run(_ id: String, outcome: String = "ok") -> StoredRun {
        StoredRun(task: "nightly", runID: id, attempt: 1, outcome: outcome, scheduledAt: noon, startedAt: noon, finishedAt: noon,
                  durationNanoseconds: 5, exitCode: 0, signal: nil, expiry: nil)
    }

    private func dump(_ store: StateStore) -> DumpValue {
        store.queue.queue.sync { store.describeForDump() }
    }

    private func count(_ sql: String) throws -> Int {
        Int(try queryRows(sql, database: databasePath).first ?? "") ?? -1
    }

    /// The disk is full for the store: any write that needs a new page fails with SQLITE_FULL.
    private func fillTheDisk(_ store: StateStore) throws {
        try store.queue.queue.sync { () throws in
            let connection = store.ledger!.connection
            var pages: Int64 = 0
            try connection.execute("PRAGMA page_count", action: "read") { row in pages = row.integer(0) ?? 0 }
            try connection.execute("PRAGMA max_page_count = \(pages)", action: "limit") { _ in }
        }
    }

    private func makeRoom(_ store: StateStore) throws {
        try store.queue.queue.sync { () throws in
            try store.ledger!.connection.execute("PRAGMA max_page_count = 1073741823", action: "unlimit") { _ in }
        }
    }

    /// Whether `queue` answers a probe (the watchdog's) within `limit`: nothing queued before
    /// it blocks it. The limits below are far under the store's 2 s waits and far over a
    /// thread's wake-up on a loaded 2-core machine.
    private func answersProbe(_ queue: SubsystemQueue, within limit: Duration) -> Bool {
        let before = queue.probeState.probesAnswered
        queue.sendProbe(at: .now)
        let seconds = Double(limit.components.seconds) + Double(limit.components.attoseconds) / 1e18
        return waitFor(seconds, every: .milliseconds(2)) { queue.probeState.probesAnswered > before }
    }

    // MARK: - Writing in order, confirmed

    func testWrites_areCommittedInTheOrderSubmitted_andEachIsConfirmedOnItsOwnersQueue_onlyOnceCommitted() throws {
        // Used on the owner's queue only, as the watcher uses its own.
        nonisolated(unsafe) let reader = try StateReader(path: databasePath)
        defer { reader.close() }
        let confirmed = Mutex<[String]>([])
        let seenAtConfirmation = Mutex<[String]>([])
        let done = expectation(description: "every write confirmed")
        done.expectedFulfillmentCount = 4
        // Each with what its commit makes visible, looked at when it is confirmed.
        let writes: [(String, StateWrite, @Sendable () -> Bool)] = [
            ("first", .ledgerRecords([record("a", inode: 1, outcome: "failed")]),
             { (try? reader.entry(rule: "inbox", path: Array("a".utf8))) != nil }),
            ("task", .taskRun(run("00000000000000a1")), { (try? reader.history(task: "nightly", limit: 1).count) == 1 }),
            ("second", .ledgerRecords([record("a", inode: 1, outcome: "ok", second: 1), record("b", inode: 2)]),
             { (try? reader.entry(rule: "inbox", path: Array("a".utf8)))??.outcome == "ok" }),
            ("move", .ledgerMove(rule: "inbox", from: Array("b".utf8), to: Array("c".utf8)),
             { (try? reader.entry(rule: "inbox", path: Array("c".utf8))) != nil }),
        ]
        owner.queue.sync {
            for (name, write, visible) in writes {
                store.submit(write, confirmOn: owner) { [owner] in
                    dispatchPrecondition(condition: .onQueue(owner.queue))
                    confirmed.withLock { $0.append(name) }
                    // Confirmed after the commit: the owner's own reader already sees it.
                    seenAtConfirmation.withLock { $0.append("\(name): \(visible() ? "visible" : "not visible")") }
                    done.fulfill()
                }
            }
        }
        wait(for: [done], timeout: 10)
        XCTAssertEqual(confirmed.withLock { $0 }, ["first", "task", "second", "move"])
        XCTAssertEqual(seenAtConfirmation.withLock { $0 }, ["first: visible", "task: visible", "second: visible", "move: visible"])
        let entries = try owner.queue.sync { () throws -> [String] in
            try ["a", "b", "c"].map { try reader.entry(rule: "inbox", path: Array($0.utf8))?.outcome ?? "none" }
        }
        XCTAssertEqual(entries, ["ok", "none", "ok"], "the later record of a wins, and b moved to c after it was written")
        XCTAssertEqual(try owner.queue.sync { try reader.history(task: "nightly", limit: 5).map(\.runID) }, ["00000000000000a1"])
    }

    func testABurstOfWrites_isCommittedTogether_notOncePerWrite() throws {
        let done = expectation(description: "all confirmed")
        done.expectedFulfillmentCount = 500
        let before = dump(store)["commits"]?.intValue ?? 0
        owner.queue.sync {
            for index in 0..<500 {
                store.submit(.ledgerRecords([record("f\(index)", inode: UInt64(index))]), confirmOn: owner) { done.fulfill() }
            }
        }
        wait(for: [done], timeout: 10)
        let commits = (dump(store)["commits"]?.intValue ?? 0) - before
        XCTAssertLessThanOrEqual(commits, 5, "500 writes submitted in one turn of their owner's queue")
        XCTAssertEqual(try count("SELECT count(*) FROM file_ledger"), 500)
    }

    // MARK: - Failures: kept, retried, never blocking the owner

    func testAFullDisk_keepsTheWritesInOrder_retriesThem_andTheyAllLandOnceThereIsRoom() throws {
        try fillTheDisk(store)
        let confirmed = Mutex<[Int]>([])
        let done = expectation(description: "every write confirmed")
        done.expectedFulfillmentCount = 40
        let store = self.store!
        // Paths long enough that every batch needs pages the full disk does not have.
        let padding = String(repeating: "p", count: 200)
        for batch in 0..<40 {
            let records = (0..<50).map { record("b\(batch)/f\($0)-\(padding)", inode: UInt64(batch * 50 + $0), second: Int64(batch)) }
            // From the owner's queue, as the watcher submits.
            owner.queue.async { [owner] in
                store.submit(.ledgerRecords(records), confirmOn: owner) {
                    confirmed.withLock { $0.append(batch) }
                    done.fulfill()
                }
            }
        }
        XCTAssertTrue(waitFor(10) { (self.dump(self.store)["write_failures"]?.intValue ?? 0) >= 3 }, "\(dump(store))")
        let failing = dump(store)
        XCTAssertTrue(failing["last_error"]?.stringValue?.contains("database or disk is full") == true, "\(failing)")
        XCTAssertGreaterThan(failing["writes_waiting"]?.intValue ?? 0, 0, "\(failing)")
        XCTAssertNotNil(failing["oldest_waiting_s"]?.doubleValue, "\(failing)")
        XCTAssertEqual(confirmed.withLock { $0 }, [], "nothing is confirmed that is not written")
        for _ in 0..<5 {
            XCTAssertTrue(answersProbe(owner, within: .milliseconds(500)), "the owner's queue must not wait for the disk")
        }
        // Another write while it fails joins the line behind the others.
        owner.queue.sync { store.submit(.ledgerRecords([record("b0/f0-\(padding)", inode: 0, outcome: "failed", second: 99)])) }

        try makeRoom(store)
        wait(for: [done], timeout: 15)
        XCTAssertEqual(confirmed.withLock { $0 }, Array(0..<40), "confirmed in the order submitted")
        XCTAssertTrue(waitFor(5) { self.dump(self.store)["writes_waiting"]?.intValue == 0 }, "\(dump(store))")
        XCTAssertEqual(try count("SELECT count(*) FROM file_ledger"), 2_000, "nothing lost")
        XCTAssertEqual(try queryRows("SELECT outcome FROM file_ledger WHERE path = CAST('b0/f0-\(padding)' AS BLOB)", database: databasePath), ["failed"],
                       "the write submitted last was written last")
        let after = dump(store)
        XCTAssertEqual(after["failing_for_s"], .null, "\(after)")
        XCTAssertEqual(after["dropped"], .object([]), "\(after)")
    }

    func testAWriteWaitingForALockHeldElsewhere_blocksOnlyTheStoresQueue_andIsWrittenOnceTheLockGoes() throws {
        let other = try SQLiteConnection(path: databasePath)
        defer { other.close() }
        try other.executeOnce("BEGIN IMMEDIATE", action: "lock")
        let done = expectation(description: "confirmed")
        owner.queue.sync { store.submit(.taskRun(run("00000000000000b1")), confirmOn: owner) { done.fulfill() } }
        // The store waits in SQLite for the lock (its busy timeout, 2 s), fails, and waits
        // again at each retry; its queue is stuck meanwhile, the owner's is not.
        XCTAssertTrue(waitFor(5) { !self.answersProbe(self.store.queue, within: .milliseconds(200)) }, "the store's queue waits for the lock")
        let heldUntil = MonotonicInstant.now + FileLedger.busyTimeout + .milliseconds(800)
        var probes = 0
        while MonotonicInstant.now < heldUntil {
            XCTAssertTrue(answersProbe(owner, within: .milliseconds(500)), "the owner's queue must not wait with it")
            probes += 1
            usleep(50_000)
        }
        XCTAssertGreaterThan(probes, 5)
        try other.executeOnce("COMMIT", action: "unlock")
        wait(for: [done], timeout: 15)
        XCTAssertEqual(try count("SELECT count(*) FROM run_history"), 1)
        let after = dump(store)
        XCTAssertGreaterThanOrEqual(after["write_failures"]?.intValue ?? 0, 1, "\(after)")
        XCTAssertTrue(after["last_error"]?.stringValue?.contains("database is locked") == true, "\(after)")
    }

    func testPastTheBound_theOldestWaitingWritesAreDropped_counted_andTheNewestWritten() throws {
        close(store)
        store = try openStore(pendingRowLimit: 25)
        try fillTheDisk(store)
        // Long paths, so that every batch needs pages the full disk does not have.
        let padding = String(repeating: "x", count: 1_000)
        store.submit(.ledgerRecords([record("first/\(padding)", inode: 999)]))
        XCTAssertTrue(waitFor(10) { (self.dump(self.store)["write_failures"]?.intValue ?? 0) >= 1 }, "\(dump(store))")
        for batch in 0..<5 {
            store.submit(.ledgerRecords((0..<10).map { record("b\(batch)/f\($0)\(padding)", inode: UInt64(batch * 10 + $0)) }))
        }
        XCTAssertTrue(waitFor(10) { self.dump(self.store)["dropped"]?["ledger_records"]?.intValue == 31 }, "\(dump(store))")
        XCTAssertEqual(dump(store)["rows_waiting"]?.intValue, 20)
        try makeRoom(store)
        XCTAssertTrue(waitFor(15) { self.dump(self.store)["writes_waiting"]?.intValue == 0 }, "\(dump(store))")
        XCTAssertEqual(try queryRows("SELECT DISTINCT substr(CAST(path AS TEXT), 1, 2) FROM file_ledger ORDER BY 1", database: databasePath), ["b3", "b4"])
    }

    func testAWriteThatCanNeverSucceed_isDroppedAlone_andTheWritesAroundItAreWritten() throws {
        let impossible = LedgerRecord(rule: "inbox", path: Array("late".utf8), identity: identity(9), outcome: "ok",
                                      handledAt: WallTime(secondsSinceEpoch: .max / 2, nanoseconds: 0))
        let confirmed = Mutex<[String]>([])
        let done = expectation(description: "the possible ones confirmed")
        done.expectedFulfillmentCount = 2
        owner.queue.sync {
            store.submit(.ledgerRecords([record("before", inode: 1)]), confirmOn: owner) {
                confirmed.withLock { $0.append("before") }
                done.fulfill()
            }
            store.submit(.ledgerRecords([impossible]), confirmOn: owner) { confirmed.withLock { $0.append("impossible") } }
            store.submit(.ledgerRecords([record("after", inode: 2)]), confirmOn: owner) {
                confirmed.withLock { $0.append("after") }
                done.fulfill()
            }
        }
        wait(for: [done], timeout: 10)
        XCTAssertEqual(confirmed.withLock { $0 }, ["before", "after"])
        XCTAssertEqual(try queryRows("SELECT CAST(path AS TEXT) FROM file_ledger ORDER BY path", database: databasePath), ["after", "before"])
        let after = dump(store)
        XCTAssertEqual(after["dropped"]?["ledger_records"]?.intValue, 1, "\(after)")
        XCTAssertTrue(after["last_error"]?.stringValue?.contains("outside the years 1678 to 2262") == true, "\(after)")
        XCTAssertEqual(after["retry_backoff"], .null, "not retried: it would fail the same way")
    }

    // MARK: - Reading

    func testTheReadOnlyConnection_seesWhatIsCommitted_evenWhileAnotherConnectionHoldsTheWriteLock() throws {
        let reader = try StateReader(path: databasePath)
        defer { reader.close() }
        let done = expectation(description: "committed")
        store.submit(.ledgerRecords([record("in", inode: 4)]), confirmOn: owner) { done.fulfill() }
        wait(for: [done], timeout: 10)
        let other = try SQLiteConnection(path: databasePath)
        defer { other.close() }
        try other.executeOnce("BEGIN IMMEDIATE; DELETE FROM file_ledger", action: "lock and delete")
        let started = MonotonicInstant.now
        let entry = try reader.entry(rule: "inbox", path: Array("in".utf8))
        XCTAssertEqual(entry?.identity, identity(4))
        XCTAssertLessThan(MonotonicInstant.now - started, .milliseconds(200), "a reader does not wait for a writer")
        XCTAssertEqual(try reader.entries(rule: "inbox", identity: identity(4)).count, 1)
        XCTAssertEqual(try reader.count(rule: "inbox"), 1, "the other connection's uncommitted delete is not seen")
        try other.executeOnce("ROLLBACK", action: "unlock")
    }

    func testHistory_includesWhatWasSubmittedBeforeTheQuestion_writtenOrNot_evenWhileTheDiskIsFull() throws {
        store.submit(.ledgerRecords([record("old", inode: 1)]))
        store.submit(.taskRun(run("00000000000000c1")))
        XCTAssertEqual(try ledgerHistory().map(\.0), ["old"], "what was submitted before the question is in the answer")
        try fillTheDisk(store)
        let padding = String(repeating: "x", count: 1_000)
        store.submit(.ledgerRecords((0..<20).map { record("filler/\($0)\(padding)", inode: UInt64(100 + $0), second: -10) }))
        store.submit(.ledgerRecords([record("new", inode: 2, second: 5), record("old", inode: 1, outcome: "failed", second: 6)]))
        store.submit(.taskRun(run("00000000000000c2", outcome: "failed")))
        XCTAssertEqual(try ledgerHistory().prefix(2).map { "\($0.0)=\($0.1)" }, ["old=failed", "new=ok"])
        XCTAssertEqual(try taskHistory(), ["00000000000000c2", "00000000000000c1"])
        XCTAssertGreaterThan(dump(store)["writes_waiting"]?.intValue ?? 0, 0)
        try makeRoom(store)
    }

    private func ledgerHistory() throws -> [(String, String)] {
        let result = Mutex<Result<[(entry: LedgerEntry, run: LedgerRun?)], SQLiteError>?>(nil)
        let answered = expectation(description: "answered")
        store.ledgerHistory(rule: "inbox", limit: 10) { value in
            result.withLock { $0 = value }
            answered.fulfill()
        }
        wait(for: [answered], timeout: 10)
        return try XCTUnwrap(result.withLock { $0 }).get().map { (String(decoding: $0.entry.path, as: UTF8.self), $0.entry.outcome) }
    }

    private func taskHistory() throws -> [String] {
        let result = Mutex<Result<[StoredRun], SQLiteError>?>(nil)
        let answered = expectation(description: "answered")
        store.taskHistory(task: "nightly", limit: 10) { value in
            result.withLock { $0 = value }
            answered.fulfill()
        }
        wait(for: [answered], timeout: 10)
        return try XCTUnwrap(result.withLock { $0 }).get().map(\.runID)
    }

    // MARK: - Pruning and stopping

    func testPrune_runsOnTheStoresQueue_forgetsOnlyFilesThatAreGone_andCheckpoints() throws {
        let root = directory + "/tree"
        try FileManager.default.createDirectory(atPath: root + "/kept", withIntermediateDirectories: true)
        XCTAssertTrue(FileManager.default.createFile(atPath: root + "/kept/present", contents: Data()))
        // More than a page of entries, so the walk takes several turns.
        let gone = (0..<2_500).map { record("gone/f\($0)", inode: UInt64(100 + $0)) }
        store.submit(.ledgerRecords(gone + [record("kept/present", inode: 1)]))
        store.prune(rule: "inbox", root: Array(root.utf8))
        store.prune(rule: "inbox", root: Array(root.utf8)) // asked twice meanwhile: walked once
        XCTAssertTrue(waitFor(10) { self.dump(self.store)["prunes_finished"]?.intValue == 1 && self.dump(self.store)["writes_waiting"]?.intValue == 0 },
                      "\(dump(store))")
        XCTAssertEqual(try queryRows("SELECT CAST(path AS TEXT) FROM file_ledger", database: databasePath), ["kept/present"])
        var info = stat()
        if stat(databasePath + "-wal", &info) == 0 { XCTAssertEqual(info.st_size, 0, "checkpointed after the prune") }
        // A missing root (an unmounted file system) removes nothing.
        store.submit(.ledgerRecords([record("elsewhere", inode: 2)]))
        store.prune(rule: "inbox", root: Array((directory + "/unmounted").utf8))
        XCTAssertTrue(waitFor(10) { self.dump(self.store)["prunes_finished"]?.intValue == 2 }, "\(dump(store))")
        XCTAssertEqual(try count("SELECT count(*) FROM file_ledger"), 2)
    }

    /// Pages of the file, free pages, and the auto_vacuum mode, as another process reads them.
    private func space() throws -> (pages: Int, free: Int, mode: Int) {
        let read = { (pragma: String) throws -> Int in Int(try queryRows("PRAGMA \(pragma)", database: self.databasePath).first ?? "") ?? -1 }
        return (try read("page_count"), try read("freelist_count"), try read("auto_vacuum"))
    }

    /// Fills the ledger with `count` entries of files that do not exist under `root`, then
    /// prunes it, sampling the WAL's size until the prune and what follows it are done.
    private func pruneEverything(_ count: Int, root: String) throws -> Int64 {
        for start in stride(from: 0, to: count, by: 4_096) {
            store.submit(.ledgerRecords((start..<min(count, start + 4_096)).map { record("gone/d\($0 % 97)/f\($0)", inode: UInt64(1_000 + $0)) }))
        }
        XCTAssertTrue(waitFor(30) { self.dump(self.store)["writes_waiting"]?.intValue == 0 }, "\(dump(store))")
        let finished = dump(store)["prunes_finished"]?.intValue ?? 0
        store.prune(rule: "inbox", root: Array(root.utf8))
        var largest: Int64 = 0
        XCTAssertTrue(waitFor(120, every: .milliseconds(2)) {
            var info = stat()
            if stat(self.databasePath + "-wal", &info) == 0 { largest = max(largest, Int64(info.st_size)) }
            return self.dump(self.store)["prunes_finished"]?.intValue == finished + 1 && self.dump(self.store)["writes_waiting"]?.intValue == 0
        }, "\(dump(store))")
        return largest
    }

    func testAPrune_givesTheFreedPagesBack_andKeepsTheWALUnderItsLimit() throws {
        let root = directory + "/tree"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        XCTAssertEqual(try space().mode, 2, "a new file gives pages back as it goes (auto_vacuum = INCREMENTAL)")
        var largest = try pruneEverything(40_000, root: root)
        XCTAssertEqual(try count("SELECT count(*) FROM file_ledger"), 0)
        // The pages go back a step at a time after the prune, paced.
        XCTAssertTrue(waitFor(60, every: .milliseconds(5)) {
            var info = stat()
            if stat(self.databasePath + "-wal", &info) == 0 { largest = max(largest, Int64(info.st_size)) }
            return ((try? self.space().pages) ?? .max) < 200
        }, "the file never shrank back: \((try? space()).map { "\($0)" } ?? "?")")
        XCTAssertLessThan(largest, 4 << 20, "the WAL during a prune of 40,000 entries and the shrink after it")
    }

    func testAFileMadeBeforeIncrementalVacuum_isRewrittenOnce_whenAPruneLeavesMostOfItFree() throws {
        let root = directory + "/tree"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        // What schema 6 made: no auto_vacuum (VACUUM makes the file so, with the mode off).
        try store.queue.queue.sync { () throws in
            try store.ledger!.connection.executeOnce("PRAGMA auto_vacuum = NONE; VACUUM", action: "age")
        }
        XCTAssertEqual(try space().mode, 0)
        _ = try pruneEverything(20_000, root: root)
        XCTAssertTrue(waitFor(60) { ((try? self.space().pages) ?? .max) < 200 }, "\((try? space()).map { "\($0)" } ?? "?")")
        XCTAssertEqual(try space().mode, 2, "converted by the one VACUUM")
    }

    func testClose_writesWhatWaits_thenCheckpoints_andClosesTheFile() throws {
        store.submit(.ledgerRecords((0..<300).map { record("f\($0)", inode: UInt64($0)) }))
        store.submit(.taskScheduled(task: "nightly", at: noon))
        XCTAssertEqual(close(store), StateStore.CloseReport(rowsDropped: 0))
        XCTAssertEqual(store.availability, .closed)
        XCTAssertEqual(try count("SELECT count(*) FROM file_ledger"), 300)
        XCTAssertEqual(try count("SELECT count(*) FROM task_state"), 1)
        var info = stat()
        if stat(databasePath + "-wal", &info) == 0 { XCTAssertEqual(info.st_size, 0, "the WAL is folded into the file") }
    }

    func testClose_onAFullDisk_retriesUntilItsDeadline_thenSaysWhatItDropped() throws {
        try fillTheDisk(store)
        store.submit(.ledgerRecords((0..<300).map { record("f\($0)", inode: UInt64($0)) }))
        store.submit(.taskRun(run("00000000000000d1")))
        let started = MonotonicInstant.now
        let report = close(store, within: .milliseconds(800))
        let took = MonotonicInstant.now - started
        XCTAssertEqual(report, StateStore.CloseReport(rowsDropped: 301))
        XCTAssertGreaterThanOrEqual(took, .milliseconds(700), "it tried until its deadline")
        XCTAssertLessThan(took, .seconds(5), "and no longer")
        XCTAssertEqual(store.availability, .closed)
    }
}
