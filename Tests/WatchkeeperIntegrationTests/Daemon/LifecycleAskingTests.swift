import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// The lifecycle queue asks the other owners' queues and goes on when they answer; it never
/// waits for them in `.sync` (docs/architecture.md, "Construction, not wiring").
final class LifecycleAskingTests: XCTestCase {
    /// A reload waits for a stuck watching queue without holding the lifecycle queue: the
    /// dump's daemon section still answers and says which step waits on which queue. A
    /// SIGTERM meanwhile waits for the reload to be applied: READY=1 comes before STOPPING=1.
    func testReloadWhileTheWatchingQueueIsStuck_theLifecycleStillAnswers_andTheStopWaitsForTheReload() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify, extra: ["WATCHKEEPER_TEST_STALL": "watching:6s:100ms"])
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "test hook: queue watchkeeper.watching will be blocked", timeout: 5), daemon.stderr)
        usleep(300_000)  // the stall began 100 ms after READY=1
        daemon.send(SIGHUP)
        XCTAssertNotNil(notify.waitFor("RELOADING", "1", timeout: 5))

        // Dumps until one shows the reload waiting for the watching queue (the tasks' step
        // on the jobs queue comes first).
        var sequence = 0
        var waiting: [[String: Any]] = []
        var state: [String: Any] = [:]
        let deadline = Date().addingTimeInterval(4)
        while Date() < deadline {
            sequence += 1
            daemon.send(SIGUSR1)
            state = try XCTUnwrap(sandbox.waitForState(sequence: sequence, timeout: 5), daemon.stderr)
            let section = try XCTUnwrap(state["daemon"] as? [String: Any])
            XCTAssertNil(section["stuck"], "the lifecycle queue did not answer while the watching queue was stuck: \(section)")
            waiting = section["waiting_for"] as? [[String: Any]] ?? []
            if waiting.contains(where: { $0["queue"] as? String == "watching" }) { break }
        }
        XCTAssertEqual(waiting.map { $0["step"] as? String }, ["apply the watch rules"], "\(state["daemon"] ?? "")")
        XCTAssertEqual(state["stuck_components"] as? [String], ["watches"])

        daemon.send(SIGTERM)
        var seen: [String] = []
        let stopping = notify.waitFor(timeout: 20) { message in
            if message["READY"] == "1" { seen.append("READY") }
            if message["STOPPING"] == "1" { seen.append("STOPPING") }
            return message["STOPPING"] == "1"
        }
        XCTAssertNotNil(stopping, daemon.stderr)
        XCTAssertEqual(seen, ["READY", "STOPPING"], "the stop overtook the reload")
        XCTAssertEqual(daemon.waitForExit(timeout: 20), 0, daemon.stderr)
        XCTAssertTrue(daemon.stderr.contains("reloaded"), daemon.stderr)
    }
}
