import Dispatch
import XCTest

@testable import WatchkeeperCore

final class MonotonicInstantTests: XCTestCase {
    func testNow_readsTheClockDispatchTimeReads() {
        let before = DispatchTime.now().uptimeNanoseconds
        let instant = MonotonicInstant.now
        let after = DispatchTime.now().uptimeNanoseconds
        XCTAssertLessThanOrEqual(before, instant.nanoseconds)
        XCTAssertLessThanOrEqual(instant.nanoseconds, after)
    }

    func testAddingAndSubtractingDurations() {
        let start = MonotonicInstant(nanoseconds: 5_000_000_000)
        XCTAssertEqual(start + .milliseconds(250), MonotonicInstant(nanoseconds: 5_250_000_000))
        XCTAssertEqual(start - .seconds(1), MonotonicInstant(nanoseconds: 4_000_000_000))
        XCTAssertEqual(start + .seconds(-2), MonotonicInstant(nanoseconds: 3_000_000_000))
        var moving = start
        moving += .nanoseconds(7)
        XCTAssertEqual(moving.nanoseconds, 5_000_000_007)
    }

    func testArithmetic_saturatesAtBothEndsOfTheClock() {
        XCTAssertEqual(MonotonicInstant(nanoseconds: 10) - .seconds(1), MonotonicInstant(nanoseconds: 0))
        XCTAssertEqual(MonotonicInstant(nanoseconds: .max - 1) + .seconds(1), MonotonicInstant(nanoseconds: .max))
        XCTAssertEqual(MonotonicInstant(nanoseconds: 1) + .seconds(Int64.max), MonotonicInstant(nanoseconds: UInt64(Int64.max) + 1))
    }

    func testDifferenceOfInstants_isASignedDuration() {
        let early = MonotonicInstant(nanoseconds: 1_000)
        let late = MonotonicInstant(nanoseconds: 3_500)
        XCTAssertEqual(late - early, .nanoseconds(2_500))
        XCTAssertEqual(early - late, .nanoseconds(-2_500))
        XCTAssertEqual(early.elapsed(at: late), .nanoseconds(2_500))
        XCTAssertLessThan(early, late)
    }

    func testDispatchTime_roundTrips_andFarDeadlinesMeanNever() {
        let instant = MonotonicInstant(nanoseconds: 123_456_789_000)
        XCTAssertEqual(instant.dispatchTime.uptimeNanoseconds, instant.nanoseconds)
        XCTAssertEqual(MonotonicInstant(instant.dispatchTime), instant)
        XCTAssertEqual(MonotonicInstant(nanoseconds: .max).dispatchTime, .distantFuture)
    }

    func testDescription_isSecondsSinceBootWithNanoseconds() {
        XCTAssertEqual(MonotonicInstant(nanoseconds: 12_000_000_345).description, "12.000000345s")
    }

    func testDurationConversions_toNanosecondsAndDispatchIntervals() {
        XCTAssertEqual(Duration.milliseconds(1500).nanosecondsClamped, 1_500_000_000)
        XCTAssertEqual(Duration.seconds(Int64.max).nanosecondsClamped, .max)
        XCTAssertEqual(Duration.seconds(Int64.min).nanosecondsClamped, .min)
        XCTAssertEqual(Duration.milliseconds(250).dispatchInterval, .nanoseconds(250_000_000))
        XCTAssertEqual(Duration.seconds(-3).dispatchInterval, .nanoseconds(0))
        XCTAssertEqual(Duration(DispatchTimeInterval.milliseconds(40)), .milliseconds(40))
        XCTAssertEqual(Duration(DispatchTimeInterval.seconds(2)), .seconds(2))
        XCTAssertNil(Duration(DispatchTimeInterval.never))
        XCTAssertEqual(Duration.between(nanoseconds: 10, and: 4), .nanoseconds(-6))
    }
}
