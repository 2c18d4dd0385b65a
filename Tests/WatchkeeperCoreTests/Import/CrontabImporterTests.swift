import Foundation
import XCTest

@testable import WatchkeeperCore

final class CrontabImporterTests: XCTestCase {
    func testFieldForms_andMacros_becomeCronKeys_thatLoad() throws {
        let imported = importCron("""
            0 3 * * *  /bin/a
            */5 9-17 * * mon-fri /bin/b
            0,30 0-6/2 1,15 jan-jun 1 /bin/c
            @daily /bin/d
            @hourly /bin/e
            @annually /bin/f
            """)
        let configuration = try XCTUnwrap(imported.loaded())
        XCTAssertEqual(configuration.tasks.map(\.name), ["a-l1", "b-l2", "c-l3", "d-l4", "e-l5", "f-l6"])
        XCTAssertEqual(imported.entry("b-l2")?["cron"], .string("*/5 9-17 * * mon-fri"))
        XCTAssertEqual(imported.entry("d-l4")?["cron"], .string("@daily"))
        XCTAssertEqual(imported.entry("a-l1")?["user"], .string("root"), "a crontab in the spool runs as its owner")
    }

    func testReboot_isManualAndRunOnStart_withANoteThatARestartRunsItToo() throws {
        let imported = importCron("@reboot /usr/local/bin/warm-cache\n")
        let entry = try XCTUnwrap(imported.entry("warm-cache-l1"))
        XCTAssertEqual(entry["manual"], .bool(true))
        XCTAssertEqual(entry["run_on_start"], .bool(true))
        XCTAssertTrue(entry.notes.contains { $0.contains("after every restart of the daemon") })
        XCTAssertTrue(try XCTUnwrap(imported.loaded()).tasks[0].runOnStart)
    }

    func testAssignments_applyToTheEntriesAfterThem_asCronReadsThem() throws {
        let imported = importCron("""
            0 1 * * * /bin/before
            PATH=/opt/bin:/usr/bin
            CRON_TZ=Europe/Berlin
            GREETING = "  hello  "
            0 2 * * * /bin/after
            """)
        let before = try XCTUnwrap(imported.entry("before-l1"))
        XCTAssertEqual(before["environment"], .table([("PATH", "/usr/bin:/bin")]), "cron's own default PATH")
        XCTAssertNil(before["timezone"])
        let after = try XCTUnwrap(imported.entry("after-l5"))
        XCTAssertEqual(after["timezone"], .string("Europe/Berlin"))
        XCTAssertEqual(after["environment"], .table([("PATH", "/opt/bin:/usr/bin"), ("GREETING", "  hello  ")]))
        XCTAssertNotNil(imported.loaded())
    }

    func testShell_sh_isShellTrue_andAnotherShellRunsWithDashC() throws {
        let imported = importCron("""
            0 1 * * * echo {braces} $HOME
            SHELL=/bin/bash
            0 2 * * * echo {braces} $HOME
            """)
        XCTAssertEqual(imported.entry("echo-l1")?["shell"], .bool(true))
        XCTAssertEqual(imported.entry("echo-l1")?["command"], .string("echo {braces} $HOME"))
        XCTAssertEqual(imported.entry("echo-l3")?["command"], .strings(["/bin/bash", "-c", "echo {{braces}} $HOME"]))
        let configuration = try XCTUnwrap(imported.loaded())
        XCTAssertEqual(configuration.tasks[1].job.command, .arguments(["/bin/bash", "-c", "echo {{braces}} $HOME"]),
                       "the loader keeps {{ }} for the spawner, which makes them single braces")
    }

