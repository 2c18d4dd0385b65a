/// The answer to a claim for one fire.
public enum FireClaim: Sendable, Equatable {
    /// This host runs it; `revision` is the claim's, to record the end against, and the run
    /// starts only while `lease` (the claim's) is known to be alive.
    case won(revision: Int64, lease: Int64)
    /// Another host claimed it, or ran it already (`revision`: the key's last change).
    case elsewhere(FleetFire, revision: Int64)
    /// overlap = "skip": the task's previous fire still runs somewhere. `orphan`: it is this
    /// host's own claim on its current lease that no run here holds (its answer was lost).
    case previousRunning(FleetFire, revision: Int64, orphan: Bool)
    /// No claim could be made now (no lease, etcd unreachable): the fire is held.
    case held(String)
}

/// Claims and records of fires, each one etcd transaction bound to the lease.
extension FleetMember {
    /// Claims one fire of `task` for this host, bound to the lease. With `guardRunning`
    /// (overlap = "skip"), also the task's running key, so no host starts a fire while
    /// another still runs the previous one. `over`: the revision of a record of a run cut
    /// short by its host (`interrupted`), which this claim replaces: the takeover of a
    /// fenced fire, won by one host. The answer comes on `replyOn`.
    public func claimFire(task: String, instant: WallTime, runID: String, guardRunning: Bool, takenOverFrom: String?, over: Int64? = nil,
                          replyOn: any FleetQueue, completion: @escaping @Sendable (FireClaim) -> Void) {
        queue.async { [self] in
            guard let id = claimLease else {
                let cause = heldCause
                return replyOn.async { completion(.held(cause)) }
            }
            var fire = FleetFire(task: task, instant: instant.iso8601, host: settings.name, runID: runID, state: .running)
            fire.claimedAt = clock.wallNow
            fire.takenOverFrom = takenOverFrom
            let fireKey = keys.fire(task, at: instant)
            var entries = [(key: fireKey, value: fire.json)]
            if guardRunning { entries.append((keys.running(task), fire.json)) }
            let answered: (Result<EtcdCreateAllResult, EtcdError>) -> Void = { [self] result in
                let answer: FireClaim
                switch result {
                case .success(.created(let revision)): answer = .won(revision: revision, lease: id)
                case .success(.exists(let found)): answer = interpret(found, mine: fire, key: fireKey, lease: id)
                case .failure(let error): answer = .held(error.description)
                }
                replyOn.async { completion(answer) }
            }
            claiming(fireKey, runID: runID, lease: id, won: "claims_won", answered: answered) { [self] done in
                if let over {
                    store.claimOver(fireKey, atModRevision: over, entries: entries, absent: guardRunning ? [keys.running(task)] : [], lease: id,
                                    timeout: callTimeout, completion: done)
                } else {
                    store.createAll(entries, lease: id, timeout: callTimeout, completion: done)
                }
            }
        }
    }

    /// A claim of `key` on its way (no orphan of this host's meanwhile, whatever etcd holds),
    /// then its answer: timed, counted, and the key held if it was won.
    func claiming(_ key: String, runID: String, lease: Int64, won counter: String, answered: @escaping (Result<EtcdCreateAllResult, EtcdError>) -> Void,
                  send: (@escaping (Result<EtcdCreateAllResult, EtcdError>) -> Void) -> Void) {
        let started = clock.now
        claimsPending[key, default: 0] += 1
        send { [self] result in
            claimsPending[key, default: 1] -= 1
            if claimsPending[key] == 0 { claimsPending[key] = nil }
            switch result {
            case .success(let outcome):
                claimLatency.append(clock.now - started)
                if case .created = outcome {
                    count(counter)
                    claimsHeld.insert(key)
                }
            case .failure(let error):
                lastCause = error.description
                unanswered(key, runID: runID, lease: lease)
            }
            answered(result)
        }
    }

    /// A claim got no answer: etcd may have applied it (or may still, once a leader is
    /// elected), so a later claim that finds it takes it as won. Bounded: one lease's, and
    /// at most `unansweredKept` keys (beyond that a lost claim is left to its lease).
    private func unanswered(_ key: String, runID: String, lease: Int64) {
        if unansweredLease != lease {
            claimsUnanswered.removeAll()
            unansweredLease = lease
        }
        guard claimsUnanswered[key] != nil || claimsUnanswered.count < Self.unansweredKept else { return }
        claimsUnanswered[key, default: []].insert(runID)
    }

    static let unansweredKept = 4_096

    func interpret(_ found: [EtcdKeyValue], mine: FleetFire, key fireKey: String, lease id: Int64) -> FireClaim {
        applied(claimReading(lease: id).fire(found, mine: mine, fireKey: fireKey), key: fireKey)
    }

