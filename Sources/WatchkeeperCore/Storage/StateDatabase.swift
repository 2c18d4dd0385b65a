// The state directory's SQLite file, watchkeeper.sqlite3, holds the task state (TaskStore)
// and the watch rules' file ledger (FileLedger). The daemon's StateStore opens it first and
// alone, migrates it and writes it; the owners read it through StateReaders. A file has one
// user_version, so every opener applies the one list of migrations below (tools and tests
// open it with TaskStore or FileLedger directly), and none can mistake another's tables for
// a newer release's.

#if canImport(Glibc)
import Glibc
#endif

public enum StateDatabase {
    public static let fileName = "watchkeeper.sqlite3"
    /// Group-readable, like the unit's StateDirectoryMode=0750 and UMask=0027: an operator
    /// in the service's group can read the history and the ledger with the sqlite3 CLI.
    /// Both owners create the file with this mode, so it does not depend on which opens first.
    public static let fileMode: mode_t = 0o640

    /// Schema changes in order: entry i takes the file from `user_version` i to i + 1. A
    /// released entry is never edited; a change appends one.
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
        // 3: a file that moved inside a rule's tree is found by its identity, not by a scan of
        // the rule's whole ledger. The inode alone nearly always picks one row; the device,
        // size and modification time are compared on that row.
        [
            "CREATE INDEX file_ledger_by_identity ON file_ledger (rule, inode, device)",
        ],
        // 4: the run that handled each file, for `watchkeeper history WATCH`: its ID, start,
        // duration and exit (NULL in entries written before).
        [
            "ALTER TABLE file_ledger ADD COLUMN run_id TEXT",
            "ALTER TABLE file_ledger ADD COLUMN started_at INTEGER",
            "ALTER TABLE file_ledger ADD COLUMN duration_ns INTEGER",
            "ALTER TABLE file_ledger ADD COLUMN exit_code INTEGER",
            "ALTER TABLE file_ledger ADD COLUMN signal INTEGER",
        ],
        // 5: what tells a file from one that reuses its inode with a preserved mtime (issue
        // 22; FileIdentity): the change time, the birth time and the inode generation. NULL
        // in rows written before, which are compared as they were (FileIdentity.sameFile).
        [
            "ALTER TABLE file_ledger ADD COLUMN changed_ns INTEGER",
            "ALTER TABLE file_ledger ADD COLUMN born_ns INTEGER",
            "ALTER TABLE file_ledger ADD COLUMN generation INTEGER",
        ],
        // 6: where a fleet task's fire ran (issue 25; docs/fleet.md): this host's [cluster]
        // name, or the host that claimed it, whose run ID is then the run's. NULL for runs
        // of tasks that are not fleet tasks, and in rows written before.
        [
            "ALTER TABLE run_history ADD COLUMN host TEXT",
        ],
        // 7: `watchkeeper history WATCH` reads a rule's latest entries through an index in
        // its order: over 1,000,000 entries a scan and sort took 0.4-0.6 s on the state queue,
        // and 16 callers waited 3.3 s (issue 36; docs/measurements/ledger.md).
        [
            "CREATE INDEX file_ledger_by_recency ON file_ledger (rule, handled_at DESC, path)",
        ],
    ]

    /// The `PRAGMA user_version` this build writes and understands.
    public static var schemaVersion: Int { migrations.count }

    /// 1 MiB of 4 KiB pages: the WAL is checkpointed when a commit takes it past this, so a
    /// transaction's pages on top (a prune's 256 deletions, a group commit) keep it under
    /// `journal_size_limit`'s 4 MiB (docs/configuration.md, "The ledger's size"). At 1,000
    /// pages a start-up prune of 1,000,000 entries took it to 5.4 MB.
    static let walAutocheckpointPages: Int32 = 256

    public static func path(inDirectory directory: String) -> String {
        (directory.hasSuffix("/") ? directory : directory + "/") + fileName
    }

    /// Opens (creating if needed) the state file at `path`, configured like every other
    /// connection to it, and migrates it. `label` names it in messages ("task state", "file
    /// ledger"); `emptyState` is what moving the file aside starts again with.
    static func open(path: String, label: String, emptyState: String, busyTimeout: Duration) throws(SQLiteError) -> SQLiteConnection {
        let options = SQLiteConnection.Options(
            label: label, directoryRole: "state directory",
            damageAdvice: "the file is damaged or not watchkeeper's: move it aside and watchkeeper starts again with \(emptyState)",
            fileMode: fileMode, busyTimeout: busyTimeout, walAutocheckpointPages: walAutocheckpointPages, incrementalVacuum: true)
        let connection = try SQLiteConnection(path: path, options: options)
        do throws(SQLiteError) {
            try connection.migrate(migrations) { found, known in
                "its schema version \(found) is newer than this watchkeeper's (\(known)): it was written by a later release; upgrade, or move the file aside to start with \(emptyState)"
            }
        } catch {
            connection.close()
            throw error
        }
        return connection
    }
}

/// Times in the state file are INTEGER nanoseconds since the epoch: exact, and enough for
/// the years 1678 to 2262.
extension WallTime {
    /// Nil outside the years 1678 to 2262.
    public var nanosecondsSinceEpoch: Int64? {
        let (product, productOverflow) = secondsSinceEpoch.multipliedReportingOverflow(by: 1_000_000_000)
        let (sum, sumOverflow) = product.addingReportingOverflow(Int64(nanoseconds))
        return productOverflow || sumOverflow ? nil : sum
    }

    /// Floor division, so instants before 1970 keep 0 ≤ nanoseconds < 10⁹ like timespec.
    public init(nanosecondsSinceEpoch value: Int64) {
        var seconds = value / 1_000_000_000
        var nanoseconds = value % 1_000_000_000
        if nanoseconds < 0 {
            seconds -= 1
            nanoseconds += 1_000_000_000
        }
        self.init(secondsSinceEpoch: seconds, nanoseconds: Int32(nanoseconds))
    }
}
