import Foundation
// A ThreadSanitizer build (make sanitize) brings its own Mutex from WatchkeeperCore.
#if WATCHKEEPER_TSAN
import struct Synchronization.Atomic
#else
import Synchronization
#endif
import XCTest

@testable import WatchkeeperCore

/// The nice value a job starts with is the one its request names, set in the child before
/// exec: never the spawning thread's (nice is per thread on Linux), and never a renice
/// from the parent after the job has already run for a while.
final class ProcessSpawnerNicenessTests: XCTestCase {
    override class func setUp() {
        super.setUp()
        // What the daemon does first thing in main: XCTest runs this on the main thread.
        ProcessSpawner.captureBaseNiceness()
    }

    private func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    /// Field 19 of a /proc stat line. The command name (field 2) may hold spaces and
    /// parentheses, so the fields are counted from the last ')'.
    private func niceField(ofStatLine line: String) throws -> Int32 {
        let afterName = try XCTUnwrap(line.range(of: ")", options: .backwards), line).upperBound
        let fields = line[afterName...].split(separator: " ")
        return try XCTUnwrap(Int32(fields[16]), line)  // fields[0] is field 3, the state
    }

    /// The nice value the spawned process itself sees: cat is the exec'd child, so
    /// /proc/self/stat is its own, read after setup and exec.
    private func niceOfChild(_ request: (Int32) -> SpawnRequest) throws -> Int32 {
        try niceField(ofStatLine: outputOfChild(request))
    }

