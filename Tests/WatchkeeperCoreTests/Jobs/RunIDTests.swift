// A ThreadSanitizer build (make sanitize) brings its own Mutex from WatchkeeperCore.
#if WATCHKEEPER_TSAN
import struct Synchronization.Atomic
#else
import Synchronization
#endif
import XCTest

@testable import WatchkeeperCore

/// Run IDs come from a pool the kernel fills 32 at a time (RunIDPool) and are written
/// digit by digit: the same text `String(_:radix:)` and padding gave, and no two alike.
final class RunIDTests: XCTestCase {
    func testRunID_isSixteenLowercaseHexDigits_withLeadingZeros() {
        XCTAssertEqual(RunID(0).description, "0000000000000000")
        XCTAssertEqual(RunID(0xab).description, "00000000000000ab")
        XCTAssertEqual(RunID(.max).description, "ffffffffffffffff")
        for _ in 0..<1_000 {
            let id = RunID.random()
            let hex = String(id.value, radix: 16)
            XCTAssertEqual(id.description, String(repeating: "0", count: 16 - hex.count) + hex)
            XCTAssertEqual(RunID(id.description), id)
        }
    }

    func testRandomRunIDs_acrossManyRefillsOfThePool_andFromSeveralThreads_areAllDifferent() {
        let perThread = 5_000
        let drawn = Mutex<[UInt64]>([])
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            let mine = (0..<perThread).map { _ in RunID.random().value }
            drawn.withLock { $0 += mine }
        }
        let all = drawn.withLock { $0 }
        XCTAssertEqual(all.count, 4 * perThread)
        XCTAssertEqual(Set(all).count, 4 * perThread)
        XCTAssertFalse(all.allSatisfy { $0 == 0 })
    }
}
