import Dispatch
import Logging

/// What the fleet's users (the task scheduler) hear from the cluster, on their own queue.
public protocol FleetListener: AnyObject, Sendable {
    var fleetQueue: SubsystemQueue { get }
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
    var fleetFileQueue: SubsystemQueue { get }
    /// Another host's claim of a file vanished with its lease (the host died or was cut
    /// off mid-job), or was released after a failure: the file may be claimed again.
    func fleetFileReleased(rule: String, relative: [UInt8])
    /// Claims can be made again after a time without a lease.
    func fleetFilesAvailable()
}

/// The answer to a claim for one file of a shared inbox.
public enum FileClaim: Sendable, Equatable {
    case won(revision: Int64)
    /// Another host's job has it now; it is released (and said) if that job fails or its
    /// host goes.
    case runningElsewhere(FleetFile)
    /// Another host handled it in this very form (size and modification time).
    case handledElsewhere(FleetFile)
    /// This host's own job has it already (a second event for the same file).
    case runningHere
    case held(String)
}

/// The answer to a claim for one fire.
public enum FireClaim: Sendable, Equatable {
    /// This host runs it; `revision` is the claim's, to record the end against.
    case won(revision: Int64)
    /// Another host claimed it (or ran it already).
    case elsewhere(FleetFire)
    /// overlap = "skip": the task's previous fire still runs on this host.
    case previousRunning(FleetFire, revision: Int64)
    /// No claim could be made now (no lease, etcd unreachable): the fire is held.
    case held(String)
}

/// This host's membership of the fleet, on the cluster queue (docs/fleet.md): the etcd
/// client, the lease and its renewals, the fence, claims and records for fleet tasks, and
/// the watch that tells of other hosts' claims ending. Made only when `[cluster]` is
/// configured.
public final class ClusterMember: DumpContributor, @unchecked Sendable {
    public let queue: SubsystemQueue
    public let settings: ClusterSettings
    let client: EtcdClient
    let keys: FleetKeys
    private let sources: SourceRegistry
    private let logger: Logger
    private weak var listener: (any FleetListener)?
    private weak var fileListener: (any FleetFileListener)?
    // Confined to `queue`.
    private var lease: FleetLease
    private var leaseTimer: RegisteredTimer?
    private var renewing = false
    private var granting = false
    private var stopped = false
    /// Said once per outage, with the cause; cleared when the lease is back.
    private var unavailable: (since: WallTime, cause: String)?
    private var lastCause: String?
    private var watchRevision: Int64 = 0
    private var watching = false
    private var watchRetry: RegisteredTimer?
    private(set) var claimLatency = LatencyRing(capacity: 256)
    private var counters: [String: UInt64] = [:]
    /// Keys of the claims this host won and holds (their jobs not ended): a running claim
    /// of this host's that is not among them is one whose answer was lost (a deadline
    /// passed after etcd applied it), and is taken as won rather than left orphaned.
    private var claimsHeld: Set<String> = []

    /// How long a claim or record may take before the fire is held.
    var callTimeout: Duration { min(.seconds(2), max(.milliseconds(500), settings.leaseTTL / 4)) }
    static let watchLife = Duration.seconds(60)

    public init(settings: ClusterSettings, queue: SubsystemQueue, sources: SourceRegistry, logger: Logger) {
        self.settings = settings
        self.queue = queue
        self.sources = sources
        self.logger = logger
        keys = FleetKeys(prefix: settings.prefix)
        lease = FleetLease(ttl: settings.leaseTTL)
        var options = EtcdClient.Options(endpoints: settings.endpoints, username: settings.username, password: settings.password)
        if settings.endpoints.contains(where: \.secure) {
            let factory = SecureStreamFactory(caFile: settings.caFile, certFile: settings.certFile, keyFile: settings.keyFile)
            options.secureStream = { endpoint, descriptor throws(GatewayFailure) in try factory.stream(for: endpoint, descriptor: descriptor) }
        }
        client = EtcdClient(options: options, queue: queue, sources: sources, logger: logger)
    }

