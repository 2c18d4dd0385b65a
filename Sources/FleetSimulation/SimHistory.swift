import FleetCheck
import WatchkeeperCore

/// What happened in one simulated run: the jobs' starts and ends and the faults, as the
/// checker reads them (`FleetHistoryEvent`, times in simulated seconds), and what the
/// simulation can see beyond the checker: whether each run's claim was held under a lease
/// etcd still had when it started, and ended before that lease could end there.
public final class SimHistory {
    public private(set) var events: [FleetHistoryEvent] = []
    /// Runs that broke the lease's promise, said once each.
    public private(set) var leaseViolations: [String] = []
    /// The least time between a run's end and the end at etcd of the lease its claim was
    /// bound to, over runs whose lease expired (their host was cut off or stopped): the
    /// fence's margin, measured.
    public private(set) var tightestFenceMargin: Int64?
    public private(set) var fencedRuns = 0
    /// Starts held up past their fence point that did not exec (the child's exec deadline),
    /// and those that did (with the deadline switched off).
    public private(set) var lateExecsRefused = 0
    public private(set) var lateExecs = 0

    static func seconds(_ nanos: Int64) -> Double { Double(nanos) / 1e9 }

    func start(item: String, host: String, run: String, at: Int64) {
        events.append(.start(item: item, host: host, run: run, at: Self.seconds(at)))
    }

    func end(item: String, host: String, run: String, at: Int64, ok: Bool) {
        events.append(.end(item: item, host: host, run: run, at: Self.seconds(at), ok: ok))
    }

    func fault(_ fault: FleetFault) {
        events.append(.fault(fault))
    }

    func expect(_ item: String) {
        events.append(.expect(item: item))
    }

    func violation(_ text: String) {
        if leaseViolations.count < 20 { leaseViolations.append(text) }
    }

    func lateExec(refused: Bool) {
        if refused { lateExecsRefused += 1 } else { lateExecs += 1 }
    }

    func fenced(margin: Int64) {
        fencedRuns += 1
        tightestFenceMargin = min(tightestFenceMargin ?? .max, margin)
    }

    /// The events in time order (an expectation first), as the checker wants them.
    public var ordered: [FleetHistoryEvent] {
        events.enumerated().sorted {
            (FleetHistoryEvent.sortKey($0.element), $0.offset) < (FleetHistoryEvent.sortKey($1.element), $1.offset)
        }.map(\.element)
    }
}
