// One connection to a SQLite file through the C API, for the task state (TaskStore) and the
// watch rules' file ledger (FileLedger): the StateStore's read-write one and the owners'
// read-only ones (StateReader). Opening with our file mode and without following symlinks,
// WAL, busy timeout, cached prepared statements with bound values, transactions,
// user_version migrations, and errors that name the file and SQLite's reason.
//
// The C API directly rather than a wrapper library: we need a dozen calls, and a wrapper
// costs more CI build time than this file costs to read.

import CSQLite
#if canImport(Glibc)
import Glibc
#endif

/// A value bound to a statement parameter.
public enum SQLiteValue: Sendable, Equatable {
    case integer(Int64)
    case text(String)
    /// Raw bytes, compared with memcmp: file paths, which need not be UTF-8.
    case blob([UInt8])
    case null
}

/// Why a statement or the connection failed. `description` is the whole journal message:
/// "unable to <action> <label> <path>: <SQLite's reason> (<what to check>)".
public struct SQLiteError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The database file.
    public let path: String
    /// SQLite's extended result code (`SQLITE_CANTOPEN`, `SQLITE_NOTADB`, ...).
    public let code: Int32
    /// errno behind a `SQLITE_CANTOPEN` or `SQLITE_IOERR`, else 0.
    public let systemErrorNumber: Int32
    public let description: String

    public init(path: String, code: Int32, systemErrorNumber: Int32 = 0, description: String) {
        self.path = path
        self.code = code
        self.systemErrorNumber = systemErrorNumber
        self.description = description
    }

    /// `SQLITE_NOTADB`, `SQLITE_CORRUPT`, ... without the extended bits.
    public var primaryCode: Int32 { code & 0xff }
}

/// The current row of a stepped statement, valid only inside the `row` closure of
/// `SQLiteConnection.execute`; columns count from 0.
public struct SQLiteRow {
    let statement: OpaquePointer

    public func isNull(_ column: Int32) -> Bool {
        sqlite3_column_type(statement, column) == SQLITE_NULL
    }

    public func integer(_ column: Int32) -> Int64? {
        isNull(column) ? nil : sqlite3_column_int64(statement, column)
    }

    public func text(_ column: Int32) -> String? {
        // column_text before column_bytes, the order SQLite documents for a stable length.
        guard let bytes = sqlite3_column_text(statement, column) else { return nil }
        let count = Int(sqlite3_column_bytes(statement, column))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    public func blob(_ column: Int32) -> [UInt8]? {
        if isNull(column) { return nil }
        // A zero-length blob has no pointer: that is an empty value, not NULL.
        guard let bytes = sqlite3_column_blob(statement, column) else { return [] }
        let count = Int(sqlite3_column_bytes(statement, column))
        return Array(UnsafeRawBufferPointer(start: bytes, count: count))
    }
}

/// One open connection, confined to one serial dispatch queue: it has no lock of its own
/// and is deliberately not `Sendable`. It is opened with `SQLITE_OPEN_NOMUTEX`, SQLite's
/// multi-thread mode, which lets a serial queue's blocks use it from different threads one
/// after another, never at the same time.
public final class SQLiteConnection {
    public struct Options: Sendable {
        /// Names the file in messages: "unable to open <label> <path>: ...".
        public var label: String
        /// What the directory holding the file is to the reader of a message.
        public var directoryRole: String
        /// Said when the file is not a database or is corrupt.
        public var damageAdvice: String
        /// Mode of a file this connection creates; SQLite gives -wal and -shm the same.
        public var fileMode: mode_t
        /// How long a statement waits for another connection's lock before failing with
        /// "database is locked": a second opener (sqlite3 CLI, a backup) holding the file
        /// briefly must not fail our bookkeeping.
        public var busyTimeout: Duration
        /// The WAL is truncated to this size after a checkpoint (`journal_size_limit`):
        /// without it a burst leaves a WAL as large as the burst on disk for good.
        public var journalSizeLimitBytes: Int64
        /// Pages in the WAL that trigger an automatic checkpoint at a commit.
        public var walAutocheckpointPages: Int32
        /// A file this connection creates gives freed pages back on `PRAGMA incremental_vacuum`
        /// (auto_vacuum = INCREMENTAL, which must be set before the file's first page is
        /// written); an older file asks for it, which its next VACUUM grants.
        public var incrementalVacuum: Bool
        /// A reader beside the one writer (StateReader): opened with SQLITE_OPEN_READONLY,
        /// never creating the file nor changing its settings. WAL lets it read the last
        /// committed state while the writer writes, without waiting for it.
        public var readOnly: Bool

