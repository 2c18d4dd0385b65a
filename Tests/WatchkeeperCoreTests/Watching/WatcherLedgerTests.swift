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
}
