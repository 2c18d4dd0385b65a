import Dispatch
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// The periodic task subsystem: one timer per scheduled task, the overlap policy,
/// retries, and the run history the dump shows. Shares the tasks queue with the
/// runner, so a task's state and its runs are read and changed in one place.
public final class TaskScheduler: DumpContributor, @unchecked Sendable {
    /// Confined to the tasks queue.
    final class ScheduledTask: @unchecked Sendable {
        var settings: TaskSettings
        var timer: DispatchSourceTimer?
        /// Monotonic nanoseconds every = "…" fires are counted from (drift-free).
        var anchor: UInt64 = 0
        var nextFire: (monotonic: UInt64?, wall: WallTime)?
        var zone: TimeZoneRules?
        /// overlap = "queue" or "replace": one run waits for the current one.
        var runAfterCurrent: WallTime?
        var skipStreak = 0
        /// A run that is due but waits for the tasks in `after` (see `dependenciesUnmet`).
        var held: (request: JobRequest, waitingFor: Set<String>)?
        /// A failed run's retry is scheduled: its dependents keep waiting for it.
        var retryPending = false
        var lastOutcome: RunOutcome?
        var history: [RunRecord] = []
        var totals: [RunOutcome: UInt64] = [:]

        init(settings: TaskSettings) {
            self.settings = settings
        }
    }

    public let queue: SubsystemQueue
    private let context: JobContext
    /// Shared with the directory watcher: one runner, one `max_jobs`, for every job.
    let runner: JobRunner
    private var logger: Logger { context.logger }
    // Confined to `queue`.
    private var tasks: [String: ScheduledTask] = [:]
    private var order: [String] = []
    private var machineSeed: UInt64 = 0
    /// Task state and history in <state_dir>/watchkeeper.sqlite3; nil when it could not be
    /// opened (the daemon runs on, without catch-up, and says so in the dump).
    private var store: TaskStore?
    private var storeProblem: String?
    private var lastPersistenceWarning: String?
    var onChange: (() -> Void)?
    static let historyLength = 10

    public init(context: JobContext, work: WorkTracker, maxJobs: Int) {
        self.queue = context.queue
        self.context = context
        self.runner = JobRunner(context: context, work: work, maxJobs: maxJobs)
        runner.onChange = { [weak self] in self?.onChange?() }
        machineSeed = Self.machineSeed()
    }

    public var dumpSectionName: String { "tasks" }
    public var dumpQueue: SubsystemQueue { queue }

    // MARK: Configuration

    /// First start and every reload: unchanged tasks keep their timers and anchors,
    /// changed ones are re-armed, removed ones stop being scheduled (a run in progress
    /// finishes on its own), new ones are armed.
    public func apply(_ settings: [TaskSettings], maxJobs: Int, isStart: Bool, stateDirectory: String) {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        runner.maxJobs = maxJobs
        if isStart { openStore(directory: stateDirectory) }
        let names = Set(settings.map(\.name))
        for (name, task) in tasks where !names.contains(name) {
            disarm(task)
            tasks[name] = nil
            logger.info("task \(name) removed; a run in progress finishes on its own")
        }
        var startNow: [ScheduledTask] = []
        for new in settings {
            if let existing = tasks[new.name] {
                if existing.settings == new { continue }
                disarm(existing)
                existing.settings = new
                arm(existing, now: DispatchTime.now().uptimeNanoseconds)
                logger.info("task \(new.name) changed; next run \(describeNext(existing))")
            } else {
                let task = ScheduledTask(settings: new)
                tasks[new.name] = task
                restoreHistory(task)
                arm(task, now: DispatchTime.now().uptimeNanoseconds)
                if new.runOnStart && isStart { startNow.append(task) }
            }
        }
        order = settings.map(\.name)
        // Only once every task is known, so `after` sees the tasks listed later too.
        for task in startNow {
            fire(task, scheduledAt: .now(), attempt: 1, reason: "run_on_start")
        }
        if isStart {
            for name in order {
                if let task = tasks[name], task.settings.persistent, !task.settings.runOnStart { catchUp(task) }
            }
        }
    }

    /// Manual runs (and, later, the control interface): starts the task now, under its
    /// overlap policy. The run ID, or why it could not start.
    public func trigger(task name: String) -> Result<String, TriggerError> {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        guard let task = tasks[name] else { return .failure(.unknownTask(name)) }
        guard let runID = fire(task, scheduledAt: .now(), attempt: 1, reason: "trigger") else {
            return .failure(.notStarted(name, policy: task.settings.overlap))
        }
        return .success(runID)
    }