        public init(
            label: String = "database", directoryRole: String = "directory",
            damageAdvice: String = "the file is damaged or not a SQLite database: move it aside",
            fileMode: mode_t = 0o600, busyTimeout: Duration = .milliseconds(2_000),
            journalSizeLimitBytes: Int64 = 4 << 20, walAutocheckpointPages: Int32 = 1_000, incrementalVacuum: Bool = false,
            readOnly: Bool = false
        ) {
            self.label = label
            self.directoryRole = directoryRole
            self.damageAdvice = damageAdvice
            self.fileMode = fileMode
            self.busyTimeout = busyTimeout
            self.journalSizeLimitBytes = journalSizeLimitBytes
            self.walAutocheckpointPages = walAutocheckpointPages
            self.incrementalVacuum = incrementalVacuum
            self.readOnly = readOnly
        }
    }

    public let path: String
    public let directory: String
    public let options: Options

    /// SQLITE_CANTOPEN_SYMLINK, a macro expression Swift does not import: the path is a
    /// symbolic link and the open did not follow it.
    public static let cantOpenSymlink: Int32 = SQLITE_CANTOPEN | (6 << 8)

    private var database: OpaquePointer?
    /// Prepared once with SQLITE_PREPARE_PERSISTENT, keyed by their SQL text, finalized by
    /// `close()`. Only constant SQL goes through `execute`, so the cache stays small.
    private var statements: [String: OpaquePointer] = [:]

    /// Opens (creating if needed) the file at `path`, in WAL mode with `synchronous =
    /// NORMAL`. Symbolic links are not followed (SQLITE_OPEN_NOFOLLOW, SQLite 3.31+): the
    /// state directory's files are ours, and a link planted there must not redirect writes.
    ///
    /// Durability of WAL with NORMAL: a transaction is in the WAL (in the page cache) when
    /// COMMIT returns, so a SIGKILL or crash of the daemon loses nothing committed and never
    /// corrupts the file; only a power loss can roll back the last transactions before a
    /// checkpoint, and the file stays consistent even then.
    public init(path: String, options: Options = Options()) throws(SQLiteError) {
        self.path = path
        let slash = path.utf8.lastIndex(of: UInt8(ascii: "/"))
        self.directory = slash.map { $0 == path.utf8.startIndex ? "/" : String(path[..<$0]) } ?? "."
        self.options = options

        if !options.readOnly { try createFileIfMissing() }
        var handle: OpaquePointer?
        var flags = (options.readOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_NOMUTEX
        // Older libraries do not know the flag; the header we build against does.
        if sqlite3_libversion_number() >= 3_031_000 { flags |= SQLITE_OPEN_NOFOLLOW }
        let code = sqlite3_open_v2(path, &handle, flags, nil)
        guard code == SQLITE_OK, let handle else {
            let extended = handle.map { sqlite3_extended_errcode($0) } ?? code
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(code))
            let number = handle.map { sqlite3_system_errno($0) } ?? 0
            sqlite3_close_v2(handle)
            throw failure(action: "open", code: extended, message: message, errorNumber: number)
        }
        database = handle
        do throws(SQLiteError) {
            try configure()
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

    public var isOpen: Bool { database != nil }

    /// Gives back the page cache this connection holds (it refills as pages are read
    /// again): after a burst, so the pages it touched are not kept for the daemon's life.
    public func releaseMemory() {
        guard let database else { return }
        sqlite3_db_release_memory(database)
    }

    /// Bytes of page cache the connection holds now.
    public var cacheBytes: Int {
        guard let database else { return 0 }
        var current: Int32 = 0
        var highWater: Int32 = 0
        sqlite3_db_status(database, SQLITE_DBSTATUS_CACHE_USED, &current, &highWater, 0)
        return Int(current)
    }

    /// Transactions committed through `transaction`, for the dump (and to see group commit).
    public private(set) var commits: UInt64 = 0

    /// Rows changed by the last INSERT, UPDATE or DELETE.
    public var changes: Int { Int(sqlite3_changes64(connection)) }

    // MARK: - Statements

    /// Runs a cached statement with `values` bound to ?1, ?2, ..., handing each result row
    /// to `row`, then resets it and clears its bindings for the next use. `action` completes
    /// "unable to ..." in the error.
    public func execute(
        _ sql: String, _ values: [SQLiteValue] = [], action: String, row: (SQLiteRow) -> Void = { _ in }
    ) throws(SQLiteError) {
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
                // A nil pointer would bind NULL: an empty path must stay an empty blob.
                code = bytes.withUnsafeBytes {
                    wk_sqlite3_bind_blob_copied(statement, index, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(clamping: $0.count))
                }
            case .null:
                code = sqlite3_bind_null(statement, index)
            }
            guard code == SQLITE_OK else { throw failure(action, code) }
        }
        while true {
            let code = sqlite3_step(statement)
            switch code {
            case SQLITE_ROW: row(SQLiteRow(statement: statement))
            case SQLITE_DONE: return
            default: throw failure(action, code)
            }
        }
    }

