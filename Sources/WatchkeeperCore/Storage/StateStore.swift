// The one writer of the state file (watchkeeper.sqlite3), on a queue of its own: the watch
// rules' ledger (records in group commits, moves, prunes, checkpoints) and the task state and
// history. Owners submit writes and go on; a slow or full disk delays the writes, never the
// watching or jobs queue ("Nothing waits on an owner's queue"). A write that fails for a
// reason that can pass (a full disk, an I/O error, a lock held too long) is kept, in order,
// and tried again with a backoff until it is written; each commit is confirmed to the owner
// that asked, on the owner's queue. Owners read through a StateReader of their own.
//
// Here: opening, submitting and the group commit. What a failure does is in
// StateStore+Failures.swift; pruning, the stop and memory in StateStore+Maintenance.swift;
// history and the dump in StateStore+Reading.swift.

import CSQLite
import DequeModule
import Dispatch
import Logging
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

// @unchecked Sendable: its connection and waiting writes are confined to the state queue; submissions go through the Mutex mailbox.
public final class StateStore: DumpContributor, @unchecked Sendable {
    /// What the owners see of the store, from any queue: set once, at start, by `open`.
    public enum Availability: Sendable, Equatable {
        case notOpened
        /// `rebuilt`: the file was damaged and replaced (DamagedStateFile's message).
        case open(path: String, rebuilt: String?)
        case unavailable(String)
        /// Closed at the end of a clean stop.
        case closed
    }

    /// A write waiting to be committed, and whom to tell when it is.
    struct QueuedWrite {
        let write: StateWrite
        /// When it was submitted: the dump's age of the oldest.
        let submittedAt: MonotonicInstant
        let confirmation: Confirmation?
    }

    struct Confirmation {
        let queue: SubsystemQueue
        let confirmed: @Sendable () -> Void
    }

    /// Writes submitted and not yet taken onto the queue, and when to take them: the one
    /// piece of the store touched from other queues. A submission appends here under the
    /// lock and only wakes the queue when the pacing says a commit is due, so a burst's
    /// completions cost one hop per commit, not one per job (a hop each added 2.5 futex
    /// calls per job: docs/measurements/performance.md, "The state store").
    struct Mailbox {
        var writes: [QueuedWrite] = []
        var pacing = LedgerCommitPacing(interval: StateStore.commitInterval)
        /// Set once the store closed: later submissions are not kept.
        var closed = false
    }

    public let queue: SubsystemQueue
    let sources: SourceRegistry
    let logger: Logger
    private let availabilityState = Mutex(Availability.notOpened)
    let mailbox = Mutex(Mailbox())
    lazy var problems = ProblemAggregator(owner: "state", queue: queue, sources: sources, logger: logger)
    /// Scheduled by whoever's submission asks for a paced commit (DispatchSource timers may
    /// be rescheduled from any thread); fires on `queue`.
    private(set) var commitTimer: RegisteredTimer!

    // Confined to `queue`.
    var ledger: FileLedger?
    var tasks: TaskStore?
    var pending = Deque<QueuedWrite>()
    var pendingRows = 0
    /// Armed while the last attempt failed: nothing is written before it fires.
    var retryTimer: RegisteredTimer?
    var retryDelay: Duration?
    var failingSince: MonotonicInstant?
    var writeFailures: UInt64 = 0
    var lastError: (message: String, at: WallTime)?
    /// Writes dropped for good (past the bound, a write that can never succeed, the stop),
    /// by kind, in rows (a ledger batch counts its records).
    var dropped: [StateWrite.Kind: UInt64] = [:]
    /// Prunes waiting or under way, in order; the first is walked a page per turn.
    var walks: [LedgerPruneWalk] = []
    var walkScheduled = false
    /// Paces the shrink after a prune (StateStore.shrinkStep).
    var shrinkTimer: RegisteredTimer?
    /// Entries deleted per rule by the prune under way, said when it ends.
    var pruneRemoved: [String: Int] = [:]
    var prunesFinished: UInt64 = 0
    /// Set by `close`: the deadline of the last writes, then the report's receiver.
    var closing: (deadline: MonotonicInstant, then: @Sendable (CloseReport) -> Void)?

