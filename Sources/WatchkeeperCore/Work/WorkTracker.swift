import Dispatch
import Synchronization

/// DispatchWorkItem.cancel() is thread-safe; the type just is not marked Sendable.
struct CancellableItem: @unchecked Sendable {
    let item: DispatchWorkItem
}

/// All work the daemon runs, seen from the shutdown drain: work that has not
/// started can be cancelled; running work is waited for up to the grace period and
/// then asked to expire. Jobs (tasks and watch rules) register here; the drain
/// never needs to know what kind of work it is.
public final class WorkTracker: Sendable {
    public struct Running: Sendable, Equatable {
        public let id: UInt64
        public let name: String
        public let startedAt: UInt64
    }

    private struct State {
        var accepting = true
        var nextID: UInt64 = 1
        var running: [UInt64: (name: String, startedAt: UInt64, expire: @Sendable () -> Void)] = [:]
        var pending: [UInt64: (name: String, item: CancellableItem)] = [:]
        var cancelledBeforeStart: UInt64 = 0
        var finished: UInt64 = 0
    }

    private let state = Mutex(State())
    private let group = DispatchGroup()

    public init() {}

    /// Running work holds a token until it ends; `expire` is how the drain ends it
    /// early (for a job: its expiration handler, then its process group is killed).
    public final class Token: Sendable {
        let id: UInt64
        private let tracker: WorkTracker
        private let ended = Atomic(false)

        init(id: UInt64, tracker: WorkTracker) {
            self.id = id
            self.tracker = tracker
        }

        public func end() {
            guard !ended.exchange(true, ordering: .acquiringAndReleasing) else { return }
            tracker.finish(id)
        }
    }

    /// nil once the drain has begun: no new work starts during shutdown.
    public func begin(_ name: String, expire: @escaping @Sendable () -> Void) -> Token? {
        let id: UInt64? = state.withLock { state in
            guard state.accepting else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.running[id] = (name, DispatchTime.now().uptimeNanoseconds, expire)
            return id
        }
        guard let id else { return nil }
        group.enter()
        return Token(id: id, tracker: self)
    }

    /// Work queued to start later. The drain cancels it if it has not started; the
    /// item itself calls `started` (or simply runs; see `schedule`).
    @discardableResult
    public func schedule(_ name: String, on queue: DispatchQueue, after delay: DispatchTimeInterval = .never,
                         _ body: @escaping @Sendable () -> Void) -> Bool {
        let id: UInt64? = state.withLock { state in
            guard state.accepting else { return nil }
            let id = state.nextID
            state.nextID += 1
            return id
        }
        guard let id else { return false }
        let item = DispatchWorkItem { [self] in
            let stillPending = state.withLock { $0.pending.removeValue(forKey: id) != nil }
            if stillPending { body() }
        }
        let cancellable = CancellableItem(item: item)
        state.withLock { $0.pending[id] = (name, cancellable) }
        if case .never = delay {
            queue.async(execute: item)
        } else {
            queue.asyncAfter(deadline: .now() + delay, execute: item)
        }
        return true
    }

    fileprivate func finish(_ id: UInt64) {
        let removed = state.withLock { state -> Bool in
            guard state.running.removeValue(forKey: id) != nil else { return false }
            state.finished += 1
            return true
        }
        if removed { group.leave() }
    }

    public var running: [Running] {
        state.withLock { $0.running.map { Running(id: $0.key, name: $0.value.name, startedAt: $0.value.startedAt) } }
            .sorted { $0.id < $1.id }
    }

    public var pendingCount: Int { state.withLock { $0.pending.count } }
    public var isAccepting: Bool { state.withLock { $0.accepting } }

    public enum DrainOutcome: Equatable, Sendable {
        /// Everything running finished within the grace period.
        case finished
        /// Work was still running at the deadline and was asked to expire.
        case expired(names: [String])
    }

    /// Stops accepting, cancels what has not started, and calls `completion` on
    /// `queue` when running work is done, or when the grace period ran out and the
    /// remaining work was expired and ended (or `expireGrace` more passed).
    public func drain(grace: Duration, expireGrace: Duration, on queue: DispatchQueue,
                      completion: @escaping @Sendable (DrainOutcome) -> Void) {
        let cancelled = state.withLock { state -> [CancellableItem] in
            state.accepting = false
            let items = state.pending.values.map(\.item)
            state.cancelledBeforeStart += UInt64(items.count)
            state.pending.removeAll()
            return items
        }
        for pending in cancelled { pending.item.cancel() }

        let done = Atomic(false)
        group.notify(queue: queue) {
            if !done.exchange(true, ordering: .acquiringAndReleasing) { completion(.finished) }
        }
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(grace.nanosecondsClamped))) { [self] in
            guard !done.load(ordering: .acquiring) else { return }
            let late = state.withLock { $0.running.values.map { ($0.name, $0.expire) } }
            for (_, expire) in late { expire() }
            let names = late.map(\.0).sorted()
            let finishLate: @Sendable () -> Void = {
                if !done.exchange(true, ordering: .acquiringAndReleasing) { completion(.expired(names: names)) }
            }
            group.notify(queue: queue, execute: finishLate)
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(expireGrace.nanosecondsClamped)), execute: finishLate)
        }
    }

    /// A second SIGTERM during the drain: expire everything now.
    public func expireAll() {
        let expirations = state.withLock { $0.running.values.map(\.expire) }
        for expire in expirations { expire() }
    }

    func describe(now: UInt64) -> DumpValue {
        let snapshot = state.withLock { state in
            (state.accepting, state.running.map { ($0.value.name, $0.value.startedAt) }, state.pending.count, state.cancelledBeforeStart, state.finished)
        }
        return .object([
            .init("accepting", .bool(snapshot.0)),
            .init("running", .array(snapshot.1.sorted { $0.1 < $1.1 }.map {
                .object([.init("name", .string($0.0)), .init("elapsed_s", .double(Double(now &- $0.1) / 1e9))])
            })),
            .init("pending", .int(Int64(snapshot.2))),
            .init("cancelled_before_start", .int(Int64(snapshot.3))),
            .init("finished", .int(Int64(snapshot.4))),
        ])
    }
}
