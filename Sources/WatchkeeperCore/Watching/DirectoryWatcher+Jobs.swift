import CWatchkeeperSystem
import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// From an admitted file to a job and back: submission to the engine (in the rule's shape),
/// the completion (followers of renamed files, this life's memory, the ledger's record),
/// the drain, pruning and the dump.
extension DirectoryWatcher {
    /// The bytes one batch's paths may take: for `{paths}`, half of ARG_MAX, leaving the
    /// rest for the environment and the other arguments; on stdin, what one pipe holds
    /// (they are written before the job starts). WATCHKEEPER_TEST_BATCH_BYTES lowers it for tests.
    private func batchBudget(_ input: WatchSettings.BatchInput) -> Int {
        if let text = context.daemonEnvironment["WATCHKEEPER_TEST_BATCH_BYTES"], let value = Int(text) { return value }
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
        guard rules[rule.name] === rule else { return } // retired meanwhile: the new rule catches up
        let shape = rule.settings.batchInput.map { "batches (\($0.rawValue))" } ?? "one job per file"
        logger.notice("watch \(rule.name): \(files.count) waiting file(s) are submitted again as \(shape), as the reload changed its batching")
        submit(subjects(files, rule: rule), rule: rule, countedInFlight: true)
    }

    func submit(_ subjects: [JobSubject], rule: WatchRule, countedInFlight: Bool = false) {
        guard !subjects.isEmpty else { return }
        if !countedInFlight {
            for subject in subjects {
                for file in subject.files { rule.submitted(file) }
            }
        }
        rule.jobsSubmitted += UInt64(subjects.count)
        if rule.settings.batch { rule.batchesStarted += UInt64(subjects.count) }
        let key = rule.key
        let queue = self.queue
        engine.queue.async { [engine] in
            for subject in subjects {
                engine.submit(key, subject: subject, replyOn: queue) { [weak self] completion in
                    self?.finished(completion, rule: rule)
                }
            }
        }
    }

    /// The final outcome of a file's job goes to the ledger (cancelled ones are left for the
    /// next catch-up); the record itself is the engine's.
    private func finished(_ completion: JobCompletion, rule: WatchRule) {
        let outcome = completion.final.outcome
        var followers: [InFlightFile.Follower] = []
        for file in completion.subject.files {
            followers += rule.returned(file)
            if outcome == .ok, let identity = file.identity { rule.remember(identity, at: Array(file.relative)) }
        }
        // Names a file was renamed to while its job waited or ran: if the job succeeded it
        // read that file (a rename keeps the content); if not, the file is handled there now.
        for follower in followers {
            if outcome == .ok && completion.subject.files.contains(where: { $0.identity.map { $0.sameFile(as: follower.identity) } ?? false }) {
                rule.duplicates += 1
            } else if rules[rule.name] === rule {
                enqueue(rule, relative: follower.path, event: follower.event)
            }
        }
        guard outcome != .cancelled, rule.settings.catchUp, ledger != nil, let store else { return }
        let now = WallTime.now()
        let final = completion.final
        var exitCode: Int32?
        var signal: Int32?
        switch final.exit {
        case .exited(let code)?: exitCode = code
        case .signaled(let number, _)?: signal = number
        case nil: break
        }
        let run = LedgerRun(runID: final.runID, startedAt: final.startedAt, durationNanoseconds: final.duration.nanosecondsClamped,
                            exitCode: exitCode, signal: signal)
        var records: [LedgerRecord] = []
        for file in completion.subject.files {
            guard let identity = file.identity else { continue }
            records.append(LedgerRecord(rule: rule.name, path: Array(file.relative), identity: identity, outcome: outcome.rawValue,
                                        handledAt: now, run: run))
        }
        guard !records.isEmpty else { return }
        let committed = records
        // The store commits it with the others that ended meanwhile (group commit) and says
        // so here; until then `rule.handled` is what knows the file was handled.
        store.submit(.ledgerRecords(committed), confirmOn: queue) { [weak self] in self?.ledgerCommitted(committed) }
    }

