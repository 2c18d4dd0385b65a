/// The intervals in which etcd could not take a write, as the history tells them: outages
/// the injector caused (`FleetFault.etcdOutageKinds`, hitting no host) and stalls it only
/// observed (`FleetObservation.etcdStall`: a loaded machine, a slow election). Without etcd
/// no lease is granted or renewed, so a daemon holds its fleet fires (a job starts only under
/// a lease known to be alive) and, once etcd answers again, catches up each task's latest
/// alone (docs/fleet.md): the ones before it are held by design, whichever the cause.
struct EtcdOutages {
    /// How long before an outage a fire may already be held by it: its claim was on its way.
    static let leadBefore = 0.5

    private let injected: [ClosedRange<Double>]
    private let observed: [ClosedRange<Double>]
    private let slack: Double

    /// `slack`: how long after etcd answered again a fire may still be held (until the
    /// daemons hold a lease again and the latest held fire is claimed).
    init(faults: [FleetFault], observations: [FleetObservation], slack: Double) {
        injected = faults.filter { $0.host == nil && FleetFault.etcdOutageKinds.contains($0.kind) }
            .map { $0.at...($0.until ?? .infinity) }
        observed = observations.filter { $0.kind == FleetObservation.etcdStall }.map { $0.at...($0.until ?? .infinity) }
        self.slack = slack
    }

    var observedCount: Int { observed.count }

    /// Why a fire due at `instant` may have been held: an injected outage first (the cause
    /// the run meant), an observed stall only where no injected outage explains it.
    func cause(holding instant: Double) -> FleetCheckReport.HoldCause? {
        func holds(_ outage: ClosedRange<Double>) -> Bool {
            outage.lowerBound - Self.leadBefore <= instant && instant <= outage.upperBound + slack
        }
        if injected.contains(where: holds) { return .injected }
        if observed.contains(where: holds) { return .observed }
        return nil
    }

    /// Seconds of `span` inside an observed stall and outside every injected outage: what a
    /// loaded machine took from the run, beside the outages it was meant to have.
    func observedSeconds(within span: ClosedRange<Double>) -> Double {
        let clipped = Self.merged(observed.compactMap { Self.intersection($0, span) })
        let meant = Self.merged(injected)
        return clipped.reduce(0) { total, stall in
            total + Self.length(stall) - meant.compactMap { Self.intersection($0, stall) }.reduce(0) { $0 + Self.length($1) }
        }
    }

    private static func length(_ range: ClosedRange<Double>) -> Double { range.upperBound - range.lowerBound }

    private static func intersection(_ a: ClosedRange<Double>, _ b: ClosedRange<Double>) -> ClosedRange<Double>? {
        let low = max(a.lowerBound, b.lowerBound), high = min(a.upperBound, b.upperBound)
        return low <= high ? low...high : nil
    }

    /// Disjoint intervals covering the same instants, in order.
    private static func merged(_ ranges: [ClosedRange<Double>]) -> [ClosedRange<Double>] {
        var result: [ClosedRange<Double>] = []
        for range in ranges.sorted(by: { $0.lowerBound < $1.lowerBound }) {
            if let last = result.last, range.lowerBound <= last.upperBound {
                result[result.count - 1] = last.lowerBound...max(last.upperBound, range.upperBound)
            } else {
                result.append(range)
            }
        }
        return result
    }
}
