// What the owners of the state file's tables ask the StateStore to write. Each is applied
// in the order submitted, inside the store's group commit, with the same statements the
// table's type runs on its own (FileLedger, TaskStore).

/// One write to the state file.
enum StateWrite: Sendable {
    /// Files handled by a watch rule, with the outcome of their job (FileLedger.record).
    case ledgerRecords([LedgerRecord])
    /// A directory (or a file found by identity) moved within a rule's tree: its entries
    /// follow (FileLedger.move).
    case ledgerMove(rule: String, from: [UInt8], to: [UInt8])
    /// A handled file renamed, or its attributes changed, as the watcher saw and confirmed:
    /// its entry goes from `from` to `to` and from form `known` to `now` (FileLedger.follow).
    case ledgerFollow(rule: String, from: [UInt8], to: [UInt8], known: FileIdentity, now: FileIdentity)
    /// Entries a prune found gone (the store's own walk, LedgerPruneWalk).
    case ledgerForget(rule: String, [LedgerPruneWalk.Gone])
    /// A rule's prune walk ended: once the deletions before this are in, say how many.
    case pruneFinished(rule: String)
    /// The WAL folded into the file, once everything before this is in (after a prune).
    case checkpoint
    /// After a prune: the pages it freed given back to the file system, a chunk per turn,
    /// then the checkpoint (StateStore.shrinkStep).
    case shrink
    /// A task's run fell due (TaskStore.recordScheduled).
    case taskScheduled(task: String, at: WallTime)
    /// A task's run ended: its history row, its last state, the history trimmed
    /// (TaskStore.recordRun).
    case taskRun(StoredRun)

    /// What the waiting writes are bounded by: rows to write.
    var rows: Int {
        switch self {
        case .ledgerRecords(let records): return records.count
        case .ledgerForget(_, let gone): return gone.count
        case .ledgerMove, .ledgerFollow, .taskScheduled, .taskRun: return 1
        case .pruneFinished, .checkpoint, .shrink: return 0
        }
    }

    /// How the dump and the messages count it.
    var kind: Kind {
        switch self {
        case .ledgerRecords: return .ledgerRecords
        case .ledgerMove, .ledgerFollow: return .ledgerMoves
        case .ledgerForget, .pruneFinished, .checkpoint, .shrink: return .maintenance
        case .taskScheduled: return .taskSchedules
        case .taskRun: return .taskRuns
        }
    }

    enum Kind: String, CaseIterable, Sendable {
        /// Counted in records, not writes: each is a file that would run again after a restart.
        case ledgerRecords = "ledger_records"
        case ledgerMoves = "ledger_moves"
        case taskSchedules = "task_schedules"
        case taskRuns = "task_runs"
        /// A prune's deletions, its end, the shrink and the checkpoint after it.
        case maintenance

        /// What losing one of them means, for the message that says they were dropped.
        var consequence: String {
            switch self {
            case .ledgerRecords: return "handled file(s) that catch-up will run again at the next start"
            case .ledgerMoves: return "moves, renames or attribute changes of handled files, which catch-up may run again"
            case .taskSchedules: return "task schedule time(s) that persistent tasks may catch up again"
            case .taskRuns: return "task run(s) missing from the history"
            case .maintenance: return "prune deletion(s), done again by the next prune"
            }
        }
    }
}
