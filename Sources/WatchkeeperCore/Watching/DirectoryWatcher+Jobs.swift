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
        if rule.settings.fleet == .one, cluster != nil, fleetFinished(completion, rule: rule) { return }
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
                track(rule, .init(path: follower.path, from: Array(file.relative), known: identity, seen: follower.identity,
                                  due: clock.now + TrackedChanges.confirmAfter))
            } else if rules[rule.name] === rule {
                enqueue(rule, relative: follower.path, event: follower.event)
            }
        }
    }

    /// `watchkeeper history WATCH`: the files the rule handled last, from the ledger.
    public func history(rule: String, limit: Int, reply: @escaping @Sendable (Result<[DumpValue], VarlinkError>) -> Void) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        ledger.history(rule: rule, limit: limit, reply: reply)
    }

    /// After a burst (the engine says when): the reader's page cache is given back; the
    /// store then writes what waits, gives back its own, and malloc's free memory.
    public func releaseMemoryAfterBurst() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        ledger.releaseMemory()
    }

    /// The store committed these records: the reader finds them now.
    private func ledgerCommitted(_ records: [LedgerRecord]) {
        // A file the ledger now holds as handled is found there: this life's memory of it can
        // go, so a burst's 100,000 files are not kept in memory until the daemon stops.
        for record in records where record.outcome == RunOutcome.ok.rawValue {
            guard let rule = rules[record.rule], let known = rule.memory.handled[record.identity.inodeKey], known.path == record.path,
                  known.current == record.identity else { continue }
            rule.memory.handled[record.identity.inodeKey] = nil
            // Emptied, it also gives back the capacity the burst grew it to.
            if rule.memory.handled.isEmpty { rule.memory.handled = [:] }
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
        jobs.queue.async { [jobs] in
            for subject in subjects {
                jobs.recordNotRun(JobEngine.notRunRecord(key, runID: .random(), subject: subject, outcome: .cancelled, detail: "cancelled: \(detail)"),
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
            rule.listingTimer?.cancel()
            rule.listingTimer = nil
            stopPolling(rule)
        }
        recheckTimer?.cancel()
        recheckTimer = nil
        pollMonitor?.cancel()
        pollMonitor = nil
        ledger.stop()
    }

    /// A clean stop, once every job has its record: every record was submitted to the store
    /// when its job ended; the reader goes, so that the store, closing last, folds the
    /// write-ahead log into the file (Daemon.finishStopping).
    func close() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        confirmChangesAtStop()
        ledger.close()
    }

    // MARK: Dump

    public func describeForDump() -> DumpValue {
        let now = clock.now
        let entries: [DumpValue] = order.compactMap { rules[$0] }.map { rule in
            rule.describe(now: now, watchedDirectories: treeBackend(of: rule)?.watchedCount(of: .rule(rule.name)) ?? 0, ledgerSize: ledger.size(of: rule))
        }
        return .object(backends.describe() + [
            .init("overflows", .int(Int64(overflowsTotal))),
            .init("mounts", mounts?.describe() ?? .string(mountsProblem ?? "not needed")),
        ] + ledger.describe() + [
            .init("problems", problems.describe()),
            .init("rules", .array(entries)),
        ])
    }
}
