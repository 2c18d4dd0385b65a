// Task state that outlives the daemon: per task the last scheduled instant and the last
// run's start, end and outcome (what `persistent = true` needs to catch up a run missed
// while watchkeeper was down), and the last runs' history. One SQLite file in the state
// directory (Storage/StateDatabase.swift), which also holds the watch rules' ledger of
// handled files (Storage/FileLedger.swift). In the daemon the StateStore writes it, on the
// state queue, and the scheduler reads it through a StateReader of the jobs queue.

import CSQLite
#if canImport(Glibc)
import Glibc
#endif

/// One finished (or skipped, missed, cancelled) run as the history keeps it.
public struct StoredRun: Sendable, Equatable {
    public let task: String
    public let runID: String
    public let attempt: Int
    /// A `RunOutcome` raw value, kept as text so that history written by a newer
    /// watchkeeper with more outcomes still reads.
    public let outcome: String
    public let scheduledAt: WallTime?
    public let startedAt: WallTime?
    public let finishedAt: WallTime
    public let durationNanoseconds: Int64
    public let exitCode: Int32?
    public let signal: Int32?
    /// An `ExpiryReason` raw value when the run expired.
    public let expiry: String?
    /// A fleet task's: the host the fire ran on (docs/fleet.md).
    public var host: String?

    public init(
        task: String, runID: String, attempt: Int, outcome: String, scheduledAt: WallTime?, startedAt: WallTime?,
        finishedAt: WallTime, durationNanoseconds: Int64, exitCode: Int32?, signal: Int32?, expiry: String?
    ) {
        self.task = task
        self.runID = runID
        self.attempt = attempt
        self.outcome = outcome
        self.scheduledAt = scheduledAt
        self.startedAt = startedAt
        self.finishedAt = finishedAt
        self.durationNanoseconds = durationNanoseconds
        self.exitCode = exitCode
        self.signal = signal
        self.expiry = expiry
    }

    /// The record the scheduler logs, as the history keeps it (`lateness` and `detail`
    /// stay in the journal).
    public init(_ record: RunRecord) {
        var exitCode: Int32?
        var signal: Int32?
        switch record.exit {
        case .exited(let code)?: exitCode = code
        case .signaled(let number, _)?: signal = number
        case nil: break
        }
        self.init(
            task: record.name, runID: record.runID, attempt: record.attempt, outcome: record.outcome.rawValue,
            scheduledAt: record.scheduledAt, startedAt: record.startedAt, finishedAt: record.finishedAt,
            durationNanoseconds: record.duration.nanosecondsClamped, exitCode: exitCode, signal: signal,
            expiry: record.expiry?.rawValue
        )
    }
}

/// What the store remembers about one task between runs of the daemon.
public struct StoredTaskState: Sendable, Equatable {
    public let task: String
    /// Set only by `recordScheduled`: the latest instant a run was due, whatever became of it.
    public let lastScheduledAt: WallTime?
    /// The last recorded run's fields, all from the same run: a skipped or missed last run
    /// has no start, even when an earlier run had one (the history has those).
    public let lastStartedAt: WallTime?
    public let lastFinishedAt: WallTime?
    public let lastOutcome: String?
    public let lastRunID: String?

    public init(
        task: String, lastScheduledAt: WallTime?, lastStartedAt: WallTime?, lastFinishedAt: WallTime?,
        lastOutcome: String?, lastRunID: String?
    ) {
        self.task = task
        self.lastScheduledAt = lastScheduledAt
        self.lastStartedAt = lastStartedAt
        self.lastFinishedAt = lastFinishedAt
        self.lastOutcome = lastOutcome
        self.lastRunID = lastRunID
    }
}

/// The task state's statements over one connection to `<state directory>/watchkeeper.sqlite3`
/// (the file also holds the watch rules' ledger, `FileLedger`): the StateStore's read-write
/// connection, a StateReader's read-only one, or a connection of its own (tools and tests).
///
/// Confined to its connection's serial dispatch queue: it has no lock of its own and
/// is deliberately not `Sendable` (see `SQLiteConnection` for the threading mode and the
/// durability of WAL with `synchronous = NORMAL`: a crash loses nothing committed, only a
/// power loss can roll back the last transactions, and the file stays consistent).
///
/// Times are stored as INTEGER nanoseconds since the epoch (years 1678 to 2262), exactly.
/// History is ordered by insertion, not by wall time, so an NTP step cannot reorder it.
public final class TaskStore {
    public static let fileName = StateDatabase.fileName
    // A fleet task's history holds every host's fires (ran_elsewhere too): 1,000 keeps a
    // 2-second fleet task's last half hour.
    public static let defaultHistoryLimit = 1_000
    /// How long a statement waits for another connection's lock before failing with
    /// "database is locked": a second opener (sqlite3 CLI, a backup) holding the file
    /// briefly must not fail a run's bookkeeping.
    public static let busyTimeout: Duration = .milliseconds(2_000)

