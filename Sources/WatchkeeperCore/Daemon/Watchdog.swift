import Dispatch
import Logging

/// The watchdog that means something: systemd's ping is sent only when every
/// subsystem queue answered the probe sent on the previous tick. A queue that is
/// stuck (a handler blocked in a syscall, a deadlock) therefore withholds the ping
/// and systemd restarts us, instead of a timer on a healthy thread pinging forever.
// @unchecked Sendable: its counters and timer are confined to the watchdog queue (`tick` asserts it).
public final class Watchdog: DumpContributor, @unchecked Sendable {
    public let queue: SubsystemQueue
    private let monitored: [SubsystemQueue]
    private let notifier: SystemdNotifier
    private let logger: Logger
    private let registry: SourceRegistry
    /// systemd's WatchdogSec, when it expects pings of us.
    public let systemdInterval: Duration?
    public let tickInterval: Duration
    // Confined to `queue`.
    private var timer: RegisteredTimer?
    private(set) var pingsSent: UInt64 = 0
    private(set) var pingsWithheld: UInt64 = 0
    private(set) var ticks: UInt64 = 0
    private var reportedStuck: [String: MonotonicInstant] = [:]

    /// Without systemd's watchdog the probes still run, less often, so the dump can
    /// show each queue's latency.
    public static let probeIntervalWithoutSystemd: Duration = .seconds(5)

    public init(queue: SubsystemQueue, monitored: [SubsystemQueue], notifier: SystemdNotifier, logger: Logger,
                registry: SourceRegistry, systemdInterval: Duration?) {
        self.queue = queue
        self.monitored = monitored
        self.notifier = notifier
        self.logger = logger
        self.registry = registry
        self.systemdInterval = systemdInterval
        self.tickInterval = systemdInterval.map { $0 / 2 } ?? Self.probeIntervalWithoutSystemd
    }

    public var dumpSectionName: String { "watchdog" }
    public var dumpQueue: SubsystemQueue { queue }

    public func start() {
        queue.async {
            let target = self.systemdInterval.map { "watchdog ping every \(self.tickInterval.compactDescription) (WatchdogSec=\($0.compactDescription))" }
                ?? "queue probe every \(self.tickInterval.compactDescription)"
            let timer = self.registry.makeTimer(owner: "watchdog", target: target, on: self.queue) { [unowned self] in
                self.tick()
            }
            // The first tick one interval from now, not at once: at once it probed every queue
            // while the start was still under way, and libdispatch starts a worker thread for
            // each queue it finds runnable with none asleep (five to seven more threads alive at
            // the start's watches, docs/measurements/idle-memory.md). systemd arms WatchdogSec
            // only once READY=1 is sent, so the first ping is not late for it.
            timer.schedule(at: .now() + self.tickInterval.dispatchInterval, repeating: self.tickInterval)
            self.timer = timer
        }
    }

    private func tick() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        ticks += 1
        let now = MonotonicInstant.now
        var stuck: [(SubsystemQueue, Duration)] = []
        for subsystem in monitored {
            if let since = subsystem.probeState.outstandingSince {
                stuck.append((subsystem, now - since))
            } else if let reportedAt = reportedStuck.removeValue(forKey: subsystem.label) {
                logger.notice("queue \(subsystem.label) answered again after \((now - reportedAt).compactDescription) stuck")
            }
        }
        if stuck.isEmpty {
            if systemdInterval != nil {
                notifier.send([("WATCHDOG", "1")])
                pingsSent += 1
            }
        } else {
            pingsWithheld += 1
            for (subsystem, age) in stuck {
                // Once when first seen, then every 5 s: enough to follow in the journal without flooding it.
                let last = reportedStuck[subsystem.label]
                if last.map({ now - $0 >= .seconds(5) }) ?? true {
                    reportedStuck[subsystem.label] = reportedStuck[subsystem.label] ?? now
                    let action = systemdInterval != nil ? "; withholding the watchdog ping" : ""
                    logger.error("queue \(subsystem.label) stuck for \(age.compactDescription): its probe is unanswered\(action)",
                                 metadata: [JournalFields.messageIDKey: .string(MessageID.queueStuck.rawValue), "queue": .string(subsystem.label),
                                            "stuck_ms": .stringConvertible(age.nanosecondsClamped / 1_000_000)])
                }
            }
        }
        for subsystem in monitored {
            subsystem.sendProbe(at: now)
        }
    }

    public func describeForDump() -> DumpValue {
        .object([
            .init("systemd_watchdog", systemdInterval.map { .string($0.compactDescription) } ?? .null),
            .init("tick_interval", .string(tickInterval.compactDescription)),
            .init("ticks", .int(Int64(ticks))),
            .init("pings_sent", .int(Int64(pingsSent))),
            .init("pings_withheld", .int(Int64(pingsWithheld))),
            .init("queues_stuck", .array(reportedStuck.keys.sorted().map { .string($0) })),
        ])
    }
}

extension Watchdog: MetricsContributor {
    public func sampleMetrics() -> [MetricSample] {
        [
            MetricSample(MetricCatalog.pingsWithheld, count: pingsWithheld),
            MetricSample(MetricCatalog.pingsSent, count: pingsSent),
        ]
    }
}