    /// In a burst, commits happen at most this often: a crash runs again the jobs that ended
    /// in the last 20 ms (besides those in flight); the per-file transactions this saves were
    /// a seventh of the daemon's CPU in a burst (docs/measurements/performance.md).
    static let commitInterval: Duration = .milliseconds(20)
    /// Rows (a handled file, a task run, ...) in one transaction: short enough that another
    /// process waiting for the lock (the sqlite3 CLI, a backup) is not refused, and that the
    /// queue answers the watchdog between two.
    static let rowsPerTransaction = FileLedger.recordsPerTransaction
    /// Rows that may wait while the disk refuses them (a full state file system for hours
    /// under a steady stream); past it, the oldest writes are dropped and counted.
    public static let defaultPendingRowLimit = 200_000
    /// The first retry after a failure, doubled after each one that fails, up to the last.
    static let firstRetryDelay: Duration = .milliseconds(100)
    static let longestRetryDelay: Duration = .seconds(5)

    let pendingRowLimit: Int

    public init(queue: SubsystemQueue, sources: SourceRegistry, logger: Logger, pendingRowLimit: Int = StateStore.defaultPendingRowLimit) {
        self.queue = queue
        self.sources = sources
        self.logger = logger
        self.pendingRowLimit = pendingRowLimit
        commitTimer = sources.makeTimer(
            owner: "state", target: "state file: commit a burst's writes together, at most every \(Self.commitInterval.compactDescription)",
            on: queue) { [weak self] in self?.commitPending() }
    }

    public var dumpSectionName: String { "state" }
    public var dumpQueue: SubsystemQueue { queue }

    public var availability: Availability { availabilityState.withLock { $0 } }

    func setAvailability(_ value: Availability) {
        availabilityState.withLock { $0 = value }
    }

    // MARK: Opening

    /// Opens (creating, migrating, and moving a damaged file aside: FileLedger.open) the
    /// state file, once, before any owner reads or writes it. On the store's queue; the
    /// owners learn the outcome from `availability` and say what it means for them.
    @discardableResult
    public func open(stateDirectory: String) -> Availability {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        let result: Availability
        do throws(SQLiteError) {
            let opened = try FileLedger.open(stateDirectory: stateDirectory)
            ledger = opened.ledger
            tasks = TaskStore(connection: opened.ledger.connection)
            if let rebuilt = opened.rebuilt {
                // Files present now are not in the new ledger: catch-up runs their jobs again
                // (at least once, never lost); said once, loudly, so it is not a surprise.
                logger.error("\(rebuilt.description); catch-up will run the jobs of the files present in the watched trees again")
            }
            result = .open(path: opened.ledger.path, rebuilt: opened.rebuilt?.description)
        } catch {
            result = .unavailable("\(error)")
        }
        setAvailability(result)
        return result
    }

    var isOpen: Bool { ledger != nil }

    // MARK: Submitting

    /// Queues `write` behind every write submitted before it (from any owner), and returns
    /// at once. `confirmed` runs on `owner` once the write is committed; never if it is
    /// dropped (past the bound, or unwritable for good), which is counted and said.
    func submit(_ write: StateWrite, confirmOn owner: SubsystemQueue? = nil, confirmed: (@Sendable () -> Void)? = nil) {
        let confirmation = owner.flatMap { owner in confirmed.map { Confirmation(queue: owner, confirmed: $0) } }
        let item = QueuedWrite(write: write, submittedAt: .now, confirmation: confirmation)
        let action = mailbox.withLock { box -> LedgerCommitPacing.Action in
            guard !box.closed else { return .none }
            box.writes.append(item)
            return box.pacing.recordAdded(now: item.submittedAt)
        }
        scheduleCommit(action)
    }

