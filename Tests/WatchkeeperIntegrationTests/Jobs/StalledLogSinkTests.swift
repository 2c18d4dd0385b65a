import Foundation
import WatchkeeperCore
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// A log sink that stops taking anything (a stderr pipe nobody drains, a journald that does
/// not read its socket) slows the jobs whose output waits for it, and nothing else: other
/// jobs' budgets expire on time, the watchdog is pinged, SIGUSR1 dumps, `status` answers.
/// A job that ends while its last lines wait gets its record once they are out or dropped.
final class StalledLogSinkTests: ControlTestCase {
    /// `loud` writes 300 KB of lines and blocks once the sink is full; its budget ends it
    /// while its last lines wait. `budgeted` runs every 1.5 s and expires after 1 s.
    static let tables = """
        [[task]]
        name = "loud"
        every = "1s"
        budget = "2s"
        command = ["/bin/sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo \\"line $i of a job whose reader stopped, padded to a hundred bytes ........................\\"; i=$((i+1)); done"]

        [[task]]
        name = "budgeted"
        every = "1500ms"
        budget = "1s"
        command = ["sleep", "30"]
        """

    static let daemonSettings = """
        [daemon]
        log_level = "info"
        shutdown_grace = "3s"
        dump_component_timeout = "2s"
        """

