import CWatchkeeperSystem
import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// From a file event to a job and back: the settle window, admission (a regular file, not
/// handled before in this form), submission to the engine, and the ledger on completion.
extension DirectoryWatcher {
    /// Files found by a scan may still be open for writing (a scan cannot tell): they wait
    /// this long, and a close event for the same path meanwhile joins the same job.
    static let scanSettle: Duration = .seconds(1)

    func enqueue(_ rule: WatchRule, relative: [UInt8], event: WatchEvent, fromScan: Bool = false) {
        guard accepting else { return }
        let window = settleWindow(rule, fromScan: fromScan)
        let now = DispatchTime.now().uptimeNanoseconds
        if window == .zero && rule.settle.item(for: relative) == nil {
            if let subject = admit(rule, relative: relative, event: event, fromScan: false, eventAt: now) { submit([.file(subject)], rule: rule) }
            return
        }
        let deadline = now + UInt64(window.nanosecondsClamped)
        rule.settle.add(path: relative, event: event, deadline: deadline, fromScan: fromScan)
        armSettleTimer(rule)
    }

    private func settleWindow(_ rule: WatchRule, fromScan: Bool) -> Duration {
        fromScan ? max(rule.settings.settle, Self.scanSettle) : rule.settings.settle
    }

    private func armSettleTimer(_ rule: WatchRule) {
        guard let next = rule.settle.nextDeadline else { return }
        if rule.settleTimer == nil {
            rule.settleTimer = context.sources.makeTimer(owner: "watch \(rule.name)", target: "settle \(rule.settings.settle.compactDescription)",
                                                         on: queue) { [unowned self] in
                self.settleDue(rule)
            }
        }
        rule.settleTimer?.schedule(at: DispatchTime(uptimeNanoseconds: next))
    }

    /// Starts every path whose window has ended, and re-arms for the next one.
    private func settleDue(_ rule: WatchRule) {
        // A batch also takes the files whose windows end a moment later (files written
        // together settle microseconds apart), up to a quarter of the window or 250 ms.
        let lookahead = rule.settings.batch ? UInt64(min(rule.settings.settle / 4, .milliseconds(250)).nanosecondsClamped) : 0
        let due = rule.settle.takeDue(now: DispatchTime.now().uptimeNanoseconds, lookahead: lookahead)
        // A window ends its length after the last event (or the scan that found the file).
        let admitted = due.compactMap { item in
            admit(rule, relative: item.path, event: item.event, fromScan: item.fromScan,
                  eventAt: item.deadline &- UInt64(settleWindow(rule, fromScan: item.fromScan).nanosecondsClamped))
        }
        if let input = rule.settings.batchInput {
            submit(WatchRule.batches(admitted, input: input, budget: batchBudget(input)), rule: rule)
        } else {
            submit(admitted.map { .file($0) }, rule: rule)
        }
        armSettleTimer(rule)
    }

    /// Whether a file is to be handled now: it still exists (unless the event says it went),
    /// is a regular file (a FIFO would block the job, a planted link would lead a root job
    /// elsewhere), and was not handled before in this exact form, at this path or another
    /// one it was moved from.
    func admit(_ rule: WatchRule, relative: [UInt8], event: WatchEvent, fromScan: Bool, eventAt: UInt64) -> FileSubject? {
        let absolute = rule.absolute(relative)
        let rootLength = absolute.count - relative.count - (relative.isEmpty ? 0 : 1)
        guard event != .deleted && event != .movedOut else {
            return FileSubject(path: absolute, rootLength: rootLength, event: event, identity: nil, eventAt: eventAt)
        }
        var info = stat()
        let found = TreeScanner.withCString(absolute) { rule.settings.followSymlinks ? stat($0, &info) : lstat($0, &info) } == 0
        guard found else { return nil } // gone already
        let type = TreeScanner.EntryType(mode: info.st_mode)
        guard type == .regular else {
            rule.skipped[type] += 1
            return nil
        }
        let identity = FileIdentity(info)
        if let seenAt = rule.handled[identity] {
            rule.duplicates += 1
            if seenAt != relative { rule.handled[identity] = relative }
            return nil
        }
        if handledBefore(rule, relative: relative, identity: identity, mayHaveMoved: event == .movedIn || fromScan) {
            rule.duplicates += 1
            return nil
        }
        rule.remember(identity, at: relative)
        return FileSubject(path: absolute, rootLength: rootLength, event: event, identity: identity, eventAt: eventAt)
    }