    /// `watchkeeper history WATCH`: the files the rule handled last, from the ledger. Asked
    /// of the store from this queue, after every completion handled here: their records
    /// were submitted before the question, so a job that just ended is in the answer.
    public func history(rule: String, limit: Int, reply: @escaping @Sendable (Result<[DumpValue], VarlinkError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard ledger != nil, let store else {
            return reply(.failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("the file ledger is not open: \(ledgerProblem ?? "unknown")"))])))
        }
        store.ledgerHistory(rule: rule, limit: limit) { result in
            switch result {
            case .failure(let error):
                reply(.failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("\(error)"))])))
            case .success(let rows):
                reply(.success(rows.map { entry, run in Self.historyRow(entry, run) }))
            }
        }
    }

    private static func historyRow(_ entry: LedgerEntry, _ run: LedgerRun?) -> DumpValue {
        .object([
            .init("run_id", run.map { .string($0.runID) } ?? .null),
            .init("outcome", .string(entry.outcome)),
            .init("started_at", run?.startedAt.map { .string($0.iso8601) } ?? .null),
            .init("finished_at", .string(entry.handledAt.iso8601)),
            .init("duration_s", run.map { .double(Double($0.durationNanoseconds) / 1e9) } ?? .null),
            .init("exit_code", run?.exitCode.map { .int(Int64($0)) } ?? .null),
            .init("signal", run?.signal.map { .string(HandledSignals.name($0)) } ?? .null),
            .init("path", .bytes(entry.path)),
        ])
    }

    /// After a burst (the engine says when): the reader's page cache is given back; the
    /// store then writes what waits, gives back its own, and malloc's free memory.
    public func releaseMemoryAfterBurst() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        ledger?.releaseMemory()
        if let store { store.releaseMemory() } else { _ = malloc_trim(0) }
    }

    /// The store committed these records: the reader finds them now.
    private func ledgerCommitted(_ records: [LedgerRecord]) {
        // A file the ledger now holds as handled is found there: this life's memory of it can
        // go, so a burst's 100,000 files are not kept in memory until the daemon stops.
        for record in records where record.outcome == RunOutcome.ok.rawValue {
            guard let rule = rules[record.rule], let known = rule.handled[record.identity.inodeKey], known.path == record.path,
                  known.identity == record.identity else { continue }
            rule.handled[record.identity.inodeKey] = nil
            // Emptied, it also gives back the capacity the burst grew it to.
            if rule.handled.isEmpty { rule.handled = [:] }
        }
    }

    /// Files that waited in a settle window and will not become jobs end with a record.
    func cancelSettling(_ rule: WatchRule, detail: String) {
        let items = rule.settle.removeAll()
        guard !items.isEmpty else { return }
        logger.notice("watch \(rule.name): \(items.count) file(s) waiting to settle are not started: \(detail) (the first: \(LineEscaping.escaped(rule.absolute(items[0].path))))")
        let subjects = items.map { item in
            let absolute = rule.absolute(item.path)
            return JobSubject.file(FileSubject(path: absolute, rootLength: absolute.count - item.path.count - 1, event: item.event.event, identity: nil))
        }
        let key = rule.key
        engine.queue.async { [engine] in
            for subject in subjects {
                engine.recordNotRun(JobEngine.notRunRecord(key, runID: .random(), subject: subject, outcome: .cancelled, detail: "cancelled: \(detail)"),
                                    key: key, subject: subject, inBulk: true)
            }
        }
    }

    /// The drain: no new jobs from file events; files still settling end with a record.
    func stop() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        accepting = false
        for name in order {
            guard let rule = rules[name] else { continue }
            rule.settleTimer?.cancel()
            rule.settleTimer = nil
            cancelSettling(rule, detail: "the daemon is stopping")
            rule.fallbackTimer?.cancel()
            rule.fallbackTimer = nil
        }
        recheckTimer?.cancel()
        recheckTimer = nil
        pruneTimer?.cancel()
        pruneTimer = nil
        pruneSoonTimer?.cancel()
        pruneSoonTimer = nil
    }

    /// A clean stop, once every job has its record: every record was submitted to the store
    /// when its job ended; the reader goes, so that the store, closing last, folds the
    /// write-ahead log into the file (Daemon.finishStopping).
    func close() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        ledger?.close()
        ledger = nil
    }

    // MARK: Pruning

    /// Once an hour, the ledger forgets files that no longer exist, so the state directory
    /// does not grow with every file ever handled (docs/configuration.md, catch_up).
    func armPruneIfNeeded() {
        guard pruneTimer == nil, ledger != nil, accepting else { return }
        let timer = context.sources.makeTimer(owner: "watching", target: "file ledger: forget files that are gone, every \(Self.pruneInterval.compactDescription)",
                                              on: queue) { [unowned self] in
            self.pruneLedger()
        }
        timer.schedule(at: .now() + Self.pruneInterval.dispatchInterval, repeating: Self.pruneInterval)
        pruneTimer = timer
    }

    /// Files deleted or moved away beyond which the ledger is pruned soon, not at the next hour.
    static let pruneAfterDeletions = 10_000
    static let pruneDelayAfterDeletions: Duration = .seconds(10)

    /// A file or directory left a tree: after many, a prune is scheduled (once), so a tree
    /// emptied by a cleanup does not leave its rows for an hour; the rows of deleted files are
    /// what an inode reused with a preserved mtime used to match.
    func noteDeletion() {
        deletionsSincePrune += 1
        guard deletionsSincePrune >= Self.pruneAfterDeletions, ledger != nil, accepting, pruneSoonTimer == nil else { return }
        let timer = context.sources.makeTimer(owner: "watching", target: "file ledger: forget files that are gone, after \(Self.pruneAfterDeletions) deletions",
                                              on: queue) { [weak self] in
            guard let self else { return }
            self.pruneSoonTimer?.cancel()
            self.pruneSoonTimer = nil
            self.pruneLedger()
        }
        timer.schedule(after: Self.pruneDelayAfterDeletions)
        pruneSoonTimer = timer
    }

    /// The store walks each rule's entries (one lstat each) on its own queue, deletes those
    /// whose file is gone behind the writes submitted before, says how many, and checkpoints.
    func pruneLedger() {
        deletionsSincePrune = 0
        guard ledger != nil, let store else { return }
        for name in order {
            guard let rule = rules[name], rule.settings.catchUp, let root = rule.root else { continue }
            store.prune(rule: name, root: root)
        }
    }

    // MARK: Dump

    public func describeForDump() -> DumpValue {
        let now = DispatchTime.now().uptimeNanoseconds
        let entries: [DumpValue] = order.compactMap { rules[$0] }.map { rule in
            var size = DumpValue.null
            if rule.settings.catchUp, let ledger {
                do {
                    size = .int(Int64(try ledger.count(rule: rule.name)))
                } catch {
                    size = .string("unavailable: \(error)")
                }
            }
            return rule.describe(now: now, watchedDirectories: backend?.watchedCount(of: .rule(rule.name)) ?? 0, ledgerSize: size)
        }
        let backendFields = backend?.describe() ?? [.init("inotify", .string(backendProblem ?? "not needed"))]
        return .object(backendFields + [
            .init("overflows", .int(Int64(overflowsTotal))),
            .init("mounts", mounts?.describe() ?? .string(mountsProblem ?? "not needed")),
            .init("ledger", ledger.map { .string($0.path) } ?? .null),
            .init("ledger_problem", ledgerProblem.map { .string($0) } ?? .null),
            .init("ledger_rebuilt", ledgerNote.map { .string($0) } ?? .null),
            .init("problems", problems.describe()),
            .init("rules", .array(entries)),
        ])
    }
}
