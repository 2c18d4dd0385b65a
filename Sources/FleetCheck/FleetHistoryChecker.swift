import WatchkeeperCore

/// Reads a whole fleet history (`FleetHistoryEvent`) and says whether the fleet kept its
/// promises (docs/fleet.md), the way Jepsen's checkers read a recorded history:
///
/// - **no overlap**: no two runs of one item are alive at the same instant, on any hosts;
/// - **no run again after ok**: once a run of an item ended ok, no run of it starts later,
///   except where the host of that ok run was killed, frozen or cut off (`FleetFault
///   .silencingKinds`) within `silenceWindow` of its end, or was stopping then while etcd
///   had no leader (`FleetFault.stopWithoutEtcd`): its record could not
///   reach etcd, and another host running the item again is at-least-once, counted, not hidden;
/// - **every expected item ran ok** by the end of the history (after the faults healed),
///   except a fire an etcd outage held by design (`EtcdOutages`): one injected, or a stall
///   observed without being injected; each counted by its cause, so that a run whose fires
///   were all excused shows it;
/// - **every run ended**: a start with neither an end nor a fault that killed its host's jobs.
///
/// A history in which observed stalls cover more than `maxObservedStallShare` of its span
/// (outside injected outages) is not judged a pass: the machine was too loaded to tell a
/// fleet that holds its fires from one that loses them (`FleetCheckReport.unjudged`).
///
/// It knows nothing of etcd or the daemon: the same checker reads the simulation's history
/// and the nemesis's log of real jobs.
public struct FleetHistoryChecker: Sendable {
    /// How long after a run's end its host may have been silenced for a run again to be
    /// excused: the time the daemon needs to record the end in etcd.
    public var silenceWindow: Double
    /// How long after etcd answered again an expected fire may still have been held: the
    /// nemesis's twice its 2 s fire interval (new leases, then the latest held fire claimed).
    public var heldFireSlack: Double
    /// The share of the history's span that observed etcd stalls outside injected outages may
    /// cover before the history is too disturbed to judge.
    public var maxObservedStallShare: Double

    public init(silenceWindow: Double = 1.0, heldFireSlack: Double = 4.0, maxObservedStallShare: Double = 0.25) {
        self.silenceWindow = silenceWindow
        self.heldFireSlack = heldFireSlack
        self.maxObservedStallShare = maxObservedStallShare
    }

    public func check(_ events: [FleetHistoryEvent]) -> FleetCheckReport {
        var report = FleetCheckReport()
        var faults: [FleetFault] = []
        var observations: [FleetObservation] = []
        var expected: [(item: String, fire: Double?)] = []
        var span: ClosedRange<Double>?
        var runs: [String: Run] = [:]
        var order: [String] = []
        for event in events {
            report.events += 1
            if case .expect = event {} else {
                let at = FleetHistoryEvent.sortKey(event)
                span = span.map { min($0.lowerBound, at)...max($0.upperBound, at) } ?? at...at
            }
            switch event {
            case .start(let item, let host, let run, let at):
                if runs[run] != nil {
                    report.add(.malformed, "run \(run) of \(item) started twice")
                    continue
                }
                runs[run] = Run(id: run, item: item, host: host, start: at)
                order.append(run)
            case .end(let item, _, let run, let at, let ok):
                guard runs[run] != nil, runs[run]?.end == nil else {
                    report.add(.malformed, "run \(run) of \(item) ended without a start, or twice")
                    continue
                }
                runs[run]?.end = at
                runs[run]?.outcome = ok ? .ok : .failed
            case .fault(let fault):
                faults.append(fault)
                report.faults[fault.kind, default: 0] += 1
            case .observed(let observation):
                observations.append(observation)
            case .expect(let item, let fire):
                expected.append((item, fire))
            }
        }
        let closed = order.map { close(runs[$0]!, faults: faults, report: &report) }
        let byItem = Dictionary(grouping: closed, by: \.item)
        report.runs = closed.count
        report.items = byItem.count
        for (item, itemRuns) in byItem.sorted(by: { $0.key < $1.key }) {
            checkOverlaps(item, itemRuns.sorted { $0.start < $1.start }, report: &report)
            checkRunsAfterOk(item, itemRuns, faults: faults, report: &report)
        }
        let outages = EtcdOutages(faults: faults, observations: observations, slack: heldFireSlack)
        checkExpected(expected, byItem, outages, report: &report)
        judge(outages, span: span, report: &report)
        return report
    }

