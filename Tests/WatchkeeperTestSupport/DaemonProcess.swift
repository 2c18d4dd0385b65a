#if canImport(XCTest)
import Foundation
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The real watchkeeper binary, started with posix_spawn so the test controls its
/// environment, signal mask and stderr exactly (the daemon must not inherit a
/// blocked mask from the test runner, just as it would not from systemd).
public final class DaemonProcess {
    public let pid: pid_t
    public let stderrPath: String
    public private(set) var exitStatus: Int32?

    public static var binaryPath: String {
        if let explicit = ProcessInfo.processInfo.environment["WATCHKEEPER_BIN"] { return explicit }
        // Tests/WatchkeeperTestSupport/DaemonProcess.swift: three folders up is the repository.
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/watchkeeper").path
    }

    /// `cgroup`: a cgroup v2 directory the daemon starts in, as systemd would start it in
    /// its unit's (a shell moves itself there, then execs the daemon under the same pid).
    /// `launcher`: a command the daemon's own is appended to, which ends by exec'ing it
    /// under the same pid (`unshare --mount … sh -c '…; exec "$@"' sh`).
    public init(arguments: [String], environment: [String: String], stderrPath: String, stdoutPath: String = "/dev/null",
                cgroup: String? = nil, launcher: [String] = []) throws {
        self.stderrPath = stderrPath
        let binary = Self.binaryPath
        guard access(binary, X_OK) == 0 else {
            throw XCTSkip("no watchkeeper binary at \(binary): run `swift build` (or `make test`) first")
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var emptyMask = sigset_t()
        sigemptyset(&emptyMask)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGUSR1, SIGHUP, SIGTERM, SIGINT, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &emptyMask)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var program = binary
        var fullArguments = [binary] + arguments
        if let cgroup {
            program = "/bin/sh"
            fullArguments = ["/bin/sh", "-c", #"echo $$ > "$0/cgroup.procs" && exec "$@""#, cgroup] + fullArguments
        }
        if let first = launcher.first {
            program = first
            fullArguments = launcher + fullArguments
        }
        let argv = fullArguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let result = posix_spawn(&child, program, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw NSError(domain: "posix_spawn", code: Int(result), userInfo: [NSLocalizedDescriptionKey: String(cString: strerror(result))])
        }
        pid = child
    }

    deinit {
        if exitStatus == nil {
            kill(pid, SIGKILL)
            var status: Int32 = 0
            waitpid(pid, &status, 0)
        }
    }

    public func send(_ signal: Int32) {
        kill(pid, signal)
    }

    /// The exit code, or 128+signal if it was killed; nil if still running at the deadline
    /// (`timeout` seconds times `testDeadlineScale`).
    public func waitForExit(timeout: TimeInterval) -> Int32? {
        if let exitStatus { return exitStatus }
        let deadline = Date().addingTimeInterval(timeout * testDeadlineScale)
        // Polls at least once, so that a zero timeout (isRunning) does see an exit.
        repeat {
            var status: Int32 = 0
            let result = waitpid(pid, &status, WNOHANG)
            if result == pid {
                let code = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
                exitStatus = code
                return code
            }
            if Date() >= deadline { break }
            usleep(10_000)
        } while true
        return nil
    }

    /// SIGTERM, and a clean drain: exit status 0 within `timeout` seconds.
    public func stop(within timeout: TimeInterval, file: StaticString = #filePath, line: UInt = #line) {
        send(SIGTERM)
        XCTAssertEqual(waitForExit(timeout: timeout), 0, "stderr:\n\(stderr)", file: file, line: line)
    }

    public var isRunning: Bool {
        exitStatus == nil && waitForExit(timeout: 0) == nil
    }

    public var stderr: String {
        (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? ""
    }

    /// The last 64 KiB of stderr, for tests whose jobs print a lot.
    public var stderrTail: String {
        guard let handle = FileHandle(forReadingAtPath: stderrPath) else { return "" }
        defer { try? handle.close() }
        let size = (try? handle.seekToEnd()) ?? 0
        try? handle.seek(toOffset: size > 65_536 ? size - 65_536 : 0)
        return String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
    }

    /// Polls stderr until it contains `text`.
    public func waitForStderr(containing text: String, timeout: TimeInterval) -> Bool {
        waitFor(timeout) { stderr.contains(text) }
    }

    /// Polls stderr until the ready line is there. The log writer keeps order, so then
    /// everything logged before READY=1 (start-up's notices and warnings) is there too:
    /// READY=1 alone does not prove it, as the daemon gives the writer at most 100 ms
    /// before sending it. What a test says is absent from start-up waits for this first.
    public func waitForReadyLine(timeout: TimeInterval = 10) -> Bool {
        waitForStderr(containing: "info: ready in ", timeout: timeout)
    }
}

/// A scratch directory per test with a config file, a runtime dir and the daemon's stderr.
public final class DaemonSandbox {
    public let root: String

    /// A sandbox under `parent`: by default WATCHKEEPER_TEST_SANDBOX_PARENT, or /tmp.
    public init(parent: String? = nil) throws {
        let parent = parent ?? ProcessInfo.processInfo.environment["WATCHKEEPER_TEST_SANDBOX_PARENT"] ?? "/tmp"
        let template = parent + "/wk-it-XXXXXX"
        var bytes = Array(template.utf8CString)
        guard let made = mkdtemp(&bytes) else { throw NSError(domain: "mkdtemp", code: Int(errno)) }
        root = String(cString: made)
    }

    deinit {
        _ = try? FileManager.default.removeItem(atPath: root)
    }

    public var configPath: String { root + "/watchkeeper.toml" }
    public var runtimeDirectory: String { root + "/run" }
    public var statePath: String { runtimeDirectory + "/state.json" }

    /// The method put in every [[watch]] table that names none (nil: the rules' own). The
    /// watch tests' method matrix sets it per test (WatchTestCase.under).
    public var watchMethod: String? = DaemonSandbox.watchMethodUnderTest

    public func writeConfig(_ text: String) throws {
        try Self.withWatchMethod(text, method: watchMethod).write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    /// The watch method every rule of a whole run is run with when
    /// WATCHKEEPER_TEST_WATCH_METHOD is set (by hand, to try a class under one method);
    /// nil for the rules' own.
    public static var watchMethodUnderTest: String? {
        ProcessInfo.processInfo.environment["WATCHKEEPER_TEST_WATCH_METHOD"].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// `text` with `method = "<method>"` in every [[watch]] table that names no method of
    /// its own.
    static func withWatchMethod(_ text: String, method: String?) -> String {
        guard let method else { return text }
        var tables = text.components(separatedBy: "[[watch]]")
        for index in tables.indices.dropFirst() {
            // The table ends where the next one starts.
            let body = tables[index]
            let end = body.range(of: "\n[", options: .literal).map { body.distance(from: body.startIndex, to: $0.lowerBound) } ?? body.count
            let own = body.prefix(end)
            guard !own.contains("method =") else { continue }
            // A poll at its quickest, so that waits written for events still hold.
            let extra = method == "poll" && !own.contains("poll_interval") ? "\npoll_interval = \"1s\"\npoll_settle = \"1s\"" : ""
            tables[index] = "\nmethod = \"\(method)\"" + extra + body
        }
        return tables.joined(separator: "[[watch]]")
    }

    public static let basicConfig = """
        [daemon]
        log_level = "info"
        shutdown_grace = "5s"
        dump_component_timeout = "300ms"
        """

    public func environment(notifySocket: NotifySocket?, extra: [String: String] = [:]) -> [String: String] {
        var environment = [
            "PATH": "/usr/bin:/bin",
            "RUNTIME_DIRECTORY": runtimeDirectory,
            "STATE_DIRECTORY": root + "/state",
        ]
        if let notifySocket { environment["NOTIFY_SOCKET"] = notifySocket.path }
        // A daemon built with a sanitizer takes its options from the test run's environment.
        for key in ["ASAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS"] {
            if let value = ProcessInfo.processInfo.environment[key] { environment[key] = value }
        }
        environment.merge(extra) { _, new in new }
        return environment
    }

    /// The one way tests start a daemon: `watchkeeper run` on this sandbox's configuration,
    /// its stderr in ROOT/stderr.log unless `stderrPath` says otherwise (a FIFO, say), under
    /// `launcher` (prlimit, unshare) or in `cgroup` when asked.
    public func start(notifySocket: NotifySocket?, extra: [String: String] = [:], arguments: [String]? = nil,
                      cgroup: String? = nil, stderrPath: String? = nil, launcher: [String] = []) throws -> DaemonProcess {
        try DaemonProcess(arguments: arguments ?? ["run", "--config", configPath],
                          environment: environment(notifySocket: notifySocket, extra: extra),
                          stderrPath: stderrPath ?? root + "/stderr.log", cgroup: cgroup, launcher: launcher)
    }

    /// The daemon started on the configuration written (under `launcher`, as `start`), once
    /// it has said READY=1. One that does not within 10 s fails the test with its stderr, and
    /// the rest of the test is skipped.
    public func startReady(notifySocket: NotifySocket, extra: [String: String] = [:], launcher: [String] = [],
                    file: StaticString = #filePath, line: UInt = #line) throws -> DaemonProcess {
        let daemon = try start(notifySocket: notifySocket, extra: extra, launcher: launcher)
        guard notifySocket.waitFor("READY", "1", timeout: 10) != nil else {
            XCTFail("no READY=1 within 10 s; stderr:\n\(daemon.stderr)", file: file, line: line)
            throw XCTSkip("daemon did not become ready")
        }
        return daemon
    }

    /// state.json parsed, once it exists and has at least `sequence`.
    public func waitForState(sequence: Int, timeout: TimeInterval) -> [String: Any]? {
        waitForValue(timeout, every: .milliseconds(10)) {
            guard let data = FileManager.default.contents(atPath: statePath),
                  let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
                  let current = object["sequence"] as? Int, current >= sequence else { return nil }
            return object
        }
    }
}
#endif
