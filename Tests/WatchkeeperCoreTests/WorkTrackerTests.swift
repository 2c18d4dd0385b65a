import Dispatch
import Foundation
import XCTest

@testable import WatchkeeperCore

/// Drives the shutdown drain with real queues and real (short) delays. Timeouts are
/// generous: these pin what happens, not how fast; only lower bounds are asserted.
final class WorkTrackerTests: XCTestCase {
    /// Thread-safe record of what the closures under test saw.
    private final class Recorder<Value>: @unchecked Sendable {
        private let lock = NSLock()
        private var values: [Value] = []

        func append(_ value: Value) {
            lock.lock()
            defer { lock.unlock() }
            values.append(value)
        }

        var all: [Value] {
            lock.lock()
            defer { lock.unlock() }
            return values
        }
    }

    /// Lets an `expire` closure reach the token that `begin` returns afterwards.
    private final class TokenBox: @unchecked Sendable {
        private let lock = NSLock()
        private var stored: WorkTracker.Token?

        var token: WorkTracker.Token? {
            get { lock.lock(); defer { lock.unlock() }; return stored }
            set { lock.lock(); defer { lock.unlock() }; stored = newValue }
        }
    }

    private let queue = DispatchQueue(label: "org.watchkeeper.tests.work-tracker")

    private func drain(
        _ tracker: WorkTracker, grace: Duration, expireGrace: Duration,
        outcomes: Recorder<WorkTracker.DrainOutcome>, expectation: XCTestExpectation
    ) {
        tracker.drain(grace: grace, expireGrace: expireGrace, on: queue) { outcome in
            outcomes.append(outcome)
            expectation.fulfill()
        }
    }

    private func elapsedMilliseconds(since start: DispatchTime) -> Double {
        Double(DispatchTime.now().uptimeNanoseconds - start.uptimeNanoseconds) / 1e6
    }

    // MARK: - Drain outcomes

    func testDrain_withNoWork_finishesWithoutWaitingForTheGrace() {
        let tracker = WorkTracker()
        let outcomes = Recorder<WorkTracker.DrainOutcome>()
        let done = expectation(description: "drain completes")
        drain(tracker, grace: .seconds(30), expireGrace: .seconds(30), outcomes: outcomes, expectation: done)
        // Far shorter than the grace: an empty drain must not wait for it.
        wait(for: [done], timeout: 5)
        XCTAssertEqual(outcomes.all, [.finished])
        XCTAssertFalse(tracker.isAccepting)
    }

    func testDrain_whenWorkEndsWithinGrace_finishesWithoutExpiringIt() {
        let tracker = WorkTracker()
        let expired = Recorder<String>()
        guard let token = tracker.begin("backup", expire: { expired.append("backup") }) else {
            return XCTFail("the tracker must accept work before the drain")
        }
        XCTAssertEqual(tracker.running.map(\.name), ["backup"])

        let outcomes = Recorder<WorkTracker.DrainOutcome>()
        let done = expectation(description: "drain completes")
        let start = DispatchTime.now()
        drain(tracker, grace: .seconds(10), expireGrace: .seconds(10), outcomes: outcomes, expectation: done)
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(100)) { token.end() }

