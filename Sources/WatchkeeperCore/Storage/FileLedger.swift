// The watch rules' ledger of handled files: which file, in which form, was handled how.
// A file handled successfully in its current form is not handled again, across restarts
// and crashes; that is what lets catch-up at start-up (and rescans after an overflow) find
// a file again without running its job twice. It lives in the state file's `file_ledger`
// table (Storage/StateDatabase.swift). The StateStore writes it, on the state queue, through
// the one read-write connection; the watcher reads it through a StateReader of its own.

import CSQLite
#if canImport(Glibc)
import Glibc
#endif

/// One handled file to write to the ledger.
public struct LedgerRecord: Sendable, Equatable {
    public let rule: String
    /// Relative to the rule's root, raw bytes (names need not be UTF-8).
    public let path: [UInt8]
    public let identity: FileIdentity
    /// A `RunOutcome` raw value, kept as text so that a ledger written by a newer
    /// watchkeeper with more outcomes still reads.
    public let outcome: String
    public let handledAt: WallTime

    /// The run that handled it, when known.
    public let run: LedgerRun?

    public init(rule: String, path: [UInt8], identity: FileIdentity, outcome: String, handledAt: WallTime, run: LedgerRun? = nil) {
        self.rule = rule
        self.path = path
        self.identity = identity
        self.outcome = outcome
        self.handledAt = handledAt
        self.run = run
    }
}

/// What the ledger keeps of the run that handled a file, for `watchkeeper history WATCH`.
public struct LedgerRun: Sendable, Equatable {
    public let runID: String
    public let startedAt: WallTime?
    public let durationNanoseconds: Int64
    public let exitCode: Int32?
    public let signal: Int32?

    public init(runID: String, startedAt: WallTime?, durationNanoseconds: Int64, exitCode: Int32?, signal: Int32?) {
        self.runID = runID
        self.startedAt = startedAt
        self.durationNanoseconds = durationNanoseconds
        self.exitCode = exitCode
        self.signal = signal
    }
}

/// One file as the ledger remembers it for a rule.
public struct LedgerEntry: Sendable, Equatable {
    public let path: [UInt8]
    public let identity: FileIdentity
    public let outcome: String
    public let handledAt: WallTime

    public init(path: [UInt8], identity: FileIdentity, outcome: String, handledAt: WallTime) {
        self.path = path
        self.identity = identity
        self.outcome = outcome
        self.handledAt = handledAt
    }
}

/// The ledger's statements over one connection, confined to that connection's queue; every
/// call is synchronous and short (one indexed statement, or one transaction per batch). The
/// StateStore's is read-write; a StateReader's is read-only and only reads.
public final class FileLedger {
    /// What `open` hands back: the ledger, and whether it had to start a new file.
    public struct Opened {
        public let ledger: FileLedger
        /// Set when the file was damaged and replaced: log it once.
        public let rebuilt: DamagedStateFile?
    }

    /// Records per transaction in `record`: one call never holds the write lock long enough
    /// for another process's connection (the sqlite3 CLI, a backup) to give up waiting, nor
    /// the state queue for long (4,096 upserts take a few milliseconds).
    public static let recordsPerTransaction = 4_096
    /// The same for `prune`'s deletions: each touches a page of the table and one of the
    /// identity index, so 256 add at most 2 MiB to the WAL (StateDatabase.walAutocheckpointPages).
    static let deletionsPerTransaction = 256
    /// How long a statement waits for another process's lock (the sqlite3 CLI, a backup).
    public static let busyTimeout: Duration = .milliseconds(2_000)

    public var path: String { connection.path }
    /// Transactions committed on the ledger's connection since it was opened.
    public var commits: UInt64 { connection.commits }
    /// False when the connection is lent (a StateReader's).
    private let ownsConnection: Bool

    /// The connection the statements run on: the StateStore's, or a StateReader's.
    let connection: SQLiteConnection

    init(connection: SQLiteConnection, ownsConnection: Bool) {
        self.connection = connection
        self.ownsConnection = ownsConnection
    }

