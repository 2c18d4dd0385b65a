import Logging

/// What the fleet's users (the task scheduler) hear from the cluster, on their own queue.
public protocol FleetListener: AnyObject, Sendable {
    var fleetQueue: any FleetQueue { get }
    /// Claims can be made (true) or not (false, with why).
    func fleetAvailability(_ available: Bool, cause: String?)
    /// A fire's claim vanished while its run was going on, for `why`.
    func fleetFireReleased(_ fire: FleetFire, why: FleetRelease)
    /// A fire's key now holds this (a claim, or a run's end), at `revision`.
    func fleetFireChanged(_ fire: FleetFire, revision: Int64)
}

/// What a shared inbox (a `fleet = "one"` watch rule) hears from the cluster, on its queue.
public protocol FleetFileListener: AnyObject, Sendable {
    var fleetFileQueue: any FleetQueue { get }
    /// Another host's claim of a file vanished with its lease (the host died or was cut
    /// off mid-job), or was released after a failure: the file may be claimed again.
    func fleetFileReleased(rule: String, relative: [UInt8])
    /// Claims can be made again after a time without a lease.
    func fleetFilesAvailable()
}

/// What the job engine hears: the fence. Every fleet job, a fire's or a file's, must be
/// gone by `stopBy`, and those that hold a claim and have not started never start.
public protocol FleetJobsListener: AnyObject, Sendable {
    var fleetJobsQueue: any FleetQueue { get }
    func fleetFence(stopBy: MonotonicInstant)
}

/// Why another host's claim of a fire ended before a record of its run's end was written.
public enum FleetRelease: Sendable, Equatable {
    /// Its lease expired (the host died, froze, or was cut off).
    case leaseExpired
    /// It stopped cleanly and revoked its lease before it could write the record.
    case stopped
    /// It released the claim without running the fire (its record says `released`).
    case released

    var explanation: String {
        switch self {
        case .leaseExpired: return "whose etcd lease expired before a record of its run's end was written"
        case .stopped: return "which stopped (its lease revoked) before a record of its run's end could be written"
        case .released: return "which released it without running it (its lease was not renewed in time, or it was stopping)"
        }
    }
}

/// Who this daemon is, for the member record others see when two hosts share a name.
public struct FleetMemberIdentity: Sendable, Equatable {
    public var hostName: String
    public var machineID: String
    public var bootID: String
    public var pid: Int64

    public init(hostName: String, machineID: String, bootID: String, pid: Int64) {
        self.hostName = hostName
        self.machineID = machineID
        self.bootID = bootID
        self.pid = pid
    }
}

/// This host's membership of the fleet (docs/fleet.md), the logic behind `ClusterMember`:
/// the lease and its renewals, the one live member per name, the fence and the start gate,
/// claims and records of fires and files, and the watch that tells of other hosts' claims
/// ending. Everything runs on `queue`'s turns and reaches the world only through the seam
/// (`FleetStore`, `FleetClock`, `FleetQueue`), so the daemon drives it with the etcd client
/// and GCD and the simulation with its own etcd and event loop.
// @unchecked Sendable: confined to its queue's turns (the cluster queue in the daemon).
public final class FleetMember: @unchecked Sendable {
    public let settings: ClusterSettings
    public let queue: any FleetQueue
    /// What the job engine reads before every fleet job's start.
    public let gate = FleetStartGate()
    let store: any FleetStore
    let clock: any FleetClock
    let keys: FleetKeys
    let logger: Logger
    let identity: FleetMemberIdentity
    weak var listener: (any FleetListener)?
    weak var fileListener: (any FleetFileListener)?
    weak var jobs: (any FleetJobsListener)?
    // Confined to `queue`.
    var lease: FleetLease
    var leaseTimer: (any FleetTimer)?
    var renewing = false
    var granting = false
    var stopped = false
    /// A clean stop has begun: no claim is made, records are finished, then the lease goes.
    var stopping = false
    var duty = Duty.none
    var dutyTimer: (any FleetTimer)?
    /// Said once per outage, with the cause; cleared when the host takes fleet duty again.
    var unavailable: (since: MonotonicInstant, wall: WallTime, cause: String)?
    var lastCause: String?
    var watchRevision: Int64 = 0
    var watching = false
    var watchRetry: (any FleetTimer)?
    var claimLatency = LatencyRing(capacity: 256)
    var counters: [String: UInt64] = [:]
    /// Keys of the claims this host won and holds (their jobs not ended): a running claim
    /// of this host's, on its lease, that is not among them is one whose answer was lost (a
    /// deadline passed after etcd applied it), and is taken as won rather than left orphaned.
    var claimsHeld: Set<String> = []
    /// Keys with a claim of this host's on its way: not orphans, whatever etcd holds.
    var claimsPending: [String: Int] = [:]
    /// The run IDs of this host's claims that got no answer (a deadline passed; etcd may
    /// apply them later, after an election), by key, on `unansweredLease`: only such a claim
    /// found in etcd is adopted. One that was answered and since let go (released, recorded)
    /// can still be found by a later claim that overtook the release: it is no claim of ours.
    var claimsUnanswered: [String: Set<String>] = [:]
    var unansweredLease: Int64 = 0
    /// Records and releases not yet written, by key, retried until etcd takes them or the
    /// claim they were written against is gone (FleetMember+Writes.swift).
    var writes: [String: PendingWrite] = [:]
    var writeSequence = 0
    var writeTimer: (any FleetTimer)?
    var writesDrained: (() -> Void)?
    /// The lease done records of files gone from the inbox are bound to, so they stay for
    /// `doneRecordLife` and then go (FleetMember+Files.swift).
    var recordLease: (id: Int64, grantedAt: MonotonicInstant)?
    var recordLeaseWaiters: [(Int64) -> Void] = []
    /// Fires kept per task in etcd: older ended ones are deleted as new ones are recorded.
    static let historyKept = 200
    var recordsSincePrune: [String: Int] = [:]

