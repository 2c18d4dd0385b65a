import Foundation
import XCTest

@testable import WatchkeeperCore
@testable import WatchkeeperImport
import WatchkeeperTestSupport

final class SystemdUnitImporterTests: ScratchDirectoryTestCase {
    /// Writes the units into the scratch directory and imports the first.
    private func importUnits(_ units: [(name: String, text: String)], give: [String]? = nil) throws -> Imported {
        for unit in units {
            try unit.text.write(toFile: directory + "/" + unit.name, atomically: true, encoding: .utf8)
        }
        let files = (give ?? [units[0].name]).map { directory + "/" + $0 }
        var config = ImportedConfig()
        config.sources = files
        for file in files {
            let text = try String(contentsOfFile: file, encoding: .utf8)
            SystemdUnitImporter(searchDirectories: []).importFile(path: file, text: text, givenFiles: files, into: &config)
        }
        return Imported(config: config, toml: config.toml())
    }

    private let oneshot = """
        [Unit]
        Description=Nightly report
        ConditionACPower=true

        [Service]
        Type=oneshot
        ExecStart=/usr/local/bin/report --all
        """

    func testCalendar_severalLines_becomeACalendarArray_withPersistentJitterAndNotes() throws {
        let imported = try importUnits([("report.timer", """
            [Unit]
            Description=Run the report

            [Timer]
            OnCalendar=Mon..Fri 06:00
            OnCalendar=Sat *-*-* 09:30:00 Europe/Berlin
            Persistent=true
            RandomizedDelaySec=30min
            AccuracySec=1h
            WakeSystem=true

            [Install]
            WantedBy=timers.target
            """), ("report.service", oneshot)])
        let entry = try XCTUnwrap(imported.entry("report"))
        XCTAssertEqual(entry["calendar"], .strings(["Mon..Fri 06:00", "Sat *-*-* 09:30:00 Europe/Berlin"]))
        XCTAssertEqual(entry.origin, .systemdCalendar(["Mon..Fri 06:00", "Sat *-*-* 09:30:00 Europe/Berlin"]))
        XCTAssertEqual(entry["persistent"], .bool(true))
        XCTAssertEqual(entry["jitter"], .string("30m"))
        XCTAssertEqual(entry["command"], .strings(["/usr/local/bin/report", "--all"]))
        XCTAssertTrue(entry.notes.contains { $0.hasPrefix("AccuracySec=1h") })
        let reasons = imported.config.untranslated.map { "\($0.text) -> \($0.reason)" }
        XCTAssertTrue(reasons.contains { $0.hasPrefix("WakeSystem=true") })
        XCTAssertTrue(reasons.contains { $0.hasPrefix("WantedBy=timers.target") })
        XCTAssertTrue(reasons.contains { $0.hasPrefix("ConditionACPower=true") })
        try requireConfigKey("calendar")
        XCTAssertNotNil(imported.loaded())
    }

    func testMonotonicTimer_isEveryWithRunOnStart_andLoadsNow() throws {
        let imported = try importUnits([("clean.timer", "[Timer]\nOnBootSec=15min\nOnUnitActiveSec=1d 2h\n"), ("clean.service", oneshot)])
        let entry = try XCTUnwrap(imported.entry("clean"))
        XCTAssertEqual(entry["every"], .string("1d2h"))
        XCTAssertEqual(entry["run_on_start"], .bool(true))
        XCTAssertTrue(entry.notes.contains { $0.contains("not 15min after boot") })
        let task = try XCTUnwrap(imported.loaded()?.tasks.first)
        XCTAssertEqual(task.schedule, .every(.seconds(93_600)))
    }

    /// systemd reads CR LF as a line end, and skips a byte-order mark: so does the import.
    func testUnitsSavedOnWindows_readAsSystemdReadsThem() throws {
        let imported = try importUnits([("win.timer", "\u{FEFF}[Unit]\r\nDescription=x\r\n[Timer]\r\nOnCalendar=daily\r\n"),
                                        ("win.service", "[Service]\r\nExecStart=/bin/true --x\r\n")], give: ["win.timer", "win.service"])
        let entry = try XCTUnwrap(imported.entry("win"), imported.toml)
        XCTAssertEqual(entry["calendar"], .string("daily"))
        XCTAssertEqual(entry["command"], .strings(["/bin/true", "--x"]))
        XCTAssertTrue(imported.config.untranslated.isEmpty, imported.toml)
    }

