import WatchkeeperCore

/// A host's job engine in the simulation: `max_jobs` slots, each group's own limit, jobs
/// that take a drawn time, fail now and then, and end through the expiry sequence when told
/// (a stubborn one only at its SIGKILL, when the sequence's time is up). Fleet jobs start as
/// the daemon's engine starts them: through the daemon's `FleetStarts` (the start gate, a
/// file's claim when a slot is free for it, its record at its end, the fence). Every start
/// and end goes to the history; each start is checked against etcd itself: a run must start
/// under a claim of its own bound to a lease etcd still has, and end before that lease ends
/// there.
// @unchecked Sendable: the simulation runs on one thread, its loop.
final class SimEngine: @unchecked Sendable {
    enum Kind {
        case task(name: String, instant: WallTime)
        case file(name: String)
    }

    // @unchecked Sendable: the simulation runs on one thread, its loop.
    final class Job: @unchecked Sendable {
        let kind: Kind
        let runID: RunID
        let duration: Int64
        let fails: Bool
        let stubborn: Bool
        let ended: (FleetRunEnd) -> Void
        /// What FleetStarts sees: a claimed fire, or a file to claim.
        let fleet: FleetJob
        var claim: FleetClaimHold?
        var startedAt: Int64?
        var startedWall: WallTime?
        var token = 0
        var expiry: ExpiryReason?
        var endsAt: Int64?
        var lease: Int64 = 0
        /// The job's own last acts before it exits (an inbox job moves its file out).
        var finishing: ((RunOutcome) -> Void)?

        init(kind: Kind, fleet: FleetJob, runID: RunID, duration: Int64, fails: Bool, stubborn: Bool, ended: @escaping (FleetRunEnd) -> Void) {
            self.kind = kind
            self.fleet = fleet
            self.runID = runID
            self.duration = duration
            self.fails = fails
            self.stubborn = stubborn
            self.ended = ended
        }

        var group: String {
            switch kind {
            case .task(let name, _): return "task:" + name
            case .file: return "watch:inbox"
            }
        }
    }

    unowned let host: SimIncarnation
    let maxJobs: Int
    let ruleLimit: Int
    private(set) var running: [RunID: Job] = [:]
    private var waiting: [Job] = []
    /// Files whose claim is on its way: their slots are held.
    private var claiming: [RunID: Job] = [:]
    var starts: FleetStarts!
    private(set) var accepting = true
    /// Whether a start is held up between the gate and the exec, and for how long: a stream
    /// of the host's own (the loop's draws stay as they were for every seed).
    private var stalls: SimRandom
    /// Told when the last running job ended during the drain.
    var onIdle: (() -> Void)?

    init(host: SimIncarnation, maxJobs: Int, ruleLimit: Int) {
        self.host = host
        self.maxJobs = maxJobs
        self.ruleLimit = ruleLimit
        stalls = SimRandom(seed: host.simulation.scenario.seed ^ 0x57A1_1ED0 ^ UInt64(host.index) << 32 ^ UInt64(host.persistent.incarnations) << 40)
    }

    private var loop: SimLoop { host.loop }

    func item(_ job: Job) -> String {
        switch job.kind {
        case .task(let name, let instant): return "task:\(name)@\(instant.iso8601)"
        case .file(let name): return "file:\(name)#1"
        }
    }

    func claimKey(_ job: Job) -> String {
        switch job.kind {
        case .task(let name, let instant): return host.prefix + "/tasks/\(name)/fires/\(instant.iso8601)"
        case .file(let name): return host.prefix + "/watches/inbox/files/\(name)"
        }
    }

    private func limit(_ job: Job) -> Int {
        if case .file = job.kind { return ruleLimit }
        return 1
    }

    private func count(_ group: String) -> Int {
        running.values.filter { $0.group == group }.count + claiming.values.filter { $0.group == group }.count
    }

    func activeCount(of task: String) -> Int { count("task:" + task) + waiting.filter { $0.group == "task:" + task }.count }

