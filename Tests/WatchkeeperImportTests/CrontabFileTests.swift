import Foundation
import XCTest

@testable import WatchkeeperCore
@testable import WatchkeeperImport

/// What cron does with a table as a whole, as Debian's cron 3.0pl1-162 did running side by
/// side in a private namespace (docs/import.md) and cronie's source says: Windows line ends,
/// a byte-order mark, a last line without its newline, a line it cannot read, a user it
/// does not know, the file's name and mode. Said per file, and `asCronRuns` translates
/// only what cron runs.
final class CrontabFileTests: XCTestCase {
    // MARK: Windows line ends

    func testCRLF_isOneLinePerLine_theCRNoted_andKeptOnlyAsCronRunsIt() throws {
        let text = "MAILTO=\"\"\r\n# nightly\r\n0 1 * * * /usr/local/bin/backup --full\r\n30 2 * * * /bin/b\r\n"
        let imported = importCron(text)
        XCTAssertEqual(imported.config.entries.map(\.name), ["backup-l3", "b-l4"], imported.toml)
        XCTAssertEqual(imported.entry("backup-l3")?["command"], .strings(["/bin/sh", "-c", "/usr/local/bin/backup --full"]))
        XCTAssertEqual(imported.entry("backup-l3")?.original, "0 1 * * * /usr/local/bin/backup --full")
        XCTAssertTrue(imported.config.untranslated.isEmpty, imported.toml)
        XCTAssertTrue(imported.config.ignoredFiles.isEmpty, "Debian's cron reads such a file and runs `backup --full\\r`")
        XCTAssertTrue(imported.config.notes.contains { $0.contains("Windows line ends (CR LF) on 4 line(s)") && $0.contains("translated without it") },
                      "\(imported.config.notes)")
        XCTAssertNil(imported.entry("backup-l3")?["on_failure"], "MAILTO=\"\\r\" is MAILTO=\"\": load_env drops the blank after the quote")
        XCTAssertNotNil(imported.loaded())

        let asRun = importCron(text, asCronRuns: true)
        XCTAssertEqual(asRun.entry("backup-l3")?["command"], .strings(["/bin/sh", "-c", "/usr/local/bin/backup --full\r"]))
        XCTAssertTrue(asRun.toml.contains(#"command = ["/bin/sh", "-c", "/usr/local/bin/backup --full\r"]"#), asRun.toml)
    }

    func testCRLF_anEmptyLine_isOneDebiansCronCannotRead() {
        // "\r" alone is neither an assignment nor an entry to load_env and load_entry.
        let imported = importCron("0 1 * * * /bin/a\r\n\r\n0 2 * * * /bin/b\r\n")
        XCTAssertEqual(imported.config.ignoredFiles.first?.reason, "line 2 is one it cannot read (neither an entry nor an assignment)")
        XCTAssertEqual(imported.config.entries.count, 2, "translated all the same")
        XCTAssertTrue(importCron("0 1 * * * /bin/a\r\n\r\n", asCronRuns: true).config.entries.isEmpty)
    }

    // MARK: A byte-order mark

    func testByteOrderMark_beforeAnEntry_makesDebianIgnoreTheFile_andIsShownAsSuch() throws {
        let imported = importCron("\u{FEFF}0 1 * * * /bin/a\n")
        XCTAssertEqual(imported.config.ignoredFiles.first?.reason,
                       "the file starts with a byte-order mark, which makes its first line one cron cannot read (neither an entry nor an assignment)")
        XCTAssertEqual(imported.entry("a-l1")?["command"], .strings(["/bin/sh", "-c", "/bin/a"]))
        XCTAssertEqual(imported.entry("a-l1")?.original, "0 1 * * * /bin/a", "no invisible mark in the comment")
        XCTAssertTrue(imported.toml.contains("# WARNING: Debian's cron (Vixie cron 3.0pl1) ignores /var/spool/cron/crontabs/root as a whole: the"), imported.toml)
        XCTAssertEqual(imported.config.ignoredFiles.first?.entries, 1)
        XCTAssertTrue(imported.config.notes.contains { $0.contains("starts with a byte-order mark (U+FEFF") }, "\(imported.config.notes)")
        XCTAssertFalse(imported.toml.unicodeScalars.contains("\u{FEFF}"), "never written invisibly")
        XCTAssertTrue(importCron("\u{FEFF}0 1 * * * /bin/a\n", asCronRuns: true).config.entries.isEmpty)
        // cronie skips only that line.
        let cronie = importCron("\u{FEFF}0 1 * * * /bin/a\n0 2 * * * /bin/b\n", cron: .cronie, asCronRuns: true)
        XCTAssertEqual(cronie.config.entries.map(\.name), ["b-l2"])
        XCTAssertTrue(cronie.config.untranslated.first?.reason.hasPrefix("cronie skips this line: the file starts with a byte-order mark") ?? false, cronie.toml)
    }

    func testByteOrderMark_beforeAnAssignment_makesItSetANameNobodyReads() throws {
        let text = "\u{FEFF}MAILTO=ops@example.org\n0 1 * * * /bin/a\n"
        let imported = importCron(text, mail: true)
        XCTAssertTrue(imported.config.ignoredFiles.isEmpty, "Debian's cron runs the file, with a variable named \\uFEFFMAILTO")
        XCTAssertEqual(imported.entry("a-l2")?["environment"], .table([("PATH", "/usr/bin:/bin"), ("SHELL", "/bin/sh"), ("MAILTO", "ops@example.org")]))
        let asRun = importCron(text, mail: true, asCronRuns: true)
        XCTAssertTrue(asRun.config.untranslated.first?.reason.contains("sets \\uFEFFMAILTO") ?? false, asRun.toml)
        guard case .strings(let hook)? = asRun.entry("a-l2")?["on_failure"] else { return XCTFail(asRun.toml) }
        XCTAssertTrue(hook[2].contains(" root "), "mailed to the owner, as cron does without MAILTO: \(hook)")
    }

    // MARK: The last line's newline

    func testALastLineWithoutItsNewline_makesDebianIgnoreTheFile_andCronieSkipIt() {
        let text = "0 1 * * * /bin/a\n0 2 * * * /bin/b"
        let debian = importCron(text, finalNewline: false)
        XCTAssertEqual(debian.config.ignoredFiles.first?.reason, "its last line has no newline at its end")
        XCTAssertEqual(debian.config.ignoredFiles.first?.entries, 2)
        XCTAssertTrue(importCron(text, asCronRuns: true, finalNewline: false).config.entries.isEmpty)
        let cronie = importCron(text, cron: .cronie, asCronRuns: true, finalNewline: false)
        XCTAssertEqual(cronie.config.entries.map(\.name), ["a-l1"])
        XCTAssertEqual(cronie.config.untranslated.map(\.source.line), [2])
        let meant = importCron(text, cron: .cronie, finalNewline: false)
        XCTAssertTrue(meant.entry("b-l2")?.notes.contains { $0.hasPrefix("cronie skips this line: its last line has no newline") } ?? false, meant.toml)
        // A comment or blanks after the last newline are nothing to cron.
        XCTAssertTrue(importCron("0 1 * * * /bin/a\n# the end", finalNewline: false).config.ignoredFiles.isEmpty)
    }

    // MARK: Lines cron cannot read

    func testABadLine_makesDebianIgnoreTheWholeFile_sayingWhich_andCronieOnlyThatLine() throws {
        let text = """
            0 1 * * * /bin/a
            5/10 * * * * /bin/b
            FOO=
            * * * * * * /bin/six
            """
        let debian = importCron(text)
        XCTAssertEqual(debian.config.ignoredFiles.first?.reason, "line 2 is one it cannot read (a step after a single value (\"5/10\"), which this cron refuses)")
        XCTAssertTrue(debian.config.ignoredFiles.first?.translated ?? false)
        XCTAssertEqual(debian.config.entries.map(\.name), ["a-l1"], "the bad lines themselves are listed")
        XCTAssertEqual(debian.config.untranslated.map(\.source.line), [2, 3, 4], debian.toml)
        XCTAssertTrue(debian.config.untranslated[1].reason.contains("neither an entry nor an assignment"), "FOO= is no assignment to Debian's load_env")
        XCTAssertTrue(debian.config.untranslated[2].reason.contains("six time fields?"))
        XCTAssertTrue(importCron(text, asCronRuns: true).config.entries.isEmpty)
        XCTAssertEqual(importCron(text, asCronRuns: true).config.ignoredFiles.first?.translated, false)

        let cronie = importCron(text, cron: .cronie)
        XCTAssertTrue(cronie.config.ignoredFiles.isEmpty)
        XCTAssertEqual(cronie.config.entries.map(\.name), ["a-l1", "b-l2"], "cronie reads 5/10 as 5-59/10, FOO= as FOO=\"\"")
        XCTAssertEqual(cronie.config.untranslated.map(\.source.line), [4], "six fields cronie skips; 5/10 is 5-59/10 for watchkeeper too")
        let empty = importCron("FOO=\n0 1 * * * /bin/a\n", cron: .cronie)
        XCTAssertEqual(empty.entry("a-l2")?["environment"], .table([("PATH", "/usr/bin:/bin:/usr/sbin:/sbin"), ("SHELL", "/bin/sh"), ("FOO", "")]))
    }

    func testAnUnknownUser_makesDebianIgnoreTheFile_andCronieNeverRunTheLine() {
        let text = "0 1 * * * root /bin/a\n0 2 * * * no-such-user-here /bin/b\n"
        let debian = importCron(text, path: "/etc/cron.d/jobs")
        XCTAssertEqual(debian.config.ignoredFiles.first?.reason, "line 2 is one it cannot read (no user no-such-user-here on this machine)")
        let cronie = importCron(text, path: "/etc/cron.d/jobs", cron: .cronie, asCronRuns: true)
        XCTAssertTrue(cronie.config.ignoredFiles.isEmpty)
        XCTAssertEqual(cronie.config.entries.map(\.name), ["a-l1"])
        XCTAssertTrue(cronie.config.untranslated.first?.reason.contains("cronie never runs this line") ?? false)
        // A spool file of nobody known: an orphan, for both.
        XCTAssertEqual(importCron("0 1 * * * /bin/a\n", path: "/var/spool/cron/crontabs/no-such-user-here").config.ignoredFiles.first?.reason,
                       "its owner no-such-user-here has no account on this machine (an orphan, as cron logs it)")
    }

    // MARK: Names and modes

    func testCronDNamesAndModes_thatCronDoesNotRead() {
        XCTAssertEqual(importCron("0 1 * * * root /bin/a\n", path: "/etc/cron.d/backup.sh").config.ignoredFiles.first?.reason,
                       "its name has a character other than letters, digits, _ and - (cron.d files are named like run-parts scripts)")
        XCTAssertTrue(importCron("0 1 * * * root /bin/a\n", path: "/etc/cron.d/backup.sh", cron: .cronie).config.ignoredFiles.isEmpty)
        let groupWritable = CronFileFacts(mode: 0o100664, uid: 0, links: 1, isRegular: true)
        XCTAssertEqual(importCron("0 1 * * * root /bin/a\n", path: "/etc/cron.d/backup", facts: groupWritable).config.ignoredFiles.first?.reason,
                       "it is writable by its group or others (mode 0664)")
        let loose = CronFileFacts(mode: 0o100644, uid: 0, links: 1, isRegular: true)
        XCTAssertEqual(importCron("0 1 * * * /bin/a\n", facts: loose).config.ignoredFiles.first?.reason, "its mode is 0644, not 0600")
        // A copy elsewhere: its mode is the copy's, not the table's.
        XCTAssertTrue(importCron("0 1 * * * /bin/a\n", path: "/srv/tabs/root", owner: "root", facts: loose).config.ignoredFiles.isEmpty)
    }

    // MARK: The owner, and which cron

    func testOwner_namesTheUserOfATableReadFromElsewhere() throws {
        let imported = importCron("0 1 * * * /bin/a\n", path: "/srv/copies/alice.cron", mail: true, owner: "root")
        XCTAssertEqual(imported.entry("a-l1")?["user"], .string("root"))
        XCTAssertEqual(imported.entry("a-l1")?["working_directory"], .string("/root"))
        guard case .strings(let hook)? = imported.entry("a-l1")?["on_failure"] else { return XCTFail(imported.toml) }
        XCTAssertTrue(hook[2].contains(" root "), "\(hook)")
    }

    func testTheCronInstalled_isTheDefault_fromDpkgTheDaemonOrTheDistribution() throws {
        let root = try makeScratchDirectory()
        XCTAssertNil(CronFlavor.installed(root: root))
        try FileManager.default.createDirectory(atPath: root + "/etc", withIntermediateDirectories: true)
        try "12.5\n".write(toFile: root + "/etc/debian_version", atomically: true, encoding: .utf8)
        XCTAssertEqual(CronFlavor.installed(root: root)?.flavor, .debian)
        XCTAssertEqual(CronFlavor.installed(root: root)?.reason, "no cron is installed here, and this is a Debian system")
        try FileManager.default.createDirectory(atPath: root + "/usr/sbin", withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: root + "/usr/sbin/crond", contents: Data(), attributes: [.posixPermissions: 0o755])
        XCTAssertEqual(CronFlavor.installed(root: root)?.flavor, .cronie, "a cronie built on Debian")
        try FileManager.default.createDirectory(atPath: root + "/var/lib/dpkg", withIntermediateDirectories: true)
        try "Package: cron\nStatus: install ok installed\nVersion: 3.0pl1-162\n\nPackage: zsh\nStatus: install ok installed\n"
            .write(toFile: root + "/var/lib/dpkg/status", atomically: true, encoding: .utf8)
        XCTAssertEqual(CronFlavor.installed(root: root)?.reason, "the package cron is installed here")

        let tab = root + "/tab"
        try "0 1 * * * /bin/a\n".write(toFile: tab, atomically: true, encoding: .utf8)
        let translated = try ImportRun.translate(ImportOptions(format: .cron, files: [tab], mail: false), machineRoot: root).get()
        XCTAssertTrue(translated.notes.first?.hasPrefix("Read as Debian's cron (Vixie cron 3.0pl1) reads its tables, since the package cron is installed here") ?? false,
                      "\(translated.notes)")
        let none = ImportRun.translate(ImportOptions(format: .cron, files: [tab], mail: false), machineRoot: root + "/nothing")
        guard case .failure(let failure) = none else { return XCTFail("a cron was found under \(root)/nothing") }
        XCTAssertEqual(failure.exitCode, 64)
        XCTAssertTrue(failure.description.contains("pass --cron debian or --cron cronie"), failure.description)
    }

    func testCheck_countsEachIgnoredFileWithEntries_asADifference() throws {
        let imported = importCron("0 1 * * * /bin/a\n5/10 * * * * /bin/b\n")
        let report = ImportCheck.ignoredFiles(imported.config)
        XCTAssertEqual(report.differences, 1)
        XCTAssertTrue(report.text.hasPrefix("DIFFERENT: Debian's cron (Vixie cron 3.0pl1) ignores /var/spool/cron/crontabs/root as a whole"), report.text)
        XCTAssertEqual(ImportCheck.ignoredFiles(importCron("0 1 * * * /bin/a\n5/10 * * * * /bin/b\n", asCronRuns: true).config).differences, 0)
    }
}
