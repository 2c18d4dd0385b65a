import Dispatch
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// The jobs' deadline heap on a real queue and timer: waits are for events with a deadline,
/// and what is checked is order and presence, never how late a firing was.
final class JobDeadlinesTests: XCTestCase {
    private let queue = SubsystemQueue(name: "test.deadlines.\(UUIDLess.next())")
    private let sources = SourceRegistry()
    private lazy var deadlines = JobDeadlines(queue: queue, sources: sources)

    private final class Log: @unchecked Sendable {
        var fired: [Int] = []
        let arrived = DispatchSemaphore(value: 0)
        func add(_ value: Int) {
            fired.append(value)
            arrived.signal()
        }
        func wait(_ count: Int) -> Bool {
            (0..<count).allSatisfy { _ in arrived.wait(timeout: .now() + 10) == .success }
        }
    }

    private func listed(_ prefix: String) -> Int {
        sources.all.filter { $0.kind == .timer && $0.target.hasPrefix(prefix) }.count
    }

    func testDeadlines_fireInTheOrderOfTheirTimes_notOfScheduling() {
        let log = Log()
        queue.queue.sync {
            for milliseconds in [30, 10, 20] {
                _ = deadlines.schedule(after: .milliseconds(milliseconds), owner: "test", target: "d\(milliseconds)") { log.add(milliseconds) }
            }
            XCTAssertEqual(listed("d"), 3, "every pending deadline must be listed with the sources")
        }
        XCTAssertTrue(log.wait(3))
        queue.queue.sync {
            XCTAssertEqual(log.fired, [10, 20, 30])
            XCTAssertEqual(deadlines.count, 0)
            XCTAssertEqual(listed("d"), 0, "a deadline that fired must leave the sources list")
        }
    }

    func testCancelledEarliestDeadline_neverFires_andTheLaterOnesStillDo() {
        let log = Log()
        queue.queue.sync {
            let earliest = deadlines.schedule(after: .milliseconds(5), owner: "test", target: "early") { log.add(5) }
            _ = deadlines.schedule(after: .milliseconds(40), owner: "test", target: "late") { log.add(40) }
            earliest.cancel()
            earliest.cancel()
            XCTAssertFalse(earliest.isPending)
            XCTAssertEqual(listed("early"), 0, "a cancelled deadline must leave the sources list")
        }
        XCTAssertTrue(log.wait(1))
        queue.queue.sync { XCTAssertEqual(log.fired, [40]) }
    }

    func testHandler_canScheduleAnEarlierDeadline_thanTheOneTheTimerWaitsFor() {
        let log = Log()
        queue.queue.sync {
            _ = deadlines.schedule(after: .seconds(30), owner: "test", target: "far") { log.add(30_000) }
            _ = deadlines.schedule(after: .milliseconds(1), owner: "test", target: "first") { [deadlines] in
                log.add(1)
                _ = deadlines.schedule(after: .milliseconds(5), owner: "test", target: "second") { log.add(5) }
            }
        }
        XCTAssertTrue(log.wait(2), "a deadline added by a handler, earlier than the timer's, must still fire")
        queue.queue.sync {
            XCTAssertEqual(log.fired, [1, 5])
            XCTAssertEqual(deadlines.count, 1)
        }
    }

    func testManyDeadlines_withRandomCancels_fireExactlyTheRest_inTheOrderOfTheirTimes() {
        var generator = SeededGenerator(seed: 7)
        let log = Log()
        var expected: Set<Int> = []
        var times: [Int: MonotonicInstant] = [:]
        queue.queue.sync {
            var handles: [JobDeadline] = []
            for index in 0..<300 {
                let micros = Int.random(in: 1...60_000, using: &generator)
                let handle = deadlines.schedule(after: .microseconds(micros), owner: "test", target: "r\(index)") { log.add(index) }
                times[index] = handle.deadline
                handles.append(handle)
            }
            for (index, handle) in handles.enumerated() {
                if Bool.random(using: &generator) { handle.cancel() } else { expected.insert(index) }
            }
        }
        XCTAssertTrue(log.wait(expected.count))
        queue.queue.sync {
            XCTAssertEqual(Set(log.fired), expected, "exactly the deadlines not cancelled must fire")
            XCTAssertEqual(log.fired.count, expected.count, "each once")
            let fireTimes = log.fired.map { times[$0]! }
            XCTAssertEqual(fireTimes, fireTimes.sorted(), "deadlines must fire in the order of their times")
            XCTAssertEqual(deadlines.count, 0)
        }
    }
}