    /// Whether this host holds its member name (`<prefix>/members/<name>`) on its lease.
    enum Duty: Equatable {
        case none
        case registering(lease: Int64)
        case member(lease: Int64)
        /// Another live member holds the name: no fleet duty until its lease ends.
        case nameTaken(lease: Int64, holder: FleetMemberRecord, holderLease: Int64)
    }

    /// How long a claim or record may take before the fire is held.
    var callTimeout: Duration { min(.seconds(2), max(.milliseconds(500), settings.leaseTTL / 4)) }
    static let watchLife = Duration.seconds(60)
    /// How long a clean stop waits for the records of its runs before it revokes the lease.
    var stopRecordBudget: Duration { min(.seconds(3), max(.seconds(1), settings.leaseTTL / 2)) }

    public init(settings: ClusterSettings, store: any FleetStore, clock: any FleetClock, queue: any FleetQueue,
                identity: FleetMemberIdentity, logger: Logger) {
        self.settings = settings
        self.store = store
        self.clock = clock
        self.queue = queue
        self.identity = identity
        self.logger = logger
        keys = FleetKeys(prefix: settings.prefix)
        lease = FleetLease(ttl: settings.leaseTTL)
    }

    public func start(listener: any FleetListener, files: (any FleetFileListener)? = nil, jobs: (any FleetJobsListener)? = nil) {
        queue.async { [self] in
            self.listener = listener
            self.fileListener = files
            self.jobs = jobs
            perform(lease.handle(.start))
        }
    }

