import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// From a file event to a job and back, on the watching queue: the settle window (a scan's
/// find waits until it stops changing), admission (a regular file, and, where the event is
/// no evidence of new content, not handled before in this form: docs/architecture.md,
/// "File identity"), submission to the engine in the rule's shape, and the completion
/// (followers of renamed files, this life's memory, the ledger's record).
/// Confined to the watching queue (`state.queue`), as every part of the watcher.
// @unchecked Sendable: confined to the watching queue, as every part of the watcher.
final class FileSettling: @unchecked Sendable {
    private let state: WatchingState
    private let jobs: any WatchJobSubmitting
    private let ledger: WatchLedger
    private let changes: HandledChanges
    private let fleet: FleetInbox
    private var clock: any WatchClock { state.clock }
    private var logger: Logger { state.logger }
    private var accepting: Bool { state.accepting }
    private var queue: SubsystemQueue { state.queue }

    init(state: WatchingState, jobs: any WatchJobSubmitting, ledger: WatchLedger, changes: HandledChanges, fleet: FleetInbox) {
        self.state = state
        self.jobs = jobs
        self.ledger = ledger
        self.changes = changes
        self.fleet = fleet
    }

    /// Files found by a scan may still be open for writing (a scan cannot tell): they wait
    /// this long, and a close event for the same path meanwhile joins the same job.
    static let scanSettle: Duration = .seconds(1)

    func enqueue(_ rule: WatchRule, relative: [UInt8], event: WatchEvent, fromScan: Bool = false, renamedFrom: [UInt8]? = nil,
                 changedSince: Int64? = nil) {
        let pending = PendingFile(event: event, renamedFrom: renamedFrom, changedSince: changedSince)
        guard accepting else {
            // The drain refuses new jobs, not what the watcher learns: a handled file renamed
            // now (its event read after the stop began) is followed, and the clean stop
            // confirms it, so the next start does not run it again.
            if event == .movedIn, let renamedFrom { followRenameDuringTheDrain(rule, from: renamedFrom, to: relative) }
            return
        }
        let now = clock.now
        // A writer's close (or a move in) is evidence that the file is whole: a wait that only
        // a scan started (it cannot tell) ends, and the file goes on with the rule's window.
        if !fromScan, let waiting = rule.settle.item(for: relative), waiting.fromScan {
            rule.settle.remove(path: relative)
        }
        let window = settleWindow(rule, fromScan: fromScan)
        if window == .zero && rule.settle.item(for: relative) == nil {
            switch admit(rule, relative: relative, pending: pending, fromScan: false, eventAt: now) {
            case .admitted(let subject): submit([FileSubject](arrayLiteral: subject), rule: rule)
            case .skipped, .stillChanging: break
            }
            return
        }
        rule.settle.add(path: relative, event: pending, deadline: now + window, fromScan: fromScan)
        armSettleTimer(rule)
    }

    private func followRenameDuringTheDrain(_ rule: WatchRule, from: [UInt8], to relative: [UInt8]) {
        guard let status = FileStatus.of(rule.absolute(relative), followSymlinks: rule.settings.followSymlinks),
              status.type == .regular else { return }
        _ = changes.followRename(rule, from: from, to: relative, identity: rule.polling.identity(of: status.identity, at: relative))
    }

    func settleWindow(_ rule: WatchRule, fromScan: Bool) -> Duration {
        fromScan ? max(rule.settings.settle, Self.scanSettle) : rule.settings.settle
    }

    func armSettleTimer(_ rule: WatchRule) {
        guard let next = rule.settle.nextDeadline else { return }
        rule.arm(\.settleTimer, on: clock, at: next, target: "settle \(rule.settings.settle.compactDescription)") { [unowned self] in
            self.settleDue(rule)
        }
    }

    /// Starts every path whose window has ended, and re-arms for the next one.
    private func settleDue(_ rule: WatchRule) {
        // A batch also takes the files whose windows end a moment later (files written
        // together settle microseconds apart), up to a quarter of the window or 250 ms.
        let lookahead = rule.settings.batch ? min(rule.settings.settle / 4, .milliseconds(250)) : .zero
        let now = clock.now
        let due = rule.settle.takeDue(now: now, lookahead: lookahead)
        var admitted: [FileSubject] = []
        admitted.reserveCapacity(due.count)
        for item in due {
            // A window ends its length after the last event (or the scan that found the file).
            let window = settleWindow(rule, fromScan: item.fromScan)
            switch admit(rule, relative: item.path, pending: item.event, fromScan: item.fromScan, eventAt: item.deadline - window) {
            case .admitted(let subject):
                admitted.append(subject)
            case .skipped:
                break
            case .stillChanging(let seen):
                rule.counters.scanWaitsRestarted += 1
                rule.settle.add(path: item.path, event: PendingFile(event: item.event.event, seen: seen), deadline: now + window, fromScan: true)
            }
        }
        submit(admitted, rule: rule)
        armSettleTimer(rule)
    }