    /// Cancels a run that has not started yet (waiting for a `max_jobs` slot or for its
    /// dependencies). False if it already started or is unknown.
    public func cancel(runID: String) -> Bool {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        if runner.cancel(runID: runID) { return true }
        for task in tasks.values {
            guard let held = task.held, held.request.runID == runID else { continue }
            task.held = nil
            finished(JobRunner.cancelledRecord(held.request, detail: "cancelled before it started"), task: task)
            return true
        }
        return false
    }

    public enum TriggerError: Error, Equatable, CustomStringConvertible {
        case unknownTask(String)
        case notStarted(String, policy: OverlapPolicy)

        public var description: String {
            switch self {
            case .unknownTask(let name): return "unable to run task \(name): no such task"
            case .notStarted(let name, let policy): return "unable to run task \(name) now: a run is in progress and overlap = \"\(policy.rawValue)\""
            }
        }
    }

    /// The drain: no new runs; queued ones are cancelled.
    public func stop() {
        dispatchPrecondition(condition: .onQueue(queue.queue))
        for task in tasks.values {
            disarm(task)
            if let held = task.held {
                task.held = nil
                log(JobRunner.cancelledRecord(held.request, detail: "cancelled: the daemon is stopping"))
            }
        }
        runner.stopAccepting()
    }

    public var runningCount: Int { runner.runningCount }

    /// For STATUS=: "backup 42%, import (importing batch 7)".
    public var runningSummary: String {
        order.flatMap { name in runner.runs(named: name) }.prefix(3).map { run in
            var text = run.request.name
            if let progress = run.progress.progress { text += " \(Int(progress))%" }
            if let status = run.progress.status { text += " (\(status.prefix(40)))" }
            return text
        }.joined(separator: ", ")
    }

    // MARK: Timers

    private func arm(_ task: ScheduledTask, now: UInt64) {
        let offset = jitterOffset(for: task.settings)
        switch task.settings.schedule {
        case .manual:
            task.nextFire = nil
            return
        case .every(let interval):
            task.anchor = now + UInt64(offset.nanosecondsClamped)
            scheduleEvery(task, interval: interval, after: now)
        case .cron(_, let timezone):
            do {
                task.zone = try timezone.map { try TimeZoneRules.load(identifier: $0) } ?? TimeZoneRules.local()
            } catch {
                logger.error("task \(task.settings.name): \(error); using UTC")
                task.zone = TimeZoneRules.utc
            }
            scheduleCron(task, after: WallTime.now())
        }
    }

    private func disarm(_ task: ScheduledTask) {
        task.timer?.cancel()
        task.timer = nil
        task.nextFire = nil
    }

    /// The next k·interval after `now`, counted from the anchor: a late or long run does
    /// not shift later fires.
    private func scheduleEvery(_ task: ScheduledTask, interval: Duration, after now: UInt64) {
        let step = UInt64(max(1, interval.nanosecondsClamped))
        let next: UInt64
        if now < task.anchor {
            next = task.anchor
        } else {
            next = task.anchor + ((now - task.anchor) / step + 1) * step
        }
        let wallNow = WallTime.now()
        let delta = Int64(next - min(next, DispatchTime.now().uptimeNanoseconds))
        task.nextFire = (next, wallNow.adding(nanoseconds: delta))
        setTimer(task, target: "every \(interval.compactDescription)") { timer in
            timer.schedule(deadline: DispatchTime(uptimeNanoseconds: next))
        } onFire: { [weak self] in
            guard let self else { return }
            let scheduled = task.nextFire?.wall ?? .now()
            self.fire(task, scheduledAt: scheduled, attempt: 1, reason: "schedule")
            self.scheduleEvery(task, interval: interval, after: max(DispatchTime.now().uptimeNanoseconds, next))
        }
    }

