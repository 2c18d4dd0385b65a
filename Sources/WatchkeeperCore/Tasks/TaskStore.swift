// Task state that outlives the daemon: per task the last scheduled instant and the last
// run's start, end and outcome (what `persistent = true` needs to catch up a run missed
// while watchkeeper was down), and the last runs' history. One SQLite file in the state
// directory, which later also holds the directory watches' ledger of handled files.
//
// The SQLite C API directly rather than a wrapper library: we need a dozen calls, and a
// wrapper costs more CI build time than this file costs to read.

import CSQLite
#if canImport(Glibc)
import Glibc
#endif

/// Why the task state could not be opened, read or written. The description is the whole
/// message for the journal: action, file, SQLite's reason, and what to check.
public struct TaskStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The database file.
    public let path: String
    /// SQLite's extended result code (`SQLITE_CANTOPEN`, `SQLITE_NOTADB`, ...); compare
    /// `code & 0xff` with the primary codes.
    public let code: Int32
    public let description: String

    public init(path: String, code: Int32, description: String) {
        self.path = path
        self.code = code
        self.description = description
    }
}

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

/// The task state database, `<state directory>/watchkeeper.sqlite3`.
///
/// Confined to one serial dispatch queue (the tasks queue): it has no lock of its own and
/// is deliberately not `Sendable`. The connection is opened with `SQLITE_OPEN_NOMUTEX`,
/// SQLite's multi-thread mode, which allows a serial queue's blocks to use it from
/// different threads one after another, never at the same time.
///
/// Durability: WAL journal with `synchronous = NORMAL`. A transaction is in the WAL file
/// (in the kernel's page cache) when COMMIT returns, so a SIGKILL or crash of the daemon
/// loses nothing committed and never corrupts the file; the next open replays the WAL.
/// Only a power loss or kernel crash can roll back the last transactions before a
/// checkpoint, and even then the file stays consistent. That is the right trade for
/// bookkeeping that would otherwise fsync on every run.
///
/// Times are stored as INTEGER nanoseconds since the epoch (years 1678 to 2262), exactly.
/// History is ordered by insertion, not by wall time, so an NTP step cannot reorder it.
public final class TaskStore {
    public static let fileName = "watchkeeper.sqlite3"
    public static let defaultHistoryLimit = 100
    /// How long a statement waits for another connection's lock before failing with
    /// "database is locked": a second opener (sqlite3 CLI, a backup) holding the file
    /// briefly must not fail a run's bookkeeping.
    public static let busyTimeout: Duration = .milliseconds(2_000)

    /// Schema changes in order: entry i takes the database from `user_version` i to i + 1.
    /// A released entry is never edited; a change appends one. All pending entries apply in
    /// one transaction, so a crash mid-migration leaves the previous version intact.
    static let migrations: [[String]] = [
        // 1: per-task state and run history.
        [
            """
            CREATE TABLE task_state (
                task TEXT PRIMARY KEY NOT NULL,
                last_scheduled_at INTEGER,
                last_started_at INTEGER,
                last_finished_at INTEGER,
                last_outcome TEXT,
                last_run_id TEXT
            ) WITHOUT ROWID
            """,
            """
            CREATE TABLE run_history (
                id INTEGER PRIMARY KEY,
                task TEXT NOT NULL,
                run_id TEXT NOT NULL,
                attempt INTEGER NOT NULL,
                outcome TEXT NOT NULL,
                scheduled_at INTEGER,
                started_at INTEGER,
                finished_at INTEGER NOT NULL,
                duration_ns INTEGER NOT NULL,
                exit_code INTEGER,
                signal INTEGER,
                expiry TEXT
            )
            """,
            "CREATE INDEX run_history_by_task ON run_history (task, id)",
        ],
        // 2: the file ledger of watch rules: which file, in which form, was handled how.
        [
            """
            CREATE TABLE file_ledger (
                rule TEXT NOT NULL,
                path BLOB NOT NULL,
                device INTEGER NOT NULL,
                inode INTEGER NOT NULL,
                size INTEGER NOT NULL,
                modified_ns INTEGER NOT NULL,
                outcome TEXT NOT NULL,
                handled_at INTEGER NOT NULL,
                PRIMARY KEY (rule, path)
            ) WITHOUT ROWID
            """,
        ],
    ]

