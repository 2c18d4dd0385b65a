import Dispatch
import Foundation
import Logging
import XCTest

@testable import WatchkeeperCore

/// The ledger's decisions at catch-up, with a real state store (SQLite in a scratch
/// directory) under the fake backend, clock and engine: a file handled in an earlier life
/// and unchanged does not run again; one rewritten while the daemon was down does, even
/// with its size and modification time put back (`cp -p`), and so does a new one.
final class WatcherLedgerTests: XCTestCase {
    private func openStore(_ scratch: URL) throws -> StateStore {
        let store = StateStore(queue: SubsystemQueue(name: "test.state.\(UUID().uuidString.prefix(8))"), sources: SourceRegistry(),
                               logger: Logger(label: "test"))
        let directory = scratch.appendingPathComponent("state").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        guard case .open = store.queue.queue.sync(execute: { store.open(stateDirectory: directory) }) else {
            throw XCTSkip("the state store did not open in \(directory)")
        }
        return store
    }

    private func close(_ store: StateStore) {
        let closed = DispatchSemaphore(value: 0)
        store.close(within: .seconds(5)) { _ in closed.signal() }
        XCTAssertEqual(closed.wait(timeout: .now() + 30), .success, "the store did not close")
    }

    func testCatchUp_runsWhatChangedWhileDown_andNotWhatTheLedgerHoldsAsHandled() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("wk-ledger-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let first = try openStore(scratch)
        let before = try WatcherHarness(scratch: scratch, store: first)
        for name in ["kept", "rewritten", "removed"] {
            before.write(name, "AAAA")
            before.setTimes(name, modified: 1_000_000_000)
        }
        before.start([before.rule { $0.catchUp = true }])
        before.advance(WatcherDeliveryTests.scanWait)
        XCTAssertEqual(Set(before.submitted), ["kept", "rewritten", "removed"], "the first catch-up runs every file")
        before.finishAll()
        // The records are committed on the store's queue, and confirmed on the watcher's.
        first.queue.queue.sync {}
        before.drain()
        before.stop()
        close(first)

        // While the daemon is down: one file rewritten in place with its size and mtime put
        // back, one removed, one new.
        before.tick()
        before.write("rewritten", "BBBB")
        before.setTimes("rewritten", modified: 1_000_000_000)
        before.remove("removed")
        before.write("new", "CCCC")

        let second = try openStore(scratch)
        defer { close(second) }
        let after = try WatcherHarness(scratch: scratch, store: second)
        after.start([after.rule { $0.catchUp = true }])
        after.advance(WatcherDeliveryTests.scanWait)
        XCTAssertEqual(Set(after.submitted), ["rewritten", "new"], "the ledger held the others as handled, in the form they have")
    }

    /// The drain refuses new jobs, not what the watcher learns: a handled file renamed while
    /// the daemon stops (its event read after the drain began) is that file at the next start.
    func testAHandledFileRenamedDuringTheDrain_isFollowed_andDoesNotRunAtTheNextStart() throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("wk-ledger-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let first = try openStore(scratch)
        let before = try WatcherHarness(scratch: scratch, store: first)
        before.start([before.rule { $0.catchUp = true }])
        before.write("before", "content")
        before.written("before")
        before.finishAll()
        first.queue.queue.sync {}
        before.drain()
        before.step { before.watcher.stop() }
        before.rename("before", "after")
        before.renamed("before", "after", cookie: 30)
        before.step { before.watcher.close() }
        close(first)

        let second = try openStore(scratch)
        defer { close(second) }
        let after = try WatcherHarness(scratch: scratch, store: second)
        after.start([after.rule { $0.catchUp = true }])
        after.advance(WatcherDeliveryTests.scanWait)
        XCTAssertEqual(after.submitted, [], "the renamed file ran again")
    }

    // MARK: A polled tree (a real TreePoller on the scratch directory)

    private func pollingRule(_ harness: WatcherHarness) -> WatchSettings {
        harness.rule {
            $0.catchUp = true
            $0.method = .poll
            $0.pollInterval = .milliseconds(100)
            $0.pollSettle = .milliseconds(100)
        }
    }