    deinit {
        if ownsConnection { connection.close() }
    }

    /// What the messages call the file, and what moving it aside starts again with.
    static let options = (label: "file ledger", emptyState: "an empty file ledger and empty task state")

    /// Opens `<stateDirectory>/watchkeeper.sqlite3` (creating the directory, mode 0750, and
    /// the file if needed) and checks it with `PRAGMA quick_check`. A file that is not a
    /// database, is corrupt, is empty (0 bytes: a file we created never stays so), or
    /// cannot be opened for what it is (a symbolic link, which is moved and never followed,
    /// or a directory in its place, unreadable) is moved aside with its -wal and -shm to
    /// `<name>.damaged-<UTC time>`, and a new file takes its place: losing the ledger means
    /// handling some files again, which is better than never catching up again.
    /// `Opened.rebuilt` says so, once, for the log.
    ///
    /// Not treated as damage, so thrown: a state directory that cannot be created or written,
    /// a full disk or I/O error, a lock held past the busy timeout, and a schema from a newer
    /// release (that file is fine, we are too old).
    ///
    /// Open this before TaskStore: the task state lives in the same file, and a TaskStore
    /// connection to a file that is then moved aside would go on writing to the kept file.
    public static func open(stateDirectory: String, now: WallTime = .now()) throws(SQLiteError) -> Opened {
        let path = StateDatabase.path(inDirectory: stateDirectory)
        let recovery = DamagedStateFile.Recovery(path: path, label: options.label)
        try recovery.createDirectoryIfMissing()
        let reason: String
        do throws(SQLiteError) {
            if let foreign = recovery.unusableBeforeOpening() {
                reason = foreign
            } else {
                let connection = try StateDatabase.open(path: path, label: options.label, emptyState: options.emptyState,
                                                        busyTimeout: busyTimeout)
                let problems: [String]
                do throws(SQLiteError) {
                    problems = try connection.quickCheck()
                } catch {
                    connection.close()
                    throw error
                }
                guard !problems.isEmpty else {
                    return Opened(ledger: FileLedger(connection: connection, ownsConnection: true), rebuilt: nil)
                }
                // Closed before the move: the last connection to close deletes "<path>-wal",
                // which would then be the new file's.
                connection.close()
                reason = "PRAGMA quick_check found \(problems.count) problem(s), the first: \(problems[0])"
            }
        } catch {
            guard DamagedStateFile.isDamage(error), recovery.exists else { throw error }
            reason = error.description
        }
        let rebuilt = try recovery.moveAside(reason: reason, now: now)
        let connection = try StateDatabase.open(path: path, label: options.label, emptyState: options.emptyState,
                                                busyTimeout: busyTimeout)
        return Opened(ledger: FileLedger(connection: connection, ownsConnection: true), rebuilt: rebuilt)
    }

    /// Closes the connection (after `checkpoint()` for a clean stop). Idempotent.
    public func close() {
        if ownsConnection { connection.close() }
    }

    // MARK: - Writing

    /// Records the files in one transaction per `recordsPerTransaction` (group commit: a
    /// burst of handled files costs one commit per batch, not one per file). A later
    /// handling of the same (rule, path) replaces the entry. Nothing of a chunk is written
    /// when one of its records fails.
    public func record(_ entries: [LedgerRecord]) throws(SQLiteError) {
        guard !entries.isEmpty else { return }
        let action = Self.recordAction(entries)
        let values = try rows(entries, action: action)
        var start = 0
        while start < values.count {
            let end = min(values.count, start + Self.recordsPerTransaction)
            try connection.transaction(action) { () throws(SQLiteError) in
                try insert(values[start..<end], action: action)
            }
            start = end
        }
    }

    /// `record` inside a transaction the caller holds (the StateStore's group commit).
    func recordInTransaction(_ entries: [LedgerRecord]) throws(SQLiteError) {
        guard !entries.isEmpty else { return }
        let action = Self.recordAction(entries)
        try insert(try rows(entries, action: action)[...], action: action)
    }

