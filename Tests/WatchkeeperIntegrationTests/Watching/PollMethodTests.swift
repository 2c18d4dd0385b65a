import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// `method = "poll"` on a local tree (issue 24): what a poll finds goes through the same
/// admission as an event, so catch-up, the ledger, moves, batches, retries and hostile names
/// behave as they do with inotify, and no inotify watch is used for the tree.
final class PollMethodTests: WatchTestCase {
    private static let polled = """
        method = "poll"
        poll_interval = "1s"
        poll_settle = "1s"
        """

    private func handled() -> [[UInt8]] { records(sandbox.root + "/handled") }

    func testCatchUpAndTheLedger_runEachFileOnce_acrossARestart_andAMoveWithinTheTree() throws {
        try start("""
            [[watch]]
            name = "polled"
            path = "@DIR@/in"
            recursive = true
            \(Self.polled)
            \(Self.recorder)
            """) { root in
            try FileManager.default.createDirectory(atPath: root + "/in/a", withIntermediateDirectories: true)
            for index in 0..<20 { FileManager.default.createFile(atPath: root + "/in/a/before-\(index)", contents: Data("\(index)".utf8)) }
        }
        XCTAssertTrue(waitFor(20) { self.handled().count == 20 }, "\(handled().count)\n\(daemon.stderr)")
        let rule = try XCTUnwrap(dumpedRule())
        XCTAssertEqual(rule["inotify_watches"] as? Int, 0, "a polled rule uses no inotify watch for its tree")
        XCTAssertEqual((rule["polled_trees"] as? [[String: Any]])?.count, 1)
        XCTAssertTrue(daemon.waitForStderr(containing: "the rule says method = \"poll\": polling it every 1s", timeout: 10), daemon.stderr)

        daemon.stop(within: 10)
        for index in 0..<5 { create(sandbox.root + "/in/a/while-down-\(index)") }
        let notify = try NotifySocket()
        daemon = try sandbox.startReady(notifySocket: notify)
        XCTAssertTrue(waitFor(20) { self.handled().count == 25 }, "\(handled().count)\n\(daemon.stderr)")
        // A handled directory moved within the tree is known by the ledger at its new path.
        XCTAssertEqual(rename(sandbox.root + "/in/a", sandbox.root + "/in/b"), 0)
        create(sandbox.root + "/in/b/after-the-move")
        XCTAssertTrue(waitFor(20) { self.handled().count == 26 }, "\(handled().count)\n\(daemon.stderr)")
        letTimePass(3) // three passes: the moved files would have run again by now
        let paths = handled().map { String(decoding: $0, as: UTF8.self) }
        XCTAssertEqual(paths.count, 26, "\(paths.filter { $0.contains("/in/b/") && !$0.hasSuffix("after-the-move") })")
        XCTAssertEqual(Set(paths).count, 26)
    }

    func testWithoutCatchUp_filesWrittenBeforeTheStart_doNotRun_evenJustBefore() throws {
        try start("""
            [[watch]]
            name = "fresh-only"
            path = "@DIR@/in"
            catch_up = false
            \(Self.polled)
            \(Self.recorder)
            """) { root in
            FileManager.default.createFile(atPath: root + "/in/long-before", contents: Data("old".utf8))
            letTimePass(1.2)
            // Just before the start (its configuration is being read): there before it, all the same.
            FileManager.default.createFile(atPath: root + "/in/just-before", contents: Data("old".utf8))
        }
        write("after")
        XCTAssertTrue(waitFor(20) { !self.handled().isEmpty }, daemon.stderr)
        letTimePass(2.5) // two more passes: a file there before would have run by now
        XCTAssertEqual(handled().map { String(decoding: $0, as: UTF8.self) }, [sandbox.root + "/in/after"])
    }

    func testBatchOnStdin_takesTheFilesSettledTogether_eachOnce() throws {
        try start("""
            [[watch]]
            name = "batched"
            path = "@DIR@/in"
            batch = "stdin"
            settle = "1s"
            \(Self.polled)
            command = ["/bin/sh", "-c", "cat >> @DIR@/handled"]
            """)
        letTimePass(1.5) // the first pass has learned the empty tree
        for index in 0..<50 { write("f\(index)") }
        XCTAssertTrue(waitFor(20) { self.handled().count == 50 }, "\(handled().count)\n\(daemon.stderr)")
        letTimePass(2.5)
        XCTAssertEqual(Set(handled()).count, 50)
        XCTAssertEqual(handled().count, 50)
        let batches = try XCTUnwrap(dumpedRule()?["batches_started"] as? Int)
        XCTAssertLessThanOrEqual(batches, 5, "files settled together go to one job, not one each")
    }

    func testAFailedJob_isRetriedPerTheRulesPolicy() throws {
        try start("""
            [[watch]]
            name = "flaky"
            path = "@DIR@/in"
            retry = { attempts = 3, backoff = "200ms" }
            \(Self.polled)
            shell = true
            command = 'echo "$WATCHKEEPER_NAME" >> @DIR@/attempts; [ $(wc -l < @DIR@/attempts) -ge 3 ]'
            """)
        write("needs-three-tries")
        XCTAssertTrue(waitFor(20) { self.daemon.stderr.contains("outcome=ok") }, daemon.stderr)
        letTimePass(2.5) // a finished file is not found again by the next passes
        let attempts = ((try? String(contentsOfFile: sandbox.root + "/attempts", encoding: .utf8)) ?? "").split(separator: "\n")
        XCTAssertEqual(attempts, ["needs-three-tries", "needs-three-tries", "needs-three-tries"])
    }

    func testHostileNames_reachTheJobByteForByte() throws {
        try start("""
            [[watch]]
            name = "names"
            path = "@DIR@/in"
            \(Self.polled)
            \(Self.recorder)
            """)
        let names: [[UInt8]] = [Array("-rf *".utf8), Array("line\nbreak".utf8), Array("$(touch pwned)".utf8), [0x66, 0xff, 0xfe, 0x2e, 0x62]]
        for name in names {
            let path = Array((sandbox.root + "/in/").utf8) + name + [0]
            let fd = path.withUnsafeBufferPointer { open(UnsafeRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), O_WRONLY | O_CREAT, 0o644) }
            XCTAssertGreaterThanOrEqual(fd, 0)
            close(fd)
        }
        XCTAssertTrue(waitFor(20) { self.handled().count == names.count }, "\(handled().count)\n\(daemon.stderr)")
        XCTAssertEqual(Set(handled()), Set(names.map { Array((sandbox.root + "/in/").utf8) + $0 }))
        XCTAssertFalse(FileManager.default.fileExists(atPath: sandbox.root + "/in/pwned"))
    }
}
