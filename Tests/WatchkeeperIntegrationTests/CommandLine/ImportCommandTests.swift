import Foundation
import WatchkeeperCore
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// `watchkeeper import` on the files Debian packages install (the Makefile's APT_PACKAGES
/// brings them) and on crafted ones: every result must pass `check-config`, run as its own
/// process, and `--check` must find the fires the source's own rules find.
final class ImportCommandTests: ScratchDirectoryTestCase {
    private struct Outcome {
        var status: Int32?
        var stdout: String
        var stderr: String
    }

    private func watchkeeper(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) throws -> Outcome {
        let out = directory + "/stdout-\(UUID().uuidString)"
        let err = directory + "/stderr-\(UUID().uuidString)"
        let process = try DaemonProcess(arguments: arguments, environment: ["PATH": "/usr/bin:/bin", "TZ": "Europe/Berlin"],
                                        stderrPath: err, stdoutPath: out)
        let status = process.waitForExit(timeout: 60)
        return Outcome(status: status, stdout: (try? String(contentsOfFile: out, encoding: .utf8)) ?? "",
                       stderr: (try? String(contentsOfFile: err, encoding: .utf8)) ?? "")
    }

    /// Imports, with --check, into a file, and checks that file with check-config.
    @discardableResult
    private func importAndCheck(_ format: String, _ files: [String], extra: [String] = [], file: StaticString = #filePath, line: UInt = #line) throws -> String {
        for path in files where access(path, R_OK) != 0 {
            XCTFail("\(path) is missing: install the Debian packages in the Makefile's APT_PACKAGES (make deps)", file: file, line: line)
        }
        let output = directory + "/imported-\(UUID().uuidString).toml"
        let imported = try watchkeeper(["import", format, "--check", "--output", output] + extra + files)
        XCTAssertEqual(imported.status, 0, imported.stdout + imported.stderr, file: file, line: line)
        XCTAssertTrue(imported.stdout.contains("--check: no difference"), imported.stdout, file: file, line: line)
        XCTAssertFalse(imported.stdout.contains("DIFFERENT"), imported.stdout, file: file, line: line)
        let checked = try watchkeeper(["check-config", output])
        XCTAssertEqual(checked.status, 0, checked.stderr, file: file, line: line)
        return try String(contentsOfFile: output, encoding: .utf8)
    }

    private func requireKey(_ key: String) throws {
        guard ConfigLoader.acceptedKeys()["task"]?.contains(key) == true else {
            throw XCTSkip("this build's loader has no task key \"\(key)\" yet (added by another part of issue 26)")
        }
    }

    // MARK: - Debian's own files

    func testImportCron_debianCronDFiles_withoutMail_passCheckConfigAndCheck() throws {
        let toml = try importAndCheck("cron", ["/etc/cron.d/sysstat", "/etc/cron.d/e2scrub_all"], extra: ["--no-mail"])
        XCTAssertTrue(toml.contains("#   /etc/cron.d/sysstat\n"), toml)
        XCTAssertTrue(toml.contains("name = \"debian-sa1-l"), toml)
        XCTAssertTrue(toml.contains("user = \"root\""), toml)
    }

    func testImportCron_debianCronDFiles_withMailHooks_passCheckConfigAndCheck() throws {
        try requireKey("on_failure")
        let toml = try importAndCheck("cron", ["/etc/cron.d/sysstat", "/etc/cron.d/e2scrub_all"])
        XCTAssertTrue(toml.contains("on_failure = "), toml)
    }

    func testImportSystemd_monotonicDebianTimer_passesCheckConfig() throws {
        let toml = try importAndCheck("systemd", ["/lib/systemd/system/systemd-tmpfiles-clean.timer"])
        XCTAssertTrue(toml.contains("every = \"1d\"\nrun_on_start = true\n"), toml)
        XCTAssertTrue(toml.contains("command = [\"systemd-tmpfiles\", \"--clean\"]"), toml)
    }

