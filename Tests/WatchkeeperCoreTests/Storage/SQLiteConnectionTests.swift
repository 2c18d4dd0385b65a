import CSQLite
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// Real files in a temporary directory; what TaskStore and FileLedger build on.
final class SQLiteConnectionTests: ScratchDirectoryTestCase {
    private var path: String { directory + "/test.sqlite3" }

    private func scalar(_ connection: SQLiteConnection, _ sql: String) throws -> Int64? {
        var value: Int64?
        try connection.execute(sql, action: "read") { row in value = row.integer(0) }
        return value
    }

    func testOpen_createsTheFileWithTheRequestedMode_inWALMode_withTheWALBounded() throws {
        let connection = try SQLiteConnection(path: path, options: .init(journalSizeLimitBytes: 65_536, walAutocheckpointPages: 77))
        defer { connection.close() }
        var info = stat()
        XCTAssertEqual(stat(path, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o600)
        var mode = ""
        try connection.execute("PRAGMA journal_mode", action: "read") { row in mode = row.text(0) ?? "" }
        XCTAssertEqual(mode, "wal")
        XCTAssertEqual(try scalar(connection, "PRAGMA journal_size_limit"), 65_536)
        XCTAssertEqual(try scalar(connection, "PRAGMA wal_autocheckpoint"), 77)
        XCTAssertEqual(try scalar(connection, "PRAGMA busy_timeout"), 2_000)
        XCTAssertEqual(connection.directory, directory)
    }

    func testOpen_throughASymbolicLink_failsSayingSo_andCreatesNothingAtTheTarget() throws {
        let target = directory + "/elsewhere.sqlite3"
        XCTAssertEqual(symlink(target, path), 0)
        XCTAssertThrowsError(try SQLiteConnection(path: path, options: .init(label: "task state"))) { error in
            let error = error as! SQLiteError
            XCTAssertEqual(error.code, SQLiteConnection.cantOpenSymlink, error.description)
            XCTAssertTrue(error.description.hasPrefix("unable to open task state \(self.path): "), error.description)
            XCTAssertTrue(error.description.hasSuffix("(it is a symbolic link, which watchkeeper does not follow: put the file itself there)"),
                          error.description)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: target))
    }

    func testOpen_throughALinkedDirectory_failsNamingTheDirectoryNotTheFile() throws {
        let real = directory + "/real"
        XCTAssertEqual(mkdir(real, 0o700), 0)
        XCTAssertEqual(symlink(real, directory + "/linked"), 0)
        let linkedPath = directory + "/linked/state.sqlite3"
        XCTAssertThrowsError(try SQLiteConnection(path: linkedPath, options: .init(label: "task state", directoryRole: "state directory"))) { error in
            let error = error as! SQLiteError
            XCTAssertEqual(error.code, SQLiteConnection.cantOpenSymlink, error.description)
            XCTAssertTrue(error.description.hasSuffix("(a directory on its path is a symbolic link, which watchkeeper does not follow: name the state directory by its real path)"),
                          error.description)
        }
    }

    func testExecute_bindsAndReadsBackEveryKindOfValue_includingInvalidUTF8AndEmptyBlobs() throws {
        let connection = try SQLiteConnection(path: path)
        defer { connection.close() }
        try connection.executeOnce("CREATE TABLE t (i INTEGER, s TEXT, b BLOB, n BLOB)", action: "create")
        let bytes: [UInt8] = [0xff, 0x00, 0x2f, 0x0a]
        for blob in [bytes, []] {
            try connection.execute("INSERT INTO t VALUES (?1, ?2, ?3, ?4)", [.integer(.min), .text("é\n"), .blob(blob), .null], action: "insert")
        }
        var rows: [(Int64?, String?, [UInt8]?, [UInt8]?, Bool)] = []
        try connection.execute("SELECT i, s, b, n FROM t ORDER BY rowid", action: "read") { row in
            rows.append((row.integer(0), row.text(1), row.blob(2), row.blob(3), row.isNull(3)))
        }
        XCTAssertEqual(rows.count, 2)
        XCTAssertEqual(rows[0].0, .min)
        XCTAssertEqual(rows[0].1, "é\n")
        XCTAssertEqual(rows[0].2, bytes)
        XCTAssertEqual(rows[1].2, [], "an empty blob stays an empty blob, not NULL")
        XCTAssertNil(rows[0].3)
        XCTAssertTrue(rows[0].4)
        XCTAssertEqual(connection.changes, 1)
    }