        wait(for: [done], timeout: 8)
        XCTAssertEqual(outcomes.all, [.finished])
        XCTAssertGreaterThanOrEqual(elapsedMilliseconds(since: start), 90, "the drain waited for the work")
        XCTAssertEqual(expired.all, [], "work that ended in time is never expired")
        XCTAssertTrue(tracker.running.isEmpty)
    }

    func testDrain_whenWorkOutlivesGrace_expiresIt_andReportsExpiredWithItsName_evenIfItThenEnds() {
        // The usual case: the expire closure (a job's expiration handler, then a kill
        // of its process group) makes the work end shortly after.
        let tracker = WorkTracker()
        let expired = Recorder<String>()
        let slow = TokenBox()
        slow.token = tracker.begin("slow", expire: { [queue] in
            expired.append("slow")
            queue.asyncAfter(deadline: .now() + .milliseconds(30)) { slow.token?.end() }
        })
        XCTAssertNotNil(slow.token)
        let quick = tracker.begin("quick", expire: { expired.append("quick") })

        let outcomes = Recorder<WorkTracker.DrainOutcome>()
        let done = expectation(description: "drain completes")
        let start = DispatchTime.now()
        drain(tracker, grace: .milliseconds(200), expireGrace: .seconds(10), outcomes: outcomes, expectation: done)
        quick?.end()

        wait(for: [done], timeout: 8)
        XCTAssertGreaterThanOrEqual(elapsedMilliseconds(since: start), 190, "the grace period was given")
        XCTAssertEqual(expired.all, ["slow"], "only work still running at the deadline is expired")
        XCTAssertEqual(outcomes.all, [.expired(names: ["slow"])], "the drain must say that work was expired")
    }

    func testDrain_whenExpireEndsWorkAtOnce_stillReportsExpired() {
        let tracker = WorkTracker()
        let box = TokenBox()
        box.token = tracker.begin("rotate", expire: { box.token?.end() })
        XCTAssertNotNil(box.token)

        let outcomes = Recorder<WorkTracker.DrainOutcome>()
        let done = expectation(description: "drain completes")
        drain(tracker, grace: .milliseconds(100), expireGrace: .seconds(10), outcomes: outcomes, expectation: done)

        wait(for: [done], timeout: 8)
        XCTAssertEqual(outcomes.all, [.expired(names: ["rotate"])])
    }

    func testDrain_whenExpireNeverEndsTheWork_completesAfterExpireGrace() {
        let tracker = WorkTracker()
        let expired = Recorder<String>()
        let stuckB = tracker.begin("stuck-b", expire: { expired.append("stuck-b") })
        let stuckA = tracker.begin("stuck-a", expire: { expired.append("stuck-a") })
        XCTAssertNotNil(stuckA)
        XCTAssertNotNil(stuckB)

        let outcomes = Recorder<WorkTracker.DrainOutcome>()
        let done = expectation(description: "drain completes")
        let start = DispatchTime.now()
        drain(tracker, grace: .milliseconds(100), expireGrace: .milliseconds(200), outcomes: outcomes, expectation: done)

        wait(for: [done], timeout: 8)
        XCTAssertGreaterThanOrEqual(elapsedMilliseconds(since: start), 290, "grace plus expireGrace")
        XCTAssertEqual(outcomes.all, [.expired(names: ["stuck-a", "stuck-b"])], "names are sorted")
        XCTAssertEqual(Set(expired.all), ["stuck-a", "stuck-b"])
        XCTAssertEqual(expired.all.count, 2, "each expire is called once")
        XCTAssertEqual(tracker.running.map(\.name), ["stuck-b", "stuck-a"], "the work is still there, in start order")
    }

    func testDrain_completesExactlyOnce_evenWhenExpiredWorkEndsBeforeExpireGrace() {
        let tracker = WorkTracker()
        let box = TokenBox()
        box.token = tracker.begin("job", expire: { [queue] in
            queue.asyncAfter(deadline: .now() + .milliseconds(20)) { box.token?.end() }
        })

        let outcomes = Recorder<WorkTracker.DrainOutcome>()
        let done = expectation(description: "drain completes")
        drain(tracker, grace: .milliseconds(50), expireGrace: .milliseconds(150), outcomes: outcomes, expectation: done)
        wait(for: [done], timeout: 8)

        // Let the expireGrace timer fire too: it must not complete a second time.
        let settled = expectation(description: "timers have fired")
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(400)) { settled.fulfill() }
        wait(for: [settled], timeout: 8)
        XCTAssertEqual(outcomes.all.count, 1, "\(outcomes.all)")
    }

    // MARK: - No new work during the drain

    func testBegin_afterDrainStarted_refusesNewWork() {
        let tracker = WorkTracker()
        XCTAssertTrue(tracker.isAccepting)
        let outcomes = Recorder<WorkTracker.DrainOutcome>()
        let done = expectation(description: "drain completes")
        drain(tracker, grace: .seconds(5), expireGrace: .seconds(5), outcomes: outcomes, expectation: done)

        XCTAssertFalse(tracker.isAccepting)
        XCTAssertNil(tracker.begin("late", expire: {}))
        let ran = Recorder<Bool>()
        XCTAssertFalse(tracker.schedule("late-scheduled", on: queue) { ran.append(true) })
        XCTAssertTrue(tracker.running.isEmpty)
        XCTAssertEqual(tracker.pendingCount, 0)

        wait(for: [done], timeout: 5)
        XCTAssertEqual(outcomes.all, [.finished])
        XCTAssertEqual(ran.all, [])
    }

    func testSchedule_beforeDrain_runsTheBodyAfterTheDelay() {
        let tracker = WorkTracker()
        let ran = expectation(description: "body ran")
        let start = DispatchTime.now()
        XCTAssertTrue(tracker.schedule("soon", on: queue, after: .milliseconds(50)) { ran.fulfill() })
        XCTAssertEqual(tracker.pendingCount, 1)
        wait(for: [ran], timeout: 5)
        XCTAssertGreaterThanOrEqual(elapsedMilliseconds(since: start), 45)
        XCTAssertEqual(tracker.pendingCount, 0, "a started item is no longer pending")
    }

    func testDrain_cancelsScheduledWorkThatHasNotStarted_andItsBodyNeverRuns() {
        let tracker = WorkTracker()
        let ran = Recorder<String>()
        XCTAssertTrue(tracker.schedule("later", on: queue, after: .milliseconds(500)) { ran.append("later") })
        XCTAssertTrue(tracker.schedule("much-later", on: DispatchQueue.global(), after: .milliseconds(300)) {
            ran.append("much-later")
        })
        XCTAssertEqual(tracker.pendingCount, 2)

        let outcomes = Recorder<WorkTracker.DrainOutcome>()
        let done = expectation(description: "drain completes")
        drain(tracker, grace: .seconds(5), expireGrace: .seconds(5), outcomes: outcomes, expectation: done)
        XCTAssertEqual(tracker.pendingCount, 0)
        wait(for: [done], timeout: 5)
        XCTAssertEqual(outcomes.all, [.finished], "cancelled work is not waited for")

        // Wait past both deadlines.
        let afterDeadline = expectation(description: "past the scheduled time")
        DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(800)) { afterDeadline.fulfill() }
        wait(for: [afterDeadline], timeout: 5)
        XCTAssertEqual(ran.all, [], "a cancelled body must never run")
        XCTAssertEqual(tracker.describe(now: DispatchTime.now().uptimeNanoseconds)["cancelled_before_start"], .int(2))
    }

    // MARK: - expireAll

    func testExpireAll_callsEveryRunningWorksExpire_andNotEndedWorks() {
        let tracker = WorkTracker()
        let expired = Recorder<String>()
        let a = tracker.begin("a", expire: { expired.append("a") })
        let b = tracker.begin("b", expire: { expired.append("b") })
        let c = tracker.begin("c", expire: { expired.append("c") })
        b?.end()
        b?.end()  // ending twice is harmless
        XCTAssertEqual(tracker.running.map(\.name), ["a", "c"])

        tracker.expireAll()
        XCTAssertEqual(expired.all.sorted(), ["a", "c"])

        // expireAll asks; it does not end the work itself.
        XCTAssertEqual(tracker.running.map(\.name), ["a", "c"])
        a?.end()
        c?.end()
        XCTAssertTrue(tracker.running.isEmpty)
    }

    func testExpireAll_duringADrain_letsTheDrainFinishWhenWorkEnds() {
        let tracker = WorkTracker()
        let box = TokenBox()
        let expired = Recorder<String>()
        box.token = tracker.begin("long", expire: {
            expired.append("long")
            box.token?.end()
        })
        let outcomes = Recorder<WorkTracker.DrainOutcome>()
        let done = expectation(description: "drain completes")
        drain(tracker, grace: .seconds(30), expireGrace: .seconds(30), outcomes: outcomes, expectation: done)
        tracker.expireAll()
        wait(for: [done], timeout: 5)
        XCTAssertEqual(expired.all, ["long"])
        XCTAssertEqual(outcomes.all.count, 1, "\(outcomes.all)")
    }

    // MARK: - Description

    func testDescribe_countsFinishedAndListsRunning() {
        let tracker = WorkTracker()
        tracker.begin("done", expire: {})?.end()
        let running = tracker.begin("running", expire: {})
        XCTAssertNotNil(running)
        let description = tracker.describe(now: DispatchTime.now().uptimeNanoseconds)
        XCTAssertEqual(description["accepting"], .bool(true))
        XCTAssertEqual(description["finished"], .int(1))
        XCTAssertEqual(description["pending"], .int(0))
        guard case .array(let list)? = description["running"], list.count == 1 else {
            return XCTFail("running: \(String(describing: description["running"]))")
        }
        XCTAssertEqual(list[0]["name"], .string("running"))
    }
}
