import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Where files get lost or misdirected: at the edges. Real inotify, real files, real mounts.
final class WatchEdgeCaseTests: WatchTestCase {
    private func handled() -> [String] {
        records(sandbox.root + "/handled").map { String(decoding: $0, as: UTF8.self) }
    }

    private func dump(_ sequence: Int) throws -> [String: Any] {
        daemon.send(SIGUSR1)
        return try XCTUnwrap(sandbox.waitForState(sequence: sequence, timeout: 5), daemon.stderr)
    }

    private func rule(in state: [String: Any]) throws -> [String: Any] {
        try XCTUnwrap(((state["watches"] as? [String: Any])?["rules"] as? [[String: Any]])?.first)
    }

    func testRootRenamedAway_isNoticedAtOnce_theMovedTreeIsNoLongerAttributed_andTheNewRootIsCaughtUp() throws {
        try skipIfPolling("a root renamed away noticed at once, through its own watch")
        try start("""
            [[watch]]
            name = "moving"
            path = "@DIR@/in"
            recursive = true
            \(Self.recorder)
            """)
        write("before")
        XCTAssertTrue(waitFor(5) { handled().count == 1 }, daemon.stderr)
        XCTAssertEqual(rename(sandbox.root + "/in", sandbox.root + "/away"), 0)
        XCTAssertTrue(daemon.waitForStderr(containing: "was renamed away", timeout: 5), daemon.stderr)
        // A file written in the moved tree must not run a job under the old path.
        let fd = open(sandbox.root + "/away/after-move", O_WRONLY | O_CREAT, 0o644)
        close(fd)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/in", withIntermediateDirectories: false)
        write("new-root-file")
        XCTAssertTrue(waitFor(10) { handled().contains(sandbox.root + "/in/new-root-file") }, daemon.stderr)
        XCTAssertFalse(handled().contains { $0.hasSuffix("after-move") }, "\(handled())")
        XCTAssertTrue(handled().allSatisfy { FileManager.default.fileExists(atPath: $0) || $0.hasSuffix("/before") }, "a job ran on a path that is not the file's: \(handled())")
    }