    private func scheduleCron(_ task: ScheduledTask, after: WallTime) {
        guard case .cron(let expression, _) = task.settings.schedule, let zone = task.zone else { return }
        guard let fireSeconds = expression.nextFire(after: after.secondsSinceEpoch, in: zone) else {
            logger.warning("task \(task.settings.name): cron \"\(expression.description)\" never matches; the task will not run")
            task.nextFire = nil
            return
        }
        let jitter = jitterOffset(for: task.settings)
        let target = WallTime(secondsSinceEpoch: fireSeconds, nanoseconds: 0).adding(nanoseconds: jitter.nanosecondsClamped)
        task.nextFire = (nil, target)
        setTimer(task, target: "cron \(expression.description)") { timer in
            timer.schedule(wallDeadline: DispatchWallTime(timespec: timespec(tv_sec: Int(target.secondsSinceEpoch), tv_nsec: Int(target.nanoseconds))))
        } onFire: { [weak self] in
            guard let self else { return }
            let now = WallTime.now()
            // The wall clock may have been set back since the timer was armed: not due yet.
            if now < target.adding(nanoseconds: -1_000_000_000) {
                self.scheduleCron(task, after: WallTime(secondsSinceEpoch: now.secondsSinceEpoch - 1, nanoseconds: 0))
                return
            }
            self.fire(task, scheduledAt: target, attempt: 1, reason: "schedule")
            self.scheduleCron(task, after: WallTime(secondsSinceEpoch: max(fireSeconds, now.secondsSinceEpoch), nanoseconds: 0))
        }
    }

    private func setTimer(_ task: ScheduledTask, target: String, configure: (DispatchSourceTimer) -> Void, onFire: @escaping () -> Void) {
        task.timer?.cancel()
        task.timer = context.sources.startTimer("task \(task.settings.name): \(target)", on: queue, schedule: configure, handler: onFire)
    }