    /// The clean stop, once fleet jobs have ended: the records of their ends are written
    /// (within `stopRecordBudget`), the member record says the host is stopping, and the
    /// lease is revoked, so that claims of runs cut short by the stop are released at once.
    public func stop(completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            stopping = true
            publishGate()
            finishWrites(within: stopRecordBudget) { [self] in
                markStopping { [self] in
                    stopped = true
                    leaseTimer?.cancel()
                    watchRetry?.cancel()
                    dutyTimer?.cancel()
                    writeTimer?.cancel()
                    guard let id = lease.leaseID else {
                        store.close()
                        return completion()
                    }
                    store.revokeLease(id, timeout: .seconds(1)) { [self] _ in
                        store.close()
                        completion()
                    }
                }
            }
        }
    }

    // MARK: The lease

    func perform(_ actions: [FleetLease.Action]) {
        for action in actions {
            switch action {
            case .grant: grant()
            case .renew(let id): renew(id)
            case .armTimer(let at):
                if leaseTimer == nil {
                    leaseTimer = clock.makeTimer(target: "lease renewal and fence") { [weak self] in
                        guard let self, !self.stopped else { return }
                        self.perform(self.lease.handle(.timer(now: self.clock.now)))
                    }
                }
                leaseTimer?.schedule(at: at)
            case .fence(let stopBy):
                count("fences")
                gate.close()
                let left = max(.zero, stopBy - clock.now)
                logger.error("unable to renew the etcd lease in time (\(lastCause ?? "no answer")): no fleet job starts, and every one running is stopped within \(left.compactDescription), before the lease can expire and another host take its fires and files over",
                             metadata: [JournalFields.messageIDKey: .string(MessageID.fleetLeaseLost.rawValue), "cause": .string(lastCause ?? "")])
                if let jobs { jobs.fleetJobsQueue.async { jobs.fleetFence(stopBy: stopBy) } }
            case .lost(let id):
                count("leases_lost")
                claimsHeld.removeAll()
                claimsUnanswered.removeAll()
                duty = .none
                logger.warning("etcd lease \(Self.hex(id)) is gone: the claims bound to it are released; asking for a new one")
                becameUnavailable(lastCause ?? "the lease expired", since: lease.lastRenewal)
            case .available(let id):
                logger.info("holding etcd lease \(Self.hex(id)) (ttl \(settings.leaseTTL.compactDescription)) from \(store.endpointDescription)")
                startWatch()
                if duty == .member(lease: id) { becameAvailable() } else { register(id) }
            }
        }
        publishGate()
    }

    /// Jobs may start only under the lease this host is a member on, renewed in time.
    func publishGate() {
        if case .member(let id) = duty, !stopping, let starts = lease.startsAllowed, starts.lease == id {
            gate.open(lease: id, until: starts.until)
        } else {
            gate.close()
        }
    }

    private func grant() {
        guard !granting, !stopped else { return }
        granting = true
        let sentAt = clock.now
        store.grantLease(ttl: settings.leaseTTL, timeout: callTimeout) { [self] result in
            granting = false
            guard !stopped else { return }
            switch result {
            case .success(let granted):
                perform(lease.handle(.granted(id: granted.id, ttl: .seconds(granted.ttl), sentAt: sentAt)))
                kickWrites()
            case .failure(let error):
                lastCause = error.description
                becameUnavailable(error.description, since: nil)
                perform(lease.handle(.grantFailed(now: clock.now)))
            }
        }
    }

    private func renew(_ id: Int64) {
        guard !renewing, !stopped else { return }
        renewing = true
        let sentAt = clock.now
        let timeout = min(FleetLease.renewEvery(settings.leaseTTL), max(.milliseconds(200), (lease.expiresBy ?? sentAt) - sentAt))
        store.keepAlive(lease: id, timeout: timeout) { [self] result in
            renewing = false
            guard !stopped, lease.leaseID == id else { return }
            switch result {
            case .success(let ttl) where ttl > 0:
                let failing = lease.renewalsFailed
                perform(lease.handle(.renewed(ttl: .seconds(ttl), sentAt: sentAt)))
                if failing > 0 || !writes.isEmpty { kickWrites() }
            case .success:
                lastCause = "etcd says lease \(Self.hex(id)) no longer exists (it expired there)"
                count("renewals_failed")
                perform(lease.handle(.leaseGone(now: clock.now)))
            case .failure(let error):
                lastCause = error.description
                count("renewals_failed")
                if case .server(_, _, let message) = error, message.contains(utf8: "lease not found") {
                    perform(lease.handle(.leaseGone(now: clock.now)))
                } else {
                    perform(lease.handle(.renewalFailed(now: clock.now)))
                }
            }
        }
    }

    /// Fleet duty stops: said once per outage, with the cause, counted from `since` (the
    /// last renewal that reached etcd, when the lease was lost: a daemon stopped for 16 s
    /// is 16 s without etcd, not the instant since it went on).
    func becameUnavailable(_ cause: String, since: MonotonicInstant?) {
        guard unavailable == nil else { return }
        unavailable = (since ?? clock.now, clock.wallNow, cause)
        logger.error("unable to get or renew the etcd lease (\(cause)): fleet tasks are held, not run here; local tasks and watches go on",
                     metadata: [JournalFields.messageIDKey: .string(MessageID.clusterUnavailable.rawValue), "cause": .string(cause)])
        tell { $0.fleetAvailability(false, cause: cause) }
    }

    /// Fleet duty (again): the lease is held and the name registered on it.
    func becameAvailable() {
        if let outage = unavailable {
            logger.notice("etcd answers again after \((clock.now - outage.since).compactDescription): fleet tasks run; held fires inside their catch_up_window are claimed now",
                          metadata: [JournalFields.messageIDKey: .string(MessageID.clusterAvailable.rawValue)])
            unavailable = nil
        }
        tell { $0.fleetAvailability(true, cause: nil) }
        if let files = fileListener { files.fleetFileQueue.async { files.fleetFilesAvailable() } }
    }

    func tell(_ body: @escaping @Sendable (any FleetListener) -> Void) {
        guard let listener else { return }
        listener.fleetQueue.async { body(listener) }
    }

    func count(_ name: String) { counters[name, default: 0] += 1 }

    /// The lease claims are made on now, if the host may claim at all.
    var claimLease: Int64? {
        guard !stopping, case .member(let id) = duty, lease.claimable == id else { return nil }
        return id
    }

    /// Why a claim cannot be made now.
    var heldCause: String {
        if stopping { return "the daemon is stopping" }
        if case .nameTaken(_, let holder, _) = duty { return "the member name \(settings.name) is held by another live member: \(holder.description)" }
        return unavailable?.cause ?? lastCause ?? "no etcd lease yet"
    }

    var isHeld: Bool { claimLease == nil }

    static func hex(_ id: Int64) -> String { String(UInt64(bitPattern: id), radix: 16) }
}