    /// Handled successfully in this exact form in an earlier life of the daemon (this life's
    /// are in `rule.handled`): at this path, or, for a file that may have been moved (found
    /// by a scan, or moved in), at another path it was moved from; then the ledger follows.
    /// A file just written needs one lookup by path, not two.
    private func handledBefore(_ rule: WatchRule, relative: [UInt8], identity: FileIdentity, mayHaveMoved: Bool) -> Bool {
        guard rule.settings.catchUp, let ledger else { return false }
        do {
            if let entry = try ledger.entry(rule: rule.name, path: relative), entry.identity == identity {
                return entry.outcome == RunOutcome.ok.rawValue
            }
            guard mayHaveMoved else { return false }
            flushLedger()
            guard let moved = try ledger.entries(rule: rule.name, identity: identity).first(where: { $0.outcome == RunOutcome.ok.rawValue }) else {
                return false
            }
            rule.movesFollowed += 1
            try ledger.move(rule: rule.name, fromPrefix: moved.path, toPrefix: relative)
            return true
        } catch {
            problems.report("unable to read the file ledger", example: "\(error)")
            return false
        }
    }

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

    /// Hands jobs to the engine, on its queue; each comes back here once, with its records.
    func submit(_ subjects: [JobSubject], rule: WatchRule) {
        guard !subjects.isEmpty else { return }
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
        guard outcome != .cancelled, rule.settings.catchUp, ledger != nil else { return }
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
        for file in completion.subject.files {
            guard let identity = file.identity else { continue }
            ledgerPending.append(LedgerRecord(rule: rule.name, path: Array(file.relative), identity: identity, outcome: outcome.rawValue,
                                              handledAt: now, run: run))
        }
        scheduleLedgerFlush()
    }

    /// Group commit, paced (LedgerCommitPacing): after a quiet spell the write runs on the
    /// queue's next turn, after every completion already waiting there; in a burst, at most
    /// once per `ledgerCommitInterval`, with everything that ended meanwhile.
    private func scheduleLedgerFlush() {
        switch ledgerPacing.recordAdded(now: DispatchTime.now().uptimeNanoseconds) {
        case .none:
            break
        case .writeOnNextTurn:
            queue.async { [weak self] in self?.flushLedger() }
        case .writeAt(let deadline):
            if ledgerCommitTimer == nil {
                ledgerCommitTimer = context.sources.makeTimer(
                    owner: "watching", target: "file ledger: write a burst's records together, at most every \(Self.ledgerCommitInterval.compactDescription)",
                    on: queue) { [weak self] in self?.flushLedger() }
            }
            ledgerCommitTimer?.schedule(at: DispatchTime(uptimeNanoseconds: deadline))
        }
    }