    func testExecute_withBadSQL_failsNamingTheActionThePathAndSQLitesMessage() throws {
        let connection = try SQLiteConnection(path: path, options: .init(label: "scratch"))
        defer { connection.close() }
        XCTAssertThrowsError(try connection.execute("SELEKT 1", action: "read the answer from")) { error in
            XCTAssertEqual("\(error)", "unable to read the answer from scratch \(self.path): near \"SELEKT\": syntax error")
            XCTAssertEqual((error as! SQLiteError).primaryCode, SQLITE_ERROR)
        }
    }

    func testTransaction_whenTheBodyThrows_rollsEverythingBack_andCountsOnlyCommits() throws {
        let connection = try SQLiteConnection(path: path)
        defer { connection.close() }
        try connection.executeOnce("CREATE TABLE t (i INTEGER PRIMARY KEY)", action: "create")
        try connection.transaction("fill") { () throws(SQLiteError) in
            try connection.execute("INSERT INTO t VALUES (1)", action: "insert")
        }
        XCTAssertThrowsError(try connection.transaction("fill") { () throws(SQLiteError) in
            try connection.execute("INSERT INTO t VALUES (2)", action: "insert")
            try connection.execute("INSERT INTO t VALUES (1)", action: "insert a duplicate into")
        }) { error in
            XCTAssertTrue("\(error)".hasPrefix("unable to insert a duplicate into database \(self.path): UNIQUE constraint failed"), "\(error)")
        }
        XCTAssertEqual(try scalar(connection, "SELECT group_concat(i) FROM t"), 1)
        XCTAssertEqual(connection.commits, 1)
        // The connection is usable again: no transaction was left open.
        try connection.transaction("fill") { () throws(SQLiteError) in
            try connection.execute("INSERT INTO t VALUES (3)", action: "insert")
        }
        XCTAssertEqual(try scalar(connection, "SELECT count(*) FROM t"), 2)
    }

    func testMigrate_appliesOnlyPendingSteps_andRefusesAFileFromANewerSchema() throws {
        let steps = [["CREATE TABLE a (x)"], ["CREATE TABLE b (y)", "INSERT INTO b VALUES (1)"]]
        do {
            let connection = try SQLiteConnection(path: path)
            try connection.migrate(Array(steps.prefix(1))) { _, _ in "unused" }
            XCTAssertEqual(try connection.userVersion(), 1)
            try connection.migrate(steps) { _, _ in "unused" }
            try connection.migrate(steps) { _, _ in "unused" }
            XCTAssertEqual(try connection.userVersion(), 2)
            XCTAssertEqual(try scalar(connection, "SELECT count(*) FROM b"), 1, "each step ran once")
            connection.close()
        }
        let older = try SQLiteConnection(path: path)
        defer { older.close() }
        XCTAssertThrowsError(try older.migrate(Array(steps.prefix(1))) { found, known in "version \(found) is newer than \(known)" }) { error in
            XCTAssertEqual("\(error)", "unable to open database \(self.path): version 2 is newer than 1")
        }
        XCTAssertEqual(try older.userVersion(), 2)
    }

    func testCheckpoint_copiesTheWALIntoTheFile_andTruncatesTheWALToZeroBytes() throws {
        let connection = try SQLiteConnection(path: path)
        defer { connection.close() }
        try connection.executeOnce("CREATE TABLE t (x); INSERT INTO t VALUES (randomblob(100000))", action: "fill")
        var info = stat()
        XCTAssertEqual(stat(path + "-wal", &info), 0)
        XCTAssertGreaterThan(info.st_size, 100_000)
        let result = try connection.checkpoint()
        XCTAssertFalse(result.busy)
        XCTAssertEqual(result.walFrames, 0, "TRUNCATE reports the WAL as it left it")
        XCTAssertEqual(stat(path + "-wal", &info), 0)
        XCTAssertEqual(info.st_size, 0)
        XCTAssertEqual(try connection.quickCheck(), [])
    }

    func testQuickCheck_onAFileWithAScribbledPage_reportsTheDamage() throws {
        do {
            let connection = try SQLiteConnection(path: path)
            try connection.executeOnce(
                """
                CREATE TABLE t (x TEXT); CREATE INDEX t_x ON t (x);
                WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) INSERT INTO t SELECT printf('%050d', i) FROM n
                """, action: "fill")
            _ = try connection.checkpoint()
            connection.close()
        }
        // Page 3 onwards are the table's and the index's pages: scribble over one.
        let handle = try XCTUnwrap(FileHandle(forUpdatingAtPath: path))
        try handle.seek(toOffset: 4096 * 4 + 100)
        handle.write(Data(repeating: 0x5a, count: 2000))
        try handle.close()
        let connection = try SQLiteConnection(path: path)
        defer { connection.close() }
        do {
            let problems = try connection.quickCheck()
            XCTAssertFalse(problems.isEmpty)
        } catch {
            XCTAssertEqual(error.primaryCode, SQLITE_CORRUPT, error.description)
        }
    }
}
