import FleetCheck
import Logging
import WatchkeeperCore

/// One seed's run of a fleet (issue 35): three hosts running the daemon's own fleet code
/// (`FleetMember`, `FleetFires`) against a simulated etcd, with a scheduler, an inbox and a
/// job engine around it, under the scenario's faults; then the history through
/// `FleetHistoryChecker`, and the lease's promise checked at etcd.
// @unchecked Sendable: the simulation runs on one thread, its loop.
public final class FleetSimulation: @unchecked Sendable {
    public static let prefix = "/wk-sim"
    public let scenario: FleetScenario
    let loop: SimLoop
    let etcd: SimulatedEtcd
    let network: SimNetwork
    let directory = SimDirectory()
    public let history = SimHistory()
    private var states: [SimHostState]
    private(set) var incarnations: [SimIncarnation?]
    var notRun: [String: Int] = [:]
    private var leaseRuns: [(lease: Int64, end: Int64, item: String, run: String)] = []
    /// Where the daemons' log lines go (nil: nowhere), each with the simulated time and host.
    private let log: (@Sendable (String) -> Void)?

    public init(scenario: FleetScenario, verbose: Bool = false, log: (@Sendable (String) -> Void)? = nil) {
        self.scenario = scenario
        let printing: @Sendable (String) -> Void = { print($0) }
        self.log = log ?? (verbose ? printing : nil)
        loop = SimLoop(seed: scenario.seed)
        etcd = SimulatedEtcd(loop: loop)
        network = SimNetwork(loop: loop)
        network.lostAnswers = scenario.lostAnswers
        network.slowLegs = scenario.slowLegs
        etcd.network = network
        states = (0..<scenario.hosts).map { _ in SimHostState() }
        incarnations = Array(repeating: nil, count: scenario.hosts)
    }

    public convenience init(seed: UInt64, verbose: Bool = false) {
        self.init(scenario: FleetScenario(seed: seed), verbose: verbose)
    }

    private func logger(_ host: Int) -> Logger {
        let loop = self.loop
        if let log { return Logger(label: "host\(host)") { _ in SimLogHandler(host: "host\(host)", loop: loop, write: log) } }
        return Logger(label: "host\(host)") { _ in SwiftLogNoOpLogHandler() }
    }

    private func boot(_ host: Int) {
        states[host].incarnations += 1
        let incarnation = SimIncarnation(simulation: self, index: host, persistent: states[host], logger: logger(host))
        incarnations[host] = incarnation
        incarnation.start()
    }

    /// A run of `item` ended; its claim was bound to `lease` (0: none found at its start).
    func ranUnder(lease: Int64, endedAt: Int64, item: String, run: String) {
        if lease != 0 { leaseRuns.append((lease, endedAt, item, run)) }
    }

    /// Every change etcd made to keys containing `fragment`, in order, for a replay.
    public func keyHistory(containing fragment: String) -> [String] {
        etcd.history.flatMap { revision, events in
            events.filter { $0.kv.key.contains(fragment) }.map { event in
                let at = SimHistory.seconds(etcd.revisionTimes[revision] ?? 0)
                let value = event.kind == .put ? event.kv.value : "(deleted; was lease \(String(event.previous?.lease ?? 0, radix: 16)))"
                return "\(at) rev \(revision) \(event.kind == .put ? "put" : "delete") \(event.kv.key) lease \(String(event.kv.lease, radix: 16)) \(value)"
            }
        }
    }

    public func run() -> FleetSimulationResult {
        for host in 0..<scenario.hosts {
            loop.after(loop.random.nanos(0...0.5)) { [self] in boot(host) }
        }
        for file in scenario.files {
            history.expect("file:\(file.name)#1")
            loop.schedule(at: file.createdAt) { [self] in
                directory.add(file.name, size: file.size, modified: FleetScenario.epoch + file.createdAt)
                for incarnation in incarnations.compactMap({ $0 }) where incarnation.alive {
                    loop.after(loop.random.nanos(0.05...1.5)) { [weak incarnation] in incarnation?.inbox.see(file.name) }
                }
            }
        }
        for fault in scenario.faults { schedule(fault) }
        loop.run(until: scenario.end)
        // The end: nothing new starts; what runs is let finish (and its record written).
        for incarnation in incarnations.compactMap({ $0 }) { incarnation.quiesce() }
        loop.run(until: scenario.end + .seconds(30), step: .seconds(1)) {
            incarnations.allSatisfy { $0?.engine.idle ?? true }
        }
        loop.run(until: loop.now + .seconds(1))
        loop.discardPending()
        expectFires()
        checkLeases()
        let report = FleetHistoryChecker(silenceWindow: 1.0).check(history.ordered)
        return FleetSimulationResult(seed: scenario.seed, report: report, leaseViolations: history.leaseViolations,
                                     tightestFenceMargin: history.tightestFenceMargin, fencedRuns: history.fencedRuns,
                                     eventsRun: loop.eventsRun, answersLost: network.answersLost, notRun: notRun,
                                     lateExecsRefused: history.lateExecsRefused)
    }

