import Dispatch
import Logging
import Synchronization
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// A timer its own queue's thread sets (a timerfd in that queue's epoll): it fires once per
/// setting, at the latest setting, not at all once cleared, and is listed until it closes.
/// Whether something did not fire is judged after a later timer of the same queue has.
final class PolledTimerTests: XCTestCase {
    private let queue = SubsystemQueue(name: "test.polled-timer.\(UUIDLess.next())")
    private lazy var sources = SourceRegistry()
    private lazy var poller = DescriptorPoller(queue: queue, sources: sources, logger: Logger(label: "test"), owner: "test", purpose: "test descriptors")

    /// How often a timer fired, read from the test's thread.
    private final class Firings: Sendable {
        private let count = Mutex(0)
        func fire() { count.withLock { $0 += 1 } }
        var value: Int { count.withLock { $0 } }
    }

    private func makeTimer(_ target: String, _ fired: Firings) throws -> PolledTimer {
        try queue.queue.sync {
            try PolledTimer(poller: poller, sources: sources, queue: queue, owner: "test", target: target) { fired.fire() }
        }
    }

    private func count(_ fired: Firings) -> Int { fired.value }

    func testASetTimer_firesOnce_onItsQueue_andIsListedAsATimerUntilCancelled() throws {
        let fired = Firings()
        let queue = self.queue
        let timer = try queue.queue.sync {
            try PolledTimer(poller: poller, sources: sources, queue: queue, owner: "test", target: "summary") {
                dispatchPrecondition(condition: .onQueue(queue.queue))
                fired.fire()
            }
        }
        XCTAssertEqual(sources.all.map(\.target), ["epoll of test descriptors", "summary"])
        XCTAssertEqual(sources.all.last?.kind, .timer)
        queue.queue.sync { timer.schedule(after: .milliseconds(20)) }
        XCTAssertTrue(waitFor(10) { self.count(fired) == 1 }, "never fired")
        // A second firing would need a second setting: a later timer's firing shows none came.
        let witnessFired = Firings()
        let witness = try makeTimer("witness", witnessFired)
        queue.queue.sync { witness.schedule(after: .milliseconds(100)) }
        XCTAssertTrue(waitFor(10) { self.count(witnessFired) == 1 })
        XCTAssertEqual(count(fired), 1)
        XCTAssertEqual(sources.all.first { $0.target == "summary" }?.events, 1)
        queue.queue.sync { timer.cancel() }
        XCTAssertEqual(sources.all.map(\.target), ["epoll of test descriptors", "witness"])
        queue.queue.sync { witness.cancel() }
    }

    func testAClearedTimer_andOneSetAgainAfterItExpired_fireOnlyAtTheirLatestSetting() throws {
        let cleared = Firings(), reset = Firings(), witnessFired = Firings()
        let (clearedTimer, resetTimer, witness) = (try makeTimer("cleared", cleared), try makeTimer("reset", reset), try makeTimer("witness", witnessFired))
        queue.queue.sync {
            clearedTimer.schedule(after: .milliseconds(20))
            clearedTimer.disarm()
            // Expired while the queue is busy here, before its event could be delivered; the
            // new setting replaces the expiry.
            resetTimer.schedule(at: .now)
            usleep(5_000)
            resetTimer.schedule(after: .seconds(2))
            witness.schedule(after: .milliseconds(200))
        }
        XCTAssertTrue(waitFor(10) { self.count(witnessFired) == 1 })
        XCTAssertEqual(count(cleared), 0, "a cleared timer fired")
        XCTAssertEqual(count(reset), 0, "fired at the setting it replaced")
        XCTAssertTrue(waitFor(10) { self.count(reset) == 1 }, "never fired at its latest setting")
        queue.queue.sync {
            // An instant past the end of the clock is never.
            clearedTimer.schedule(at: MonotonicInstant(nanoseconds: .max))
            witness.schedule(after: .milliseconds(100))
        }
        XCTAssertTrue(waitFor(10) { self.count(witnessFired) == 2 })
        XCTAssertEqual(count(cleared), 0)
        queue.queue.sync { [clearedTimer, resetTimer, witness] in
            for timer in [clearedTimer, resetTimer, witness] { timer.cancel() }
        }
    }

    func testATimerItsHolderLetsGo_closesItsTimerfd_andLeavesTheRegistry() throws {
        let fired = Firings()
        var timer: PolledTimer? = try makeTimer("dropped", fired)
        let polled = queue.queue.sync { () -> Int in
            timer?.schedule(after: .milliseconds(50))
            return poller.count
        }
        XCTAssertEqual(polled, 1, "not in the queue's epoll")
        queue.queue.sync { timer = nil }
        XCTAssertEqual(queue.queue.sync { poller.count }, 0)
        XCTAssertEqual(sources.all.map(\.target), ["epoll of test descriptors"])
        let witnessFired = Firings()
        let witness = try makeTimer("witness", witnessFired)
        queue.queue.sync { witness.schedule(after: .milliseconds(150)) }
        XCTAssertTrue(waitFor(10) { self.count(witnessFired) == 1 })
        XCTAssertEqual(count(fired), 0, "a timer no one holds fired")
        queue.queue.sync { witness.cancel() }
    }
}