    func testServiceSettings_mapToJobKeys() throws {
        let imported = try importUnits([("job.timer", "[Timer]\nOnUnitInactiveSec=90\nUnit=other.service\n"), ("other.service", """
            [Service]
            Type=oneshot
            User=root
            Group=root
            WorkingDirectory=-/var/tmp
            Environment="GREETING=hello world" PLAIN=1
            Environment=EMPTY=
            EnvironmentFile=-/etc/default/job
            TimeoutStartSec=5min 30s
            KillSignal=SIGINT
            TimeoutStopSec=20
            MemoryMax=512M
            CPUWeight=20
            Nice=15
            ProtectSystem=strict
            ExecStartPre=-/bin/mkdir -p /run/job
            ExecStart=/usr/bin/job --unit %n "--name=%N" ${GREETING}
            ExecStart=/usr/bin/job $PLAIN
            """)])
        let entry = try XCTUnwrap(imported.entry("job"))
        XCTAssertEqual(entry["every"], .string("1m30s"))
        XCTAssertEqual(entry["user"], .string("root"))
        XCTAssertEqual(entry["group"], .string("root"))
        XCTAssertEqual(entry["working_directory"], .string("/var/tmp"))
        XCTAssertEqual(entry["environment"], .table([("GREETING", "hello world"), ("PLAIN", "1"), ("EMPTY", "")]))
        XCTAssertEqual(entry["budget"], .string("5m30s"))
        XCTAssertEqual(entry["stop_signal"], .string("SIGINT"))
        XCTAssertEqual(entry["kill_grace"], .string("20s"))
        XCTAssertEqual(entry["memory_max"], .string("512M"))
        XCTAssertEqual(entry["cpu_weight"], .integer(20))
        XCTAssertEqual(entry["priority"], .string("low"))
        XCTAssertEqual(entry["shell"], .bool(true))
        XCTAssertEqual(entry["command"], .string(#"(/bin/mkdir -p /run/job || true) && /usr/bin/job --unit other.service --name=other "${GREETING}" && /usr/bin/job $PLAIN"#))
        let untranslated = imported.config.untranslated.map(\.text)
        XCTAssertTrue(untranslated.contains("EnvironmentFile=-/etc/default/job"))
        XCTAssertTrue(untranslated.contains("ProtectSystem=strict"))
        XCTAssertNotNil(imported.loaded())
    }

    func testStartTimeout_ofASimpleService_isNoBudget() throws {
        let imported = try importUnits([("s.timer", "[Timer]\nOnUnitActiveSec=1h\n"), ("s.service", "[Service]\nExecStart=/bin/true\nTimeoutStartSec=10\nRuntimeMaxSec=2h\n")])
        XCTAssertEqual(imported.entry("s")?["budget"], .string("2h"))
        XCTAssertTrue(imported.config.untranslated.contains { $0.text == "TimeoutStartSec=10" && $0.reason.contains("Type=simple") })
    }

    func testExecCommand_runsInTheShellAsSystemdWouldHaveRunIt() throws {
        let command = try ExecCommand.parse(#"/bin/echo "a  b" 'c\'d' ${X} $X x${X}y \$"#, unitName: "u.service").get()
        let output = try runShell(command.shellText, environment: ["X": "1 2"])
        XCTAssertEqual(output, "a  b c'd 1 2 1 2 x1 2y $\n")
    }

    func testSpecifiers_ofTheRunningManager_refuseTheUnit_withTheReason() throws {
        let imported = try importUnits([("home.timer", "[Timer]\nOnUnitActiveSec=1h\n"), ("home.service", "[Service]\nExecStart=/bin/ls %h\n")])
        XCTAssertTrue(imported.config.entries.isEmpty)
        XCTAssertTrue(imported.config.untranslated.first?.reason.contains("%h") == true, imported.toml)
    }

    func testMissingService_andTemplateTimers_areUntranslated() throws {
        let imported = try importUnits([("lonely.timer", "[Timer]\nOnCalendar=daily\n"), ("tpl@.timer", "[Timer]\nOnCalendar=daily\n")], give: ["lonely.timer", "tpl@.timer"])
        XCTAssertTrue(imported.config.entries.isEmpty)
        XCTAssertEqual(imported.config.untranslated.count, 2)
        XCTAssertTrue(imported.config.untranslated[0].reason.contains("unable to find lonely.service"))
        XCTAssertTrue(imported.config.untranslated[1].reason.contains("template"))
    }

    func testPathUnit_directivesBecomeWatchRules() throws {
        try FileManager.default.createDirectory(atPath: directory + "/spool", withIntermediateDirectories: true)
        let imported = try importUnits([("inbox.path", """
            [Path]
            DirectoryNotEmpty=/srv/in
            PathExistsGlob=/srv/drop/*.ready
            PathModified=/etc/app.conf
            PathChanged=\(directory)/spool
            PathExists=/run/flag
            MakeDirectory=true
            """), ("inbox.service", oneshot)])
        XCTAssertEqual(imported.config.entries.count, 5, imported.toml)
        let rules = imported.config.entries
        XCTAssertEqual(rules[0]["path"], .string("/srv/in"))
        XCTAssertEqual(rules[0]["events"], .strings(["created", "moved_in"]))
        XCTAssertEqual(rules[1]["path"], .string("/srv/drop"))
        XCTAssertEqual(rules[1]["include"], .strings(["*.ready"]))
        XCTAssertEqual(rules[2]["path"], .string("/etc"))
        XCTAssertEqual(rules[2]["include"], .strings(["app.conf"]))
        XCTAssertEqual(rules[2]["events"], .strings(["modified", "closed_write", "moved_in", "created", "deleted", "moved_out", "attrib"]))
        XCTAssertEqual(rules[3]["path"], .string(directory + "/spool"))
        XCTAssertNil(rules[3]["include"])
        XCTAssertEqual(rules[4]["include"], .strings(["flag"]))
        XCTAssertTrue(imported.config.untranslated.contains { $0.text == "MakeDirectory=true" })
        let configuration = try XCTUnwrap(imported.loaded())
        XCTAssertEqual(configuration.watches.count, 5)
    }

    func testTimeSpans_areReadAsSystemdReadsThem() {
        XCTAssertEqual(SystemdUnitImporter.timeSpan("90"), 90)
        XCTAssertEqual(SystemdUnitImporter.timeSpan("1h 30min"), 5_400)
        XCTAssertEqual(SystemdUnitImporter.timeSpan("2d3h"), 183_600)
        XCTAssertEqual(SystemdUnitImporter.timeSpan("500ms"), 0.5)
        XCTAssertEqual(SystemdUnitImporter.timeSpan("1w"), 604_800)
        XCTAssertNil(SystemdUnitImporter.timeSpan("soon"))
        XCTAssertEqual(SystemdUnitImporter.durationText(93_600.5), "1d2h500ms")
    }

    func testSystemdAnalyze_isReadBack_inUTC() throws {
        guard SystemdAnalyzeCalendar.isInstalled else { throw XCTSkip("no systemd-analyze here") }
        // The same times by systemd and by CronExpression, in the machine's zone, which both use.
        let local = try TimeZoneRules.local()
        let base: Int64 = 1_700_000_000
        let fires = try SystemdAnalyzeCalendar.fires(["daily", "*-*-* 12:00", "Sun 03:10"], after: base, count: 20).get()
        var expected: [Int64] = []
        for spec in ["0 0 * * *", "0 12 * * *", "10 3 * * 0"] {
            var cursor = base
            for _ in 0..<20 {
                guard let next = try CronExpression(parsing: spec).nextFire(after: cursor, in: local) else { break }
                expected.append(next)
                cursor = next
            }
        }
        XCTAssertEqual(fires, Array(Set(expected).sorted().prefix(20)))
        let text = """
              Original form: daily
            Normalized form: *-*-* 00:00:00
                Next elapse: Wed 2023-11-15 00:00:00 CET
                   (in UTC): Tue 2023-11-14 23:00:00 UTC
                   From now: 3 years 0 months ago
                   Iter. #2: Thu 2023-11-16 00:00:00 CET
                   (in UTC): Wed 2023-11-15 23:00:00 UTC
            """
        XCTAssertEqual(SystemdAnalyzeCalendar.parse(text, count: 5), [1_700_002_800, 1_700_089_200])
    }
}
