import XCTest

@testable import WatchkeeperCore

/// The queue is a value with no clock: time is whatever instant the test passes.
final class SettleQueueTests: XCTestCase {
    private typealias Queue = SettleQueue<String>

    private func path(_ text: String) -> [UInt8] { Array(text.utf8) }

    private func at(_ nanoseconds: UInt64) -> MonotonicInstant { MonotonicInstant(nanoseconds: nanoseconds) }

    private func names(_ items: [Queue.Item]) -> [String] {
        items.map { String(decoding: $0.path, as: UTF8.self) }
    }

    func testAdd_aNewEventForAWaitingPath_pushesItsWindowBack_replacesTheEvent_andCountsAsCoalesced() {
        var queue = Queue()
        XCTAssertEqual(queue.add(path: path("a"), event: "created", deadline: at(100), fromScan: false), .queued)
        XCTAssertEqual(queue.add(path: path("a"), event: "closed_write", deadline: at(150), fromScan: false), .coalesced)
        XCTAssertEqual(queue.count, 1)
        XCTAssertEqual(queue.coalesced, 1)
        XCTAssertEqual(queue.nextDeadline, at(150), "the superseded window is not reported")
        XCTAssertEqual(queue.takeDue(now: at(149)), [])
        XCTAssertEqual(queue.takeDue(now: at(150)), [.init(path: path("a"), event: "closed_write", deadline: at(150), fromScan: false)])
        XCTAssertTrue(queue.isEmpty)
        XCTAssertNil(queue.nextDeadline)
    }

    func testRemovePath_takesOnlyThatPath_andTheNextDeadlineMovesOn() {
        var queue = Queue()
        queue.add(path: path("a"), event: "scan", deadline: at(100), fromScan: true)
        queue.add(path: path("b"), event: "closed_write", deadline: at(200), fromScan: false)
        XCTAssertEqual(queue.remove(path: path("a"))?.event, "scan")
        XCTAssertNil(queue.remove(path: path("a")))
        XCTAssertEqual(queue.nextDeadline, at(200))
        XCTAssertEqual(names(queue.takeDue(now: at(1_000))), ["b"])
    }

    func testAdd_aScanFindingAWaitingPath_doesNotPushItsWindowBack_soRescansCannotStarveIt() {
        var queue = Queue()
        queue.add(path: path("a"), event: "closed_write", deadline: at(100), fromScan: false)
        for now in stride(from: UInt64(10), through: 90, by: 20) {
            XCTAssertEqual(queue.add(path: path("a"), event: "scan", deadline: at(now + 1_000), fromScan: true), .alreadyWaiting)
        }
        XCTAssertEqual(queue.coalesced, 0)
        XCTAssertEqual(queue.takeDue(now: at(100)).map(\.event), ["closed_write"])
    }

    func testAdd_anEventForAPathAScanFound_keepsTheScansLongerWindow_butTakesTheEvent() {
        var queue = Queue()
        queue.add(path: path("a"), event: "scan", deadline: at(1_000), fromScan: true)
        XCTAssertEqual(queue.add(path: path("a"), event: "closed_write", deadline: at(200), fromScan: false), .coalesced)
        XCTAssertEqual(queue.takeDue(now: at(999)), [])
        XCTAssertEqual(queue.takeDue(now: at(1_000)), [.init(path: path("a"), event: "closed_write", deadline: at(1_000), fromScan: false)])
    }

    func testTakeDue_returnsEarliestWindowFirst_evenWhenAShortWindowWasQueuedAfterLongOnes() {
        var queue = Queue()
        queue.add(path: path("scanned-1"), event: "scan", deadline: at(1_000), fromScan: true)
        queue.add(path: path("scanned-2"), event: "scan", deadline: at(1_000), fromScan: true)
        queue.add(path: path("event-1"), event: "closed_write", deadline: at(300), fromScan: false)
        queue.add(path: path("event-2"), event: "closed_write", deadline: at(200), fromScan: false)
        queue.add(path: path("later"), event: "closed_write", deadline: at(1_500), fromScan: false)
        XCTAssertEqual(queue.nextDeadline, at(200))
        XCTAssertEqual(names(queue.takeDue(now: at(300))), ["event-2", "event-1"])
        XCTAssertEqual(queue.nextDeadline, at(1_000))
        XCTAssertEqual(names(queue.takeDue(now: at(2_000))), ["scanned-1", "scanned-2", "later"], "equal windows in the order they were added")
    }

    func testTakeDue_withLookahead_alsoTakesWindowsEndingAMomentLater_butNotBeyond() {
        var queue = Queue()
        for (name, deadline) in [("a", UInt64(100)), ("b", 101), ("c", 124), ("d", 126)] {
            queue.add(path: path(name), event: "closed_write", deadline: at(deadline), fromScan: false)
        }
        XCTAssertEqual(names(queue.takeDue(now: at(100), lookahead: .nanoseconds(25))), ["a", "b", "c"])
        XCTAssertEqual(queue.nextDeadline, at(126))
        XCTAssertEqual(names(queue.takeDue(now: at(.max - 1), lookahead: .seconds(Int64.max))), ["d"], "the horizon saturates instead of wrapping")
    }