    private static func recordAction(_ entries: [LedgerRecord]) -> String {
        let rules = Set(entries.map(\.rule)).sorted()
        return "record \(entries.count) handled file(s) of watch \(rules.map { "\"\($0)\"" }.joined(separator: ", ")) in"
    }

    private func rows(_ entries: [LedgerRecord], action: String) throws(SQLiteError) -> [[SQLiteValue]] {
        var values: [[SQLiteValue]] = []
        values.reserveCapacity(entries.count)
        for entry in entries {
            guard let handledAt = entry.handledAt.nanosecondsSinceEpoch else {
                throw connection.failure(
                    action: action, code: SQLITE_RANGE,
                    message: "\(entry.handledAt.secondsSinceEpoch) seconds since the epoch is outside the years 1678 to 2262 that nanosecond times can hold")
            }
            let run = entry.run
            values.append([
                .text(entry.rule), .blob(entry.path), .integer(Int64(bitPattern: entry.identity.device)),
                .integer(Int64(bitPattern: entry.identity.inode)), .integer(entry.identity.size),
                .integer(entry.identity.modifiedNanoseconds), .text(entry.outcome), .integer(handledAt),
                run.map { .text($0.runID) } ?? .null, run?.startedAt?.nanosecondsSinceEpoch.map { .integer($0) } ?? .null,
                run.map { .integer($0.durationNanoseconds) } ?? .null, run?.exitCode.map { .integer(Int64($0)) } ?? .null,
                run?.signal.map { .integer(Int64($0)) } ?? .null,
                entry.identity.changedNanoseconds.map { .integer($0) } ?? .null,
                entry.identity.bornNanoseconds.map { .integer($0) } ?? .null,
                entry.identity.generation.map { .integer(Int64(bitPattern: $0)) } ?? .null,
            ])
        }
        return values
    }

    private func insert(_ values: ArraySlice<[SQLiteValue]>, action: String) throws(SQLiteError) {
        for row in values {
            try connection.execute(
                """
                INSERT INTO file_ledger (rule, path, device, inode, size, modified_ns, outcome, handled_at,
                    run_id, started_at, duration_ns, exit_code, signal, changed_ns, born_ns, generation)
                VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
                ON CONFLICT (rule, path) DO UPDATE SET device = excluded.device, inode = excluded.inode,
                    size = excluded.size, modified_ns = excluded.modified_ns, outcome = excluded.outcome,
                    handled_at = excluded.handled_at, run_id = excluded.run_id, started_at = excluded.started_at,
                    duration_ns = excluded.duration_ns, exit_code = excluded.exit_code, signal = excluded.signal,
                    changed_ns = excluded.changed_ns, born_ns = excluded.born_ns, generation = excluded.generation
                """, row, action: action)
        }
    }

    /// A directory of the rule's tree was renamed from `fromPrefix` to `toPrefix` (both
    /// relative to the root, neither empty): the entries of the directory itself and of
    /// everything below `fromPrefix + "/"` now have the new paths, so the files inside are
    /// not handled again as new. Entries already under `toPrefix` are deleted first, when
    /// there is anything to move: rename only replaces an empty directory, so they describe
    /// files that are gone. Nothing to move changes nothing: a move written after the same
    /// files already moved (a directory's move, then one file of it found by identity before
    /// the first was committed) must not delete what the first put there. Returns the number
    /// of entries moved.
    @discardableResult
    public func move(rule: String, fromPrefix: [UInt8], toPrefix: [UInt8]) throws(SQLiteError) -> Int {
        guard fromPrefix != toPrefix else { return 0 }
        return try connection.transaction(Self.moveAction(rule, fromPrefix, toPrefix)) { () throws(SQLiteError) -> Int in
            try moveInTransaction(rule: rule, fromPrefix: fromPrefix, toPrefix: toPrefix)
        }
    }

    /// `move` inside a transaction the caller holds (the StateStore's group commit).
    @discardableResult
    func moveInTransaction(rule: String, fromPrefix: [UInt8], toPrefix: [UInt8]) throws(SQLiteError) -> Int {
        let action = Self.moveAction(rule, fromPrefix, toPrefix)
        guard fromPrefix != toPrefix else { return 0 }
        let slash = UInt8(ascii: "/")
        guard !fromPrefix.isEmpty, !toPrefix.isEmpty, !toPrefix.starts(with: fromPrefix + [slash]),
              !fromPrefix.starts(with: toPrefix + [slash]) else {
            throw connection.failure(action: action, code: SQLITE_MISUSE,
                                     message: "a directory cannot move to the root, from it, into itself or onto its own parent")
        }
        // Below a prefix means between prefix + "/" and prefix + "0" ('0' follows '/'):
        // BLOBs compare with memcmp, so that is a range of the primary key.
        func bounds(_ prefix: [UInt8]) -> [SQLiteValue] {
            [.blob(prefix), .blob(prefix + [slash]), .blob(prefix + [slash + 1])]
        }
        var moving = 0
        try connection.execute(
            "SELECT count(*) FROM file_ledger WHERE rule = ?1 AND (path = ?2 OR (path >= ?3 AND path < ?4))",
            [.text(rule)] + bounds(fromPrefix), action: action) { row in moving = Int(row.integer(0) ?? 0) }
        guard moving > 0 else { return 0 }
        try connection.execute(
            "DELETE FROM file_ledger WHERE rule = ?1 AND (path = ?2 OR (path >= ?3 AND path < ?4))",
            [.text(rule)] + bounds(toPrefix), action: action)
        // `||` yields TEXT holding the bytes unchanged (the file is UTF-8, nothing is
        // converted); CAST makes it a BLOB again so that it compares like every other path.
        try connection.execute(
            """
            UPDATE file_ledger SET path = CAST(?5 || substr(path, ?6) AS BLOB)
            WHERE rule = ?1 AND (path = ?2 OR (path >= ?3 AND path < ?4))
            """,
            [.text(rule)] + bounds(fromPrefix) + [.blob(toPrefix), .integer(Int64(fromPrefix.count + 1))], action: action)
        return connection.changes
    }

    private static func moveAction(_ rule: String, _ fromPrefix: [UInt8], _ toPrefix: [UInt8]) -> String {
        "move entries of watch \"\(rule)\" from \(printable(fromPrefix)) to \(printable(toPrefix)) in"
    }

    // MARK: - Reading

    public func entry(rule: String, path: [UInt8]) throws(SQLiteError) -> LedgerEntry? {
        var found: LedgerEntry?
        try connection.execute(
            "SELECT \(Self.entryColumns) FROM file_ledger WHERE rule = ?1 AND path = ?2",
            [.text(rule), .blob(path)], action: "read an entry of watch \"\(rule)\" from"
        ) { row in found = Self.entry(row) }
        return found
    }

    /// The rule's entries for the same file (FileIdentity.sameFile), newest handling first:
    /// where a file that now appears under a new name (its directory moved) was handled
    /// before. Hard links share an identity, hence a list. INDEXED BY because without
    /// ANALYZE statistics SQLite prefers the covering primary key's `rule = ?` prefix, which
    /// is the rule's whole ledger; the identity index finds the inode's rows directly, and
    /// the rest of the identity is compared here (which parts count depends on what the
    /// file system keeps).
    /// `renamed`: also the entries of which the file looks renamed (`FileIdentity.renamed`:
    /// only its change time moved), for a polled tree, where no event says what moved.
    public func entries(rule: String, identity: FileIdentity, renamed: Bool = false) throws(SQLiteError) -> [LedgerEntry] {
        var found: [LedgerEntry] = []
        try connection.execute(
            Self.identityLookup,
            [.text(rule), .integer(Int64(bitPattern: identity.inode)), .integer(Int64(bitPattern: identity.device)),
             .integer(identity.size), .integer(identity.modifiedNanoseconds)],
            action: "look up a file by identity in watch \"\(rule)\" of"
        ) { row in
            let entry = Self.entry(row)
            if renamed ? entry.identity.renamed(as: identity) : entry.identity.sameFile(as: identity) { found.append(entry) }
        }
        return found
    }

    static let entryColumns = "path, device, inode, size, modified_ns, outcome, handled_at, changed_ns, born_ns, generation"

    static let identityLookup = """
        SELECT \(entryColumns) FROM file_ledger INDEXED BY file_ledger_by_identity
        WHERE rule = ?1 AND inode = ?2 AND device = ?3 AND size = ?4 AND modified_ns = ?5
        ORDER BY handled_at DESC, path
        """

    /// The rule's files handled last, newest first (`watchkeeper history WATCH`), through the
    /// index in that order (schema 7): a scan and sort of a 1,000,000-entry rule took 0.5 s on
    /// the state queue, holding every write behind it. INDEXED BY, as for `identityLookup`.
    public func recent(rule: String, limit: Int) throws(SQLiteError) -> [(entry: LedgerEntry, run: LedgerRun?)] {
        var found: [(LedgerEntry, LedgerRun?)] = []
        try connection.execute(Self.recentLookup, [.text(rule), .integer(Int64(limit))],
                               action: "read the latest entries of watch \"\(rule)\" from") { row in
            let run = row.text(10).map { runID in
                LedgerRun(runID: runID, startedAt: row.integer(11).map(WallTime.init(nanosecondsSinceEpoch:)),
                          durationNanoseconds: row.integer(12) ?? 0, exitCode: row.integer(13).map { Int32(clamping: $0) },
                          signal: row.integer(14).map { Int32(clamping: $0) })
            }
            found.append((Self.entry(row), run))
        }
        return found
    }

    static let recentLookup = """
        SELECT \(entryColumns), run_id, started_at, duration_ns, exit_code, signal
        FROM file_ledger INDEXED BY file_ledger_by_recency WHERE rule = ?1 ORDER BY handled_at DESC, path LIMIT ?2
        """

    /// After a burst: the page cache goes back (see SQLiteConnection.releaseMemory).
    public func releaseMemory() {
        connection.releaseMemory()
    }

    public var cacheBytes: Int { connection.cacheBytes }

    public func count(rule: String) throws(SQLiteError) -> Int {
        var count = 0
        try connection.execute("SELECT count(*) FROM file_ledger WHERE rule = ?1", [.text(rule)],
                               action: "count the entries of watch \"\(rule)\" in") { row in count = Int(row.integer(0) ?? 0) }
        return count
    }

    // MARK: - Stopping

    /// For a clean stop: everything into the main file and the WAL truncated to zero
    /// bytes. In between, SQLite checkpoints every `wal_autocheckpoint` pages and truncates
    /// the WAL to `journal_size_limit` after each checkpoint, so it stays bounded.
    public func checkpoint() throws(SQLiteError) -> SQLiteConnection.CheckpointResult {
        try connection.checkpoint()
    }

    // MARK: - Helpers

    private static func entry(_ row: SQLiteRow) -> LedgerEntry {
        LedgerEntry(
            path: row.blob(0) ?? [],
            identity: FileIdentity(device: UInt64(bitPattern: row.integer(1) ?? 0), inode: UInt64(bitPattern: row.integer(2) ?? 0),
                                   size: row.integer(3) ?? 0, modifiedNanoseconds: row.integer(4) ?? 0,
                                   changedNanoseconds: row.integer(7), bornNanoseconds: row.integer(8),
                                   generation: row.integer(9).map { UInt64(bitPattern: $0) }),
            outcome: row.text(5) ?? "", handledAt: WallTime(nanosecondsSinceEpoch: row.integer(6) ?? 0))
    }

    static func lstat(_ path: [UInt8], _ info: inout stat) -> Int32 {
        (path + [0]).withUnsafeBufferPointer { bytes in
            Glibc.lstat(UnsafeRawPointer(bytes.baseAddress!).assumingMemoryBound(to: CChar.self), &info)
        }
    }

    static func printable(_ path: [UInt8]) -> String {
        "\"" + String(decoding: path, as: UTF8.self) + "\""
    }
}