    private func checkExpected(_ expected: [(item: String, fire: Double?)], _ byItem: [String: [Run]], _ outages: EtcdOutages,
                               report: inout FleetCheckReport) {
        for (item, fire) in expected {
            let ranOk = byItem[item]?.contains { $0.outcome == .ok } ?? false
            if let cause = fire.flatMap(outages.cause(holding:)) {
                report.exemptFires[cause, default: 0] += 1
                if !ranOk { report.heldFires[cause, default: 0] += 1 }
            } else if !ranOk {
                report.add(.neverRanOk, "\(item): expected, \(byItem[item]?.count ?? 0) run(s), none ended ok")
            }
        }
        report.expected = expected.count
    }

    private func judge(_ outages: EtcdOutages, span: ClosedRange<Double>?, report: inout FleetCheckReport) {
        report.observedStalls = outages.observedCount
        guard let span, span.upperBound > span.lowerBound else { return }
        report.historySeconds = span.upperBound - span.lowerBound
        report.observedStallSeconds = outages.observedSeconds(within: span)
        let share = report.observedStallSeconds / report.historySeconds
        if share > maxObservedStallShare {
            report.unjudged = "etcd was observed stalled, outside the injected outages, for \(Int(report.observedStallSeconds.rounded())) s "
                + "of the history's \(Int(report.historySeconds.rounded())) s (\(Int((share * 100).rounded())) %, over the "
                + "\(Int((maxObservedStallShare * 100).rounded())) % bound): too loaded a machine to judge which fires had to run"
        }
    }

    struct Run {
        enum Outcome { case ok, failed, killed, open }
        let id: String
        let item: String
        let host: String
        let start: Double
        var end: Double?
        var outcome: Outcome = .open

        var stop: Double { end ?? .infinity }
    }

    /// A run without an end is closed by the first fault after its start that killed its
    /// host's jobs; one that nothing closed is an anomaly and lasts forever.
    private func close(_ run: Run, faults: [FleetFault], report: inout FleetCheckReport) -> Run {
        var run = run
        switch run.outcome {
        case .ok: report.okRuns += 1
        case .failed: report.failedRuns += 1
        case .killed, .open:
            if let kill = faults.filter({ $0.jobsKilled && $0.host == run.host && $0.at >= run.start }).min(by: { $0.at < $1.at }) {
                run.end = kill.at
                run.outcome = .killed
                report.killedRuns += 1
            } else {
                report.add(.neverEnded, "\(run.item): run \(run.id) on \(run.host) started at \(run.start) and never ended")
            }
        }
        return run
    }

    private func checkOverlaps(_ item: String, _ sorted: [Run], report: inout FleetCheckReport) {
        guard var longest = sorted.first else { return }
        for run in sorted.dropFirst() {
            if run.start < longest.stop {
                report.add(.overlap, "\(item): run \(run.id) on \(run.host) started at \(run.start) while run \(longest.id) on "
                           + "\(longest.host) (started \(longest.start)) had not ended" + (longest.end.map { " (it ended \($0))" } ?? ""))
            }
            if run.stop > longest.stop { longest = run }
        }
    }

    private func checkRunsAfterOk(_ item: String, _ runs: [Run], faults: [FleetFault], report: inout FleetCheckReport) {
        let ended = runs.filter { $0.outcome == .ok }
        for run in runs {
            // The earliest ok run that ended before this one started; overlaps are reported apart.
            guard let done = ended.filter({ $0.id != run.id && $0.stop <= run.start }).min(by: { $0.stop < $1.stop }) else {
                if runs.contains(where: { $0.id != run.id && $0.stop <= run.start }) { report.rerunsAfterFailure += 1 }
                continue
            }
            let window = done.stop...(done.stop + silenceWindow)
            if faults.contains(where: { $0.silences(done.host, over: window) }) {
                report.rerunsAfterSilencedOk += 1
            } else if FleetFault.stopWithoutEtcd(done.host, over: window, in: faults) {
                report.rerunsAfterSilencedOk += 1
                report.rerunsAfterStopWithoutEtcd += 1
            } else {
                report.add(.ranAgainAfterOk, "\(item): run \(run.id) on \(run.host) started at \(run.start) after run \(done.id) on "
                           + "\(done.host) ended ok at \(done.stop)")
            }
        }
    }
}

