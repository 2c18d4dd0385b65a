import CWatchkeeperSystem
import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The daemon's one job engine, on its own queue: it alone holds `max_jobs`, the waiting
/// line and priorities, each group's limit, retries with backoff, the run record and its
/// journal entry, and whether new work is accepted (the drain). The scheduler lives on the
/// same queue and asks it directly; the watcher submits from its own queue and gets its
/// completions back there. Nobody else keeps a count of what runs.
// @unchecked Sendable: confined to the jobs queue (`queue`; its entry points assert it).
public final class JobEngine: DumpContributor, @unchecked Sendable {
    typealias Reply = (queue: SubsystemQueue?, handler: (JobCompletion) -> Void)

    public let queue: SubsystemQueue
    public let context: JobContext
    var logger: Logger { context.logger }
    // Confined to `queue`.
    public private(set) var maxJobs: Int
    /// Each group, with its parsed command and shared environment once one started.
    private var groups = ConfiguredGroups()
    var line = JobLine<Waiting>()
    private var active = ActiveRuns()
    /// Work waiting for its next attempt.
    private let retries: JobRetries<Waiting>
    /// Processes a finished job left in its group, until the kill that ends them.
    let lingering: LingeringKills
    private(set) var accepting = true
    private var pumping = false
    /// Every record journaled and counted, and every submission's handed back.
    private let completions: JobCompletions
    /// on_failure and on_success hooks started or waiting for their run's on_expire to end.
    let hooks: JobHooks
    private(set) var startedTotal: UInt64 = 0
    /// Jobs not started because their file was renamed, removed or replaced while they waited.
    private(set) var filesGoneBeforeStart: UInt64 = 0
    /// Gives memory back a moment after a burst.
    private let burstTrim: BurstTrim
    /// Starts held back while descriptors or processes are short (StartHold.swift).
    private let heldStarts: HeldStarts
    var drain: EngineDrain?
    /// Called after anything a status line shows changed (runs started, ended, progress).
    public var onChange: (() -> Void)?
    /// Called on the jobs queue a moment after a burst is over, for the owners of other
    /// caches (the file ledger) to give their memory back too.
    public var onBurstOver: (() -> Void)?
    /// Told of every group configured, first attempt started and record journaled.
    public let metrics: JobMetrics?
    /// Fleet jobs' starts, with `[cluster]` (Cluster/FleetStarts.swift).
    public let fleetStarts: (any FleetJobStarts)?
    /// Fleet jobs whose slot waits for their claim's answer (the line counts them running).
    private var claiming: Set<RunID> = []

    public init(context: JobContext, maxJobs: Int, fleetStarts: (any FleetJobStarts)? = nil, metrics: JobMetrics? = nil) {
        self.queue = context.queue
        self.context = context
        self.maxJobs = max(1, maxJobs)
        self.fleetStarts = fleetStarts
        self.metrics = metrics
        self.retries = JobRetries(queue: context.queue, sources: context.sources)
        self.lingering = LingeringKills(queue: context.queue, sources: context.sources)
        self.hooks = JobHooks(logger: context.logger)
        self.completions = JobCompletions(sink: context.sink, metrics: metrics, fleetStarts: fleetStarts)
        self.burstTrim = BurstTrim(queue: context.queue, sources: context.sources)
        self.heldStarts = HeldStarts(queue: context.queue, sources: context.sources, logger: context.logger)
    }

    public var dumpSectionName: String { "jobs" }
    public var dumpQueue: SubsystemQueue { queue }

    // MARK: Configuration