    public var dumpSectionName: String { "cluster" }
    public var dumpQueue: SubsystemQueue { queue }

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
                client.close()
                return completion()
            }
            client.revokeLease(id, timeout: .seconds(1)) { [self] _ in
                client.close()
                completion()
            }
        }
    }

    // MARK: The lease

    private func perform(_ actions: [FleetLease.Action]) {
        for action in actions {
            switch action {
            case .grant: grant()
            case .renew(let id): renew(id)
            case .armTimer(let at):
                if leaseTimer == nil {
                    leaseTimer = sources.makeTimer(owner: "cluster", target: "lease renewal and fence", on: queue) { [weak self] in
                        guard let self, !self.stopped else { return }
                        self.perform(self.lease.handle(.timer(now: .now)))
                    }
                }
                leaseTimer?.schedule(at: at.dispatchTime)
            case .fence(let stopBy):
                count("fences")
                let left = max(.zero, stopBy - .now)
                logger.error("unable to renew the etcd lease in time (\(lastCause ?? "no answer")): stopping every fleet job within \(left.compactDescription), before the lease can expire and another host take its fires over",
                             metadata: [JournalFields.messageIDKey: .string(MessageID.fleetLeaseLost.rawValue), "cause": .string(lastCause ?? "")])
                tell { $0.fleetFence(stopBy: stopBy) }
            case .lost(let id):
                count("leases_lost")
                claimsHeld.removeAll()
                logger.warning("etcd lease \(Self.hex(id)) is gone: the claims bound to it are released; asking for a new one")
                becameUnavailable(lastCause ?? "the lease expired")
            case .available(let id):
                logger.info("holding etcd lease \(Self.hex(id)) (ttl \(settings.leaseTTL.compactDescription)) from \(client.endpointInUse)")
                if let outage = unavailable {
                    logger.notice("etcd answers again after \(Self.age(since: outage.since)): fleet tasks run; held fires inside their catch_up_window are claimed now",
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
        let sentAt = MonotonicInstant.now
        client.grantLease(ttl: settings.leaseTTL, timeout: callTimeout) { [self] result in
            granting = false
            guard !stopped else { return }
            switch result {
            case .success(let granted):
                perform(lease.handle(.granted(id: granted.id, ttl: .seconds(granted.ttl), sentAt: sentAt)))
            case .failure(let error):
                lastCause = error.description
                becameUnavailable(error.description)
                perform(lease.handle(.grantFailed(now: .now)))
            }
        }
    }

    private func renew(_ id: Int64) {
        guard !renewing, !stopped else { return }
        renewing = true
        let sentAt = MonotonicInstant.now
        let timeout = min(FleetLease.renewEvery(settings.leaseTTL), max(.milliseconds(200), (lease.expiresBy ?? sentAt) - sentAt))
        client.keepAlive(lease: id, timeout: timeout) { [self] result in
            renewing = false
            guard !stopped, lease.leaseID == id else { return }
            switch result {
            case .success(let ttl) where ttl > 0:
                perform(lease.handle(.renewed(ttl: .seconds(ttl), sentAt: sentAt)))
            case .success:
                lastCause = "etcd says lease \(Self.hex(id)) no longer exists (it expired there)"
                count("renewals_failed")
                perform(lease.handle(.leaseGone))
            case .failure(let error):
                lastCause = error.description
                count("renewals_failed")
                if case .server(_, _, let message) = error, message.contains("lease not found") {
                    perform(lease.handle(.leaseGone))
                } else {
                    perform(lease.handle(.renewalFailed(now: .now)))
                }
            }
        }
    }

    private func becameUnavailable(_ cause: String) {
        guard unavailable == nil else { return }
        unavailable = (.now(), cause)
        logger.error("unable to get or renew the etcd lease (\(cause)): fleet tasks are held, not run here; local tasks and watches go on",
                     metadata: [JournalFields.messageIDKey: .string(MessageID.clusterUnavailable.rawValue), "cause": .string(cause)])
        tell { $0.fleetAvailability(false, cause: cause) }
    }

    private func tell(_ body: @escaping @Sendable (any FleetListener) -> Void) {
        guard let listener else { return }
        listener.fleetQueue.async { body(listener) }
    }

    private func count(_ name: String) { counters[name, default: 0] += 1 }

    // MARK: Claims

    /// Claims one fire of `task` for this host, bound to the lease. With `guardRunning`
    /// (overlap = "skip"), also the task's running key, so no host starts a fire while
    /// another still runs the previous one. The answer comes on `replyOn`.
    public func claimFire(task: String, instant: WallTime, runID: String, guardRunning: Bool, takenOverFrom: String?,
                          replyOn: SubsystemQueue, completion: @escaping @Sendable (FireClaim) -> Void) {
        queue.async { [self] in
            guard let id = lease.claimable else {
                let cause = unavailable?.cause ?? lastCause ?? "no etcd lease yet"
                return replyOn.async { completion(.held(cause)) }
            }
            var fire = FleetFire(task: task, instant: instant.iso8601, host: settings.name, runID: runID, state: .running)
            fire.claimedAt = .now()
            fire.takenOverFrom = takenOverFrom
            var entries = [(key: keys.fire(task, at: instant), value: fire.json)]
            if guardRunning { entries.append((keys.running(task), fire.json)) }
            let started = MonotonicInstant.now
            client.createAll(entries, lease: id, timeout: callTimeout) { [self] result in
                let answer: FireClaim
                switch result {
                case .success(.created(let revision)):
                    claimLatency.append(.now - started)
                    count("claims_won")
                    claimsHeld.insert(entries[0].key)
                    answer = .won(revision: revision)
                case .success(.exists(let found)):
                    claimLatency.append(.now - started)
                    answer = interpret(found, mine: fire, guardRunning: guardRunning)
                case .failure(let error):
                    lastCause = error.description
                    answer = .held(error.description)
                }
                replyOn.async { completion(answer) }
            }
        }
    }

    private func interpret(_ found: [EtcdKeyValue], mine: FleetFire, guardRunning: Bool) -> FireClaim {
        let fireKey = keys.fire(mine.task, at: WallTime(iso8601: mine.instant) ?? .now())
        if let existing = found.first(where: { $0.key == fireKey }) {
            let fire = FleetFire(task: mine.task, instant: mine.instant, json: existing.value)
                ?? FleetFire(task: mine.task, instant: mine.instant, host: "unknown", runID: "unknown", state: .done)
            // An earlier claim of this host's whose answer was lost (its deadline passed after
            // etcd applied it): no run here holds it, so it is taken as won.
            if fire.host == settings.name && fire.state == .running && !claimsHeld.contains(fireKey) {
                count("claims_adopted")
                claimsHeld.insert(fireKey)
                return .won(revision: existing.modRevision)
            }
            count("claims_lost")
            return .elsewhere(fire)
        }
        if let running = found.first(where: { $0.key == keys.running(mine.task) }) {
            let fire = FleetFire(task: mine.task, instant: "", json: running.value)
                ?? FleetFire(task: mine.task, instant: "", host: "unknown", runID: "unknown", state: .running)
            count("claims_skipped")
            return .previousRunning(fire, revision: running.modRevision)
        }
        // Both vanished between the compare and the read (a lease expired): try again later.
        return .held("the claim raced with an expiring lease; retrying")
    }

    /// Records how this host's run of a fire ended, if the claim is still this host's
    /// (its revision unchanged); frees the task's running key with it.
    public func recordFire(_ fire: FleetFire, claimRevision: Int64, guardRunning: Bool, replyOn: SubsystemQueue,
                           completion: @escaping @Sendable (Result<Bool, EtcdError>) -> Void) {
        queue.async { [self] in
            guard let instant = WallTime(iso8601: fire.instant) else { return replyOn.async { completion(.success(false)) } }
            let key = keys.fire(fire.task, at: instant)
            claimsHeld.remove(key)
            client.commit(ifKey: key, atModRevision: claimRevision, puts: [(key, fire.json)],
                          deletes: guardRunning ? [keys.running(fire.task)] : [], timeout: callTimeout) { [self] result in
                if case .success(true) = result {
                    count("records_written")
                    pruneHistory(of: fire.task)
                }
                replyOn.async { completion(result) }
            }
        }
    }

    /// A running key of this host's that no run of this host's holds: a claim whose
    /// answer was lost and that was never run (the fire was given up meanwhile). Recorded
    /// as ended `cancelled`, and the running key freed, if it is still that one.
    public func releaseOrphan(_ fire: FleetFire, runningRevision: Int64, replyOn: SubsystemQueue,
                              completion: @escaping @Sendable (Result<Bool, EtcdError>) -> Void) {
        queue.async { [self] in
            var ended = fire
            ended.state = .done
            ended.outcome = RunOutcome.cancelled.rawValue
            ended.finishedAt = .now()
            var puts: [(key: String, value: String)] = []
            if let instant = WallTime(iso8601: fire.instant) { puts.append((keys.fire(fire.task, at: instant), ended.json)) }
            client.commit(ifKey: keys.running(fire.task), atModRevision: runningRevision, puts: puts,
                          deletes: [keys.running(fire.task)], timeout: callTimeout) { result in
                replyOn.async { completion(result) }
            }
        }
    }

    // MARK: Shared inbox files

    /// Claims a file of a shared inbox for this host, bound to the lease; a record of it
    /// handled in another form (the file was rewritten) is claimed over.
    public func claimFile(rule: String, relative: [UInt8], size: Int64, modifiedNanoseconds: Int64, runID: String,
                          replyOn: SubsystemQueue, completion: @escaping @Sendable (FileClaim) -> Void) {
        queue.async { [self] in
            guard let id = lease.claimable else {
                let cause = unavailable?.cause ?? lastCause ?? "no etcd lease yet"
                return replyOn.async { completion(.held(cause)) }
            }
            let key = keys.file(rule, FleetKeys.pathKey(relative))
            let mine = FleetFile(host: settings.name, runID: runID, state: .running, size: size, modifiedNanoseconds: modifiedNanoseconds)
            let started = MonotonicInstant.now
            client.createAll([(key, mine.json)], lease: id, timeout: callTimeout) { [self] result in
                switch result {
                case .success(.created(let revision)):
                    claimLatency.append(.now - started)
                    count("file_claims_won")
                    claimsHeld.insert(key)
                    replyOn.async { completion(.won(revision: revision)) }
                case .success(.exists(let found)):
                    guard let existing = found.first, let file = FleetFile(json: existing.value) else {
                        return replyOn.async { completion(.held("the claim raced with an expiring lease; retrying")) }
                    }
                    if file.state == .running {
                        if file.host == settings.name {
                            if claimsHeld.contains(key) { return replyOn.async { completion(.runningHere) } }
                            count("claims_adopted")
                            claimsHeld.insert(key)
                            return replyOn.async { completion(.won(revision: existing.modRevision)) }
                        }
                        count("file_claims_lost")
                        return replyOn.async { completion(.runningElsewhere(file)) }
                    }
                    if file.size == size && file.modifiedNanoseconds == modifiedNanoseconds {
                        count("file_claims_lost")
                        return replyOn.async { completion(.handledElsewhere(file)) }
                    }
                    // Handled, but in another form: this one is new content.
                    client.takeOver(key, value: mine.json, ifModRevision: existing.modRevision, lease: id, timeout: callTimeout) { [self] result in
                        switch result {
                        case .success(let revision?):
                            count("file_claims_won")
                            claimsHeld.insert(key)
                            replyOn.async { completion(.won(revision: revision)) }
                        case .success(nil): replyOn.async { completion(.held("another host claimed the file at the same moment; retrying")) }
                        case .failure(let error): replyOn.async { completion(.held(error.description)) }
                        }
                    }
                case .failure(let error):
                    lastCause = error.description
                    replyOn.async { completion(.held(error.description)) }
                }
            }
        }
    }

    /// The job of a claimed file ended: a success keeps the claim as a record of the form
    /// handled (unless the file is gone: then the key goes, so keys stay bounded); anything
    /// else releases it for a retry by any host.
    public func finishFile(rule: String, relative: [UInt8], claimRevision: Int64, handled: FleetFile?,
                           completion: @escaping @Sendable () -> Void = {}) {
        queue.async { [self] in
            let key = keys.file(rule, FleetKeys.pathKey(relative))
            claimsHeld.remove(key)
            if let handled {
                client.commit(ifKey: key, atModRevision: claimRevision, puts: [(key, handled.json)], deletes: [], timeout: callTimeout) { _ in completion() }
            } else {
                client.delete(key, ifModRevision: claimRevision, timeout: callTimeout) { _ in completion() }
            }
        }
    }

    /// The file is gone from the inbox: its record goes too (never a live claim).
    public func forgetFile(rule: String, relative: [UInt8]) {
        queue.async { [self] in
            guard lease.leaseID != nil else { return }
            client.deleteUnleased(keys.file(rule, FleetKeys.pathKey(relative)), timeout: callTimeout) { _ in }
        }
    }

    /// Fires kept per task in etcd: older ended ones are deleted as new ones are recorded.
    static let historyKept = 200
    private var recordsSincePrune: [String: Int] = [:]

    private func pruneHistory(of task: String) {
        recordsSincePrune[task, default: 0] += 1
        guard recordsSincePrune[task, default: 0] >= 20 else { return }
        recordsSincePrune[task] = 0
        client.list(prefix: keys.fires(task), keysOnly: true, timeout: callTimeout) { [self] result in
            guard case .success(let listing) = result, listing.kvs.count > Self.historyKept else { return }
            // Only ended fires go: a long run's claim must not be deleted under it.
            for kv in listing.kvs.prefix(listing.kvs.count - Self.historyKept) where kv.lease == 0 {
                client.delete(kv.key, ifModRevision: kv.modRevision, timeout: callTimeout) { _ in }
            }
        }
    }

    /// One fire's key as it is now (nil: absent), for the scheduler's check of fires
    /// running elsewhere when the watch may have missed their end.
    public func readFire(task: String, instant: String, replyOn: SubsystemQueue,
                         completion: @escaping @Sendable (Result<FleetFire?, EtcdError>) -> Void) {
        queue.async { [self] in
            guard let wall = WallTime(iso8601: instant) else { return replyOn.async { completion(.success(nil)) } }
            client.get(keys.fire(task, at: wall), timeout: callTimeout) { result in
                let mapped = result.map { kv in kv.flatMap { FleetFire(task: task, instant: instant, json: $0.value) } }
                replyOn.async { completion(mapped) }
            }
        }
    }

    /// Recent fires of every task (or one), newest first, for `watchkeeper fleet`.
    public func recentFires(task: String?, limit: Int, reply: @escaping @Sendable (Result<[FleetFire], EtcdError>) -> Void) {
        queue.async { [self] in
            let prefix = task.map { keys.fires($0) } ?? keys.tasks
            client.list(prefix: prefix, limit: task == nil ? 0 : limit, descending: true, timeout: callTimeout) { [self] result in
                reply(result.map { listing in
                    let fires = listing.kvs.compactMap { kv -> FleetFire? in
                        guard case .fire(let task, let instant)? = keys.parse(kv.key) else { return nil }
                        return FleetFire(task: task, instant: instant, json: kv.value)
                    }
                    return Array(fires.sorted { $0.instant > $1.instant }.prefix(limit))
                })
            }
        }
    }

    // MARK: The watch

    /// Every change under <prefix>/tasks/, from the revision last seen: other hosts'
    /// records, and claims that vanish with their host's lease (a takeover's cue).
    private func startWatch() {
        guard !watching, !stopped else { return }
        watching = true
        client.reset(.watch)
        client.watch(prefix: settings.prefix + "/", fromRevision: watchRevision == 0 ? 0 : watchRevision + 1, timeout: Self.watchLife, onEvents: { [weak self] events, revision in
            guard let self else { return }
            if revision > self.watchRevision { self.watchRevision = revision }
            for event in events { self.watched(event) }
        }, onCompacted: { [weak self] compacted in
            // Events were compacted away: go on from now (the scheduler's own check of
            // fires running elsewhere covers the gap).
            self?.watchRevision = 0
            self?.logger.info("the fleet watch started before etcd's compaction at revision \(compacted): watching from now")
        }, completion: { [weak self] result in
            guard let self else { return }
            self.watching = false
            if case .failure(let error) = result, !self.stopped { self.lastCause = error.description }
            guard !self.stopped else { return }
            // Renewed at once while the lease is held; otherwise when it is back.
            if self.lease.leaseID != nil {
                if case .failure = result {
                    if self.watchRetry == nil {
                        self.watchRetry = self.sources.makeTimer(owner: "cluster", target: "fleet watch retry", on: self.queue) { [weak self] in self?.startWatch() }
                    }
                    self.watchRetry?.schedule(after: .seconds(1))
                } else {
                    self.startWatch()
                }
            }
        })
    }

    private func watched(_ event: EtcdWatchEvent) {
        if case .file(let rule, let relativeKey)? = keys.parse(event.kv.key) {
            // A running claim of another host's that vanished: its lease expired, or its
            // job failed and released it.
            guard event.kind == .delete, let previous = event.previous, previous.lease != 0,
                  let file = FleetFile(json: previous.value), file.state == .running, file.host != settings.name,
                  let relative = FleetKeys.pathBytes(relativeKey), let files = fileListener else { return }
            files.fleetFileQueue.async { files.fleetFileReleased(rule: rule, relative: relative) }
            return
        }
        guard case .fire(let task, let instant)? = keys.parse(event.kv.key) else { return }
        switch event.kind {
        case .put:
            guard let fire = FleetFire(task: task, instant: instant, json: event.kv.value) else { return }
            tell { $0.fleetFireChanged(fire) }
        case .delete:
            // Only a claim (bound to a lease) vanishing means a host lost its run; pruned
            // records were bound to nothing.
            guard let previous = event.previous, previous.lease != 0,
                  let fire = FleetFire(task: task, instant: instant, json: previous.value), fire.state == .running else { return }
            tell { $0.fleetFireReleased(fire) }
        }
    }

    // MARK: The dump

    public func describeForDump() -> DumpValue {
        var fields = settings.describedFields
        fields.append(DumpField("endpoint_in_use", .string(client.endpointInUse.description)))
        let state: String
        switch lease.state {
        case .none: state = "none"
        case .granting: state = "granting"
        case .held: state = "held"
        case .fencing: state = "fencing"
        }
        fields.append(DumpField("lease_state", .string(state)))
        fields.append(DumpField("lease_id", lease.leaseID.map { .string(Self.hex($0)) } ?? .null))
        fields.append(DumpField("lease_expires_in_s", lease.expiresBy.map { .double(Double(max(.zero, $0 - .now).nanosecondsClamped) / 1e9) } ?? .null))
        fields.append(DumpField("last_renewal_age_s", lease.lastRenewal.map { .double(Double((.now - $0).nanosecondsClamped) / 1e9) } ?? .null))
        fields.append(DumpField("renewals_failed", .int(Int64(lease.renewalsFailed))))
        fields.append(DumpField("fences", .int(Int64(lease.fences))))
        fields.append(DumpField("unavailable_since", unavailable.map { .string($0.since.iso8601) } ?? .null))
        fields.append(DumpField("last_error", lastCause.map { .string($0) } ?? .null))
        fields.append(DumpField("watching", .bool(watching)))
        fields.append(DumpField("watch_revision", .int(watchRevision)))
        fields.append(DumpField("calls_answered", .int(Int64(client.latencies.count))))
        fields.append(DumpField("calls_failed", .int(Int64(client.callsFailed))))
        fields.append(DumpField("call_latency_p50_ms", client.latencies.percentile(0.5).map { .double(Double($0.nanosecondsClamped) / 1e6) } ?? .null))
        fields.append(DumpField("claim_latency_p50_ms", claimLatency.percentile(0.5).map { .double(Double($0.nanosecondsClamped) / 1e6) } ?? .null))
        fields.append(DumpField("counters", .object(counters.sorted { $0.key < $1.key }.map { DumpField($0.key, .int(Int64($0.value))) })))
        return .object(fields)
    }

    var isHeld: Bool { lease.claimable == nil }

    static func hex(_ id: Int64) -> String { String(UInt64(bitPattern: id), radix: 16) }

    static func age(since: WallTime) -> String {
        let now = WallTime.now()
        let seconds = max(0, now.secondsSinceEpoch - since.secondsSinceEpoch)
        return Duration.seconds(seconds).compactDescription
    }
}

extension ClusterMember: MetricsContributor {
    public func sampleMetrics() -> [MetricSample] {
        var samples = [
            MetricSample(MetricCatalog.fleetHeld, value: isHeld ? 1 : 0),
            MetricSample(MetricCatalog.leaseRenewalsFailed, count: lease.renewalsFailed),
            MetricSample(MetricCatalog.fleetFences, count: lease.fences),
            MetricSample(MetricCatalog.etcdCalls, ["ok"], count: client.latencies.count),
            MetricSample(MetricCatalog.etcdCalls, ["failed"], count: client.callsFailed),
        ]
        for quantile in [0.5, 0.99] {
            if let value = client.latencies.percentile(quantile) {
                samples.append(MetricSample(MetricCatalog.etcdCallLatency, [String(quantile)], value: Double(value.nanosecondsClamped) / 1e9))
            }
        }
        return samples
    }
}

extension TaskScheduler: MetricsContributor {
    /// Fleet tasks' fires by where they went; nothing for other tasks (their runs are in
    /// watchkeeper_jobs_total).
    public func sampleMetrics() -> [MetricSample] {
        order.compactMap { tasks[$0] }.filter { $0.settings.fleet == .one }.flatMap { task in
            Self.fleetOutcomes.map { MetricSample(MetricCatalog.fleetFires, [task.settings.name, $0], count: task.fleet.totals[$0] ?? 0) }
        }
    }
}