    /// The `PRAGMA user_version` this build writes and understands (the state file's, shared
    /// with the file ledger).
    public static var schemaVersion: Int { StateDatabase.schemaVersion }

    public let path: String
    public let directory: String
    /// Runs kept per task; older ones are deleted when a new one is recorded.
    public let historyLimit: Int

    let connection: SQLiteConnection
    /// False when the connection is lent (the StateStore's or a StateReader's).
    private let ownsConnection: Bool

    /// Opens (creating if needed) `<directory>/watchkeeper.sqlite3` and brings its schema
    /// up to date. The file is created with mode 0640; SQLite gives its -wal and -shm
    /// files the same mode and owner.
    public init(directory: String, historyLimit: Int = TaskStore.defaultHistoryLimit) throws(SQLiteError) {
        precondition(historyLimit >= 1, "TaskStore keeps at least the last run of each task, but historyLimit is \(historyLimit)")
        self.directory = directory
        self.path = StateDatabase.path(inDirectory: directory)
        self.historyLimit = historyLimit
        connection = try StateDatabase.open(path: path, label: "task state", emptyState: "empty task state",
                                            busyTimeout: TaskStore.busyTimeout)
        ownsConnection = true
    }

    /// The statements over a connection someone else opened and closes.
    init(connection: SQLiteConnection, historyLimit: Int = TaskStore.defaultHistoryLimit) {
        precondition(historyLimit >= 1, "TaskStore keeps at least the last run of each task, but historyLimit is \(historyLimit)")
        self.connection = connection
        self.path = connection.path
        self.directory = connection.directory
        self.historyLimit = historyLimit
        ownsConnection = false
    }

    /// Finalizes the cached statements and closes the connection; the last connection to
    /// close checkpoints the WAL into the main file. Idempotent; any other call afterwards
    /// is a programming error. A lent connection is left to its owner.
    public func close() {
        if ownsConnection { connection.close() }
    }

    // MARK: - Recording

    /// A run was due at `scheduledAt`: started, or decided as skipped, cancelled or missed.
    /// Touches only `last_scheduled_at`, creating the task's row if needed.
    public func recordScheduled(task: String, scheduledAt: WallTime) throws(SQLiteError) {
        let action = "record the schedule of task \"\(task)\" in"
        try execute(
            """
            INSERT INTO task_state (task, last_scheduled_at) VALUES (?1, ?2)
            ON CONFLICT (task) DO UPDATE SET last_scheduled_at = excluded.last_scheduled_at
            """,
            [.text(task), try time(scheduledAt, action)], action: action)
    }

    /// Appends the run to the history, makes it the task's last run, and trims the task's
    /// history to `historyLimit` runs, all in one transaction. `last_scheduled_at` is left
    /// to `recordScheduled`, so a long run finishing after a later one was skipped cannot
    /// move it back.
    public func recordRun(_ run: StoredRun) throws(SQLiteError) {
        try transaction("record a run of task \"\(run.task)\" in") { () throws(SQLiteError) in
            try recordRunInTransaction(run)
        }
    }

    /// `recordRun` inside a transaction the caller holds (the StateStore's group commit).
    func recordRunInTransaction(_ run: StoredRun) throws(SQLiteError) {
        let action = "record a run of task \"\(run.task)\" in"
        let scheduledAt = try optionalTime(run.scheduledAt, action)
        let startedAt = try optionalTime(run.startedAt, action)
        let finishedAt = try time(run.finishedAt, action)
        try execute(
            """
            INSERT INTO run_history (task, run_id, attempt, outcome, scheduled_at, started_at, finished_at,
                                     duration_ns, exit_code, signal, expiry, host)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
            """,
            [
                .text(run.task), .text(run.runID), .integer(Int64(run.attempt)), .text(run.outcome), scheduledAt,
                startedAt, finishedAt, .integer(run.durationNanoseconds), run.exitCode.map { .integer(Int64($0)) } ?? .null,
                run.signal.map { .integer(Int64($0)) } ?? .null, run.expiry.map { .text($0) } ?? .null,
                run.host.map { .text($0) } ?? .null,
            ], action: action)
        try execute(
            """
            INSERT INTO task_state (task, last_started_at, last_finished_at, last_outcome, last_run_id)
            VALUES (?1, ?2, ?3, ?4, ?5)
            ON CONFLICT (task) DO UPDATE SET
                last_started_at = excluded.last_started_at, last_finished_at = excluded.last_finished_at,
                last_outcome = excluded.last_outcome, last_run_id = excluded.last_run_id
            """,
            [.text(run.task), startedAt, finishedAt, .text(run.outcome), .text(run.runID)], action: action)
        // Everything at or below the id of the (limit + 1)-th newest run; nothing when
        // there are fewer (the comparison with NULL is false).
        try execute(
            """
            DELETE FROM run_history WHERE task = ?1 AND id <= (
                SELECT id FROM run_history WHERE task = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)
            """,
            [.text(run.task), .integer(Int64(historyLimit))], action: action)
    }

