import Dispatch

/// Time as the watcher sees it: the monotonic clock its settle windows, confirmations and
/// budgets are measured on, the wall clock files' times are compared with, and timers that
/// fire on the watching queue. In the daemon `DispatchWatchClock` (CLOCK_MONOTONIC,
/// CLOCK_REALTIME, registered dispatch timers); in the watcher's unit tests a clock the
/// test moves by hand, so a settle window of seconds passes in no time.
protocol WatchClock: AnyObject, Sendable {
    var now: MonotonicInstant { get }
    var wallNow: WallTime { get }
    /// A timer of `owner` for `target` (what the dump lists), firing `handler` on the
    /// watching queue; it does nothing until scheduled.
    func makeTimer(owner: String, target: String, handler: @escaping () -> Void) -> any WatchTimer
}

protocol WatchTimer: AnyObject {
    /// Fires once at `deadline` (an earlier schedule is replaced).
    func schedule(at deadline: MonotonicInstant)
    /// Fires at `deadline`, then every `interval`.
    func schedule(at deadline: MonotonicInstant, repeating interval: Duration)
    func cancel()
}

/// The daemon's clock: registered timers (the dump lists them) on the watching queue.
// @unchecked Sendable: its timers are made and fired on the watching queue.
final class DispatchWatchClock: WatchClock, @unchecked Sendable {
    private let sources: SourceRegistry
    private let queue: SubsystemQueue

    init(sources: SourceRegistry, queue: SubsystemQueue) {
        self.sources = sources
        self.queue = queue
    }

    var now: MonotonicInstant { .now }
    var wallNow: WallTime { .now() }

    func makeTimer(owner: String, target: String, handler: @escaping () -> Void) -> any WatchTimer {
        sources.makeTimer(owner: owner, target: target, on: queue, handler: handler)
    }
}

extension RegisteredTimer: WatchTimer {
    func schedule(at deadline: MonotonicInstant) {
        schedule(at: deadline.dispatchTime)
    }

    func schedule(at deadline: MonotonicInstant, repeating interval: Duration) {
        schedule(at: deadline.dispatchTime, repeating: interval)
    }
}
