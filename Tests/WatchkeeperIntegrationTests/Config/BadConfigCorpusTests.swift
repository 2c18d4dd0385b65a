import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Tests/config-corpus/bad holds one mistake per file, each file opening with the
/// diagnostics it must get, one `# expect: LINE:COLUMN: message` line each. Every file is
/// refused by `check-config` and by `run` with exit 78 and exactly those lines, and a reload
/// with it keeps the old configuration running.
final class BadConfigCorpusTests: XCTestCase {
    private static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("config-corpus/bad").path

    private struct Case {
        let name: String
        let bytes: Data
        let expected: [String]
    }

    private func cases() throws -> [Case] {
        let names = try FileManager.default.contentsOfDirectory(atPath: Self.corpus).filter { $0.hasSuffix(".toml") }.sorted()
        let found = try names.map { name -> Case in
            let bytes = try Data(contentsOf: URL(fileURLWithPath: Self.corpus + "/" + name))
            let expected = bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
                .prefix { $0.starts(with: Array("# expect: ".utf8)) }
                .map { String(decoding: $0.dropFirst("# expect: ".utf8.count), as: UTF8.self) }
            return Case(name: name, bytes: bytes, expected: expected)
        }
        XCTAssertGreaterThanOrEqual(found.count, 60, "the corpus shrank")
        for each in found { XCTAssertFalse(each.expected.isEmpty, "\(each.name) states no expected diagnostic") }
        return found
    }

    /// The lines `PATH:…` the command printed, in order.
    private func diagnostics(_ output: String, for path: String) -> [String] {
        output.split(separator: "\n").filter { $0.hasPrefix(path + ":") }.map { String($0.dropFirst(path.count + 1)) }
    }

    func testEveryCorpusFile_isRefusedByCheckConfigAndByRun_withItsDiagnosticsAtTheirPositions() throws {
        let sandbox = try DaemonSandbox()
        for each in try cases() {
            let path = sandbox.root + "/" + each.name
            try each.bytes.write(to: URL(fileURLWithPath: path))
            for arguments in [["check-config", path], ["run", "--config", path]] {
                let process = try sandbox.start(notifySocket: nil, arguments: arguments)
                XCTAssertEqual(process.waitForExit(timeout: 10), 78, "\(arguments[0]) \(each.name): \(process.stderr)")
                XCTAssertEqual(diagnostics(process.stderr, for: path), each.expected, "\(arguments[0]) \(each.name)")
            }
        }
    }

    func testAReloadWithEveryCorpusFile_isRefused_andTheOldConfigurationKeepsRunning() throws {
        let sandbox = try DaemonSandbox()
        let good = DaemonSandbox.basicConfig + """

            [[task]]
            name = "heartbeat"
            every = "200ms"
            command = ["/bin/true"]
            """
        try sandbox.writeConfig(good)
        let notify = try NotifySocket()
        let daemon = try sandbox.startReady(notifySocket: notify)
        defer { daemon.stop(within: 10) }
        var refusals = 0
        for each in try cases() {
            // Replaced whole, as an editor or a deployment tool would.
            try each.bytes.write(to: URL(fileURLWithPath: sandbox.configPath + ".new"))
            XCTAssertEqual(rename(sandbox.configPath + ".new", sandbox.configPath), 0)
            daemon.send(SIGHUP)
            refusals += 1
            XCTAssertTrue(waitFor(10) { daemon.stderr.components(separatedBy: "unable to reload ").count - 1 >= refusals },
                          "\(each.name): no refusal logged\n\(daemon.stderrTail)")
            let log = daemon.stderr
            for line in each.expected {
                // The log escapes a backslash as two, so a logged line cannot be confused with an escape.
                let logged = line.replacingOccurrences(of: "\\", with: "\\\\")
                XCTAssertTrue(log.contains("error: \(sandbox.configPath):\(logged)"), "\(each.name): \(logged) not logged")
            }
            // A run of the old configuration's task after the refusal proves it still runs.
            let offset = log.utf8.count
            XCTAssertTrue(waitFor(10) { String(daemon.stderr.utf8.dropFirst(offset))?.contains("task heartbeat run") == true },
                          "\(each.name): the old configuration's task did not run after the refused reload\n\(daemon.stderrTail)")
        }
        XCTAssertTrue(daemon.isRunning)
    }

    /// What git cannot hold or should not: a directory, a FIFO, a symbolic link loop, a
    /// file over the size limit, no file at all, and a cycle through 10,000 tasks. Each is
    /// made at `path` by `make`; `expected` is what follows the path in the diagnostic.
    private struct MadeCase: Sendable {
        let name: String
        let make: @Sendable (String) throws -> Void
        let expected: String
    }