    /// Deletes the per-task state of tasks not in `names` (tasks removed from the
    /// configuration), so a task added back later under the same name starts without a
    /// stale `last_scheduled_at` to catch up from. Their history is kept: it is already
    /// bounded per task, and it is what someone asks for after removing a task that misbehaved.
    public func forget(tasksNotIn names: Set<String>) throws(SQLiteError) {
        let action = "forget removed tasks in"
        try transaction(action) { () throws(SQLiteError) in
            var removed: [String] = []
            try execute("SELECT task FROM task_state", action: action) { row in
                let task = row.text(0) ?? ""
                if !names.contains(task) { removed.append(task) }
            }
            for task in removed {
                try execute("DELETE FROM task_state WHERE task = ?1", [.text(task)], action: action)
            }
        }
    }

    // MARK: - Reading

    public func state(task: String) throws(SQLiteError) -> StoredTaskState? {
        var state: StoredTaskState?
        try execute(
            """
            SELECT last_scheduled_at, last_started_at, last_finished_at, last_outcome, last_run_id
            FROM task_state WHERE task = ?1
            """,
            [.text(task)], action: "read the state of task \"\(task)\" from"
        ) { row in
            state = StoredTaskState(
                task: task, lastScheduledAt: row.time(0), lastStartedAt: row.time(1), lastFinishedAt: row.time(2),
                lastOutcome: row.text(3), lastRunID: row.text(4))
        }
        return state
    }

    /// The task's last `limit` runs, newest first.
    public func history(task: String, limit: Int) throws(SQLiteError) -> [StoredRun] {
        guard limit > 0 else { return [] }
        var runs: [StoredRun] = []
        try execute(
            """
            SELECT run_id, attempt, outcome, scheduled_at, started_at, finished_at, duration_ns, exit_code, signal, expiry, host
            FROM run_history WHERE task = ?1 ORDER BY id DESC LIMIT ?2
            """,
            [.text(task), .integer(Int64(limit))], action: "read the history of task \"\(task)\" from"
        ) { row in
            runs.append(StoredRun(
                task: task, runID: row.text(0) ?? "", attempt: Int(row.integer(1) ?? 0), outcome: row.text(2) ?? "",
                scheduledAt: row.time(3), startedAt: row.time(4),
                finishedAt: row.time(5) ?? WallTime(secondsSinceEpoch: 0, nanoseconds: 0),
                durationNanoseconds: row.integer(6) ?? 0, exitCode: row.integer(7).map { Int32(clamping: $0) },
                signal: row.integer(8).map { Int32(clamping: $0) }, expiry: row.text(9)))
            runs[runs.count - 1].host = row.text(10)
        }
        return runs
    }

    // MARK: - Statements

    private typealias Value = SQLiteValue

    private func execute(
        _ sql: String, _ values: [SQLiteValue] = [], action: String, row: (SQLiteRow) -> Void = { _ in }
    ) throws(SQLiteError) {
        do throws(SQLiteError) {
            try connection.execute(sql, values, action: action, row: row)
        } catch {
            throw error
        }
    }

    private func transaction(_ action: String, _ body: () throws(SQLiteError) -> Void) throws(SQLiteError) {
        // The body's SQLiteError travels through the connection's transaction as the
        // SQLiteError it was made from, and comes out unchanged.
        do throws(SQLiteError) {
            try connection.transaction(action) { () throws(SQLiteError) in
                do throws(SQLiteError) {
                    try body()
                } catch {
                    throw SQLiteError(path: error.path, code: error.code, description: error.description)
                }
            }
        } catch {
            throw error
        }
    }

    // MARK: - Errors and times

    private func time(_ time: WallTime, _ action: String) throws(SQLiteError) -> Value {
        guard let nanoseconds = time.nanosecondsSinceEpoch else {
            throw connection.failure(
                action: action, code: SQLITE_RANGE,
                message: "\(time.secondsSinceEpoch) seconds since the epoch is outside the years 1678 to 2262 that nanosecond times can hold")
        }
        return .integer(nanoseconds)
    }

    private func optionalTime(_ time: WallTime?, _ action: String) throws(SQLiteError) -> Value {
        guard let time else { return .null }
        return try self.time(time, action)
    }
}

extension SQLiteRow {
    fileprivate func time(_ column: Int32) -> WallTime? {
        integer(column).map(WallTime.init(nanosecondsSinceEpoch:))
    }
}
