import XCTest

@testable import WatchkeeperCore

/// The ring of a run's last lines its hook gets: bounded in lines and in bytes per line.
final class OutputTailTests: XCTestCase {
    private func append(_ tail: OutputTail, _ text: String) {
        Array(text.utf8).withUnsafeBufferPointer { tail.append($0) }
    }

    func testFewerLinesThanItsCapacity_areKeptInOrder() {
        let tail = OutputTail()
        append(tail, "first")
        append(tail, "")
        append(tail, "third")
        XCTAssertEqual(tail.count, 3)
        XCTAssertEqual(String(decoding: tail.bytes, as: UTF8.self), "first\n\nthird\n")
    }

    func testMoreLinesThanItsCapacity_keepsExactlyTheLastOnes_oldestFirst() {
        let tail = OutputTail()
        for index in 1...(OutputTail.capacity * 2 + 17) { append(tail, "line \(index)") }
        XCTAssertEqual(tail.count, OutputTail.capacity)
        let expected = ((OutputTail.capacity + 18)...(OutputTail.capacity * 2 + 17)).map { "line \($0)\n" }.joined()
        XCTAssertEqual(String(decoding: tail.bytes, as: UTF8.self), expected)
    }

    func testALongLine_isCutToItsFirstBytes() {
        let tail = OutputTail()
        append(tail, String(repeating: "x", count: OutputTail.maxLineBytes) + "cut")
        XCTAssertEqual(tail.bytes, Array(repeating: UInt8(ascii: "x"), count: OutputTail.maxLineBytes) + [UInt8(ascii: "\n")])
    }

    func testNoLines_areAnEmptyFile() {
        XCTAssertEqual(OutputTail().bytes, [])
        XCTAssertEqual(OutputTail().count, 0)
    }
}

/// Which record calls for which hook.
final class HookKindTests: XCTestCase {
    private func record(_ outcome: RunOutcome, expiry: ExpiryReason? = nil) -> RunRecord {
        RunRecord(name: "t", runID: "0123456789abcdef", attempt: 1, outcome: outcome, scheduledAt: nil, startedAt: nil,
                  finishedAt: .now(), duration: .zero, exit: nil, expiry: expiry, lateness: nil, detail: nil)
    }

    func testOkCallsForOnSuccess_failedAndExpiredForOnFailure() {
        XCTAssertEqual(HookKind.after(record(.ok)), .success)
        XCTAssertEqual(HookKind.after(record(.failed)), .failure)
        for reason in [ExpiryReason.budget, .replaced, .cancelled, .fleetLeaseLost] {
            XCTAssertEqual(HookKind.after(record(.expired, expiry: reason)), .failure, reason.rawValue)
        }
    }

    func testWorkThatNeverRan_andARunTheDaemonsShutdownEnded_callForNoHook() {
        for outcome in [RunOutcome.skippedOverlap, .missed, .cancelled, .ranElsewhere, .held] {
            XCTAssertNil(HookKind.after(record(outcome)), outcome.rawValue)
        }
        XCTAssertNil(HookKind.after(record(.expired, expiry: .shutdown)))
    }
}
