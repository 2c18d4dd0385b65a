import XCTest

@testable import WatchkeeperCore

/// The backoff between attempts: doubling from `backoff`, capped at `max_backoff`, each
/// delay within ±20% jitter. Pinned on the pure function, not by timing runs.
final class RetryPolicyTests: XCTestCase {
    func testDelay_doublesFromTheBackoff_withinItsJitter_andStopsAtTheCap() {
        let policy = RetryPolicy(attempts: 10, backoff: .milliseconds(300), maxBackoff: .seconds(2))
        let expected: [Duration] = [.milliseconds(300), .milliseconds(600), .milliseconds(1_200), .seconds(2), .seconds(2)]
        for (index, base) in expected.enumerated() {
            for _ in 0..<200 {
                let delay = policy.delay(afterAttempt: index + 1)
                XCTAssertGreaterThanOrEqual(delay, base * 0.8, "after attempt \(index + 1)")
                XCTAssertLessThanOrEqual(delay, base * 1.2, "after attempt \(index + 1)")
            }
        }
    }

    func testDelay_afterTheSecondAttempt_isAlwaysLongerThanAfterTheFirst_whenJitterCannotOverlap() {
        let policy = RetryPolicy(attempts: 3, backoff: .milliseconds(300), maxBackoff: .seconds(5))
        for _ in 0..<200 {
            // 300 ms ±20% is at most 360 ms; 600 ms ±20% at least 480 ms.
            XCTAssertLessThan(policy.delay(afterAttempt: 1), policy.delay(afterAttempt: 2))
        }
    }
}
