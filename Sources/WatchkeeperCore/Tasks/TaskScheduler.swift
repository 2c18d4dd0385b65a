import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The periodic task subsystem: one timer per scheduled task, the overlap policy,
/// dependencies (`after`), catch-up of missed runs, and the run history the dump shows.
/// Runs on the job engine's queue and asks the engine directly what runs; retries,
/// max_jobs and records are the engine's.
// @unchecked Sendable: confined to the jobs queue, the engine's (`apply`, `trigger` and `stop` assert it).
public final class TaskScheduler: DumpContributor, @unchecked Sendable {
    /// Confined to the jobs queue.
    // @unchecked Sendable: confined to the jobs queue, with its scheduler.
    final class ScheduledTask: @unchecked Sendable {
        var settings: TaskSettings
        /// One timer for the task's life, re-armed for every fire, so its count in the
        /// dump is the task's number of fires.
        var timer: RegisteredTimer?
        /// Monotonic nanoseconds every = "…" fires are counted from (drift-free).
        var anchor = MonotonicInstant(nanoseconds: 0)
        var nextFire: (monotonic: MonotonicInstant?, wall: WallTime)?
        var zone: TimeZoneRules?
        /// overlap = "queue" or "replace": one run waits for the current one.
        /// The run that starts when the current one ends (`overlap = "queue"` or
        /// `"replace"`), with the run ID it was given when it was asked for.
        var runAfterCurrent: (scheduledAt: WallTime, runID: RunID)?
        var skipStreak = 0
        /// A run that is due but waits for the tasks in `after` (see `dependenciesUnmet`).
        var held: (runID: RunID, subject: JobSubject, waitingFor: Set<String>)?
        var lastOutcome: RunOutcome?
        /// The wall-clock second of the last cron fire: after the clock is set back, the
        /// same instant does not fire twice (TaskScheduler+ClockChanges.swift).
        var lastCronFire: Int64?
        /// What the timer does when it fires: the schedule's next step.
        var onFire: (() -> Void)?
        var history: [RunRecord] = []
        var totals: [RunOutcome: UInt64] = [:]

        init(settings: TaskSettings) {
            self.settings = settings
        }

        var key: JobKey { JobKey(.task, settings.name) }

        var group: JobGroup {
            // overlap = "allow" may run max_concurrent at once; every other policy one.
            JobGroup(key: key, settings: settings.job, limit: settings.overlap == .allow ? settings.maxConcurrent : 1,
                     retry: settings.retry, retryExpired: settings.retryExpired, fleet: settings.fleet == .one)
        }
    }

    public let queue: SubsystemQueue
    let context: JobContext
    /// The daemon's; the scheduler runs on its queue.
    let engine: any TaskEngine
    var logger: Logger { context.logger }
    // Confined to `queue`.
    var tasks: [String: ScheduledTask] = [:]
    var order: [String] = []
    private var machineSeed: UInt64 = 0
    /// The one writer of <state_dir>/watchkeeper.sqlite3, which keeps the task state and
    /// history (nil in unit tests: nothing is kept).
    let stateStore: StateStore?
    /// The task state as the scheduler reads it at start-up and reload: a read-only
    /// connection of this queue's own; nil when the file could not be opened (the daemon
    /// runs on, without catch-up, and says so in the dump).
    var reader: StateReader?
    var clockWatcher: ClockChangeWatcher?
    /// This host in the fleet, when `[cluster]` is configured, and the decisions about
    /// fleet tasks' fires (TaskScheduler+Fleet.swift).
    public let cluster: FleetMember?
    private(set) var fleet: FleetFires?
    var storeProblem: String?
    static let historyLength = 10

    public init(engine: any TaskEngine, store: StateStore? = nil, cluster: FleetMember? = nil) {
        self.queue = engine.queue
        self.context = engine.context
        self.engine = engine
        self.stateStore = store
        self.cluster = cluster
        machineSeed = Self.machineSeed()
        fleet = cluster.map { FleetFires(member: $0, owner: self, logger: logger) }
    }

    public var dumpSectionName: String { "tasks" }
    public var dumpQueue: SubsystemQueue { queue }

    // MARK: Configuration

