import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Every run gets its record in the journal, whatever its outcome (docs/operations.md,
/// MESSAGE_ID b665bf3c...), at the default log level too: the runs a reload or a stop
/// cancels before they start, many at once, as well as one cancelled alone (issue 36).
final class CancelledRunRecordTests: WatchTestCase {
    /// Five files for a rule whose one job at a time sleeps: one runs, four wait.
    private func startWithWaitingRuns() throws {
        try start("""
            [[watch]]
            name = "slow"
            path = "@DIR@/in"
            max_concurrent = 1
            command = ["/bin/sleep", "3"]
            """, logLevel: "info")
        for index in 0..<5 { write("file-\(index)") }
        XCTAssertTrue(waitFor(10) { self.dumpedRule()?["files_in_flight"] as? Int == 5 }, daemon.stderr)
    }

    private func cancelledRecords() -> [Substring] {
        daemon.stderr.split(separator: "\n").filter { $0.contains("watch slow run ") && $0.contains("outcome=cancelled") && $0.contains("run_id=") }
    }

    func testRunsAStopCancelsBeforeTheyStart_haveARecordEach_atTheDefaultLogLevel() throws {
        try startWithWaitingRuns()
        daemon.stop(within: 20)
        XCTAssertTrue(daemon.stderr.contains("4 waiting job(s) and 0 retry(ies) are cancelled"), daemon.stderr)
        let records = cancelledRecords()
        XCTAssertEqual(records.count, 4, daemon.stderr)
        let paths = records.compactMap { line in line.range(of: "path=").map { String(line[$0.upperBound...].prefix { $0 != "," }) } }
        XCTAssertEqual(Set(paths).count, 4, "one record per run: \(records)")
    }

    func testRunsAReloadCancelsBeforeTheyStart_haveARecordEach_atTheDefaultLogLevel() throws {
        try startWithWaitingRuns()
        try sandbox.writeConfig("""
            [daemon]
            log_level = "info"
            """)
        daemon.send(SIGHUP)
        XCTAssertTrue(waitFor(10) { self.cancelledRecords().count >= 4 }, daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("watch slow: 4 job(s) not started yet are cancelled: the watch rule was removed by a reload"), daemon.stderr)
        // Counted once the daemon has stopped: a fifth record would be logged right after the
        // fourth, and could reach stderr after the wait above saw four.
        daemon.stop(within: 20)
        XCTAssertEqual(cancelledRecords().count, 4, daemon.stderr)
    }
}