    /// The `PRAGMA user_version` this build writes and understands.
    public static var schemaVersion: Int { migrations.count }

    public let path: String
    public let directory: String
    /// Runs kept per task; older ones are deleted when a new one is recorded.
    public let historyLimit: Int

    private var database: OpaquePointer?
    /// Prepared once with SQLITE_PREPARE_PERSISTENT, keyed by their SQL text, finalized by `close()`.
    private var statements: [String: OpaquePointer] = [:]

    /// Opens (creating if needed) `<directory>/watchkeeper.sqlite3` and brings its schema
    /// up to date. The file is created with mode 0640; SQLite gives its -wal and -shm
    /// files the same mode and owner.
    public init(directory: String, historyLimit: Int = TaskStore.defaultHistoryLimit) throws(TaskStoreError) {
        precondition(historyLimit >= 1, "TaskStore keeps at least the last run of each task, but historyLimit is \(historyLimit)")
        self.directory = directory
        self.path = (directory.hasSuffix("/") ? directory : directory + "/") + TaskStore.fileName
        self.historyLimit = historyLimit

        try Self.createFileIfMissing(path: path, directory: directory)
        var handle: OpaquePointer?
        let code = sqlite3_open_v2(path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nil)
        guard code == SQLITE_OK, let handle else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            sqlite3_close_v2(handle)
            throw Self.failure(action: "open", path: path, directory: directory, code: code, message: message)
        }
        database = handle
        do {
            try configure()
            try migrate()
        } catch {
            close()
            throw error
        }
    }

    deinit {
        close()
    }

    /// Finalizes the cached statements and closes the connection; the last connection to
    /// close checkpoints the WAL into the main file. Idempotent; any other call afterwards
    /// is a programming error.
    public func close() {
        guard let database else { return }
        for statement in statements.values { sqlite3_finalize(statement) }
        statements = [:]
        // Every statement is finalized, so this cannot be SQLITE_BUSY; close_v2 would
        // defer the close instead of reporting a statement we forgot.
        sqlite3_close(database)
        self.database = nil
    }

    // MARK: - Recording

    /// A run was due at `scheduledAt`: started, or decided as skipped, cancelled or missed.
    /// Touches only `last_scheduled_at`, creating the task's row if needed.
    public func recordScheduled(task: String, scheduledAt: WallTime) throws(TaskStoreError) {
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
    public func recordRun(_ run: StoredRun) throws(TaskStoreError) {
        let action = "record a run of task \"\(run.task)\" in"
        let scheduledAt = try optionalTime(run.scheduledAt, action)
        let startedAt = try optionalTime(run.startedAt, action)
        let finishedAt = try time(run.finishedAt, action)
        try transaction(action) { () throws(TaskStoreError) in
            try execute(
                """
                INSERT INTO run_history (task, run_id, attempt, outcome, scheduled_at, started_at, finished_at,
                                         duration_ns, exit_code, signal, expiry)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
                """,
                [
                    .text(run.task), .text(run.runID), .integer(Int64(run.attempt)), .text(run.outcome), scheduledAt,
                    startedAt, finishedAt, .integer(run.durationNanoseconds), run.exitCode.map { .integer(Int64($0)) } ?? .null,
                    run.signal.map { .integer(Int64($0)) } ?? .null, run.expiry.map { .text($0) } ?? .null,
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
    }

    /// Deletes the per-task state of tasks not in `names` (tasks removed from the
    /// configuration), so a task added back later under the same name starts without a
    /// stale `last_scheduled_at` to catch up from. Their history is kept: it is already
    /// bounded per task, and it is what someone asks for after removing a task that misbehaved.
    public func forget(tasksNotIn names: Set<String>) throws(TaskStoreError) {
        let action = "forget removed tasks in"
        try transaction(action) { () throws(TaskStoreError) in
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

    public func state(task: String) throws(TaskStoreError) -> StoredTaskState? {
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
    public func history(task: String, limit: Int) throws(TaskStoreError) -> [StoredRun] {
        guard limit > 0 else { return [] }
        var runs: [StoredRun] = []
        try execute(
            """
            SELECT run_id, attempt, outcome, scheduled_at, started_at, finished_at, duration_ns, exit_code, signal, expiry
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
        }
        return runs
    }

    // MARK: - File ledger

    /// A watched file as it was handled: the same bytes in the same place (device, inode,
    /// size, modification time) are not handled again, across restarts and crashes.
    public struct LedgerEntry: Sendable, Equatable {
        public let device: UInt64
        public let inode: UInt64
        public let size: Int64
        public let modifiedNanoseconds: Int64
        public let outcome: String

        public init(device: UInt64, inode: UInt64, size: Int64, modifiedNanoseconds: Int64, outcome: String) {
            self.device = device
            self.inode = inode
            self.size = size
            self.modifiedNanoseconds = modifiedNanoseconds
            self.outcome = outcome
        }
    }

    public func recordFile(rule: String, path: [UInt8], entry: LedgerEntry, at handledAt: WallTime) throws(TaskStoreError) {
        let action = "record a handled file of watch \"\(rule)\" in"
        try execute(
            """
            INSERT INTO file_ledger (rule, path, device, inode, size, modified_ns, outcome, handled_at)
            VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
            ON CONFLICT (rule, path) DO UPDATE SET device = excluded.device, inode = excluded.inode, size = excluded.size,
                modified_ns = excluded.modified_ns, outcome = excluded.outcome, handled_at = excluded.handled_at
            """,
            [.text(rule), .blob(path), .integer(Int64(bitPattern: entry.device)), .integer(Int64(bitPattern: entry.inode)),
             .integer(entry.size), .integer(entry.modifiedNanoseconds), .text(entry.outcome), try time(handledAt, action)],
            action: action)
    }

    public func ledgerEntry(rule: String, path: [UInt8]) throws(TaskStoreError) -> LedgerEntry? {
        var found: LedgerEntry?
        try execute(
            "SELECT device, inode, size, modified_ns, outcome FROM file_ledger WHERE rule = ?1 AND path = ?2",
            [.text(rule), .blob(path)], action: "read the file ledger of watch \"\(rule)\" from"
        ) { row in
            found = LedgerEntry(device: UInt64(bitPattern: row.integer(0) ?? 0), inode: UInt64(bitPattern: row.integer(1) ?? 0),
                                size: row.integer(2) ?? 0, modifiedNanoseconds: row.integer(3) ?? 0, outcome: row.text(4) ?? "")
        }
        return found
    }

    public func ledgerSize(rule: String) throws(TaskStoreError) -> Int {
        var count = 0
        try execute("SELECT count(*) FROM file_ledger WHERE rule = ?1", [.text(rule)],
                    action: "count the file ledger of watch \"\(rule)\" in") { row in count = Int(row.integer(0) ?? 0) }
        return count
    }

    // MARK: - Opening

    /// Creates the file with our mode before SQLite does (SQLite would use 0644 minus the
    /// umask); fchmod because the umask could still strip bits we want. An existing file's
    /// mode is the administrator's business. Failing here also gives errno, which says more
    /// than SQLite's "unable to open database file".
    private static func createFileIfMissing(path: String, directory: String) throws(TaskStoreError) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o640)
        if descriptor < 0 {
            let number = errno
            if number == EEXIST { return }
            throw failure(action: "open", path: path, directory: directory, code: SQLITE_CANTOPEN,
                          message: String(cString: strerror(number)), errorNumber: number)
        }
        fchmod(descriptor, 0o640)
        Glibc.close(descriptor)
    }

    private func configure() throws(TaskStoreError) {
        let connection = self.connection
        sqlite3_extended_result_codes(connection, 1)
        let timeout = Int32(clamping: TaskStore.busyTimeout.nanosecondsClamped / 1_000_000)
        let code = sqlite3_busy_timeout(connection, timeout)
        guard code == SQLITE_OK else { throw failure("open", code) }
        // SQLite falls back to read-only when it may not write the file, and would only
        // say so at the first run's bookkeeping.
        if sqlite3_db_readonly(connection, "main") == 1 {
            throw Self.failure(action: "open", path: path, directory: directory, code: SQLITE_READONLY,
                               message: "the file is read-only to uid \(geteuid())")
        }
        // The first statement that reads the file: a file that is not a database fails here.
        var journalMode = ""
        try execute("PRAGMA journal_mode = WAL", action: "open") { row in journalMode = row.text(0) ?? "" }
        guard journalMode.lowercased() == "wal" else {
            throw Self.failure(
                action: "open", path: path, directory: directory, code: SQLITE_ERROR,
                message: "SQLite kept journal mode \"\(journalMode)\" instead of WAL (is the state directory on a network file system? WAL needs shared memory)")
        }
        try execute("PRAGMA synchronous = NORMAL", action: "open")
        try execute("PRAGMA foreign_keys = ON", action: "open")
    }

    private func userVersion() throws(TaskStoreError) -> Int {
        var version = 0
        try execute("PRAGMA user_version", action: "read the schema version of") { row in
            version = Int(row.integer(0) ?? 0)
        }
        return version
    }

    /// Applies the pending migrations. The version is read again inside the write
    /// transaction, so two processes opening a new file at once migrate it once.
    private func migrate() throws(TaskStoreError) {
        let known = TaskStore.schemaVersion
        if try userVersion() == known { return }
        try transaction("migrate the schema of") { () throws(TaskStoreError) in
            let current = try userVersion()
            if current > known {
                throw Self.failure(
                    action: "open", path: path, directory: directory, code: SQLITE_ERROR,
                    message: "its schema version \(current) is newer than this watchkeeper's (\(known)): it was written by a later release; upgrade, or move the file aside to start with empty task state")
            }
            for version in current..<known {
                for sql in TaskStore.migrations[version] {
                    try executeOnce(sql, action: "migrate the schema (to version \(version + 1)) of")
                }
                // PRAGMA takes no parameters; the value is our own integer, not input.
                try executeOnce("PRAGMA user_version = \(version + 1)", action: "migrate the schema of")
            }
        }
    }

    // MARK: - Statements

    private enum Value {
        case integer(Int64)
        case text(String)
        case blob([UInt8])
        case null
    }

    /// The current row of a stepped statement; columns count from 0.
    private struct Row {
        let statement: OpaquePointer

        func integer(_ column: Int32) -> Int64? {
            sqlite3_column_type(statement, column) == SQLITE_NULL ? nil : sqlite3_column_int64(statement, column)
        }

        func text(_ column: Int32) -> String? {
            // column_text before column_bytes, the order SQLite documents for a stable length.
            guard let bytes = sqlite3_column_text(statement, column) else { return nil }
            let count = Int(sqlite3_column_bytes(statement, column))
            return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
        }

        func time(_ column: Int32) -> WallTime? {
            integer(column).map(TaskStore.wallTime(nanosecondsSinceEpoch:))
        }
    }

    private var connection: OpaquePointer {
        guard let database else {
            preconditionFailure("TaskStore used after close(): the tasks queue must be done with it before closing it")
        }
        return database
    }

    private func prepared(_ sql: String, action: String) throws(TaskStoreError) -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard code == SQLITE_OK, let statement else { throw failure(action, code) }
        statements[sql] = statement
        return statement
    }

    /// Runs a cached statement with `values` bound to ?1, ?2, ..., handing each result row
    /// to `row`, then resets it and clears its bindings for the next use.
    private func execute(
        _ sql: String, _ values: [Value] = [], action: String, row: (Row) -> Void = { _ in }
    ) throws(TaskStoreError) {
        let statement = try prepared(sql, action: action)
        defer {
            sqlite3_reset(statement)
            sqlite3_clear_bindings(statement)
        }
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let code: Int32
            switch value {
            case .integer(let number):
                code = sqlite3_bind_int64(statement, index, number)
            case .text(let text):
                code = text.withCString { wk_sqlite3_bind_text_copied(statement, index, $0, Int32(clamping: text.utf8.count)) }
            case .blob(let bytes):
                code = bytes.withUnsafeBytes { wk_sqlite3_bind_blob_copied(statement, index, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(clamping: $0.count)) }
            case .null:
                code = sqlite3_bind_null(statement, index)
            }
            guard code == SQLITE_OK else { throw failure(action, code) }
        }
        while true {
            let code = sqlite3_step(statement)
            switch code {
            case SQLITE_ROW: row(Row(statement: statement))
            case SQLITE_DONE: return
            default: throw failure(action, code)
            }
        }
    }

    /// For statements that run once per process (migrations), not worth a cache slot.
    private func executeOnce(_ sql: String, action: String) throws(TaskStoreError) {
        let code = sqlite3_exec(connection, sql, nil, nil, nil)
        guard code == SQLITE_OK else { throw failure(action, code) }
    }

    /// BEGIN IMMEDIATE takes the write lock up front (waiting up to the busy timeout),
    /// so a transaction never fails halfway for want of upgrading a read lock.
    private func transaction(_ action: String, _ body: () throws(TaskStoreError) -> Void) throws(TaskStoreError) {
        try execute("BEGIN IMMEDIATE", action: action)
        do {
            try body()
            try execute("COMMIT", action: action)
        } catch {
            // A failed COMMIT can leave the transaction open; ROLLBACK's own failure adds nothing.
            if sqlite3_get_autocommit(connection) == 0 { try? execute("ROLLBACK", action: action) }
            throw error
        }
    }

    // MARK: - Errors and times

    /// The connection's error for the call that just returned `code`.
    private func failure(_ action: String, _ code: Int32) -> TaskStoreError {
        let message = String(cString: sqlite3_errmsg(connection))
        let primary = code & 0xff
        let number = primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR ? sqlite3_system_errno(connection) : 0
        return Self.failure(action: action, path: path, directory: directory, code: code, message: message, errorNumber: number)
    }

    /// "unable to <action> task state <path>: <reason> (<what to check>)".
    private static func failure(
        action: String, path: String, directory: String, code: Int32, message: String, errorNumber: Int32 = 0
    ) -> TaskStoreError {
        var reason = message
        if errorNumber != 0 {
            let system = String(cString: strerror(errorNumber))
            if system != message { reason += ": " + system }
        }
        let hint: String?
        switch code & 0xff {
        case SQLITE_CANTOPEN, SQLITE_READONLY, SQLITE_PERM, SQLITE_AUTH:
            if errorNumber == ENOENT || errorNumber == ENOTDIR {
                hint = "does the state directory \(directory) exist?"
            } else {
                hint = "is the state directory \(directory) writable by uid \(geteuid())?"
            }
        case SQLITE_NOTADB, SQLITE_CORRUPT:
            hint = "the file is damaged or not watchkeeper's: move it aside and watchkeeper starts again with empty task state"
        case SQLITE_BUSY, SQLITE_LOCKED:
            hint = "another process held it locked for more than \(busyTimeout.compactDescription): is a second watchkeeper using the same state directory?"
        case SQLITE_FULL:
            hint = "is the file system holding \(directory) full?"
        case SQLITE_IOERR:
            hint = "the file system reported an I/O error: check the kernel log"
        default:
            hint = nil
        }
        let text = "unable to \(action) task state \(path): \(reason)" + (hint.map { " (\($0))" } ?? "")
        return TaskStoreError(path: path, code: code, description: text)
    }

    private func time(_ time: WallTime, _ action: String) throws(TaskStoreError) -> Value {
        let (product, productOverflow) = time.secondsSinceEpoch.multipliedReportingOverflow(by: 1_000_000_000)
        let (sum, sumOverflow) = product.addingReportingOverflow(Int64(time.nanoseconds))
        guard !productOverflow && !sumOverflow else {
            throw Self.failure(
                action: action, path: path, directory: directory, code: SQLITE_RANGE,
                message: "\(time.secondsSinceEpoch) seconds since the epoch is outside the years 1678 to 2262 that nanosecond times can hold")
        }
        return .integer(sum)
    }

    private func optionalTime(_ time: WallTime?, _ action: String) throws(TaskStoreError) -> Value {
        guard let time else { return .null }
        return try self.time(time, action)
    }

    /// Floor division, so instants before 1970 keep 0 ≤ nanoseconds < 10⁹ like timespec.
    fileprivate static func wallTime(nanosecondsSinceEpoch value: Int64) -> WallTime {
        var seconds = value / 1_000_000_000
        var nanoseconds = value % 1_000_000_000
        if nanoseconds < 0 {
            seconds -= 1
            nanoseconds += 1_000_000_000
        }
        return WallTime(secondsSinceEpoch: seconds, nanoseconds: Int32(nanoseconds))
    }
}
