import XCTest
@testable import WatchkeeperCore

/// The lifecycle's steps on other queues, and the events that wait for them.
final class LifecycleStepsTests: XCTestCase {
    func testAnEventWithNoStepInFlight_isHandledAtOnce() {
        var steps = LifecycleSteps()
        XCTAssertEqual(steps.admit(.reloadRequested), .reloadRequested)
        XCTAssertEqual(steps.release(), [])
    }

    func testEventsDuringSteps_waitForTheLastAnswer_andComeOutInTheirOrder() {
        var steps = LifecycleSteps()
        let first = steps.begin("watch the roots", on: "watching", at: .now)
        XCTAssertNil(steps.admit(.terminationRequested(signal: 15)))
        let second = steps.begin("arm the tasks", on: "jobs", at: .now)
        steps.end(first)
        XCTAssertEqual(steps.release(), [], "released while a step was still in flight")
        XCTAssertNil(steps.admit(.reloadRequested))
        steps.end(second)
        XCTAssertEqual(steps.release(), [.terminationRequested(signal: 15), .reloadRequested])
        XCTAssertEqual(steps.release(), [])
        XCTAssertEqual(steps.admit(.drainFinished), .drainFinished)
    }

    func testTheDump_listsEachStepWaiting_withItsQueue() {
        var steps = LifecycleSteps()
        let start = MonotonicInstant.now
        _ = steps.begin("apply the watch rules", on: "watching", at: start)
        guard case .array(let waiting) = steps.describe(now: start + .seconds(2)), let step = waiting.first else {
            return XCTFail("no step listed")
        }
        XCTAssertEqual(waiting.count, 1)
        XCTAssertEqual(step["step"], .string("apply the watch rules"))
        XCTAssertEqual(step["queue"], .string("watching"))
        XCTAssertEqual(step["waiting_s"], .double(2))
    }
}
