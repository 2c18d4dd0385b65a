import Dispatch
import Logging
import Synchronization
import WatchkeeperTestSupport
import XCTest
@testable import WatchkeeperCore

/// The watchdog's first tick comes one interval after its start, not at once: at once it
/// probed every queue in the middle of the daemon's start, and libdispatch started a worker
/// thread for each of them (docs/measurements/idle-memory.md). systemd arms WatchdogSec only
/// at READY=1, so nothing waits for that first ping.
final class WatchdogTests: XCTestCase {
    /// Fails when the first tick is scheduled at once: a timer due now fires before the
    /// witness, due later on the same queue, and would have probed the monitored queue.
    func testTheFirstTick_doesNotProbeTheQueuesAtStart() {
        let registry = SourceRegistry()
        let probed = SubsystemQueue(name: "test.watchdog.probed.\(UUIDLess.next())")
        var watchdog: Watchdog? = makeWatchdog(probing: probed, registry: registry, systemdInterval: .seconds(120))
        let queue = watchdog!.queue
        watchdog?.start()
        let witnessed = Mutex(false)
        let witness = registry.makeTimer(owner: "test", target: "witness", on: queue) { witnessed.withLock { $0 = true } }
        witness.schedule(after: .milliseconds(300))

        XCTAssertTrue(waitFor(10, every: .milliseconds(5)) { witnessed.withLock { $0 } }, "the witness timer never fired")
        XCTAssertEqual(queue.queue.sync { watchdog?.ticks }, 0, "the watchdog ticked at its start")
        XCTAssertEqual(probed.probeState.probesAnswered, 0)
        XCTAssertNil(probed.probeState.outstandingSince, "a probe went out at the watchdog's start")
        witness.cancel()
        // Let go on its queue: its timer is cancelled between ticks, never under one.
        queue.queue.sync { watchdog = nil }
    }

    func testTheFirstTick_comesOneIntervalAfterStart_probesTheQueues_andPings() {
        let registry = SourceRegistry()
        let probed = SubsystemQueue(name: "test.watchdog.probed.\(UUIDLess.next())")
        // WatchdogSec=400ms: a tick every 200 ms.
        var watchdog: Watchdog? = makeWatchdog(probing: probed, registry: registry, systemdInterval: .milliseconds(400))
        let queue = watchdog!.queue
        let tickInterval = watchdog!.tickInterval
        let started = MonotonicInstant.now
        watchdog?.start()

        XCTAssertTrue(waitFor(10, every: .milliseconds(5)) { probed.probeState.probesAnswered >= 1 }, "no probe was answered in 10 s")
        let answered = probed.probeState.lastAnsweredAt ?? started
        XCTAssertGreaterThanOrEqual(answered - started, tickInterval, "the first probe went out before one tick interval had passed")
        let (ticks, pings) = queue.queue.sync { (watchdog?.ticks ?? 0, watchdog?.pingsSent ?? 0) }
        XCTAssertGreaterThanOrEqual(ticks, 1)
        XCTAssertGreaterThanOrEqual(pings, 1, "the first tick sent no ping")
        queue.queue.sync { watchdog = nil }
    }

    private func makeWatchdog(probing probed: SubsystemQueue, registry: SourceRegistry, systemdInterval: Duration) -> Watchdog {
        Watchdog(queue: SubsystemQueue(name: "test.watchdog.\(UUIDLess.next())"), monitored: [probed],
                 notifier: SystemdNotifier(environment: [:]), logger: Logger(label: "test"),
                 registry: registry, systemdInterval: systemdInterval)
    }
}
