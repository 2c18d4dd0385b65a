import XCTest

@testable import WatchkeeperCore

/// The pacing is a value with no clock: time is whatever instant the test passes.
final class LedgerCommitPacingTests: XCTestCase {
    private let ms: UInt64 = 1_000_000

    private func at(_ nanoseconds: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds) }

    func testRecordAdded_afterAQuietSpell_isWrittenOnTheNextTurn_withoutWaiting() {
        var pacing = LedgerCommitPacing(interval: .milliseconds(20))
        XCTAssertEqual(pacing.recordAdded(now: at(1_000 * ms)), .writeOnNextTurn, "the first record ever")
        pacing.wrote(now: at(1_000 * ms))
        XCTAssertEqual(pacing.recordAdded(now: at(1_020 * ms)), .writeOnNextTurn, "a whole interval after the last write")
    }

    func testRecordAdded_whileAWriteIsOnItsWay_joinsIt() {
        var pacing = LedgerCommitPacing(interval: .milliseconds(20))
        XCTAssertEqual(pacing.recordAdded(now: at(1_000 * ms)), .writeOnNextTurn)
        XCTAssertEqual(pacing.recordAdded(now: at(1_000 * ms + 1)), .none)
        XCTAssertEqual(pacing.recordAdded(now: at(1_005 * ms)), .none)
        XCTAssertTrue(pacing.writePending)
    }

    func testRecordAdded_soonAfterAWrite_waitsUntilTheIntervalHasPassedSinceIt() {
        var pacing = LedgerCommitPacing(interval: .milliseconds(20))
        _ = pacing.recordAdded(now: at(1_000 * ms))
        pacing.wrote(now: at(1_000 * ms))
        XCTAssertEqual(pacing.recordAdded(now: at(1_003 * ms)), .writeAt(at(1_020 * ms)))
        XCTAssertEqual(pacing.recordAdded(now: at(1_019 * ms)), .none, "the burst's other records go with it")
        pacing.wrote(now: at(1_020 * ms))
        XCTAssertEqual(pacing.recordAdded(now: at(1_021 * ms)), .writeAt(at(1_040 * ms)))
    }

    func testRecordAdded_readBeforeTheLastWrite_isWrittenOnTheNextTurn() {
        // Its submitter read the clock, then another thread marked a write before it took
        // the lock: the difference is negative, and it must not be paced a whole interval.
        var pacing = LedgerCommitPacing(interval: .milliseconds(20))
        pacing.wrote(now: at(1_000 * ms))
        XCTAssertEqual(pacing.recordAdded(now: at(1_000 * ms - 1)), .writeOnNextTurn)
    }

    func testWrote_byAnotherCaller_endsThePendingWrite_soTheNextRecordIsPacedAgain() {
        // `watchkeeper history` or a moved directory writes the ledger before the timer
        // does: the next record must not be left waiting for a write nobody arranged.
        var pacing = LedgerCommitPacing(interval: .milliseconds(20))
        pacing.wrote(now: at(1_000 * ms))
        XCTAssertEqual(pacing.recordAdded(now: at(1_001 * ms)), .writeAt(at(1_020 * ms)))
        pacing.wrote(now: at(1_010 * ms))
        XCTAssertFalse(pacing.writePending)
        XCTAssertEqual(pacing.recordAdded(now: at(1_011 * ms)), .writeAt(at(1_030 * ms)))
    }
}
