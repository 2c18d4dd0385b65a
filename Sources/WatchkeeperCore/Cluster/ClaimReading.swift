/// What a claim that found its key taken means: etcd's answer read against what this host
/// knows of its own claims, apart from the transaction that made the claim
/// (FleetMember+Claims, +Files). A pure value; the member applies the verdict (counts it,
/// and holds a key it adopted).
struct ClaimReading {
    /// What this host knows of one key.
    struct Known: OptionSet {
        let rawValue: Int
        /// A run here holds the key's claim.
        static let held = Known(rawValue: 1 << 0)
        /// A claim of the key is on its way to etcd.
        static let pending = Known(rawValue: 1 << 1)
        /// A record or release of the key is on its way to etcd.
        static let writing = Known(rawValue: 1 << 2)
    }

    struct Verdict<Answer: Equatable>: Equatable {
        let answer: Answer
        /// The member's counter it adds one to, if any.
        var counter: String?
        /// The key is this host's own claim on its current lease whose answer was lost: it is
        /// held from now on.
        var adopts = false
    }

    /// This host's member name, and the lease the claim was bound to.
    let host: String
    let lease: Int64
    let keys: FleetKeys
    let known: (String) -> Known
    /// Whether this host's claim of the key with this run ID got no answer (on `lease`):
    /// only such a claim, found in etcd, is one of ours to adopt. A claim of ours that was
    /// answered and since let go can be found too, by a claim that overtook its release or
    /// record on the way to etcd: that revision is gone, and a run under it would have no claim.
    let unanswered: (_ key: String, _ runID: String) -> Bool

    /// A claim of one fire of `mine.task` at `fireKey` whose compare failed: `found` is what
    /// etcd holds at the fire's key and, with overlap = "skip", the task's running key.
    func fire(_ found: [EtcdKeyValue], mine: FleetFire, fireKey: String) -> Verdict<FireClaim> {
        if let existing = found.first(where: { $0.key == fireKey }) {
            let fire = FleetFire(task: mine.task, instant: mine.instant, json: existing.value)
                ?? FleetFire(task: mine.task, instant: mine.instant, host: "unknown", runID: "unknown", state: .done)
            // An earlier claim of this host's, on this very lease, whose answer was lost (its
            // deadline passed after etcd applied it): no run here holds it, so it is taken as
            // won. A claim under another lease (a previous life of this daemon, or another
            // daemon with the same name) is not ours to run.
            if fire.host == host && fire.state == .running && existing.lease == lease && known(fireKey).isEmpty {
                guard unanswered(fireKey, fire.runID) else {
                    return Verdict(answer: .held("this host's claim of the fire, let go a moment ago, is still in etcd; retrying"))
                }
                return Verdict(answer: .won(revision: existing.modRevision, lease: lease), counter: "claims_adopted", adopts: true)
            }
            return Verdict(answer: .elsewhere(fire, revision: existing.modRevision), counter: "claims_lost")
        }
        if let running = found.first(where: { $0.key == keys.running(mine.task) }) {
            let fire = FleetFire(task: mine.task, instant: "", json: running.value)
                ?? FleetFire(task: mine.task, instant: "", host: "unknown", runID: "unknown", state: .running)
            let previous = WallTime(iso8601: fire.instant)
            let ours = fire.host == host && running.lease == lease && previous != nil
            let here = ours ? known(keys.fire(mine.task, at: previous!)) : []
            // This host's previous fire, its claim or its end (or release) still on its way to
            // etcd: not a run going on, so this fire waits for it rather than being skipped.
            if here.contains(.writing) { return Verdict(answer: .held("this host's record of the fire due at \(fire.instant) is on its way to etcd")) }
            if here.contains(.pending) { return Verdict(answer: .held("this host's claim of the fire due at \(fire.instant) is on its way to etcd")) }
            // A later fire runs (this one was held, and is run late): not this one's previous,
            // so this one waits for its end instead of being skipped for it.
            if let previous, let instant = WallTime(iso8601: mine.instant), previous > instant {
                return Verdict(answer: .held("the later fire due at \(fire.instant) runs on \(fire.host); this one waits for its end"))
            }
            let orphan = ours && !here.contains(.held)
            return Verdict(answer: .previousRunning(fire, revision: running.modRevision, orphan: orphan), counter: "claims_skipped")
        }
        // Both vanished between the compare and the read (a lease expired): try again later.
        return Verdict(answer: .held("the claim raced with an expiring lease; retrying"))
    }

    /// A claim of a shared inbox's file at `key` that found the key: nil when what is there
    /// is the record of the file in another form, which the claim is made over.
    func file(_ existing: EtcdKeyValue?, mine: FleetFile, key: String) -> Verdict<FileClaim?> {
        guard let existing, let file = FleetFile(json: existing.value) else {
            return Verdict(answer: .held("the claim raced with an expiring lease; retrying"))
        }
        if file.state == .running {
            guard file.host == host && existing.lease == lease else { return Verdict(answer: .runningElsewhere(file), counter: "file_claims_lost") }
            let here = known(key)
            if !here.isDisjoint(with: [.held, .pending]) { return Verdict(answer: .runningHere) }
            // Released a moment ago, its release on its way: not a claim to take up.
            if here.contains(.writing) { return Verdict(answer: .held("this host's release of the file is on its way to etcd; retrying")) }
            guard unanswered(key, file.runID) else {
                return Verdict(answer: .held("this host's claim of the file, let go a moment ago, is still in etcd; retrying"))
            }
            return Verdict(answer: .won(revision: existing.modRevision, lease: lease), counter: "claims_adopted", adopts: true)
        }
        if file.size == mine.size && file.modifiedNanoseconds == mine.modifiedNanoseconds {
            return Verdict(answer: .handledElsewhere(file), counter: "file_claims_lost")
        }
        return Verdict(answer: nil)
    }
}
