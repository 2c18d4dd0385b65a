#if canImport(XCTest)
import Dispatch
import Foundation
import WatchkeeperCore

/// What a watcher delivered on its own queue, events and read failures, kept for the test's
/// thread to wait on and read. Each delivery signals, so a wait sleeps until something
/// arrives instead of polling.
public final class EventRecorder<Event: Sendable, Failure: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private var events: [Event] = []
    private var failures: [Failure] = []
    private let arrived = DispatchSemaphore(value: 0)

    public init() {}

    public func record(_ event: Event) {
        record(contentsOf: [event])
    }

    public func record(contentsOf batch: [Event]) {
        lock.withLock { events += batch }
        arrived.signal()
    }

    public func recordFailure(_ failure: Failure) {
        lock.withLock { failures.append(failure) }
        arrived.signal()
    }

    /// Everything recorded so far, in the order it arrived.
    public var recorded: [Event] {
        lock.withLock { events }
    }

    public var recordedFailures: [Failure] {
        lock.withLock { failures }
    }

    /// Waits until `done` holds for everything recorded so far, or the deadline passes;
    /// returns what was recorded either way, for the assertions to explain.
    public func wait(timeout: Duration = .seconds(10), until done: ([Event]) -> Bool) -> [Event] {
        let deadline = MonotonicInstant.now + timeout * testDeadlineScale
        while true {
            let seen = recorded
            if done(seen) { return seen }
            if arrived.wait(timeout: deadline.dispatchTime) == .timedOut { return recorded }
        }
    }
}
#endif
