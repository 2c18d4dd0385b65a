import XCTest

@testable import WatchkeeperCore

/// The engine's waiting line as a pure value: priorities, first come first served within
/// one, and per-group limits, without a queue or a clock.
final class JobLineTests: XCTestCase {
    private let backup = JobKey(.task, "backup")
    private let inbox = JobKey(.watch, "inbox")
    private let report = JobKey(.task, "report")

    func testStartNext_takesTheHighLaneFirst_andTheOldestWithinALane() {
        var line = JobLine<String>()
        line.configure(backup, limit: 10, lane: JobPriority.low.rank)
        line.configure(inbox, limit: 10, lane: JobPriority.default.rank)
        line.configure(report, limit: 10, lane: JobPriority.high.rank)
        line.append("low-1", to: backup)
        line.append("default-1", to: inbox)
        line.append("default-2", to: inbox)
        line.append("high-1", to: report)
        XCTAssertEqual((0..<4).compactMap { _ in line.startNext()?.element }, ["high-1", "default-1", "default-2", "low-1"])
        XCTAssertNil(line.startNext())
        XCTAssertEqual(line.runningCount, 4)
        XCTAssertEqual(line.waitingCount, 0)
    }

    func testAJobPutBack_isNextAgain_aheadOfLaterArrivals_andNoLongerRunning() {
        var line = JobLine<String>()
        line.configure(inbox, limit: 10, lane: JobPriority.default.rank)
        line.configure(backup, limit: 10, lane: JobPriority.default.rank)
        line.append("a", to: inbox)
        line.append("b", to: backup)
        line.append("c", to: inbox)
        let first = line.startNext()
        XCTAssertEqual(first?.element, "a")
        line.putBack("a", to: inbox)
        XCTAssertEqual(line.runningCount, 0)
        XCTAssertEqual(line.waitingCount, 3)
        XCTAssertEqual((0..<3).compactMap { _ in line.startNext()?.element }, ["a", "b", "c"])
    }

    func testStartNext_withinOneLane_isFirstComeFirstServedAcrossGroups() {
        var line = JobLine<String>()
        line.configure(backup, limit: 10, lane: 1)
        line.configure(inbox, limit: 10, lane: 1)
        line.append("a", to: inbox)
        line.append("b", to: backup)
        line.append("c", to: inbox)
        line.append("d", to: backup)
        XCTAssertEqual((0..<4).compactMap { _ in line.startNext()?.element }, ["a", "b", "c", "d"])
    }

    func testAGroupAtItsLimit_waits_andOthersPassIt() {
        var line = JobLine<String>()
        line.configure(inbox, limit: 1, lane: 1)
        line.configure(backup, limit: 5, lane: 1)
        line.append("file-1", to: inbox)
        line.append("file-2", to: inbox)
        line.append("run-1", to: backup)
        XCTAssertEqual(line.startNext()?.element, "file-1")
        XCTAssertEqual(line.startNext()?.element, "run-1", "the rule is at its limit of one; the task goes ahead")
        XCTAssertNil(line.startNext())
        line.finished(inbox)
        XCTAssertEqual(line.startNext()?.element, "file-2")
        XCTAssertEqual(line.running(of: inbox), 1)
    }

    func testRaisingAGroupsLimit_letsItsWaitingWorkStart() {
        var line = JobLine<Int>()
        line.configure(inbox, limit: 1, lane: 1)
        for index in 1...3 { line.append(index, to: inbox) }
        XCTAssertEqual(line.startNext()?.element, 1)
        XCTAssertNil(line.startNext())
        line.configure(inbox, limit: 3, lane: 1)
        XCTAssertEqual(line.startNext()?.element, 2)
        XCTAssertEqual(line.startNext()?.element, 3)
    }

    func testRemoveWaiting_takesOnlyThatGroupsMatchingWork_inOrder() {
        var line = JobLine<Int>()
        for index in 1...6 { line.append(index, to: index.isMultiple(of: 2) ? inbox : backup) }
        XCTAssertEqual(line.removeWaiting(of: inbox, where: { $0 > 2 }), [4, 6])
        XCTAssertEqual(line.waitingCount, 4)
        XCTAssertEqual(line.removeWaiting(of: inbox), [2])
        XCTAssertEqual(line.removeAllWaiting().map(\.element), [1, 3, 5])
        XCTAssertEqual(line.waitingCount, 0)
        XCTAssertNil(line.startNext())
    }

    func testRemoveFirstWaiting_takesOneMatchFromWhicheverGroupHoldsIt_andTheRestStartInOrder() {
        var line = JobLine<Int>()
        line.configure(inbox, limit: 1, lane: JobPriority.default.rank)
        for index in 1...6 { line.append(index, to: index.isMultiple(of: 2) ? inbox : backup) }
        let taken = line.removeFirstWaiting { $0 == 4 }
        XCTAssertEqual(taken?.key, inbox)
        XCTAssertEqual(taken?.element, 4)
        XCTAssertNil(line.removeFirstWaiting { $0 == 4 }, "it is no longer in the line")
        XCTAssertEqual(line.waitingCount, 5)
        XCTAssertEqual(line.waiting(of: inbox), 2)
        XCTAssertEqual((0..<5).compactMap { _ in line.startNext()?.element }, [1, 2, 3, 5], "inbox's limit of 1 holds 6 back")
        line.finished(inbox)
        XCTAssertEqual(line.startNext()?.element, 6)
        XCTAssertEqual(line.waitingCount, 0)
    }

    func testABurstOfAHundredThousand_startsEachOnceInOrder() {
        var line = JobLine<Int>()
        line.configure(inbox, limit: 1_024, lane: 1)
        for index in 0..<100_000 { line.append(index, to: inbox) }
        var next = 0
        while let (key, element) = line.startNext() {
            XCTAssertEqual(element, next)
            next += 1
            line.finished(key)
        }
        XCTAssertEqual(next, 100_000)
        XCTAssertEqual(line.runningCount, 0)
    }

    func testForget_keepsAGroupThatStillRuns() {
        var line = JobLine<Int>()
        line.configure(inbox, limit: 1, lane: 1)
        line.append(1, to: inbox)
        _ = line.startNext()
        line.forget(inbox)
        XCTAssertEqual(line.limit(of: inbox), 1, "a running job's group stays until it ends")
        line.finished(inbox)
        line.forget(inbox)
        XCTAssertNil(line.limit(of: inbox))
    }
}
