import Dispatch
import Foundation
import XCTest
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
                                            runID: "r1", limits: JobLimits(), cgroup: &cgroup)
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
}