    /// Statements that run once per process (migrations, pragmas with a literal value),
    /// not worth a cache slot; several may be separated by semicolons.
    public func executeOnce(_ sql: String, action: String) throws(SQLiteError) {
        let code = sqlite3_exec(connection, sql, nil, nil, nil)
        guard code == SQLITE_OK else { throw failure(action, code) }
    }

    /// BEGIN IMMEDIATE takes the write lock up front (waiting up to the busy timeout), so a
    /// transaction never fails halfway for want of upgrading a read lock. The body's error
    /// rolls everything back and is rethrown.
    public func transaction<Result>(
        _ action: String, _ body: () throws(SQLiteError) -> Result
    ) throws(SQLiteError) -> Result {
        try execute("BEGIN IMMEDIATE", action: action)
        do throws(SQLiteError) {
            let result = try body()
            try execute("COMMIT", action: action)
            commits += 1
            return result
        } catch {
            // A failed COMMIT can leave the transaction open. If ROLLBACK fails too, the
            // connection is in a state the next statement will report; say so now as well.
            if sqlite3_get_autocommit(connection) == 0 {
                do throws(SQLiteError) {
                    try execute("ROLLBACK", action: action)
                } catch let rollback {
                    throw SQLiteError(path: path, code: error.code, systemErrorNumber: error.systemErrorNumber,
                                      description: error.description + "; then unable to roll back: " + rollback.description)
                }
            }
            throw error
        }
    }

    // MARK: - Schema

    public func userVersion() throws(SQLiteError) -> Int {
        var version = 0
        try execute("PRAGMA user_version", action: "read the schema version of") { row in
            version = Int(row.integer(0) ?? 0)
        }
        return version
    }

    /// Applies the pending `migrations`: entry i takes the file from `user_version` i to
    /// i + 1. All pending entries apply in one transaction, so a crash mid-migration leaves
    /// the previous version intact, and the version is read again inside the write
    /// transaction, so two processes opening a new file at once migrate it once. A file
    /// newer than `migrations` fails with `newerSchema(found, known)` as the reason.
    public func migrate(_ migrations: [[String]], newerSchema: (_ found: Int, _ known: Int) -> String) throws(SQLiteError) {
        let known = migrations.count
        if try userVersion() == known { return }
        try transaction("migrate the schema of") { () throws(SQLiteError) in
            let current = try userVersion()
            if current > known {
                throw failure(action: "open", code: SQLITE_ERROR, message: newerSchema(current, known))
            }
            for version in current..<known {
                for sql in migrations[version] {
                    try executeOnce(sql, action: "migrate the schema (to version \(version + 1)) of")
                }
                // PRAGMA takes no parameters; the value is our own integer, not input.
                try executeOnce("PRAGMA user_version = \(version + 1)", action: "migrate the schema of")
            }
        }
    }

