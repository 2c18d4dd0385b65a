import Foundation
import WatchkeeperCore
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A real daemon with its control socket, and the real CLI (or a raw socket) talking to it.
class ControlTestCase: XCTestCase {
    var sandbox: DaemonSandbox!
    var daemon: DaemonProcess!
    var notify: NotifySocket!

    var socketPath: String { sandbox.runtimeDirectory + "/control.sock" }

    /// `tasks`: [[task]]/[[watch]] tables, with @DIR@ for the sandbox.
    func startDaemon(_ tables: String, daemonSettings: String = "", file: StaticString = #filePath, line: UInt = #line) throws {
        sandbox = try DaemonSandbox()
        notify = try NotifySocket()
        try FileManager.default.createDirectory(atPath: sandbox.root + "/inbox", withIntermediateDirectories: true)
        try sandbox.writeConfig("""
            [daemon]
            log_level = "debug"
            shutdown_grace = "5s"
            dump_component_timeout = "2s"
            \(daemonSettings)

            \(tables.replacingOccurrences(of: "@DIR@", with: sandbox.root))
            """)
        daemon = try sandbox.startReady(notifySocket: notify, file: file, line: line)
    }

    override func tearDown() {
        if let daemon, daemon.isRunning { daemon.stop(within: 15) }
        daemon = nil
        sandbox = nil
        super.tearDown()
    }

    struct CommandResult {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    /// The watchkeeper binary with `arguments` (the socket option added), optionally as
    /// another user through setpriv(1), with a clean environment.
    func cli(_ arguments: [String], asUser user: (uid: UInt32, gid: UInt32)? = nil, binary: String? = nil,
             environment: [String: String] = [:], withSocket: Bool = true) throws -> CommandResult {
        let process = Process()
        let program = binary ?? DaemonProcess.binaryPath
        var argv = arguments + (withSocket ? ["--socket", socketPath] : [])
        if let user {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            argv = ["--reuid=\(user.uid)", "--regid=\(user.gid)", "--clear-groups", program] + argv
        } else {
            process.executableURL = URL(fileURLWithPath: program)
        }
        process.arguments = argv
        process.environment = ["PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"].merging(environment) { _, new in new }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        // Read both to the end before waiting, so a large output cannot fill a pipe and stall.
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return CommandResult(status: process.terminationStatus, stdout: String(decoding: stdout, as: UTF8.self),
                             stderr: String(decoding: stderr, as: UTF8.self))
    }

    /// The status as JSON through the CLI.
    func statusJSON(file: StaticString = #filePath, line: UInt = #line) throws -> [String: Any] {
        let result = try cli(["status", "--json"])
        XCTAssertEqual(result.status, 0, result.stderr, file: file, line: line)
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any], file: file, line: line)
    }

    /// The running jobs' run IDs of a task, from `status --json`.
    func runningRunIDs(task: String) throws -> [String] {
        let jobs = try statusJSON()["jobs"] as? [String: Any]
        let running = jobs?["running"] as? [[String: Any]] ?? []
        return running.filter { $0["task"] as? String == task }.compactMap { $0["run_id"] as? String }
    }

    /// A raw connection, for clients the CLI would never be: malformed, oversized, silent.
    func rawConnection() throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        XCTAssertGreaterThanOrEqual(fd, 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            let bytes = Array(socketPath.utf8)
            buffer.copyBytes(from: bytes)
            buffer[bytes.count] = 0
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            close(fd)
            throw NSError(domain: "connect", code: Int(errno), userInfo: [NSLocalizedDescriptionKey: String(cString: strerror(errno))])
        }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    func send(_ fd: Int32, _ bytes: [UInt8]) {
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, bytes.count - offset, Int32(MSG_NOSIGNAL)) }
            guard written > 0 else { return }
            offset += written
        }
    }

    /// Reads one NUL-terminated reply; nil on EOF or timeout.
    func readReply(_ fd: Int32) -> DumpValue? {
        var message: [UInt8] = []
        var byte: UInt8 = 0
        while read(fd, &byte, 1) == 1 {
            if byte == 0 { return try? DumpValue.parse(json: message) }
            message.append(byte)
        }
        return nil
    }

    /// Whether the server closed the connection: EOF, or ECONNRESET when it closed with
    /// some of what we sent unread.
    func isClosedByServer(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        let count = read(fd, &byte, 1)
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    /// A copy of the binary that users other than root can run (the checkout may be in /root).
    func binaryForOtherUsers() throws -> String {
        chmod(sandbox.root, 0o755)
        let copy = sandbox.root + "/watchkeeper"
        try FileManager.default.copyItem(atPath: DaemonProcess.binaryPath, toPath: copy)
        chmod(copy, 0o755)
        return copy
    }
}