    /// Group commit, paced (LedgerCommitPacing): after a quiet spell the write runs on the
    /// queue's next turn, after every submission already waiting there; in a burst, at most
    /// once per `commitInterval`, with everything submitted meanwhile.
    private func scheduleCommit(_ action: LedgerCommitPacing.Action) {
        switch action {
        case .none:
            break
        case .writeOnNextTurn:
            queue.async { [weak self] in self?.commitPending() }
        case .writeAt(let deadline):
            commitTimer.schedule(at: deadline.dispatchTime)
        }
    }

    /// The store's own writes (a prune's deletions, its end, the checkpoint after it), behind
    /// everything submitted before them.
    func enqueue(_ item: QueuedWrite) {
        takeSubmitted(markingWritten: false)
        accept(item)
        scheduleCommit(mailbox.withLock { $0.pacing.recordAdded(now: item.submittedAt) })
    }

    /// Moves what was submitted onto the line, in order. `markingWritten`: a commit follows
    /// at once, so the pacing starts counting from now.
    func takeSubmitted(markingWritten: Bool) {
        let now = MonotonicInstant.now
        let submitted = mailbox.withLock { box -> [QueuedWrite] in
            if markingWritten { box.pacing.wrote(now: now) }
            defer { box.writes = [] }
            return box.writes
        }
        for item in submitted { accept(item) }
    }

    private func accept(_ item: QueuedWrite) {
        guard isOpen else {
            dropped[item.write.kind, default: 0] += UInt64(item.write.rows)
            return
        }
        pending.append(item)
        pendingRows += item.write.rows
        if pendingRows > pendingRowLimit { dropOldest() }
    }

    private func dropOldest() {
        var rows = 0
        var count = 0
        while pendingRows > pendingRowLimit, pending.count > 1 {
            let oldest = pending.removeFirst()
            pendingRows -= oldest.write.rows
            dropped[oldest.write.kind, default: 0] += UInt64(oldest.write.rows)
            rows += oldest.write.rows
            count += 1
        }
        guard count > 0 else { return }
        problems.report(
            "unable to keep every write waiting for the state file: past \(pendingRowLimit) rows the oldest are dropped",
            example: "\(count) write(s) of \(rows) row(s) dropped now; dropped since start: \(describeDropped())")
    }

    // MARK: Committing