    func testPercent_firstEndsTheCommand_restIsStdinWithNewlines_asDebianCronMakesThem() {
        XCTAssertEqual(CrontabImporter.splitPercent(#"date +\%Y-\%m"#).command, "date +%Y-%m")
        XCTAssertNil(CrontabImporter.splitPercent(#"date +\%Y"#).stdin)
        XCTAssertEqual(CrontabImporter.splitPercent(#"echo a\\b \n"#).command, #"echo a\b \n"#, "\\\\ loses one backslash, \\n keeps it")
        let split = CrontabImporter.splitPercent(#"mail -s hi root%line one%line \%two\n"#)
        XCTAssertEqual(split.command, "mail -s hi root")
        XCTAssertEqual(split.stdin, "line one\nline %two\\n\n", "a newline is added after the last line")
        XCTAssertEqual(CrontabImporter.splitPercent("cat%a%").stdin, "a\n", "no second newline after one the input ends with")
        XCTAssertEqual(CrontabImporter.splitPercent("cat%").stdin, "")
    }

    func testPercent_runsTheCommandWithThatInput() throws {
        let imported = importCron("* * * * * cat > /tmp/out%first 'line'%second \\% line\n")
        guard case .string(let script)? = imported.entry("cat-l1")?["command"] else { return XCTFail(imported.toml) }
        let output = try runShell(script.replacingOccurrences(of: "/tmp/out", with: "/dev/stdout"))
        XCTAssertEqual(output, "first 'line'\nsecond % line\n")
    }

    func testMailTo_becomesAnOnFailureHookThroughSendmail_andEmptyMailToNone() throws {
        let imported = importCron("""
            MAILTO=ops@example.org
            0 1 * * * /bin/a
            MAILTO=""
            0 2 * * * /bin/b
            """, mail: true)
        guard case .string(let hook)? = imported.entry("a-l2")?["on_failure"] else { return XCTFail(imported.toml) }
        XCTAssertTrue(hook.contains("ops@example.org") && hook.contains("/usr/sbin/sendmail -t") && hook.contains("$WATCHKEEPER_OUTPUT_FILE"), hook)
        XCTAssertNil(imported.entry("b-l4")?["on_failure"])
        XCTAssertTrue(imported.config.notes.contains { $0.contains("sendmail") && $0.contains("NOT installed") })
        try requireConfigKey("on_failure")
        XCTAssertNotNil(imported.loaded())
    }

    func testMailHook_writesAMessageWithToSubjectAndTheOutput() throws {
        let hook = CrontabImporter.mailScript(to: "o'brien@example.org", sendmail: "/bin/cat")
        let scratch = try makeScratchDirectory()
        try "last line\n".write(toFile: scratch + "/output", atomically: true, encoding: .utf8)
        let message = try runShell(hook.replacingOccurrences(of: "/bin/cat -t", with: "/bin/cat"),
                                   environment: ["WATCHKEEPER_TASK": "backup", "WATCHKEEPER_OUTCOME": "failed", "WATCHKEEPER_OUTPUT_FILE": scratch + "/output"])
        XCTAssertEqual(message, "To: o'brien@example.org\nSubject: watchkeeper task backup: failed\n\nlast line\n")
    }

    func testSystemFormat_readsTheUserColumn_andRunPartsLinesStayAsTheyAre() throws {
        let imported = importCron("""
            SHELL=/bin/sh
            17 *\t* * *\troot    cd / && run-parts --report /etc/cron.hourly
            25 6\t* * *\troot\ttest -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }
            """, path: "/etc/crontab")
        XCTAssertEqual(imported.entry("run-parts-l2")?["user"], .string("root"))
        XCTAssertEqual(imported.entry("run-parts-l3")?["command"], .string("test -x /usr/sbin/anacron || { cd / && run-parts --report /etc/cron.daily; }"))
        XCTAssertNotNil(imported.loaded())
    }

    func testSystemFormat_isDetectedByPath_orAskedFor() throws {
        XCTAssertTrue(CrontabImporter.isSystemPath("/etc/crontab"))
        XCTAssertTrue(CrontabImporter.isSystemPath("/etc/cron.d/sysstat"))
        XCTAssertFalse(CrontabImporter.isSystemPath("/home/alice/crontab"))
        let scratch = try makeScratchDirectory()
        try "0 1 * * * root /bin/true\n".write(toFile: scratch + "/tab", atomically: true, encoding: .utf8)
        let asked = try ImportRun.translate(ImportOptions(format: .cron, files: [scratch + "/tab"], systemCrontab: true, mail: false)).get()
        XCTAssertEqual(asked.entries.first?["user"], .string("root"))
        XCTAssertEqual(asked.entries.first?["command"], .string("/bin/true"))
        let user = try ImportRun.translate(ImportOptions(format: .cron, files: [scratch + "/tab"], mail: false)).get()
        XCTAssertEqual(user.entries.first?["command"], .string("root /bin/true"), "without a user column, root is the command")
    }

    func testUnknownUser_andRefusedFields_areUntranslatedWithTheReason() {
        let imported = importCron("""
            0 1 * * * no-such-user-here /bin/a
            */2,5 * * * * root /bin/b
            0 0 30 2 * root /bin/c
            WATCHKEEPER_X=1
            not a cron line
            """, path: "/etc/cron.d/test")
        XCTAssertTrue(imported.config.entries.isEmpty, imported.toml)
        XCTAssertEqual(imported.config.untranslated.map(\.source.line), [1, 2, 3, 4, 5])
        XCTAssertTrue(imported.config.untranslated[0].reason.contains("no-such-user-here"))
        XCTAssertTrue(imported.config.untranslated[1].reason.contains("cannot be combined"))
        XCTAssertTrue(imported.config.untranslated[2].reason.contains("never matches"))
        XCTAssertTrue(imported.toml.contains("# /etc/cron.d/test:2: */2,5 * * * * root /bin/b"), imported.toml)
        XCTAssertNotNil(imported.loaded())
    }

    func testNames_comeFromTheProgram_pastGuardsAndWrappers() {
        XCTAssertEqual(CrontabImporter.programName("command -v debian-sa1 > /dev/null && debian-sa1 1 1"), "debian-sa1")
        XCTAssertEqual(CrontabImporter.programName("test -e /run/systemd/system || SERVICE_MODE=1 /sbin/e2scrub_all -A -r"), "e2scrub_all")
        XCTAssertEqual(CrontabImporter.programName("nice -n 10 /usr/local/bin/backup.sh --full"), "backup.sh")
    }
}

/// Runs /bin/sh -c SCRIPT and returns its stdout.
func runShell(_ script: String, environment: [String: String] = [:]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/bin/sh")
    process.arguments = ["-c", script]
    var env = ["PATH": "/usr/bin:/bin"]
    env.merge(environment) { $1 }
    process.environment = env
    let pipe = Pipe()
    process.standardOutput = pipe
    try process.run()
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}
