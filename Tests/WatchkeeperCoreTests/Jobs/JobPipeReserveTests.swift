import Dispatch
import Foundation
import XCTest
import CWatchkeeperSpawn
import CWatchkeeperSystem

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The next job's pipes are made after a spawn, off the way from an event to an exec, and
/// are as good as pipes made for the job itself.
final class JobPipeReserveTests: JobTestCase {
    private func spawnTrue() throws {
        let context = self.context!
        try context.queue.queue.sync {
            let output = try JobOutputPlan(route: .daemon, name: "t", sink: context.sink, pipes: context.pipeReserve) { XCTFail($0) }
            var cgroup: JobCgroup?
            let spawned = try context.spawn(SpawnRequest(arguments: [Array("/bin/true".utf8)], environment: [],
                                                         standardOutput: output.stdout, standardError: output.stderr),
                                            runID: "r1", limits: JobLimits(), cgroup: &cgroup, forJob: true)
            var exited = pollfd(fd: spawned.pidfd.rawValue, events: Int16(POLLIN), revents: 0)
            XCTAssertEqual(poll(&exited, 1, 10_000), 1)
            _ = reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue)
        }
    }

    private var reserveIsFull: Bool { context.queue.queue.sync { context.pipeReserve.isFull } }

    func testAfterASpawn_theNextJobsPipesAreMadeAhead() throws {
        XCTAssertFalse(reserveIsFull)
        try spawnTrue()
        XCTAssertTrue(waitFor(10) { self.reserveIsFull })
    }

    func testPipesTakenFromTheReserve_areLikeFreshOnes_andTheProgressPipeIsEnlarged() throws {
        try spawnTrue()
        XCTAssertTrue(waitFor(10) { self.reserveIsFull })
        let reserve = context.pipeReserve
        try context.queue.queue.sync {
            let output = try reserve.takeOutput()
            let errors = try reserve.takeErrorOutput()
            let progress = try reserve.takeProgress()
            XCTAssertFalse(reserve.isFull)
            for (name, readEnd, writeEnd) in [("stdout", output.readEnd.rawValue, output.writeEnd.rawValue),
                                              ("stderr", errors.readEnd.rawValue, errors.writeEnd.rawValue),
                                              ("progress", progress.readEnd.rawValue, progress.writeEnd.rawValue)] {
                // The daemon's read end non-blocking, the child's write end blocking, neither
                // reaching a child except through the shim's dup2.
                XCTAssertNotEqual(fcntl(readEnd, F_GETFL) & O_NONBLOCK, 0, name)
                XCTAssertEqual(fcntl(writeEnd, F_GETFL) & O_NONBLOCK, 0, name)
                XCTAssertNotEqual(fcntl(readEnd, F_GETFD) & FD_CLOEXEC, 0, name)
                XCTAssertNotEqual(fcntl(writeEnd, F_GETFD) & FD_CLOEXEC, 0, name)
                // Nothing written into a reserved pipe before its job has it.
                var waiting: Int32 = 0
                XCTAssertEqual(ioctl(readEnd, UInt(FIONREAD), &waiting), 0)
                XCTAssertEqual(waiting, 0, name)
            }
            XCTAssertEqual(Int(fcntl(progress.writeEnd.rawValue, Int32(WK_F_GETPIPE_SZ))), min(JobPipeReserve.progressCapacity, OwnedPipe.largestCapacity))
        }
    }

    // MARK: The prepared child

    private struct Ran {
        let pid: pid_t
        let output: String
    }

    /// `/bin/sh -c script` as a job starts: the reserve's whole set as fds 1 to 3.
    @discardableResult
    private func runWithTheSet(_ script: String, workingDirectory: String? = nil, niceness: Int32 = ProcessSpawner.baseNiceness,
                               in other: JobContext? = nil) throws -> Ran {
        let context = other ?? self.context!
        return try context.queue.queue.sync {
            let reserve = context.pipeReserve
            let output = try reserve.takeOutput()
            let errors = try reserve.takeErrorOutput()
            let progress = try reserve.takeProgress()
            var request = SpawnRequest(arguments: ["/bin/sh", "-c", script].map { Array($0.utf8) }, environment: [Array("PATH=/usr/bin:/bin".utf8)],
                                       workingDirectory: workingDirectory, standardOutput: output.writeEnd.rawValue,
                                       standardError: errors.writeEnd.rawValue, progressDescriptor: progress.writeEnd.rawValue, niceness: niceness)
            request.yieldAfterExec = true
            var cgroup: JobCgroup?
            let spawned = try context.spawn(request, runID: "r2", limits: JobLimits(), cgroup: &cgroup, forJob: true)
            var exited = pollfd(fd: spawned.pidfd.rawValue, events: Int16(POLLIN), revents: 0)
            XCTAssertEqual(poll(&exited, 1, 10_000), 1)
            _ = reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue)
            var buffer = [UInt8](repeating: 0, count: 65536)
            let count = read(output.readEnd.rawValue, &buffer, buffer.count)
            return Ran(pid: spawned.pid, output: String(decoding: buffer.prefix(max(count, 0)), as: UTF8.self))
        }
    }

    /// A job of the kind a prepared child serves (before one, nothing is prepared), its set
    /// made again, then what ChildProcess does at every exit.
    private func runAJobAndPrepareSoon(in other: JobContext? = nil) {
        let context = other ?? self.context!
        XCTAssertNoThrow(try runWithTheSet("true", in: other))
        XCTAssertTrue(waitFor(10) { context.queue.queue.sync { context.pipeReserve.isFull } })
        context.queue.queue.sync { context.pipeReserve.prepareSoon() }
    }

    /// A prepared child after a job, once the queued block has made it.
    private func prepare() throws -> pid_t? {
        try XCTSkipUnless(wk_prepare_supported() != 0, "no prepared children in this build or on this architecture")
        runAJobAndPrepareSoon()
        var pid: pid_t?
        _ = waitFor(10) {
            pid = self.context.queue.queue.sync { self.context.pipeReserve.preparedPID }
            return pid != nil
        }
        return pid
    }

    /// WATCHKEEPER_NO_PREPARED_CHILD: for valgrind, which ends a program at the prepared
    /// child's clone (Tests/bench/symbol_order.py runs the daemon under it).
    func testWithPreparedChildrenSwitchedOff_noChildWaitsAfterAJob() throws {
        try XCTSkipUnless(wk_prepare_supported() != 0, "no prepared children in this build or on this architecture")
        let off = JobContext(queue: SubsystemQueue(name: "test.jobs.off"), sink: context.sink, logger: log.logger, sources: SourceRegistry(),
                             daemonEnvironment: ["PATH": "/usr/bin:/bin", JobPipeReserve.switchedOffBy: "1"])
        // Should one be made after all, it does not outlive the test (tearDown stops only `context`'s).
        defer { off.queue.queue.sync { off.pipeReserve.stopPreparing() } }
        runAJobAndPrepareSoon(in: off)
        // prepareSoon's block runs before this sync's (one serial queue), and prepares there.
        XCTAssertNil(off.queue.queue.sync { off.pipeReserve.preparedPID })
    }

    private func isGone(_ pid: pid_t) -> Bool {
        kill(pid, 0) == -1 && errno == ESRCH
    }

    func testAfterAJobExits_theNextJobRunsInAPreparedChild_withWhatEveryJobGets() throws {
        let prepared = try XCTUnwrap(try prepare())
        let before = wk_spawn_prepared_total()
        let ran = try runWithTheSet("""
            echo pid $$; echo sid $(cut -d' ' -f6 /proc/$$/stat); echo nice $(cut -d' ' -f19 /proc/$$/stat); echo cwd $(pwd)
            echo stdin $(readlink /proc/$$/fd/0); ls /proc/$$/fd
            grep -E '^Sig(Blk|Ign)' /proc/$$/status
            """, workingDirectory: "/tmp", niceness: 7)
        XCTAssertEqual(ran.pid, prepared)
        XCTAssertEqual(wk_spawn_prepared_total(), before + 1)
        let lines = ran.output.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines, ["pid \(prepared)", "sid \(prepared)", "nice 7", "cwd /tmp", "stdin /dev/null", "0", "1", "2", "3",
                               "SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"])
    }

    func testAPreparedChildKilledWhileItWaits_isReaped_andTheJobRunsInAChildOfItsOwn() throws {
        let prepared = try XCTUnwrap(try prepare())
        XCTAssertEqual(kill(prepared, SIGKILL), 0)
        // Gone before the event (killed during the wake it starts as the job, and the job
        // ends killed by the signal, as a vfork child killed before its exec does).
        XCTAssertTrue(waitFor(10) { hasExited(prepared) })
        let ran = try runWithTheSet("echo ran")
        XCTAssertNotEqual(ran.pid, prepared)
        XCTAssertEqual(ran.output, "ran\n")
        XCTAssertTrue(isGone(prepared))
    }

    func testAJobThatCannotStartInAPreparedChild_failsAsAnyJobWould() throws {
        let prepared = try XCTUnwrap(try prepare())
        XCTAssertThrowsError(try runWithTheSet("true", workingDirectory: "/nonexistent/dir")) { error in
            XCTAssertEqual("\(error)", "unable to run \"/bin/sh\": chdir /nonexistent/dir: No such file or directory")
        }
        XCTAssertTrue(isGone(prepared))
    }

    func testASpawnThatTakesPartOfTheSet_endsThePreparedChild_soThosePipesHaveNoOtherWriter() throws {
        let prepared = try XCTUnwrap(try prepare())
        let context = self.context!
        try context.queue.queue.sync {
            let output = try context.pipeReserve.takeOutput()
            let errors = try OwnedPipe.forJobOutput()
            var cgroup: JobCgroup?
            let spawned = try context.spawn(SpawnRequest(arguments: [Array("/bin/true".utf8)], environment: [], standardOutput: output.writeEnd.rawValue,
                                                         standardError: errors.writeEnd.rawValue),
                                            runID: "r3", limits: JobLimits(), cgroup: &cgroup, forJob: true)
            XCTAssertNotEqual(spawned.pid, prepared)
            XCTAssertTrue(isGone(prepared))
            XCTAssertNil(context.pipeReserve.preparedPID)
            var exited = pollfd(fd: spawned.pidfd.rawValue, events: Int16(POLLIN), revents: 0)
            XCTAssertEqual(poll(&exited, 1, 10_000), 1)
            _ = reap(pid: spawned.pid, pidfd: spawned.pidfd.rawValue)
            // Once our write end is gone too, the read end sees EOF: no copy was left.
            var pipe = output
            let readEnd = pipe.readEnd
            let writeEnd = pipe.writeEnd
            _ = consume writeEnd
            var buffer = [UInt8](repeating: 0, count: 16)
            XCTAssertEqual(read(readEnd.rawValue, &buffer, buffer.count), 0)
        }
    }

    func testWhenTheEngineStops_thePreparedChildEnds_andNoneIsMadeAgain() throws {
        let prepared = try XCTUnwrap(try prepare())
        context.queue.queue.sync { context.pipeReserve.stopPreparing() }
        XCTAssertTrue(isGone(prepared))
        context.queue.queue.sync { context.pipeReserve.prepareSoon() }
        context.queue.queue.sync {}
        XCTAssertNil(context.queue.queue.sync { context.pipeReserve.preparedPID })
    }
}