/// What the checker found: counts of everything, and each anomaly with its first examples.
public struct FleetCheckReport: Sendable, Equatable {
    public enum Anomaly: String, Sendable, CaseIterable, Comparable {
        case overlap = "overlapping_runs"
        case ranAgainAfterOk = "ran_again_after_ok"
        case neverRanOk = "expected_never_ran_ok"
        case neverEnded = "run_never_ended"
        case malformed = "malformed_history"

        public static func < (lhs: Anomaly, rhs: Anomaly) -> Bool { lhs.rawValue < rhs.rawValue }
    }

    public static let examplesKept = 10

    public var events = 0
    public var runs = 0
    public var items = 0
    public var expected = 0
    public var okRuns = 0
    public var failedRuns = 0
    /// Runs closed by a fault that killed their host's jobs.
    public var killedRuns = 0
    /// Runs that started after an earlier run of the item failed or was killed (a retry or a
    /// takeover: allowed).
    public var rerunsAfterFailure = 0
    /// Runs that started after an ok run whose host was silenced before it could say so.
    public var rerunsAfterSilencedOk = 0
    /// Of those, the ones whose host was stopping while etcd had no leader.
    public var rerunsAfterStopWithoutEtcd = 0
    public var faults: [String: Int] = [:]
    /// Why an expected fire need not have run: an etcd outage held it (`EtcdOutages`).
    public enum HoldCause: String, Sendable, CaseIterable { case injected, observed }
    /// Expected fires in an etcd outage's window, by its cause; `heldFires`: those of them
    /// that never ran ok (what the exemption excused).
    public var exemptFires: [HoldCause: Int] = [:]
    public var heldFires: [HoldCause: Int] = [:]
    public var observedStalls = 0
    /// Seconds of the history in an observed stall and in no injected outage, and the span
    /// of the history (first to last timed event).
    public var observedStallSeconds = 0.0
    public var historySeconds = 0.0
    /// Why the history could not be judged (observed stalls over the bound); nil if it was.
    public var unjudged: String?
    public var anomalies: [Anomaly: Int] = [:]
    public var examples: [Anomaly: [String]] = [:]

    public var anomalyCount: Int { anomalies.values.reduce(0, +) }

    mutating func add(_ anomaly: Anomaly, _ example: String) {
        anomalies[anomaly, default: 0] += 1
        if examples[anomaly, default: []].count < Self.examplesKept { examples[anomaly, default: []].append(example) }
    }

    public var dumpValue: DumpValue {
        let counts: [DumpField] = [
            .init("events", .int(Int64(events))), .init("runs", .int(Int64(runs))), .init("items", .int(Int64(items))),
            .init("expected", .int(Int64(expected))), .init("ok_runs", .int(Int64(okRuns))),
            .init("failed_runs", .int(Int64(failedRuns))), .init("killed_runs", .int(Int64(killedRuns))),
            .init("reruns_after_failure", .int(Int64(rerunsAfterFailure))),
            .init("reruns_after_silenced_ok", .int(Int64(rerunsAfterSilencedOk))),
            .init("reruns_after_stop_without_etcd", .int(Int64(rerunsAfterStopWithoutEtcd))),
        ] + HoldCause.allCases.flatMap { cause in
            [DumpField("exempt_fires_\(cause.rawValue)", .int(Int64(exemptFires[cause] ?? 0))),
             DumpField("held_fires_\(cause.rawValue)", .int(Int64(heldFires[cause] ?? 0)))]
        } + [
            .init("observed_stalls", .int(Int64(observedStalls))),
            .init("observed_stall_s", .double((observedStallSeconds * 10).rounded() / 10)),
            .init("history_s", .double((historySeconds * 10).rounded() / 10)),
            .init("unjudged", unjudged.map(DumpValue.string) ?? .null),
        ]
        return .object(counts + [
            .init("faults", .object(faults.sorted { $0.key < $1.key }.map { .init($0.key, .int(Int64($0.value))) })),
            .init("anomalies", .object(Anomaly.allCases.map { .init($0.rawValue, .int(Int64(anomalies[$0] ?? 0))) })),
            .init("examples", .object(examples.sorted { $0.key < $1.key }.map { .init($0.key.rawValue, .array($0.value.map(DumpValue.string))) })),
        ])
    }
}