    enum Admission {
        case admitted(FileSubject)
        /// Gone, not a regular file, handled already, or waiting for its old name's job.
        case skipped
        /// Found by a scan and changed within its window: it waits again, from this form.
        case stillChanging(FileIdentity)
    }

    /// Whether a file is to be handled now: it still exists (unless the event says it went),
    /// is a regular file (a FIFO would block the job, a planted link would lead a root job
    /// elsewhere), and, where it is no evidence of new content (a scan, a move), was not
    /// handled before in this exact form (docs/architecture.md, "File identity").
    func admit(_ rule: WatchRule, relative: [UInt8], pending: PendingFile, fromScan: Bool, eventAt: MonotonicInstant) -> Admission {
        let absolute = rule.absolute(relative)
        let rootLength = absolute.count - relative.count - (relative.isEmpty ? 0 : 1)
        let event = pending.event
        let follows = rule.settings.followSymlinks
        guard event != .deleted && event != .movedOut else {
            return .admitted(FileSubject(path: absolute, rootLength: rootLength, event: event, identity: nil, eventAt: eventAt,
                                         followsSymlinks: follows))
        }
        guard let status = FileStatus.of(absolute, followSymlinks: follows) else { return .skipped } // gone already
        guard status.type == .regular else {
            rule.counters.skipped[status.type] += 1
            return .skipped
        }
        let identity = rule.polling.identity(of: status.identity, at: relative)
        let rules = AdmissionRules(event: event, fromScan: fromScan, pending: pending, identity: identity)
        let quiet = AdmissionRules.quietFor(settleWindow(rule, fromScan: true), identity, now: clock.wallNow)
        switch rules.verdict(quiet: quiet, memory: rule.memory) {
        case .admit:
            break
        case .stillChanging:
            return .stillChanging(identity)
        case .olderThanTheLostEvents:
            rule.counters.rescanOlderSkipped += 1
            return .skipped
        case .alreadyInFlight, .unchangedSinceAdmitted:
            rule.counters.duplicates += 1
            return .skipped
        case .admitUnlessHandled:
            // Renamed while its job waits or runs: handled here if that job does not succeed
            // (a `.part` renamed to `.dat` before its job could read it). A rename the watcher
            // saw of a handled file is that file. Anything else must be unchanged, its change
            // time too, in this life's memory or the ledger.
            if event == .movedIn && rule.followIfInFlight(identity, at: relative, event: event) { return .skipped }
            if event == .movedIn, let from = pending.renamedFrom, changes.followRename(rule, from: from, to: relative, identity: identity) {
                rule.counters.duplicates += 1
                return .skipped
            }
            if rule.handledInThisLife(identity, at: relative)
                || ledger.handledBefore(rule, relative: relative, identity: identity, mayHaveMoved: true) {
                rule.counters.duplicates += 1
                return .skipped
            }
        }
        // Its job records the form it has now: a change seen before is void.
        rule.changes.admitted(relative)
        return .admitted(FileSubject(path: absolute, rootLength: rootLength, event: event, identity: identity, eventAt: eventAt,
                                     followsSymlinks: follows, checksBeforeStart: rule.polling.remoteTree(holding: relative) == nil))
    }

    /// The bytes one batch's paths may take: for `{paths}`, half of ARG_MAX, leaving the
    /// rest for the environment and the other arguments; on stdin, what one pipe holds
    /// (they are written before the job starts). WATCHKEEPER_TEST_BATCH_BYTES lowers it for tests.
    private func batchBudget(_ input: WatchSettings.BatchInput) -> Int {
        if let text = state.environment["WATCHKEEPER_TEST_BATCH_BYTES"], let value = Int(text) { return value }
        switch input {
        case .argv: return max(65_536, sysconf(Int32(_SC_ARG_MAX)) / 2)
        case .stdin: return OwnedPipe.largestCapacity
        }
    }

    /// Files as the rule's jobs: one each, or batches that fit the argv or pipe budget.
    private func subjects(_ files: [FileSubject], rule: WatchRule) -> [JobSubject] {
        guard let input = rule.settings.batchInput else { return files.map { .file($0) } }
        return WatchRule.batches(files, input: input, budget: batchBudget(input))
    }

    /// Hands jobs to the engine, on its queue; each comes back here once, with its records.
    func submit(_ files: [FileSubject], rule: WatchRule) {
        submit(subjects(files, rule: rule), rule: rule)
    }

