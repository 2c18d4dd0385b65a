import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// A shared inbox's part of a rule's state: files another host has, files held for want
/// of a lease, and files this host recorded as handled (whose records go when they do).
struct FleetRuleState {
    var elsewhere: [[UInt8]: WatchEvent] = [:]
    var held: [[UInt8]: WatchEvent] = [:]
    var doneHere: Set<[UInt8]> = []
    var claimsWon: UInt64 = 0
    var ranElsewhere: UInt64 = 0
    var released: UInt64 = 0
    var heldTotal: UInt64 = 0
    static let doneLimit = 65_536

    func describe() -> DumpValue {
        .object([
            .init("scope", .string("one")),
            .init("claims_won", .int(Int64(claimsWon))),
            .init("ran_elsewhere", .int(Int64(ranElsewhere))),
            .init("claimed_elsewhere_now", .int(Int64(elsewhere.count))),
            .init("released_by_others", .int(Int64(released))),
            .init("held_now", .int(Int64(held.count))),
            .init("held_total", .int(Int64(heldTotal))),
        ])
    }
}

/// `fleet = "one"` on a watch rule: a shared inbox (docs/fleet.md). Before a file's job
/// starts, the file is claimed in etcd, bound to this host's lease; the host that wins runs
/// it. At least once (a failure or a dead host releases the claim for any host), never twice
/// while a claim lives, never lost (a file that cannot be claimed is held and tried again).
extension DirectoryWatcher: FleetFileListener {
    public var fleetFileQueue: any FleetQueue { queue }

    func claimThenSubmit(_ subjects: [JobSubject], rule: WatchRule) {
        guard let cluster else { return }
        for subject in subjects {
            guard case .file(let file) = subject else { continue }
            let runID = RunID.random()
            let relative = Array(file.relative)
            let name = rule.name
            cluster.claimFile(rule: name, relative: relative, size: file.identity?.size ?? -1,
                              modifiedNanoseconds: file.identity?.modifiedNanoseconds ?? -1, runID: runID.description,
                              replyOn: queue) { [weak self] claim in
                self?.fileClaimed(claim, file: file, rule: rule, runID: runID)
            }
        }
    }

    private func fileClaimed(_ claim: FileClaim, file: FileSubject, rule: WatchRule, runID: RunID) {
        let relative = Array(file.relative)
        let subject = JobSubject.file(file)
        switch claim {
        case .won(let revision):
            rule.fleet.claimsWon += 1
            rule.fleet.elsewhere[relative] = nil
            let key = rule.key
            let queue = self.queue
            engine.queue.async { [engine] in
                engine.submit(key, subject: subject, runID: runID, replyOn: queue) { [weak self] completion in
                    self?.finished(completion, rule: rule)
                    self?.fileJobEnded(completion, file: file, rule: rule, revision: revision, runID: runID)
                }
            }
        case .runningElsewhere(let other), .handledElsewhere(let other):
            rule.fleet.ranElsewhere += 1
            if case .runningElsewhere = claim { rule.fleet.elsewhere[relative] = file.event }
            let how = other.state == .running ? "running on" : "handled on"
            let record = JobEngine.notRunRecord(rule.key, runID: RunID(other.runID) ?? runID, subject: subject, outcome: .ranElsewhere,
                                                detail: "\(how) \(other.host) (run \(other.runID))")
            let key = rule.key
            engine.queue.async { [engine] in engine.recordNotRun(record, key: key, subject: subject, inBulk: true) }
            finished(JobCompletion(key: rule.key, subject: subject, records: [record]), rule: rule)
        case .runningHere:
            // A second event for a file whose job runs here: that job has it.
            for follower in rule.returned(file) { enqueue(rule, relative: follower.path, event: follower.event) }
        case .held(let cause):
            // Not a job: the file leaves the in-flight count and waits to be claimed again.
            for follower in rule.returned(file) { rule.fleet.held[follower.path] = follower.event }
            if rule.fleet.held.isEmpty { logger.info("watch \(rule.name): files are held until they can be claimed in etcd: \(cause)") }
            rule.fleet.held[relative] = file.event
            rule.fleet.heldTotal += 1
            armFleetRetry()
        }
    }

    /// A success keeps the claim as the record of the form handled, unless the job took
    /// the file away (the usual inbox: moved to done/); anything else releases it.
    private func fileJobEnded(_ completion: JobCompletion, file: FileSubject, rule: WatchRule, revision: Int64, runID: RunID) {
        guard let cluster else { return }
        let relative = Array(file.relative)
        var handled: FleetFile?
        if completion.final.outcome == .ok {
            // A stat on a share could hang: there the record stays until the file's
            // deletion is seen.
            var info = stat()
            let present = !file.checksBeforeStart || file.path.withUnsafeBufferPointer { buffer in
                var bytes = Array(buffer)
                bytes.append(0)
                return bytes.withUnsafeBufferPointer { lstat(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), &info) == 0 }
            }
            if present {
                handled = FleetFile(host: cluster.settings.name, runID: runID.description, state: .done,
                                    size: file.identity?.size ?? -1, modifiedNanoseconds: file.identity?.modifiedNanoseconds ?? -1)
                if rule.fleet.doneHere.count >= FleetRuleState.doneLimit { rule.fleet.doneHere.removeAll(keepingCapacity: true) }
                rule.fleet.doneHere.insert(relative)
            }
        }
        cluster.finishFile(rule: rule.name, relative: relative, claimRevision: revision, handled: handled)
    }

    /// A file this host handled is gone: its record in etcd goes too.
    func fleetFileGone(_ rule: WatchRule, relative: [UInt8]) {
        guard rule.fleet.doneHere.remove(relative) != nil else { return }
        cluster?.forgetFile(rule: rule.name, relative: relative)
    }

    public func fleetFileReleased(rule name: String, relative: [UInt8]) {
        guard let rule = rules[name], rule.settings.fleet == .one, accepting else { return }
        let event = rule.fleet.elsewhere.removeValue(forKey: relative) ?? rule.settings.events.first ?? .closedWrite
        rule.fleet.released += 1
        // Admission looks at the file again (gone, or handled here meanwhile: nothing).
        enqueue(rule, relative: relative, event: event, fromScan: true)
    }

    public func fleetFilesAvailable() {
        retryHeldFiles()
    }

    private func armFleetRetry() {
        if fleetRetryTimer == nil {
            fleetRetryTimer = context.sources.makeTimer(owner: "watcher", target: "shared inbox files held: claim again", on: queue) { [weak self] in
                self?.retryHeldFiles()
            }
        }
        fleetRetryTimer?.schedule(after: .seconds(1))
    }

    private func retryHeldFiles() {
        guard accepting else { return }
        for name in order {
            guard let rule = rules[name], rule.settings.fleet == .one, !rule.fleet.held.isEmpty else { continue }
            let held = rule.fleet.held
            rule.fleet.held = [:]
            for (relative, event) in held { enqueue(rule, relative: relative, event: event, fromScan: true) }
        }
    }
}
