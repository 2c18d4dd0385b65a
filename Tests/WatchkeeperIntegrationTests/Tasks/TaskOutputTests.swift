import Foundation
import XCTest
import WatchkeeperCore
import WatchkeeperTestSupport

/// Where a job's stdout and stderr end up, by the rule's `output`, with the daemon logging
/// to stderr (the journal side runs under systemd in Tests/e2e).
extension TaskRunTests {
    func testOutputThroughTheDaemon_isOneEscapedLinePerLine_namedAfterTheJob() throws {
        let (sandbox, daemon, _) = try start(#"""
            [[task]]
            name = "relayed"
            every = "1h"
            run_on_start = true
            command = ["/usr/bin/printf", "plain\n\u001b[2Jesc\nno newline at the end"]
            """#)
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=ok", timeout: 10), daemon.stderr)
        let lines = daemon.stderr.split(separator: "\n").filter { $0.contains("relayed[") && $0.contains(" stdout: ") }
            .map { String($0.components(separatedBy: " stdout: ")[1]) }
        XCTAssertEqual(lines, ["plain", "\\x1b[2Jesc", "no newline at the end"])
        // The sandbox holds the daemon's stderr file: it must outlive the reads above.
        withExtendedLifetime(sandbox) { daemon.stop(within: 20) }
    }

    func testDirectOutput_reachesTheDaemonsStderrAsTheJobWroteIt_withoutTheDaemonReadingIt() throws {
        let (sandbox, daemon, _) = try start(#"""
            [[task]]
            name = "direct"
            every = "1h"
            run_on_start = true
            output = "direct"
            command = ["/bin/sh", "-c", "echo direct-out; echo direct-err >&2; echo \"stream=$JOURNAL_STREAM\""]
            """#)
        XCTAssertTrue(daemon.waitForStderr(containing: "outcome=ok", timeout: 10), daemon.stderr)
        let lines = daemon.stderr.split(separator: "\n").map(String.init)
        XCTAssertTrue(lines.contains("direct-out"), daemon.stderr)
        XCTAssertTrue(lines.contains("direct-err"), daemon.stderr)
        XCTAssertTrue(lines.contains("stream="), "no journal stream outside the journal: \(daemon.stderr)")
        XCTAssertFalse(daemon.stderr.contains("direct["), "the daemon relayed a direct line: \(daemon.stderr)")
        // The sandbox holds the daemon's stderr file: it must outlive the reads above.
        withExtendedLifetime(sandbox) { daemon.stop(within: 20) }
    }
}
