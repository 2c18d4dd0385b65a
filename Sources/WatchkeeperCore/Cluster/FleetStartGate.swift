import Synchronization

/// Whether a fleet job may start now, read by the job engine at each start and written by
/// the fleet member at each change of its lease: the lease in force and the instant until
/// which jobs may start under it (its fence point: `FleetLease.startsAllowed`). A job whose
/// claim is bound to another lease (one lost since) never starts. The engine compares with
/// its own reading of the clock, so a member whose timer is late (a daemon stopped with
/// SIGSTOP, then continued) cannot let a start through past the fence point.
public final class FleetStartGate: Sendable {
    public struct Opening: Sendable, Equatable {
        public var lease: Int64
        public var until: MonotonicInstant
    }

    private let opening = Mutex<Opening?>(nil)

    public init() {}

    public var current: Opening? { opening.withLock { $0 } }

    func open(lease: Int64, until: MonotonicInstant) {
        opening.withLock { $0 = Opening(lease: lease, until: until) }
    }

    func close() {
        opening.withLock { $0 = nil }
    }

    /// The instant until which a job whose claim is bound to `lease` may start, if it may
    /// start at `now`: its process must exec before it (`SpawnRequest.execDeadline`).
    public func startsUntil(lease: Int64, at now: MonotonicInstant) -> MonotonicInstant? {
        guard let opening = current, opening.lease == lease, now < opening.until else { return nil }
        return opening.until
    }

    /// The lease a claim made at `now` would be bound to, if jobs may start under it.
    public func openLease(at now: MonotonicInstant) -> Int64? {
        guard let opening = current, now < opening.until else { return nil }
        return opening.lease
    }
}
