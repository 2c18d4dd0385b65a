import XCTest

@testable import WatchkeeperCore

/// How `watchkeeper logs` reads its argument, which entries it keeps, and how it shows them.
/// Reading real journal files is covered by Tests/e2e/systemd-e2e.sh, which has a journald.
final class JobLogQueryTests: XCTestCase {
    private let time = WallTime(secondsSinceEpoch: 1_795_729_624, nanoseconds: 123_456_789)  // 2026-11-26T21:47:04.123Z

    private func entry(_ fields: [String: String]) -> JournalEntry {
        JournalEntry(time: time, fields: fields.mapValues { Array($0.utf8) })
    }

    // MARK: - The argument

    func testResolve_sixteenLowerHexDigitsAreARunID() {
        XCTAssertEqual(JobLogQuery.resolve("0123456789abcdef", task: false, watch: false).subject, .run("0123456789abcdef"))
    }

    func testResolve_anythingElseIsATaskOrWatchName() {
        XCTAssertEqual(JobLogQuery.resolve("backup", task: false, watch: false).subject, .named("backup", kinds: [.task, .watch]))
        // Not RunID's form: 15 digits, upper case.
        XCTAssertEqual(JobLogQuery.resolve("0123456789abcde", task: false, watch: false).subject, .named("0123456789abcde", kinds: [.task, .watch]))
        XCTAssertEqual(JobLogQuery.resolve("0123456789ABCDEF", task: false, watch: false).subject, .named("0123456789ABCDEF", kinds: [.task, .watch]))
    }

    func testResolve_taskOrWatchOptionMakesARunIDShapedArgumentAName() {
        XCTAssertEqual(JobLogQuery.resolve("0123456789abcdef", task: true, watch: false).subject, .named("0123456789abcdef", kinds: [.task]))
        XCTAssertEqual(JobLogQuery.resolve("inbox", task: false, watch: true).subject, .named("inbox", kinds: [.watch]))
    }

    // MARK: - Which entries

    func testAccepts_entriesThatNameTheJobAsAKindAskedFor() {
        let taskOnly = JobLogQuery.resolve("backup", task: true, watch: false)
        XCTAssertTrue(taskOnly.accepts(entry(["WATCHKEEPER_TASK": "backup", "MESSAGE": "x"])))
        // A watch rule of the same name, matched by its SYSLOG_IDENTIFIER and unit.
        XCTAssertFalse(taskOnly.accepts(entry(["WATCHKEEPER_WATCH": "backup", "SYSLOG_IDENTIFIER": "backup", "MESSAGE": "x"])))
        XCTAssertTrue(JobLogQuery.resolve("backup", task: false, watch: false).accepts(entry(["WATCHKEEPER_WATCH": "backup"])))
    }

    func testAccepts_directOutputOnlyFromAJournalStreamWithoutRunFields() {
        let query = JobLogQuery.resolve("backup", task: false, watch: false)
        XCTAssertTrue(query.accepts(entry(["SYSLOG_IDENTIFIER": "backup", "_STREAM_ID": "a1b2", "_PID": "42", "MESSAGE": "x"])))
        // The daemon's own message (native protocol, no stream) under a task named like it.
        XCTAssertFalse(query.accepts(entry(["SYSLOG_IDENTIFIER": "backup", "MESSAGE": "x"])))
        XCTAssertFalse(query.accepts(entry(["SYSLOG_IDENTIFIER": "backup", "_STREAM_ID": "a1b2", "WATCHKEEPER_RUN_ID": "0123456789abcdef"])))
    }

    func testAccepts_everythingMatchedByARunID() {
        XCTAssertTrue(JobLogQuery.resolve("0123456789abcdef", task: false, watch: false).accepts(entry(["WATCHKEEPER_WATCH": "inbox"])))
    }

    // MARK: - The lines

