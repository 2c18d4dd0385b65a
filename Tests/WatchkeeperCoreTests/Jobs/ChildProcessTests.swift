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
            return ChildProcess(name: name, kind: .task, runID: "r1", spawned: spawned, output: output, streams: ("stdout", "stderr"),
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
}
