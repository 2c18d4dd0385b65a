import Dispatch
import Synchronization
import XCTest
@testable import WatchkeeperCore

/// A registered timer lives as long as its owner holds it: handlers capture their owner
/// `unowned` or `weak`, so a timer that outlived its owner would fire into freed memory or
/// into nothing, and stay listed in the dump.
final class RegisteredTimerTests: XCTestCase {
    /// The dump lists the sources in the order they were registered, whatever left between.
    func testTheRegistry_listsSourcesInTheOrderOfRegistration_afterRemovalsAnywhere() {
        let registry = SourceRegistry()
        let queue = SubsystemQueue(name: "registry-test")
        let stats = (0..<50).map { registry.register(.read, owner: "test", target: "s\($0)", on: queue) }
        for index in stride(from: 0, to: 50, by: 3) { registry.unregister(stats[index]) }
        registry.unregister(stats[0])
        let later = registry.register(.timer, owner: "test", target: "later", on: queue)
        let expected = (0..<50).filter { $0 % 3 != 0 }.map { "s\($0)" } + ["later"]
        XCTAssertEqual(registry.all.map(\.target), expected)
        registry.unregister(later)
        XCTAssertEqual(registry.all.count, expected.count - 1)
    }

    func testATimerWhoseHolderLetsGo_isCancelled_neverFires_andLeavesTheRegistry() throws {
        let registry = SourceRegistry()
        let queue = SubsystemQueue(name: "timer-test")
        let dropped = Mutex(0)
        let kept = Mutex(0)
        var timer: RegisteredTimer? = registry.makeTimer(owner: "test", target: "dropped", on: queue) { dropped.withLock { $0 += 1 } }
        timer?.schedule(after: .milliseconds(200))
        // A later timer on the same serial queue: once it has fired, the dropped one would have.
        let witness = registry.makeTimer(owner: "test", target: "kept", on: queue) { kept.withLock { $0 += 1 } }
        witness.schedule(after: .milliseconds(400))
        XCTAssertEqual(registry.all.map(\.target).sorted(), ["dropped", "kept"])

        timer = nil

        XCTAssertTrue(wait(within: .seconds(10)) { kept.withLock { $0 } == 1 }, "the kept timer never fired")
        XCTAssertEqual(dropped.withLock { $0 }, 0, "a timer no one holds fired")
        XCTAssertTrue(wait(within: .seconds(10)) { registry.all.map(\.target) == ["kept"] }, "the dropped timer is still listed: \(registry.all.map(\.target))")
        witness.cancel()
        XCTAssertTrue(wait(within: .seconds(10)) { registry.all.isEmpty })
    }

    func testATimerItsHolderKeeps_firesEachTime() {
        let registry = SourceRegistry()
        let queue = SubsystemQueue(name: "timer-test")
        let fired = Mutex(0)
        let timer = registry.makeTimer(owner: "test", target: "repeating", on: queue) { fired.withLock { $0 += 1 } }
        timer.schedule(at: .now(), repeating: .milliseconds(10))
        XCTAssertTrue(wait(within: .seconds(10)) { fired.withLock { $0 } >= 3 })
        timer.cancel()
        XCTAssertTrue(timer.isCancelled)
    }

    private func wait(within limit: Duration, until condition: () -> Bool) -> Bool {
        let deadline = MonotonicInstant.now + limit
        while MonotonicInstant.now < deadline {
            if condition() { return true }
            usleep(5_000)
        }
        return condition()
    }
}