    func submit(_ job: Job) {
        guard accepting else {
            return job.ended(FleetRunEnd(outcome: .cancelled, startedAt: nil, finishedAt: host.clock.wallNow, expiry: nil))
        }
        waiting.append(job)
        pump()
    }

    func pump() {
        while accepting, running.count + claiming.count < maxJobs, let index = waiting.firstIndex(where: { count($0.group) < limit($0) }) {
            tryStart(waiting.remove(at: index))
        }
    }

    /// As JobEngine.start: a fleet job goes through FleetStarts first.
    private func tryStart(_ job: Job) {
        let decision = starts.beforeStart(job.claim.map { .claimed($0) } ?? job.fleet, runID: job.runID) { [weak self, weak job] answer in
            guard let self, let job, self.claiming.removeValue(forKey: job.runID) != nil else { return }
            if case .start(let claim, let by) = answer {
                job.claim = claim
                if self.accepting { self.start(job, by: by) } else { self.notStarted(job, .cancelled) }
            } else if case .notStarted(let outcome, _) = answer {
                self.notStarted(job, outcome)
            }
            self.checkIdle()
            self.pump()
        }
        switch decision {
        case .start(let claim, let by):
            job.claim = claim
            start(job, by: by)
        case .claiming:
            claiming[job.runID] = job
        case .notStarted(let outcome, _):
            notStarted(job, outcome)
        }
    }

    private func checkIdle() {
        if running.isEmpty, claiming.isEmpty, !accepting { onIdle?() }
    }

    /// A job that never started: its claim (a file's) released, its owner told.
    private func notStarted(_ job: Job, _ outcome: RunOutcome) {
        if let claim = job.claim { starts.ended(job.fleet, hold: claim, runID: job.runID, ok: false) }
        job.ended(FleetRunEnd(outcome: outcome, startedAt: nil, finishedAt: host.clock.wallNow, expiry: nil))
    }

    /// The job has its slot; its child execs now, or after a stall (`FleetScenario.stalledStarts`)
    /// during which the jobs queue is held up too (a fence, a claim's answer wait behind it).
    private func start(_ job: Job, by: MonotonicInstant?) {
        running[job.runID] = job
        let scenario = host.simulation.scenario
        guard scenario.stalledStarts > 0, stalls.chance(scenario.stalledStarts) else { return exec(job, by: by) }
        let stall = stalls.nanos(0.05...(2 * Double(scenario.leaseTTL) / 1e9))
        host.jobsQueue.hold(until: loop.now + stall + 1)
        job.token += 1
        let token = job.token
        loop.after(stall) { [weak self, weak job] in
            guard let self, let job, job.token == token, self.host.alive else { return }
            self.exec(job, by: by)
        }
    }

    /// As the child does (child.c): past the instant the gate gave, it does not exec, and the
    /// run ends unstarted, its claim released.
    private func exec(_ job: Job, by: MonotonicInstant?) {
        if let by, host.clock.now >= by {
            host.history.lateExec(refused: host.simulation.scenario.execDeadlineChecked)
            if host.simulation.scenario.execDeadlineChecked {
                running.removeValue(forKey: job.runID)
                // As JobRun.endUnstarted: a fire's cancelled, a file's held (tried again).
                if case .file = job.kind { notStarted(job, .held) } else { notStarted(job, .cancelled) }
                checkIdle()
                return pump()
            }
        }
        job.startedAt = loop.now
        job.startedWall = host.clock.wallNow
        host.history.start(item: item(job), host: host.name, run: job.runID.description, at: loop.now)
        checkClaim(job)
        job.token += 1
        let token = job.token
        loop.after(job.duration) { [weak self, weak job] in
            guard let self, let job, job.token == token, self.host.alive else { return }
            self.end(job, outcome: job.fails ? .failed : .ok)
        }
    }

