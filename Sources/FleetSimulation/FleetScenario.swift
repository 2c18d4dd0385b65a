/// What one seed runs: three hosts of a fleet with their own slots and clocks, fleet tasks
/// and a shared inbox's files arriving, and faults one after another (each healed before the
/// next begins), then a quiet tail in which everything must come right. Every number is
/// drawn from the seed.
public struct FleetScenario: Sendable {
    public struct Task: Sendable {
        public var name: String
        public var interval: Int64
        public var durations: ClosedRange<Double>
        public var persistent: Bool

        public init(name: String, interval: Int64, durations: ClosedRange<Double>, persistent: Bool) {
            self.name = name
            self.interval = interval
            self.durations = durations
            self.persistent = persistent
        }
    }

    public struct File: Sendable {
        public var name: String
        public var createdAt: Int64
        public var size: Int64

        public init(name: String, createdAt: Int64, size: Int64) {
            self.name = name
            self.createdAt = createdAt
            self.size = size
        }
    }

    public enum FaultKind: String, Sendable, CaseIterable {
        /// A host cut off from etcd (its jobs run on).
        case partition
        /// kill -9 of the daemon and its jobs (systemd kills the unit's cgroup); restarted later.
        case kill9
        /// SIGTERM: the drain, then the clean stop; restarted later.
        case sigterm
        /// Two etcd members of three gone: nothing is applied, no lease expires.
        case quorum = "etcd_quorum"
        /// The etcd leader killed: a new one is elected; requests wait for it meanwhile.
        case election = "etcd_election"

        /// The faults a seed draws from, each about as often. `election` joined last; it found
        /// a claim adopted under a revision its own release was deleting (seeds 2298, 6068:
        /// ClaimReading adopts only a claim whose answer was lost) and a checker gap (6389,
        /// 8885: a stop while etcd has no leader gives its records up, at-least-once).
        public static let drawn: [FaultKind] = [.partition, .kill9, .sigterm, .quorum, .election]
    }

    public struct Fault: Sendable {
        public var kind: FaultKind
        public var host: Int?
        public var at: Int64
        public var duration: Int64

        public init(kind: FaultKind, host: Int?, at: Int64, duration: Int64) {
            self.kind = kind
            self.host = host
            self.at = at
            self.duration = duration
        }
    }

    public var seed: UInt64
    public var hosts = 3
    /// Each host's `[cluster] name` (by default host0, host1, ...): two alike are two daemons
    /// given one name.
    public var memberNames: [String] = []
    public var leaseTTL: Int64
    public var maxJobs: [Int]
    public var clockRates: [Double]
    public var wallSkews: [Int64]
    public var tasks: [Task]
    public var files: [File]
    public var ruleLimit: Int
    public var fileDurations: ClosedRange<Double>
    public var fileFailures: Double
    public var fileMoves: Double
    public var stubbornJobs: Double
    public var shutdownGrace: Int64
    /// How often an answer is lost after etcd applied the call, and a leg is slow.
    public var lostAnswers = 0.01
    public var slowLegs = 0.02
    /// How often a job's exec is held up after the start gate let it through (the jobs
    /// thread descheduled, the daemon stopped with SIGSTOP just then: CI's nemesis caught
    /// one), for up to twice the lease's TTL, the jobs queue held up with it. Drawn by each
    /// host's engine from a stream of its own, so a seed's other draws stay as they were.
    public var stalledStarts = 0.02
    /// Off only to show what the child's exec deadline prevents (FleetSimulationCanFailTests).
    public var execDeadlineChecked = true
    public var faults: [Fault]
    /// When the last fault has healed; the run goes on quietly until `end`.
    public var faultsEnd: Int64
    public var end: Int64
    /// Where the hosts' wall clocks start (fire instants are whole intervals of it).
    public static let epoch: Int64 = 1_800_000_000 * 1_000_000_000

    public init(seed: UInt64) {
        self.seed = seed
        var random = SimRandom(seed: seed ^ 0x5CE7_A410)
        leaseTTL = Int64(random.int(3...10)) * 1_000_000_000
        maxJobs = (0..<hosts).map { _ in random.int(1...4) }
        clockRates = (0..<hosts).map { _ in 1 + (random.unit() - 0.5) * 0.004 }
        wallSkews = (0..<hosts).map { _ in random.nanos(0...0.02) }
        tasks = (0..<random.int(1...2)).map { index in
            let interval = Int64(random.int(3...6)) * 1_000_000_000
            let longest = random.chance(0.3) ? Double(interval) / 1e9 * 1.5 : Double(interval) / 1e9 * 0.6
            return Task(name: "task\(index)", interval: interval, durations: 0.05...longest, persistent: random.chance(0.8))
        }
        let active = Int64.seconds(Double(random.int(12...25)))
        files = (0..<random.int(4...20)).map { index in
            File(name: "f\(index).dat", createdAt: random.nanos(1...(Double(active) / 1e9)), size: Int64(random.int(1...100_000)))
        }
        ruleLimit = random.int(1...4)
        fileDurations = 0.05...(random.chance(0.5) ? 0.5 : 3)
        fileFailures = random.chance(0.5) ? 0 : 0.1
        fileMoves = random.unit()
        stubbornJobs = random.chance(0.5) ? 0 : 0.3
        shutdownGrace = random.nanos(0.2...3)
        var faults: [Fault] = []
        var at = Int64.seconds(3) + random.nanos(0...2)
        while at < active {
            let kind = random.pick(FaultKind.drawn)
            let duration: Int64
            switch kind {
            case .partition: duration = random.nanos(0.5...(Double(leaseTTL) / 1e9 * 2.5))
            case .kill9, .sigterm: duration = random.nanos(0.2...12)
            case .quorum: duration = random.nanos(0.5...10)
            case .election: duration = random.nanos(0.2...2.5)
            }
            let everyHost = kind == .quorum || kind == .election
            faults.append(Fault(kind: kind, host: everyHost ? nil : random.int(0...(hosts - 1)), at: at, duration: duration))
            // After a quorum loss, the records that waited for etcd need a moment to land (a
            // call sent during the loss waits out its deadline) before a host may be killed.
            at += duration + random.nanos(kind == .quorum ? 4.5...8 : 0.3...6)
        }
        self.faults = faults
        faultsEnd = max(active, at)
        end = faultsEnd + 2 * leaseTTL + .seconds(10)
    }

    /// The scenario with `faults` instead of its own, the run's end moved to suit them.
    public func with(faults: [Fault]) -> FleetScenario {
        var changed = self
        changed.faults = faults
        changed.faultsEnd = max(files.map(\.createdAt).max() ?? 0, faults.map { $0.at + $0.duration }.max() ?? 0) + .seconds(1)
        changed.end = changed.faultsEnd + 2 * leaseTTL + .seconds(12)
        return changed
    }
}