    /// What the spawned process writes to stdout, up to its exit.
    private func outputOfChild(_ request: (Int32) -> SpawnRequest) throws -> String {
        let output = try OwnedPipe().releaseEnds()
        defer { close(output.readEnd) }
        // The child has its copy of the write end once spawned; ours closes either way.
        func spawnThenCloseWriteEnd() throws -> SpawnedProcess {
            defer { close(output.writeEnd) }
            return try ProcessSpawner.spawn(request(output.writeEnd))
        }
        let spawned = try spawnThenCloseWriteEnd()
        var stat: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(output.readEnd, &buffer, buffer.count)
            if count < 0 && errno == EINTR { continue }
            XCTAssertGreaterThanOrEqual(count, 0, String(cString: strerror(errno)))
            if count <= 0 { break }
            stat += buffer[0..<count]
        }
        // EOF on stdout comes before the exit; block on the pidfd, without a time limit.
        var entry = pollfd(fd: spawned.pidfd.rawValue, events: Int16(POLLIN), revents: 0)
        while poll(&entry, 1, -1) < 0 && errno == EINTR {}
        XCTAssertEqual(reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue), .exited(0))
        return String(decoding: stat, as: UTF8.self)
    }

    private func catOwnStat(
        niceness: Int32?, forceFork: Bool, credentials: Credentials? = nil, file: String = "/proc/self/stat"
    ) -> (Int32) -> SpawnRequest {
        { output in
            var request = SpawnRequest(
                arguments: [self.bytes("/bin/cat"), self.bytes(file)], environment: [],
                credentials: credentials, standardOutput: output, standardError: output
            )
            if let niceness { request.niceness = niceness }
            request.forceFork = forceFork
            return request
        }
    }

    func testRequestedNiceness_isTheChildsOwn_forCloneAndFork() throws {
        for forceFork in [false, true] {
            for niceness: Int32 in [0, 7, 19] {
                XCTAssertEqual(try niceOfChild(catOwnStat(niceness: niceness, forceFork: forceFork)), niceness,
                               "forceFork \(forceFork)")
            }
        }
    }

    /// The order matters: as nobody, without CAP_SYS_NICE, the job could not lower its own
    /// nice value below the daemon's; set before setuid, as root, it can.
    func testNegativeNiceness_isApplied_beforeTheCredentialsChange() throws {
        let nobody = Credentials(uid: 65534, gid: 65534, groups: [])
        XCTAssertEqual(try niceOfChild(catOwnStat(niceness: -5, forceFork: false, credentials: nobody)), -5)
    }

    /// The unit gives the daemon LimitNICE=-4 (RLIMIT_NICE 24) in place of CAP_SYS_NICE;
    /// a job, of any user, must not inherit the right to raise its priority with it.
    func testJobsStartWithRLIMIT_NICEAtZero_whateverTheDaemonHas() throws {
        var saved = rlimit()
        XCTAssertEqual(getrlimit(__rlimit_resource_t(__RLIMIT_NICE.rawValue), &saved), 0)
        var daemonLike = rlimit(rlim_cur: 24, rlim_max: 24)
        guard setrlimit(__rlimit_resource_t(__RLIMIT_NICE.rawValue), &daemonLike) == 0 else {
            throw XCTSkip("raising RLIMIT_NICE needs root: \(String(cString: strerror(errno)))")
        }
        defer { _ = setrlimit(__rlimit_resource_t(__RLIMIT_NICE.rawValue), &saved) }
        for forceFork in [false, true] {
            let limits = try outputOfChild(catOwnStat(niceness: nil, forceFork: forceFork, file: "/proc/self/limits"))
            let line = try XCTUnwrap(limits.split(separator: "\n").first { $0.hasPrefix("Max nice priority") }, limits)
            XCTAssertEqual(line.split(separator: " ", omittingEmptySubsequences: true).suffix(2), ["0", "0"], "forceFork \(forceFork): \(line)")
        }
    }

    func testLowPriority_isTenAboveTheBase_andOthersRunAtTheBase() throws {
        let base = ProcessSpawner.baseNiceness
        XCTAssertEqual(ProcessSpawner.niceness(for: .low), min(base + 10, 19))
        XCTAssertEqual(ProcessSpawner.niceness(for: .default), base)
        XCTAssertEqual(ProcessSpawner.niceness(for: .high), base)
        let low = ProcessSpawner.niceness(for: .low)
        XCTAssertEqual(try niceOfChild(catOwnStat(niceness: low, forceFork: false)), low)
    }

    func testBaseNiceness_isTheMainThreadsAtCapture() throws {
        let mainThreadStat = try String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8)
        XCTAssertTrue(Thread.isMainThread)
        XCTAssertEqual(ProcessSpawner.baseNiceness, try niceField(ofStatLine: mainThreadStat))
    }

    /// A worker thread that was reniced (libdispatch, or anything else running on it) must
    /// not pass its nice value on: the child asks for 0 and gets 0, or, asking nothing,
    /// gets the daemon's base.
    func testSpawnFromAThreadAtNice5_givesTheRequestedNiceness_notTheThreads() throws {
        let results = Mutex<[String]>([])
        let done = DispatchSemaphore(value: 0)
        nonisolated(unsafe) let test = self  // used only on the one thread, while this one waits
        let thread = Thread {
            defer { done.signal() }
            func record(_ line: String) { results.withLock { $0.append(line) } }
            do {
                // gettid is not imported (a GNU extension); /proc/thread-self is "<pid>/task/<tid>".
                let threadSelf = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")
                let tid = try XCTUnwrap(threadSelf.split(separator: "/").last.flatMap { id_t($0) }, threadSelf)
                guard setpriority(__priority_which_t(PRIO_PROCESS.rawValue), tid, 5) == 0 else {
                    record("setpriority on the thread: \(String(cString: strerror(errno)))")
                    return
                }
                // The premise: this thread is at 5, whatever the rest of the process is at.
                let own = try String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8)
                record("thread \(try test.niceField(ofStatLine: own))")
                for forceFork in [false, true] {
                    record("asked 0, fork \(forceFork): \(try test.niceOfChild(test.catOwnStat(niceness: 0, forceFork: forceFork)))")
                    record("asked nothing, fork \(forceFork): \(try test.niceOfChild(test.catOwnStat(niceness: nil, forceFork: forceFork)))")
                }
            } catch {
                record("failed: \(error)")
            }
        }
        thread.start()
        done.wait()
        let base = ProcessSpawner.baseNiceness
        XCTAssertNotEqual(base, 5, "the test needs a base other than the thread's")
        XCTAssertEqual(results.withLock { $0 }, [
            "thread 5",
            "asked 0, fork false: 0", "asked nothing, fork false: \(base)",
            "asked 0, fork true: 0", "asked nothing, fork true: \(base)",
        ])
    }
}
