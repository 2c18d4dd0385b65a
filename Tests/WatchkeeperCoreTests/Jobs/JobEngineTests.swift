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

/// The engine with real child processes: every wait is for an event with a deadline.
final class JobEngineTests: XCTestCase {
    private final class Completions: @unchecked Sendable {
        private let state = Mutex<[JobCompletion]>([])
        private let arrived = DispatchSemaphore(value: 0)

        func add(_ completion: JobCompletion) {
            state.withLock { $0.append(completion) }
            arrived.signal()
        }

        /// Waits for the next `count` completions, each within `timeout`.
        func wait(_ count: Int, timeout: Double = 20) -> Bool {
            (0..<count).allSatisfy { _ in arrived.wait(timeout: .now() + timeout) == .success }
        }

        var all: [JobCompletion] { state.withLock { $0 } }
    }

    /// Every engine the test made, stopped in tearDown as the daemon stops its engine.
    private var engines: [JobEngine] = []
    /// In the environment of every job of the test, and so of everything those jobs start:
    /// tearDown looks for processes carrying it.
    private var mark = (key: "WATCHKEEPER_TEST_JOB", value: "")

    override func setUp() {
        super.setUp()
        mark.value = "JobEngineTests-\(getpid())-\(UUIDLess.next())"
    }

    /// No job outlives its test. A test that failed half-way, or drained nothing, left its
    /// jobs running: the stubborn one below ignores SIGTERM and loops, and outlived the whole
    /// `make test` when its test ended early. Each engine not drained yet is drained now
    /// (SIGTERM, SIGKILL after kill_grace: the daemon's stop), then nothing carrying the
    /// test's mark may be left; what is gets SIGKILL here, and the test fails naming it.
    override func tearDown() {
        for engine in engines {
            let stopped = DispatchSemaphore(value: 0)
            let draining = engine.queue.queue.sync { () -> Bool in
                guard engine.drain == nil else { return false }
                engine.beginDrain(grace: .zero) { _ in stopped.signal() }
                return true
            }
            if draining { XCTAssertEqual(stopped.wait(timeout: .now() + 30 * testDeadlineScale), .success, "the engine's stop did not end") }
        }
        engines.removeAll()
        let entry = mark.key + "=" + mark.value
        var left = processesCarrying(entry)
        if !left.isEmpty { _ = waitFor(5) { left = processesCarrying(entry); return left.isEmpty } }
        for process in left { kill(process.pid, SIGKILL) }
        XCTAssertTrue(left.isEmpty, "processes of the test's jobs outlived it and its engine's stop (killed now): \(left)")
        super.tearDown()
    }

    private func makeEngine(maxJobs: Int) -> JobEngine {
        let queue = SubsystemQueue(name: "test.jobs.\(UUIDLess.next())")
        let sink = LogSink(target: .stderr, level: .critical, problemCapacity: 10)
        let context = JobContext(queue: queue, sink: sink, logger: Logger(label: "test"), sources: SourceRegistry(),
                                 daemonEnvironment: ["PATH": "/usr/bin:/bin"])
        let engine = JobEngine(context: context, maxJobs: maxJobs)
        engines.append(engine)
        return engine
    }

    private func group(_ key: JobKey, _ script: String, limit: Int = 10, configure: (inout JobGroup) -> Void = { _ in }) -> JobGroup {
        var group = JobGroup(key: key, settings: JobSettings(command: .shell(script)), limit: limit, retry: nil, retryExpired: false)
        configure(&group)
        group.settings.environment[mark.key] = mark.value
        return group
    }

    func testRaisingMaxJobs_startsWaitingJobsAtOnce() {
        let engine = makeEngine(maxJobs: 1)
        let done = Completions()
        let slow = JobKey(.task, "slow")
        let quick = JobKey(.task, "quick")
        engine.queue.queue.sync {
            engine.configure(group(slow, "sleep 30"))
            engine.configure(group(quick, "exit 0"))
            engine.submit(slow, subject: .schedule(scheduledAt: nil)) { done.add($0) }
            engine.submit(quick, subject: .schedule(scheduledAt: nil)) { done.add($0) }
            XCTAssertEqual(engine.waitingCount, 1)
            engine.setMaxJobs(2)
        }
        XCTAssertTrue(done.wait(1), "the waiting job did not start when max_jobs was raised")
        XCTAssertEqual(done.all.first?.key, quick)
        XCTAssertEqual(done.all.first?.final.outcome, .ok)
        let finished = Completions()
        engine.queue.queue.sync { engine.beginDrain(grace: .zero) { _ in finished.add(JobCompletion(key: slow, subject: .schedule(scheduledAt: nil), records: [])) } }
        XCTAssertTrue(finished.wait(1))
    }