    /// The lease's promise, checked at etcd: the claim is there, this host's, on a live lease.
    private func checkClaim(_ job: Job) {
        let key = claimKey(job)
        guard let kv = host.etcd.kvs[key], kv.lease != 0, host.etcd.leaseExists(kv.lease), kv.lease == host.member.gate.current?.lease,
              kv.value.contains("\"host\":\"\(host.settings.name)\"") else {
            host.history.violation("\(item(job)): run \(job.runID) on \(host.name) started at \(SimHistory.seconds(loop.now)) without a live claim of its own in etcd")
            return
        }
        job.lease = kv.lease
    }

    private func end(_ job: Job, outcome: RunOutcome) {
        guard running.removeValue(forKey: job.runID) != nil else { return }
        job.token += 1
        host.history.end(item: item(job), host: host.name, run: job.runID.description, at: loop.now, ok: outcome == .ok)
        host.simulation.ranUnder(lease: job.lease, endedAt: loop.now, item: item(job), run: job.runID.description)
        job.finishing?(outcome)
        // As JobEngine.deliver: a file's record goes to etcd before its completion goes on.
        if let claim = job.claim { starts.ended(job.fleet, hold: claim, runID: job.runID, ok: outcome == .ok) }
        job.ended(FleetRunEnd(outcome: outcome, startedAt: job.startedWall, finishedAt: host.clock.wallNow, expiry: job.expiry))
        checkIdle()
        pump()
    }

    /// The expiry sequence, squeezed to end by `stopBy` (on the host's clock): a job that
    /// heeds its stop signal ends soon; a stubborn one at its SIGKILL.
    func expire(_ job: Job, reason: ExpiryReason, by stopBy: MonotonicInstant) {
        // Not exec'd yet (a stalled start, `start`): it is stopped, or not run, once it has.
        guard running[job.runID] != nil, job.startedAt != nil else { return }
        let deadline = max(loop.now, host.clock.simTime(of: stopBy))
        let at = job.stubborn ? deadline + 2_000_000 : min(loop.now + loop.random.nanos(0.01...0.3), deadline)
        // Already ending: only an earlier deadline (the fence's, after the drain's) counts.
        if job.expiry != nil {
            guard let endsAt = job.endsAt, at < endsAt else { return }
        } else {
            job.expiry = reason
        }
        job.endsAt = at
        job.token += 1
        let token = job.token
        loop.schedule(at: at) { [weak self, weak job] in
            guard let self, let job, job.token == token, self.host.alive else { return }
            self.end(job, outcome: .expired)
        }
    }

    /// The fence, as JobEngine.fenceFleet: what runs is stopped by `stopBy`, what waits
    /// holding a claim never starts.
    func fence(stopBy: MonotonicInstant) {
        for job in running.values.sorted(by: { $0.runID.value < $1.runID.value }) { expire(job, reason: .fleetLeaseLost, by: stopBy) }
        let dropped = waiting.filter { $0.claim != nil }
        waiting.removeAll { $0.claim != nil }
        for job in dropped { notStarted(job, .cancelled) }
    }

    /// The drain: nothing new starts, what waits is cancelled, what runs has `grace`, then
    /// its expiry sequence; `onIdle` once nothing runs.
    func drain(grace: Int64, idle: @escaping () -> Void) {
        accepting = false
        onIdle = idle
        let cancelled = waiting
        waiting.removeAll()
        for job in cancelled { notStarted(job, .cancelled) }
        guard !running.isEmpty || !claiming.isEmpty else { return idle() }
        loop.after(grace) { [weak self] in
            guard let self, self.host.alive else { return }
            let stopBy = self.host.clock.now + .seconds(1)
            for job in self.running.values.sorted(by: { $0.runID.value < $1.runID.value }) { self.expire(job, reason: .shutdown, by: stopBy) }
        }
    }

    var idle: Bool { running.isEmpty && claiming.isEmpty }

    func stopStarting() {
        accepting = false
    }

    /// The daemon and its jobs killed: nothing ends, nothing is told.
    func crash() {
        for job in running.values { job.token += 1 }
        running.removeAll()
        waiting.removeAll()
        claiming.removeAll()
    }
}
