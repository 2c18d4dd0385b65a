import Dispatch
import XCTest

@testable import WatchkeeperCore

/// Pins the ring of recent warnings and errors the dump shows.
final class ProblemRingTests: XCTestCase {
    private func messages(_ ring: ProblemRing) -> [String] {
        ring.snapshot().entries.map(\.message)
    }

    func testNewRing_isEmptyWithItsCapacity() {
        let snapshot = ProblemRing(capacity: 3).snapshot()
        XCTAssertEqual(snapshot.entries, [])
        XCTAssertEqual(snapshot.total, 0)
        XCTAssertEqual(snapshot.capacity, 3)
    }

    func testRecord_belowCapacity_keepsEverythingOldestFirst() {
        let ring = ProblemRing(capacity: 3)
        ring.record(level: "warning", message: "one")
        ring.record(level: "error", message: "two")
        let snapshot = ring.snapshot()
        XCTAssertEqual(snapshot.entries.map(\.message), ["one", "two"])
        XCTAssertEqual(snapshot.entries.map(\.level), ["warning", "error"])
        XCTAssertEqual(snapshot.total, 2)
    }

    func testRecord_pastCapacity_keepsTheLastN_andCountsEveryRecord() {
        let ring = ProblemRing(capacity: 3)
        for index in 1...10 { ring.record(level: "warning", message: "problem \(index)") }
        let snapshot = ring.snapshot()
        XCTAssertEqual(snapshot.entries.map(\.message), ["problem 8", "problem 9", "problem 10"])
        XCTAssertEqual(snapshot.total, 10, "the total includes dropped entries")
        XCTAssertEqual(snapshot.capacity, 3)
    }

    func testRecord_stampsEntriesWithTheWallClock_inOrder() {
        let ring = ProblemRing(capacity: 5)
        let before = WallTime.now()
        ring.record(level: "error", message: "a")
        ring.record(level: "error", message: "b")
        let after = WallTime.now()
        let times = ring.snapshot().entries.map(\.time)
        XCTAssertEqual(times.count, 2)
        XCTAssertLessThanOrEqual(before, times[0])
        XCTAssertLessThanOrEqual(times[0], times[1])
        XCTAssertLessThanOrEqual(times[1], after)
    }

    func testResize_smaller_dropsTheOldest_andKeepsTheTotal() {
        let ring = ProblemRing(capacity: 5)
        for index in 1...5 { ring.record(level: "warning", message: "\(index)") }
        ring.resize(capacity: 2)
        let snapshot = ring.snapshot()
        XCTAssertEqual(snapshot.entries.map(\.message), ["4", "5"])
        XCTAssertEqual(snapshot.capacity, 2)
        XCTAssertEqual(snapshot.total, 5)

        ring.record(level: "warning", message: "6")
        XCTAssertEqual(messages(ring), ["5", "6"], "the new capacity holds for later records")
        XCTAssertEqual(ring.snapshot().total, 6)
    }

    func testResize_larger_keepsEntries_andMakesRoomForMore() {
        let ring = ProblemRing(capacity: 2)
        for index in 1...3 { ring.record(level: "warning", message: "\(index)") }
        XCTAssertEqual(messages(ring), ["2", "3"])
        ring.resize(capacity: 4)
        XCTAssertEqual(messages(ring), ["2", "3"], "dropped entries do not come back")
        for index in 4...6 { ring.record(level: "warning", message: "\(index)") }
        XCTAssertEqual(messages(ring), ["3", "4", "5", "6"])
        XCTAssertEqual(ring.snapshot().capacity, 4)
    }

    func testCapacityBelowOne_isRaisedToOne() {
        let ring = ProblemRing(capacity: 0)
        XCTAssertEqual(ring.snapshot().capacity, 1)
        ring.record(level: "error", message: "a")
        ring.record(level: "error", message: "b")
        XCTAssertEqual(messages(ring), ["b"])
        ring.resize(capacity: -5)
        XCTAssertEqual(ring.snapshot().capacity, 1)
        XCTAssertEqual(messages(ring), ["b"])
    }

    func testConcurrentRecords_areAllCounted_andTheRingStaysBounded() {
        let ring = ProblemRing(capacity: 16)
        DispatchQueue.concurrentPerform(iterations: 8) { worker in
            for index in 0..<250 { ring.record(level: "warning", message: "w\(worker)-\(index)") }
        }
        let snapshot = ring.snapshot()
        XCTAssertEqual(snapshot.total, 2_000)
        XCTAssertEqual(snapshot.entries.count, 16)
    }
}
