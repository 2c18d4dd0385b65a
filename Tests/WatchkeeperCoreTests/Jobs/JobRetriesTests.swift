import Dispatch
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Work waiting for its next attempt: handed back when due, or taken back before.
final class JobRetriesTests: XCTestCase {
    private let queue = SubsystemQueue(name: "test.retries.\(UUIDLess.next())")
    private let backup = JobKey(.task, "backup")
    private let inbox = JobKey(.watch, "inbox")

    private func make() -> JobRetries<String> { JobRetries(queue: queue, sources: SourceRegistry()) }

    func testDueWork_comesBackOnceItsDelayHasPassed_andLeavesTheCount() {
        let retries = make()
        let due = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var handed: [(JobKey, String)] = []
        queue.queue.sync {
            retries.schedule("a", key: backup, runID: RunID(1), attempt: 2, after: .milliseconds(10)) { key, element in
                handed.append((key, element))
                due.signal()
            }
            XCTAssertEqual(retries.count, 1)
            XCTAssertEqual(retries.count(of: backup), 1)
            XCTAssertEqual(retries.count(of: inbox), 0)
        }
        XCTAssertEqual(due.wait(timeout: .now() + 10 * testDeadlineScale), .success, "the retry never came due")
        queue.queue.sync {
            XCTAssertEqual(handed.map(\.0), [backup])
            XCTAssertEqual(handed.map(\.1), ["a"])
            XCTAssertEqual(retries.count, 0)
        }
    }

    func testWorkTakenBack_neverComesDue_andComesOutSoonestFirst() {
        let retries = make()
        let due = DispatchSemaphore(value: 0)
        queue.queue.sync {
            retries.schedule("late", key: backup, runID: RunID(1), attempt: 2, after: .milliseconds(300)) { _, _ in due.signal() }
            retries.schedule("soon", key: backup, runID: RunID(2), attempt: 3, after: .milliseconds(100)) { _, _ in due.signal() }
            retries.schedule("file", key: inbox, runID: RunID(3), attempt: 2, after: .milliseconds(200)) { _, _ in due.signal() }
            XCTAssertEqual(retries.take(runID: RunID(9))?.element, nil)
            XCTAssertEqual(retries.take { key, _ in key == backup }.map(\.element), ["soon", "late"])
            XCTAssertEqual(retries.count(of: backup), 0)
            XCTAssertEqual(retries.take(runID: RunID(3))?.element, "file")
            XCTAssertEqual(retries.count, 0)
        }
        XCTAssertEqual(due.wait(timeout: .now() + 0.5), .timedOut, "work taken back still came due")
    }

    func testTheDump_saysEachRetrysRunAttemptAndTimeLeft() {
        let retries = make()
        queue.queue.sync {
            retries.schedule("a", key: backup, runID: RunID(0xab), attempt: 2, after: .seconds(60)) { _, _ in }
            guard case .array(let items) = retries.describe(now: .now), case .object(let fields)? = items.first else {
                return XCTFail("no retry in the dump")
            }
            XCTAssertEqual(fields.map(\.key), ["task", "run_id", "attempt", "due_in"])
            XCTAssertEqual(fields[1].value, .string(RunID(0xab).description))
            XCTAssertEqual(fields[2].value, .int(2))
            _ = retries.take()
        }
    }
}
