import CSQLite
import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The tools of issue 36 with what they leave behind (docs/configuration.md, "File
/// identity"): a file rewritten in place while the daemon is down runs at the next start; a
/// file whose tool set its mtime after its close (unzip, rsync) or that was chmod'ed or
/// renamed while watched does not run again after a restart; an O_TMPFILE linked into place
/// and rsync's --delay-updates are handled live under their final names; an exchange of two
/// handled files keeps both in the ledger. Run with inotify, and with WATCHKEEPER_TEST_WATCH_METHOD
/// (fanotify, poll: where a poll cannot see what made a change, the test says so);
/// Tests/reliability/tools.py runs the same tools under inotify, fanotify and poll, across
/// SIGTERM and SIGKILL restarts.
final class FileIdentityDeliveryTests: WatchTestCase {
    private var inbox: String { sandbox.root + "/in/" }
    private static let oldMtime = 1_000_000_000

    private func reads() -> [(content: String, path: String)] {
        records(sandbox.root + "/read").map { record in
            let parts = String(decoding: record, as: UTF8.self).split(separator: "\t", maxSplits: 1, omittingEmptySubsequences: false)
            return (String(parts[0]), parts.count > 1 ? String(parts[1]) : "")
        }
    }

    private func readCounts() -> [String: Int] {
        reads().reduce(into: [:]) { $0[$1.content, default: 0] += 1 }
    }

    private func startReading(recursive: Bool = false) throws {
        try start("""
            [[watch]]
            name = "tools"
            path = "@DIR@/in"
            \(recursive ? "recursive = true" : "")
            \(DeliveryPatternTests.reader)
            """)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/src", withIntermediateDirectories: true)
    }

    /// A version: `tag` padded to 64 bytes, so that every version of a name has one size.
    private func version(_ tag: String) -> String {
        tag + String(repeating: ".", count: max(0, 64 - tag.utf8.count))
    }

    private func run(_ arguments: [String]) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        XCTAssertNoThrow(try process.run())
        process.waitUntilExit()
        let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(process.terminationStatus, 0, "\(arguments.joined(separator: " ")): \(message)")
    }

    private func setModified(_ path: String, seconds: Int = oldMtime) {
        var times = [timespec(tv_sec: seconds, tv_nsec: 0), timespec(tv_sec: seconds, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0, String(cString: strerror(errno)))
    }

    /// A source outside the tree with the old mtime, which `cp -p` and `rsync -a` keep.
    private func source(_ name: String, _ content: String) -> String {
        let path = sandbox.root + "/src/" + name
        create(path, content)
        setModified(path)
        return path
    }

    /// `unzip` (with `-o`: over the existing file) of an archive whose member has the old mtime.
    private func unzip(_ member: String, _ content: String, overwrite: Bool) {
        let archive = sandbox.root + "/src/\(member)-\(content.prefix(12)).zip"
        run(["python3", "-c", """
            import sys, zipfile, time
            info = zipfile.ZipInfo(sys.argv[2], date_time=time.gmtime(\(Self.oldMtime))[:6])
            info.external_attr = 0o644 << 16
            with zipfile.ZipFile(sys.argv[1], "w") as z: z.writestr(info, sys.argv[3])
            """, archive, member, content])
        run(["unzip", "-q"] + (overwrite ? ["-o"] : []) + [archive, "-d", inbox])
    }

    /// Open, truncate, write, close, then set the old mtime: how a script or a tool that
    /// sets times afterwards delivers, over the same inode.
    private func writeThenSetMtime(_ path: String, _ content: String) {
        create(path, content)
        setModified(path)
    }

    /// Whether the ledger holds every path in the form it has now (the daemon caught up with
    /// the changes it saw): what a SIGKILL may come after without anything running again.
    private func ledgerIsCurrent(_ names: [String]) -> Bool {
        let rows = (try? queryRows("SELECT hex(path) || ' ' || inode || ' ' || size || ' ' || modified_ns || ' ' || changed_ns FROM file_ledger WHERE outcome = 'ok'",
                                   database: sandbox.root + "/state/watchkeeper.sqlite3", flags: SQLITE_OPEN_READONLY)) ?? []
        return names.allSatisfy { name in
            var info = stat()
            guard stat(inbox + name, &info) == 0 else { return false }
            let hex = Array(name.utf8).map { String(format: "%02X", $0) }.joined()
            let mtime = Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
            let ctime = Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec)
            return rows.contains("\(hex) \(info.st_ino) \(info.st_size) \(mtime) \(ctime)")
        }
    }

    private var polling: Bool { DaemonSandbox.watchMethodUnderTest == "poll" }

    /// Starts the daemon again (after a stop or a kill) and waits until its catch-up looked at
    /// `files` files and nothing waits or runs. A poll's catch-up is its first pass: what it
    /// looked at is `polled_files` (`matched` counts only what runs).
    private func restartAndCatchUp(files: Int) throws {
        try startAgain()
        XCTAssertTrue(waitFor(20) {
            guard let rule = dumpedRule() else { return false }
            return rule[polling ? "polled_files" : "matched"] as? Int ?? 0 >= files && rule["pending_settle"] as? Int == 0
                && rule["files_in_flight"] as? Int == 0
        }, daemon.stderr)
    }

    // MARK: Item 2: rewritten in place while the daemon is down

    func testFileRewrittenInPlaceWhileDown_withTheSameSizeAndMtime_runsAtTheNextStart_afterAStopOrAKill() throws {
        try startReading()
        let names = ["cp-p", "cp-reflink-p", "write-utime", "rsync-inplace"]
        func deliver(_ name: String, _ content: String) {
            let target = inbox + name
            switch name {
            case "cp-p": run(["cp", "-p", source(name, content), target])
            case "cp-reflink-p": run(["cp", "--reflink=auto", "-p", source(name, content), target])
            case "write-utime": writeThenSetMtime(target, content)
            default: run(["rsync", "-a", "-I", "--inplace", source(name, content), target])
            }
        }
        for name in names { deliver(name, version("\(name) live")) }
        XCTAssertTrue(waitFor(15) { names.allSatisfy { readCounts()[version("\($0) live")] == 1 } }, "\(reads())\n\(daemon.stderr)")
        var inodes: [String: UInt64] = [:]
        for name in names {
            var info = stat()
            XCTAssertEqual(stat(inbox + name, &info), 0)
            inodes[name] = UInt64(info.st_ino)
        }
        for (round, how) in [(key: "a stop", value: SIGTERM), (key: "a kill", value: SIGKILL)].enumerated() {
            if how.value == SIGKILL {
                XCTAssertTrue(waitFor(15) { ledgerIsCurrent(names) }, "the ledger never caught up\n\(daemon.stderr)")
                daemon.send(SIGKILL)
                _ = daemon.waitForExit(timeout: 10)
            } else {
                daemon.stop(within: 20)
            }
            for name in names { deliver(name, version("\(name) down \(round)")) }
            try restartAndCatchUp(files: names.count)
            for name in names {
                var info = stat()
                XCTAssertEqual(stat(inbox + name, &info), 0)
                XCTAssertEqual(UInt64(info.st_ino), inodes[name], "\(name) is to be rewritten in place")
                XCTAssertEqual(readCounts()[version("\(name) down \(round)")], 1, "\(name), rewritten while the daemon was down (after \(how.key)), was not run at the next start\n\(reads())\n\(daemon.stderr)")
            }
        }
        XCTAssertEqual(reads().count, names.count * 3, "\(reads())")
    }

    // MARK: Item 3: tools that set the mtime after the close, chmod, rename

    func testFilesChangedOnlyInTheirAttributesAfterTheirJob_doNotRunAgainAfterAStopOrAKill() throws {
        try startReading()
        unzip("unzip-new", version("unzip new"), overwrite: false)
        create(inbox + "unzip-o", "placeholder")
        XCTAssertTrue(waitFor(10) { readCounts()["placeholder"] == 1 }, daemon.stderr)
        unzip("unzip-o", version("unzip over"), overwrite: true)
        create(inbox + "write-utime", version("write then utime"))
        run(["rsync", "-a", "--inplace", source("rsync-inplace", version("rsync inplace")), inbox + "rsync-inplace"])
        create(inbox + "chmod", version("chmod"))
        create(inbox + "renamed-before", version("renamed"))
        let contents = ["unzip new", "unzip over", "write then utime", "rsync inplace", "chmod", "renamed"].map { version($0) }
        XCTAssertTrue(waitFor(15) { contents.allSatisfy { readCounts()[$0] == 1 } }, "\(reads())\n\(daemon.stderr)")
        // After the job read them: the slowest a tool can be.
        setModified(inbox + "write-utime")
        XCTAssertEqual(chmod(inbox + "chmod", 0o600), 0)
        XCTAssertEqual(rename(inbox + "renamed-before", inbox + "renamed-after"), 0)
        let names = ["unzip-new", "unzip-o", "write-utime", "rsync-inplace", "chmod", "renamed-after"]
        var expected = contents.count + 1
        if polling {
            // A poll sees a file's new form, not what made it: a chmod, or a `utime` after the
            // job, looks like `cp -p` over it (docs/configuration.md, "File identity", the rows
            // of a polled tree), so each runs once more when a poll sees it; and a change made
            // less than a poll before a stop is not seen, as if made while the daemon was down.
            // Once the polls saw them, nothing runs again, as with events.
            expected += 2
            XCTAssertTrue(waitFor(15) { reads().count == expected && ledgerIsCurrent(names) },
                          "the polls never handled the changes: \(reads())\n\(daemon.stderr)")
            XCTAssertEqual(readCounts()[version("chmod")], 2, "\(reads())")
            XCTAssertEqual(readCounts()[version("write then utime")], 2, "\(reads())")
        }
        daemon.stop(within: 20)
        try restartAndCatchUp(files: names.count)
        XCTAssertEqual(reads().count, expected, "a file that only changed its attributes ran again after a stop: \(reads())\n\(daemon.stderr)")
        XCTAssertTrue(waitFor(15) { ledgerIsCurrent(names) }, "the ledger never caught up\n\(daemon.stderr)")
        daemon.send(SIGKILL)
        _ = daemon.waitForExit(timeout: 10)
        try restartAndCatchUp(files: names.count)
        XCTAssertEqual(reads().count, expected, "a file ran again after a kill: \(reads())\n\(daemon.stderr)")
    }

    // MARK: Item 4: O_TMPFILE linked into place

    func testTmpfilesLinkedIntoPlace_areHandledLive_underTheNameTheyWereLinkedTo() throws {
        try startReading()
        let contents = (0..<20).map { version("tmpfile \($0)") }
        // open(dir, O_TMPFILE), write, linkat from /proc/self/fd/N into place, close: open(2)'s
        // own way to make a file appear whole.
        run(["python3", "-c", """
            import ctypes, os, sys
            libc = ctypes.CDLL(None, use_errno=True)
            inbox = sys.argv[1]
            for i, content in enumerate(sys.argv[2:]):
                fd = os.open(inbox, os.O_TMPFILE | os.O_WRONLY, 0o644)
                os.write(fd, content.encode())
                if libc.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, f"{inbox}/linked-{i}".encode(), 0x400) != 0:
                    raise OSError(ctypes.get_errno(), "linkat")
                os.close(fd)
            """, inbox] + contents)
        XCTAssertTrue(waitFor(15) { contents.allSatisfy { readCounts()[$0] == 1 } },
                      "never handled live: \(contents.filter { readCounts()[$0] == nil }.count) of \(contents.count)\n\(reads())\n\(daemon.stderr)")
        XCTAssertEqual(Set(reads().map(\.path)), Set((0..<20).map { inbox + "linked-\($0)" }))
    }

    // MARK: Item 6: RENAME_EXCHANGE

    /// renameat2(RENAME_EXCHANGE): two names swap their files in one step.
    private func exchange(_ first: String, _ second: String) {
        run(["python3", "-c", """
            import ctypes, sys
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.renameat2(-100, sys.argv[1].encode(), -100, sys.argv[2].encode(), 2) != 0:
                raise OSError(ctypes.get_errno(), "renameat2")
            """, inbox + first, inbox + second])
    }

    func testExchangeOfTwoHandledFiles_keepsBothInTheLedger_andNeitherRunsAgainAfterAStopOrAKill() throws {
        try startReading()
        let pairs = (0..<5).map { ("left-\($0)", "right-\($0)") }
        for (left, right) in pairs {
            create(inbox + left, version(left))
            create(inbox + right, version(right))
        }
        XCTAssertTrue(waitFor(15) { reads().count == 10 }, "\(reads())\n\(daemon.stderr)")
        for (left, right) in pairs { exchange(left, right) }
        let names = pairs.flatMap { [$0.0, $0.1] }
        XCTAssertTrue(waitFor(15) { dumpedRule()?["duplicates_dropped"] as? Int ?? 0 >= 10 }, daemon.stderr)
        daemon.stop(within: 20)
        let rows = try queryRows("SELECT hex(path) || ' ' || inode FROM file_ledger WHERE outcome = 'ok'",
                                 database: sandbox.root + "/state/watchkeeper.sqlite3", flags: SQLITE_OPEN_READONLY)
        for name in names {
            var info = stat()
            XCTAssertEqual(stat(inbox + name, &info), 0)
            let hex = Array(name.utf8).map { String(format: "%02X", $0) }.joined()
            XCTAssertTrue(rows.contains("\(hex) \(info.st_ino)"), "\(name) (inode \(info.st_ino)) has no ledger entry of its own: \(rows)")
        }
        try restartAndCatchUp(files: names.count)
        XCTAssertEqual(reads().count, 10, "an exchanged file ran again after a stop: \(reads())\n\(daemon.stderr)")
        for (left, right) in pairs { exchange(left, right) }
        XCTAssertTrue(waitFor(15) { ledgerIsCurrent(names) }, "the ledger never caught up\n\(daemon.stderr)")
        daemon.send(SIGKILL)
        _ = daemon.waitForExit(timeout: 10)
        try restartAndCatchUp(files: names.count)
        XCTAssertEqual(reads().count, 10, "an exchanged file ran again after a kill: \(reads())\n\(daemon.stderr)")
    }

    // MARK: Item 7: rsync --delay-updates

    func testRsyncWithDelayedUpdates_intoARecursiveRule_givesJobsTheFinalPaths() throws {
        try startReading(recursive: true)
        let staging = sandbox.root + "/src/stage/"
        try FileManager.default.createDirectory(atPath: staging + "sub", withIntermediateDirectories: true)
        var expected: [String: String] = [:]
        for round in 0..<2 {
            for index in 0..<20 {
                let name = (index % 2 == 0 ? "sub/" : "") + "file-\(index)"
                let content = version("delayed \(round) \(index)")
                create(staging + name, content)
                expected[content] = inbox + name
            }
            run(["rsync", "-a", "-I", "--delay-updates", staging, inbox])
            XCTAssertTrue(waitFor(15) { expected.keys.allSatisfy { readCounts()[$0] == 1 } }, "\(reads())\n\(daemon.stderr)")
        }
        for read in reads() {
            XCTAssertEqual(read.path, expected[read.content], "a job got rsync's temporary name, or ran twice: \(reads())")
        }
        XCTAssertEqual(reads().count, expected.count, "\(reads())")
        // Not even a job that failed because rsync had renamed its file away meanwhile: looked
        // for once the daemon has stopped, when every record it logged is out.
        daemon.stop(within: 20)
        XCTAssertFalse(daemon.stderr.contains(".~tmp~/"), daemon.stderr)
    }

    func testAFileWrittenUnderATemporaryNameAndRenamedIntoPlace_arrivesUnderItsName_forARuleThatOnlyAsksForCloses() throws {
        try start("""
            [[watch]]
            name = "closes"
            path = "@DIR@/in"
            events = ["closed_write"]
            \(DeliveryPatternTests.reader)
            """)
        for (index, temporary) in ["x0.part", ".x1.AbC123", "x2.tmp", "x3.crdownload"].enumerated() {
            create(inbox + temporary, version("arrival \(index)"))
            XCTAssertEqual(rename(inbox + temporary, inbox + "x\(index)"), 0)
        }
        let expected = Dictionary(uniqueKeysWithValues: (0..<4).map { (version("arrival \($0)"), inbox + "x\($0)") })
        XCTAssertTrue(waitFor(15) { expected.keys.allSatisfy { readCounts()[$0] == 1 } }, "\(reads())\n\(daemon.stderr)")
        for read in reads() { XCTAssertEqual(read.path, expected[read.content], "\(reads())") }
        // Looked for once the daemon has stopped, when every record it logged is out.
        daemon.stop(within: 20)
        XCTAssertFalse(daemon.stderr.contains("event=moved_in"), "handled as the close its temporary name's was")
    }
}