    func testLine_outputLineNamesJobRunAndStream() {
        let line = JobLogQuery.line(entry(["WATCHKEEPER_TASK": "backup", "WATCHKEEPER_RUN_ID": "0123456789abcdef",
                                           "WATCHKEEPER_STREAM": "stderr", "MESSAGE": "disk almost full", "PRIORITY": "4"]))
        XCTAssertEqual(line, "2026-11-26T21:47:04.123Z task backup 0123456789abcdef stderr: disk almost full")
    }

    func testLine_jobOutputStaysOneLineAndValidUTF8() {
        let message: [UInt8] = Array("a\nforged\u{1B}[2J ".utf8) + [0xE9] + Array(" \\x41 \u{202E}".utf8)
        let line = JobLogQuery.line(JournalEntry(time: time, fields: [
            "WATCHKEEPER_TASK": Array("backup".utf8), "WATCHKEEPER_RUN_ID": Array("0123456789abcdef".utf8),
            "WATCHKEEPER_STREAM": Array("stdout".utf8), "MESSAGE": message,
        ]))
        // Controls and bad bytes escaped; backslashes kept, as the daemon's stderr shows job lines.
        XCTAssertEqual(line, "2026-11-26T21:47:04.123Z task backup 0123456789abcdef stdout: a\\nforged\\x1b[2J \\xe9 \\x41 \\u202e")
    }

    func testLine_nameFromTheJournalIsEscaped() {
        let line = JobLogQuery.line(entry(["WATCHKEEPER_WATCH": "in\nbox", "WATCHKEEPER_RUN_ID": "0123456789abcdef",
                                           "WATCHKEEPER_STREAM": "stdout", "MESSAGE": "ok"]))
        XCTAssertEqual(line, "2026-11-26T21:47:04.123Z watch in\\nbox 0123456789abcdef stdout: ok")
    }

    func testLine_recordShowsTheOutcomeWithoutRepeatingJobAndRun() {
        let record = entry(["WATCHKEEPER_TASK": "backup", "WATCHKEEPER_RUN_ID": "0123456789abcdef", "MESSAGE_ID": MessageID.runFinished.rawValue,
                            "MESSAGE": "task backup run 0123456789abcdef: failed (exit 3) in 1.2s", "PRIORITY": "4"])
        XCTAssertEqual(JobLogQuery.line(record), "2026-11-26T21:47:04.123Z task backup 0123456789abcdef ended: failed (exit 3) in 1.2s")
        let file = entry(["WATCHKEEPER_WATCH": "inbox", "WATCHKEEPER_RUN_ID": "0123456789abcdef", "MESSAGE_ID": MessageID.runFinished.rawValue,
                          "MESSAGE": "watch inbox run 0123456789abcdef (/srv/in/caf\\xe9): ok (exit 0) in 3ms"])
        XCTAssertEqual(JobLogQuery.line(file), "2026-11-26T21:47:04.123Z watch inbox 0123456789abcdef ended (/srv/in/caf\\xe9): ok (exit 0) in 3ms")
    }

    func testLine_daemonMessageAboutTheRunShowsItsPriority() {
        let warning = entry(["WATCHKEEPER_TASK": "backup", "WATCHKEEPER_RUN_ID": "0123456789abcdef", "PRIORITY": "4",
                             "MESSAGE": "task backup has used 80% of its 1m budget"])
        XCTAssertEqual(JobLogQuery.line(warning), "2026-11-26T21:47:04.123Z task backup 0123456789abcdef warning: task backup has used 80% of its 1m budget")
        let skipped = entry(["WATCHKEEPER_TASK": "backup", "PRIORITY": "5", "MESSAGE": "task backup: fire skipped"])
        XCTAssertEqual(JobLogQuery.line(skipped), "2026-11-26T21:47:04.123Z task backup notice: task backup: fire skipped")
    }

    func testLine_directOutputNamesIdentifierAndProcess() {
        let line = JobLogQuery.line(entry(["SYSLOG_IDENTIFIER": "backup", "_PID": "4242", "_STREAM_ID": "a1", "MESSAGE": "straight"]))
        XCTAssertEqual(line, "2026-11-26T21:47:04.123Z backup[4242] output: straight")
    }
}
