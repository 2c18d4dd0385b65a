import Logging

/// What the fleet's users (the task scheduler) hear from the cluster, on their own queue.
public protocol FleetListener: AnyObject, Sendable {
    var fleetQueue: any FleetQueue { get }
    /// Stop every fleet job so it is gone by `stopBy`: the lease may expire then.
    func fleetFence(stopBy: MonotonicInstant)
    /// Claims can be made (true) or not (false, with why).
    func fleetAvailability(_ available: Bool, cause: String?)
    /// A fire's claim vanished while its run was going on: its host lost its lease.
    func fleetFireReleased(_ fire: FleetFire)
    /// A fire's key now holds this (a claim, or a run's end).
    func fleetFireChanged(_ fire: FleetFire)
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

/// This host's membership of the fleet (docs/fleet.md), the logic behind `ClusterMember`:
/// the lease and its renewals, the fence, claims and records of fires and files, and the
/// watch that tells of other hosts' claims ending. Everything runs on `queue`'s turns and
/// reaches the world only through the seam (`FleetStore`, `FleetClock`, `FleetQueue`), so
/// the daemon drives it with the etcd client and GCD and the simulation with its own etcd
/// and event loop.
public final class FleetMember: @unchecked Sendable {
    public let settings: ClusterSettings
    public let queue: any FleetQueue
    let store: any FleetStore
    let clock: any FleetClock
    let keys: FleetKeys
    let logger: Logger
    weak var listener: (any FleetListener)?
    weak var fileListener: (any FleetFileListener)?
    // Confined to `queue`.
    var lease: FleetLease
    var leaseTimer: (any FleetTimer)?
    var renewing = false
    var granting = false
    var stopped = false
    /// Said once per outage, with the cause; cleared when the lease is back.
    var unavailable: (since: MonotonicInstant, wall: WallTime, cause: String)?
    var lastCause: String?
    var watchRevision: Int64 = 0
    var watching = false
    var watchRetry: (any FleetTimer)?
    var claimLatency = LatencyRing(capacity: 256)
    var counters: [String: UInt64] = [:]
    /// Keys of the claims this host won and holds (their jobs not ended): a running claim
    /// of this host's that is not among them is one whose answer was lost (a deadline
    /// passed after etcd applied it), and is taken as won rather than left orphaned.
    var claimsHeld: Set<String> = []
    /// Fires kept per task in etcd: older ended ones are deleted as new ones are recorded.
    static let historyKept = 200
    var recordsSincePrune: [String: Int] = [:]

    /// How long a claim or record may take before the fire is held.
    var callTimeout: Duration { min(.seconds(2), max(.milliseconds(500), settings.leaseTTL / 4)) }
    static let watchLife = Duration.seconds(60)

    public init(settings: ClusterSettings, store: any FleetStore, clock: any FleetClock, queue: any FleetQueue, logger: Logger) {
        self.settings = settings
        self.store = store
        self.clock = clock
        self.queue = queue
        self.logger = logger
        keys = FleetKeys(prefix: settings.prefix)
        lease = FleetLease(ttl: settings.leaseTTL)
    }

    public func start(listener: any FleetListener, files: (any FleetFileListener)? = nil) {
        queue.async { [self] in
            self.listener = listener
            self.fileListener = files
            perform(lease.handle(.start))
        }
    }

    /// The clean stop, once fleet jobs have ended: the lease is revoked so that claims of
    /// runs cut short by the stop are released at once, not after the TTL.
    public func stop(completion: @escaping @Sendable () -> Void) {
        queue.async { [self] in
            stopped = true
            leaseTimer?.cancel()
            watchRetry?.cancel()
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
                let left = max(.zero, stopBy - clock.now)
                logger.error("unable to renew the etcd lease in time (\(lastCause ?? "no answer")): stopping every fleet job within \(left.compactDescription), before the lease can expire and another host take its fires over",
                             metadata: [JournalFields.messageIDKey: .string(MessageID.fleetLeaseLost.rawValue), "cause": .string(lastCause ?? "")])
                tell { $0.fleetFence(stopBy: stopBy) }
            case .lost(let id):
                count("leases_lost")
                claimsHeld.removeAll()
                logger.warning("etcd lease \(Self.hex(id)) is gone: the claims bound to it are released; asking for a new one")
                becameUnavailable(lastCause ?? "the lease expired")
            case .available(let id):
                logger.info("holding etcd lease \(Self.hex(id)) (ttl \(settings.leaseTTL.compactDescription)) from \(store.endpointDescription)")
                if let outage = unavailable {
                    logger.notice("etcd answers again after \((clock.now - outage.since).compactDescription): fleet tasks run; held fires inside their catch_up_window are claimed now",
                                  metadata: [JournalFields.messageIDKey: .string(MessageID.clusterAvailable.rawValue)])
                    unavailable = nil
                }
                startWatch()
                tell { $0.fleetAvailability(true, cause: nil) }
                if let files = fileListener { files.fleetFileQueue.async { files.fleetFilesAvailable() } }
            }
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
            case .failure(let error):
                lastCause = error.description
                becameUnavailable(error.description)
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
                perform(lease.handle(.renewed(ttl: .seconds(ttl), sentAt: sentAt)))
            case .success:
                lastCause = "etcd says lease \(Self.hex(id)) no longer exists (it expired there)"
                count("renewals_failed")
                perform(lease.handle(.leaseGone(now: clock.now)))
            case .failure(let error):
                lastCause = error.description
                count("renewals_failed")
                if case .server(_, _, let message) = error, message.contains("lease not found") {
                    perform(lease.handle(.leaseGone(now: clock.now)))
                } else {
                    perform(lease.handle(.renewalFailed(now: clock.now)))
                }
            }
        }
    }

    func becameUnavailable(_ cause: String) {
        guard unavailable == nil else { return }
        unavailable = (clock.now, clock.wallNow, cause)
        logger.error("unable to get or renew the etcd lease (\(cause)): fleet tasks are held, not run here; local tasks and watches go on",
                     metadata: [JournalFields.messageIDKey: .string(MessageID.clusterUnavailable.rawValue), "cause": .string(cause)])
        tell { $0.fleetAvailability(false, cause: cause) }
    }

    func tell(_ body: @escaping @Sendable (any FleetListener) -> Void) {
        guard let listener else { return }
        listener.fleetQueue.async { body(listener) }
    }

    func count(_ name: String) { counters[name, default: 0] += 1 }

    /// Why a claim cannot be made now.
    var heldCause: String { unavailable?.cause ?? lastCause ?? "no etcd lease yet" }

    var isHeld: Bool { lease.claimable == nil }

    static func hex(_ id: Int64) -> String { String(UInt64(bitPattern: id), radix: 16) }
}
