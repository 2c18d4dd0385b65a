/// This host's etcd lease, as a state machine whose transitions return what the owner
/// (`ClusterMember`, on the cluster queue) does. Every claim a host makes is bound to its
/// lease, so the lease is what makes a claim die with the host.
///
/// The times are this host's monotonic clock. A renewal sent at `s` and answered with a
/// TTL of `t` means etcd will not expire the lease before `s + t` (it reset the TTL after
/// receiving the request, which was after `s`): that is `expiresBy`, a bound that needs
/// no clock agreement between hosts, only clocks that tick at nearly the same rate (within
/// `clockMargin`). No fleet job starts after `expiresBy - fenceLead`, when fleet jobs are
/// fenced, and they must be gone by `expiresBy - clockMargin - stopMargin`, so they end
/// before etcd can expire the lease and hand their claims to another host (docs/fleet.md,
/// "The lease, and fencing").
struct FleetLease: Equatable {
    enum State: Equatable {
        /// No lease: not granted yet, or lost. Claims wait.
        case none
        case granting
        /// Renewed often enough; claims may be made.
        case held(id: Int64, ttl: Duration, expiresBy: MonotonicInstant)
        /// Renewals failed long enough that fleet jobs are being stopped; the lease may
        /// still be renewed (it is kept), but no claim is made on it until then.
        case fencing(id: Int64, ttl: Duration, expiresBy: MonotonicInstant)
    }

    enum Event: Equatable {
        case start
        case grantFailed(now: MonotonicInstant)
        case granted(id: Int64, ttl: Duration, sentAt: MonotonicInstant)
        case renewed(ttl: Duration, sentAt: MonotonicInstant)
        case renewalFailed(now: MonotonicInstant)
        /// etcd says the lease no longer exists (TTL 0, or "lease not found").
        case leaseGone(now: MonotonicInstant)
        /// The timer set by `.armTimer` went off.
        case timer(now: MonotonicInstant)
    }

    enum Action: Equatable {
        case grant
        case renew(id: Int64)
        case armTimer(at: MonotonicInstant)
        /// Stop every fleet job so that it is gone by `stopBy`.
        case fence(stopBy: MonotonicInstant)
        /// The lease is gone: claims bound to it are gone on etcd's side too.
        case lost(id: Int64)
        case available(id: Int64)
    }

    private(set) var state = State.none
    let requestedTTL: Duration
    /// When the last renewal that succeeded was sent (the bound counts from it), for the dump.
    private(set) var lastRenewal: MonotonicInstant?
    private(set) var renewalsFailed: UInt64 = 0
    private(set) var fences: UInt64 = 0
    private(set) var nextRenewal: MonotonicInstant?

    init(ttl: Duration) {
        requestedTTL = ttl
    }

    /// A third of the TTL: etcd's own clients renew at that pace.
    static func renewEvery(_ ttl: Duration) -> Duration { ttl / 3 }
    /// How long before `expiresBy` fleet jobs are told to stop: a third of the TTL,
    /// at least a second, so two renewals in a row can fail before it.
    static func fenceLead(_ ttl: Duration) -> Duration { max(.seconds(1), ttl / 3) }
    /// The margin left between the last SIGKILL and the lease's expiry.
    static func stopMargin(_ ttl: Duration) -> Duration { min(.milliseconds(500), ttl / 10) }
    /// How much faster etcd's clock may run than this host's over a TTL: 1 % (NTP slews a
    /// clock by 0.05 % at most; a host whose clock is further off must not be trusted).
    static func clockMargin(_ ttl: Duration) -> Duration { ttl / 100 }
    /// Where the fence's stop must be over, for a lease that etcd cannot expire before `expiresBy`.
    static func stopBy(expiresBy: MonotonicInstant, ttl: Duration) -> MonotonicInstant {
        expiresBy - clockMargin(ttl) - stopMargin(ttl)
    }
    static let retryDelay = Duration.milliseconds(500)

    var leaseID: Int64? {
        switch state {
        case .held(let id, _, _), .fencing(let id, _, _): return id
        case .none, .granting: return nil
        }
    }

    /// Claims may be made only on a lease renewed in time.
    var claimable: Int64? {
        if case .held(let id, _, _) = state { return id }
        return nil
    }

    /// The lease fleet jobs may start under, and until when: a job started before the fence
    /// point is stopped by the fence in time; none starts after it.
    var startsAllowed: (lease: Int64, until: MonotonicInstant)? {
        if case .held(let id, let ttl, let expires) = state { return (id, expires - Self.fenceLead(ttl)) }
        return nil
    }

