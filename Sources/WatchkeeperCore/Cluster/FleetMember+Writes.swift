/// Records and releases: what a host must get into etcd after a run, at once (on the
/// client's `records` lane, never behind a claim) and again until etcd takes it or says the
/// claim it was written against is gone. A clean stop waits for them (within its budget)
/// before the lease is revoked: endings before goodbyes.
/// How a record or release ended: etcd took it; its compare failed (the claim it was
/// written against is gone or changed); or this host gave it up, stopping (or a newer write
/// of the key replaced it), which says nothing of the claim.
public enum FleetWriteOutcome: Sendable, Equatable {
    case written
    case refused
    case givenUp
}

struct PendingWrite {
    let id: Int
    let txn: EtcdTxn
    let what: String
    var attempts = 0
    var inFlight = false
    var dueAt: MonotonicInstant
    let done: ((FleetWriteOutcome) -> Void)?
}

extension FleetMember {
    /// Writes `txn` (a record or a release of `key`), retrying transient failures with
    /// backoff; `done` gets how it ended.
    func write(_ key: String, _ txn: EtcdTxn, what: String, done: ((FleetWriteOutcome) -> Void)? = nil) {
        var txn = txn
        txn.failure = [.range(key: key)]
        writeSequence += 1
        if let replaced = writes[key] { replaced.done?(.givenUp) }
        writes[key] = PendingWrite(id: writeSequence, txn: txn, what: what, dueAt: clock.now, done: done)
        send(key)
    }

    private func send(_ key: String) {
        guard var pending = writes[key], !pending.inFlight else { return }
        pending.inFlight = true
        pending.attempts += 1
        writes[key] = pending
        let id = pending.id
        store.txn(pending.txn, urgent: true, timeout: callTimeout) { [self] result in
            guard var current = writes[key], current.id == id else { return }
            switch result {
            case .success(let answer):
                writes[key] = nil
                // A retry whose compare failed because the first attempt was applied (its
                // answer lost) finds the key as it wrote it.
                let written = answer.succeeded || (current.attempts > 1 && Self.holdsWhatItWrote(current.txn, key: key, found: answer.ranges.first?.first))
                count(written ? "writes_done" : "writes_refused")
                current.done?(written ? .written : .refused)
            case .failure(let error):
                lastCause = error.description
                count("writes_retried")
                guard !stopped else {
                    writes[key] = nil
                    return current.done?(.givenUp) ?? ()
                }
                current.inFlight = false
                current.dueAt = clock.now + min(.seconds(2), .milliseconds(250) * (1 << min(current.attempts - 1, 3)))
                writes[key] = current
                armWriteTimer()
            }
            if writes.isEmpty, let drained = writesDrained {
                writesDrained = nil
                drained()
            }
        }
    }

    /// What `txn` left at `key` (its put's value, or nothing for a delete) is what is there.
    static func holdsWhatItWrote(_ txn: EtcdTxn, key: String, found: EtcdKeyValue?) -> Bool {
        for operation in txn.success {
            switch operation {
            case .put(key, let value, _): return found?.value == value
            case .delete(key): return found == nil
            default: continue
            }
        }
        return false
    }

    /// etcd answers again (a renewal or a grant went through): what waits is sent now,
    /// not at its backoff's end.
    func kickWrites() {
        let now = clock.now
        for (key, pending) in writes.sorted(by: { $0.value.id < $1.value.id }) where !pending.inFlight && pending.dueAt > now {
            writes[key]?.dueAt = now
            send(key)
        }
    }

    private func armWriteTimer() {
        guard let due = writes.values.filter({ !$0.inFlight }).map(\.dueAt).min() else { return }
        if writeTimer == nil {
            writeTimer = clock.makeTimer(target: "fleet records: write again") { [weak self] in
                guard let self, !self.stopped else { return }
                let now = self.clock.now
                for (key, pending) in self.writes.sorted(by: { $0.value.id < $1.value.id }) where !pending.inFlight && pending.dueAt <= now {
                    self.send(key)
                }
                self.armWriteTimer()
            }
        }
        writeTimer?.schedule(at: due)
    }

    /// At a clean stop: `then` once every pending write is in, or `budget` has passed (what
    /// is left is said; its claims go with the lease).
    func finishWrites(within budget: Duration, then: @escaping () -> Void) {
        guard !writes.isEmpty else { return then() }
        var finished = false
        // Held until it fires or the writes are in (a timer whose holder lets go is cancelled).
        var deadline: (any FleetTimer)?
        let once = { [self] in
            guard !finished else { return }
            finished = true
            deadline?.cancel()
            deadline = nil
            writesDrained = nil
            if !writes.isEmpty {
                let what = writes.values.sorted { $0.id < $1.id }.map(\.what).prefix(5).joined(separator: "; ")
                logger.warning("stopping: \(writes.count) record(s) of fleet runs could not be written to etcd within \(budget.compactDescription) (\(what)); their claims go with the lease, and another host may run them again")
            }
            then()
        }
        writesDrained = once
        deadline = clock.makeTimer(target: "fleet records at the stop") { once() }
        deadline?.schedule(at: clock.now + budget)
        for key in writes.keys.sorted() { send(key) }
    }
}