    /// A delay that is random across tasks and machines but the same every time for one
    /// task on one machine, so restarts do not reshuffle it.
    private func jitterOffset(for settings: TaskSettings) -> Duration {
        guard settings.jitter > .zero else { return .zero }
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
    /// submitted now.
    @discardableResult
    private func fire(_ task: ScheduledTask, scheduledAt: WallTime, attempt: Int, reason: String) -> String? {
        let name = task.settings.name
        let active = runner.runs(named: name).count + (runner.isPending(named: name) ? 1 : 0) + (task.held == nil ? 0 : 1)
        if active > 0 {
            switch task.settings.overlap {
            case .skip:
                recordSkip(task, scheduledAt: scheduledAt)
                return nil
            case .queue:
                if task.runAfterCurrent != nil {
                    recordSkip(task, scheduledAt: scheduledAt)
                } else {
                    task.runAfterCurrent = scheduledAt
                    logger.info("task \(name): a run is in progress; this one (\(reason)) waits for it (overlap = \"queue\")")
                }
                return nil
            case .replace:
                task.runAfterCurrent = scheduledAt
                for run in runner.runs(named: name) { runner.expire(runID: run.request.runID, reason: .replaced) }
                return nil
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
        let request = JobRequest(name: name, settings: task.settings.job, scheduledAt: scheduledAt, attempt: attempt)
        if attempt == 1 { persist { try $0.recordScheduled(task: name, scheduledAt: scheduledAt) } }
        let unmet = attempt == 1 ? dependenciesUnmet(task, scheduledAt: scheduledAt) : []
        if !unmet.isEmpty {
            task.held = (request, unmet)
            logger.info("task \(name) run \(request.runID) waits for \(unmet.sorted().joined(separator: ", ")) to succeed (after = \(task.settings.after))")
            return request.runID
        }
        return submit(request, task: task)
    }

    private func submit(_ request: JobRequest, task: ScheduledTask) -> String? {
        let submitted = runner.submit(request) { [weak self] record in
            self?.finished(record, task: task)
        }
        return submitted ? request.runID : nil
    }

    /// The dependencies a run due at `scheduledAt` must wait for: those running, queued,
    /// retrying or due in the same instant (the same cycle), and those whose latest run
    /// did not succeed. A dependency idle since a successful run is met.
    private func dependenciesUnmet(_ task: ScheduledTask, scheduledAt: WallTime) -> Set<String> {
        var unmet: Set<String> = []
        for name in task.settings.after {
            guard let dependency = tasks[name] else { continue }
            let busy = !runner.runs(named: name).isEmpty || runner.isPending(named: name) || dependency.held != nil || dependency.retryPending
            let dueNow = dependency.nextFire.map { $0.wall <= scheduledAt.adding(nanoseconds: 1_000_000_000) } ?? false
            if busy || dueNow || dependency.lastOutcome != .ok {
                unmet.insert(name)
            }
        }
        return unmet
    }

    /// A dependency finished: release the runs waiting for it, or cancel them when it
    /// failed for good.
    private func dependencyFinished(_ name: String, outcome: RunOutcome, willRetry: Bool) {
        for task in tasks.values {
            guard var held = task.held, held.waitingFor.contains(name) else { continue }
            if outcome == .ok {
                held.waitingFor.remove(name)
                task.held = held.waitingFor.isEmpty ? nil : held
                if held.waitingFor.isEmpty {
                    logger.info("task \(task.settings.name) run \(held.request.runID): every task in after succeeded; starting")
                    _ = submit(held.request, task: task)
                }
            } else if !willRetry && outcome != .skippedOverlap {
                task.held = nil
                finished(JobRunner.cancelledRecord(held.request, detail: "dependency \(name) did not succeed (\(outcome.rawValue))"), task: task)
            }
        }
    }

    /// Logged once per streak, not per tick: a task that always overlaps would
    /// otherwise fill the journal.
    private func recordSkip(_ task: ScheduledTask, scheduledAt: WallTime) {
        persist { try $0.recordScheduled(task: task.settings.name, scheduledAt: scheduledAt) }
        task.skipStreak += 1
        task.totals[.skippedOverlap, default: 0] += 1
        guard task.skipStreak == 1 else { return }
        logger.notice("task \(task.settings.name): skipped the run scheduled at \(scheduledAt.iso8601) because the previous one is still running (overlap = \"\(task.settings.overlap.rawValue)\"); further skips are counted, not logged",
                      metadata: [JournalFields.messageIDKey: .string(MessageID.runSkipped), "task": .string(task.settings.name),
                                 "outcome": .string(RunOutcome.skippedOverlap.rawValue), "scheduled_at": .string(scheduledAt.iso8601)])
    }

    private func finished(_ record: RunRecord, task: ScheduledTask) {
        task.history.append(record)
        if task.history.count > Self.historyLength { task.history.removeFirst(task.history.count - Self.historyLength) }
        task.totals[record.outcome, default: 0] += 1
        task.lastOutcome = record.outcome
        log(record)
        persist { try $0.recordRun(StoredRun(record)) }

        let settings = task.settings
        var willRetry = false
        if let retry = settings.retry, record.attempt < retry.attempts,
           record.outcome == .failed || (record.outcome == .expired && record.expiry == .budget && settings.retryExpired) {
            willRetry = true
            task.retryPending = true
            let delay = retry.delay(afterAttempt: record.attempt)
            logger.notice("task \(settings.name): attempt \(record.attempt) of \(retry.attempts) \(record.outcome.rawValue); retrying in \(delay.compactDescription)")
            queue.queue.asyncAfter(deadline: .now() + .nanoseconds(Int(delay.nanosecondsClamped))) { [weak self] in
                task.retryPending = false
                guard let self, self.tasks[settings.name] === task else { return }
                self.fire(task, scheduledAt: record.scheduledAt ?? .now(), attempt: record.attempt + 1, reason: "retry")
            }
        }
        dependencyFinished(settings.name, outcome: record.outcome, willRetry: willRetry)
        if let waiting = task.runAfterCurrent, runner.runs(named: settings.name).isEmpty {
            task.runAfterCurrent = nil
            fire(task, scheduledAt: waiting, attempt: 1, reason: "queued")
        }
    }


    private func log(_ record: RunRecord) {
        record.log(to: logger, kind: .task)
    }

    // MARK: Persistence

    private func openStore(directory: String) {
        do {
            try makeDirectories(directory)
            store = try TaskStore(directory: directory)
            storeProblem = nil
        } catch {
            storeProblem = "\(error)"
            logger.error("task state will not be kept across restarts (no catch-up of missed runs): \(error)")
        }
    }

    /// A failed write is logged once per distinct error, not once per run.
    private func persist(_ write: (TaskStore) throws -> Void) {
        guard let store else { return }
        do {
            try write(store)
        } catch {
            let message = "\(error)"
            if message != lastPersistenceWarning {
                logger.warning("unable to save task state: \(message)")
                lastPersistenceWarning = message
            }
        }
    }

    private func restoreHistory(_ task: ScheduledTask) {
        guard let store, let runs = try? store.history(task: task.settings.name, limit: Self.historyLength) else { return }
        task.history = runs.reversed().map { run in
            var exit: ProcessExit?
            if let code = run.exitCode { exit = .exited(code) } else if let signal = run.signal { exit = .signaled(signal, coreDumped: false) }
            return RunRecord(name: run.task, runID: run.runID, attempt: run.attempt, outcome: RunOutcome(rawValue: run.outcome) ?? .failed,
                             scheduledAt: run.scheduledAt, startedAt: run.startedAt, finishedAt: run.finishedAt,
                             duration: .nanoseconds(run.durationNanoseconds), exit: exit, expiry: run.expiry.flatMap(ExpiryReason.init(rawValue:)),
                             lateness: nil, detail: nil)
        }
        task.lastOutcome = task.history.last?.outcome
    }

    /// `persistent = true`: a run that fell due while the daemon was not running is run
    /// once now, if it is not older than catch_up_window; older ones are recorded missed.
    private func catchUp(_ task: ScheduledTask) {
        let settings = task.settings
        guard let store, let state = try? store.state(task: settings.name), let last = state.lastScheduledAt else { return }
        let now = WallTime.now()
        var due: WallTime?
        switch settings.schedule {
        case .every(let interval):
            let next = last.adding(nanoseconds: interval.nanosecondsClamped)
            if next < now { due = next }
        case .cron(let expression, _):
            if let zone = task.zone, let next = expression.nextFire(after: last.secondsSinceEpoch, in: zone), next < now.secondsSinceEpoch {
                due = WallTime(secondsSinceEpoch: next, nanoseconds: 0)
            }
        case .manual:
            return
        }
        guard let due else { return }
        let age = Duration.seconds(now.secondsSinceEpoch - due.secondsSinceEpoch) + .nanoseconds(Int64(now.nanoseconds) - Int64(due.nanoseconds))
        if age <= settings.catchUpWindow {
            logger.notice("task \(settings.name): the run due at \(due.iso8601) was missed while watchkeeper was not running; running it now (\(age.compactDescription) late, catch_up_window \(settings.catchUpWindow.compactDescription))")
            fire(task, scheduledAt: due, attempt: 1, reason: "catch-up")
        } else {
            let record = RunRecord(name: settings.name, runID: JobRequest.makeRunID(), attempt: 1, outcome: .missed, scheduledAt: due,
                                   startedAt: nil, finishedAt: now, duration: .zero, exit: nil, expiry: nil, lateness: nil,
                                   detail: "due \(age.compactDescription) ago, beyond catch_up_window \(settings.catchUpWindow.compactDescription)")
            persist { try $0.recordScheduled(task: settings.name, scheduledAt: due) }
            finished(record, task: task)
        }
    }

    // MARK: Dump

    private func describeNext(_ task: ScheduledTask) -> String {
        guard let next = task.nextFire else { return task.settings.schedule == .manual ? "only when triggered" : "none" }
        let now = WallTime.now()
        let delta = Duration.seconds(next.wall.secondsSinceEpoch - now.secondsSinceEpoch)
            + .nanoseconds(Int64(next.wall.nanoseconds) - Int64(now.nanoseconds))
        return "\(next.wall.iso8601) (in \(delta > .zero ? delta.compactDescription : "0s"))"
    }

    public func describeForDump() -> DumpValue {
        let now = DispatchTime.now().uptimeNanoseconds
        let entries: [DumpValue] = order.compactMap { tasks[$0] }.map { task in
            let settings = task.settings
            let schedule: String
            switch settings.schedule {
            case .every(let interval): schedule = "every \(interval.compactDescription)"
            case .cron(let expression, let zone): schedule = "cron \(expression.description) (\(zone ?? "local time"))"
            case .manual: schedule = "manual"
            }
            return .object([
                .init("name", .string(settings.name)),
                .init("schedule", .string(schedule)),
                .init("next_run", .string(describeNext(task))),
                .init("overlap", .string(settings.overlap.rawValue)),
                .init("budget", .string(settings.job.budget.compactDescription)),
                .init("running", .array(runner.runs(named: settings.name).map { $0.describe(now: now) })),
                .init("waiting_for_current_run", .bool(task.runAfterCurrent != nil)),
                .init("after", .array(settings.after.map { .string($0) })),
                .init("held_for", .array((task.held?.waitingFor.sorted() ?? []).map { .string($0) })),
                .init("skipped_in_a_row", .int(Int64(task.skipStreak))),
                .init("totals", .object(RunOutcome.allCases.compactMap { outcome in
                    task.totals[outcome].map { .init(outcome.rawValue, .int(Int64($0))) }
                })),
                .init("last_runs", .array(task.history.reversed().prefix(5).map(\.dumpValue))),
            ])
        }
        return .object([
            .init("runner", runner.describe(now: now)),
            .init("state_file", store.map { .string($0.path) } ?? .null),
            .init("state_problem", storeProblem.map { .string($0) } ?? .null),
            .init("tasks", .array(entries)),
        ])
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