    /// `watchkeeper history WATCH`: the files the rule handled last, from the ledger (after
    /// writing what is still pending, so a job that just ended is there).
    public func history(rule: String, limit: Int) -> Result<[DumpValue], VarlinkError> {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        flushLedger()
        guard let ledger else {
            return .failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("the file ledger is not open: \(ledgerProblem ?? "unknown")"))]))
        }
        do {
            return .success(try ledger.recent(rule: rule, limit: limit).map { entry, run in
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
            })
        } catch {
            return .failure(ControlInterface.ErrorName.unavailable.error([.init("reason", .string("\(error)"))]))
        }
    }

    /// After a burst (the engine says when): what is still waiting goes into the ledger, the
    /// ledger's page cache is given back, then malloc's free memory.
    public func releaseMemoryAfterBurst() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        flushLedger()
        ledger?.releaseMemory()
        _ = malloc_trim(0)
    }

    func flushLedger() {
        guard !ledgerPending.isEmpty, let ledger else { return }
        let records = ledgerPending
        ledgerPending = []
        ledgerPacing.wrote(now: DispatchTime.now().uptimeNanoseconds)
        do {
            try ledger.record(records)
        } catch {
            problems.report("unable to record handled files in the file ledger", example: "\(records.count) file(s): \(error)")
            return
        }
        // A file the ledger now holds as handled is found there: this life's memory of it can
        // go, so a burst's 100,000 files are not kept in memory until the daemon stops.
        // Failed ones stay, so a rescan in this life does not run them again.
        for record in records where record.outcome == RunOutcome.ok.rawValue {
            guard let rule = rules[record.rule], rule.handled[record.identity] == record.path else { continue }
            rule.handled[record.identity] = nil
            // Emptied, it also gives back the capacity the burst grew it to.
            if rule.handled.isEmpty { rule.handled = [:] }
        }
    }

    /// Files that waited in a settle window and will not become jobs end with a record.
    func cancelSettling(_ rule: WatchRule, detail: String) {
        let items = rule.settle.removeAll()
        guard !items.isEmpty else { return }
        logger.notice("watch \(rule.name): \(items.count) file(s) waiting to settle are not started: \(detail)")
        let subjects = items.map { item in
            let absolute = rule.absolute(item.path)
            return JobSubject.file(FileSubject(path: absolute, rootLength: absolute.count - item.path.count - 1, event: item.event, identity: nil))
        }
        let key = rule.key
        engine.queue.async { [engine] in
            for subject in subjects {
                engine.recordNotRun(JobEngine.notRunRecord(key, runID: .random(), subject: subject, outcome: .cancelled, detail: "cancelled: \(detail)"),
                                    key: key, subject: subject)
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
    }

    /// The last step of a clean stop, once every job has its record: the ledger's last
    /// records are written and its write-ahead log folded into the file.
    func close() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        flushLedger()
        ledgerCommitTimer?.cancel()
        ledgerCommitTimer = nil
        guard let ledger else { return }
        do {
            _ = try ledger.checkpoint()
        } catch {
            logger.warning("unable to checkpoint the file ledger at stop: \(error)")
        }
        ledger.close()
        self.ledger = nil
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

    func pruneLedger() {
        guard let ledger else { return }
        flushLedger()
        for name in order {
            guard let rule = rules[name], rule.settings.catchUp, let root = rule.root else { continue }
            do {
                if case .pruned(let removed, _) = try ledger.prune(rule: name, missingUnder: root), removed > 0 {
                    logger.info("watch \(name): the file ledger forgot \(removed) file(s) that no longer exist")
                }
            } catch {
                problems.report("unable to prune the file ledger", example: "\(error)")
            }
        }
        do {
            _ = try ledger.checkpoint()
        } catch {
            problems.report("unable to checkpoint the file ledger", example: "\(error)")
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
            return rule.describe(now: now, watchedDirectories: table.locations(ofOwner: .rule(rule.name)).count, ledgerSize: size)
        }
        return .object([
            .init("inotify", inotify?.describe() ?? .string(inotifyProblem ?? "not needed")),
            .init("watches_in_use", .int(Int64(table.descriptorCount))),
            .init("watch_table", table.describe { $0.description }),
            .init("max_user_watches", Self.sysctl("max_user_watches").flatMap { Int64($0) }.map { .int($0) } ?? .null),
            .init("overflows", .int(Int64(overflowsTotal))),
            .init("unattributed_events", .int(Int64(unattributedEvents))),
            .init("mounts", mounts?.describe() ?? .string(mountsProblem ?? "not needed")),
            .init("ledger", ledger.map { .string($0.path) } ?? .null),
            .init("ledger_problem", ledgerProblem.map { .string($0) } ?? .null),
            .init("ledger_rebuilt", ledgerNote.map { .string($0) } ?? .null),
            .init("ledger_commits", ledger.map { .int(Int64($0.commits)) } ?? .null),
            .init("problems", problems.describe()),
            .init("rules", .array(entries)),
        ])
    }
}