    func testAStderrReaderThatStopped_holdsNoOtherJobNorTheWatchdog() throws {
        sandbox = try DaemonSandbox()
        notify = try NotifySocket()
        try sandbox.writeConfig(Self.daemonSettings + "\n" + Self.tables)
        let fifo = sandbox.root + "/stderr.fifo"
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        // Opened for reading and never read: the daemon's stderr fills and stays full.
        let reader = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(reader, 0)
        defer { close(reader) }
        daemon = try sandbox.start(notifySocket: notify, extra: ["WATCHDOG_USEC": "2000000"], stderrPath: fifo)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), "no READY=1")
        try checkNothingElseStalls(sinkIsStuck: { [self] in pipeBytes(reader) >= 32_768 })

        // The job that ended with its last lines unwritten has its record once they are
        // dropped (10 s for stderr), with a warning saying so.
        let loud = waitForValue(25) { try? history("loud").first }
        XCTAssertNotNil(loud, "the job whose output waited never got its record")

        // Reading again: what waited comes out, and the daemon stops cleanly.
        let drained = DrainingReader(fd: reader)
        daemon.send(SIGTERM)
        XCTAssertEqual(daemon.waitForExit(timeout: 30), 0)
        let text = drained.stop()
        XCTAssertTrue(text.contains("dropped the last"), "no warning about the dropped output:\n\(text.suffix(2_000))")
    }

    func testAJournalThatStoppedReading_holdsNoOtherJobNorTheWatchdog() throws {
        guard geteuid() == 0 else { throw XCTSkip("a private /run/systemd/journal needs root (a mount namespace)") }
        sandbox = try DaemonSandbox()
        notify = try NotifySocket()
        try sandbox.writeConfig(Self.daemonSettings + "\n" + Self.tables)
        // journald's socket, as the daemon finds it at /run/systemd/journal/socket in a mount
        // namespace of its own: bound here and never read.
        let socketPath = sandbox.root + "/journal.socket"
        let journal = try boundDatagramSocket(socketPath)
        defer { close(journal) }
        // stderr is a file, named in JOURNAL_STREAM as systemd names a journal stream: the
        // daemon takes the journal as its sink.
        let stderrPath = sandbox.root + "/stderr.log"
        XCTAssertTrue(FileManager.default.createFile(atPath: stderrPath, contents: nil))
        var info = stat()
        XCTAssertEqual(stat(stderrPath, &info), 0)
        let launcher = ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                        #"mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && : > /run/systemd/journal/socket && mount --bind "$0" /run/systemd/journal/socket && exec "$@""#,
                        socketPath]
        daemon = try sandbox.start(notifySocket: notify, extra: ["WATCHDOG_USEC": "2000000", "JOURNAL_STREAM": "\(info.st_dev):\(info.st_ino)"],
                                   stderrPath: stderrPath, launcher: launcher)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), "no READY=1; stderr:\n\(daemon.stderr)")
        try checkNothingElseStalls(sinkIsStuck: { [self] in
            // The daemon's own entries wait for the journal: it really took nothing.
            guard let outbox = try? dumpJSON()["daemon"].flatMap({ ($0 as? [String: Any])?["log_outbox"] as? [String: Any] }) else { return false }
            return (outbox["waiting_entries"] as? Int ?? 0) > 0
        })
        daemon.send(SIGTERM)
        // The last entries cannot reach the journal: the exit waits 2 s for them, no longer.
        XCTAssertEqual(daemon.waitForExit(timeout: 30), 0, daemon.stderr)
    }

    /// Over several runs of `budgeted` while `loud`'s output is stuck: every one expires
    /// within 100 ms of its budget, no watchdog ping is missed, SIGUSR1 writes its dump
    /// within a second, and `status` answers.
    private func checkNothingElseStalls(sinkIsStuck: @escaping () -> Bool, file: StaticString = #filePath, line: UInt = #line) throws {
        XCTAssertTrue(waitFor(15) { sinkIsStuck() }, "the sink never filled: the test proves nothing", file: file, line: line)
        let watchStart = Date()
        // Runs of `budgeted` that started after the sink was full.
        let since = Date().timeIntervalSince1970
        let pings = notify.collect(for: 6).filter { $0["WATCHDOG"] == "1" }.map(\.receivedAt)
        var gaps = zip(pings.dropFirst(), pings).map { $0.timeIntervalSince($1) }
        if let first = pings.first { gaps.append(first.timeIntervalSince(watchStart)) }
        XCTAssertFalse(pings.isEmpty, "no watchdog ping for 6 s", file: file, line: line)
        XCTAssertLessThan(gaps.max() ?? 99, 1.9, "a watchdog ping came late (WatchdogSec=2s): gaps \(gaps)", file: file, line: line)

        let expired = try history("budgeted").filter {
            ($0["outcome"] as? String) == "expired" && (($0["started_at"] as? String).flatMap(Self.epochSeconds) ?? 0) >= since
        }
        XCTAssertGreaterThanOrEqual(expired.count, 2, "budgeted did not run while the sink was stuck", file: file, line: line)
        for run in expired {
            let duration = run["duration_s"] as? Double ?? 99
            XCTAssertLessThan(duration, 1.1 * testDeadlineScale, "a 1 s budget expired \(duration - 1) s late: \(run)", file: file, line: line)
        }

        let started = MonotonicInstant.now
        daemon.send(SIGUSR1)
        XCTAssertNotNil(sandbox.waitForState(sequence: 1, timeout: 1), "no dump within 1 s of SIGUSR1", file: file, line: line)
        XCTAssertLessThan(MonotonicInstant.now - started, .seconds(testDeadlineScale), file: file, line: line)

        let status = try cli(["status"])
        XCTAssertEqual(status.status, 0, status.stderr, file: file, line: line)
        XCTAssertTrue(daemon.isRunning, file: file, line: line)
    }

    private func history(_ name: String) throws -> [[String: Any]] {
        let result = try cli(["history", name, "--json", "-n", "50"])
        guard result.status == 0 else { return [] }
        let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
        return (object as? [String: Any])?["runs"] as? [[String: Any]] ?? object as? [[String: Any]] ?? []
    }

    private func dumpJSON() throws -> [String: Any] {
        let result = try cli(["dump", "--json"])
        return try XCTUnwrap(JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any])
    }

    /// "2026-11-26T09:15:13.123Z" (or with an offset) as seconds since the epoch.
    static func epochSeconds(_ text: String) -> Double? {
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        return (formatter.date(from: text) ?? ISO8601DateFormatter().date(from: text))?.timeIntervalSince1970
    }

    private func pipeBytes(_ fd: Int32) -> Int {
        var count: Int32 = 0
        return ioctl(fd, UInt(FIONREAD), &count) == 0 ? Int(count) : 0
    }
}

/// Reads a descriptor to its end on a thread of its own, keeping the text.
private final class DrainingReader: @unchecked Sendable {
    private let fd: Int32
    private let lock = NSLock()
    private var text: [UInt8] = []
    private var stopping = false
    private let done = DispatchSemaphore(value: 0)

    init(fd: Int32) {
        self.fd = fd
        Thread { self.run() }.start()
    }

    private func run() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, 100)
            if ready > 0 {
                let count = read(fd, &buffer, buffer.count)
                if count > 0 {
                    lock.withLock { text += buffer[0..<count] }
                    continue
                }
                if count == 0 { break }
            }
            if lock.withLock({ stopping }) { break }
        }
        done.signal()
    }

    /// Everything read, once the writer has gone (EOF) or after a last pass.
    func stop() -> String {
        lock.withLock { stopping = true }
        done.wait()
        return lock.withLock { String(decoding: text, as: UTF8.self) }
    }
}