    var expiresBy: MonotonicInstant? {
        switch state {
        case .held(_, _, let by), .fencing(_, _, let by): return by
        case .none, .granting: return nil
        }
    }

    mutating func handle(_ event: Event) -> [Action] {
        switch (state, event) {
        case (.none, .start):
            state = .granting
            return [.grant]
        case (.granting, .grantFailed(let now)):
            state = .none
            return [.armTimer(at: now + Self.retryDelay * 2)]
        case (.none, .timer):
            state = .granting
            return [.grant]
        case (.granting, .granted(let id, let ttl, let sentAt)):
            let expires = sentAt + ttl
            state = .held(id: id, ttl: ttl, expiresBy: expires)
            lastRenewal = sentAt
            return [.available(id: id)] + scheduleRenewal(after: sentAt, ttl: ttl, expiresBy: expires)
        case (.held(let id, _, _), .renewed(let ttl, let sentAt)), (.fencing(let id, _, _), .renewed(let ttl, let sentAt)):
            let wasFencing = if case .fencing = state { true } else { false }
            let expires = sentAt + ttl
            state = .held(id: id, ttl: ttl, expiresBy: expires)
            lastRenewal = sentAt
            return (wasFencing ? [.available(id: id)] : []) + scheduleRenewal(after: sentAt, ttl: ttl, expiresBy: expires)
        case (.held(let id, let ttl, let expires), .renewalFailed(let now)), (.fencing(let id, let ttl, let expires), .renewalFailed(let now)):
            renewalsFailed += 1
            return afterFailure(id: id, ttl: ttl, expiresBy: expires, now: now)
        case (.held(let id, let ttl, let expires), .timer(let now)), (.fencing(let id, let ttl, let expires), .timer(let now)):
            if now >= expires {
                // A late timer (a stopped daemon, a suspended machine) may skip the fence
                // point: fleet jobs stop now either way.
                let wasFencing = if case .fencing = state { true } else { false }
                state = .granting
                nextRenewal = nil
                if !wasFencing { fences += 1 }
                return (wasFencing ? [] : [.fence(stopBy: now)]) + [.lost(id: id), .grant]
            }
            if case .held = state, now >= expires - Self.fenceLead(ttl) {
                state = .fencing(id: id, ttl: ttl, expiresBy: expires)
                fences += 1
                let fence = Action.fence(stopBy: Self.stopBy(expiresBy: expires, ttl: ttl))
                // A retry after a failed renewal still due is kept: the timer wakes for it
                // (or for expiry), so a renewal that failed at the fence point is tried again.
                if let due = nextRenewal, due > now { return [fence, .armTimer(at: min(due, expires))] }
                nextRenewal = nil
                return [fence, .armTimer(at: expires), .renew(id: id)]
            }
            if let due = nextRenewal, now >= due {
                nextRenewal = nil
                return [.renew(id: id), .armTimer(at: min(expires - Self.fenceLead(ttl), expires))]
            }
            return [.armTimer(at: nextDeadline(ttl: ttl, expiresBy: expires))]
        case (.held(let id, _, _), .leaseGone(let now)), (.fencing(let id, _, _), .leaseGone(let now)):
            // Claims bound to it are gone already: fleet jobs stop at once.
            state = .granting
            fences += 1
            return [.fence(stopBy: now), .lost(id: id), .grant]
        default:
            return []
        }
    }

    private mutating func scheduleRenewal(after sentAt: MonotonicInstant, ttl: Duration, expiresBy: MonotonicInstant) -> [Action] {
        let due = sentAt + Self.renewEvery(ttl)
        nextRenewal = due
        return [.armTimer(at: min(due, expiresBy - Self.fenceLead(ttl)))]
    }

    private mutating func afterFailure(id: Int64, ttl: Duration, expiresBy: MonotonicInstant, now: MonotonicInstant) -> [Action] {
        // Try again soon (the client has moved to the next endpoint), never past expiry.
        let retry = now + Self.retryDelay
        nextRenewal = retry
        return [.armTimer(at: min(retry, nextDeadline(ttl: ttl, expiresBy: expiresBy)))]
    }

    private func nextDeadline(ttl: Duration, expiresBy: MonotonicInstant) -> MonotonicInstant {
        var candidates = [expiresBy]
        if case .held = state { candidates.append(expiresBy - Self.fenceLead(ttl)) }
        if let nextRenewal { candidates.append(nextRenewal) }
        return candidates.min()!
    }
}
