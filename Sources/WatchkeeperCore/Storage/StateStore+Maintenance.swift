import CWatchkeeperSystem
import Dispatch

#if canImport(Glibc)
import Glibc
#endif

/// The store's upkeep, on its queue: pruning the ledger of files that are gone (the lstat
/// walk runs here, a page per turn, off the watching queue), checkpoints, memory after a
/// burst, and the clean stop.
extension StateStore {
    // MARK: Pruning

    /// Deletes the rule's ledger entries whose file is gone under `root` (LedgerPruneWalk).
    /// The watcher asks, hourly, at start-up and after many deletions; the walk goes a page of
    /// entries per turn of this queue, and its deletions are writes like any other: in order
    /// behind what was submitted before them, retried if they fail. Once every walk asked for
    /// has ended, the WAL is checkpointed. A rule already waiting for its walk is not walked
    /// twice.
    func prune(rule: String, root: [UInt8]) {
        queue.async { [self] in
            guard isOpen, closing == nil else { return }
            if let index = walks.firstIndex(where: { $0.rule == rule }) {
                if walks[index].examined == 0 { walks[index] = LedgerPruneWalk(rule: rule, root: root) }
                return
            }
            walks.append(LedgerPruneWalk(rule: rule, root: root))
            scheduleWalk()
        }
    }

    private func scheduleWalk() {
        guard !walkScheduled, !walks.isEmpty else { return }
        walkScheduled = true
        queue.async { [weak self] in self?.walkStep() }
    }

    private func walkStep() {
        walkScheduled = false
        guard isOpen, closing == nil, var walk = walks.first, let ledger else { return }
        // Looked at every page: a root unmounted halfway removes nothing more.
        if walk.rootUnavailable() != nil {
            walks.removeFirst()
            walkEnded(walk)
            scheduleWalk()
            return
        }
        let gone: [LedgerPruneWalk.Gone]
        do throws(SQLiteError) {
            gone = try walk.step(ledger, limit: FileLedger.pruneEntriesPerStep)
        } catch {
            problems.report("unable to prune the file ledger", example: "\(error)")
            walks.removeFirst()
            walkEnded(walk)
            scheduleWalk()
            return
        }
        let now = MonotonicInstant.now
        var start = 0
        while start < gone.count {
            let end = min(gone.count, start + FileLedger.deletionsPerTransaction)
            enqueue(QueuedWrite(write: .ledgerForget(rule: walk.rule, Array(gone[start..<end])), submittedAt: now, confirmation: nil))
            start = end
        }
        if walk.finished {
            walks.removeFirst()
            walkEnded(walk)
        } else {
            walks[0] = walk
        }
        scheduleWalk()
    }

    private func walkEnded(_ walk: LedgerPruneWalk) {
        let now = MonotonicInstant.now
        enqueue(QueuedWrite(write: .pruneFinished(rule: walk.rule), submittedAt: now, confirmation: nil))
        if walks.isEmpty { enqueue(QueuedWrite(write: .shrink, submittedAt: now, confirmation: nil)) }
    }

    /// Pages given back per turn by `incremental_vacuum`: each moves a page and rewrites a
    /// pointer page, 2 MiB of WAL at most, checkpointed as a prune's deletions are.
    static let shrinkPagesPerStep = 256
    /// Between two steps: a step and the checkpoint its megabyte brings took 15 + 100 ms on a
    /// 400 MB file, and back to back they held `history` 0.25 s behind them (16 callers).
    static let shrinkPause: Duration = .milliseconds(100)

    /// After a prune, once its deletions are in: the pages it freed go back to the file system,
    /// so a ledger that forgot 1,000,000 entries does not keep its 172 MB for good. In a file
    /// made with incremental vacuum (schema 7 on), `incremental_vacuum` a chunk per turn
    /// behind whatever else waits, while a tenth of the file (and at least 1 MiB) is free. A
    /// file made before frees nothing that way: once at least half of it is free, one VACUUM
    /// rewrites what is left (costing the live part, not the file) and turns incremental
    /// vacuum on for good. Then the checkpoint.
    func shrinkStep() {
        guard let ledger else { return }
        // A stop does not wait for it: the next prune gives back what is left.
        guard closing == nil else { return runCheckpoint() }
        do throws(SQLiteError) {
            let space = try ledger.connection.freeSpace()
            if space.freePages >= max(Int64(Self.shrinkPagesPerStep), space.pages / 10) {
                if space.incremental {
                    try ledger.connection.executeOnce("PRAGMA incremental_vacuum(\(Self.shrinkPagesPerStep))", action: "shrink")
                    scheduleShrinkStep()
                    return
                }
                if space.freePages * 2 >= space.pages {
                    try ledger.connection.executeOnce("PRAGMA auto_vacuum = INCREMENTAL; VACUUM", action: "shrink")
                    let after = try ledger.connection.freeSpace()
                    logger.notice("the state file was rewritten once to give back \((space.pages - after.pages) * space.pageSize >> 20) MiB that pruned ledger entries left free; from now on the pages a prune frees are given back as it goes")
                }
            }
        } catch {
            problems.report("unable to give the state file's free pages back", example: "\(error)")
        }
        runCheckpoint()
    }

