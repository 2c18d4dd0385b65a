import Dispatch
import Foundation
import XCTest
import CWatchkeeperSystem

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// The next job's pipes are made after a child's exit, off the way from an event to an exec
/// and out of the job's start-up, and are as good as pipes made for the job itself.
final class JobPipeReserveTests: JobTestCase {
    /// `script` under /bin/sh, its output through the daemon, as the jobs queue owns a child.
    private func spawn(_ script: String, onExit: @escaping (ProcessExit) -> Void) throws -> ChildProcess {
        let context = self.context!
        return try context.queue.queue.sync {
            let output = try JobOutputPlan(route: .daemon, name: "t", sink: context.sink, pipes: context.pipeReserve) { XCTFail($0) }
            var cgroup: JobCgroup?
            let spawned = try context.spawn(SpawnRequest(arguments: [Array("/bin/sh".utf8), Array("-c".utf8), Array(script.utf8)], environment: [],
                                                         standardOutput: output.stdout, standardError: output.stderr),
                                            runID: "r1", limits: JobLimits(), cgroup: &cgroup)
            return ChildProcess(name: "t", kind: .task, runID: "r1", owner: "task t run r1", spawned: spawned, output: output,
                                streams: ("stdout", "stderr"), context: context, cgroup: cgroup, onExit: onExit)
        }
    }

    private var reserveIsFull: Bool { context.queue.queue.sync { context.pipeReserve.isFull } }

    func testAfterAChildExits_theNextJobsPipesAreMadeAhead_butNotWhileItRuns() throws {
        XCTAssertFalse(reserveIsFull)
        let exits = Arrivals<ProcessExit>()
        let child = try spawn("exec sleep 30") { exits.add($0) }
        // A later turn of the queue than the spawn's: a refill the spawn had queued has run.
        XCTAssertFalse(reserveIsFull, "made while the job starts up")
        XCTAssertEqual(kill(child.pid, SIGTERM), 0)
        XCTAssertTrue(exits.wait(), "no exit")
        XCTAssertTrue(waitFor(10) { self.reserveIsFull }, "not made after the exit")
    }

    func testPipesTakenFromTheReserve_areLikeFreshOnes_andTheProgressPipeIsEnlarged() throws {
        let exits = Arrivals<ProcessExit>()
        _ = try spawn("true") { exits.add($0) }
        XCTAssertTrue(exits.wait(), "no exit")
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
}
