import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// What a reload does to work that waits: it ends with a record or moves to the new rule,
/// never runs twice and never vanishes.
final class WatchReloadTests: WatchTestCase {
    private func reload(_ rules: String) throws {
        try sandbox.writeConfig("""
            [daemon]
            log_level = "debug"
            shutdown_grace = "5s"

            \(rules.replacingOccurrences(of: "@DIR@", with: sandbox.root))
            """)
        daemon.send(SIGHUP)
        XCTAssertTrue(daemon.waitForStderr(containing: "configuration generation 2 in force", timeout: 10), daemon.stderr)
    }

    func testARemovedRule_endsItsSettlingFilesWithACancelledRecordEach() throws {
        try skipIfPolling("settle windows; a polled file waits poll_settle instead")
        try start("""
            [[watch]]
            name = "going"
            path = "@DIR@/in"
            settle = "1h"
            \(Self.recorder)
            """)
        write("one")
        write("two")
        var sequence = 0
        XCTAssertTrue(waitFor(10) {
            sequence += 1
            daemon.send(SIGUSR1)
            let rule = ((sandbox.waitForState(sequence: sequence, timeout: 5)?["watches"] as? [String: Any])?["rules"] as? [[String: Any]])?.first
            return rule?["pending_settle"] as? Int == 2
        }, daemon.stderr)
        try reload("")
        XCTAssertTrue(daemon.waitForStderr(containing: "2 file(s) waiting to settle are not started: the watch rule was removed by a reload", timeout: 5), daemon.stderr)
        // The notice comes first, then one record per file: wait for the records, not the notice.
        func cancelledRecords() -> [Substring] {
            daemon.stderr.split(separator: "\n").filter { $0.contains("watch going run") && $0.contains("outcome=cancelled") }
        }
        XCTAssertTrue(waitFor(10) { cancelledRecords().count >= 2 }, daemon.stderr)
        // Counted again once the daemon has stopped: a third record would be logged right after
        // the second, and could reach stderr after the wait above saw two.
        daemon.stop(within: 20)
        let cancelled = cancelledRecords()
        XCTAssertEqual(cancelled.count, 2, daemon.stderr)
        XCTAssertTrue(cancelled.contains { $0.contains("path=\(sandbox.root)/in/one") }, daemon.stderr)
        XCTAssertTrue(cancelled.contains { $0.contains("path=\(sandbox.root)/in/two") }, daemon.stderr)
        XCTAssertTrue(records(sandbox.root + "/handled").isEmpty)
    }

    func testARuleWhoseJobChanged_runsItsSettlingFilesWithTheNewJob_once() throws {
        try start("""
            [[watch]]
            name = "changing"
            path = "@DIR@/in"
            settle = "1500ms"
            command = ["/bin/sh", "-c", "echo old >> @DIR@/which"]
            """)
        write("file")
        try reload("""
            [[watch]]
            name = "changing"
            path = "@DIR@/in"
            settle = "1500ms"
            command = ["/bin/sh", "-c", "echo new >> @DIR@/which"]
            """)
        XCTAssertTrue(daemon.waitForStderr(containing: "watch changing changed", timeout: 5), daemon.stderr)
        XCTAssertTrue(waitFor(10) { ((try? String(contentsOfFile: sandbox.root + "/which", encoding: .utf8)) ?? "").hasSuffix("\n") }, daemon.stderr)
        XCTAssertEqual(try String(contentsOfFile: sandbox.root + "/which", encoding: .utf8), "new\n")
    }
}
