import CSQLite
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

/// FileLedger.open on files that cannot be used as they are. We run as root in CI, and
/// root reads and writes any file whatever its mode, so "unreadable" is made with a
/// directory in the file's place (open fails with EISDIR); the read-only file case runs
/// only as another user.
final class FileLedgerRecoveryTests: ScratchDirectoryTestCase {
    private var databasePath: String { directory + "/" + StateDatabase.fileName }
    /// 2027-01-15T08:00:00Z.
    private let now = WallTime(secondsSinceEpoch: 1_800_000_000, nanoseconds: 0)
    private var keptPath: String { databasePath + ".damaged-20270115T080000Z" }

    private func randomBytes(_ count: Int) -> Data {
        Data((0..<count).map { _ in UInt8.random(in: 0 ... .max) })
    }

    private func filesInDirectory() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory).sorted()
    }

    /// A new ledger that works: it takes a record and gives it back.
    private func assertUsable(_ ledger: FileLedger, file: StaticString = #filePath, line: UInt = #line) throws {
        let identity = FileIdentity(device: 1, inode: 2, size: 3, modifiedNanoseconds: 4)
        try ledger.record([LedgerRecord(rule: "r", path: Array("x".utf8), identity: identity, outcome: "ok", handledAt: now)])
        XCTAssertEqual(try ledger.count(rule: "r"), 1, file: file, line: line)
    }

    private func filledLedger(entries: Int, in stateDirectory: String? = nil) throws {
        let ledger = try FileLedger.open(stateDirectory: stateDirectory ?? directory, now: now).ledger
        try ledger.record((0..<entries).map { index in
            LedgerRecord(rule: "r", path: Array("some/longer/directory/name/file-\(index)".utf8),
                         identity: FileIdentity(device: 1, inode: UInt64(index), size: 3, modifiedNanoseconds: 4), outcome: "ok", handledAt: now)
        })
        _ = try ledger.checkpoint()
        ledger.close()
    }

    func testOpen_aFileOfRandomBytes_movesItAsideWithItsWALAndSHM_andStartsANewLedger() throws {
        let garbage = randomBytes(8_192)
        try garbage.write(to: URL(fileURLWithPath: databasePath))
        try randomBytes(4_096).write(to: URL(fileURLWithPath: databasePath + "-wal"))
        try randomBytes(32_768).write(to: URL(fileURLWithPath: databasePath + "-shm"))

        let opened = try FileLedger.open(stateDirectory: directory, now: now)
        defer { opened.ledger.close() }
        let rebuilt = try XCTUnwrap(opened.rebuilt)
        XCTAssertEqual(rebuilt.path, databasePath)
        XCTAssertEqual(rebuilt.keptAt, keptPath)
        XCTAssertEqual(rebuilt.companionsKept, [keptPath + "-wal", keptPath + "-shm"])
        XCTAssertTrue(rebuilt.reason.contains("file is not a database"), rebuilt.reason)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: keptPath)), garbage, "the damaged bytes are kept as they were")
        XCTAssertTrue(rebuilt.description.hasPrefix("file ledger \(databasePath) was damaged (it does not start with SQLite's header: file is not a database); "),
                      rebuilt.description)
        XCTAssertTrue(rebuilt.description.hasSuffix("it is kept at \(keptPath) and a new, empty file took its place: task state and history start empty, and watch rules with catch_up handle the files now in their trees again"),
                      rebuilt.description)
        try assertUsable(opened.ledger)
    }

    func testOpen_aDatabaseTruncatedToHalf_isFoundDamaged_andRebuilt() throws {
        try filledLedger(entries: 3_000)
        var info = stat()
        XCTAssertEqual(stat(databasePath, &info), 0)
        let half = info.st_size / 2 / 4_096 * 4_096
        XCTAssertEqual(truncate(databasePath, half), 0)

        let opened = try FileLedger.open(stateDirectory: directory, now: now)
        defer { opened.ledger.close() }
        let rebuilt = try XCTUnwrap(opened.rebuilt, "a truncated file went unnoticed")
        XCTAssertEqual(stat(rebuilt.keptAt, &info), 0)
        XCTAssertEqual(info.st_size, half)
        try assertUsable(opened.ledger)
        XCTAssertEqual(try opened.ledger.count(rule: "r"), 1, "the new ledger starts empty")
    }

    func testOpen_aDatabaseTruncatedInsideItsHeader_isRebuilt() throws {
        try filledLedger(entries: 10)
        XCTAssertEqual(truncate(databasePath, 60), 0)
        let opened = try FileLedger.open(stateDirectory: directory, now: now)
        defer { opened.ledger.close() }
        XCTAssertNotNil(opened.rebuilt)
        try assertUsable(opened.ledger)
    }

    func testOpen_aDirectoryInTheFilesPlace_movesTheDirectoryAsideWithWhatItHolds() throws {
        try FileManager.default.createDirectory(atPath: databasePath, withIntermediateDirectories: false)
        XCTAssertTrue(FileManager.default.createFile(atPath: databasePath + "/inside", contents: Data("kept".utf8)))
        let opened = try FileLedger.open(stateDirectory: directory, now: now)
        defer { opened.ledger.close() }
        XCTAssertEqual(opened.rebuilt?.reason, "a directory is in its place")
        XCTAssertEqual(try String(contentsOfFile: keptPath + "/inside", encoding: .utf8), "kept")
        try assertUsable(opened.ledger)
    }

    /// SQLite takes an empty file for a new database; the ledger must not, or catch-up runs
    /// every file's job again with nothing in the log to say why.
    func testOpen_anEmptyFileThatWasThere_isMovedAsideAsDamaged_withItsWAL_andSaidSo() throws {
        XCTAssertTrue(FileManager.default.createFile(atPath: databasePath, contents: Data()))
        let wal = randomBytes(4_096)
        try wal.write(to: URL(fileURLWithPath: databasePath + "-wal"))

        let opened = try FileLedger.open(stateDirectory: directory, now: now)
        defer { opened.ledger.close() }
        let rebuilt = try XCTUnwrap(opened.rebuilt, "an empty ledger was taken as a new one without a word")
        XCTAssertEqual(rebuilt.reason, "it is empty, 0 bytes long: whatever it recorded is lost")
        XCTAssertTrue(rebuilt.description.hasPrefix("file ledger \(databasePath) was damaged (it is empty, 0 bytes long: whatever it recorded is lost); it is kept at \(keptPath)"),
                      rebuilt.description)
        XCTAssertEqual(rebuilt.companionsKept, [keptPath + "-wal"])
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: keptPath + "-wal")), wal, "the WAL is kept as it was")
        try assertUsable(opened.ledger)
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        XCTAssertNil(try store.state(task: "nightly"), "the task state opens the new file, empty")
    }

    /// The other side of the rule above: a file we created is never found empty, whether it
    /// was closed, left open by a crash, or created by the task state.
    func testOpen_aFileWeCreated_isNotFoundEmpty_atTheNextOpen() throws {
        let first = try FileLedger.open(stateDirectory: directory, now: now)
        var info = stat()
        XCTAssertEqual(stat(databasePath, &info), 0)
        XCTAssertGreaterThan(info.st_size, 0, "the header is on disk while the first connection is still open (a crash here)")
        first.ledger.close()
        let second = try FileLedger.open(stateDirectory: directory, now: now)
        second.ledger.close()
        XCTAssertNil(second.rebuilt)

        let other = directory + "/by-the-task-state"
        try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: false)
        try TaskStore(directory: other).close()
        let third = try FileLedger.open(stateDirectory: other, now: now)
        third.ledger.close()
        XCTAssertNil(third.rebuilt)
    }

    func testOpen_damagedTwiceWithinOneSecond_keepsBothDamagedFiles() throws {
        try randomBytes(4_096).write(to: URL(fileURLWithPath: databasePath))
        let first = try FileLedger.open(stateDirectory: directory, now: now)
        first.ledger.close()
        try randomBytes(4_096).write(to: URL(fileURLWithPath: databasePath))
        let second = try FileLedger.open(stateDirectory: directory, now: now)
        defer { second.ledger.close() }
        XCTAssertEqual(first.rebuilt?.keptAt, keptPath)
        XCTAssertEqual(second.rebuilt?.keptAt, keptPath + "-2")
    }

    func testOpen_aReadOnlyFile_isMovedAside_whenNotRoot() throws {
        try XCTSkipIf(geteuid() == 0, "root writes read-only files: covered by the directory in the file's place")
        try filledLedger(entries: 1)
        XCTAssertEqual(chmod(databasePath, 0o400), 0)
        let opened = try FileLedger.open(stateDirectory: directory, now: now)
        defer { opened.ledger.close() }
        XCTAssertNotNil(opened.rebuilt)
        try assertUsable(opened.ledger)
    }

    func testOpen_inAMissingStateDirectory_createsItWithMode0750() throws {
        let missing = directory + "/var/lib/watchkeeper"
        let opened = try FileLedger.open(stateDirectory: missing, now: now)
        defer { opened.ledger.close() }
        XCTAssertNil(opened.rebuilt)
        var info = stat()
        XCTAssertEqual(stat(missing, &info), 0)
        XCTAssertEqual(info.st_mode & 0o777, 0o750 & ~0o022)
        try assertUsable(opened.ledger)
    }

    func testOpen_whenTheStateDirectoryCannotBeCreated_failsSayingWhy_andMovesNothing() throws {
        XCTAssertTrue(FileManager.default.createFile(atPath: directory + "/plain-file", contents: Data()))
        let below = directory + "/plain-file/state"
        XCTAssertThrowsError(try FileLedger.open(stateDirectory: below, now: now)) { error in
            XCTAssertEqual("\(error)", "unable to create the state directory for file ledger \(below)/watchkeeper.sqlite3: mkdir \(below): Not a directory")
        }
        XCTAssertEqual(try filesInDirectory(), ["plain-file"])
    }

    func testOpen_aFileFromANewerRelease_isRefused_andLeftWhereItIs() throws {
        try TaskStore(directory: directory).close()
        var connection: OpaquePointer?
        XCTAssertEqual(sqlite3_open(databasePath, &connection), SQLITE_OK)
        XCTAssertEqual(sqlite3_exec(connection, "PRAGMA user_version = 99", nil, nil, nil), SQLITE_OK)
        sqlite3_close(connection)
        XCTAssertThrowsError(try FileLedger.open(stateDirectory: directory, now: now)) { error in
            XCTAssertTrue("\(error)".contains("its schema version 99 is newer than this watchkeeper's"), "\(error)")
        }
        XCTAssertEqual(try filesInDirectory().filter { $0.contains("damaged") }, [])
    }

    /// SQLite refuses to open a link (SQLITE_OPEN_NOFOLLOW): left in place it disabled
    /// catch-up for the daemon's life, at every start.
    func testOpen_aSymbolicLinkInTheFilesPlace_isMovedAsideUnfollowed_andANewLedgerStarts() throws {
        let target = directory + "/elsewhere"
        XCTAssertTrue(FileManager.default.createFile(atPath: target, contents: Data("not the ledger".utf8)))
        XCTAssertEqual(symlink(target, databasePath), 0)

        let opened = try FileLedger.open(stateDirectory: directory, now: now)
        defer { opened.ledger.close() }
        let rebuilt = try XCTUnwrap(opened.rebuilt, "a link in the file's place was not moved aside")
        XCTAssertEqual(rebuilt.reason, "a symbolic link is in its place")
        XCTAssertEqual(rebuilt.keptAt, keptPath)
        XCTAssertEqual(try FileManager.default.destinationOfSymbolicLink(atPath: keptPath), target, "the link itself is kept")
        XCTAssertEqual(try String(contentsOfFile: target, encoding: .utf8), "not the ledger", "what it points at is untouched")
        var info = stat()
        XCTAssertEqual(lstat(databasePath, &info), 0)
        XCTAssertEqual(info.st_mode & S_IFMT, S_IFREG, "a file of our own took the link's place")
        try assertUsable(opened.ledger)
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        XCTAssertNil(try store.state(task: "nightly"), "the task state opens the new file, empty")
    }

    /// Only a link in the file's own place is moved aside. SQLite (SQLITE_OPEN_NOFOLLOW)
    /// also refuses a path through a linked state directory; the file there is not
    /// damaged, so it stays where it is and the open fails, as it always did.
    func testOpen_throughALinkedStateDirectory_isRefused_andMovesNothing() throws {
        let real = directory + "/real"
        let linked = directory + "/linked"
        try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: false)
        try filledLedger(entries: 1, in: real)
        XCTAssertEqual(symlink(real, linked), 0)
        XCTAssertThrowsError(try FileLedger.open(stateDirectory: linked, now: now)) { error in
            XCTAssertEqual((error as? SQLiteError)?.code, SQLiteConnection.cantOpenSymlink, "\(error)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: real).filter { $0.contains("damaged") }, [])
        let reopened = try FileLedger.open(stateDirectory: real, now: now)
        defer { reopened.ledger.close() }
        XCTAssertNil(reopened.rebuilt)
        XCTAssertEqual(try reopened.ledger.count(rule: "r"), 1)
    }

    func testOpen_aDanglingSymbolicLink_isMovedAside_withoutCreatingItsTarget() throws {
        let target = directory + "/nowhere/watchkeeper.sqlite3"
        XCTAssertEqual(symlink(target, databasePath), 0)
        let opened = try FileLedger.open(stateDirectory: directory, now: now)
        defer { opened.ledger.close() }
        XCTAssertEqual(opened.rebuilt?.reason, "a symbolic link is in its place")
        XCTAssertFalse(FileManager.default.fileExists(atPath: directory + "/nowhere"))
        try assertUsable(opened.ledger)
    }

    /// Files written by the release before FileLedger (schema version 2) open, migrate to
    /// version 3, and keep their ledger and task state.
    func testOpen_aVersion2FileFromTheLastRelease_keepsItsEntries_andGainsTheIdentityIndex() throws {
        var connection: OpaquePointer?
        XCTAssertEqual(sqlite3_open(databasePath, &connection), SQLITE_OK)
        let schema = StateDatabase.migrations.prefix(2).flatMap { $0 }.joined(separator: ";\n")
        let fill = """
            PRAGMA journal_mode = WAL; \(schema); PRAGMA user_version = 2;
            INSERT INTO file_ledger VALUES ('inbox', x'61ff', 1, 2, 3, 4, 'ok', 5);
            INSERT INTO task_state (task, last_outcome) VALUES ('nightly', 'ok');
            """
        XCTAssertEqual(sqlite3_exec(connection, fill, nil, nil, nil), SQLITE_OK, String(cString: sqlite3_errmsg(connection)))
        sqlite3_close(connection)

        let opened = try FileLedger.open(stateDirectory: directory, now: now)
        defer { opened.ledger.close() }
        XCTAssertNil(opened.rebuilt)
        XCTAssertEqual(try opened.ledger.entry(rule: "inbox", path: [0x61, 0xff]),
                       LedgerEntry(path: [0x61, 0xff], identity: FileIdentity(device: 1, inode: 2, size: 3, modifiedNanoseconds: 4),
                                   outcome: "ok", handledAt: WallTime(nanosecondsSinceEpoch: 5)))
        XCTAssertEqual(try opened.ledger.entries(rule: "inbox", identity: FileIdentity(device: 1, inode: 2, size: 3, modifiedNanoseconds: 4)).count, 1)
        let store = try TaskStore(directory: directory)
        defer { store.close() }
        XCTAssertEqual(try store.state(task: "nightly")?.lastOutcome, "ok")
    }
}
