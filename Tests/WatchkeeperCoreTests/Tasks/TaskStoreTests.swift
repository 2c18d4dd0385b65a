import CSQLite
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Real SQLite files in a temporary directory; a second connection, a second store or
/// the sqlite3 CLI play the other processes that can touch the same file.
final class TaskStoreTests: ScratchDirectoryTestCase {
    private var databasePath: String { directory + "/" + TaskStore.fileName }

    private func time(_ seconds: Int64, _ nanoseconds: Int32 = 0) -> WallTime {
        WallTime(secondsSinceEpoch: seconds, nanoseconds: nanoseconds)
    }

    private func run(_ task: String, _ number: Int, outcome: String = "ok") -> StoredRun {
        StoredRun(
            task: task, runID: "\(task)-\(number)", attempt: 1, outcome: outcome, scheduledAt: time(1_800_000_000 + Int64(number)),
            startedAt: time(1_800_000_000 + Int64(number), 5), finishedAt: time(1_800_000_001 + Int64(number), 7),
            durationNanoseconds: 1_000_000_002, exitCode: 0, signal: nil, expiry: nil)
    }

    /// First column of every row, as text, through a connection of our own.
    private func query(_ sql: String, path: String? = nil) throws -> [String] {
        try queryRows(sql, database: path ?? databasePath)
    }

    private func openFailure(directory: String) -> SQLiteError? {
        do {
            _ = try TaskStore(directory: directory)
            return nil
        } catch {
            return error
        }
    }

    // MARK: - Opening

