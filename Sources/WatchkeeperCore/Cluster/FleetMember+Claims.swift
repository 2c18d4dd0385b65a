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

/// Claims and records of fires and files, each one etcd transaction bound to the lease.
extension FleetMember {
    /// Claims one fire of `task` for this host, bound to the lease. With `guardRunning`
    /// (overlap = "skip"), also the task's running key, so no host starts a fire while
    /// another still runs the previous one. The answer comes on `replyOn`.
    public func claimFire(task: String, instant: WallTime, runID: String, guardRunning: Bool, takenOverFrom: String?,
                          replyOn: any FleetQueue, completion: @escaping @Sendable (FireClaim) -> Void) {
        queue.async { [self] in
            guard let id = lease.claimable else {
                let cause = heldCause
                return replyOn.async { completion(.held(cause)) }
            }
            var fire = FleetFire(task: task, instant: instant.iso8601, host: settings.name, runID: runID, state: .running)
            fire.claimedAt = clock.wallNow
            fire.takenOverFrom = takenOverFrom
            var entries = [(key: keys.fire(task, at: instant), value: fire.json)]
            if guardRunning { entries.append((keys.running(task), fire.json)) }
            let started = clock.now
            store.createAll(entries, lease: id, timeout: callTimeout) { [self] result in
                let answer: FireClaim
                switch result {
                case .success(.created(let revision)):
                    claimLatency.append(clock.now - started)
                    count("claims_won")
                    claimsHeld.insert(entries[0].key)
                    answer = .won(revision: revision)
                case .success(.exists(let found)):
                    claimLatency.append(clock.now - started)
                    answer = interpret(found, mine: fire, guardRunning: guardRunning)
                case .failure(let error):
                    lastCause = error.description
                    answer = .held(error.description)
                }
                replyOn.async { completion(answer) }
            }
        }
    }

    func interpret(_ found: [EtcdKeyValue], mine: FleetFire, guardRunning: Bool) -> FireClaim {
        let fireKey = keys.fire(mine.task, at: WallTime(iso8601: mine.instant) ?? clock.wallNow)
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
    public func recordFire(_ fire: FleetFire, claimRevision: Int64, guardRunning: Bool, replyOn: any FleetQueue,
                           completion: @escaping @Sendable (Result<Bool, EtcdError>) -> Void) {
        queue.async { [self] in
            guard let instant = WallTime(iso8601: fire.instant) else { return replyOn.async { completion(.success(false)) } }
            let key = keys.fire(fire.task, at: instant)
            claimsHeld.remove(key)
            store.commit(ifKey: key, atModRevision: claimRevision, puts: [(key, fire.json)],
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
    public func releaseOrphan(_ fire: FleetFire, runningRevision: Int64, replyOn: any FleetQueue,
                              completion: @escaping @Sendable (Result<Bool, EtcdError>) -> Void) {
        queue.async { [self] in
            var ended = fire
            ended.state = .done
            ended.outcome = RunOutcome.cancelled.rawValue
            ended.finishedAt = clock.wallNow
            var puts: [(key: String, value: String)] = []
            if let instant = WallTime(iso8601: fire.instant) { puts.append((keys.fire(fire.task, at: instant), ended.json)) }
            store.commit(ifKey: keys.running(fire.task), atModRevision: runningRevision, puts: puts,
                          deletes: [keys.running(fire.task)], timeout: callTimeout) { result in
                replyOn.async { completion(result) }
            }
        }
    }

    // MARK: Shared inbox files

    /// Claims a file of a shared inbox for this host, bound to the lease; a record of it
    /// handled in another form (the file was rewritten) is claimed over.
    public func claimFile(rule: String, relative: [UInt8], size: Int64, modifiedNanoseconds: Int64, runID: String,
                          replyOn: any FleetQueue, completion: @escaping @Sendable (FileClaim) -> Void) {
        queue.async { [self] in
            guard let id = lease.claimable else {
                let cause = heldCause
                return replyOn.async { completion(.held(cause)) }
            }
            let key = keys.file(rule, FleetKeys.pathKey(relative))
            let mine = FleetFile(host: settings.name, runID: runID, state: .running, size: size, modifiedNanoseconds: modifiedNanoseconds)
            let started = clock.now
            store.createAll([(key, mine.json)], lease: id, timeout: callTimeout) { [self] result in
                switch result {
                case .success(.created(let revision)):
                    claimLatency.append(clock.now - started)
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
                    store.claimOver(key, atModRevision: existing.modRevision, entries: [(key, mine.json)], absent: [], lease: id,
                                    timeout: callTimeout) { [self] result in
                        switch result {
                        case .success(.created(let revision)):
                            count("file_claims_won")
                            claimsHeld.insert(key)
                            replyOn.async { completion(.won(revision: revision)) }
                        case .success(.exists): replyOn.async { completion(.held("another host claimed the file at the same moment; retrying")) }
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
                store.commit(ifKey: key, atModRevision: claimRevision, puts: [(key, handled.json)], deletes: [], timeout: callTimeout) { _ in completion() }
            } else {
                store.delete(key, ifModRevision: claimRevision, timeout: callTimeout) { _ in completion() }
            }
        }
    }

    /// The file is gone from the inbox: its record goes too (never a live claim).
    public func forgetFile(rule: String, relative: [UInt8]) {
        queue.async { [self] in
            guard lease.leaseID != nil else { return }
            store.deleteUnleased(keys.file(rule, FleetKeys.pathKey(relative)), timeout: callTimeout) { _ in }
        }
    }

    func pruneHistory(of task: String) {
        recordsSincePrune[task, default: 0] += 1
        guard recordsSincePrune[task, default: 0] >= 20 else { return }
        recordsSincePrune[task] = 0
        store.list(prefix: keys.fires(task), keysOnly: true, timeout: callTimeout) { [self] result in
            guard case .success(let listing) = result, listing.kvs.count > Self.historyKept else { return }
            // Only ended fires go: a long run's claim must not be deleted under it.
            for kv in listing.kvs.prefix(listing.kvs.count - Self.historyKept) where kv.lease == 0 {
                store.delete(kv.key, ifModRevision: kv.modRevision, timeout: callTimeout) { _ in }
            }
        }
    }

    /// One fire's key as it is now (nil: absent), for the scheduler's check of fires
    /// running elsewhere when the watch may have missed their end.
    public func readFire(task: String, instant: String, replyOn: any FleetQueue,
                         completion: @escaping @Sendable (Result<FleetFire?, EtcdError>) -> Void) {
        queue.async { [self] in
            guard let wall = WallTime(iso8601: instant) else { return replyOn.async { completion(.success(nil)) } }
            store.get(keys.fire(task, at: wall), timeout: callTimeout) { result in
                let mapped = result.map { kv in kv.flatMap { FleetFire(task: task, instant: instant, json: $0.value) } }
                replyOn.async { completion(mapped) }
            }
        }
    }

    /// Recent fires of every task (or one), newest first, for `watchkeeper fleet`.
    public func recentFires(task: String?, limit: Int, reply: @escaping @Sendable (Result<[FleetFire], EtcdError>) -> Void) {
        queue.async { [self] in
            let prefix = task.map { keys.fires($0) } ?? keys.tasks
            store.list(prefix: prefix, limit: task == nil ? 0 : limit, descending: true, timeout: callTimeout) { [self] result in
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

}
