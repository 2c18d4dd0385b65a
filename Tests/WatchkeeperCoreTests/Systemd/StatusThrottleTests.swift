import XCTest
@testable import WatchkeeperCore

final class StatusThrottleTests: XCTestCase {
    private let ms: UInt64 = 1_000_000

    func testFirstChange_isSentAtOnce() {
        var throttle = StatusThrottle(intervalNanoseconds: 500 * ms)
        XCTAssertEqual(throttle.changed(now: 1_000 * ms), .send)
    }

    func testChangesWithinTheInterval_areSentOnceAtItsEnd() {
        var throttle = StatusThrottle(intervalNanoseconds: 500 * ms)
        XCTAssertEqual(throttle.changed(now: 1_000 * ms), .send)
        XCTAssertEqual(throttle.changed(now: 1_100 * ms), .sendAt(1_500 * ms))
        for step in 0..<1_000 {
            XCTAssertEqual(throttle.changed(now: 1_100 * ms + UInt64(step) * 1_000), .none)
        }
        XCTAssertEqual(throttle.timerFired(now: 1_500 * ms), .send)
    }

    func testATimerWithNothingNew_sendsNothing() {
        var throttle = StatusThrottle(intervalNanoseconds: 500 * ms)
        _ = throttle.changed(now: 1_000 * ms)
        _ = throttle.changed(now: 1_200 * ms)
        XCTAssertEqual(throttle.timerFired(now: 1_500 * ms), .send)
        XCTAssertEqual(throttle.changed(now: 2_100 * ms), .send, "an interval after the trailing send")
    }

    func testAChangeRightAfterTheTrailingSend_waitsAWholeInterval() {
        var throttle = StatusThrottle(intervalNanoseconds: 500 * ms)
        _ = throttle.changed(now: 1_000 * ms)
        _ = throttle.changed(now: 1_200 * ms)
        _ = throttle.timerFired(now: 1_500 * ms)
        XCTAssertEqual(throttle.changed(now: 1_600 * ms), .sendAt(2_000 * ms))
    }
}
