import CoreMetrics
import Dispatch

/// The job engine's instruments, through the swift-metrics API: the engine calls them at
/// the places it already keeps its own account (a group configured, a run started, a
/// record journaled next to `totals`), so the exported counts are the dump's counts and
/// there is no second tally to drift from it. Confined to the engine's queue.
///
/// Series of a task or rule are made when the engine is told about it, at start and on
/// every reload, so they are exported at 0 before its first run: `increase()` and alerts
/// see the first failure. A task or rule removed (or renamed) by a reload loses its series
/// at once: left exported with frozen values, an alert on "no success for an hour" would
/// fire for a task that no longer exists. Runs of it that end afterwards are not counted.
// @unchecked Sendable: called only on the jobs queue, by the engine; its handles are thread-safe.
public final class JobMetrics: @unchecked Sendable {
    private struct Instruments {
        var outcomes: [RunOutcome: Counter]
        let expirations: [ExpiryReason: Counter]
        let lastSuccess: Gauge
        let lastFailure: Gauge
        let duration: Timer
        let startLatency: Timer
    }

    /// fleet_lease_lost is not among them: a series for every task and watch of a daemon
    /// without [cluster] would be noise (watchkeeper_fleet_fences_total counts fences).
    static let expiryReasons: [ExpiryReason] = [.budget, .shutdown, .replaced]

    private let factory: any MetricsFactory
    private var instruments: [JobKey: Instruments] = [:]
    /// Removed groups, until they are configured again.
    private var forgotten: Set<JobKey> = []

    /// Daemon-wide, not per task or rule: every series made at start, exported at 0.
    private let hooks: [HookKind: [HookResult: Counter]]

    public init(factory: any MetricsFactory) {
        self.factory = factory
        var hooks: [HookKind: [HookResult: Counter]] = [:]
        for kind in HookKind.allCases {
            for result in HookResult.allCases {
                hooks[kind, default: [:]][result] = Counter(label: MetricCatalog.hooks.name, dimensions: [("hook", kind.key), ("result", result.rawValue)],
                                                            factory: factory)
            }
        }
        self.hooks = hooks
    }

    /// An on_failure or on_success hook ended (or never started).
    public func hookEnded(_ kind: HookKind, result: HookResult) {
        hooks[kind]?[result]?.increment()
    }

    /// Every series of the task or rule, at 0 if it has none yet.
    public func prepare(_ key: JobKey) {
        forgotten.remove(key)
        _ = instruments(for: key)
    }

    /// The task or rule is gone: its series leave the registry, and so the export.
    public func forget(_ key: JobKey) {
        forgotten.insert(key)
        guard let gone = instruments.removeValue(forKey: key) else { return }
        gone.outcomes.values.forEach { $0.destroy() }
        gone.expirations.values.forEach { $0.destroy() }
        gone.lastSuccess.destroy()
        gone.lastFailure.destroy()
        gone.duration.destroy()
        gone.startLatency.destroy()
    }

    /// A run's record, at the moment the engine journals it and adds it to its totals.
    public func recorded(_ record: RunRecord, key: JobKey) {
        guard !forgotten.contains(key) else { return }
        var instruments = instruments(for: key)
        if instruments.outcomes[record.outcome] == nil {
            // A fleet outcome, on its first record: its series starts then.
            instruments.outcomes[record.outcome] = Counter(label: MetricCatalog.jobs.name, dimensions: [("kind", key.kind.rawValue), ("name", key.name),
                                                                                                    ("outcome", record.outcome.rawValue)], factory: factory)
            self.instruments[key] = instruments
        }
        instruments.outcomes[record.outcome]?.increment()
        let finished = record.finishedAt.epochSeconds
        switch record.outcome {
        case .ok:
            instruments.lastSuccess.record(finished)
        case .failed, .expired:
            instruments.lastFailure.record(finished)
        case .skippedOverlap, .missed, .cancelled, .ranElsewhere, .held:
            break
        }
        if record.outcome == .expired, let reason = record.expiry {
            instruments.expirations[reason]?.increment()
        }
        // Records of work that never started have no duration worth a bucket.
        if record.startedAt != nil {
            instruments.duration.recordNanoseconds(max(0, record.duration.nanosecondsClamped))
        }
    }

    /// A first attempt starts (a retry's wait is its backoff, not latency).
    public func started(_ key: JobKey, subject: JobSubject) {
        guard !forgotten.contains(key), let latency = Self.startLatency(of: subject, now: .now, wallNow: .now()) else { return }
        instruments(for: key).startLatency.recordNanoseconds(latency)
    }

    /// Nanoseconds from what made the job due to `now`: a file's last event (monotonic), the
    /// oldest of a batch's, or a task's scheduled instant (wall clock; the schedule is one).
    /// nil when the subject carries no such instant (a run asked for "now").
    static func startLatency(of subject: JobSubject, now: MonotonicInstant, wallNow: WallTime) -> Int64? {
        switch subject {
        case .schedule(let scheduledAt):
            guard let scheduledAt else { return nil }
            let seconds = wallNow.secondsSinceEpoch - scheduledAt.secondsSinceEpoch
            let nanoseconds = Int64(wallNow.nanoseconds) - Int64(scheduledAt.nanoseconds)
            return max(0, seconds * 1_000_000_000 + nanoseconds)
        case .file(let file):
            return file.eventAt.map { max(.zero, now - $0).nanosecondsClamped }
        case .batch(let files, _):
            return files.compactMap(\.eventAt).min().map { max(.zero, now - $0).nanosecondsClamped }
        }
    }

    private func instruments(for key: JobKey) -> Instruments {
        if let existing = instruments[key] { return existing }
        let dimensions = [("kind", key.kind.rawValue), ("name", key.name)]
        var outcomes: [RunOutcome: Counter] = [:]
        // ran_elsewhere and held only where they happen (fleet tasks and shared inboxes): a
        // daemon without [cluster] exports the series it always did.
        for outcome in RunOutcome.allCases where outcome != .ranElsewhere && outcome != .held {
            outcomes[outcome] = Counter(label: MetricCatalog.jobs.name, dimensions: dimensions + [("outcome", outcome.rawValue)], factory: factory)
        }
        var expirations: [ExpiryReason: Counter] = [:]
        for reason in Self.expiryReasons {
            expirations[reason] = Counter(label: MetricCatalog.expirations.name, dimensions: dimensions + [("reason", reason.rawValue)], factory: factory)
        }
        let made = Instruments(
            outcomes: outcomes,
            expirations: expirations,
            lastSuccess: Gauge(label: MetricCatalog.lastSuccess.name, dimensions: dimensions, factory: factory),
            lastFailure: Gauge(label: MetricCatalog.lastFailure.name, dimensions: dimensions, factory: factory),
            duration: Timer(label: MetricCatalog.duration.name, dimensions: dimensions, factory: factory),
            startLatency: Timer(label: MetricCatalog.startLatency.name, dimensions: dimensions, factory: factory)
        )
        instruments[key] = made
        return made
    }
}
