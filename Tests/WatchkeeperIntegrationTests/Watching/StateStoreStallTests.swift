import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The state file's writer stuck (a disk that does not answer, stood in for by blocking the
/// state queue with WATCHKEEPER_TEST_STALL): watching and jobs go on, and the records that
/// waited land once it answers again.
final class StateStoreStallTests: WatchTestCase {
    func testAStuckStateQueue_holdsUpNoJob_andTheRecordsThatWaitedLandAfter_soARestartRunsNothingAgain() throws {
        // The state queue blocked from READY on, as a write stuck in a hung disk would.
        try start("""
            [[watch]]
            name = "inbox"
            path = "@DIR@/in"
            shell = true
            command = 'printf "%s\\\\0" "$WATCHKEEPER_PATH" >> @DIR@/handled'
            """, daemonExtra: "max_jobs = 8", environment: ["WATCHKEEPER_TEST_STALL": "state:8s:0s"])
        for index in 0..<30 { write("file-\(index)") }
        // Well within the 8 s the state queue is blocked, leaving time for the dump below to
        // wait its 2 s for the store.
        XCTAssertTrue(waitFor(3) { Set(records(sandbox.root + "/handled")).count == 30 },
                      "handled \(Set(records(sandbox.root + "/handled")).count) of 30 while the state queue was stuck\n\(daemon.stderrTail)")
        // Dumps taken meanwhile: the store is reported stuck, the watcher answers, and once
        // the last jobs' completions have reached it (a job's write to `handled` comes a
        // moment before its exit is reaped), it remembers all 30.
        var sequence = 0
        var during: [String: Any] = [:]
        XCTAssertTrue(waitFor(5) {
            sequence += 1
            daemon.send(SIGUSR1)
            during = sandbox.waitForState(sequence: sequence, timeout: 3) ?? [:]
            let rule = ((during["watches"] as? [String: Any])?["rules"] as? [[String: Any]])?.first
            return rule?["files_remembered"] as? Int == 30
        }, "until the store confirms them, the watcher remembers them: \(during["watches"] ?? "no dump")")
        XCTAssertEqual((during["state"] as? [String: Any])?["stuck"] as? Bool, true, "\(during["state"] ?? "no state section")")
        // Once the queue answers, the records are written and confirmed.
        XCTAssertTrue(waitFor(15) {
            sequence += 1
            daemon.send(SIGUSR1)
            let state = sandbox.waitForState(sequence: sequence, timeout: 5)
            let rule = ((state?["watches"] as? [String: Any])?["rules"] as? [[String: Any]])?.first
            return (state?["state"] as? [String: Any])?["writes_waiting"] as? Int == 0 && rule?["files_remembered"] as? Int == 0
        }, daemon.stderrTail)
        daemon.stop(within: 10)
        try? FileManager.default.removeItem(atPath: sandbox.statePath)
        let notify = try NotifySocket()
        daemon = try sandbox.startReady(notifySocket: notify)
        // Catch-up lists the tree and gives what it finds a 1 s window.
        letTimePass(2.5)
        XCTAssertEqual(records(sandbox.root + "/handled").count, 30, "a file ran again after the restart\n\(daemon.stderrTail)")
    }
}
