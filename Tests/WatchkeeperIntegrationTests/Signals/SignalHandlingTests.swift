import Foundation
import WatchkeeperTestSupport
import XCTest

#if canImport(Glibc)
import Glibc
#endif

/// Signals sent the instant READY=1 arrives must be handled, never kill the daemon
/// with a default disposition: the sources are registered before READY is sent.
final class SignalHandlingTests: XCTestCase {
    static let rounds = 10

    private func startReady(_ sandbox: DaemonSandbox, _ notify: NotifySocket) throws -> DaemonProcess {
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        return try sandbox.startReady(notifySocket: notify)
    }

    func testSIGUSR1SentRightAfterReady_writesADumpAndTheDaemonKeepsRunning() throws {
        for round in 0..<Self.rounds {
            let sandbox = try DaemonSandbox()
            let notify = try NotifySocket()
            let daemon = try startReady(sandbox, notify)
            daemon.send(SIGUSR1)
            let state = sandbox.waitForState(sequence: 1, timeout: 5)
            XCTAssertNotNil(state, "round \(round): no state.json after SIGUSR1; stderr:\n\(daemon.stderr)")
            XCTAssertEqual(state?["reason"] as? String, "SIGUSR1")
            XCTAssertTrue(daemon.isRunning, "round \(round): SIGUSR1 killed the daemon")
            daemon.stop(within: 5)
        }
    }

    func testSIGHUPSentRightAfterReady_reloadsAndTheDaemonKeepsRunning() throws {
        for round in 0..<Self.rounds {
            let sandbox = try DaemonSandbox()
            let notify = try NotifySocket()
            let daemon = try startReady(sandbox, notify)
            daemon.send(SIGHUP)
            XCTAssertNotNil(notify.waitFor("RELOADING", "1"), "round \(round): no RELOADING=1; stderr:\n\(daemon.stderr)")
            XCTAssertNotNil(notify.waitFor("READY", "1"), "round \(round): no READY=1 after the reload")
            XCTAssertTrue(daemon.isRunning, "round \(round): SIGHUP killed the daemon")
            daemon.stop(within: 5)
        }
    }

    func testSIGTERMSentRightAfterReady_drainsAndExitsZero() throws {
        for round in 0..<Self.rounds {
            let sandbox = try DaemonSandbox()
            let notify = try NotifySocket()
            let daemon = try startReady(sandbox, notify)
            daemon.send(SIGTERM)
            XCTAssertEqual(daemon.waitForExit(timeout: 5), 0, "round \(round): stderr:\n\(daemon.stderr)")
            XCTAssertNotNil(notify.waitFor("STOPPING", "1", timeout: 1), "round \(round): no STOPPING=1")
        }
    }

    func testSIGINTSentRightAfterReady_drainsAndExitsZero() throws {
        for round in 0..<Self.rounds {
            let sandbox = try DaemonSandbox()
            let notify = try NotifySocket()
            let daemon = try startReady(sandbox, notify)
            daemon.send(SIGINT)
            XCTAssertEqual(daemon.waitForExit(timeout: 5), 0, "round \(round): stderr:\n\(daemon.stderr)")
            XCTAssertTrue(daemon.stderr.contains("received SIGINT"))
        }
    }

    /// Before READY the signals are blocked, not lost: a SIGUSR1 that arrives while
    /// the sources are still being created is delivered once they exist.
    func testSIGUSR1SentBeforeReady_isDeliveredOnceSourcesExist() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify)
        // As early as we can: the process may not even have reached main yet, in
        // which case the default disposition still applies. Wait for the first
        // sign of life on stderr (printed after the mask is set), then signal.
        XCTAssertTrue(daemon.waitForStderr(containing: "starting watchkeeper", timeout: 10))
        daemon.send(SIGUSR1)
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10))
        XCTAssertNotNil(sandbox.waitForState(sequence: 1, timeout: 5), "the early SIGUSR1 was lost; stderr:\n\(daemon.stderr)")
        daemon.stop(within: 5)
    }

    func testRepeatedSIGUSR1_dumpsArePeeksThatResetNothing() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        let daemon = try startReady(sandbox, notify)
        daemon.send(SIGUSR1)
        XCTAssertNotNil(sandbox.waitForState(sequence: 1, timeout: 5))
        daemon.send(SIGUSR1)
        let second = try XCTUnwrap(sandbox.waitForState(sequence: 2, timeout: 5))
        let sources = try XCTUnwrap(second["sources"] as? [[String: Any]])
        let usr1 = try XCTUnwrap(sources.first { $0["target"] as? String == "SIGUSR1" })
        XCTAssertEqual(usr1["events"] as? Int, 2, "the first dump must not have reset the counter")
        daemon.stop(within: 5)
    }

    /// Parsing runs on a queue of its own: a reload stuck there (blocked by the test hook,
    /// as a hostile file would) delays neither a dump nor the stop.
    func testAReloadStuckInParsing_delaysNeitherTheDumpNorTheStop() throws {
        let sandbox = try DaemonSandbox()
        let notify = try NotifySocket()
        try sandbox.writeConfig(DaemonSandbox.basicConfig)
        let daemon = try sandbox.start(notifySocket: notify, extra: ["WATCHKEEPER_TEST_STALL": "config:60s"])
        XCTAssertNotNil(notify.waitFor("READY", "1", timeout: 10), daemon.stderr)
        XCTAssertTrue(daemon.waitForStderr(containing: "will be blocked for", timeout: 5), daemon.stderr)
        daemon.send(SIGHUP)
        XCTAssertNotNil(notify.waitFor("RELOADING", "1", timeout: 5), daemon.stderr)
        daemon.send(SIGUSR1)
        XCTAssertNotNil(sandbox.waitForState(sequence: 1, timeout: 5), "the dump waited for the stuck reload:\n\(daemon.stderr)")
        daemon.send(SIGTERM)
        XCTAssertEqual(daemon.waitForExit(timeout: 10), 0, "the stop waited for the stuck reload:\n\(daemon.stderr)")
    }
}