    /// `PRAGMA quick_check`: "ok", or the problems SQLite found (it reports damage as rows,
    /// not as an error code). It reads every page, so it costs a pass over the file.
    public func quickCheck() throws(SQLiteError) -> [String] {
        var problems: [String] = []
        try execute("PRAGMA quick_check", action: "check") { row in problems.append(row.text(0) ?? "") }
        return problems == ["ok"] ? [] : problems
    }

    public struct CheckpointResult: Sendable, Equatable {
        /// Another connection's reader or writer kept the checkpoint from finishing.
        public let busy: Bool
        /// Frames in the WAL, and how many of them are now in the database file.
        public let walFrames: Int
        public let checkpointedFrames: Int
    }

    /// Copies the WAL into the database file and truncates the WAL to zero bytes
    /// (`PRAGMA wal_checkpoint(TRUNCATE)`), for a clean stop: the file alone then holds
    /// everything, and no WAL is left to replay.
    public func checkpoint() throws(SQLiteError) -> CheckpointResult {
        var result = CheckpointResult(busy: false, walFrames: 0, checkpointedFrames: 0)
        try execute("PRAGMA wal_checkpoint(TRUNCATE)", action: "checkpoint") { row in
            result = CheckpointResult(busy: row.integer(0) == 1, walFrames: Int(row.integer(1) ?? 0),
                                      checkpointedFrames: Int(row.integer(2) ?? 0))
        }
        return result
    }

    // MARK: - Opening

    private var connection: OpaquePointer {
        guard let database else {
            preconditionFailure("SQLiteConnection to \(path) used after close(): its queue must be done with it before closing it")
        }
        return database
    }

    private func prepared(_ sql: String, action: String) throws(SQLiteError) -> OpaquePointer {
        if let statement = statements[sql] { return statement }
        var statement: OpaquePointer?
        let code = sqlite3_prepare_v3(connection, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &statement, nil)
        guard code == SQLITE_OK, let statement else { throw failure(action, code) }
        statements[sql] = statement
        return statement
    }

    /// Creates the file with our mode before SQLite does (SQLite would use 0644 minus the
    /// umask); fchmod because the umask could still strip bits we want. An existing file's
    /// mode is the administrator's business. Failing here also gives errno, which says more
    /// than SQLite's "unable to open database file".
    private func createFileIfMissing() throws(SQLiteError) {
        let descriptor: Int32
        switch valueOrErrno({ open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, options.fileMode) }) {
        case .success(let created): descriptor = created
        case .failure(.fileExists): return
        case .failure(let error):
            throw failure(action: "open", code: SQLITE_CANTOPEN, message: error.description, errorNumber: error.rawValue)
        }
        fchmod(descriptor, options.fileMode)
        Glibc.close(descriptor)
    }

    private func configure() throws(SQLiteError) {
        let connection = self.connection
        sqlite3_extended_result_codes(connection, 1)
        let timeout = Int32(clamping: options.busyTimeout.nanosecondsClamped / 1_000_000)
        let code = sqlite3_busy_timeout(connection, timeout)
        guard code == SQLITE_OK else { throw failure("open", code) }
        if options.readOnly {
            // Only asked, never set: a reader in another journal mode would block the
            // writer and be blocked by it, which is what a reader is for not doing.
            var journalMode = ""
            try execute("PRAGMA journal_mode", action: "open") { row in journalMode = row.text(0) ?? "" }
            guard journalMode.lowercased() == "wal" else {
                throw failure(action: "open", code: SQLITE_ERROR,
                              message: "the file is in journal mode \"\(journalMode)\", not WAL: a reader must open it after its writer")
            }
            return
        }
        // SQLite falls back to read-only when it may not write the file, and would only
        // say so at the first write.
        if sqlite3_db_readonly(connection, "main") == 1 {
            throw failure(action: "open", code: SQLITE_READONLY, message: "the file is read-only to uid \(geteuid())")
        }
        // The first statement that reads the file: a file that is not a database fails here.
        // auto_vacuum before journal_mode: WAL writes the new file's first page.
        if options.incrementalVacuum { try executeOnce("PRAGMA auto_vacuum = INCREMENTAL", action: "open") }
        var journalMode = ""
        try execute("PRAGMA journal_mode = WAL", action: "open") { row in journalMode = row.text(0) ?? "" }
        guard journalMode.lowercased() == "wal" else {
            throw failure(
                action: "open", code: SQLITE_ERROR,
                message: "SQLite kept journal mode \"\(journalMode)\" instead of WAL (is the \(options.directoryRole) on a network file system? WAL needs shared memory)")
        }
        try executeOnce(
            """
            PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON;
            PRAGMA journal_size_limit = \(options.journalSizeLimitBytes); PRAGMA wal_autocheckpoint = \(options.walAutocheckpointPages)
            """, action: "open")
    }

