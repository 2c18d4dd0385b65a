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

    func testFilesThatAreNotReadableConfigurations_areRefusedWithTheCause_andAFIFOIsNeverOpened() throws {
        let sandbox = try DaemonSandbox()
        let root = sandbox.root
        XCTAssertEqual(mkdir(root + "/directory.toml", 0o755), 0)
        XCTAssertEqual(mkfifo(root + "/fifo.toml", 0o644), 0)
        XCTAssertEqual(symlink(root + "/loop-b.toml", root + "/loop-a.toml"), 0)
        XCTAssertEqual(symlink(root + "/loop-a.toml", root + "/loop-b.toml"), 0)
        try Data(repeating: UInt8(ascii: "#"), count: 17 << 20).write(to: URL(fileURLWithPath: root + "/large.toml"))
        let expected = [
            "directory.toml": "unable to read the configuration: Is a directory",
            "fifo.toml": "unable to read the configuration: Is a FIFO (named pipe), not a regular file",
            "loop-a.toml": "unable to read the configuration: Too many levels of symbolic links (a symbolic link loop?)",
            "large.toml": "unable to read the configuration: file is larger than 16 MiB",
            "missing.toml": "unable to read the configuration: No such file or directory",
        ]
        for (name, message) in expected.sorted(by: { $0.key < $1.key }) {
            for arguments in [["check-config", root + "/" + name], ["run", "--config", root + "/" + name]] {
                let process = try sandbox.start(notifySocket: nil, arguments: arguments)
                // A FIFO opened for reading would wait for a writer: the exit must come at once.
                XCTAssertEqual(process.waitForExit(timeout: 10), 78, "\(arguments[0]) \(name): \(process.stderr)")
                XCTAssertTrue(process.stderr.contains("\(root)/\(name): \(message)"), "\(arguments[0]) \(name): \(process.stderr)")
            }
        }
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
