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

    func testImportCron_escapesQuotesBackslashesPercentAndUnicode_intoAFileThatLoads() throws {
        let crontab = directory + "/crontab"
        try #"""
        MAILTO=""
        0 4 * * * printf '\%s\n' "Grüße \"quoted\" C:\\dir" | logger -t 'it''s' \%done%stdin line%second
        """#.write(toFile: crontab, atomically: true, encoding: .utf8)
        let toml = try importAndCheck("cron", [crontab])
        let configuration = try ConfigLoader.parse(source: toml, path: "/x.toml", environment: [:]).get()
        guard case .shell(let script) = configuration.tasks.first?.job.command else { return XCTFail(toml) }
        XCTAssertEqual(script, #"printf '%s' 'stdin line"# + "\n" + "second\n" + #"' | ("# + "\n" + #"printf '%s\n' "Grüße \"quoted\" C:\dir" | logger -t 'it''s' %done"# + "\n)")
    }

    func testImportCron_check_reportsDSTDifferences_andExitsOne() throws {
        let crontab = directory + "/crontab"
        try "CRON_TZ=Europe/Berlin\n*/15 2 * * * /bin/true\n".write(toFile: crontab, atomically: true, encoding: .utf8)
        let result = try watchkeeper(["import", "cron", "--no-mail", "--check", "--check-from", "1774700000", crontab])
        XCTAssertEqual(result.status, 1, result.stderr)
        let row = result.stderr.split(separator: "\n").first { $0.hasSuffix("| 2026-03-29 03:00:00 +02:00 CEST | DIFFERENT") }
        XCTAssertEqual(row?.hasPrefix("  - "), true, "cron skips the gap, watchkeeper fires at its end:\n" + result.stderr)
        XCTAssertTrue(result.stdout.hasPrefix("# Imported by `watchkeeper import` from:"), "the configuration still goes to stdout")
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

    func testImport_unreadableFile_exits66_andWritesNothing() throws {
        let output = directory + "/never.toml"
        let result = try watchkeeper(["import", "cron", "--output", output, directory + "/missing"])
        XCTAssertEqual(result.status, 66)
        XCTAssertTrue(result.stderr.contains("unable to read \(directory)/missing: "), result.stderr)
        XCTAssertEqual(access(output, F_OK), -1)
    }
}