    /// The next shrink step, after a pause in which what waits (records, `history`) goes first.
    private func scheduleShrinkStep() {
        if shrinkTimer == nil {
            shrinkTimer = sources.makeTimer(owner: "state", target: "give a prune's free pages back, \(Self.shrinkPagesPerStep) at a time",
                                            on: queue) { [weak self] in
                guard let self, self.isOpen, self.closing == nil else { return }
                self.enqueue(QueuedWrite(write: .shrink, submittedAt: .now, confirmation: nil))
            }
        }
        shrinkTimer?.schedule(after: Self.shrinkPause)
    }

    /// A rule's prune deletions are all in.
    func finishedPrune(_ rule: String) {
        prunesFinished += 1
        let removed = pruneRemoved.removeValue(forKey: rule) ?? 0
        if removed > 0 { logger.info("watch \(rule): the file ledger forgot \(removed) file(s) that no longer exist") }
    }

    /// Everything committed so far into the file, the WAL truncated. Not retried: the next
    /// prune, or the stop, checkpoints again, and SQLite checkpoints on its own every
    /// `wal_autocheckpoint` pages meanwhile.
    func runCheckpoint() {
        guard let ledger else { return }
        do throws(SQLiteError) {
            _ = try ledger.checkpoint()
        } catch {
            problems.report("unable to checkpoint the state file", example: "\(error)")
        }
    }

    // MARK: Memory

    /// After a burst (the engine says when): what is still waiting is written, the page
    /// cache given back, then malloc's free memory; after the owners gave back theirs, since
    /// this runs after whatever they queued before asking.
    func releaseMemory() {
        queue.async { [self] in
            commitAllNow()
            ledger?.connection.releaseMemory()
            _ = malloc_trim(0)
        }
    }

    // MARK: Stopping

    public struct CloseReport: Sendable, Equatable {
        /// Rows that could not be written before the deadline (0 when everything went in).
        public let rowsDropped: Int
    }

    /// The store's part of a clean stop, once every owner has submitted its last writes:
    /// they are written, retrying what fails until `budget` has passed, then the WAL is
    /// folded into the file and the connection closed. What could not be written is said,
    /// by kind and consequence, and counted in the report; `then` runs on this queue.
    public func close(within budget: Duration, then: @escaping @Sendable (CloseReport) -> Void) {
        queue.async { [self] in
            guard isOpen, closing == nil else {
                then(CloseReport(rowsDropped: 0))
                return
            }
            walks = []
            shrinkTimer?.cancel()
            commitTimer.cancel()
            retryTimer?.cancel()
            retryTimer = nil
            closing = (.now + budget, then)
            closeStep()
        }
    }

    /// Writes until nothing waits; a failure before the deadline is retried (`failed` arms
    /// the retry no later than the deadline), one at it ends the writing.
    func closeStep() {
        guard let deadline = closing?.deadline else { return }
        takeSubmitted(markingWritten: true)
        while isOpen, !pending.isEmpty {
            var confirmations: [Confirmation] = []
            let outcome = commitFront(into: &confirmations)
            deliver(confirmations)
            if case .failed(let error) = outcome {
                if MonotonicInstant.now < deadline {
                    failed(error)
                    return
                }
                lastError = (error.description, .now())
                break
            }
        }
        if pending.isEmpty && failingSince != nil { recovered() }
        finishClose()
    }

    private func finishClose() {
        guard let then = closing?.then else { return }
        mailbox.withLock { $0.closed = true }
        takeSubmitted(markingWritten: false)
        var lost: [StateWrite.Kind: UInt64] = [:]
        for item in pending { lost[item.write.kind, default: 0] += UInt64(item.write.rows) }
        let rowsDropped = pendingRows
        if !pending.isEmpty {
            let what = StateWrite.Kind.allCases.compactMap { kind in lost[kind].map { "\($0) \(kind.consequence)" } }.joined(separator: ", ")
            logger.warning("unable to write \(pending.count) write(s) to the state file before stopping (the last error: \(lastError?.message ?? "none")); dropped: \(what)")
            for (kind, rows) in lost { dropped[kind, default: 0] += rows }
        }
        pending = []
        pendingRows = 0
        retryTimer?.cancel()
        retryTimer = nil
        if let ledger {
            do throws(SQLiteError) {
                _ = try ledger.checkpoint()
            } catch {
                logger.warning("unable to checkpoint the state file at stop: \(error)")
            }
            ledger.close()
        }
        ledger = nil
        tasks = nil
        setAvailability(.closed)
        closing = nil
        then(CloseReport(rowsDropped: rowsDropped))
    }
}

extension SQLiteConnection {
    /// The file's pages, those free (left by deletions), the page size, and whether freed
    /// pages can be given back a chunk at a time (auto_vacuum = INCREMENTAL).
    func freeSpace() throws(SQLiteError) -> (pages: Int64, freePages: Int64, pageSize: Int64, incremental: Bool) {
        var pages: Int64 = 0, free: Int64 = 0, size: Int64 = 0, mode: Int64 = 0
        try execute("PRAGMA page_count", action: "measure") { row in pages = row.integer(0) ?? 0 }
        try execute("PRAGMA freelist_count", action: "measure") { row in free = row.integer(0) ?? 0 }
        try execute("PRAGMA page_size", action: "measure") { row in size = row.integer(0) ?? 0 }
        try execute("PRAGMA auto_vacuum", action: "measure") { row in mode = row.integer(0) ?? 0 }
        return (pages, free, size, mode == 2)
    }
}