    func testRootIsASymlink_isResolvedAndWatched_andSaidSo() throws {
        try start("""
            [[watch]]
            name = "linked"
            path = "@DIR@/link"
            \(Self.recorder)
            """) { root in
            try FileManager.default.createDirectory(atPath: root + "/real", withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(atPath: root + "/link", withDestinationPath: root + "/real")
        }
        XCTAssertTrue(daemon.waitForStderr(containing: "is a symbolic link to \(sandbox.root)/real", timeout: 10), daemon.stderr)
        FileManager.default.createFile(atPath: sandbox.root + "/real/through-link", contents: Data("x".utf8))
        XCTAssertTrue(waitFor(5) { handled() == [sandbox.root + "/real/through-link"] }, "\(handled())\n\(daemon.stderr)")
        let rule = try rule(in: try dump(1))
        XCTAssertEqual(rule["watched_root"] as? String, sandbox.root + "/real")
        XCTAssertTrue(watchesTree(rule, directories: 1), "never zero watches in silence: \(rule)")
    }

    func testScans_handJobsRegularFilesOnly_andCountWhatTheySkip() throws {
        try start("""
            [[watch]]
            name = "typed"
            path = "@DIR@/in"
            events = ["closed_write", "created"]
            \(Self.recorder)
            """) { root in
            FileManager.default.createFile(atPath: root + "/in/plain", contents: Data("x".utf8))
            XCTAssertEqual(mkfifo(root + "/in/fifo", 0o644), 0)
            try FileManager.default.createSymbolicLink(atPath: root + "/in/link", withDestinationPath: "/etc/shadow")
        }
        let inbox = sandbox.root + "/in"
        XCTAssertTrue(waitFor(10) { handled().count == 1 }, daemon.stderr)
        // A live FIFO and a live link are skipped the same way.
        XCTAssertEqual(mkfifo(inbox + "/fifo2", 0o644), 0)
        try FileManager.default.createSymbolicLink(atPath: inbox + "/link2", withDestinationPath: "/etc/passwd")
        write("marker")
        XCTAssertTrue(waitFor(10) { handled().contains(inbox + "/marker") }, daemon.stderr)
        XCTAssertEqual(Set(handled()), [inbox + "/plain", inbox + "/marker"])
        let skipped = try XCTUnwrap(try rule(in: try dump(1))["skipped_not_regular"] as? [String: Any])
        XCTAssertGreaterThanOrEqual(skipped["fifos"] as? Int ?? 0, 2, "\(skipped)")
        XCTAssertGreaterThanOrEqual(skipped["symlinks"] as? Int ?? 0, 2, "\(skipped)")
    }

    func testDirectoryMovedInsideTheTree_doesNotRunItsFilesAgain() throws {
        try start("""
            [[watch]]
            name = "tree"
            path = "@DIR@/in"
            recursive = true
            \(Self.recorder)
            """)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/in/a", withIntermediateDirectories: true)
        for index in 1...5 { write("a/file\(index)") }
        XCTAssertTrue(waitFor(10) { handled().count == 5 }, daemon.stderr)
        XCTAssertEqual(rename(sandbox.root + "/in/a", sandbox.root + "/in/b"), 0)
        write("b/new")
        XCTAssertTrue(waitFor(10) { handled().contains(sandbox.root + "/in/b/new") }, daemon.stderr)
        // The moved files are found by the scan of the moved-in directory (1 s settle).
        var sequence = 0
        var duplicates = 0
        XCTAssertTrue(waitFor(10) {
            sequence += 1
            daemon.send(SIGUSR1)
            let state = sandbox.waitForState(sequence: sequence, timeout: 5)
            let rule = ((state?["watches"] as? [String: Any])?["rules"] as? [[String: Any]])?.first
            duplicates = rule?["duplicates_dropped"] as? Int ?? 0
            return duplicates >= 5
        }, "\(duplicates) duplicates dropped\n\(daemon.stderr)")
        XCTAssertEqual(handled().count, 6, "files of a directory moved within the tree ran again: \(handled())")
    }

    func testDamagedLedger_isMovedAside_rebuilt_saidOnce_andCatchUpStillWorks() throws {
        try start("""
            [[watch]]
            name = "ledgered"
            path = "@DIR@/in"
            \(Self.recorder)
            """) { root in
            try FileManager.default.createDirectory(atPath: root + "/state", withIntermediateDirectories: true)
            try Data((0..<8_192).map { UInt8(truncatingIfNeeded: $0 &* 131) }).write(to: URL(fileURLWithPath: root + "/state/watchkeeper.sqlite3"))
            FileManager.default.createFile(atPath: root + "/in/waiting", contents: Data("x".utf8))
        }
        let inbox = sandbox.root + "/in"
        XCTAssertTrue(waitFor(10) { handled() == [inbox + "/waiting"] }, daemon.stderr)
        // The ready line follows the state file's notice into the log: counted once it is there.
        XCTAssertTrue(daemon.waitForReadyLine(), daemon.stderr)
        let kept = try FileManager.default.contentsOfDirectory(atPath: sandbox.root + "/state").filter { $0.contains(".damaged-") }
        XCTAssertEqual(kept.count, 1, "the damaged file is kept for inspection: \(kept)")
        XCTAssertEqual(daemon.stderr.components(separatedBy: "catch-up will run the jobs of the files present").count - 1, 1, daemon.stderr)
        let state = try dump(1)
        XCTAssertNotNil((state["watches"] as? [String: Any])?["ledger_rebuilt"] as? String)
        // The rebuilt ledger works: after a restart, the handled file is not run again,
        // and one that arrived while the daemon was down is.
        daemon.stop(within: 10)
        FileManager.default.createFile(atPath: inbox + "/while-down", contents: Data("y".utf8))
        try FileManager.default.removeItem(atPath: sandbox.statePath)
        let notify2 = try NotifySocket()
        daemon = try sandbox.start(notifySocket: notify2)
        XCTAssertNotNil(notify2.waitFor("READY", "1", timeout: 10), daemon.stderr)
        XCTAssertTrue(waitFor(10) { handled().count == 2 }, daemon.stderr)
        XCTAssertEqual(handled(), [inbox + "/waiting", inbox + "/while-down"])
    }

    func testASecondDaemonOnTheSameStateDirectory_refusesToStart_namingTheFirst() throws {
        try start("""
            [[watch]]
            name = "only-one"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        let second = try sandbox.start(notifySocket: nil)
        XCTAssertEqual(second.waitForExit(timeout: 10), 75, second.stderr)
        XCTAssertTrue(second.stderr.contains("another watchkeeper (pid \(daemon.pid)) is using this state directory"), second.stderr)
    }

    /// Its own state directory but the first one's runtime directory: it would run without a
    /// control socket and write over the first one's state.json.
    func testASecondDaemonOnTheSameRuntimeDirectory_refusesToStart_namingTheFirst() throws {
        try start("""
            [[watch]]
            name = "only-one"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        let second = try sandbox.start(notifySocket: nil, extra: ["STATE_DIRECTORY": sandbox.root + "/state-of-the-second"])
        XCTAssertEqual(second.waitForExit(timeout: 10), 75, second.stderr)
        XCTAssertTrue(second.stderr.contains("another watchkeeper (pid \(daemon.pid)) is using this runtime directory"), second.stderr)
        XCTAssertTrue(second.stderr.contains("give each watchkeeper its own runtime_dir"), second.stderr)
        XCTAssertTrue(daemon.isRunning)
    }

    func testACleanStop_foldsTheLedgersWriteAheadLogIntoTheFile() throws {
        try start("""
            [[watch]]
            name = "wal"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        for index in 1...20 { write("file\(index)") }
        XCTAssertTrue(waitFor(10) { handled().count == 20 }, daemon.stderr)
        daemon.stop(within: 10)
        let wal = sandbox.root + "/state/watchkeeper.sqlite3-wal"
        var info = stat()
        // Either gone (SQLite deletes it when the last connection closes) or empty.
        if stat(wal, &info) == 0 {
            XCTAssertEqual(info.st_size, 0, "the WAL was not checkpointed at stop")
        } else {
            XCTAssertEqual(errno, ENOENT)
        }
    }

    /// Three directories whose paths are longer than PATH_MAX (their parent's is not) cannot be watched: one warning
    /// names the cause with the first of them, the dump counts all three, none is dropped,
    /// and none is promised a fallback scan that could never list it.
    func testDirectoriesThatCannotBeWatched_areReportedOncePerCause_withACount() throws {
        try skipIfPolling("what the inotify walk could not watch")
        try start("""
            [[watch]]
            name = "deep"
            path = "@DIR@/in"
            recursive = true
            \(Self.recorder)
            """) { root in
            let deep = Process()
            deep.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            deep.arguments = ["-c", "import os,sys; os.chdir(sys.argv[1])\nfor _ in range(16):\n    os.mkdir('d'*250); os.chdir('d'*250)\nfor n in 'abc': os.mkdir(n*250)", root + "/in"]
            try deep.run()
            deep.waitUntilExit()
            XCTAssertEqual(deep.terminationStatus, 0)
        }
        defer {
            // Paths over PATH_MAX: the sandbox's own removal (FileManager) cannot take them.
            XCTAssertNoThrow(try removeTree(sandbox.root + "/in/" + String(repeating: "d", count: 250)))
        }
        let cause = "unable to watch or list directories whose path is longer than PATH_MAX (4096 bytes)"
        XCTAssertTrue(daemon.waitForStderr(containing: cause, timeout: 5), daemon.stderr)
        // The walk that reports them comes before READY=1: once the ready line is out, a line
        // per directory, or a promise of a scan, would be too.
        XCTAssertTrue(daemon.waitForReadyLine(), daemon.stderr)
        XCTAssertEqual(daemon.stderr.components(separatedBy: cause).count - 1, 1, "one line per cause, not one per directory:\n\(daemon.stderr)")
        let state = try dump(1)
        let problems = try XCTUnwrap((state["watches"] as? [String: Any])?["problems"] as? [[String: Any]])
        let entry = try XCTUnwrap(problems.first { ($0["cause"] as? String)?.contains("PATH_MAX") == true }, "\(problems)")
        XCTAssertGreaterThanOrEqual(entry["count"] as? Int ?? 0, 3, "\(entry)")
        // No fallback scan is promised for them: it could never list them either.
        XCTAssertEqual(try rule(in: state)["unwatched_total"] as? Int, 0)
        XCTAssertFalse(daemon.stderr.contains("they are scanned every"), daemon.stderr)
    }

    func testAFileSystemMountedOverTheRoot_isNoticed_andItsFilesAreHandled() throws {
        guard getuid() == 0 else { throw XCTSkip("mounting a tmpfs needs root") }
        try start("""
            [[watch]]
            name = "mounted"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        let inbox = sandbox.root + "/in"
        guard mount("tmpfs", inbox, "tmpfs", 0, "size=1m") == 0 else {
            throw XCTSkip("unable to mount a tmpfs here: \(String(cString: strerror(errno)))")
        }
        defer { umount2(inbox, Int32(MNT_DETACH)) }
        XCTAssertTrue(daemon.waitForStderr(containing: "a file system was mounted on", timeout: 10), daemon.stderr)
        write("on-the-mount")
        XCTAssertTrue(waitFor(10) { handled().contains(inbox + "/on-the-mount") }, daemon.stderr)
        XCTAssertEqual(umount2(inbox, 0), 0)
        write("under-the-mount")
        XCTAssertTrue(waitFor(10) { handled().contains(inbox + "/under-the-mount") }, daemon.stderr)
    }
}
