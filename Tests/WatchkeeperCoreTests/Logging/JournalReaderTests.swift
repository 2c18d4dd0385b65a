import XCTest

@testable import WatchkeeperCore

#if canImport(Glibc)
import Glibc
#endif

/// Opening the journal, on directories made here: what `watchkeeper logs` says when there is
/// nothing to read. Entries themselves need a journald (Tests/e2e/systemd-e2e.sh).
final class JournalReaderTests: XCTestCase {
    private var directory = ""

    override func setUpWithError() throws {
        var template = Array("/tmp/wk-journal-reader-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw XCTSkip("unable to create a temporary directory") }
        directory = String(cString: made)
    }

    override func tearDown() {
        if let stream = opendir(directory) {
            while let item = readdir(stream) {
                let name = withUnsafeBytes(of: item.pointee.d_name) { String(decoding: $0.prefix(while: { $0 != 0 }), as: UTF8.self) }
                if name != "." && name != ".." { unlink(directory + "/" + name) }
            }
            closedir(stream)
        }
        rmdir(directory)
    }

    private func openError(_ source: JournalReader.Source) -> JournalReaderError? {
        do {
            _ = try JournalReader(source: source)
            return nil
        } catch {
            return error
        }
    }

    func testOpen_directoryWithoutJournalFiles_saysTheJournalKeepsNothing() throws {
        XCTAssertEqual(creat(directory + "/notes.txt", 0o644) >= 0, true)
        let error = try XCTUnwrap(openError(.directory(directory)))
        XCTAssertEqual(error, .keepsNothing(.directory(directory)))
        XCTAssertEqual(error.exitCode, 66)
        XCTAssertEqual(error.description, "unable to read the journal: it keeps nothing: no journal files in \(directory)")
    }

    func testOpen_missingDirectory_isAnErrorNamingIt() throws {
        let error = try XCTUnwrap(openError(.directory(directory + "/missing")))
        XCTAssertEqual(error.description, "unable to open the journal directory \(directory)/missing: No such file or directory (ENOENT)")
        XCTAssertEqual(error.exitCode, 71)
    }

    /// A file sd-journal would list but this process cannot open (a dangling link stands in
    /// for a file of mode 0640 root:systemd-journal, which root could open anyway).
    func testOpen_noReadableJournalFile_asksAboutTheGroups() throws {
        XCTAssertEqual(symlink(directory + "/gone", directory + "/system.journal"), 0)
        let error = try XCTUnwrap(openError(.directory(directory)))
        XCTAssertEqual(error.exitCode, 77)
        XCTAssertEqual(error.description, "unable to read the journal: this user may read none of its 1 files (\(directory)/system.journal: No such file or directory); "
                       + "are you root or in the group systemd-journal or adm?")
    }

    /// sd-journal skips a file that is not a journal: the query then finds nothing, which the
    /// command reports as "no entries", not as a failure.
    func testLast_journalFileWithoutEntries_findsNothing() throws {
        let fd = creat(directory + "/system.journal", 0o644)
        XCTAssertGreaterThanOrEqual(fd, 0)
        _ = "not a journal file\n".withCString { write(fd, $0, strlen($0)) }
        close(fd)
        let reader = try JournalReader(source: .directory(directory))
        XCTAssertEqual(reader.files, JournalFiles(found: 1, unreadable: 0, firstUnreadable: nil))
        let query = JobLogQuery.resolve("backup", task: false, watch: false)
        try query.apply(to: reader)
        let (entries, newest) = try query.last(20, in: reader)
        XCTAssertTrue(entries.isEmpty)
        XCTAssertNil(newest)
    }
}