    /// Writes what waits, one transaction per turn (the queue answers in between); a backlog
    /// larger than one transaction goes on at the next turn.
    func commitPending() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        // While a retry is armed the retry writes; a closing store writes in `closeStep`.
        let committing = isOpen && retryTimer == nil && closing == nil
        takeSubmitted(markingWritten: committing)
        guard committing, !pending.isEmpty else { return }
        var confirmations: [Confirmation] = []
        let outcome = commitFront(into: &confirmations)
        deliver(confirmations)
        switch outcome {
        case .committed:
            if failingSince != nil { recovered() }
            if !pending.isEmpty { queue.async { [weak self] in self?.commitPending() } }
        case .failed(let error):
            failed(error)
        }
    }

    /// Everything waiting, now, in as many transactions as it takes: for a reader that must
    /// see it (`history`). Stops at the first failure, which is then retried as usual.
    func commitAllNow() {
        takeSubmitted(markingWritten: isOpen && retryTimer == nil)
        while isOpen, !pending.isEmpty, retryTimer == nil {
            var confirmations: [Confirmation] = []
            let outcome = commitFront(into: &confirmations)
            deliver(confirmations)
            if case .failed(let error) = outcome {
                failed(error)
                return
            }
            if failingSince != nil { recovered() }
        }
    }

    enum CommitOutcome {
        case committed
        /// Nothing of the front was written; it stays, in order.
        case failed(SQLiteError)
    }

    /// One transaction of the writes at the front, up to `rowsPerTransaction` rows (at least
    /// one write). A failure that can pass leaves them all waiting. One that cannot (a time
    /// out of range, a damaged file) is found by writing them one at a time, and only the
    /// write that fails so is dropped, said and counted.
    func commitFront(into confirmations: inout [Confirmation]) -> CommitOutcome {
        switch pending.first?.write {
        case .checkpoint?, .shrink?:
            // Outside any transaction: a checkpoint, VACUUM and incremental_vacuum cannot run in one.
            let item = pending.removeFirst()
            if case .shrink = item.write { shrinkStep() } else { runCheckpoint() }
            item.confirmation.map { confirmations.append($0) }
            return .committed
        default:
            break
        }
        var count = 0
        var rows = 0
        for item in pending {
            if case .checkpoint = item.write { break }
            if case .shrink = item.write { break }
            // A prune's deletions go one write a transaction: each deletion touches random
            // pages of the indexes, and a WAL checkpoint can only follow a commit
            // (FileLedger.deletionsPerTransaction).
            if case .ledgerForget = item.write, count > 0 { break }
            if count > 0 && rows + item.write.rows > Self.rowsPerTransaction { break }
            count += 1
            rows += item.write.rows
            if case .ledgerForget = item.write { break }
        }
        do throws(SQLiteError) {
            try commit(count, into: &confirmations)
            return .committed
        } catch {
            guard !Self.mayPass(error) else { return .failed(error) }
            if count == 1 {
                dropUnwritable(error)
                return .committed
            }
        }
        for _ in 0..<count {
            do throws(SQLiteError) {
                try commit(1, into: &confirmations)
            } catch {
                guard !Self.mayPass(error) else { return .failed(error) }
                dropUnwritable(error)
            }
        }
        return .committed
    }

    /// Writes the first `count` waiting writes in one transaction and takes them off the
    /// line; their confirmations and messages follow the commit, never precede it.
    private func commit(_ count: Int, into confirmations: inout [Confirmation]) throws(SQLiteError) {
        guard let ledger else { return }
        var removed: [String: Int] = [:]
        try ledger.connection.transaction("write to") { () throws(SQLiteError) in
            for item in pending.prefix(count) {
                try apply(item.write, removed: &removed)
            }
        }
        for (rule, count) in removed { pruneRemoved[rule, default: 0] += count }
        for _ in 0..<count {
            let item = pending.removeFirst()
            pendingRows -= item.write.rows
            item.confirmation.map { confirmations.append($0) }
            if case .pruneFinished(let rule) = item.write { finishedPrune(rule) }
        }
    }

    private func apply(_ write: StateWrite, removed: inout [String: Int]) throws(SQLiteError) {
        guard let ledger, let tasks else { return }
        switch write {
        case .ledgerRecords(let records):
            try ledger.recordInTransaction(records)
        case .ledgerMove(let rule, let from, let to):
            try ledger.moveInTransaction(rule: rule, fromPrefix: from, toPrefix: to)
        case .ledgerFollow(let rule, let from, let to, let known, let now):
            try ledger.followInTransaction(rule: rule, from: from, to: to, known: known, now: now)
        case .ledgerForget(let rule, let gone):
            removed[rule, default: 0] += try ledger.forgetInTransaction(rule: rule, gone[...])
        case .pruneFinished, .checkpoint, .shrink:
            break
        case .taskScheduled(let task, let at):
            do throws(SQLiteError) {
                try tasks.recordScheduled(task: task, scheduledAt: at)
            } catch {
                throw SQLiteError(path: error.path, code: error.code, description: error.description)
            }
        case .taskRun(let run):
            do throws(SQLiteError) {
                try tasks.recordRunInTransaction(run)
            } catch {
                throw SQLiteError(path: error.path, code: error.code, description: error.description)
            }
        }
    }

    /// One block per owner queue for all its confirmations of a turn, in commit order.
    func deliver(_ confirmations: [Confirmation]) {
        var owners: [(queue: SubsystemQueue, calls: [@Sendable () -> Void])] = []
        for confirmation in confirmations {
            if let index = owners.firstIndex(where: { $0.queue === confirmation.queue }) {
                owners[index].calls.append(confirmation.confirmed)
            } else {
                owners.append((confirmation.queue, [confirmation.confirmed]))
            }
        }
        for (owner, calls) in owners {
            owner.async {
                for call in calls { call() }
            }
        }
    }
}
