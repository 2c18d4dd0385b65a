import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// `[[watch]]` rules on real directories with real inotify: each test creates files the
/// way programs do and reads what the started jobs wrote.
final class WatchRunTests: WatchTestCase {
    func testFileWrittenAndClosed_startsOneJobWithItsPath() throws {
        try start("""
            [[watch]]
            name = "inbox"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        write("report.csv")
        XCTAssertTrue(waitFor(10) { records(sandbox.root + "/handled").count == 1 }, daemon.stderr)
        // The record follows the job's exit and its last output.
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=ok", timeout: 10), daemon.stderr)
        letTimePass(0.3) // a second job for the same file would have run by now
        XCTAssertEqual(records(sandbox.root + "/handled"), [Array((sandbox.root + "/in/report.csv").utf8)])
    }

    func testFilesTheLedgerHolds_areForgottenInMemory_andStillNotRunAgainWhenMovedWithinTheTree() throws {
        try start("""
            [[watch]]
            name = "inbox"
            path = "@DIR@/in"
            recursive = true
            \(Self.recorder)
            """)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/in/a", withIntermediateDirectories: true)
        XCTAssertTrue(waitFor(10) { self.watchesTree(self.dumpedRule(), directories: 2) }, daemon.stderr)
        for index in 0..<20 { write("a/f\(index)") }
        XCTAssertTrue(waitFor(15) { records(sandbox.root + "/handled").count == 20 }, daemon.stderr)
        // Once the ledger has them, this life's memory of them goes: it does not grow with every file.
        XCTAssertTrue(waitFor(10) { self.dumpedRule()?["files_remembered"] as? Int == 0 }, "\(dumpedRule() ?? [:])")
        // The ledger alone still knows them by identity when their directory moves.
        XCTAssertEqual(rename(sandbox.root + "/in/a", sandbox.root + "/in/b"), 0)
        XCTAssertTrue(waitFor(10) { self.dumpedRule()?["duplicates_dropped"] as? Int == 20 }, "\(dumpedRule() ?? [:])")
        XCTAssertEqual(records(sandbox.root + "/handled").count, 20, "moved files must not run again")
    }

    func testRecursive_aDeepTreeCreatedInOneGo_yieldsTheFileInside() throws {
        try start("""
            [[watch]]
            name = "tree"
            path = "@DIR@/in"
            recursive = true
            \(Self.recorder)
            """)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "mkdir -p \(sandbox.root)/in/a/b/c && touch \(sandbox.root)/in/a/b/c/f"]
        try process.run()
        process.waitUntilExit()
        XCTAssertTrue(waitFor(10) { records(sandbox.root + "/handled").count >= 1 }, daemon.stderr)
        letTimePass(0.5) // the watch added on the new directories and its scan could both have reported the file
        XCTAssertEqual(records(sandbox.root + "/handled"), [Array((sandbox.root + "/in/a/b/c/f").utf8)], "exactly once")
    }

    func testSettle_coalescesRepeatedWritesOfOneFileIntoOneJob() throws {
        try skipIfPolling("settle windows; a polled file waits poll_settle instead")
        try start("""
            [[watch]]
            name = "settled"
            path = "@DIR@/in"
            settle = "2s"
            recent_events = 3
            \(Self.recorder)
            """)
        // Writes 50 ms apart, well inside the window even on a loaded machine.
        for round in 0..<5 {
            write("busy.log", "round \(round)")
            usleep(50_000)
        }
        XCTAssertTrue(waitFor(15) { records(sandbox.root + "/handled").count >= 1 }, daemon.stderr)
        letTimePass(0.5) // a second job for any of the five writes would have run by now
        XCTAssertEqual(records(sandbox.root + "/handled").count, 1, daemon.stderr)
        daemon.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let rule = try XCTUnwrap(((state["watches"] as? [String: Any])?["rules"] as? [[String: Any]])?.first)
        XCTAssertEqual(rule["coalesced"] as? Int, 4, "five writes, one job: \(rule)")
        let recent = try XCTUnwrap(rule["recent_events"] as? [[String: Any]])
        XCTAssertEqual(recent.count, 3, "the ring keeps the last recent_events")
        XCTAssertEqual(recent.last?["path"] as? String, "busy.log")
        XCTAssertTrue((recent.last?["mask"] as? String)?.contains("CLOSE_WRITE") ?? false, "\(recent)")
    }

    func testGlobs_selectByRelativePath_andExcludeDotfilesAndTemporaries() throws {
        try start("""
            [[watch]]
            name = "csv"
            path = "@DIR@/in"
            recursive = true
            include = ["**/*.csv"]
            exclude = ["**/.*", "**/*.tmp"]
            \(Self.recorder)
            """)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/in/sub", withIntermediateDirectories: true)
        // Written once sub/ has its own watch, so that inotify, not the new directory's scan, reports its files.
        XCTAssertTrue(waitFor(10) { self.watchesTree(self.dumpedRule(), directories: 2) }, daemon.stderr)
        for name in ["x.csv", ".hidden.csv", "y.txt", "sub/z.csv", "sub/w.csv.tmp"] { write(name) }
        XCTAssertTrue(waitFor(10) { records(sandbox.root + "/handled").count >= 2 }, daemon.stderr)
        letTimePass(0.5) // the excluded files' jobs would have run by now
        let handled = Set(records(sandbox.root + "/handled").map { String(decoding: $0, as: UTF8.self) })
        XCTAssertEqual(handled, [sandbox.root + "/in/x.csv", sandbox.root + "/in/sub/z.csv"])
    }

    func testHostileFileNames_reachTheJobByteExact() throws {
        try start("""
            [[watch]]
            name = "hostile"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        let names: [[UInt8]] = [
            Array("-rf *".utf8), Array("line\nbreak".utf8), Array("$(touch pwned)".utf8), Array("sp ace's \"q\"".utf8),
            [0x66, 0xff, 0xfe, 0x2e, 0x62, 0x69, 0x6e],
        ]
        for name in names {
            let path = Array((sandbox.root + "/in/").utf8) + name + [0]
            let fd = path.withUnsafeBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_WRONLY | O_CREAT, 0o644) }
            XCTAssertGreaterThanOrEqual(fd, 0)
            close(fd)
        }
        XCTAssertTrue(waitFor(10) { records(sandbox.root + "/handled").count == names.count }, daemon.stderr)
        let expected = Set(names.map { Array((sandbox.root + "/in/").utf8) + $0 })
        XCTAssertEqual(Set(records(sandbox.root + "/handled")), expected)
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/in/pwned"))
    }

    /// The machine's kernel limits are shared by every suite on it: a second one (another
    /// checkout's `make test`) that read a knob while this one had it lowered would restore
    /// the lowered value for good. One lock file for every checkout serializes them from the
    /// read to the restore; the descriptor is the caller's to close.
    private func lockKernelLimits() throws -> Int32 {
        let lock = open("/run/watchkeeper-test-kernel-limits.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lock >= 0 else { throw XCTSkip("cannot open /run/watchkeeper-test-kernel-limits.lock") }
        guard flock(lock, LOCK_EX) == 0 else {
            close(lock)
            throw XCTSkip("cannot lock /run/watchkeeper-test-kernel-limits.lock")
        }
        return lock
    }

    /// Starts the daemon (through `start`) with a kernel event queue of 32 events (inotify's,
    /// or fanotify's when the watch tests run with it) and its watching queue blocked for
    /// 1.5 s right after READY (docs/testing.md), so a burst overflows the queue however fast
    /// this machine is. Returns the kernel's name, as the overflow warning says it.
    private func startWithATinyEventQueue(_ start: () throws -> Void) throws -> String {
        try skipIfPolling("a poll has no kernel queue to overflow")
        let kernel = methodUnderTest == "fanotify" ? "fanotify" : "inotify"
        guard getuid() == 0 else { throw XCTSkip("lowering fs.\(kernel).max_queued_events needs root") }
        let knob = "/proc/sys/fs/\(kernel)/max_queued_events"
        let lock = try lockKernelLimits()
        defer { close(lock) }
        let original = try String(contentsOfFile: knob, encoding: .utf8)
        // The limit applies to instances (groups) created while it is set: the daemon's,
        // created before READY. Restored as soon as the daemon is up.
        try "32\n".write(toFile: knob, atomically: false, encoding: .utf8)
        defer { try? original.write(toFile: knob, atomically: false, encoding: .utf8) }
        try start()
        return kernel
    }

    func testQueueOverflow_isRecoveredByARescan_andNoFileIsLost() throws {
        let kernel = try startWithATinyEventQueue {
            try start("""
                [[watch]]
                name = "burst"
                path = "@DIR@/in"
                shell = true
                command = 'printf "%s\\\\0" "$WATCHKEEPER_PATH" >> @DIR@/handled'
                """, daemonExtra: "max_jobs = 8", environment: ["WATCHKEEPER_TEST_STALL": "watching:1500ms:0s"])
        }
        // The daemon's queue holds 32 events; this burst is far larger.
        for index in 0..<600 { write("file-\(index)") }
        XCTAssertTrue(waitFor(60) { Set(records(sandbox.root + "/handled")).count == 600 },
                      "handled \(Set(records(sandbox.root + "/handled")).count) of 600\n\(daemon.stderrTail)")
        XCTAssertTrue(daemon.waitForStderr(containing: "\(kernel) event queue overflowed", timeout: 10), "no overflow happened, the test proves nothing")
        letTimePass(0.5) // a file both read from the queue and found by the rescan would have run twice by now
        XCTAssertEqual(records(sandbox.root + "/handled").count, 600, "every file exactly once")
    }

    func testQueueOverflow_inARuleWithoutCatchUp_runsTheFilesWhoseEventsWereLost_notThoseThereBefore() throws {
        let kernel = try startWithATinyEventQueue {
            try start("""
                [[watch]]
                name = "fresh-only"
                path = "@DIR@/in"
                catch_up = false
                shell = true
                command = 'printf "%s\\\\0" "$WATCHKEEPER_PATH" >> @DIR@/handled'
                """, daemonExtra: "max_jobs = 8", environment: ["WATCHKEEPER_TEST_STALL": "watching:1500ms:0s"]) { root in
                // There before the start (`import incron` writes catch_up = false): never run.
                for index in 0..<100 { FileManager.default.createFile(atPath: root + "/in/old-\(index)", contents: Data("old".utf8)) }
                letTimePass(1.2) // older than the second of slack the rescan allows
            }
        }
        for index in 0..<300 { write("new-\(index)") }
        XCTAssertTrue(waitFor(60) { Set(records(sandbox.root + "/handled")).count >= 300 },
                      "handled \(Set(records(sandbox.root + "/handled")).count) of 300\n\(daemon.stderrTail)")
        XCTAssertTrue(daemon.waitForStderr(containing: "\(kernel) event queue overflowed", timeout: 10), "no overflow happened, the test proves nothing")
        XCTAssertTrue(waitFor(10) { (dumpedRule()?["rescan_older_skipped"] as? Int ?? 0) >= 100 }, daemon.stderrTail)
        let handled = records(sandbox.root + "/handled").map { String(decoding: $0, as: UTF8.self) }
        XCTAssertEqual(handled.filter { $0.contains("/old-") }, [], "files there before the start ran at the overflow's rescan")
        XCTAssertEqual(handled.count, 300, "every new file exactly once")
    }

    func testRootDeletedAndRecreated_isWatchedAgain_andFilesInsideAreHandled() throws {
        try skipIfPolling("a root coming back seen within 2.5 s through inotify on its parent")
        try start("""
            [[watch]]
            name = "comeback"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        try FileManager.default.removeItem(atPath: sandbox.root + "/in")
        XCTAssertTrue(daemon.waitForStderr(containing: "was deleted; its old tree is no longer watched", timeout: 5), daemon.stderr)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/in", withIntermediateDirectories: true)
        write("early")
        // Seen through the watch on its parent, long before the 5 s periodic check.
        XCTAssertTrue(waitFor(2.5) { records(sandbox.root + "/handled").count == 1 }, daemon.stderr)
        write("later")
        XCTAssertTrue(waitFor(5) { records(sandbox.root + "/handled").count == 2 }, daemon.stderr)
        // Waited for: logged before the files' jobs ran, it can still reach stderr after their records.
        XCTAssertTrue(daemon.waitForStderr(containing: "is there (again); watching it", timeout: 10), daemon.stderr)
    }

    func testWatchLimitExhausted_isReportedWithTheSysctlToRaise_andTheSubtreeIsScannedInstead() throws {
        guard getuid() == 0 else { throw XCTSkip("lowering fs.inotify.max_user_watches needs root") }
        try skipUnlessInotify("the inotify watch limit")
        let knob = "/proc/sys/fs/inotify/max_user_watches"
        let lock = try lockKernelLimits()
        defer { close(lock) }
        let original = try String(contentsOfFile: knob, encoding: .utf8)
        defer { try? original.write(toFile: knob, atomically: false, encoding: .utf8) }
        let root = try DaemonSandbox()
        for sub in ["a", "b", "c"] {
            try FileManager.default.createDirectory(atPath: root.root + "/tree/" + sub, withIntermediateDirectories: true)
        }
        sandbox = root
        let notify = try NotifySocket()
        try sandbox.writeConfig("""
            [[watch]]
            name = "big"
            path = "\(root.root)/tree"
            recursive = true
            catch_up = false
            # auto would move the tree to fanotify at the limit (as root): this is about inotify's.
            method = "inotify"
            \(Self.recorder.replacingOccurrences(of: "@DIR@", with: root.root))
            """)
        try "1\n".write(toFile: knob, atomically: false, encoding: .utf8)
        daemon = try sandbox.start(notifySocket: notify, extra: ["WATCHKEEPER_TEST_FALLBACK_INTERVAL": "1s"])
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), daemon.stderr)
        // Waited for: READY=1 waits at most 100 ms for the lines logged before it.
        XCTAssertTrue(daemon.waitForStderr(containing: "inotify watch limit (fs.inotify.max_user_watches=1) reached", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("raise it with: sysctl fs.inotify.max_user_watches="), daemon.stderr)
        let rule = try XCTUnwrap(dumpedRule())
        XCTAssertFalse((rule["unwatched_directories"] as? [String] ?? []).isEmpty, "\(rule)")
        // A file in a directory that has no watch is still handled, by the fallback scan.
        XCTAssertTrue(FileManager.default.createFile(atPath: root.root + "/tree/c/late.csv", contents: Data("x".utf8)))
        XCTAssertTrue(waitFor(10) { records(root.root + "/handled").count == 1 }, daemon.stderr)
        XCTAssertEqual(records(root.root + "/handled"), [Array((root.root + "/tree/c/late.csv").utf8)])
        // Once the limit is raised again, the next pass watches the subtree.
        try original.write(toFile: knob, atomically: false, encoding: .utf8)
        XCTAssertTrue(waitFor(10) {
            let rule = self.dumpedRule()
            return (rule?["unwatched_total"] as? Int) == 0 && (rule?["inotify_watches"] as? Int) == 4
        }, daemon.stderr)
    }

    func testFilesArrivedWhileDown_areCaughtUpAtStart_andHandledOnesAreNotRedone() throws {
        try start("""
            [[watch]]
            name = "ledgered"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        write("before-stop")
        XCTAssertTrue(waitFor(10) { records(sandbox.root + "/handled").count == 1 }, daemon.stderr)
        daemon.stop(within: 10)
        write("while-down")
        let notify = try NotifySocket()
        daemon = try sandbox.start(notifySocket: notify)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        XCTAssertTrue(waitFor(10) { records(sandbox.root + "/handled").count == 2 }, daemon.stderr)
        letTimePass(1.5) // catch-up redoing the file handled before the stop would have run it by now
        let handled = records(sandbox.root + "/handled").map { String(decoding: $0, as: UTF8.self) }
        XCTAssertEqual(handled, [sandbox.root + "/in/before-stop", sandbox.root + "/in/while-down"], "each file once, across the restart")
    }

    func testDaemonKilledMidBurst_everyFileIsHandledAfterRestart_andFinishedOnesAreNotRedone() throws {
        try start("""
            [[watch]]
            name = "burst"
            path = "@DIR@/in"
            shell = true
            command = 'sleep 0.05; printf "%s\\\\0" "$WATCHKEEPER_PATH" >> @DIR@/handled'
            """, daemonExtra: "max_jobs = 2")
        for index in 0..<80 { write("file-\(index)") }
        XCTAssertTrue(waitFor(20) { records(sandbox.root + "/handled").count >= 20 }, daemon.stderrTail)
        daemon.send(SIGKILL)
        _ = daemon.waitForExit(timeout: 5)
        // Jobs still running finish on their own: those of the killed daemon are its orphans now.
        XCTAssertTrue(waitFor(5) { self.processes(mentioning: self.sandbox.root + "/handled").isEmpty },
                      "the killed daemon's jobs are still running: \(processes(mentioning: sandbox.root + "/handled"))")
        let beforeRestart = records(sandbox.root + "/handled").count
        let notify = try NotifySocket()
        daemon = try sandbox.start(notifySocket: notify)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        XCTAssertTrue(waitFor(30) { Set(records(sandbox.root + "/handled")).count == 80 },
                      "handled \(Set(records(sandbox.root + "/handled")).count) of 80 after the restart\n\(daemon.stderrTail)")
        letTimePass(1.5) // catch-up redoing files handled before the kill would have run them by now
        let total = records(sandbox.root + "/handled").count
        // Only jobs whose results never reached the ledger may run twice: the two in flight
        // at the kill, and those that ended within the ledger's 20 ms commit interval before
        // it (at most one per slot: each job takes at least 50 ms).
        XCTAssertLessThanOrEqual(total, 80 + 2 + 2, "\(beforeRestart) handled before the kill, \(total) in all")
    }

    /// A batch job that appends each of its arguments, NUL-terminated, and one "|" per run.
    private static let batchRecorder = #"command = ["/usr/bin/python3", "-c", "import sys,os; f=os.open(sys.argv[1], os.O_WRONLY|os.O_APPEND|os.O_CREAT); os.write(f, b''.join(os.fsencode(a) + b'\\0' for a in sys.argv[2:]) + b'|\\0')", "@DIR@/handled", "{paths}"]"#

    func testBatch_handsTheSettledFilesToOneJob() throws {
        try start("""
            [[watch]]
            name = "batched"
            path = "@DIR@/in"
            batch = true
            settle = "500ms"
            \(Self.batchRecorder)
            """)
        for index in 0..<40 { write("part-\(index)") }
        let bar = [UInt8(ascii: "|")]
        // Every file handled, and the run that handled the last of them finished ("|" comes last).
        XCTAssertTrue(waitFor(10) {
            let entries = self.records(self.sandbox.root + "/handled")
            return entries.last == bar && Set(entries.filter { $0 != bar }).count == 40
        }, daemon.stderr)
        letTimePass(0.8) // a file handed to a second batch would have been handled again by now
        let entries = records(sandbox.root + "/handled")
        let runs = entries.filter { $0 == bar }.count
        let files = entries.filter { $0 != bar }.map { String(decoding: $0, as: UTF8.self) }
        XCTAssertEqual(Set(files), Set((0..<40).map { sandbox.root + "/in/part-\($0)" }))
        XCTAssertEqual(files.count, 40, "each file exactly once")
        XCTAssertLessThanOrEqual(runs, 2, "40 files written at once settle together")
    }

    func testBatch_largerThanTheArgvBudget_isSplitIntoSeveralRuns_neverCut() throws {
        sandbox = nil
        try start("""
            [[watch]]
            name = "split"
            path = "@DIR@/in"
            batch = true
            settle = "500ms"
            \(Self.batchRecorder)
            """)
        // Restart with a 4 KiB budget: 30 names of ~200 bytes need at least two runs.
        daemon.stop(within: 10)
        let notify = try NotifySocket()
        daemon = try sandbox.start(notifySocket: notify, extra: ["WATCHKEEPER_TEST_BATCH_BYTES": "4096"])
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        let long = String(repeating: "n", count: 150)
        for index in 0..<30 { write("\(long)-\(index)") }
        XCTAssertTrue(waitFor(15) { records(sandbox.root + "/handled").filter { $0 != [UInt8(ascii: "|")] }.count == 30 }, daemon.stderr)
        let entries = records(sandbox.root + "/handled")
        let runs = entries.filter { $0 == [UInt8(ascii: "|")] }.count
        let files = entries.filter { $0 != [UInt8(ascii: "|")] }
        XCTAssertGreaterThanOrEqual(runs, 2, "the batch must be split")
        XCTAssertEqual(Set(files).count, 30)
        XCTAssertEqual(files.count, 30, "no file in two runs, none dropped")
    }

    /// Appends the job's whole stdin and a "|" record: one run's paths, as it read them.
    private static let stdinRecorder = #"command = ["/usr/bin/python3", "-c", "import sys,os; d=sys.stdin.buffer.read(); f=os.open(sys.argv[1], os.O_WRONLY|os.O_APPEND|os.O_CREAT); os.write(f, d + b'|\\0')", "@DIR@/handled"]"#

    func testStdinBatch_handsThePathsNulTerminatedOnStdin_byteExact_andSplitsAtTheBudget() throws {
        // 512 bytes a run: the 12 paths below (60 to 150 bytes each) need two or more.
        try start("""
            [[watch]]
            name = "stdin-batch"
            path = "@DIR@/in"
            batch = "stdin"
            settle = "500ms"
            max_concurrent = 1
            \(Self.stdinRecorder)
            """, environment: ["WATCHKEEPER_TEST_BATCH_BYTES": "512"])
        var names: [[UInt8]] = [
            Array("-rf *".utf8), Array("line\nbreak".utf8), Array("$(touch pwned)".utf8), Array("sp ace's \"q\"".utf8),
            [0x66, 0xff, 0xfe, 0x2e, 0x62, 0x69, 0x6e],
        ]
        names += (0..<7).map { index in Array("padding-\(index)-".utf8) + Array(repeating: UInt8(ascii: "x"), count: 80) }
        for name in names {
            let path = Array((sandbox.root + "/in/").utf8) + name + [0]
            let fd = path.withUnsafeBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_WRONLY | O_CREAT, 0o644) }
            XCTAssertGreaterThanOrEqual(fd, 0)
            close(fd)
        }
        let bar = [UInt8(ascii: "|")]
        XCTAssertTrue(waitFor(15) { records(sandbox.root + "/handled").filter { $0 != bar }.count >= names.count }, daemon.stderr)
        letTimePass(0.3) // a path handed to two runs would have been written twice by now
        let entries = records(sandbox.root + "/handled")
        let files = entries.filter { $0 != bar }
        XCTAssertEqual(Set(files), Set(names.map { Array((sandbox.root + "/in/").utf8) + $0 }))
        XCTAssertEqual(files.count, names.count, "each file in exactly one run")
        XCTAssertGreaterThanOrEqual(entries.filter { $0 == bar }.count, 2, "over 900 bytes of paths do not fit a 512-byte run")
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/in/pwned"))
    }

    func testCatchUpOfAWideTree_listsItInParallel_andHandlesEveryFile() throws {
        let root = try DaemonSandbox()
        // 200 directories on one level: listed with concurrentPerform (the threshold is 64).
        for index in 0..<200 {
            let directory = root.root + "/wide/d\(index)"
            try FileManager.default.createDirectory(atPath: directory + "/inner", withIntermediateDirectories: true)
            XCTAssertTrue(FileManager.default.createFile(atPath: directory + "/inner/f.txt", contents: Data("x".utf8)))
        }
        sandbox = root
        let notify = try NotifySocket()
        try sandbox.writeConfig("""
            [daemon]
            max_jobs = 8
            [[watch]]
            name = "wide"
            path = "\(root.root)/wide"
            recursive = true
            shell = true
            command = 'printf "%s\\\\0" "$WATCHKEEPER_PATH" >> \(root.root)/handled'
            """)
        daemon = try sandbox.start(notifySocket: notify)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), daemon.stderr)
        XCTAssertTrue(waitFor(30) { Set(records(root.root + "/handled")).count == 200 },
                      "\(Set(records(root.root + "/handled")).count) of 200\n\(daemon.stderrTail)")
        daemon.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let rule = try XCTUnwrap(((state["watches"] as? [String: Any])?["rules"] as? [[String: Any]])?.first)
        XCTAssertTrue(watchesTree(rule, directories: 401), "the root, 200 directories and 200 inner ones: \(rule)")
    }

    func testMovedInAndDeleted_areTheEventsTheRuleAsksFor() throws {
        try skipIfPolling("a poll sees no deletions and no moves, only files")
        try start("""
            [[watch]]
            name = "moves"
            path = "@DIR@/in"
            events = ["moved_in", "deleted"]
            shell = true
            command = 'printf "%s %s\\\\0" "$WATCHKEEPER_EVENT" "$WATCHKEEPER_NAME" >> @DIR@/handled'
            """)
        let outside = sandbox.root + "/outside"
        FileManager.default.createFile(atPath: outside, contents: Data("x".utf8))
        write("written-here") // closed_write: not asked for
        XCTAssertEqual(rename(outside, sandbox.root + "/in/arrived"), 0)
        XCTAssertEqual(unlink(sandbox.root + "/in/written-here"), 0)
        XCTAssertTrue(waitFor(10) { records(sandbox.root + "/handled").count == 2 }, daemon.stderr)
        letTimePass(0.3) // a job for the closed_write that was not asked for would have run by now
        XCTAssertEqual(Set(records(sandbox.root + "/handled").map { String(decoding: $0, as: UTF8.self) }),
                       ["moved_in arrived", "deleted written-here"])
    }

    func testFailedFileJob_isRetriedPerTheRulesRetryPolicy() throws {
        try start("""
            [[watch]]
            name = "flaky"
            path = "@DIR@/in"
            retry = { attempts = 3, backoff = "200ms" }
            shell = true
            command = 'echo "$WATCHKEEPER_NAME" >> @DIR@/attempts; [ $(wc -l < @DIR@/attempts) -ge 3 ]'
            """)
        write("needs-three-tries")
        XCTAssertTrue(waitFor(10) { daemon.stderr.contains("outcome=ok") }, daemon.stderr)
        let attempts = ((try? String(contentsOfFile: sandbox.root + "/attempts", encoding: .utf8)) ?? "").split(separator: "\n")
        XCTAssertEqual(attempts, ["needs-three-tries", "needs-three-tries", "needs-three-tries"])
        XCTAssertTrue(daemon.stderr.contains("attempt=3"), daemon.stderr)
    }

    func testReload_addsAndRemovesRules_withoutDisturbingUnchangedOnes() throws {
        try start("""
            [[watch]]
            name = "stays"
            path = "@DIR@/in"
            \(Self.recorder)
            """)
        try FileManager.default.createDirectory(atPath: sandbox.root + "/second", withIntermediateDirectories: true)
        try sandbox.writeConfig("""
            [daemon]
            log_level = "debug"

            [[watch]]
            name = "stays"
            path = "\(sandbox.root)/in"
            \(Self.recorder.replacingOccurrences(of: "@DIR@", with: sandbox.root))

            [[watch]]
            name = "added"
            path = "\(sandbox.root)/second"
            \(Self.recorder.replacingOccurrences(of: "@DIR@", with: sandbox.root))
            """)
        daemon.send(SIGHUP)
        XCTAssertTrue(daemon.waitForStderr(containing: "configuration generation 2 in force", timeout: 5), daemon.stderr)
        write("first")
        FileManager.default.createFile(atPath: sandbox.root + "/second/other", contents: Data("x".utf8))
        XCTAssertTrue(waitFor(10) { records(sandbox.root + "/handled").count == 2 }, daemon.stderr)
        daemon.send(SIGUSR1)
        let state = try XCTUnwrap(sandbox.waitForState(sequence: 1, timeout: 5))
        let rules = try XCTUnwrap((state["watches"] as? [String: Any])?["rules"] as? [[String: Any]])
        XCTAssertEqual(rules.map { $0["name"] as? String }, ["stays", "added"])
        // What the unchanged rule heard: events, or files its poll handed on.
        let heard = methodUnderTest == "poll" ? "polled_files" : "events_seen"
        XCTAssertEqual(rules.first?[heard] as? Int ?? 0 > 0, true, "\(rules.first ?? [:])")
    }
}