    private static let madeCases: [MadeCase] = [
        MadeCase(name: "directory", make: { XCTAssertEqual(mkdir($0, 0o755), 0) },
                 expected: ": unable to read the configuration: Is a directory"),
        // A FIFO opened for reading would wait for a writer: the refusal must come at once.
        MadeCase(name: "fifo", make: { XCTAssertEqual(mkfifo($0, 0o644), 0) },
                 expected: ": unable to read the configuration: Is a FIFO (named pipe), not a regular file"),
        MadeCase(name: "symlink loop", make: { path in
            XCTAssertEqual(symlink(path + ".loop", path), 0)
            XCTAssertEqual(symlink(path, path + ".loop"), 0)
        }, expected: ": unable to read the configuration: Too many levels of symbolic links (a symbolic link loop?)"),
        MadeCase(name: "17 MiB", make: { try Data(repeating: UInt8(ascii: "#"), count: 17 << 20).write(to: URL(fileURLWithPath: $0)) },
                 expected: ": unable to read the configuration: file is larger than 16 MiB"),
        MadeCase(name: "missing", make: { _ in }, expected: ": unable to read the configuration: No such file or directory"),
        // The cycle search recursed once per task, and this overflowed its stack.
        MadeCase(name: "cycle through 10,000 tasks", make: { path in
            let tasks = (0..<10_000).map { "[[task]]\nname = \"t\($0)\"\nmanual = true\ncommand = [\"/bin/true\"]\nafter = [\"t\(($0 + 1) % 10_000)\"]\n" }
            try tasks.joined().write(toFile: path, atomically: false, encoding: .utf8)
        }, expected: ":5:9: tasks depend on each other in a cycle: t0 → t1 → t2 → t3 → t4 → … → t9999 → t0 (10000 tasks)"),
    ]

    /// Removes whatever `make` left at `path`, so the next case starts from nothing.
    private static func removeMade(_ path: String) {
        for each in [path, path + ".loop"] {
            // unlink refuses a directory, with EISDIR.
            if unlink(each) != 0 && errno == EISDIR { XCTAssertEqual(rmdir(each), 0, each) }
        }
    }

    func testFilesThatAreNotReadableConfigurations_areRefusedWithTheCause_andAFIFOIsNeverOpened() throws {
        let sandbox = try DaemonSandbox()
        for each in Self.madeCases {
            let path = sandbox.root + "/made.toml"
            try each.make(path)
            defer { Self.removeMade(path) }
            for arguments in [["check-config", path], ["run", "--config", path]] {
                let process = try sandbox.start(notifySocket: nil, arguments: arguments)
                XCTAssertEqual(process.waitForExit(timeout: 10), 78, "\(arguments[0]) \(each.name): \(process.stderr)")
                XCTAssertTrue(process.stderr.contains(path + each.expected), "\(arguments[0]) \(each.name): \(process.stderr)")
            }
        }
    }

    func testAReloadWithAFileThatIsNotAReadableConfiguration_isRefused_andTheOldConfigurationKeepsRunning() throws {
        let sandbox = try DaemonSandbox()
        try sandbox.writeConfig(DaemonSandbox.basicConfig + """

            [[task]]
            name = "heartbeat"
            every = "200ms"
            command = ["/bin/true"]
            """)
        let notify = try NotifySocket()
        let daemon = try sandbox.startReady(notifySocket: notify)
        defer { daemon.stop(within: 10) }
        var refusals = 0
        for each in Self.madeCases {
            Self.removeMade(sandbox.configPath)
            try each.make(sandbox.configPath)
            daemon.send(SIGHUP)
            refusals += 1
            XCTAssertTrue(waitFor(10) { daemon.stderr.components(separatedBy: "unable to reload ").count - 1 >= refusals },
                          "\(each.name): no refusal logged\n\(daemon.stderrTail)")
            let log = daemon.stderr
            XCTAssertTrue(log.contains("error: " + sandbox.configPath + each.expected), "\(each.name): not logged\n\(daemon.stderrTail)")
            let offset = log.utf8.count
            XCTAssertTrue(waitFor(10) { String(daemon.stderr.utf8.dropFirst(offset))?.contains("task heartbeat run") == true },
                          "\(each.name): the old configuration's task did not run after the refused reload\n\(daemon.stderrTail)")
        }
        XCTAssertTrue(daemon.isRunning)
    }

    func testAnUnreadableFile_isRefusedForAUserWhoCannotReadIt() throws {
        guard geteuid() == 0 else { throw XCTSkip("needs root to run check-config as nobody") }
        let sandbox = try DaemonSandbox()
        XCTAssertEqual(chmod(sandbox.root, 0o755), 0)
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        XCTAssertEqual(chmod(sandbox.configPath, 0o600), 0)
        // A copy nobody may run: the checkout may be under a home only root can enter.
        let binary = sandbox.root + "/watchkeeper"
        try FileManager.default.copyItem(atPath: DaemonProcess.binaryPath, toPath: binary)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        process.arguments = ["--reuid=nobody", "--regid=nogroup", "--clear-groups", binary, "check-config", sandbox.configPath]
        let stderr = Pipe()
        process.standardError = stderr
        try process.run()
        let output = String(decoding: stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        XCTAssertEqual(process.terminationStatus, 78, output)
        XCTAssertTrue(output.contains("\(sandbox.configPath): unable to read the configuration: Permission denied"), output)
    }
}
