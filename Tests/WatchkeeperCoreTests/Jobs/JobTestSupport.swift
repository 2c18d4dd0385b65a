import Dispatch
import Foundation
import Logging
// A ThreadSanitizer build (make sanitize) brings its own Mutex from WatchkeeperCore.
#if WATCHKEEPER_TSAN
import struct Synchronization.Atomic
#else
import Synchronization
#endif
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

// What the tests of the drain, JobRun and ChildProcess share: values delivered on the jobs
// queue kept for the test's thread, the daemon's stderr as a pipe the test reads, and a
// look at processes the test does not own.

/// Values another queue hands over, each arrival signalled: a wait sleeps until the next
/// one instead of polling, and gives up at its deadline (stretched by testDeadlineScale).
final class Arrivals<Value: Sendable>: @unchecked Sendable {
    private let values = Mutex<[Value]>([])
    private let arrived = DispatchSemaphore(value: 0)

    func add(_ value: Value) {
        values.withLock { $0.append(value) }
        arrived.signal()
    }

    /// Whether `count` more arrived, each within `timeout` seconds of the one before.
    func wait(_ count: Int = 1, timeout: Double = 10) -> Bool {
        (0..<count).allSatisfy { _ in arrived.wait(timeout: .now() + timeout * testDeadlineScale) == .success }
    }

    var all: [Value] { values.withLock { $0 } }
    var first: Value? { all.first }
}

/// The daemon's stderr as a pipe: a job's lines go to its write end (through the sink's
/// StderrStream), and the test reads them, or stops reading to play a reader that is behind.
final class StderrPipe: @unchecked Sendable {
    let readEnd: Int32
    let writeEnd: Int32
    private let text = Mutex<[UInt8]>([])

    init() {
        var fds: [Int32] = [0, 0]
        precondition(pipe(&fds) == 0, "unable to create a pipe: \(String(cString: strerror(errno)))")
        (readEnd, writeEnd) = (fds[0], fds[1])
        // Not inherited by the jobs the tests spawn, which would keep the pipe open.
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        _ = fcntl(readEnd, F_SETFL, fcntl(readEnd, F_GETFL) | O_NONBLOCK)
    }

    /// The sink's StderrStream writes through a description of its own (opened again
    /// through /proc/self/fd), so ours close whatever the sink still holds.
    func close() {
        Glibc.close(writeEnd)
        Glibc.close(readEnd)
    }

    /// The reader stops: the pipe is filled until a write would block.
    func fill() {
        let flags = fcntl(writeEnd, F_GETFL)
        _ = fcntl(writeEnd, F_SETFL, flags | O_NONBLOCK)
        let page = [UInt8](repeating: UInt8(ascii: "\n"), count: 4_096)
        while page.withUnsafeBytes({ write(writeEnd, $0.baseAddress, $0.count) }) > 0 {}
        _ = fcntl(writeEnd, F_SETFL, flags)
    }

    /// Everything read so far, after reading what is in the pipe now.
    var read: String {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = Glibc.read(readEnd, &buffer, buffer.count)
            guard count > 0 else { break }
            text.withLock { $0 += buffer[0..<count] }
        }
        return String(decoding: text.withLock { $0 }, as: UTF8.self)
    }

    /// Reads until what was read contains every one of `pieces`, or `timeout` seconds pass;
    /// returns what was read either way, for the assertions to show.
    func read(untilContains pieces: [String], timeout: Double = 10) -> String {
        var seen = ""
        _ = waitFor(timeout, every: .milliseconds(5)) {
            seen = read
            return pieces.allSatisfy { seen.contains($0) }
        }
        return seen
    }
}

/// A test case with a jobs context of its own: its logger recorded, its job output on a
/// pipe the test reads, real child processes. Subclasses that override setUp or tearDown
/// call super first in setUp and last in tearDown.
class JobTestCase: XCTestCase {
    private(set) var stderr: StderrPipe!
    private(set) var log: RecordedLog!
    private(set) var context: JobContext!
    /// Every engine a test makes lives until the test ends: the daemon keeps its one for
    /// life, and a run's callbacks hold their engine weakly, so a dropped engine gets no
    /// completion.
    private var engines: [JobEngine] = []

    override func setUp() {
        super.setUp()
        stderr = StderrPipe()
        log = RecordedLog()
        let sink = LogSink(target: .stderr, level: .critical, problemCapacity: 10, stderrStream: StderrStream(fd: stderr.writeEnd))
        context = JobContext(queue: SubsystemQueue(name: "test.jobs.\(UUIDLess.next())"), sink: sink, logger: log.logger,
                             sources: SourceRegistry(), daemonEnvironment: ["PATH": "/usr/bin:/bin"])
    }

    override func tearDown() {
        engines.removeAll()
        // A prepared child waits for its job in a block the whole test process shares.
        context.queue.queue.sync { context.pipeReserve.stopPreparing() }
        stderr.close()
        super.tearDown()
    }

    func makeEngine(maxJobs: Int = 4, fleetStarts: (any FleetJobStarts)? = nil) -> JobEngine {
        let engine = JobEngine(context: context, maxJobs: maxJobs, fleetStarts: fleetStarts)
        engines.append(engine)
        return engine
    }

    /// What was logged at `level`, in order.
    func messages(at level: Logger.Level) -> [String] {
        log.messages.filter { $0.level == level }.map(\.message)
    }
}

func shellGroup(_ key: JobKey, _ script: String, configure: (inout JobSettings) -> Void = { _ in }) -> JobGroup {
    var settings = JobSettings(command: .shell(script))
    configure(&settings)
    return JobGroup(key: key, settings: settings, limit: 10, retry: nil, retryExpired: false)
}

/// True once `pid` has exited: no such process, or a zombie its new parent has not reaped
/// yet (a job's leftover is reparented away from the test, and `kill(pid, 0)` still
/// succeeds on a zombie).
func hasExited(_ pid: pid_t) -> Bool {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let afterName = stat.range(of: ")", options: .backwards) else { return true }
    return stat[afterName.upperBound...].split(separator: " ").first == "Z"
}

/// The first line of a file a job wrote, once it is there and complete.
func waitForLine(in path: String, timeout: Double = 10) -> String? {
    waitForValue(timeout, every: .milliseconds(5)) {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8), text.hasSuffix("\n") else { return nil }
        return text.split(separator: "\n").first.map(String.init)
    }
}

/// The live processes whose environment holds `entry` ("KEY=value"): a job given it in its
/// environment, and everything the job started, whatever process group or session it moved
/// to (the environment is inherited through fork and exec; a zombie's reads empty).
func processesCarrying(_ entry: String) -> [(pid: pid_t, command: String)] {
    let wanted = Array(entry.utf8)
    func read(_ path: String) -> [UInt8] {
        guard let handle = FileHandle(forReadingAtPath: path) else { return [] }
        defer { try? handle.close() }
        return [UInt8](handle.readDataToEndOfFile())
    }
    let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return names.compactMap { name in
        guard let pid = pid_t(name), pid != getpid(),
              read("/proc/\(name)/environ").split(separator: 0).contains(where: { $0.elementsEqual(wanted) }) else { return nil }
        return (pid, String(decoding: read("/proc/\(name)/cmdline").map { $0 == 0 ? 0x20 : $0 }, as: UTF8.self))
    }
}
