// A read-only connection to the state file for one owner's queue: the watcher's admission
// asks the ledger whether a file was handled before, and the scheduler reads a task's last
// state and runs at start-up, without a hop to the state queue and without waiting for it.
// WAL lets a reader see the last committed state while the StateStore writes; what is not
// committed yet is the owner's to remember (the watcher's `WatchRule.handled`).

/// Confined to its owner's serial queue, like every connection.
public final class StateReader {
    private let connection: SQLiteConnection
    private let ledger: FileLedger
    private let tasks: TaskStore

    /// Short: a reader in WAL mode waits only while another connection recovers the WAL or
    /// a checkpoint resets it, both brief; longer would be a stall of the owner's queue.
    public static let busyTimeout: Duration = .milliseconds(500)

    /// Opens `path` read-only. The StateStore must have opened it first: it creates the
    /// file, migrates it and sets WAL mode, none of which a reader does.
    public init(path: String) throws(SQLiteError) {
        let options = SQLiteConnection.Options(
            label: "state file", directoryRole: "state directory",
            damageAdvice: "the file is damaged or not watchkeeper's: it is moved aside at the next start",
            fileMode: StateDatabase.fileMode, busyTimeout: Self.busyTimeout, readOnly: true)
        connection = try SQLiteConnection(path: path, options: options)
        ledger = FileLedger(connection: connection, ownsConnection: false)
        tasks = TaskStore(connection: connection)
    }

    deinit {
        connection.close()
    }

    public var path: String { connection.path }

    /// Idempotent; any read afterwards is a programming error.
    public func close() {
        connection.close()
    }

    // MARK: The file ledger

    public func entry(rule: String, path: [UInt8]) throws(SQLiteError) -> LedgerEntry? {
        try ledger.entry(rule: rule, path: path)
    }

    public func entries(rule: String, identity: FileIdentity, renamed: Bool = false) throws(SQLiteError) -> [LedgerEntry] {
        try ledger.entries(rule: rule, identity: identity, renamed: renamed)
    }

    public func count(rule: String) throws(SQLiteError) -> Int {
        try ledger.count(rule: rule)
    }

    // MARK: Task state

    public func state(task: String) throws(SQLiteError) -> StoredTaskState? {
        try tasks.state(task: task)
    }

    public func history(task: String, limit: Int) throws(SQLiteError) -> [StoredRun] {
        try tasks.history(task: task, limit: limit)
    }

    // MARK: Memory

    /// After a burst: the page cache goes back (see SQLiteConnection.releaseMemory).
    public func releaseMemory() {
        connection.releaseMemory()
    }

    public var cacheBytes: Int { connection.cacheBytes }
}
