import Dispatch
import Synchronization

/// Every dispatch source the daemon owns, with what it watches and how often it
/// fired. The owner calls `fired` from the source's handler; the dump reads the
/// counters from its own queue, so they sit behind a Mutex.
public final class SourceStats: Sendable {
    public enum Kind: String, Sendable {
        case signal
        case timer
        case read
    }

    public let kind: Kind
    /// Who owns it: the component that created it and alone cancels it.
    public let owner: String
    public let target: String
    public let queueLabel: String
    private let state = Mutex<(events: UInt64, lastFired: WallTime?, lastFiredMonotonic: MonotonicInstant?)>((0, nil, nil))

    init(kind: Kind, owner: String, target: String, queueLabel: String) {
        self.kind = kind
        self.owner = owner
        self.target = target
        self.queueLabel = queueLabel
    }

    /// `count` is what the source coalesced: a signal source's data is the number of
    /// signals since the handler last ran.
    public func fired(count: UInt = 1) {
        let now = WallTime.now()
        let monotonic = MonotonicInstant.now
        state.withLock { state in
            state.events += UInt64(max(count, 1))
            state.lastFired = now
            state.lastFiredMonotonic = monotonic
        }
    }

    public var events: UInt64 { state.withLock { $0.events } }

    func describe(now: MonotonicInstant) -> DumpValue {
        let snapshot = state.withLock { $0 }
        var fields: [DumpField] = [
            .init("kind", .string(kind.rawValue)),
            .init("owner", .string(owner)),
            .init("target", .string(target)),
            .init("queue", .string(queueLabel)),
            .init("events", .int(Int64(snapshot.events))),
        ]
        if let wall = snapshot.lastFired, let monotonic = snapshot.lastFiredMonotonic {
            fields.append(.init("last_fired", .string(wall.iso8601)))
            fields.append(.init("last_fired_ago_s", .double((now - monotonic).secondsDouble)))
        } else {
            fields.append(.init("last_fired", .null))
        }
        return .object(fields)
    }
}

public final class SourceRegistry: Sendable {
    /// By identity, each with its place in the order of registration: a job registers and
    /// unregisters four (pidfd, stdout, stderr, progress), and a search of the whole list
    /// for each unregistration, retaining and releasing every entry it passed, was 1.4 %
    /// of the daemon's CPU in a 20,000-file burst. The dump alone pays for the order.
    private struct Listed: Sendable {
        var next: UInt64 = 0
        var byIdentity: [ObjectIdentifier: (order: UInt64, stats: SourceStats)] = [:]
    }
    private let sources = Mutex(Listed())

    public init() {}

    public func register(_ kind: SourceStats.Kind, owner: String, target: String, on queue: SubsystemQueue) -> SourceStats {
        let stats = SourceStats(kind: kind, owner: owner, target: target, queueLabel: queue.label)
        sources.withLock { listed in
            listed.byIdentity[ObjectIdentifier(stats)] = (listed.next, stats)
            listed.next += 1
        }
        return stats
    }

    /// For sources whose owner cancelled them (timers that end); signal sources are never cancelled.
    public func unregister(_ stats: SourceStats) {
        _ = sources.withLock { $0.byIdentity.removeValue(forKey: ObjectIdentifier(stats)) }
    }

    /// In the order they were registered.
    public var all: [SourceStats] {
        sources.withLock { $0.byIdentity.values.sorted { $0.order < $1.order }.map(\.stats) }
    }

    /// A timer on `queue`, listed here until it is cancelled: `handler` runs on each firing
    /// after the count is taken. It starts unscheduled; the owner schedules it (again and
    /// again, for a timer that is re-armed: its firings keep adding up).
    public func makeTimer(owner: String, target: String, on queue: SubsystemQueue, handler: @escaping () -> Void) -> RegisteredTimer {
        let stats = register(.timer, owner: owner, target: target, on: queue)
        let timer = DispatchSource.makeTimerSource(queue: queue.queue)
        timer.setEventHandler {
            stats.fired()
            handler()
        }
        timer.setCancelHandler { [self] in unregister(stats) }
        timer.activate()
        return RegisteredTimer(timer: timer, stats: stats)
    }
}

/// Delayed work the dump can see and its owner can cancel: the one way the daemon waits
/// for a deadline (no bare asyncAfter, which nothing lists and no drain can cancel). It
/// lives as long as its owner holds it: when the last reference goes, the timer is
/// cancelled, so it neither fires into an owner that is gone (handlers capture their owner
/// `unowned` or `weak`) nor stays listed in the dump.
// @unchecked Sendable: `isCancelled` is confined to its owner's queue, where it fires; the source is thread-safe.
public final class RegisteredTimer: @unchecked Sendable {
    private let timer: DispatchSourceTimer
    public let stats: SourceStats
    /// Owner's queue only.
    public private(set) var isCancelled = false

    init(timer: DispatchSourceTimer, stats: SourceStats) {
        self.timer = timer
        self.stats = stats
    }

    deinit {
        // A dispatch source keeps its handlers, and what they capture, until it is cancelled.
        if !isCancelled { timer.cancel() }
    }

    /// Fires once, `delay` from now (monotonic).
    public func schedule(after delay: Duration) {
        timer.schedule(deadline: .now() + delay.dispatchInterval)
    }

    public func schedule(at deadline: DispatchTime, repeating interval: Duration? = nil) {
        timer.schedule(deadline: deadline, repeating: interval.map(\.dispatchInterval) ?? .never)
    }

    /// Set for no time at all: it does not fire until scheduled again.
    public func disarm() {
        timer.schedule(deadline: .distantFuture)
    }

    /// A wall-clock deadline (calendar schedules): follows clock changes.
    public func schedule(wallDeadline: DispatchWallTime) {
        timer.schedule(wallDeadline: wallDeadline)
    }

    public func cancel() {
        guard !isCancelled else { return }
        isCancelled = true
        timer.cancel()
    }
}