    /// Runs once the calendar key exists: systemd-analyze is the oracle for --check.
    func testImportSystemd_calendarDebianTimers_passCheckConfigAndCheck() throws {
        try requireKey("calendar")
        let timers = ["apt-daily", "apt-daily-upgrade", "man-db", "dpkg-db-backup", "fstrim", "e2scrub_all", "logrotate"]
        for timer in timers {
            try importAndCheck("systemd", ["/lib/systemd/system/\(timer).timer"])
        }
    }

    // MARK: - Crafted files

    func testImportCron_escapesQuotesBackslashesPercentAndUnicode_intoAFileThatLoads_andRunsAsCronRanIt() throws {
        let crontab = directory + "/crontab"
        try #"""
        MAILTO=""
        0 4 * * * printf '\%s\n' "Grüße \"quoted\" C:\\dir" 'it''s' \%done; cat%stdin line%second

        """#.write(toFile: crontab, atomically: true, encoding: .utf8)
        let toml = try importAndCheck("cron", [crontab])
        let configuration = try ConfigLoader.parse(source: toml, path: "/x.toml", environment: [:]).get()
        guard case .arguments(let argv) = configuration.tasks.first?.job.command else { return XCTFail(toml) }
        XCTAssertEqual(argv.first, "/bin/sh", "$0 is the shell, as cron's execle(SHELL, SHELL, \"-c\", ...)")
        XCTAssertEqual(runCommand(argv, environment: ["PATH": "/usr/bin:/bin"], timeout: 10).stdout, #"Grüße "quoted" C:\dir"# + "\nits\n%done\nstdin line\nsecond\n")
    }

    /// What Windows editors and typos leave, each file said in the header and by --check,
    /// and nothing of the ignored ones with --as-cron-runs. Debian's cron: this machine's.
    func testImportCron_crlfBomMissingNewlineAndBadLine_areSaidPerFile_andCheckExitsOne() throws {
        let files = ["crlf": "0 1 * * * /bin/crlf --x\r\n# done\r\n", "bom": "\u{FEFF}0 2 * * * /bin/bom\n",
                     "nonl": "0 3 * * * /bin/nonl", "bad": "0 4 * * * /bin/bad\n5/10 * * * * /bin/step\n"]
        var paths: [String] = []
        for (name, text) in files.sorted(by: { $0.key < $1.key }) {
            paths.append(directory + "/" + name)
            try text.write(toFile: paths.last!, atomically: true, encoding: .utf8)
        }
        let output = directory + "/out.toml"
        let result = try watchkeeper(["import", "cron", "--no-mail", "--check", "--output", output] + paths)
        XCTAssertEqual(result.status, 1, result.stderr + result.stdout)
        // Comments wrapped at 100 columns, read as one line.
        let toml = ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").replacingOccurrences(of: "\n#   ", with: " ")
        XCTAssertTrue(toml.contains("command = [\"/bin/sh\", \"-c\", \"/bin/crlf --x\"]"), toml)
        for name in ["bom", "nonl", "bad"] {
            XCTAssertTrue(result.stdout.contains("DIFFERENT: Debian's cron (Vixie cron 3.0pl1) ignores \(directory)/\(name) as a whole"), result.stdout)
            XCTAssertTrue(toml.contains("# WARNING: Debian's cron (Vixie cron 3.0pl1) ignores \(directory)/\(name) as a whole"), toml)
        }
        XCTAssertFalse(result.stdout.contains("ignores \(directory)/crlf"), result.stdout)
        XCTAssertTrue(toml.contains("Windows line ends (CR LF) on 2 line(s)"), toml)
        XCTAssertFalse(toml.unicodeScalars.contains("\u{FEFF}"), toml)
        XCTAssertTrue(result.stdout.contains("--check: 3 task(s) fire differently from their source (3 of them file(s) cron ignores whole"), result.stdout)

        let asCronRuns = try watchkeeper(["import", "cron", "--no-mail", "--as-cron-runs", "--check", "--output", output] + paths)
        XCTAssertEqual(asCronRuns.status, 0, asCronRuns.stderr + asCronRuns.stdout)
        let only = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        XCTAssertEqual(try ConfigLoader.parse(source: only, path: output, environment: [:]).get().tasks.map(\.name), ["crlf-l1"], only)
        XCTAssertTrue(only.contains(#"command = ["/bin/sh", "-c", "/bin/crlf --x\r"]"#), "the CR Debian's cron keeps: \(only)")
    }

    func testImportCron_cronieTableWithCronTZ_isReadInThatZone_andDebiansIgnoresIt() throws {
        let crontab = directory + "/crontab"
        try "CRON_TZ=Europe/Berlin\n*/15 2 * * * /bin/true\n".write(toFile: crontab, atomically: true, encoding: .utf8)
        let debian = try watchkeeper(["import", "cron", "--no-mail", "--check", "--check-from", "1774700000", crontab])
        XCTAssertEqual(debian.status, 0, debian.stderr)
        XCTAssertFalse(debian.stdout.contains("\ntimezone = "), debian.stdout)
        XCTAssertTrue(debian.stdout.contains("CRON_TZ=Europe/Berlin: Debian's cron does not read it"), debian.stdout)
        XCTAssertTrue(debian.stdout.contains("# Read as Debian's cron (Vixie cron 3.0pl1) reads its tables, since"), debian.stdout)

        let cronie = try watchkeeper(["import", "cron", "--cron", "cronie", "--no-mail", "--check", "--check-from", "1774700000", crontab])
        XCTAssertEqual(cronie.status, 1, cronie.stderr)
        XCTAssertTrue(cronie.stdout.contains("timezone = \"Europe/Berlin\""), cronie.stdout)
        let row = cronie.stderr.split(separator: "\n").first { $0.hasSuffix("| 2026-03-29 03:00:00 +02:00 CEST | DIFFERENT") }
        XCTAssertEqual(row?.hasPrefix("  - "), true, "cronie skips the gap, watchkeeper fires at its end:\n" + cronie.stderr)
        XCTAssertTrue(cronie.stdout.hasPrefix("# Imported by `watchkeeper import` from:"), "the configuration still goes to stdout")
    }

    func testImportIncron_craftedTable_passesCheckConfig() throws {
        let table = directory + "/incrontab"
        try """
            \(directory) IN_CLOSE_WRITE,IN_MOVED_TO,recursive=false /usr/bin/logger -t incron $@/$# $%
            \(directory)/*.csv IN_CREATE,IN_ACCESS echo "$#" | logger
            """.write(toFile: table, atomically: true, encoding: .utf8)
        let toml = try importAndCheck("incron", [table])
        XCTAssertTrue(toml.contains("command = [\"/usr/bin/logger\", \"-t\", \"incron\", \"{dir}/{name}\", \"{event}\"]"), toml)
        XCTAssertTrue(toml.contains("IN_ACCESS\n#   -> dropped from this rule's events"), toml)
    }

    // MARK: - The translations run

    /// An imported @reboot runs when the daemon starts, with the input cron's % gave it, and
    /// an imported incron rule runs its shell command with the file's name.
    func testImported_rebootTaskAndIncronRule_runInTheDaemon() throws {
        let sandbox = try DaemonSandbox()
        let inbox = sandbox.root + "/inbox"
        try FileManager.default.createDirectory(atPath: inbox, withIntermediateDirectories: true)
        let crontab = directory + "/crontab"
        try "MAILTO=\"\"\n@reboot cat > \(sandbox.root)/reboot.out%hello%wor\\%ld\n".write(toFile: crontab, atomically: true, encoding: .utf8)
        let incrontab = directory + "/incrontab"
        try "\(inbox) IN_CLOSE_WRITE echo \"$# $%\" >> \(sandbox.root)/incron.log\n".write(toFile: incrontab, atomically: true, encoding: .utf8)
        let cron = try watchkeeper(["import", "cron", crontab])
        let incron = try watchkeeper(["import", "incron", incrontab])
        XCTAssertEqual(cron.status, 0, cron.stderr)
        XCTAssertEqual(incron.status, 0, incron.stderr)
        try sandbox.writeConfig(DaemonSandbox.basicConfig + "\n" + cron.stdout + "\n" + incron.stdout)
        let notify = try NotifySocket()
        let daemon = try sandbox.startReady(notifySocket: notify)
        defer { daemon.stop(within: 10) }
        // The shell creates the file before cat writes into it: wait for the whole text.
        _ = waitFor(10) { (try? String(contentsOfFile: sandbox.root + "/reboot.out", encoding: .utf8)) == "hello\nwor%ld\n" }
        XCTAssertEqual(try? String(contentsOfFile: sandbox.root + "/reboot.out", encoding: .utf8), "hello\nwor%ld\n", daemon.stderr)
        try "data".write(toFile: inbox + "/a b.csv", atomically: false, encoding: .utf8)
        _ = waitFor(10) { (try? String(contentsOfFile: sandbox.root + "/incron.log", encoding: .utf8))?.hasSuffix("\n") == true }
        XCTAssertEqual(try? String(contentsOfFile: sandbox.root + "/incron.log", encoding: .utf8), "a b.csv closed_write\n", daemon.stderr)
    }

    /// A user's table (--owner) with MAILTO: its hook runs as that user, under a runtime
    /// directory of root's with mode 0750 (as the daemon makes it), and mails the output.
    func testImportedUserTable_mailHookReadsItsOutput_underA0750RuntimeDirectory() throws {
        guard getuid() == 0 else { throw XCTSkip("running a job as another user needs root") }
        let sandbox = try DaemonSandbox()
        XCTAssertEqual(chmod(sandbox.root, 0o755), 0)
        XCTAssertEqual(mkdir(sandbox.runtimeDirectory, 0o750), 0)
        XCTAssertEqual(chmod(sandbox.runtimeDirectory, 0o750), 0)
        // sendmail -t, as an MTA reads it: the message on stdin, here copied to the journal.
        let sendmail = sandbox.root + "/sendmail"
        try "#!/bin/sh\nsed 's/^/MAIL: /'\n".write(toFile: sendmail, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(sendmail, 0o755), 0)
        let crontab = directory + "/nobody.cron"
        try "MAILTO=ops@example.org\n@reboot echo secret-line; exit 3\n".write(toFile: crontab, atomically: true, encoding: .utf8)
        let imported = try watchkeeper(["import", "cron", "--owner", "nobody", crontab])
        XCTAssertEqual(imported.status, 0, imported.stderr)
        XCTAssertTrue(imported.stdout.contains("user = \"nobody\""), imported.stdout)
        try sandbox.writeConfig(DaemonSandbox.basicConfig + "\n" + imported.stdout.replacingOccurrences(of: "/usr/sbin/sendmail", with: sendmail))
        let daemon = try sandbox.startReady(notifySocket: try NotifySocket())
        defer { daemon.stop(within: 10) }
        XCTAssertTrue(daemon.waitForStderr(containing: "MAIL: To: ops@example.org", timeout: 15), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "MAIL: secret-line", timeout: 5), "the body is the run's output:\n" + daemon.stderr)
    }

    func testImport_unreadableFile_exits66_andWritesNothing() throws {
        let output = directory + "/never.toml"
        let result = try watchkeeper(["import", "cron", "--output", output, directory + "/missing"])
        XCTAssertEqual(result.status, 66)
        XCTAssertTrue(result.stderr.contains("unable to read \(directory)/missing: "), result.stderr)
        XCTAssertEqual(access(output, F_OK), -1)
    }
}