    /// Jobs the engine handed back after a reload changed the rule's batching: their files
    /// (still counted in flight) go again in the new shape, never a job without its file.
    func resubmit(_ withdrawn: [JobSubject], rule: WatchRule) {
        let files = withdrawn.flatMap(\.files)
        guard state.isCurrent(rule) else { return } // retired meanwhile: the new rule catches up
        let shape = rule.settings.batchInput.map { "batches (\($0.rawValue))" } ?? "one job per file"
        logger.notice("watch \(rule.name): \(files.count) waiting file(s) are submitted again as \(shape), as the reload changed its batching")
        submit(subjects(files, rule: rule), rule: rule, countedInFlight: true)
    }

    func submit(_ subjects: [JobSubject], rule: WatchRule, countedInFlight: Bool = false) {
        guard !subjects.isEmpty else { return }
        if !countedInFlight {
            for subject in subjects {
                for file in subject.files { rule.memory.submitted(file) }
            }
        }
        rule.counters.jobsSubmitted += UInt64(subjects.count)
        if rule.settings.batch { rule.counters.batchesStarted += UInt64(subjects.count) }
        let key = rule.key
        let queue = self.queue
        jobs.queue.async { [jobs] in
            for subject in subjects {
                jobs.submit(key, subject: subject, runID: nil, replyOn: queue) { [weak self] completion in
                    self?.finished(completion, rule: rule)
                }
            }
        }
    }

    /// The final outcome of a file's job goes to the ledger (cancelled ones are left for the
    /// next catch-up); the record itself is the engine's.
    func finished(_ completion: JobCompletion, rule: WatchRule) {
        if rule.settings.fleet == .one, fleet.finished(completion, rule: rule) { return }
        let outcome = completion.final.outcome
        let files = completion.subject.files
        // What each record carries: the form admitted, or what the attribute changes followed
        // while the job waited or ran made of it.
        let recorded = files.map { rule.memory.recordedIdentity(of: $0) }
        var followers: [(follower: InFlightFile.Follower, file: FileSubject, recorded: FileIdentity)] = []
        for (file, identity) in zip(files, recorded) {
            guard let identity else { continue }
            followers += rule.memory.returned(file).map { ($0, file, identity) }
            if outcome == .ok, let admitted = file.identity {
                rule.memory.remember(HandledFile(admitted: admitted, current: identity, path: Array(file.relative)))
            }
        }
        ledger.record(completion, identities: recorded, rule: rule) { [weak self] records in self?.ledgerCommitted(records) }
        // Names a file was renamed to while its job waited or ran: if the job succeeded it
        // read that file (a rename keeps the content), and its record follows it there; if
        // not, the file is handled there now.
        for (follower, file, identity) in followers {
            if outcome == .ok && identity.renamed(as: follower.identity) {
                rule.counters.duplicates += 1
                changes.track(rule, .init(path: follower.path, from: Array(file.relative), known: identity, seen: follower.identity,
                                  due: clock.now + TrackedChanges.confirmAfter))
            } else if state.isCurrent(rule) {
                enqueue(rule, relative: follower.path, event: follower.event)
            }
        }
    }

    /// The store committed these records: the reader finds them now.
    private func ledgerCommitted(_ records: [LedgerRecord]) {
        // A file the ledger now holds as handled is found there: this life's memory of it can
        // go, so a burst's 100,000 files are not kept in memory until the daemon stops.
        for record in records where record.outcome == RunOutcome.ok.rawValue {
            state.rules[record.rule]?.memory.ledgerHolds(record.identity, at: record.path)
        }
    }

    /// Files that waited in a settle window and will not become jobs end with a record; their
    /// timer goes with them (unwatching a tree leaves both: RootTracking.unwatch).
    func cancelSettling(_ rule: WatchRule, detail: String) {
        rule.settleTimer?.cancel()
        rule.settleTimer = nil
        let items = rule.settle.removeAll()
        guard !items.isEmpty else { return }
        logger.notice("watch \(rule.name): \(items.count) file(s) waiting to settle are not started: \(detail) (the first: \(LineEscaping.escaped(rule.absolute(items[0].path))))")
        let subjects = items.map { item in
            let absolute = rule.absolute(item.path)
            return JobSubject.file(FileSubject(path: absolute, rootLength: absolute.count - item.path.count - 1, event: item.event.event, identity: nil))
        }
        let key = rule.key
        jobs.queue.async { [jobs] in
            for subject in subjects {
                jobs.recordNotRun(JobEngine.notRunRecord(key, runID: .random(), subject: subject, outcome: .cancelled, detail: "cancelled: \(detail)"),
                                    key: key, subject: subject, inBulk: true)
            }
        }
    }
}
