import XCTest
@testable import WatchkeeperCore

/// `watchkeeper status` as drawn from a Status reply.
final class StatusViewTests: XCTestCase {
    let status: DumpValue = .object([
        .init("version", .string("0.1.0")),
        .init("pid", .int(42)),
        .init("uptime_s", .double(75)),
        .init("status", .string("running; 1 job(s) running")),
        .init("daemon", .object([.init("state", .string("running")), .init("config", .object([
            .init("path", .string("/etc/watchkeeper/watchkeeper.toml")), .init("generation", .int(3)),
            .init("loaded_at", .string("2026-11-23T10:00:00.000Z")), .init("last_reload", .null),
        ]))])),
        .init("jobs", .object([
            .init("running_total", .int(1)), .init("waiting_total", .int(0)), .init("retrying_total", .int(0)),
            .init("max_jobs", .int(4)), .init("started_since_start", .int(9)),
            .init("running", .array([.object([
                .init("task", .string("backup")), .init("run_id", .string("00000000000000aa")), .init("pid", .int(77)),
                .init("phase", .string("running")), .init("elapsed_s", .double(45)), .init("budget_s", .double(60)),
                .init("warn_at_s", .double(30)), .init("progress", .double(50)),
                .init("status", .string("copying \u{1B}]0;owned\u{7} disk")),
            ])])),
        ])),
    ])

    func testPlain_hasBarsAndNoEscapeCodes_andEscapesWhatAJobWrote() {
        let text = StatusView.render(status, style: TerminalStyle(colour: false, unicode: true))
        XCTAssertFalse(text.contains("\u{1B}"), "no raw ESC, neither ours nor the job's:\n\(text)")
        XCTAssertTrue(text.contains("copying \\x1b]0;owned\\x07 disk"), text)
        XCTAssertTrue(text.contains("progress [████████████░░░░░░░░░░░░]  50%"), text)
        // 45 s of 60: 18 of 24 cells, the warning point (30 s) already passed.
        XCTAssertTrue(text.contains("budget   [██████████████████░░░░░░] 45s of 1m (warns at 30s)"), text)
        XCTAssertTrue(text.contains("generation 3"), text)
    }

    /// What the CLI reads: the daemon's reply after its way through JSON, where a path that
    /// is not UTF-8 travels as an array of byte values.
    private func throughTheSocket(_ value: DumpValue) throws -> DumpValue {
        try DumpValue.parse(json: value.json)
    }

    func testRunningJob_showsTheFileItRunsOn_escaped_whateverItsBytes() throws {
        for (about, shown) in [(Array("/srv/in/report\u{202E}fdp.exe".utf8), "/srv/in/report\\u202efdp.exe"),
                               ([0x2F, 0x61, 0xFF, 0x0A, 0x62], "/a\\xff\\nb")] {
            let reply = try throughTheSocket(.object([.init("jobs", .object([.init("running", .array([.object([
                .init("watch", .string("inbox")), .init("run_id", .string("00000000000000bb")), .init("pid", .int(78)),
                .init("phase", .string("running")), .init("about", .bytes(about)),
            ])]))]))]))
            let text = StatusView.render(reply, style: TerminalStyle(colour: false, unicode: false))
            XCTAssertTrue(text.contains("  inbox (watch)  run 00000000000000bb  pid 78  running  \(shown)\n"), text)
        }
    }

    func testDraining_showsHowLongTheDrainHasTaken_thenTheUptime() {
        let draining: DumpValue = .object([
            .init("version", .string("0.1.0")), .init("pid", .int(42)), .init("uptime_s", .double(7_200)),
            .init("daemon", .object([.init("state", .string("draining")), .init("draining_s", .double(3))])),
        ])
        let first = StatusView.render(draining, style: TerminalStyle(colour: false, unicode: false)).split(separator: "\n").first ?? ""
        XCTAssertTrue(first.contains("draining for 3s, up 2h"), String(first))
    }

    func testHistoryOfAWatchRule_showsEachFileEscaped_evenOneThatIsNotUTF8() throws {
        let reply = try throughTheSocket(.object([.init("kind", .string("watch")), .init("runs", .array([
            .object([.init("run_id", .string("00000000000000cc")), .init("outcome", .string("ok")),
                     .init("started_at", .string("2026-11-23T10:00:00.000Z")), .init("finished_at", .string("2026-11-23T10:00:01.000Z")),
                     .init("duration_s", .double(1)), .init("exit_code", .int(0)), .init("signal", .null),
                     .init("path", .bytes(Array("in/report\u{202E}fdp.exe".utf8)))]),
            .object([.init("run_id", .null), .init("outcome", .string("failed")), .init("started_at", .null),
                     .init("finished_at", .string("2026-11-23T09:00:00.000Z")), .init("duration_s", .null),
                     .init("exit_code", .null), .init("signal", .string("SIGKILL")),
                     .init("path", .bytes([0x69, 0x6E, 0x2F, 0xFF, 0x1B, 0x5B, 0x32, 0x4A]))]),
        ]))]))
        XCTAssertEqual(HistoryView.render(reply), [
            "STARTED                   DURATION  OUTCOME  EXIT     RUN               FILE",
            "2026-11-23T10:00:00.000Z  1s        ok       0        00000000000000cc  in/report\\u202efdp.exe",
            "2026-11-23T09:00:00.000Z  -         failed   SIGKILL  -                 in/\\xff\\x1b[2J",
        ])
    }

    func testHistoryOfATask_hasNoFileColumn() {
        let reply: DumpValue = .object([.init("kind", .string("task")), .init("runs", .array([
            .object([.init("run_id", .string("00000000000000dd")), .init("outcome", .string("expired")),
                     .init("started_at", .string("2026-11-23T10:00:00.000Z")), .init("duration_s", .double(60)),
                     .init("signal", .string("SIGTERM"))]),
        ]))])
        XCTAssertEqual(HistoryView.render(reply), [
            "STARTED                   DURATION  OUTCOME  EXIT     RUN",
            "2026-11-23T10:00:00.000Z  1m        expired  SIGTERM  00000000000000dd",
        ])
    }

    func testBudgetBar_marksTheWarningPointAheadOfTheElapsedPart() {
        let style = TerminalStyle(colour: false, unicode: false)
        XCTAssertEqual(style.bar(0.25, width: 8, mark: 0.5), "[##..|...]")
        XCTAssertEqual(style.bar(2, width: 4), "[####]", "an overrun fills the bar, no more")
    }

    func testColour_onlyWhenAsked_andNeverWithNO_COLOR() {
        XCTAssertTrue(StatusView.render(status, style: TerminalStyle(colour: true, unicode: true)).contains("\u{1B}[32m"))
        XCTAssertTrue(TerminalStyle.detect(isTerminal: true, environment: ["LANG": "C.UTF-8"]).colour)
        XCTAssertFalse(TerminalStyle.detect(isTerminal: true, environment: ["NO_COLOR": "1"]).colour)
        XCTAssertFalse(TerminalStyle.detect(isTerminal: false, environment: [:]).colour)
        XCTAssertFalse(TerminalStyle.detect(isTerminal: true, environment: ["LANG": "C"]).unicode)
    }

    func testTables_alignOnTheWidestCell_ignoringColourCodes() {
        let lines = TableView.render(header: ["A", "B"], rows: [["long-name", "\u{1B}[33mx\u{1B}[0m"], ["s", "y"]])
        XCTAssertEqual(lines[0], "A          B")
        XCTAssertEqual(lines[2], "s          y")
    }
}
