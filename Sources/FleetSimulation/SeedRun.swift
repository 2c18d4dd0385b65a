import Dispatch
import Synchronization

/// Many seeds at once, spread over the machine's cores; each seed is a world of its own.
public struct SeedRunSummary: Sendable {
    public var seeds = 0
    public var failed: [FleetSimulationResult] = []
    public var runs = 0
    public var events = 0
    public var faults: [String: Int] = [:]
    public var fencedRuns = 0
    /// The least margin, over every seed, between a fenced run's end and its lease's expiry at etcd.
    public var tightestFenceMargin: Int64?
    public var rerunsAfterSilencedOk = 0
    public var rerunsAfterStopWithoutEtcd = 0
    public var rerunsAfterFailure = 0
    public var anomalies: [String: Int] = [:]
    public var leaseViolations = 0
    public var lateExecsRefused = 0

    mutating func add(_ result: FleetSimulationResult) {
        seeds += 1
        if !result.passed { failed.append(result) }
        runs += result.report.runs
        events += result.eventsRun
        for (kind, count) in result.report.faults { faults[kind, default: 0] += count }
        fencedRuns += result.fencedRuns
        if let margin = result.tightestFenceMargin { tightestFenceMargin = min(tightestFenceMargin ?? .max, margin) }
        rerunsAfterSilencedOk += result.report.rerunsAfterSilencedOk
        rerunsAfterStopWithoutEtcd += result.report.rerunsAfterStopWithoutEtcd
        rerunsAfterFailure += result.report.rerunsAfterFailure
        for (anomaly, count) in result.report.anomalies { anomalies[anomaly.rawValue, default: 0] += count }
        leaseViolations += result.leaseViolations.count
        lateExecsRefused += result.lateExecsRefused
    }

    /// The command that replays a seed exactly, with the daemon's log.
    public static func replay(_ seed: UInt64) -> String { "swift run watchkeeper-sim --seed \(seed) --verbose" }

    public var description: String {
        let faultText = faults.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        let margin = tightestFenceMargin.map { "\(Double($0 / 1_000_000) / 1000) s" } ?? "-"
        let anomalyText = anomalies.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
        var lines = ["\(seeds) seeds, \(failed.count) failed; \(runs) runs, \(events) events; faults \(faultText)"]
        lines.append("anomalies: \(anomalyText.isEmpty ? "none" : anomalyText); runs that broke their lease: \(leaseViolations)")
        lines.append("\(fencedRuns) runs ended under a lease that then expired at etcd, the closest \(margin) before its expiry")
        lines.append("\(lateExecsRefused) starts held up past their fence point did not exec")
        lines.append("\(rerunsAfterSilencedOk) runs again after an ok run whose host was silenced (\(rerunsAfterStopWithoutEtcd) of them stopping while etcd "
                     + "had no leader), \(rerunsAfterFailure) after a failed or killed one")
        for result in failed.prefix(5) {
            lines.append(result.summary)
            lines.append("  replay: \(Self.replay(result.seed))")
        }
        return lines.joined(separator: "\n")
    }
}

extension FleetSimulation {
    /// Seeds `first ..< first + count`, on `jobs` threads.
    public static func run(seeds count: Int, from first: UInt64 = 1, jobs: Int = 2) -> SeedRunSummary {
        let summary = Mutex(SeedRunSummary())
        let next = Atomic<Int>(0)
        DispatchQueue.concurrentPerform(iterations: max(1, jobs)) { _ in
            while true {
                let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
                guard index < count else { return }
                let result = FleetSimulation(seed: first + UInt64(index)).run()
                summary.withLock { $0.add(result) }
            }
        }
        var total = summary.withLock { $0 }
        total.failed.sort { $0.seed < $1.seed }
        return total
    }
}