    private func schedule(_ fault: FleetScenario.Fault) {
        loop.schedule(at: fault.at) { [self] in
            let until = fault.at + fault.duration
            log?("\(SimHistory.seconds(fault.at)) fault: \(fault.kind)\(fault.host.map { " of host\($0)" } ?? "") until \(SimHistory.seconds(until))")
            switch fault.kind {
            case .partition:
                let host = fault.host!
                network.cut(host)
                history.fault(FleetFault(kind: "partition", host: "host\(host)", at: SimHistory.seconds(fault.at), until: SimHistory.seconds(until)))
                loop.schedule(at: until) { [self] in
                    network.heal(host)
                    etcd.resume(host: host)
                }
            case .kill9:
                let host = fault.host!
                guard let incarnation = incarnations[host], incarnation.alive else { return }
                incarnation.crash()
                incarnations[host] = nil
                history.fault(FleetFault(kind: "kill9", host: "host\(host)", at: SimHistory.seconds(fault.at), until: SimHistory.seconds(until), jobsKilled: true))
                loop.schedule(at: until) { [self] in boot(host) }
            case .sigterm:
                let host = fault.host!
                guard let incarnation = incarnations[host], incarnation.alive, incarnation.accepting else { return }
                incarnation.terminate { [self] in
                    history.fault(FleetFault(kind: "sigterm", host: "host\(host)", at: SimHistory.seconds(fault.at), until: SimHistory.seconds(max(until, loop.now))))
                    incarnations[host] = nil
                    loop.schedule(at: max(until, loop.now + 1_000_000)) { [self] in boot(host) }
                }
            case .quorum:
                etcd.loseQuorum()
                history.fault(FleetFault(kind: "etcd_quorum", host: nil, at: SimHistory.seconds(fault.at), until: SimHistory.seconds(until)))
                loop.schedule(at: until) { [self] in etcd.regainQuorum() }
            case .election:
                etcd.startElection()
                history.fault(FleetFault(kind: "etcd_election", host: nil, at: SimHistory.seconds(fault.at), until: SimHistory.seconds(until)))
                loop.schedule(at: until) { [self] in etcd.electLeader() }
            }
        }
    }

    /// The fires that must have run once the faults healed: every fire of every task due in
    /// the quiet tail, when every host is up and etcd answers, unless the task's running key
    /// was held at its instant (a fire claimed earlier still waits or runs: overlap = "skip"
    /// skips it, fleet-wide).
    private func expectFires() {
        let quiet = scenario.faultsEnd + 2 * scenario.leaseTTL + .seconds(2)
        for task in scenario.tasks {
            let key = Self.prefix + "/tasks/\(task.name)/running"
            var busy: [(start: Int64, end: Int64)] = []
            var since: Int64?
            for (revision, events) in etcd.history {
                for event in events where event.kv.key == key {
                    let at = etcd.revisionTimes[revision] ?? 0
                    if event.kind == .put, since == nil { since = at }
                    if event.kind == .delete, let start = since {
                        busy.append((start, at))
                        since = nil
                    }
                }
            }
            if let since { busy.append((since, .max)) }
            let longest = Int64(task.durations.upperBound * 1e9)
            var instant = (FleetScenario.epoch + quiet) / task.interval * task.interval + task.interval
            while instant + longest + .seconds(2) < FleetScenario.epoch + scenario.end {
                let at = instant - FleetScenario.epoch
                if !busy.contains(where: { $0.start < at + .seconds(0.5) && $0.end > at - .seconds(0.5) }) {
                    history.expect("task:\(task.name)@\(SimIncarnation.wall(instant).iso8601)")
                }
                instant += task.interval
            }
        }
    }

    /// Every run ended before the lease its claim was bound to ended at etcd; for runs whose
    /// lease expired there (a host cut off, or quorum lost and the lease not renewed), how
    /// close they came.
    private func checkLeases() {
        for run in leaseRuns {
            guard let ended = etcd.leaseEnds[run.lease] else { continue }
            if ended.at < run.end {
                history.violation("\(run.item): run \(run.run) ended at \(SimHistory.seconds(run.end)), after its claim's lease \(String(run.lease, radix: 16)) ended at etcd at \(SimHistory.seconds(ended.at))")
            } else if ended.expired, ended.at - run.end < scenario.leaseTTL {
                history.fenced(margin: ended.at - run.end)
            }
        }
    }
}

/// What one seed came to.
public struct FleetSimulationResult: Sendable {
    public let seed: UInt64
    public let report: FleetCheckReport
    public let leaseViolations: [String]
    public let tightestFenceMargin: Int64?
    public let fencedRuns: Int
    public let eventsRun: Int
    public let answersLost: Int
    public let notRun: [String: Int]
    /// Starts held up past their fence point that did not exec (SimEngine.exec).
    public var lateExecsRefused = 0

    public var passed: Bool { report.anomalyCount == 0 && leaseViolations.isEmpty }

    public var summary: String {
        var lines = ["seed \(seed): \(passed ? "ok" : "FAILED"): \(report.runs) runs of \(report.items) items, \(report.expected) expected, "
                     + "\(report.okRuns) ok, \(report.failedRuns) failed, \(report.killedRuns) killed; faults \(report.faults.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")); "
                     + "\(answersLost) answers lost; \(eventsRun) events"]
        for (anomaly, examples) in report.examples.sorted(by: { $0.key < $1.key }) {
            lines.append("  \(anomaly.rawValue) (\(report.anomalies[anomaly] ?? 0)):")
            lines += examples.map { "    " + $0 }
        }
        if !leaseViolations.isEmpty {
            lines.append("  lease violations (\(leaseViolations.count)):")
            lines += leaseViolations.map { "    " + $0 }
        }
        return lines.joined(separator: "\n")
    }
}