    /// A claim's answer read under `lease` against this host's claims and writes.
    func claimReading(lease id: Int64) -> ClaimReading {
        ClaimReading(host: settings.name, lease: id, keys: keys, known: { [self] key in
            var known: ClaimReading.Known = []
            if claimsHeld.contains(key) { known.insert(.held) }
            if claimsPending[key] != nil { known.insert(.pending) }
            if writes[key] != nil { known.insert(.writing) }
            return known
        }, unanswered: { [self] key, runID in
            unansweredLease == id && claimsUnanswered[key]?.contains(runID) == true
        })
    }

    /// The verdict counted, and its key held if the claim was adopted.
    func applied<Answer>(_ verdict: ClaimReading.Verdict<Answer>, key: String) -> Answer {
        if let counter = verdict.counter { count(counter) }
        if verdict.adopts {
            claimsHeld.insert(key)
            claimsUnanswered[key] = nil
        }
        return verdict.answer
    }

    /// Records how this host's run of a fire ended, if the claim is still this host's (its
    /// revision unchanged), and frees the task's running key with it: at once, and again
    /// until etcd takes it, the claim is gone (its lease expired there), or this host stops.
    public func recordFire(_ fire: FleetFire, claimRevision: Int64, guardRunning: Bool, replyOn: any FleetQueue,
                           completion: @escaping @Sendable (FleetWriteOutcome) -> Void) {
        queue.async { [self] in
            guard let instant = WallTime(iso8601: fire.instant) else { return replyOn.async { completion(.refused) } }
            let key = keys.fire(fire.task, at: instant)
            claimsHeld.remove(key)
            let txn = EtcdTxn(compare: [EtcdCompare(key, .modRevision(claimRevision))],
                              success: [.put(key: key, value: fire.json, lease: 0)] + (guardRunning ? [.delete(key: keys.running(fire.task))] : []))
            write(key, txn, what: "the end of run \(fire.runID) of task \(fire.task) due at \(fire.instant)") { [self] outcome in
                if outcome == .written {
                    count("records_written")
                    pruneHistory(of: fire.task)
                }
                replyOn.async { completion(outcome) }
            }
        }
    }

    /// A claim of this host's whose run never started (the lease was fenced, the daemon
    /// stopping, or the job refused): released, so that another host may run the fire. The
    /// key says so (`released`, bound to nothing) rather than vanishing, so a host that sees
    /// a claim vanish knows its host's lease ended.
    public func releaseFire(_ fire: FleetFire, claimRevision: Int64, guardRunning: Bool) {
        queue.async { [self] in
            guard let instant = WallTime(iso8601: fire.instant) else { return }
            let key = keys.fire(fire.task, at: instant)
            claimsHeld.remove(key)
            var released = fire
            released.state = .released
            released.finishedAt = clock.wallNow
            let txn = EtcdTxn(compare: [EtcdCompare(key, .modRevision(claimRevision))],
                              success: [.put(key: key, value: released.json, lease: 0)] + (guardRunning ? [.delete(key: keys.running(fire.task))] : []))
            write(key, txn, what: "the release of the unstarted run \(fire.runID) of task \(fire.task) due at \(fire.instant)")
        }
    }

    /// A running key of this host's, on its lease, that no run of this host's holds: a
    /// claim whose answer was lost and that was never run (the fire was given up
    /// meanwhile). Recorded as ended `cancelled` (it never started), and the running key
    /// freed, if it is still that one. A run whose record is still on its way is no orphan:
    /// its record frees the key.
    public func releaseOrphan(_ fire: FleetFire, runningRevision: Int64, replyOn: any FleetQueue,
                              completion: @escaping @Sendable (Bool) -> Void) {
        queue.async { [self] in
            guard let instant = WallTime(iso8601: fire.instant), writes[keys.fire(fire.task, at: instant)] == nil else {
                return replyOn.async { completion(false) }
            }
            var ended = fire
            ended.state = .done
            ended.outcome = RunOutcome.cancelled.rawValue
            ended.finishedAt = clock.wallNow
            let txn = EtcdTxn(compare: [EtcdCompare(keys.running(fire.task), .modRevision(runningRevision))],
                              success: [.put(key: keys.fire(fire.task, at: instant), value: ended.json, lease: 0), .delete(key: keys.running(fire.task))])
            store.txn(txn, urgent: true, timeout: callTimeout) { result in
                let released = (try? result.get().succeeded) ?? false
                replyOn.async { completion(released) }
            }
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

    /// One fire's key as it is now (nil: absent) and its revision, for the scheduler's check
    /// of fires running elsewhere when the watch may have missed their end.
    public func readFire(task: String, instant: String, replyOn: any FleetQueue,
                         completion: @escaping @Sendable (Result<(fire: FleetFire, revision: Int64)?, EtcdError>) -> Void) {
        queue.async { [self] in
            guard let wall = WallTime(iso8601: instant) else { return replyOn.async { completion(.success(nil)) } }
            store.get(keys.fire(task, at: wall), timeout: callTimeout) { result in
                let mapped = result.map { kv -> (fire: FleetFire, revision: Int64)? in
                    guard let kv, let fire = FleetFire(task: task, instant: instant, json: kv.value) else { return nil }
                    return (fire, kv.modRevision)
                }
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