    /// Waits (a deadline, never a count in a window) until the poller handed on what it saw
    /// and the watcher submitted `count` files, then until the store wrote what followed.
    private func waitForSubmissions(_ harness: WatcherHarness, _ count: Int, store: StateStore) {
        let deadline = Date().addingTimeInterval(20)
        while harness.submitted.count < count && Date() < deadline { usleep(20_000) }
        store.queue.queue.sync {}
        harness.drain()
    }

    /// `files` written (with an old mtime), then a watcher polling the scratch tree with a
    /// real store, stopped after `body`.
    private func polling(files: [String: String], _ body: (WatcherHarness, StateStore) throws -> Void) throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("wk-ledger-\(UUID().uuidString.prefix(8))")
        defer { try? FileManager.default.removeItem(at: scratch) }
        let store = try openStore(scratch)
        defer { close(store) }
        let harness = try WatcherHarness(scratch: scratch, store: store)
        for (name, content) in files {
            harness.write(name, content)
            harness.setTimes(name, modified: 1_000_000_000)
        }
        harness.start([pollingRule(harness)])
        defer { harness.stop() }
        try body(harness, store)
    }

    private func stat(_ harness: WatcherHarness, _ relative: String) -> FileIdentity? {
        FileStatus.of(Array(harness.path(relative).utf8), followSymlinks: false)?.identity
    }

    /// renameat2(RENAME_EXCHANGE) in a polled tree: a poll sees each name hold the other's
    /// inode with its change time moved. When the ledger has followed one half already (it
    /// swaps the two names' entries) before the other is looked up, that other finds its own
    /// entry at its new name: the name held another inode at the poll before, so it came by
    /// the rename, not by a change in place, and it does not run. (Before: it ran, 1 to 10 of
    /// 80 in Tests/reliability/tools.py --methods poll --only exchange.)
    func testAnExchangeInAPolledTree_whoseOtherHalfTheLedgerFollowedFirst_runsNeither() throws {
        try polling(files: ["left": "LLLL", "right": "RRRR"]) { harness, store in
            waitForSubmissions(harness, 2, store: store)
            XCTAssertEqual(Set(harness.submitted), ["left", "right"])
            harness.finishAll()
            store.queue.queue.sync {}
            harness.drain()
            // What the first half's follow does (FileLedger.follow), committed before the second
            // half is looked up: the entries swap names.
            let left = try XCTUnwrap(stat(harness, "left"))
            store.submit(.ledgerFollow(rule: "inbox", from: Array("left".utf8), to: Array("right".utf8), known: left, now: left))
            store.queue.queue.sync {}
            harness.tick()
            harness.exchange("left", "right")
            // Both names seen changed and settled: the ledger then holds each file as it is now.
            func rows() -> [FileIdentity?] {
                store.queue.queue.sync { ["left", "right"].map { try? store.ledger?.entry(rule: "inbox", path: Array($0.utf8))?.identity } }
            }
            // A poll's look has no generation: compared as catch-up compares (FileIdentity.sameFile).
            let isCurrent = { zip(rows(), ["left", "right"]).allSatisfy { row, name in
                row.map { row in self.stat(harness, name).map { row.sameFile(as: $0) } ?? false } ?? false
            } }
            let deadline = Date().addingTimeInterval(20)
            while !isCurrent() && harness.submitted.count == 2 && Date() < deadline { usleep(20_000) }
            harness.drain()
            XCTAssertEqual(harness.submitted.count, 2, "an exchanged file ran again: \(harness.submitted)")
            XCTAssertTrue(isCurrent(), "the ledger does not hold the two files as they are now: \(rows())")
        }
    }

    /// The same poll, a file rewritten in place with its size and mtime put back (`cp -p`):
    /// the name held the same inode, so nothing says it was renamed, and it runs.
    func testAFileRewrittenInPlaceInAPolledTree_withItsSizeAndMtimePutBack_runsAgain() throws {
        try polling(files: ["kept": "AAAA"]) { harness, store in
            waitForSubmissions(harness, 1, store: store)
            harness.finishAll()
            store.queue.queue.sync {}
            harness.tick()
            harness.write("kept", "BBBB")
            harness.setTimes("kept", modified: 1_000_000_000)
            waitForSubmissions(harness, 2, store: store)
            XCTAssertEqual(harness.submitted, ["kept", "kept"], "a rewrite in place that kept the size and mtime was not run")
        }
    }
}
