import Logging
import WatchkeeperCore

/// A host's clocks in the simulation: its monotonic clock runs at `rate` of simulated time
/// from a base of its own (hosts' clocks tick at slightly different rates, which the lease's
/// margin must absorb); its wall clock is the simulation's epoch plus a small skew. Timers
/// fire on the loop at the simulated instant the host's clock reaches their deadline.
// @unchecked Sendable: the simulation runs on one thread, its loop.
final class SimClock: FleetClock, @unchecked Sendable {
    let loop: SimLoop
    let rate: Double
    let base: UInt64
    let wallBase: Int64
    let alive: () -> Bool

    init(loop: SimLoop, rate: Double, base: UInt64, wallBase: Int64, alive: @escaping () -> Bool) {
        self.loop = loop
        self.rate = rate
        self.base = base
        self.wallBase = wallBase
        self.alive = alive
    }

    var now: MonotonicInstant { MonotonicInstant(nanoseconds: base + UInt64(Double(loop.now) * rate)) }

    var wallNow: WallTime {
        let nanos = wallBase + loop.now
        return WallTime(secondsSinceEpoch: nanos / 1_000_000_000, nanoseconds: Int32(nanos % 1_000_000_000))
    }

    /// The simulated instant at which this clock reads `instant` (or just after).
    func simTime(of instant: MonotonicInstant) -> Int64 {
        guard instant.nanoseconds > base else { return 0 }
        let local = Double(instant.nanoseconds - base)
        guard local / rate < 9e18 else { return .max / 2 }
        return Int64((local / rate).rounded(.up)) + 1
    }

    func makeTimer(target: String, _ handler: @escaping () -> Void) -> any FleetTimer {
        SimTimer(clock: self, handler: handler)
    }
}

final class SimTimer: FleetTimer {
    let clock: SimClock
    let handler: () -> Void
    private var generation = 0
    private var cancelled = false

    init(clock: SimClock, handler: @escaping () -> Void) {
        self.clock = clock
        self.handler = handler
    }

    func schedule(at deadline: MonotonicInstant) {
        guard !cancelled else { return }
        generation += 1
        let mine = generation
        clock.loop.schedule(at: clock.simTime(of: deadline)) { [weak self] in
            guard let self, !self.cancelled, self.generation == mine, self.clock.alive() else { return }
            self.handler()
        }
    }

    func cancel() { cancelled = true }
}

/// One of a host's serial queues: work runs in the order given, a hop later, and never
/// after the host died.
// @unchecked Sendable: the simulation runs on one thread, its loop.
final class SimQueue: FleetQueue, @unchecked Sendable {
    let loop: SimLoop
    let alive: () -> Bool
    private var last: Int64 = 0

    init(loop: SimLoop, alive: @escaping () -> Bool) {
        self.loop = loop
        self.alive = alive
    }

    func async(_ work: @escaping @Sendable () -> Void) {
        enqueue(work)
    }

    /// Nothing queued from now runs before `at`: the queue's thread is held up there.
    func hold(until at: Int64) {
        last = max(last, at)
    }

    /// The simulation's own work on this queue (one thread runs a seed: nothing is shared).
    func enqueue(_ work: @escaping () -> Void) {
        let at = max(loop.now + Int64(loop.random.int(1_000...20_000)), last)
        last = at
        loop.schedule(at: at) { [alive] in
            if alive() { work() }
        }
    }
}

/// The daemon's log lines, with the simulated time and host, for a replayed seed.
struct SimLogHandler: LogHandler {
    let host: String
    let loop: SimLoop
    let write: @Sendable (String) -> Void
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        write("\(SimHistory.seconds(loop.now)) \(host) \(event.level): \(event.message)")
    }
}