    func testOpen_inANewDirectory_createsTheFileWithMode0640_theSchemaVersion_andAWALJournal() throws {
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        XCTAssertEqual(store.path, databasePath)

        var info = stat()
        XCTAssertEqual(stat(databasePath, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o640)
        XCTAssertEqual(try query("PRAGMA user_version"), [String(TaskStore.schemaVersion)])
        XCTAssertEqual(TaskStore.schemaVersion, 7, "1: task state and history, 2: the file ledger, 3: the ledger by identity, 4: the run that handled each file, 5: change and birth time and generation, 6: where a fleet fire ran, 7: the ledger by recency")
        XCTAssertEqual(try query("PRAGMA journal_mode"), ["wal"])
        XCTAssertEqual(try query("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name"), ["file_ledger", "run_history", "task_state"])
    }

    func testOpen_inANonexistentDirectory_failsAskingWhetherTheDirectoryExists() {
        let missing = directory + "/no/such/dir"
        guard let error = openFailure(directory: missing) else { return XCTFail("opened a store in \(missing)") }
        XCTAssertEqual(
            error.description,
            "unable to open task state \(missing)/watchkeeper.sqlite3: No such file or directory (does the state directory \(missing) exist?)")
        XCTAssertEqual(error.path, missing + "/watchkeeper.sqlite3")
    }

    func testOpen_inANonWritableDirectory_failsAskingWhetherItIsWritable() throws {
        // Root ignores directory modes, but sysfs refuses to create files even for root.
        let readOnly: String
        if geteuid() == 0 {
            readOnly = "/sys"
        } else {
            readOnly = directory + "/read-only"
            try FileManager.default.createDirectory(atPath: readOnly, withIntermediateDirectories: false)
            XCTAssertEqual(chmod(readOnly, 0o500), 0)
        }
        defer { if readOnly != "/sys" { chmod(readOnly, 0o700) } }
        guard let error = openFailure(directory: readOnly) else { return XCTFail("opened a store in \(readOnly)") }
        XCTAssertEqual(
            error.description,
            "unable to open task state \(readOnly)/watchkeeper.sqlite3: Permission denied (is the state directory \(readOnly) writable by uid \(geteuid())?)")
    }

    func testOpen_anExistingFileMadeReadOnly_orInADirectoryMadeReadOnly_failsAskingWhetherItIsWritable() throws {
        try XCTSkipIf(geteuid() == 0, "root writes read-only files and directories")
        try TaskStore(directory: directory).close()

        XCTAssertEqual(chmod(databasePath, 0o440), 0)
        guard let fileError = openFailure(directory: directory) else { return XCTFail("opened a read-only file") }
        XCTAssertEqual(
            fileError.description,
            "unable to open task state \(databasePath): the file is read-only to uid \(geteuid()) (is the state directory \(directory) writable by uid \(geteuid())?)")

        // The file is writable but SQLite cannot create its -wal and -shm files beside it.
        XCTAssertEqual(chmod(databasePath, 0o640), 0)
        XCTAssertEqual(chmod(directory, 0o500), 0)
        guard let directoryError = openFailure(directory: directory) else { return XCTFail("opened a file in a read-only directory") }
        XCTAssertTrue(directoryError.description.hasPrefix("unable to open task state \(databasePath): "), directoryError.description)
        XCTAssertTrue(directoryError.description.hasSuffix("(is the state directory \(directory) writable by uid \(geteuid())?)"),
                      directoryError.description)
    }

    func testOpen_aFileThatIsNotADatabase_failsSayingToMoveItAside_andLeavesTheFileAlone() throws {
        let garbage = Data(String(repeating: "this is not a database\n", count: 200).utf8)
        try garbage.write(to: URL(fileURLWithPath: databasePath))
        guard let error = openFailure(directory: directory) else { return XCTFail("opened a garbage file as a store") }
        XCTAssertEqual(error.code & 0xff, SQLITE_NOTADB)
        XCTAssertEqual(
            error.description,
            "unable to open task state \(databasePath): file is not a database (the file is damaged or not watchkeeper's: move it aside and watchkeeper starts again with empty task state)")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: databasePath)), garbage)
    }

    func testOpen_aDatabaseFromANewerRelease_failsNamingBothSchemaVersions() throws {
        try TaskStore(directory: directory).close()
        _ = try query("PRAGMA user_version = 99")
        guard let error = openFailure(directory: directory) else { return XCTFail("opened a schema version 99 file") }
        XCTAssertEqual(
            error.description,
            "unable to open task state \(databasePath): its schema version 99 is newer than this watchkeeper's (\(TaskStore.schemaVersion)): it was written by a later release; upgrade, or move the file aside to start with empty task state")
        XCTAssertEqual(try query("PRAGMA user_version"), ["99"])
    }

    // MARK: - Recording and reading

    func testRecordRun_thenStateAndHistory_returnEveryFieldExactly_includingNanosecondsAndNils() throws {
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        let full = StoredRun(
            task: "backup", runID: "00ff00ff00ff00ff", attempt: 3, outcome: "expired",
            scheduledAt: time(1_900_000_000, 999_999_999), startedAt: time(-86_401, 1), finishedAt: time(9_000_000_000, 123_456_789),
            durationNanoseconds: Int64.max, exitCode: -1, signal: 9, expiry: "budget")
        let sparse = StoredRun(
            task: "backup", runID: "skipped-1", attempt: 1, outcome: "skipped-overlap", scheduledAt: nil, startedAt: nil,
            finishedAt: time(0, 0), durationNanoseconds: 0, exitCode: nil, signal: nil, expiry: nil)

        try store.recordRun(full)
        XCTAssertEqual(try store.history(task: "backup", limit: 10), [full])
        XCTAssertEqual(
            try store.state(task: "backup"),
            StoredTaskState(task: "backup", lastScheduledAt: nil, lastStartedAt: time(-86_401, 1),
                            lastFinishedAt: time(9_000_000_000, 123_456_789), lastOutcome: "expired", lastRunID: "00ff00ff00ff00ff"))

        try store.recordRun(sparse)
        XCTAssertEqual(try store.history(task: "backup", limit: 10), [sparse, full])
        XCTAssertEqual(
            try store.state(task: "backup"),
            StoredTaskState(task: "backup", lastScheduledAt: nil, lastStartedAt: nil, lastFinishedAt: time(0, 0),
                            lastOutcome: "skipped-overlap", lastRunID: "skipped-1"))
        XCTAssertNil(try store.state(task: "never-ran"))
        XCTAssertEqual(try store.history(task: "never-ran", limit: 10), [])
    }

    func testRecordRun_fromARunRecord_keepsItsExitSignalExpiryAndDuration() throws {
        let record = RunRecord(
            name: "report", runID: "abc", attempt: 2, outcome: .expired, scheduledAt: time(10, 1), startedAt: time(11, 2),
            finishedAt: time(20, 3), duration: .nanoseconds(9_000_000_001), exit: .signaled(SIGKILL, coreDumped: false),
            expiry: .budget, lateness: nil, detail: nil)
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        try store.recordRun(StoredRun(record))
        XCTAssertEqual(
            try store.history(task: "report", limit: 1),
            [StoredRun(task: "report", runID: "abc", attempt: 2, outcome: "expired", scheduledAt: time(10, 1), startedAt: time(11, 2),
                       finishedAt: time(20, 3), durationNanoseconds: 9_000_000_001, exitCode: nil, signal: SIGKILL, expiry: "budget")])
    }

    func testRecordRun_withATimeBeyond2262_failsWithoutRecordingAnything() throws {
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        let tooLate = StoredRun(
            task: "t", runID: "r", attempt: 1, outcome: "ok", scheduledAt: nil, startedAt: nil,
            finishedAt: time(Int64.max / 2), durationNanoseconds: 0, exitCode: 0, signal: nil, expiry: nil)
        XCTAssertThrowsError(try store.recordRun(tooLate)) { error in
            XCTAssertTrue("\(error)".hasPrefix("unable to record a run of task \"t\" in task state \(self.databasePath): "), "\(error)")
            XCTAssertTrue("\(error)".contains("outside the years 1678 to 2262"), "\(error)")
        }
        XCTAssertNil(try store.state(task: "t"))
    }

    func testHistory_isNewestFirst_andTrimmedToTheLimitPerTask_withoutTouchingOtherTasks() throws {
        let store = try TaskStore(directory: directory, historyLimit: 3)
        defer { store.close() }
        for number in 1 ... 2 { try store.recordRun(run("other", number)) }
        for number in 1 ... 5 { try store.recordRun(run("busy", number)) }
        try store.recordRun(run("other", 3))

        XCTAssertEqual(try store.history(task: "busy", limit: 100).map(\.runID), ["busy-5", "busy-4", "busy-3"])
        XCTAssertEqual(try store.history(task: "busy", limit: 2).map(\.runID), ["busy-5", "busy-4"])
        XCTAssertEqual(try store.history(task: "busy", limit: 0), [])
        XCTAssertEqual(try store.history(task: "other", limit: 100).map(\.runID), ["other-3", "other-2", "other-1"])
        XCTAssertEqual(try query("SELECT count(*) FROM run_history"), ["6"])
    }

    func testRecordScheduled_updatesOnlyTheScheduledTime_andRecordRunLeavesIt() throws {
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        try store.recordScheduled(task: "fresh", scheduledAt: time(100, 42))
        XCTAssertEqual(
            try store.state(task: "fresh"),
            StoredTaskState(task: "fresh", lastScheduledAt: time(100, 42), lastStartedAt: nil, lastFinishedAt: nil,
                            lastOutcome: nil, lastRunID: nil))

        let finished = run("nightly", 1)
        try store.recordScheduled(task: "nightly", scheduledAt: time(1_800_000_001))
        try store.recordRun(finished)
        try store.recordScheduled(task: "nightly", scheduledAt: time(1_800_086_401, 3))
        XCTAssertEqual(
            try store.state(task: "nightly"),
            StoredTaskState(task: "nightly", lastScheduledAt: time(1_800_086_401, 3), lastStartedAt: finished.startedAt,
                            lastFinishedAt: finished.finishedAt, lastOutcome: "ok", lastRunID: "nightly-1"))
        XCTAssertEqual(try store.history(task: "nightly", limit: 10), [finished])

        // A run scheduled earlier finishing now must not move the scheduled time back.
        try store.recordRun(run("nightly", 0))
        XCTAssertEqual(try store.state(task: "nightly")?.lastScheduledAt, time(1_800_086_401, 3))
    }

    func testForget_deletesTheStateOfTasksNoLongerConfigured_butKeepsTheirHistory() throws {
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        try store.recordRun(run("kept", 1))
        try store.recordRun(run("removed", 1))
        try store.recordScheduled(task: "removed-too", scheduledAt: time(5))

        try store.forget(tasksNotIn: ["kept", "configured-but-never-ran"])
        XCTAssertNotNil(try store.state(task: "kept"))
        XCTAssertNil(try store.state(task: "removed"))
        XCTAssertNil(try store.state(task: "removed-too"))
        XCTAssertEqual(try store.history(task: "removed", limit: 10), [run("removed", 1)])
    }

    // MARK: - Restarts, other processes, crashes

    func testReopening_afterClose_keepsStateAndHistory_likeADaemonRestart() throws {
        let first = try TaskStore(directory: directory, historyLimit: 2)
        try first.recordScheduled(task: "a", scheduledAt: time(1_800_000_009, 9))
        for number in 1 ... 3 { try first.recordRun(run("a", number)) }
        let state = try first.state(task: "a")
        first.close()
        first.close()

        let second = try TaskStore(directory: directory, historyLimit: 2)
        defer { second.close() }
        XCTAssertEqual(try second.state(task: "a"), state)
        XCTAssertEqual(try second.state(task: "a")?.lastScheduledAt, time(1_800_000_009, 9))
        XCTAssertEqual(try second.history(task: "a", limit: 10), [run("a", 3), run("a", 2)])
        try second.recordRun(run("a", 4))
        XCTAssertEqual(try second.history(task: "a", limit: 10).map(\.runID), ["a-4", "a-3"])
    }

    func testTwoStoresOnTheSameFile_writingAtTheSameTime_bothSucceed_andTheFileStaysIntact() throws {
        let store = try TaskStore(directory: directory, historyLimit: 100)
        defer { store.close() }
        let directory = self.directory
        let otherFinished = DispatchSemaphore(value: 0)
        let otherError = ErrorBox()
        Thread.detachNewThread {
            do {
                let other = try TaskStore(directory: directory, historyLimit: 100)
                for number in 1 ... 300 {
                    try other.recordRun(StoredRun(
                        task: "b", runID: "b-\(number)", attempt: 1, outcome: "ok", scheduledAt: nil, startedAt: nil,
                        finishedAt: WallTime(secondsSinceEpoch: Int64(number), nanoseconds: 0), durationNanoseconds: 0,
                        exitCode: 0, signal: nil, expiry: nil))
                    _ = try other.history(task: "a", limit: 5)
                }
                other.close()
            } catch {
                otherError.set("\(error)")
            }
            otherFinished.signal()
        }
        for number in 1 ... 300 {
            try store.recordRun(run("a", number))
            _ = try store.state(task: "b")
        }
        XCTAssertEqual(otherFinished.wait(timeout: .now() + 60), .success)
        XCTAssertNil(otherError.value)

        XCTAssertEqual(try store.history(task: "a", limit: 1_000).count, 100)
        XCTAssertEqual(try store.history(task: "b", limit: 1_000).count, 100)
        XCTAssertEqual(try store.state(task: "b")?.lastRunID, "b-300")
        XCTAssertEqual(try store.state(task: "a")?.lastRunID, "a-300")
        XCTAssertEqual(try query("PRAGMA integrity_check"), ["ok"])
    }

    func testRecordRun_whileAnotherConnectionBrieflyHoldsTheWriteLock_waitsForIt() throws {
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        let locked = DispatchSemaphore(value: 0)
        let attempting = DispatchSemaphore(value: 0)
        let released = DispatchSemaphore(value: 0)
        let holder = HolderLog()
        let path = databasePath
        // Held from before the write is attempted until well into it, and released well
        // within the busy timeout: the write can only succeed by waiting for the commit.
        let hold = min(0.3, TaskStore.busyTimeout.secondsDouble / 2 / testDeadlineScale)
        Thread.detachNewThread {
            defer { released.signal() }
            var connection: OpaquePointer?
            defer { sqlite3_close(connection) }
            guard sqlite3_open_v2(path, &connection, SQLITE_OPEN_READWRITE, nil) == SQLITE_OK,
                  sqlite3_exec(connection, "BEGIN IMMEDIATE; INSERT INTO task_state (task) VALUES ('holder')", nil, nil, nil) == SQLITE_OK
            else { return holder.fail("unable to take the write lock: \(String(cString: sqlite3_errmsg(connection)))") }
            locked.signal()
            guard attempting.wait(timeout: .now() + 10 * testDeadlineScale) == .success else { return holder.fail("the write was never attempted") }
            letTimePass(hold)
            holder.committing()
            guard sqlite3_exec(connection, "COMMIT", nil, nil, nil) == SQLITE_OK else {
                return holder.fail("unable to commit: \(String(cString: sqlite3_errmsg(connection)))")
            }
        }
        XCTAssertEqual(locked.wait(timeout: .now() + 10 * testDeadlineScale), .success, "the other connection never took the lock: \(holder.failure ?? "")")
        attempting.signal()
        try store.recordRun(run("a", 1))
        XCTAssertTrue(holder.hadCommitted, "the write succeeded while the other connection held the lock")
        XCTAssertEqual(released.wait(timeout: .now() + 10 * testDeadlineScale), .success)
        XCTAssertNil(holder.failure)
        XCTAssertNotNil(try store.state(task: "holder"))
        XCTAssertEqual(try store.history(task: "a", limit: 1), [run("a", 1)])
    }

    func testRecordRun_whileAnotherConnectionHoldsTheWriteLockPastTheBusyTimeout_failsAskingAboutASecondWatchkeeper() throws {
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        var connection: OpaquePointer?
        XCTAssertEqual(sqlite3_open_v2(databasePath, &connection, SQLITE_OPEN_READWRITE, nil), SQLITE_OK)
        defer { sqlite3_close(connection) }
        XCTAssertEqual(sqlite3_exec(connection, "BEGIN IMMEDIATE", nil, nil, nil), SQLITE_OK)

        XCTAssertThrowsError(try store.recordRun(run("a", 1))) { error in
            XCTAssertEqual(
                "\(error)",
                "unable to record a run of task \"a\" in task state \(self.databasePath): database is locked (another process held it locked for more than 2s: is a second watchkeeper using the same state directory?)")
        }
        XCTAssertEqual(sqlite3_exec(connection, "ROLLBACK", nil, nil, nil), SQLITE_OK)
        try store.recordRun(run("a", 1))
        XCTAssertEqual(try store.history(task: "a", limit: 10), [run("a", 1)])
    }

    func testOpen_afterAWritingProcessWasKilledWithSIGKILL_keepsWhatItCommitted_andDropsItsOpenTransaction() throws {
        let cli = "/usr/bin/sqlite3"
        try XCTSkipUnless(FileManager.default.isExecutableFile(atPath: cli), "\(cli) is not installed (Debian package sqlite3)")
        let store = try TaskStore(directory: directory)
        try store.recordRun(run("before", 1))
        store.close()

        // The CLI commits one row (left in the WAL: the connection never closes, so never
        // checkpoints), then opens a large transaction whose pages spill into the WAL
        // uncommitted (a tiny page cache), and is killed while it holds it.
        let marker = directory + "/in-transaction"
        let process = Process()
        process.executableURL = URL(fileURLWithPath: cli)
        process.arguments = [databasePath]
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let script = """
            PRAGMA busy_timeout = 5000;
            INSERT INTO task_state (task, last_outcome, last_run_id) VALUES ('cli', 'ok', 'committed');
            PRAGMA cache_size = 5;
            BEGIN IMMEDIATE;
            WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)
              INSERT INTO run_history (task, run_id, attempt, outcome, finished_at, duration_ns)
              SELECT 'uncommitted', printf('%016x', i), 1, 'ok', i, 0 FROM n;
            UPDATE task_state SET last_outcome = 'uncommitted' WHERE task = 'cli';
            .shell touch \(marker)

            """
        input.fileHandleForWriting.write(Data(script.utf8))
        XCTAssertTrue(waitFor(30, every: .milliseconds(10)) { FileManager.default.fileExists(atPath: marker) },
                      "sqlite3 never reached the open transaction")
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationReason, .uncaughtSignal)
        let walSize = (try? FileManager.default.attributesOfItem(atPath: databasePath + "-wal"))?[.size] as? Int ?? 0
        XCTAssertGreaterThan(walSize, 0, "the killed process left no WAL to recover")

        let reopened = try TaskStore(directory: directory)
        defer { reopened.close() }
        XCTAssertEqual(try reopened.history(task: "before", limit: 10), [run("before", 1)])
        XCTAssertEqual(try reopened.state(task: "cli")?.lastOutcome, "ok")
        XCTAssertEqual(try reopened.history(task: "uncommitted", limit: 10), [])
        try reopened.recordRun(run("after", 1))
        XCTAssertEqual(try reopened.history(task: "after", limit: 10), [run("after", 1)])
        XCTAssertEqual(try query("PRAGMA integrity_check"), ["ok"])
    }
}

/// What the connection holding the lock did, read by the test's thread.
private final class HolderLog: @unchecked Sendable {
    private let lock = NSLock()
    private var committed = false
    private var problem: String?

    /// Said just before COMMIT: a write that returns before this was not blocked by the lock.
    func committing() { lock.withLock { committed = true } }
    func fail(_ text: String) { lock.withLock { problem = text } }
    var hadCommitted: Bool { lock.withLock { committed } }
    var failure: String? { lock.withLock { problem } }
}

/// A string set by a background thread and read after it signalled.
private final class ErrorBox: @unchecked Sendable {
    private let lock = NSLock()
    private var text: String?

    func set(_ value: String) { lock.withLock { text = value } }
    var value: String? { lock.withLock { text } }
}