    /// First start and every reload: unchanged tasks keep their timers and anchors,
    /// changed ones are re-armed, removed ones stop being scheduled (a run in progress
    /// finishes on its own), new ones are armed.
    public func apply(_ settings: [TaskSettings], isStart: Bool, stateDirectory: String) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        if isStart {
            openStore(directory: stateDirectory)
            watchClockChanges()
        }
        let names = Set(settings.map(\.name))
        for (name, task) in tasks where !names.contains(name) {
            disarm(task)
            task.timer?.cancel()
            task.timer = nil
            tasks[name] = nil
            if let held = task.held {
                task.held = nil
                engine.recordNotRun(JobEngine.notRunRecord(task.key, runID: held.runID, subject: held.subject, outcome: .cancelled,
                                                           detail: "cancelled: the task was removed by a reload"), key: task.key, subject: held.subject)
            }
            engine.remove(task.key, reason: "the task was removed by a reload")
            logger.info("task \(name) removed; a run in progress finishes on its own")
        }
        var startNow: [ScheduledTask] = []
        for new in settings {
            if let existing = tasks[new.name] {
                if existing.settings == new { continue }
                disarm(existing)
                existing.settings = new
                engine.configure(existing.group)
                arm(existing, now: .now)
                logger.info("task \(new.name) changed; next run \(describeNext(existing))")
            } else {
                let task = ScheduledTask(settings: new)
                tasks[new.name] = task
                engine.configure(task.group)
                restoreHistory(task)
                arm(task, now: .now)
                if new.runOnStart && isStart { startNow.append(task) }
            }
        }
        order = settings.map(\.name)
        configureFleet()
        // Only once every task is known, so `after` sees the tasks listed later too.
        for task in startNow {
            fire(task, scheduledAt: .now(), reason: "run_on_start")
        }
        if isStart {
            for name in order {
                if let task = tasks[name], task.settings.persistent, !task.settings.runOnStart { catchUp(task) }
            }
        }
    }

    /// Manual runs (and, later, the control interface): starts the task now, under its
    /// overlap policy. The run ID, or why it could not start.
    public func trigger(task name: String, fleet: Bool = false) -> Result<String, TriggerError> {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard let task = tasks[name] else { return .failure(.unknownTask(name)) }
        if fleet {
            guard task.settings.fleet == .one, cluster != nil else { return .failure(.notFleet(name)) }
            // Whole milliseconds: the instant names the fire's key.
            let now = WallTime.now()
            let instant = WallTime(secondsSinceEpoch: now.secondsSinceEpoch, nanoseconds: now.nanoseconds / 1_000_000 * 1_000_000)
            guard let runID = fireFleet(task, scheduledAt: instant, reason: "trigger-fleet") else {
                return .failure(.notStarted(name, policy: task.settings.overlap))
            }
            return .success(runID)
        }
        guard let runID = fire(task, scheduledAt: .now(), reason: "trigger") else {
            return .failure(.notStarted(name, policy: task.settings.overlap))
        }
        return .success(runID)
    }

    /// Cancels a run that has not started yet (waiting for a `max_jobs` slot or for its
    /// dependencies). False if it already started or is unknown.
    public func cancel(runID text: String) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard let runID = RunID(text) else { return false }
        if engine.cancel(runID: runID, detail: "cancelled before it started") { return true }
        for task in tasks.values {
            if let queued = task.runAfterCurrent, queued.runID == runID {
                task.runAfterCurrent = nil
                let subject = JobSubject.schedule(scheduledAt: queued.scheduledAt)
                let record = JobEngine.notRunRecord(task.key, runID: runID, subject: subject, outcome: .cancelled, detail: "cancelled before it started")
                engine.recordNotRun(record, key: task.key, subject: subject)
                task.history.append(record)
                task.totals[.cancelled, default: 0] += 1
                persist(.taskRun(StoredRun(record)))
                return true
            }
            guard let held = task.held, held.runID == runID else { continue }
            task.held = nil
            let record = JobEngine.notRunRecord(task.key, runID: runID, subject: held.subject, outcome: .cancelled, detail: "cancelled before it started")
            engine.recordNotRun(record, key: task.key, subject: held.subject)
            finished(JobCompletion(key: task.key, subject: held.subject, records: [record]), task: task)
            return true
        }
        return false
    }

    public enum TriggerError: Error, Equatable, CustomStringConvertible {
        case unknownTask(String)
        case notStarted(String, policy: OverlapPolicy)
        case notFleet(String)

        public var description: String {
            switch self {
            case .unknownTask(let name): return "unable to run task \(name): no such task"
            case .notStarted(let name, let policy): return "unable to run task \(name) now: a run is in progress and overlap = \"\(policy.rawValue)\""
            case .notFleet(let name): return "unable to run task \(name) through the fleet: it is not a fleet = \"one\" task of a [cluster]"
            }
        }
    }

    /// The drain: no new runs; runs held for their dependencies are cancelled.
    public func stop() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        for task in tasks.values {
            disarm(task)
            task.timer?.cancel()
            task.timer = nil
            if let held = task.held {
                task.held = nil
                engine.recordNotRun(JobEngine.notRunRecord(task.key, runID: held.runID, subject: held.subject, outcome: .cancelled,
                                                           detail: "cancelled: the daemon is stopping"), key: task.key, subject: held.subject)
            }
        }
    }

    // MARK: Timers

    private func arm(_ task: ScheduledTask, now: MonotonicInstant) {
        let offset = jitterOffset(for: task.settings)
        switch task.settings.schedule {
        case .manual:
            task.nextFire = nil
            return
        case .every(let interval) where task.settings.fleet == .one && cluster != nil:
            scheduleFleetEvery(task, interval: interval, after: WallTime.now())
        case .every(let interval):
            task.anchor = now + offset
            scheduleEvery(task, interval: interval, after: now)
        case .cron(_, let timezone), .calendar(_, let timezone):
            do {
                task.zone = try TimeZoneRules.named(timezone)
            } catch {
                logger.error("task \(task.settings.name): \(error); using UTC")
                task.zone = TimeZoneRules.utc
            }
            scheduleCron(task, after: WallTime.now())
        }
    }

    /// Stops the task's timer from firing; the timer itself stays for the next arm.
    private func disarm(_ task: ScheduledTask) {
        task.timer?.schedule(at: .distantFuture)
        task.nextFire = nil
    }

    /// The next k·interval after `now`, counted from the anchor: a late or long run does
    /// not shift later fires.
    private func scheduleEvery(_ task: ScheduledTask, interval: Duration, after now: MonotonicInstant) {
        let next: MonotonicInstant
        if now < task.anchor {
            // The anchor is "time zero" (start plus the task's jitter): the first fire is a
            // whole interval after it, so jitter delays the first run too.
            next = task.anchor + max(interval, .nanoseconds(1))
        } else {
            // Whole intervals on the anchor's grid, in integer nanoseconds.
            let step = UInt64(max(1, interval.nanosecondsClamped))
            let periods = (now.nanoseconds - task.anchor.nanoseconds) / step + 1
            next = task.anchor + .nanoseconds(Int64(clamping: periods &* step))
        }
        let wallNow = WallTime.now()
        let delta = max(.zero, next - .now)
        task.nextFire = (next, wallNow.adding(nanoseconds: delta.nanosecondsClamped))
        setTimer(task, target: "every \(interval.compactDescription)") { [weak self] in
            guard let self else { return }
            let scheduled = task.nextFire?.wall ?? .now()
            self.fire(task, scheduledAt: scheduled, reason: "schedule")
            self.scheduleEvery(task, interval: interval, after: max(.now, next))
        }
        task.timer?.schedule(at: next.dispatchTime)
    }

    func scheduleCron(_ task: ScheduledTask, after: WallTime) {
        let schedule = task.settings.schedule
        guard schedule.isWallClock, let zone = task.zone else { return }
        guard let fireSeconds = schedule.nextFire(after: after.secondsSinceEpoch, in: zone) else {
            logger.warning("task \(task.settings.name): \(schedule.wallClockDescription) never matches again; the task will not run")
            task.nextFire = nil
            return
        }
        let jitter = jitterOffset(for: task.settings)
        let target = WallTime(secondsSinceEpoch: fireSeconds, nanoseconds: 0).adding(nanoseconds: jitter.nanosecondsClamped)
        task.nextFire = (nil, target)
        setTimer(task, target: schedule.wallClockDescription) { [weak self] in
            guard let self else { return }
            let now = WallTime.now()
            // The wall clock may have been set back since the timer was armed: not due yet.
            if now < target.adding(nanoseconds: -1_000_000_000) {
                self.scheduleCron(task, after: WallTime(secondsSinceEpoch: now.secondsSinceEpoch - 1, nanoseconds: 0))
                return
            }
            task.lastCronFire = fireSeconds
            self.fire(task, scheduledAt: target, reason: "schedule")
            self.scheduleCron(task, after: WallTime(secondsSinceEpoch: max(fireSeconds, now.secondsSinceEpoch), nanoseconds: 0))
        }
        task.timer?.schedule(wallDeadline: DispatchWallTime(timespec: timespec(tv_sec: Int(target.secondsSinceEpoch), tv_nsec: Int(target.nanoseconds))))
    }

    /// The task's one timer, made on first use; a changed schedule changes what it does
    /// on the next fire, not the timer (its count of firings goes on).
    func setTimer(_ task: ScheduledTask, target: String, onFire: @escaping () -> Void) {
        task.onFire = onFire
        guard task.timer == nil else { return }
        task.timer = context.sources.makeTimer(owner: "task \(task.settings.name)", target: "schedule: \(target)", on: queue) { [weak task] in
            task?.onFire?()
        }
    }

    /// A delay that is random across tasks and machines but the same every time for one
    /// task on one machine, so restarts do not reshuffle it.
    /// A fleet task's is derived from its name alone: every host must compute the same
    /// instants (whole milliseconds, as fire keys name them).
    func jitterOffset(for settings: TaskSettings) -> Duration {
        guard settings.jitter > .zero else { return .zero }
        if settings.fleet == .one { return FleetJitter.offset(for: settings) }
        var hash = machineSeed ^ 0xcbf2_9ce4_8422_2325
        for byte in settings.name.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return .nanoseconds(Int64(hash % UInt64(max(1, settings.jitter.nanosecondsClamped))))
    }

    private static func machineSeed() -> UInt64 {
        let text = (try? readSmallFile("/etc/machine-id")) ?? ""
        var hash: UInt64 = 0x8422_2325_cbf2_9ce4
        for byte in text.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return hash
    }

    // MARK: Runs

    /// Applies the overlap policy and submits a run. Returns its run ID if one was
    /// submitted, held for its dependencies, or queued behind the current run now.
    @discardableResult
    func fire(_ task: ScheduledTask, scheduledAt: WallTime, reason: String, runID given: RunID? = nil) -> String? {
        if task.settings.fleet == .one, cluster != nil, reason != "trigger" {
            return fireFleet(task, scheduledAt: scheduledAt, reason: reason)
        }
        let name = task.settings.name
        let active = engine.activeCount(of: task.key) + (task.held == nil ? 0 : 1)
        if active > 0 {
            switch task.settings.overlap {
            case .skip:
                recordSkip(task, scheduledAt: scheduledAt)
                return nil
            case .queue:
                guard task.runAfterCurrent == nil else {
                    recordSkip(task, scheduledAt: scheduledAt)
                    return nil
                }
                let runID = given ?? RunID.random()
                task.runAfterCurrent = (scheduledAt, runID)
                logger.info("task \(name) run \(runID): a run is in progress; this one (\(reason)) waits for it (overlap = \"queue\")")
                return runID.description
            case .replace:
                let runID = task.runAfterCurrent?.runID ?? given ?? RunID.random()
                task.runAfterCurrent = (scheduledAt, runID)
                engine.expire(task.key, reason: .replaced, by: nil)
                return runID.description
            case .allow:
                if active >= task.settings.maxConcurrent {
                    recordSkip(task, scheduledAt: scheduledAt)
                    return nil
                }
            }
        }
        if task.skipStreak > 0 {
            logger.notice("task \(name): runs again after skipping \(task.skipStreak) run(s) that overlapped the previous one")
            task.skipStreak = 0
        }
        persist(.taskScheduled(task: name, at: scheduledAt))
        let subject = JobSubject.schedule(scheduledAt: scheduledAt)
        let unmet = dependenciesUnmet(task, scheduledAt: scheduledAt)
        if !unmet.isEmpty {
            let runID = given ?? RunID.random()
            task.held = (runID, subject, unmet)
            logger.info("task \(name) run \(runID) waits for \(unmet.sorted().joined(separator: ", ")) to succeed (after = \(task.settings.after))")
            return runID.description
        }
        return submit(subject, task: task, runID: given).description
    }

    private func submit(_ subject: JobSubject, task: ScheduledTask, runID: RunID? = nil) -> RunID {
        engine.submit(task.key, subject: subject, runID: runID, replyOn: nil) { [weak self] completion in
            self?.finished(completion, task: task)
        }
    }

    /// The dependencies a run due at `scheduledAt` must wait for: those running, queued,
    /// retrying or due in the same instant (the same cycle), and those whose latest run
    /// did not succeed. A dependency idle since a successful run is met.
    private func dependenciesUnmet(_ task: ScheduledTask, scheduledAt: WallTime) -> Set<String> {
        var unmet: Set<String> = []
        for name in task.settings.after {
            guard let dependency = tasks[name] else { continue }
            let busy = engine.activeCount(of: dependency.key) > 0 || dependency.held != nil
            let dueNow = dependency.nextFire.map { $0.wall <= scheduledAt.adding(nanoseconds: 1_000_000_000) } ?? false
            if busy || dueNow || dependency.lastOutcome != .ok {
                unmet.insert(name)
            }
        }
        return unmet
    }

    /// A dependency's run ended for good (retries included): release the runs waiting
    /// for it, or cancel them when it failed.
    private func dependencyFinished(_ name: String, outcome: RunOutcome) {
        for task in tasks.values {
            guard var held = task.held, held.waitingFor.contains(name) else { continue }
            if outcome == .ok {
                held.waitingFor.remove(name)
                task.held = held.waitingFor.isEmpty ? nil : held
                if held.waitingFor.isEmpty {
                    logger.info("task \(task.settings.name) run \(held.runID): every task in after succeeded; starting")
                    _ = submit(held.subject, task: task, runID: held.runID)
                }
            } else if outcome != .skippedOverlap {
                task.held = nil
                let record = JobEngine.notRunRecord(task.key, runID: held.runID, subject: held.subject, outcome: .cancelled,
                                                    detail: "dependency \(name) did not succeed (\(outcome.rawValue))")
                engine.recordNotRun(record, key: task.key, subject: held.subject)
                finished(JobCompletion(key: task.key, subject: held.subject, records: [record]), task: task)
            }
        }
    }

    /// Logged once per streak, not per tick: a task that always overlaps would
    /// otherwise fill the journal.
    func recordSkip(_ task: ScheduledTask, scheduledAt: WallTime) {
        persist(.taskScheduled(task: task.settings.name, at: scheduledAt))
        task.skipStreak += 1
        task.totals[.skippedOverlap, default: 0] += 1
        guard task.skipStreak == 1 else { return }
        logger.notice("task \(task.settings.name): skipped the run scheduled at \(scheduledAt.iso8601) because the previous one is still running (overlap = \"\(task.settings.overlap.rawValue)\"); further skips are counted, not logged",
                      metadata: [JournalFields.messageIDKey: .string(MessageID.runSkipped.rawValue), "task": .string(task.settings.name),
                                 "outcome": .string(RunOutcome.skippedOverlap.rawValue), "scheduled_at": .string(scheduledAt.iso8601)])
    }

    /// Every attempt's record goes to the history; dependents and a queued run go on once
    /// the last attempt is over.
    func finished(_ completion: JobCompletion, task: ScheduledTask, host: String? = nil) {
        for record in completion.records {
            task.history.append(record)
            task.totals[record.outcome, default: 0] += 1
            var stored = StoredRun(record)
            stored.host = host
            persist(.taskRun(stored))
        }
        if task.history.count > Self.historyLength { task.history.removeFirst(task.history.count - Self.historyLength) }
        task.lastOutcome = completion.final.outcome
        guard tasks[task.settings.name] === task else { return }
        dependencyFinished(task.settings.name, outcome: completion.final.outcome)
        if let waiting = task.runAfterCurrent, engine.activeCount(of: task.key) == 0 {
            task.runAfterCurrent = nil
            fire(task, scheduledAt: waiting.scheduledAt, reason: "queued", runID: waiting.runID)
        }
    }
}

extension WallTime {
    func adding(nanoseconds: Int64) -> WallTime {
        let total = Int64(self.nanoseconds) + nanoseconds
        var seconds = secondsSinceEpoch + total / 1_000_000_000
        var nanos = total % 1_000_000_000
        if nanos < 0 {
            nanos += 1_000_000_000
            seconds -= 1
        }
        return WallTime(secondsSinceEpoch: seconds, nanoseconds: Int32(nanos))
    }
}

/// A fleet task's jitter: from its name alone, in whole milliseconds, the same on every host.
enum FleetJitter {
    static func offset(for settings: TaskSettings) -> Duration {
        guard settings.jitter > .zero else { return .zero }
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in settings.name.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return .milliseconds(Int64(hash % UInt64(max(1, settings.jitter.nanosecondsClamped / 1_000_000))))
    }
}