    /// The engine builds a group's environment once: a reload that changes it must reach
    /// the next job, not the block built before.
    func testReconfiguredEnvironment_reachesTheNextJob() throws {
        let engine = makeEngine(maxJobs: 1)
        let done = Completions()
        let key = JobKey(.task, "env")
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("wk-env-\(getpid())-\(UUIDLess.next())").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        for mode in ["first", "second"] {
            engine.queue.queue.sync {
                engine.configure(group(key, "echo \"$MODE\" >> \(output)") { $0.settings.environment = ["MODE": mode] })
                engine.submit(key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
            }
            XCTAssertTrue(done.wait(1))
        }
        XCTAssertEqual(done.all.map(\.final.outcome), [.ok, .ok])
        XCTAssertEqual(try String(contentsOfFile: output, encoding: .utf8), "first\nsecond\n")
    }

    /// The engine parses a group's command once (JobSpawnPlan): a reload that changes the
    /// command's placeholders or the environment must spawn the new ones for the next file.
    func testReconfiguredCommandAndEnvironment_reachTheNextFilesJob() throws {
        let engine = makeEngine(maxJobs: 1)
        let done = Completions()
        let key = JobKey(.watch, "inbox")
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("wk-command-\(getpid())-\(UUIDLess.next())").path
        defer { try? FileManager.default.removeItem(atPath: output) }
        let file = FileSubject(path: Array("/srv/in/a.txt".utf8), rootLength: 7, event: .closedWrite, identity: nil)
        for (mode, argument) in [("first", "{name}@{event}"), ("second", "{dir}:{path}")] {
            engine.queue.queue.sync {
                engine.configure(group(key, "") { group in
                    group.settings.command = .arguments(["/bin/sh", "-c", "echo \"$1 $MODE $WATCHKEEPER_NAME\" >> \(output)", mode, argument])
                    group.settings.environment["MODE"] = mode.uppercased()
                })
                engine.submit(key, subject: .file(file)) { done.add($0) }
            }
            XCTAssertTrue(done.wait(1))
        }
        XCTAssertEqual(done.all.map(\.final.outcome), [.ok, .ok])
        XCTAssertEqual(try String(contentsOfFile: output, encoding: .utf8), "a.txt@closed_write FIRST a.txt\n/srv/in:/srv/in/a.txt SECOND a.txt\n")
    }

    /// A job run as another user gets that account's HOME, USER, LOGNAME and SHELL, not the
    /// group's shared block (which has the daemon's), the settings' environment and its own
    /// variables still.
    func testAJobRunAsAnotherUser_getsThatAccountsVariables_andTheRest() throws {
        try XCTSkipUnless(geteuid() == 0, "changing a job's user needs root")
        let account = try XCTUnwrap(getpwnam("nobody"), "no user nobody")
        let home = String(cString: account.pointee.pw_dir)
        let shell = String(cString: account.pointee.pw_shell)
        let engine = makeEngine(maxJobs: 1)
        let done = Completions()
        let key = JobKey(.task, "as-nobody")
        let check = "test \"$HOME:$USER:$LOGNAME:$SHELL\" = \"\(home):nobody:nobody:\(shell)\" && test \"$MODE\" = kept && test -n \"$WATCHKEEPER_RUN_ID\""
        engine.queue.queue.sync {
            engine.configure(group(key, check) { group in
                group.settings.user = "nobody"
                group.settings.environment["MODE"] = "kept"
            })
            engine.submit(key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
        }
        XCTAssertTrue(done.wait(1))
        XCTAssertEqual(done.all.first?.final.outcome, .ok, "\(String(describing: done.all.first?.final.detail)) \(String(describing: done.all.first?.final.exit))")
    }

    func testRetry_isTheSameForWatchRules_andRetryExpiredRetriesABudgetExpiry() {
        let engine = makeEngine(maxJobs: 2)
        let done = Completions()
        let inbox = JobKey(.watch, "inbox")
        let file = FileSubject(path: Array("/srv/in/a".utf8), rootLength: 7, event: .closedWrite, identity: nil)
        engine.queue.queue.sync {
            engine.configure(group(inbox, "sleep 30") { group in
                group.settings.budget = .milliseconds(100)
                group.settings.killGrace = .milliseconds(100)
                group.retry = RetryPolicy(attempts: 2, backoff: .milliseconds(10), maxBackoff: .milliseconds(10))
                group.retryExpired = true
            })
            engine.submit(inbox, subject: .file(file)) { done.add($0) }
        }
        XCTAssertTrue(done.wait(1))
        let completion = done.all[0]
        XCTAssertEqual(completion.records.map(\.outcome), [.expired, .expired])
        XCTAssertEqual(completion.records.map(\.attempt), [1, 2])
        XCTAssertEqual(completion.records.map(\.expiry), [.budget, .budget])
        XCTAssertEqual(completion.subject.files.first?.path, file.path, "the completion says which file it was about")
    }

    func testFailedRun_withoutRetryExpired_isRetried_butAnExpiredOneIsNot() {
        let engine = makeEngine(maxJobs: 2)
        let done = Completions()
        let failing = JobKey(.task, "failing")
        let slow = JobKey(.task, "slow")
        let retry = RetryPolicy(attempts: 3, backoff: .milliseconds(10), maxBackoff: .milliseconds(20))
        engine.queue.queue.sync {
            engine.configure(group(failing, "exit 3") { $0.retry = retry })
            engine.configure(group(slow, "sleep 30") { group in
                group.retry = retry
                group.settings.budget = .milliseconds(100)
                group.settings.killGrace = .milliseconds(100)
            })
            engine.submit(failing, subject: .schedule(scheduledAt: nil)) { done.add($0) }
            engine.submit(slow, subject: .schedule(scheduledAt: nil)) { done.add($0) }
        }
        XCTAssertTrue(done.wait(2))
        let byKey = Dictionary(uniqueKeysWithValues: done.all.map { ($0.key, $0) })
        XCTAssertEqual(byKey[failing]?.records.map(\.outcome), [.failed, .failed, .failed])
        XCTAssertEqual(byKey[slow]?.records.map(\.outcome), [.expired])
    }

    func testRemovingAGroup_cancelsItsWaitingJobs_withARecordEach() {
        let engine = makeEngine(maxJobs: 1)
        let done = Completions()
        let blocker = JobKey(.task, "blocker")
        let rule = JobKey(.watch, "gone")
        engine.queue.queue.sync {
            engine.configure(group(blocker, "sleep 30"))
            engine.configure(group(rule, "exit 0"))
            engine.submit(blocker, subject: .schedule(scheduledAt: nil)) { _ in }
            for name in ["a", "b", "c"] {
                let file = FileSubject(path: Array("/srv/\(name)".utf8), rootLength: 4, event: .closedWrite, identity: nil)
                engine.submit(rule, subject: .file(file)) { done.add($0) }
            }
            engine.remove(rule, reason: "the watch rule was removed by a reload")
        }
        XCTAssertTrue(done.wait(3))
        XCTAssertEqual(done.all.map(\.final.outcome), [.cancelled, .cancelled, .cancelled])
        XCTAssertEqual(done.all.compactMap(\.final.detail), Array(repeating: "cancelled: the watch rule was removed by a reload", count: 3))
        XCTAssertEqual(done.all.map { String(decoding: $0.subject.files[0].path, as: UTF8.self) }, ["/srv/a", "/srv/b", "/srv/c"])
        let drained = Completions()
        engine.queue.queue.sync { engine.beginDrain(grace: .zero) { _ in drained.add(JobCompletion(key: blocker, subject: .schedule(scheduledAt: nil), records: [])) } }
        XCTAssertTrue(drained.wait(1))
    }

    /// The old drain gave up 10 s after shutdown_grace and left such a job running with no
    /// record; the engine waits for the job's own expiry sequence, then kills it.
    func testDrain_waitsForAKillGraceLongerThanTheGrace_andEndsTheJobWithARecord() throws {
        let engine = makeEngine(maxJobs: 2)
        let done = Completions()
        let stubborn = JobKey(.task, "stubborn")
        let directory = try makeScratchDirectory()
        engine.queue.queue.sync {
            // Deaf to SIGTERM, but not immortal: it ends once the test's process is gone (an interrupted
            // run: no tearDown stops it then, and it is in a session of its own).
            engine.configure(group(stubborn, "trap '' TERM; echo $$ > \(directory)/pid; while kill -0 $PPID 2>/dev/null; do sleep 0.05; done") { group in
                group.settings.killGrace = .milliseconds(1_500)
            })
            engine.submit(stubborn, subject: .schedule(scheduledAt: nil)) { done.add($0) }
        }
        // Until the pid is in the file, not just the file there: the shell's redirection creates
        // it before echo writes (a loaded machine caught the test reading it empty).
        func writtenPID() -> Int32? {
            (try? String(contentsOfFile: directory + "/pid", encoding: .utf8)).flatMap { Int32($0.trimmingCharacters(in: .whitespacesAndNewlines)) }
        }
        _ = waitFor(10, every: .milliseconds(10)) { writtenPID() != nil }
        let pid = try XCTUnwrap(writtenPID())
        let report = Mutex<DrainReport?>(nil)
        let drained = DispatchSemaphore(value: 0)
        engine.queue.queue.sync {
            engine.beginDrain(grace: .milliseconds(100)) { outcome in
                report.withLock { $0 = outcome }
                drained.signal()
            }
        }
        XCTAssertEqual(drained.wait(timeout: .now() + 20), .success)
        XCTAssertEqual(report.withLock { $0 }, .expired(names: ["stubborn"]))
        XCTAssertTrue(done.wait(1), "the job's record must be written before the drain reports")
        XCTAssertEqual(done.all.first?.final.outcome, .expired)
        XCTAssertEqual(done.all.first?.final.expiry, .shutdown)
        XCTAssertEqual(kill(pid, 0), -1, "the job must be dead when the drain reports")
    }

    func testAFileRenamedOrReplacedBeforeItsJobStarts_doesNotRun_andABatchRunsWithTheRest() throws {
        let engine = makeEngine(maxJobs: 1)
        let done = Completions()
        let directory = try makeScratchDirectory()
        let blocker = JobKey(.task, "blocker")
        let rule = JobKey(.watch, "inbox")
        func admitted(_ name: String) throws -> FileSubject {
            let path = directory + "/" + name
            FileManager.default.createFile(atPath: path, contents: Data(name.utf8))
            let status = try XCTUnwrap(FileStatus.of(Array(path.utf8), followSymlinks: false))
            return FileSubject(path: Array(path.utf8), rootLength: directory.utf8.count, event: .closedWrite, identity: status.identity)
        }
        let renamed = try admitted("renamed.part")
        let replaced = try admitted("replaced")
        let kept = try admitted("kept")
        engine.queue.queue.sync {
            engine.configure(group(blocker, "sleep 0.3"))
            engine.configure(group(rule, "exit 0"))
            engine.submit(blocker, subject: .schedule(scheduledAt: nil)) { _ in }
            engine.submit(rule, subject: .file(renamed)) { done.add($0) }
            engine.submit(rule, subject: .batch([replaced, kept], input: .argv)) { done.add($0) }
        }
        // While they wait: one renamed away, one replaced by another file of the same name.
        XCTAssertEqual(rename(directory + "/renamed.part", directory + "/renamed.dat"), 0)
        XCTAssertEqual(unlink(directory + "/replaced"), 0)
        FileManager.default.createFile(atPath: directory + "/replaced", contents: Data("another file".utf8))
        XCTAssertTrue(done.wait(2))
        let byPath = Dictionary(uniqueKeysWithValues: done.all.map { (String(decoding: $0.subject.files[0].path, as: UTF8.self), $0) })
        XCTAssertEqual(byPath[directory + "/renamed.part"]?.final.outcome, .cancelled)
        XCTAssertEqual(byPath[directory + "/renamed.part"]?.final.detail, "cancelled: the file was renamed, removed or replaced before its job started")
        let batch = try XCTUnwrap(byPath[directory + "/kept"], "the batch runs with the file that is still there: \(byPath.keys)")
        XCTAssertEqual(batch.final.outcome, .ok)
        XCTAssertEqual(batch.subject.files.map { String(decoding: $0.path, as: UTF8.self) }, [directory + "/kept"])
    }

    func testReshape_handsBackWaitingWork_inTheSameTurnAsTheNewSettings() {
        let engine = makeEngine(maxJobs: 1)
        let done = Completions()
        let blocker = JobKey(.task, "blocker")
        let rule = JobKey(.watch, "bulk")
        var withdrawn: [JobSubject] = []
        engine.queue.queue.sync {
            engine.configure(group(blocker, "sleep 0.2"))
            engine.configure(group(rule, "exit 0"))
            engine.submit(blocker, subject: .schedule(scheduledAt: nil)) { _ in }
            for name in ["a", "b"] {
                let file = FileSubject(path: Array("/srv/\(name)".utf8), rootLength: 4, event: .closedWrite, identity: nil)
                engine.submit(rule, subject: .file(file)) { done.add($0) }
            }
            withdrawn = engine.reshape(group(rule, "exit 0") { $0.settings.command = .arguments(["/bin/true", "{paths}"]) })
            XCTAssertEqual(engine.waitingCount, 0)
        }
        XCTAssertEqual(withdrawn.flatMap(\.files).map { String(decoding: $0.path, as: UTF8.self) }, ["/srv/a", "/srv/b"])
        XCTAssertFalse(done.wait(1, timeout: 0.5 * testDeadlineScale), "taken back work completes nowhere: the caller submits it again")
    }

    func testSubmit_afterTheDrainBegan_completesAtOnceAsCancelled() {
        let engine = makeEngine(maxJobs: 2)
        let done = Completions()
        let key = JobKey(.task, "late")
        engine.queue.queue.sync {
            engine.configure(group(key, "exit 0"))
            engine.beginDrain(grace: .zero) { _ in }
            engine.submit(key, subject: .schedule(scheduledAt: nil)) { done.add($0) }
        }
        XCTAssertTrue(done.wait(1, timeout: 1))
        XCTAssertEqual(done.all.first?.final.outcome, .cancelled)
        XCTAssertEqual(done.all.first?.final.detail, "cancelled: the daemon is stopping")
    }
}