    func testTakeDue_skipsTheStaleSlotsOfPathsWhoseWindowMoved_andReturnsEachPathOnce() {
        var queue = Queue()
        for step in 0..<50 {
            queue.add(path: path("busy"), event: "modified-\(step)", deadline: at(100 + UInt64(step)), fromScan: false)
        }
        queue.add(path: path("quiet"), event: "closed_write", deadline: at(120), fromScan: false)
        XCTAssertEqual(queue.coalesced, 49)
        XCTAssertEqual(queue.nextDeadline, at(120), "busy's 49 stale slots are not its window")
        XCTAssertEqual(names(queue.takeDue(now: at(140))), ["quiet"])
        XCTAssertEqual(queue.takeDue(now: at(149)).count, 1)
        XCTAssertEqual(queue.takeDue(now: at(10_000)), [])
        XCTAssertEqual(queue.storedSlots, 0, "an empty queue keeps no slots")
    }

    func testTakeDue_afterManyItems_compactsTheConsumedSlots() {
        var queue = Queue()
        for index in 0..<3_000 {
            queue.add(path: path("f\(index)"), event: "closed_write", deadline: at(UInt64(index)), fromScan: false)
        }
        XCTAssertEqual(queue.takeDue(now: at(999)).count, 1_000)
        XCTAssertEqual(queue.storedSlots, 3_000, "below the threshold nothing is moved")
        XCTAssertEqual(queue.takeDue(now: at(1_999)).count, 1_000)
        XCTAssertEqual(queue.storedSlots, 1_500, "compacted when 1,500 of 3,000 were consumed, then 500 more taken")
        XCTAssertEqual(queue.nextDeadline, at(2_000))
        XCTAssertEqual(names(queue.takeDue(now: at(2_001))), ["f2000", "f2001"])
    }

    func testRemoveAll_returnsEveryWaitingPathExactlyOnce_earliestFirst_andEmptiesTheQueue() {
        var queue = Queue()
        queue.add(path: path("late"), event: "scan", deadline: at(1_000), fromScan: true)
        queue.add(path: path("early"), event: "closed_write", deadline: at(10), fromScan: false)
        for step in 0..<5 { queue.add(path: path("moved"), event: "modified", deadline: at(500 + UInt64(step)), fromScan: false) }
        let items = queue.removeAll()
        XCTAssertEqual(names(items), ["early", "moved", "late"])
        XCTAssertEqual(items.map(\.fromScan), [false, false, true])
        XCTAssertTrue(queue.isEmpty)
        XCTAssertNil(queue.nextDeadline)
        XCTAssertEqual(queue.takeDue(now: at(.max)), [])
        XCTAssertEqual(queue.removeAll(), [])
        XCTAssertEqual(queue.add(path: path("early"), event: "created", deadline: at(5), fromScan: false), .queued, "usable again")
    }

    func testRemoveWhere_dropsOnlyTheSelectedPaths_andTheRestComeDueAsBefore() {
        var queue = Queue()
        for name in ["gone/a", "kept", "gone/b", "gone-not/c"] {
            queue.add(path: path(name), event: "closed_write", deadline: at(100), fromScan: false)
        }
        queue.add(path: path("early-gone/x"), event: "closed_write", deadline: at(50), fromScan: false)
        let removed = queue.remove { $0.path.starts(with: Array("gone/".utf8)) || $0.path.starts(with: Array("early-gone/".utf8)) }
        XCTAssertEqual(names(removed), ["early-gone/x", "gone/a", "gone/b"])
        XCTAssertEqual(queue.count, 2)
        XCTAssertEqual(queue.nextDeadline, at(100), "the removed path's earlier window is not reported")
        XCTAssertNil(queue.item(for: path("gone/a")))
        XCTAssertEqual(queue.item(for: path("kept"))?.deadline, at(100))
        XCTAssertEqual(names(queue.takeDue(now: at(100))), ["kept", "gone-not/c"])
    }

    func testAQueueOfSendableEvents_isSendable_soItCanMoveBetweenQueues() {
        enum Event: Sendable, Equatable { case closedWrite, movedIn }
        var queue = SettleQueue<Event>()
        queue.add(path: path("x"), event: .movedIn, deadline: at(1), fromScan: false)
        let sendable: any Sendable = queue
        XCTAssertEqual((sendable as? SettleQueue<Event>)?.count, 1)
    }

    func testAnEmptiedQueue_givesACatchUpsStorageBack() {
        var queue = Queue()
        for index in 0..<50_000 { queue.add(path: path("f\(index)"), event: "closed_write", deadline: at(UInt64(index % 7)), fromScan: true) }
        XCTAssertGreaterThanOrEqual(queue.storageCapacity, 100_000)
        XCTAssertEqual(queue.takeDue(now: at(10)).count, 50_000)
        XCTAssertLessThanOrEqual(queue.storageCapacity, Queue.keptCapacity * 3, "100,000 paths' worth kept for the daemon's life")
    }
}
