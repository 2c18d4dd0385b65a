import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

final class CommandLineTests: XCTestCase {
    func testCheckConfig_acceptsAValidFile() throws {
        let sandbox = try DaemonSandbox()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let process = try sandbox.start(notifySocket: nil, arguments: ["check-config", sandbox.configPath])
        XCTAssertEqual(process.waitForExit(timeout: 10), 0, process.stderr)
    }

    func testCheckConfig_printsEveryErrorWithLineAndColumn_andExits78() throws {
        let sandbox = try DaemonSandbox()
        try sandbox.writeConfig("""
            [daemon]
            log_level = "loud"
            runtime_dir = "relative/dir"
            """)
        let process = try sandbox.start(notifySocket: nil, arguments: ["check-config", sandbox.configPath])
        XCTAssertEqual(process.waitForExit(timeout: 10), 78)
        let lines = process.stderr.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.count, 2, process.stderr)
        XCTAssertTrue(lines[0].hasPrefix("\(sandbox.configPath):2:13: daemon.log_level = \"loud\" is not one of"), lines[0])
        XCTAssertTrue(lines[1].hasPrefix("\(sandbox.configPath):3:15: daemon.runtime_dir must be an absolute path"), lines[1])
    }

    func testCheckConfig_usesWATCHKEEPER_CONFIGWhenNoPathIsGiven() throws {
        let sandbox = try DaemonSandbox()
        try sandbox.writeConfig("[daemon]\nshutdown_grace = 5\n")
        let process = try sandbox.start(notifySocket: nil, extra: ["WATCHKEEPER_CONFIG": sandbox.configPath], arguments: ["check-config"])
        XCTAssertEqual(process.waitForExit(timeout: 10), 78)
        XCTAssertTrue(process.stderr.contains("\(sandbox.configPath):2:18: daemon.shutdown_grace must be a string, not an integer"), process.stderr)
    }

    func testRun_withAnInvalidFile_refusesToStartWithExit78() throws {
        let sandbox = try DaemonSandbox()
        try sandbox.writeConfig("[daemon\n")
        let process = try sandbox.start(notifySocket: nil)
        XCTAssertEqual(process.waitForExit(timeout: 10), 78)
        XCTAssertTrue(process.stderr.contains("\(sandbox.configPath):1:"), process.stderr)
        XCTAssertTrue(process.stderr.contains("unable to start"), process.stderr)
    }

    func testVersion_printsTheVersion() throws {
        let sandbox = try DaemonSandbox()
        let output = sandbox.root + "/version.txt"
        let process = try DaemonProcess(arguments: ["--version"], environment: ["PATH": "/usr/bin:/bin"],
                                        stderrPath: sandbox.root + "/stderr.log", stdoutPath: output)
        XCTAssertEqual(process.waitForExit(timeout: 10), 0)
        let printed = try String(contentsOfFile: output, encoding: .utf8)
        XCTAssertEqual(printed.trimmingCharacters(in: .whitespacesAndNewlines), "0.1.0")
    }
}
