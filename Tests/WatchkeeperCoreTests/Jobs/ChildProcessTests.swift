import CWatchkeeperSystem
import Dispatch
import Foundation
import XCTest

@testable import WatchkeeperCore
import WatchkeeperTestSupport

#if canImport(Glibc)
import Glibc
#endif

/// One spawned process as the jobs queue owns it, without a JobRun around it: its exit,
/// its output lines, and a budget of its own (what the on_expire handler gets).
final class ChildProcessTests: JobTestCase {
    /// Spawns `script` under /bin/sh with output through the daemon, on the jobs queue.
    private func spawn(_ name: String, _ script: String, killAfter: Duration? = nil, onKill: ((Duration) -> Void)? = nil,
                       onExit: @escaping (ProcessExit) -> Void) throws -> ChildProcess {
        let context = self.context!
        return try context.queue.queue.sync {
            let output = try JobOutputPlan(route: .daemon, name: name, sink: context.sink, pipes: context.pipeReserve) { XCTFail($0) }
            let request = SpawnRequest(arguments: [Array("/bin/sh".utf8), Array("-c".utf8), Array(script.utf8)],
                                       environment: [Array("PATH=/usr/bin:/bin".utf8)],
                                       standardOutput: output.stdout, standardError: output.stderr)
            let spawned = try ProcessSpawner.spawn(request)
            return ChildProcess(name: name, kind: .task, runID: "r1", owner: "task \(name) run r1", spawned: spawned, output: output, streams: ("stdout", "stderr"),
                                context: context, cgroup: nil, killAfter: killAfter, onKill: onKill, onExit: onExit)
        }
    }

    func testTheChildsLines_reachTheSink_underItsNameAndPid_eachOnItsStream() throws {
        let exits = Arrivals<ProcessExit>()
        let child = try spawn("talker", "echo to stdout; echo to stderr >&2; printf 'no newline'") { exits.add($0) }
        XCTAssertTrue(exits.wait(), "no exit")
        XCTAssertEqual(exits.all, [.exited(0)])
        let expected = ["talker[\(child.pid)] stdout: to stdout\n", "talker[\(child.pid)] stderr: to stderr\n",
                        "talker[\(child.pid)] stdout: no newline\n"]
        let text = stderr.read(untilContains: expected)
        for line in expected { XCTAssertTrue(text.contains(line), "missing \(line.debugDescription) in \(text.suffix(500).debugDescription)") }
        XCTAssertTrue(waitFor(5) { self.context.queue.queue.sync { child.outputStats.map(\.lines) == [2, 1] } },
                      "\(context.queue.queue.sync { child.outputStats })")
    }

    func testItsOwnBudget_endsAChildThatIgnoresSIGTERM_andItsGroup_withSIGKILL_andSaysSo() throws {
        let directory = try makeScratchDirectory()
        let exits = Arrivals<ProcessExit>()
        let kills = Arrivals<Duration>()
        // The background sleep ignores SIGTERM too: only a SIGKILL to the whole group ends it.
        _ = try spawn("handler", "trap '' TERM; sleep 30 & echo $! > \(directory)/pid; wait", killAfter: .milliseconds(200),
                      onKill: { kills.add($0) }) { exits.add($0) }
        let sleeper = try XCTUnwrap(waitForLine(in: directory + "/pid").flatMap { pid_t($0) }, "the child never started")
        XCTAssertTrue(exits.wait(), "still running long after its budget")
        XCTAssertEqual(kills.all, [.milliseconds(200)])
        XCTAssertEqual(exits.all, [.signaled(SIGKILL, coreDumped: false)])
        XCTAssertTrue(waitFor(5) { hasExited(sleeper) }, "a process of its group outlived the budget")
    }

    /// A job spawned without waiting for its exec may be signalled before its child has made
    /// its own process group (setsid) or joined its cgroup: the signal must reach it through
    /// its pid, which is its own until it is reaped. Before, kill(-pid) found no group and
    /// the signal was lost. The child here is in the test's process group, as such a child is
    /// in the daemon's until its setsid.
    func testASignalToTheJob_reachesAChildNotYetInAProcessGroupOfItsOwn() throws {
        var pid = pid_t()
        var argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sleep"), strdup("30"), nil]
        defer { argv.forEach { free($0) } }
        XCTAssertEqual(posix_spawn(&pid, "/bin/sleep", nil, nil, &argv, environ), 0)
        let pidfd = wk_pidfd_open(pid)
        XCTAssertGreaterThanOrEqual(pidfd, 0)
        XCTAssertNotEqual(getpgid(pid), pid, "the child leads a process group")
        let exits = Arrivals<ProcessExit>()
        let context = self.context!
        let child = try context.queue.queue.sync {
            let output = try JobOutputPlan(route: .daemon, name: "early", sink: context.sink, pipes: context.pipeReserve) { XCTFail($0) }
            let spawned = SpawnedProcess(pid: pid, pidfd: OwnedFileDescriptor(adopting: pidfd), spawnToExecNanoseconds: 0, pendingReport: nil)
            return ChildProcess(name: "early", kind: .task, runID: "r1", owner: "task early run r1", spawned: spawned, output: output, streams: ("stdout", "stderr"),
                                context: context, cgroup: nil) { exits.add($0) }
        }
        XCTAssertTrue(context.queue.queue.sync { child.signalGroup(SIGTERM) }, "the signal reached nothing")
        XCTAssertTrue(exits.wait(), "the child outlived the signal")
        XCTAssertEqual(exits.all, [.signaled(SIGTERM, coreDumped: false)])
        XCTAssertFalse(context.queue.queue.sync { child.signalGroup(SIGTERM) }, "a reaped child's pid is no longer its own")
    }
}