    /// Raising `max_jobs` starts waiting jobs at once.
    public func setMaxJobs(_ value: Int) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        maxJobs = max(1, value)
        pump()
    }

    /// A task or rule is new or changed: waiting work moves to the new settings.
    public func configure(_ group: JobGroup) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        if let old = groups[group.key], old != group, line.waiting(of: group.key) > 0 {
            logger.notice("\(group.key) changed: its \(line.waiting(of: group.key)) waiting job(s) will run with the new settings")
        }
        groups.set(group)
        metrics?.prepare(group.key)
        line.configure(group.key, limit: group.limit, lane: group.settings.priority.rank)
        pump()
    }

    /// A rule's job shape changed (batching on or off): its waiting work, and work waiting
    /// for a retry, is taken back without a record and handed to the caller, which
    /// submits the files again in the new shape. Done in the same turn as `configure`, so
    /// nothing of the old shape starts with the new settings (a `.file` subject run by a
    /// batch command would get an empty `{paths}`).
    public func reshape(_ group: JobGroup) -> [JobSubject] {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        let waiting = line.removeWaiting(of: group.key)
        let retried = retries.take { key, _ in key == group.key }
        configure(group)
        return waiting.map(\.subject) + retried.map(\.element.subject)
    }

    /// A task or rule was removed (or changed so much that its waiting work no longer
    /// belongs to it): what waits or waits for a retry is cancelled with a record each;
    /// running jobs finish on their own.
    public func remove(_ key: JobKey, reason: String) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        let waiting = line.removeWaiting(of: key)
        let retried = retries.take { retryKey, _ in retryKey == key }
        if !waiting.isEmpty || !retried.isEmpty {
            logger.notice("\(key): \(waiting.count + retried.count) job(s) not started yet are cancelled: \(reason)")
        }
        for item in waiting + retried.map(\.element) {
            completions.cancel(key, item, detail: "cancelled: \(reason)", inBulk: true)
        }
        groups.remove(key)
        line.forget(key)
        metrics?.forget(key)
    }

    // MARK: Submitting

    /// Queues a job; `completion` runs once, on `replyOn` (or on this queue when nil),
    /// with every attempt's record. Refused work (the daemon is stopping, the group is
    /// unknown) completes at once as cancelled.
    @discardableResult
    public func submit(_ key: JobKey, subject: JobSubject, runID: RunID? = nil, replyOn: SubsystemQueue? = nil,
                       completion: @escaping (JobCompletion) -> Void) -> RunID {
        submit(key, Waiting(runID: runID ?? .random(), subject: subject, attempt: 1, earlier: [], reply: (replyOn, completion), submittedAt: .now))
    }

    /// A fleet fire claimed before it was submitted: it starts only under that claim's lease.
    @discardableResult
    public func submitClaimed(_ key: JobKey, subject: JobSubject, runID: RunID, claim: FleetClaimHold,
                              completion: @escaping (JobCompletion) -> Void) -> RunID {
        submit(key, Waiting(runID: runID, subject: subject, attempt: 1, earlier: [], reply: (nil, completion), submittedAt: .now).claimed(claim))
    }

    private func submit(_ key: JobKey, _ item: Waiting) -> RunID {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard accepting, groups[key] != nil else {
            let why = accepting ? "cancelled: \(key) is not configured" : "cancelled: the daemon is stopping"
            completions.cancel(key, item, detail: why)
            return item.runID
        }
        line.append(item, to: key)
        pump()
        return item.runID
    }

    /// The record of work that never became a job (a run held for its dependencies, a
    /// missed run, files left in a settle window when their rule went away): journaled
    /// like any other.
    public func recordNotRun(_ record: RunRecord, key: JobKey, subject: JobSubject) {
        recordNotRun(record, key: key, subject: subject, inBulk: false)
    }

    /// `inBulk`: one of many ended together, which a line with their count already says.
    public func recordNotRun(_ record: RunRecord, key: JobKey, subject: JobSubject, inBulk: Bool) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        completions.journal(record, key: key, subject: subject, inBulk: inBulk)
    }

    public static func notRunRecord(_ key: JobKey, runID: RunID, subject: JobSubject, outcome: RunOutcome, detail: String) -> RunRecord {
        .notStarted(key, runID: runID, attempt: 1, subject: subject, outcome: outcome, detail: detail)
    }

    /// Cancels a job that has not started (waiting, or waiting for a retry).
    @discardableResult
    public func cancel(runID: RunID, detail: String = "cancelled before it started") -> Bool {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        if let retry = retries.take(runID: runID) {
            completions.cancel(retry.key, retry.element, detail: detail)
            return true
        }
        guard let (key, item) = line.removeFirstWaiting(where: { $0.runID == runID }) else { return false }
        completions.cancel(key, item, detail: detail)
        return true
    }

    /// The fence (FleetStarts): every running fleet job ends through its expiry sequence by
    /// `stopBy`; fleet jobs that hold a claim and wait (for a slot, a retry) never start, and
    /// their claims are released with their completions.
    func fenceFleet(stopBy: MonotonicInstant) {
        let fleet = groups.fleetKeys
        for run in active.runs(where: fleet.contains) { run.expire(.fleetLeaseLost, by: stopBy) }
        let retried = retries.take { key, item in fleet.contains(key) && item.claim != nil }
        let dropped = fleet.flatMap { key in line.removeWaiting(of: key) { $0.claim != nil }.map { (key, $0) } } + retried.map { ($0.key, $0.element) }
        for (key, item) in dropped {
            completions.cancel(key, item, detail: "cancelled: not started, as this host could not renew its etcd lease in time; its claim is released")
        }
    }

    /// Ends the running jobs of a group early (overlap = "replace").
    public func expire(_ key: JobKey, reason: ExpiryReason, by deadline: MonotonicInstant? = nil) {
        for run in runs(of: key) { run.expire(reason, by: deadline) }
    }

    /// Ends one running job early through its expiry sequence (on_expire first). False if no
    /// job with that run ID is running: it never started, or has already finished.
    public func expire(runID: RunID, reason: ExpiryReason) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard let run = active.run(runID) else { return false }
        if run.phase == .running { run.expire(reason) }
        return true
    }

    func runs(of key: JobKey) -> [JobRun] { active.runs { $0 == key } }

    /// Running, waiting, or waiting for a retry: what an overlap policy counts as busy.
    public func activeCount(of key: JobKey) -> Int {
        line.running(of: key) + line.waiting(of: key) + retries.count(of: key)
    }

    public var runningCount: Int { active.count }
    public var waitingCount: Int { line.waitingCount }

    /// For STATUS=: "backup 42%, import (importing batch 7)".
    public var runningSummary: String { active.summary }

    // MARK: Running

    func pump() {
        guard !pumping else { return }
        pumping = true
        defer { pumping = false }
        while accepting, heldStarts.allowsStarts, line.runningCount < maxJobs, let (key, item) = line.startNext() {
            start(key, item)
        }
        burstTrim.observe(waiting: line.waitingCount, idle: active.isEmpty) { [weak self] in self?.onBurstOver?() }
        onChange?()
    }

    private func start(_ key: JobKey, _ item: Waiting) {
        guard let group = groups[key] else {
            line.finished(key)
            completions.cancel(key, item, detail: "cancelled: \(key) was removed")
            return
        }
        guard group.fleet, let fleet = fleetStarts else { return launch(key, item, group) }
        let waiting = UncheckedSendable(item)
        fleetStart(key, item, fleet.beforeStart(FleetJob(key, item.subject, claim: item.claim), runID: item.runID) { [weak self] answer in
            guard let self, self.claiming.remove(waiting.value.runID) != nil else { return }
            self.fleetStart(key, waiting.value, answer)
            self.pump()
        })
    }

    /// What FleetStarts decided for a fleet job a slot came to: it starts, its slot waits for
    /// its claim's answer, or the slot is free again.
    private func fleetStart(_ key: JobKey, _ item: Waiting, _ decision: FleetStartDecision) {
        switch decision {
        case .start(let claim, let execBy) where accepting:
            if let group = groups[key] { return launch(key, item.claimed(claim), group, execBy: execBy) }
            fleetStart(key, item.claimed(claim), .notStarted(.cancelled, detail: "cancelled: \(key) was removed"))
        case .start(let claim, _):
            fleetStart(key, item.claimed(claim), .notStarted(.cancelled, detail: "cancelled: the daemon is stopping"))
        case .claiming:
            claiming.insert(item.runID)
        case .notStarted(let outcome, let detail):
            line.finished(key)
            completions.notStartedByFleet(key, item, outcome: outcome, detail: detail)
        }
    }

    /// `execBy`: a fleet job's fence point; its process does not exec after it.
    private func launch(_ key: JobKey, _ item: Waiting, _ group: JobGroup, execBy: MonotonicInstant? = nil) {
        guard let item = item.checkedBeforeStart(key, logger: logger) else {
            line.finished(key)
            filesGoneBeforeStart += 1
            completions.cancel(key, item, detail: "cancelled: the file was renamed, removed or replaced before its job started")
            return
        }
        var request = JobRequest(key: key, runID: item.runID.description, settings: group.settings, subject: item.subject,
                                 attempt: item.attempt, submittedAt: item.submittedAt)
        request.plan = groups.plan(for: group, context: context)
        request.nothingElseWaiting = line.waitingCount == 0
        request.execDeadline = execBy
        let entry = Active(key: key, waiting: item)
        active.insert(entry)
        let run = JobRun(request: request, id: item.runID, context: context, owner: self)
        entry.run = run
        switch run.start() {
        case .started, .failed:
            startedTotal += 1
            // Once per submission: not again for a job put back after its child ran short.
            if item.attempt == 1 && !item.startCounted { metrics?.started(key, subject: item.subject) }
            heldStarts.started()
        case .shortOfResources(let cause):
            active.remove(item.runID)
            line.putBack(item, to: key)
            heldStarts.shortage(cause, waiting: line.waitingCount) { [weak self] in self?.pump() }
        }
    }

    /// `.shortOfResources` learnt after the start was counted: the count is taken back
    /// and the job waits as if its spawn had thrown. Once the engine has stopped
    /// accepting, nothing would start it again: it is cancelled as the waiting were.
    private func shortOfResources(_ runID: RunID, cause: SpawnError) {
        guard let entry = active.remove(runID) else { return }
        startedTotal -= 1
        guard accepting else {
            line.finished(entry.key)
            completions.cancel(entry.key, entry.waiting, detail: "cancelled: the daemon is stopping")
            drain?.jobEnded(self)
            return
        }
        var item = entry.waiting
        item.startCounted = true
        line.putBack(item, to: entry.key)
        heldStarts.shortage(cause, waiting: line.waitingCount) { [weak self] in self?.pump() }
    }

    private func ended(_ runID: RunID, record: RunRecord) {
        guard let entry = active.remove(runID) else { return }
        line.finished(entry.key)
        let item = entry.waiting
        let records = item.earlier + [record]
        completions.journal(record, key: entry.key, subject: item.subject)
        if accepting, let retry = groups[entry.key]?.retry(after: record) {
            scheduleRetry(entry.key, item, records: records, retry: retry)
        } else {
            completions.deliver(entry.key, item, records: records)
            startHook(after: record, of: entry.run)
        }
        drain?.jobEnded(self)
        // Its descriptors are free again: a held start may try.
        heldStarts.release()
        pump()
    }

    /// After a run's last record: its on_failure or on_success, if it has one. Once the
    /// drain expires what runs, no hook starts any more: shutdown is never held up by one.
    private func startHook(after record: RunRecord, of run: JobRun?) {
        guard let run else { return }
        hooks.start(after: record, of: run, mayStart: { [weak self] in self?.hooksMayStart ?? false }) { [weak self] kind, result in
            guard let self else { return }
            self.metrics?.hookEnded(kind, result: result)
            self.drain?.jobEnded(self)
            self.onChange?()
        }
    }

    private var hooksMayStart: Bool { drain == nil || drain?.phase == .waiting }

    private func scheduleRetry(_ key: JobKey, _ item: Waiting, records: [RunRecord], retry: RetryPolicy) {
        let record = records[records.count - 1]
        let delay = retry.delay(afterAttempt: record.attempt)
        let next = item.nextAttempt(after: records)
        let what = item.subject.summary.map { " for \(LineEscaping.escaped($0))" } ?? ""
        logger.notice("\(key) run \(record.runID)\(what): attempt \(record.attempt) of \(retry.attempts) \(record.outcome.rawValue); retrying in \(delay.compactDescription) as run \(next.runID)")
        retries.schedule(next, key: key, runID: next.runID, attempt: next.attempt, after: delay) { [weak self] key, next in
            guard let self else { return }
            guard self.accepting, self.groups[key] != nil else {
                self.completions.cancel(key, next, detail: "cancelled: \(key) was removed")
                return
            }
            self.line.append(next, to: key)
            self.pump()
        }
    }

    var activeRuns: [(key: JobKey, run: JobRun?)] { active.all }

    // MARK: Stopping

    /// Nothing new starts; what waits, or waits for a retry, is cancelled with a record.
    public func stopAccepting() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard accepting else { return }
        accepting = false
        context.pipeReserve.stopPreparing()
        let waiting = line.removeAllWaiting()
        let retried = retries.take()
        if !waiting.isEmpty || !retried.isEmpty {
            logger.notice("stopping: \(waiting.count) waiting job(s) and \(retried.count) retry(ies) are cancelled")
        }
        for (key, item) in waiting + retried {
            completions.cancel(key, item, detail: "cancelled: the daemon is stopping", inBulk: true)
        }
    }

    // MARK: Dump

    public func describeForDump() -> DumpValue {
        let now = MonotonicInstant.now
        let keys = Set(groups.keys).union(completions.totals.groups).sorted { ($0.kind.rawValue, $0.name) < ($1.kind.rawValue, $1.name) }
        let fields: [DumpField] = [
            .init("max_jobs", .int(Int64(maxJobs))),
            .init("accepting", .bool(accepting)),
            .init("running_total", .int(Int64(active.count))),
            .init("waiting_total", .int(Int64(line.waitingCount))),
            .init("retrying_total", .int(Int64(retries.count))),
            .init("fleet_claims_waiting", .int(Int64(claiming.count))),
            .init("lingering_groups", .int(Int64(lingering.count))),
            .init("started_since_start", .int(Int64(startedTotal))),
            .init("files_gone_before_start", .int(Int64(filesGoneBeforeStart))),
            // The process named wk-next-job that waits to become the next job (JobPipeReserve).
            .init("prepared_job_pid", context.pipeReserve.preparedPID.map { .int(Int64($0)) } ?? .null),
        ] + heldStarts.describe() + [
            .init("running", active.describe(now: now)),
            .init("waiting", .array(line.ordered(limit: 50).map { item in
                item.element.describe(item.key, priority: groups[item.key]?.settings.priority, now: now)
            })),
            .init("retrying", retries.describe(now: now)),
            .init("groups", .array(keys.map(describe(group:)))),
            .init("hooks_running", hooks.describeRunning(now: now)),
            .init("hooks", hooks.describeTotals()),
            .init("drain", drain?.describe(now: now) ?? .null),
        ]
        return .object(fields)
    }

    private func describe(group key: JobKey) -> DumpValue {
        .object([
            .init(key.kind.rawValue, .string(key.name)),
            .init("limit", groups[key].map { .int(Int64($0.limit)) } ?? .null),
            .init("running", .int(Int64(line.running(of: key)))),
            .init("waiting", .int(Int64(line.waiting(of: key)))),
            .init("outcomes", completions.totals.describe(key)),
        ])
    }
}

extension JobEngine: JobRunOwner {
    func runProgressed(_ run: JobRun) { onChange?() }
    /// A finished job's leftover processes get `stop_signal` from the run, then SIGKILL
    /// after `grace`; the drain waits for (or hastens) that kill.
    func run(_ run: JobRun, leftProcesses child: ChildProcess, grace: Duration) {
        lingering.linger(child, key: run.request.key, grace: grace) { [weak self] in
            guard let self else { return }
            self.drain?.jobEnded(self)
        }
    }
    func run(_ run: JobRun, ended record: RunRecord) { ended(run.id, record: record) }
    func run(_ run: JobRun, wasShortOfResources cause: SpawnError) { shortOfResources(run.id, cause: cause) }
}
