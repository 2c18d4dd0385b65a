/// The answer to a claim for one file of a shared inbox.
public enum FileClaim: Sendable, Equatable {
    /// This host runs it: `revision` is the claim's, bound to `lease`.
    case won(revision: Int64, lease: Int64)
    /// Another host's job has it now; it is released (and said) if that job fails or its
    /// host goes.
    case runningElsewhere(FleetFile)
    /// A host (this one, in an earlier life, or another) handled it in this very form (size
    /// and modification time), whether the file is still there or was moved out.
    case handledElsewhere(FleetFile)
    /// This host's own job has it already (a second event for the same file).
    case runningHere
    case held(String)
}

/// Claims and records of a shared inbox's files (docs/fleet.md, "A shared inbox").
extension FleetMember {
    /// How long the record of a file handled and gone from the inbox stays in etcd, so that
    /// a host that listed the file before it went (a restart's catch-up) finds it done.
    static let doneRecordLife = Duration.seconds(3_600)

    /// Claims a file of a shared inbox for this host, bound to the lease; a record of it
    /// handled in another form (the file was rewritten) is claimed over. Made by the job
    /// engine when a slot is free for the file's job (FleetStarts).
    public func claimFile(rule: String, relative: [UInt8], size: Int64, modifiedNanoseconds: Int64, runID: String,
                          replyOn: any FleetQueue, completion: @escaping @Sendable (FileClaim) -> Void) {
        queue.async { [self] in
            guard let id = claimLease else {
                let cause = heldCause
                return replyOn.async { completion(.held(cause)) }
            }
            let key = keys.file(rule, FleetKeys.pathKey(relative))
            let mine = FleetFile(host: settings.name, runID: runID, state: .running, size: size, modifiedNanoseconds: modifiedNanoseconds)
            claiming(key, runID: runID, lease: id, won: "file_claims_won", answered: { [self] result in
                switch result {
                case .success(.created(let revision)):
                    replyOn.async { completion(.won(revision: revision, lease: id)) }
                case .success(.exists(let found)):
                    let answer = interpretFile(found.first, mine: mine, key: key, lease: id)
                    // nil: handled, but in another form: this one is new content, claimed over the record.
                    guard answer == nil, let record = found.first else { return replyOn.async { completion(answer ?? .held("the claim raced; retrying")) } }
                    claiming(key, runID: runID, lease: id, won: "file_claims_won", answered: { result in
                        switch result {
                        case .success(.created(let revision)): replyOn.async { completion(.won(revision: revision, lease: id)) }
                        case .success(.exists): replyOn.async { completion(.held("another host claimed the file at the same moment; retrying")) }
                        case .failure(let error): replyOn.async { completion(.held(error.description)) }
                        }
                    }) { [self] done in
                        store.claimOver(key, atModRevision: record.modRevision, entries: [(key, mine.json)], absent: [], lease: id, timeout: callTimeout,
                                        completion: done)
                    }
                case .failure(let error):
                    replyOn.async { completion(.held(error.description)) }
                }
            }) { [self] done in
                store.createAll([(key, mine.json)], lease: id, timeout: callTimeout, completion: done)
            }
        }
    }

    /// What a claim that found the key means; nil: a record of another form, claimed over.
    private func interpretFile(_ existing: EtcdKeyValue?, mine: FleetFile, key: String, lease id: Int64) -> FileClaim? {
        applied(claimReading(lease: id).file(existing, mine: mine, key: key), key: key)
    }

    /// The job of a claimed file ended: a success replaces the claim with the record that
    /// the file was handled in this form, at once (FleetMember+Writes); anything else
    /// releases it for a retry by any host.
    public func fileJobEnded(rule: String, relative: [UInt8], claimRevision: Int64, ok: Bool, runID: String, size: Int64, modifiedNanoseconds: Int64) {
        queue.async { [self] in
            let key = keys.file(rule, FleetKeys.pathKey(relative))
            claimsHeld.remove(key)
            let name = LineEscaping.escaped(relative)
            if ok {
                let record = FleetFile(host: settings.name, runID: runID, state: .done, size: size, modifiedNanoseconds: modifiedNanoseconds)
                write(key, EtcdTxn(compare: [EtcdCompare(key, .modRevision(claimRevision))], success: [.put(key: key, value: record.json, lease: 0)]),
                      what: "the end of run \(runID) of \(rule)'s \(name)")
            } else {
                write(key, EtcdTxn(compare: [EtcdCompare(key, .modRevision(claimRevision))], success: [.delete(key: key)]),
                      what: "the release of \(rule)'s \(name)")
            }
        }
    }

    /// The file is gone from the inbox (its job moved it, or it was deleted): its record,
    /// bound to nothing until now, is bound to the record lease, so it goes after
    /// `doneRecordLife` and keys stay bounded; until then a host that listed the file before
    /// it went still finds it done. Never a live claim.
    public func forgetFile(rule: String, relative: [UInt8]) {
        queue.async { [self] in
            guard lease.leaseID != nil, !stopping else { return }
            let key = keys.file(rule, FleetKeys.pathKey(relative))
            store.get(key, timeout: callTimeout) { [self] result in
                guard case .success(let kv?) = result, kv.lease == 0 else { return }
                withRecordLease { [self] recordLease in
                    let txn = EtcdTxn(compare: [EtcdCompare(key, .modRevision(kv.modRevision))], success: [.put(key: key, value: kv.value, lease: recordLease)])
                    store.txn(txn, urgent: false, timeout: callTimeout) { _ in }
                }
            }
        }
    }

    /// The record lease: granted for `doneRecordLife`, never renewed, replaced by a new one
    /// after a sixth of it, so a record lives between five and six sixths of it.
    private func withRecordLease(_ body: @escaping (Int64) -> Void) {
        if let current = recordLease, clock.now - current.grantedAt < Self.doneRecordLife / 6 { return body(current.id) }
        recordLeaseWaiters.append(body)
        guard recordLeaseWaiters.count == 1 else { return }
        let sentAt = clock.now
        store.grantLease(ttl: Self.doneRecordLife, timeout: callTimeout) { [self] result in
            let waiters = recordLeaseWaiters
            recordLeaseWaiters.removeAll()
            guard case .success(let granted) = result else { return }
            recordLease = (granted.id, sentAt)
            for waiter in waiters { waiter(granted.id) }
        }
    }
}
