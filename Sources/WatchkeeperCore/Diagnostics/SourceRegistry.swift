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
    public let target: String
    public let queueLabel: String
    private let state = Mutex<(events: UInt64, lastFired: WallTime?, lastFiredMonotonic: UInt64?)>((0, nil, nil))

    init(kind: Kind, target: String, queueLabel: String) {
        self.kind = kind
        self.target = target
        self.queueLabel = queueLabel
    }

    /// `count` is what the source coalesced: a signal source's data is the number of
    /// signals since the handler last ran.
    public func fired(count: UInt = 1) {
        let now = WallTime.now()
        let monotonic = DispatchTime.now().uptimeNanoseconds
        state.withLock { state in
            state.events += UInt64(max(count, 1))
            state.lastFired = now
            state.lastFiredMonotonic = monotonic
        }
    }

    public var events: UInt64 { state.withLock { $0.events } }

    func describe(now: UInt64) -> DumpValue {
        let snapshot = state.withLock { $0 }
        var fields: [DumpField] = [
            .init("kind", .string(kind.rawValue)),
            .init("target", .string(target)),
            .init("queue", .string(queueLabel)),
            .init("events", .int(Int64(snapshot.events))),
        ]
        if let wall = snapshot.lastFired, let monotonic = snapshot.lastFiredMonotonic {
            fields.append(.init("last_fired", .string(wall.iso8601)))
            fields.append(.init("last_fired_ago_s", .double(Double(now &- monotonic) / 1e9)))
        } else {
            fields.append(.init("last_fired", .null))
        }
        return .object(fields)
    }
}

public final class SourceRegistry: Sendable {
    private let sources = Mutex<[SourceStats]>([])

    public init() {}

    public func register(_ kind: SourceStats.Kind, target: String, on queue: SubsystemQueue) -> SourceStats {
        let stats = SourceStats(kind: kind, target: target, queueLabel: queue.label)
        sources.withLock { $0.append(stats) }
        return stats
    }

    /// For sources whose owner cancelled them (timers that end); signal sources are never cancelled.
    public func unregister(_ stats: SourceStats) {
        sources.withLock { $0.removeAll { $0 === stats } }
    }

    public var all: [SourceStats] { sources.withLock { $0 } }

    /// A timer source on `queue`, listed here while it lives: `schedule` sets its deadline
    /// (and interval), `handler` runs on each firing after the count is taken. Cancelling
    /// the timer removes it from the list.
    public func startTimer(_ target: String, on queue: SubsystemQueue, schedule: (DispatchSourceTimer) -> Void,
                           handler: @escaping () -> Void) -> DispatchSourceTimer {
        let stats = register(.timer, target: target, on: queue)
        let timer = DispatchSource.makeTimerSource(queue: queue.queue)
        schedule(timer)
        timer.setEventHandler {
            stats.fired()
            handler()
        }
        timer.setCancelHandler { [self] in unregister(stats) }
        timer.activate()
        return timer
    }
}
