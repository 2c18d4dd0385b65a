import Foundation
import XCTest

@testable import WatchkeeperCore
@testable import WatchkeeperImport
import WatchkeeperTestSupport

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

    func testAssignments_applyToTheEntriesAfterThem_asDebiansCronReadsThem() throws {
        let imported = importCron("""
            0 1 * * * /bin/before
            PATH=/opt/bin:/usr/bin
            CRON_TZ=Europe/Berlin
            GREETING = "  hello  "
            0 2 * * * /bin/after
            """)
        let before = try XCTUnwrap(imported.entry("before-l1"))
        XCTAssertEqual(before["environment"], .table([("PATH", "/usr/bin:/bin"), ("SHELL", "/bin/sh")]), "cron's own PATH and SHELL")
        let after = try XCTUnwrap(imported.entry("after-l5"))
        XCTAssertNil(after["timezone"], "Debian's cron reads every entry in the machine's zone, CRON_TZ or not")
        XCTAssertTrue(after.notes.contains { $0.hasPrefix("CRON_TZ=Europe/Berlin: Debian's cron does not read it") }, "\(after.notes)")
        // load_env's strdtb drops trailing blanks even inside the quotes.
        XCTAssertEqual(after["environment"], .table([("SHELL", "/bin/sh"), ("PATH", "/opt/bin:/usr/bin"), ("CRON_TZ", "Europe/Berlin"), ("GREETING", "  hello")]))
        XCTAssertNotNil(imported.loaded())
    }

    func testCronieTable_cronTZBecomesTheTimezone_quotedValuesKeepTheirBlanks_andItsPATH() throws {
        let imported = importCron("""
            CRON_TZ=Asia/Kolkata
            GREETING = "  hello  "
            30 6 * * * /bin/report
            CRON_TZ=Nowhere/City
            0 7 * * * /bin/late
            """, cron: .cronie)
        let report = try XCTUnwrap(imported.entry("report-l3"))
        XCTAssertEqual(report["timezone"], .string("Asia/Kolkata"))
        XCTAssertEqual(report.origin, .cron("30 6 * * *", timezone: "Asia/Kolkata", cron: .cronie))
        XCTAssertEqual(report["environment"], .table([("PATH", "/usr/bin:/bin:/usr/sbin:/sbin"), ("SHELL", "/bin/sh"), ("CRON_TZ", "Asia/Kolkata"), ("GREETING", "  hello  ")]))
        XCTAssertEqual(imported.entry("late-l5")?["timezone"], .string("UTC"), "glibc reads a zone it cannot find as UTC")
        XCTAssertTrue(imported.config.untranslated.contains { $0.source.line == 4 && $0.reason.contains("no zone Nowhere/City") })
        XCTAssertNotNil(imported.loaded())
    }

    func testCommands_runAsShellDashC_whoseDollarZeroIsTheShell_inHome_withSHELLSet() throws {
        let imported = importCron("""
            0 1 * * * echo {braces} $HOME
            SHELL=/bin/bash
            0 2 * * * echo {braces} $HOME
            HOME=/tmp
            0 3 * * * echo "$0"
            HOME=/nonexistent/home
            0 4 * * * pwd
            """)
        XCTAssertEqual(imported.entry("echo-l1")?["command"], .strings(["/bin/sh", "-c", "echo {{braces}} $HOME"]))
        XCTAssertEqual(imported.entry("echo-l1")?["working_directory"], .string("/root"), "the owner's HOME, as cron's chdir")
        XCTAssertEqual(imported.entry("echo-l3")?["command"], .strings(["/bin/bash", "-c", "echo {{braces}} $HOME"]))
        XCTAssertEqual(imported.entry("echo-l3")?["environment"], .table([("PATH", "/usr/bin:/bin"), ("SHELL", "/bin/bash")]))
        XCTAssertEqual(imported.entry("echo-l5")?["working_directory"], .string("/tmp"), "the table's HOME wins, as in cron")
        let missing = try XCTUnwrap(imported.entry("pwd-l7"))
        XCTAssertNil(missing["working_directory"])
        XCTAssertTrue(missing.notes.contains { $0.hasPrefix("HOME /nonexistent/home is not a directory") }, "\(missing.notes)")
        let configuration = try XCTUnwrap(imported.loaded())
        XCTAssertEqual(configuration.tasks[1].job.command, .arguments(["/bin/bash", "-c", "echo {{braces}} $HOME"]),
                       "the loader keeps {{ }} for the spawner, which makes them single braces")
        // As cron's child runs it: $0 is the shell.
        guard case .strings(let argv)? = imported.entry("echo-l5")?["command"] else { return XCTFail(imported.toml) }
        XCTAssertEqual(runArguments(argv), "/bin/bash\n", "after SHELL=/bin/bash")
    }

    func testPercent_firstEndsTheCommand_restIsStdinWithNewlines_asDebianCronMakesThem() {
        XCTAssertEqual(CronEntryTranslator.splitPercent(#"date +\%Y-\%m"#).command, "date +%Y-%m")
        XCTAssertNil(CronEntryTranslator.splitPercent(#"date +\%Y"#).stdin)
        XCTAssertEqual(CronEntryTranslator.splitPercent(#"echo a\\b \n"#).command, #"echo a\b \n"#, "\\\\ loses one backslash, \\n keeps it")
        let split = CronEntryTranslator.splitPercent(#"mail -s hi root%line one%line \%two\n"#)
        XCTAssertEqual(split.command, "mail -s hi root")
        XCTAssertEqual(split.stdin, "line one\nline %two\\n\n", "a newline is added after the last line")
        XCTAssertEqual(CronEntryTranslator.splitPercent("cat%a%").stdin, "a\n", "no second newline after one the input ends with")
        XCTAssertEqual(CronEntryTranslator.splitPercent("cat%").stdin, "")
    }

    func testPercent_runsTheCommandWithThatInput() throws {
        let imported = importCron("* * * * * cat > /tmp/out%first 'line'%second \\% line\n")
        guard case .strings(let argv)? = imported.entry("cat-l1")?["command"] else { return XCTFail(imported.toml) }
        let output = runArguments(argv.map { $0.replacingOccurrences(of: "/tmp/out", with: "/dev/stdout") })
        XCTAssertEqual(output, "first 'line'\nsecond % line\n")
    }

    /// Debian's cron ran `printf '[%s]\n' one\` (a trailing backslash is a backslash) and
    /// printed `[one\]`; spliced into `( ... )`, the backslash joined the next line.
    func testACommandEndingInABackslashBeforePercent_keepsItsBackslash() throws {
        let imported = importCron(#"* * * * * printf '[\%s]\n' one\\%x"#)
        guard case .strings(let argv)? = imported.entry("printf-l1")?["command"] else { return XCTFail(imported.toml) }
        XCTAssertEqual(runArguments(argv), "[one\\]\n")
    }

    func testMailTo_becomesAnOnFailureHookThroughSendmail_andEmptyMailToNone() throws {
        let imported = importCron("""
            MAILTO=ops@example.org
            0 1 * * * /bin/a
            MAILTO=""
            0 2 * * * /bin/b
            """, mail: true)
        guard case .strings(let hookArgv)? = imported.entry("a-l2")?["on_failure"], let hook = hookArgv.last else { return XCTFail(imported.toml) }
        XCTAssertTrue(hook.contains("ops@example.org") && hook.contains("/usr/sbin/sendmail -t") && hook.contains("$WATCHKEEPER_OUTPUT_FILE"), hook)
        XCTAssertNil(imported.entry("b-l4")?["on_failure"])
        XCTAssertTrue(imported.config.notes.contains { $0.contains("sendmail") && $0.contains("NOT installed") })
        try requireConfigKey("on_failure")
        XCTAssertNotNil(imported.loaded())
    }

    func testMailHook_writesAMessageWithToSubjectAndTheOutput() throws {
        let hook = CronEntryTranslator.mailScript(to: "o'brien@example.org", sendmail: "/bin/cat")
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
        XCTAssertEqual(imported.entry("run-parts-l3")?["command"],
                       .strings(["/bin/sh", "-c", "test -x /usr/sbin/anacron || {{ cd / && run-parts --report /etc/cron.daily; }}"]))
        XCTAssertNotNil(imported.loaded())
    }

    func testSystemFormat_isDetectedByPath_orAskedFor() throws {
        XCTAssertTrue(CrontabImporter.isSystemPath("/etc/crontab"))
        XCTAssertTrue(CrontabImporter.isSystemPath("/etc/cron.d/sysstat"))
        XCTAssertFalse(CrontabImporter.isSystemPath("/home/alice/crontab"))
        let scratch = try makeScratchDirectory()
        try "0 1 * * * root /bin/true\n".write(toFile: scratch + "/tab", atomically: true, encoding: .utf8)
        let asked = try ImportRun.translate(ImportOptions(format: .cron, files: [scratch + "/tab"], systemCrontab: true, mail: false, cron: .debian)).get()
        XCTAssertEqual(asked.entries.first?["user"], .string("root"))
        XCTAssertEqual(asked.entries.first?["command"], .strings(["/bin/sh", "-c", "/bin/true"]))
        let user = try ImportRun.translate(ImportOptions(format: .cron, files: [scratch + "/tab"], mail: false, cron: .debian)).get()
        XCTAssertEqual(user.entries.first?["command"], .strings(["/bin/sh", "-c", "root /bin/true"]), "without a user column, root is the command")
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
        XCTAssertTrue(imported.config.untranslated[0].reason.contains("no-such-user-here"), imported.config.untranslated[0].reason)
        XCTAssertEqual(imported.config.ignoredFiles.map(\.reason), ["line 1 is one it cannot read (no user no-such-user-here on this machine)"])
        XCTAssertTrue(imported.config.untranslated[1].reason.contains("cannot be combined"))
        XCTAssertTrue(imported.config.untranslated[2].reason.contains("never matches"))
        XCTAssertTrue(imported.toml.contains("# /etc/cron.d/test:2: */2,5 * * * * root /bin/b"), imported.toml)
        XCTAssertNotNil(imported.loaded())
    }

    func testNames_comeFromTheProgram_pastGuardsAndWrappers() {
        XCTAssertEqual(CronEntryTranslator.programName("command -v debian-sa1 > /dev/null && debian-sa1 1 1"), "debian-sa1")
        XCTAssertEqual(CronEntryTranslator.programName("test -e /run/systemd/system || SERVICE_MODE=1 /sbin/e2scrub_all -A -r"), "e2scrub_all")
        XCTAssertEqual(CronEntryTranslator.programName("nice -n 10 /usr/local/bin/backup.sh --full"), "backup.sh")
    }
}

/// Runs argv (argv[0] the program and its $0) and returns its stdout.
func runArguments(_ argv: [String]) -> String {
    runCommand(argv, environment: ["PATH": "/usr/bin:/bin"], timeout: 10).stdout
}

/// Runs /bin/sh -c SCRIPT and returns its stdout.
func runShell(_ script: String, environment: [String: String] = [:]) throws -> String {
    runCommand(["/bin/sh", "-c", script], environment: ["PATH": "/usr/bin:/bin"].merging(environment) { $1 }, timeout: 10).stdout
}
