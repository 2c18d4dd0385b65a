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

    /// One drain's outcome, decided once: whichever of "the group emptied" and "the
    /// expire grace ran out" comes first completes it.
    private final class DrainProgress: Sendable {
        private let state = Mutex<(done: Bool, expired: [String]?)>((false, nil))

        var isDone: Bool { state.withLock { $0.done } }

        func markExpired(_ names: [String]) {
            state.withLock { $0.expired = names }
        }

        func finish() -> DrainOutcome? {
            state.withLock { state in
                guard !state.done else { return nil }
                state.done = true
                return state.expired.map { .expired(names: $0) } ?? .finished
            }
        }
    }

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
        // The group is entered under the lock, so a drain that starts right after
        // cannot see the work registered but not yet counted.
        let id: UInt64? = state.withLock { state in
            guard state.accepting else { return nil }
            let id = state.nextID
            state.nextID += 1
            state.running[id] = (name, DispatchTime.now().uptimeNanoseconds, expire)
            group.enter()
            return id
        }
        guard let id else { return nil }
        return Token(id: id, tracker: self)
    }

    /// Work queued to start later (after `delay`, or as soon as `queue` gets to it).
    /// The drain cancels it if it has not started; false once the drain has begun.
    @discardableResult
    public func schedule(_ name: String, on queue: DispatchQueue, after delay: DispatchTimeInterval = .never,
                         _ body: @escaping @Sendable () -> Void) -> Bool {
        // Registered in the same critical section that checks `accepting`, so a
        // concurrent drain either refuses it or cancels it, never misses it.
        let item: DispatchWorkItem? = state.withLock { state in
            guard state.accepting else { return nil }
            let id = state.nextID
            state.nextID += 1
            let item = DispatchWorkItem { [self] in
                let stillPending = self.state.withLock { $0.pending.removeValue(forKey: id) != nil }
                if stillPending { body() }
            }
            state.pending[id] = (name, CancellableItem(item: item))
            return item
        }
        guard let item else { return false }
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

        let progress = DrainProgress()
        group.notify(queue: queue) {
            if let outcome = progress.finish() { completion(outcome) }
        }
        queue.asyncAfter(deadline: .now() + .nanoseconds(Int(grace.nanosecondsClamped))) { [self] in
            guard !progress.isDone else { return }
            let late = state.withLock { $0.running.values.map { ($0.name, $0.expire) } }
            // Recorded before any expire runs: an expire may end its work at once, and
            // the group's notify must then already report the expiry.
            progress.markExpired(late.map(\.0).sorted())
            for (_, expire) in late { expire() }
            queue.asyncAfter(deadline: .now() + .nanoseconds(Int(expireGrace.nanosecondsClamped))) {
                if let outcome = progress.finish() { completion(outcome) }
            }
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