    // MARK: - Errors

    /// The connection's error for the call that just returned `code`.
    func failure(_ action: String, _ code: Int32) -> SQLiteError {
        let message = String(cString: sqlite3_errmsg(connection))
        // Some calls return only the primary code even with extended codes on; the
        // connection still knows the extended one (SQLiteConnection.cantOpenSymlink, ...).
        var extended = code
        if code == code & 0xff, sqlite3_extended_errcode(connection) & 0xff == code {
            extended = sqlite3_extended_errcode(connection)
        }
        let primary = code & 0xff
        let number = primary == SQLITE_CANTOPEN || primary == SQLITE_IOERR ? sqlite3_system_errno(connection) : 0
        return failure(action: action, code: extended, message: message, errorNumber: number)
    }

    func failure(action: String, code: Int32, message: String, errorNumber: Int32 = 0) -> SQLiteError {
        Self.failure(path: path, directory: directory, options: options, action: action, code: code, message: message,
                     errorNumber: errorNumber)
    }

    /// "unable to <action> <label> <path>: <reason> (<what to check>)", also for failures
    /// before there is a connection (the owner preparing the directory or the file).
    static func failure(
        path: String, directory: String, options: Options, action: String, code: Int32, message: String, errorNumber: Int32 = 0
    ) -> SQLiteError {
        var reason = message
        if errorNumber != 0 {
            let system = String(cString: strerror(errorNumber))
            if system != message { reason += ": " + system }
        }
        let hint: String?
        switch code & 0xff {
        case SQLITE_CANTOPEN where code == SQLiteConnection.cantOpenSymlink:
            // SQLite refuses a link anywhere on the path, not only in the file's place.
            var info = stat()
            if lstat(path, &info) == 0 && info.st_mode & S_IFMT == S_IFLNK {
                hint = "it is a symbolic link, which watchkeeper does not follow: put the file itself there"
            } else {
                hint = "a directory on its path is a symbolic link, which watchkeeper does not follow: name the \(options.directoryRole) by its real path"
            }
        case SQLITE_CANTOPEN, SQLITE_READONLY, SQLITE_PERM, SQLITE_AUTH:
            if errorNumber == ENOENT || errorNumber == ENOTDIR {
                hint = "does the \(options.directoryRole) \(directory) exist?"
            } else if errorNumber == EISDIR {
                hint = "a directory is in its place"
            } else {
                hint = "is the \(options.directoryRole) \(directory) writable by uid \(geteuid())?"
            }
        case SQLITE_NOTADB, SQLITE_CORRUPT:
            hint = options.damageAdvice
        case SQLITE_BUSY, SQLITE_LOCKED:
            hint = "another process held it locked for more than \(options.busyTimeout.compactDescription): is a second watchkeeper using the same \(options.directoryRole)?"
        case SQLITE_FULL:
            hint = "is the file system holding \(directory) full?"
        case SQLITE_IOERR:
            hint = "the file system reported an I/O error: check the kernel log"
        default:
            hint = nil
        }
        let text = "unable to \(action) \(options.label) \(path): \(reason)" + (hint.map { " (\($0))" } ?? "")
        return SQLiteError(path: path, code: code, systemErrorNumber: errorNumber, description: text)
    }
}
